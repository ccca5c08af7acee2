package node

import (
	"math/rand/v2"
	"slices"
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

// A seen set answers as a plain model would (ids with their expiry, the
// oldest forgotten first when full) while it grows past seenSmall into a
// map and shrinks back, with bounds below and above seenSmall; and once
// empty it holds nothing.
func TestSeenSetAsAModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 5))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, max := range []int32{3, seenSmall, 20, 1000} {
		s := newSeenSet(time.Minute, max)
		type entry struct {
			id  uint64
			exp time.Time
		}
		var model []entry // oldest first
		now := t0
		grewMap := false
		for step := range 5000 {
			switch op := rng.IntN(10); {
			case op < 6: // add one of few ids, so that some repeat
				id := rng.Uint64N(40)
				s.Add(now, id)
				if !slices.ContainsFunc(model, func(e entry) bool { return e.id == id }) {
					if len(model) >= int(max) {
						model = model[1:]
					}
					model = append(model, entry{id, now.Add(time.Minute)})
				}
			case op < 9:
				now = now.Add(time.Duration(rng.IntN(20)) * time.Second)
			default:
				s.Expire(now)
				model = slices.DeleteFunc(model, func(e entry) bool { return now.After(e.exp) })
			}
			grewMap = grewMap || s.ids != nil
			if s.Len() != len(model) {
				t.Fatalf("max %d, step %d: %d ids remembered, the model %d", max, step, s.Len(), len(model))
			}
			for id := range uint64(40) {
				if want := slices.ContainsFunc(model, func(e entry) bool { return e.id == id }); s.Has(id) != want {
					t.Fatalf("max %d, step %d: Has(%d) = %v, the model says %v", max, step, id, !want, want)
				}
			}
		}
		if max > seenSmall && !grewMap {
			t.Errorf("max %d: the set never made its map", max)
		}
		s.Expire(now.Add(time.Hour))
		if s.Len() != 0 || s.ids != nil || s.q != nil {
			t.Errorf("max %d: empty, it still holds a map or a queue", max)
		}
	}
}
