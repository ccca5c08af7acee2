package transfer

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

// arrivals records what Server.Arriving was told, one Arrival per upload.
type arrivals struct {
	mu   sync.Mutex
	all  []*arrival
	size []int64
}

type arrival struct {
	mu    sync.Mutex
	bytes []byte
	ends  []string
}

func (a *arrival) Bytes(p []byte) {
	a.mu.Lock()
	a.bytes = append(a.bytes, p...)
	a.mu.Unlock()
}

func (a *arrival) End(sha string) {
	a.mu.Lock()
	a.ends = append(a.ends, sha)
	a.mu.Unlock()
}

func (r *arrivals) begin(size int64) Arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := &arrival{}
	r.all, r.size = append(r.all, a), append(r.size, size)
	return a
}

func (r *arrivals) last(t *testing.T, n int) *arrival {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.all) != n {
		t.Fatalf("%d uploads followed, want %d", len(r.all), n)
	}
	if n == 0 {
		return nil
	}
	return r.all[n-1]
}

// Server.Arriving follows an upload sent from its first byte: every byte
// in order, then the sha256 it was stored as, once, before the client is
// told; an upload refused after its bytes ends with ""; a resumed one,
// and a bundle stored already, are not followed.
func TestArriving(t *testing.T) {
	rec := &arrivals{}
	e := newEnv(t, func(s *Server) { s.Arriving = rec.begin })
	file, data, sha := randomFile(t, 3<<20+7)
	if _, err := SendResult(ctx(t), e.ch, e.sh.ID(), file, "r1", nil); err != nil {
		t.Fatal(err)
	}
	e.outcome(t)
	a := rec.last(t, 1)
	if !bytes.Equal(a.bytes, data) || len(a.ends) != 1 || a.ends[0] != sha || rec.size[0] != int64(len(data)) {
		t.Fatalf("followed %d bytes (same: %v), ends %q, size %d", len(a.bytes), bytes.Equal(a.bytes, data), a.ends, rec.size[0])
	}

	// Stored already: nothing to follow.
	if _, err := SendWith(ctx(t), e.ch, e.sh.ID(), file, "r1", SendOptions{SHA256: sha}); err != nil {
		t.Fatal(err)
	}
	e.outcome(t)
	rec.last(t, 1)

	// Refused after its bytes (the trailer names other bytes).
	_, other, _ := randomFile(t, 1<<20)
	if s := trailerUpload(t, e, testID, other, shaOf([]byte("not these"))); s.Error == nil {
		t.Fatalf("stored %v", s)
	}
	e.outcome(t)
	if a := rec.last(t, 2); !bytes.Equal(a.bytes, other) || len(a.ends) != 1 || a.ends[0] != "" {
		t.Fatalf("a refused upload ended %q", a.ends)
	}

	// Cut short, then resumed: the first attempt ends with "", the resume
	// is not followed.
	_, data2, sha2 := randomFile(t, 2<<20)
	r := openRaw(t, e)
	if acc := r.offer(t, &wire.BundleOffer{Sha256: sha2, Size: int64(len(data2)), Reservation: "r1"}); acc.Error != nil {
		t.Fatal(acc.Error)
	}
	r.write(t, data2[:len(data2)/2])
	time.Sleep(100 * time.Millisecond)
	r.st.Reset()
	e.outcome(t)
	if a := rec.last(t, 3); len(a.ends) != 1 || a.ends[0] != "" {
		t.Fatalf("a cut upload ended %q", a.ends)
	}
	r = openRaw(t, e)
	acc := r.offer(t, &wire.BundleOffer{Sha256: sha2, Size: int64(len(data2)), Reservation: "r1"})
	if acc.Error != nil || acc.Offset == 0 {
		t.Fatalf("accept %v", acc)
	}
	r.write(t, data2[acc.Offset:])
	if s := r.stored(t); s.Error != nil {
		t.Fatal(s.Error)
	}
	e.outcome(t)
	rec.last(t, 3)
}
