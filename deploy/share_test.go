package deploy

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Shares: the first user of a key gets a uid from the allocator and is
// told it is first; later ones share that uid; the last to go is told
// so, and its uid is free again. The counts survive a reopen (a
// restart), and a classes.json of a version without uids is taken over.
func TestShares(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "shares.json")
	s, err := OpenShares(path)
	if err != nil {
		t.Fatal(err)
	}
	next := uint32(100)
	alloc := func(used map[uint32]bool) (uint32, error) {
		for used[next] {
			next++
		}
		return next, nil
	}
	uid, first, err := s.Acquire(ReservationKey("r1"), "r1.a", alloc)
	if err != nil || !first || uid != 100 {
		t.Fatalf("first: %d %v %v", uid, first, err)
	}
	if uid, first, _ := s.Acquire(ReservationKey("r1"), "r1.b", alloc); first || uid != 100 {
		t.Fatalf("second of r1: %d %v", uid, first)
	}
	if uid, first, _ := s.Acquire(ClassKey("web"), "r1.a", alloc); !first || uid != 101 {
		t.Fatalf("class: %d %v", uid, first)
	}
	if uid, first, _ := s.Acquire(ReservationKey("r1"), "r1.b", alloc); first || uid != 100 {
		t.Fatal("acquiring twice counted twice")
	}
	s, err = OpenShares(path) // a restart
	if err != nil || len(s.Users(ReservationKey("r1"))) != 2 || s.UID(ClassKey("web")) != 101 {
		t.Fatalf("after reopen: %v %d, %v", s.Users(ReservationKey("r1")), s.UID(ClassKey("web")), err)
	}
	if last, err := s.Release(ReservationKey("r1"), "r1.a"); err != nil || last {
		t.Fatalf("release r1.a: last %v, %v", last, err)
	}
	if last, _ := s.Release(ReservationKey("r1"), "r1.b"); !last {
		t.Fatal("the last of r1 was not last")
	}
	if s.UIDs()[100] {
		t.Fatal("uid 100 still given out after its last user went")
	}
	next = 100
	if uid, _, _ := s.Acquire(ReservationKey("r2"), "r2.a", alloc); uid != 100 {
		t.Fatalf("a freed uid was not given again: %d", uid)
	}
	if last, _ := s.Release(ReservationKey("r1"), "r1.b"); last {
		t.Fatal("releasing again said last again")
	}
	failing := func(map[uint32]bool) (uint32, error) { return 0, errors.New("none left") }
	if _, _, err := s.Acquire(ReservationKey("r3"), "r3.a", failing); err == nil || len(s.Users(ReservationKey("r3"))) != 0 {
		t.Fatalf("an allocation that failed left a share: %v", err)
	}
	s.Release(ReservationKey("r2"), "r2.a")
	s.Release(ClassKey("web"), "r1.a")
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("nothing shared, and the file stayed")
	}

	old := t.TempDir()
	os.WriteFile(filepath.Join(old, "classes.json"), []byte(`{"web": ["i1", "i2"]}`), 0o600)
	s, err = OpenShares(filepath.Join(old, "shares.json"))
	if err != nil || len(s.Users(ClassKey("web"))) != 2 || s.UID(ClassKey("web")) != 0 {
		t.Fatalf("taking over classes.json: %v %v", s.Users(ClassKey("web")), err)
	}
	if _, err := os.Stat(filepath.Join(old, "classes.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("classes.json stayed after it was taken over")
	}
}
