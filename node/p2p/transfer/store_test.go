package transfer

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStoreAddListRemove(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	file, data, want := randomFile(t, 200<<10)
	sha, err := s.Add(file)
	if err != nil || sha != want {
		t.Fatalf("Add: %s, %v; want %s", sha, err, want)
	}
	if h, _ := Hash(file); h != want {
		t.Fatalf("Hash %s, want %s", h, want)
	}
	if again, err := s.Add(file); err != nil || again != sha {
		t.Fatalf("Add again: %s, %v", again, err)
	}
	p, ok := s.Path(sha)
	if !ok {
		t.Fatal("Path: not stored")
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
		t.Fatal("stored bytes differ")
	}
	l, err := s.List()
	if err != nil || len(l) != 1 || l[0].SHA256 != sha || l[0].Size != int64(len(data)) || l[0].ModTime.IsZero() {
		t.Fatalf("List: %v, %v", l, err)
	}
	if tmps, _ := filepath.Glob(filepath.Join(s.Dir(), "partial", "*")); len(tmps) != 0 {
		t.Errorf("Add left %v", tmps)
	}
	if err := s.Remove(sha); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Path(sha); ok {
		t.Fatal("still there after Remove")
	}
	if err := s.Remove(sha); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "is not stored") {
		t.Fatalf("Remove of a missing bundle: %v", err)
	}
	if err := s.Remove("../../etc/passwd"); err == nil {
		t.Fatal("Remove took a path")
	}
	if _, ok := s.Path("../x"); ok {
		t.Fatal("Path took a path")
	}
}

func TestOpenStoreRemovesAddLeftovers(t *testing.T) {
	dir := t.TempDir()
	s, _ := OpenStore(dir)
	tmp := filepath.Join(dir, "partial", "add-123.tmp")
	part := s.partialPath(strings.Repeat("ab", 32))
	os.WriteFile(tmp, []byte("x"), 0o644)
	os.WriteFile(part, []byte("x"), 0o644)
	if _, err := OpenStore(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); err == nil {
		t.Error("Add's leftover kept")
	}
	if _, err := os.Stat(part); err != nil {
		t.Error("a partial upload was removed: it is kept for a resume")
	}
}

// The bytes of partial uploads stay within the limit: idle ones are
// evicted oldest first, uploads being written are never touched.
func TestPartialLimit(t *testing.T) {
	s, _ := OpenStore(t.TempDir())
	sha := func(c string) string { return strings.Repeat(c, 64) }
	old, newer := s.partialPath(sha("1")), s.partialPath(sha("2"))
	os.WriteFile(old, make([]byte, 400), 0o644)
	os.WriteFile(newer, make([]byte, 400), 0o644)
	past := time.Now().Add(-time.Hour)
	os.Chtimes(old, past, past)

	if err := s.begin(sha("a"), 300, limits{maxPartial: 1000}); err != nil { // 300+400+400 > 1000: evict the oldest
		t.Fatal(err)
	}
	if _, err := os.Stat(old); err == nil {
		t.Error("the oldest idle partial upload was kept")
	}
	if _, err := os.Stat(newer); err != nil {
		t.Error("evicted more than needed")
	}
	if err := s.begin(sha("a"), 10, limits{maxPartial: 1000}); !errors.Is(err, errBusy) {
		t.Fatalf("second begin of one hash: %v, want busy", err)
	}
	// 300 being written, 400 idle: 700 more does not fit even after
	// evicting the idle one.
	err := s.begin(sha("b"), 800, limits{maxPartial: 1000})
	var oe *overloadError
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), "try again later") {
		t.Fatalf("begin over the limit: %v", err)
	}
	if _, err := os.Stat(newer); err != nil {
		t.Error("evicted a partial upload for an offer refused anyway")
	}
	s.done(sha("a"))
	if err := s.begin(sha("b"), 800, limits{maxPartial: 1000}); err != nil {
		t.Fatal(err)
	}
}
