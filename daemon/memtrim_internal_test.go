package daemon

import (
	"testing"
	"time"
)

// However many managers a process runs, it trims at most once per
// trimGap.
func TestTrimOncePerGap(t *testing.T) {
	trimmed.Lock()
	trimmed.at = time.Time{}
	trimmed.Unlock()
	if n, done, err := trimProcess(false); !done || n == 0 || err != nil {
		t.Fatalf("first trim: %d bytes, done %v, %v", n, done, err)
	}
	if n, done, err := trimProcess(true); done || n != 0 || err != nil {
		t.Fatalf("a second trim at once: %d bytes, done %v, %v", n, done, err)
	}
	trimmed.Lock()
	trimmed.at = time.Now().Add(-trimGap)
	trimmed.Unlock()
	if _, done, err := trimProcess(false); !done || err != nil {
		t.Fatalf("a trim after trimGap: done %v, %v", done, err)
	}
}
