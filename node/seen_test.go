package node

import (
	"testing"
	"time"
)

func TestSeenSet(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newSeenSet(time.Minute, 100)
	for i := uint64(1); i <= 50; i++ {
		s.Add(t0.Add(time.Duration(i)*time.Second), i)
	}
	if !s.Has(1) || !s.Has(50) || s.Has(51) {
		t.Fatal("membership wrong")
	}
	s.Expire(t0.Add(time.Minute + 10*time.Second + 1)) // ids 1..10 expire
	if s.Has(10) || !s.Has(11) || s.Len() != 40 {
		t.Fatalf("after expiry: has10=%v has11=%v len=%d", s.Has(10), s.Has(11), s.Len())
	}
	// Full: the oldest is forgotten first.
	for i := uint64(100); i < 200; i++ {
		s.Add(t0.Add(2*time.Minute), i)
	}
	if s.Len() != 100 || s.Has(11) || !s.Has(199) || !s.Has(100) {
		t.Fatalf("when full: len=%d has11=%v", s.Len(), s.Has(11))
	}
	s.Expire(t0.Add(time.Hour))
	if s.Len() != 0 || len(s.q)-int(s.head) != 0 {
		t.Fatalf("not empty after everything expired: %d", s.Len())
	}
}
