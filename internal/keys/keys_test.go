package keys

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestSortedAsSlicesSorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 200 {
		m := map[string]int{}
		for range n % 37 {
			m[string(rune('a'+rng.IntN(26)))+string(rune('a'+rng.IntN(26)))] = n
		}
		got, want := Sorted(m), slices.Sorted(maps.Keys(m))
		if !slices.Equal(got, want) {
			t.Fatalf("map of %d: got %q, want %q", len(m), got, want)
		}
		if len(m) == 0 && got != nil {
			t.Fatalf("empty map: got %#v, want nil", got)
		}
	}
	u := map[uint64]bool{3: true, 1: true, 2: false}
	if got := Sorted(u); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("uint64 keys: got %v", got)
	}
}

func TestSortedOfEmptyAllocatesNothing(t *testing.T) {
	var m map[string]int
	e := map[string]int{}
	if n := testing.AllocsPerRun(100, func() { Sorted(m); Sorted(e) }); n != 0 {
		t.Fatalf("Sorted of an empty map allocated %.0f times, want 0", n)
	}
	one := map[string]int{"x": 1}
	if n := testing.AllocsPerRun(100, func() { Sorted(one) }); n != 1 {
		t.Fatalf("Sorted of a map of one allocated %.0f times, want 1 (the slice)", n)
	}
}
