package reservation

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestKindsAsASortedMap puts and gets kinds at random on the ledger's
// table and on a map side by side: the same calendars, and the table in
// the order of its kinds (Usage and the error naming the kinds rely on
// it).
func TestKindsAsASortedMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	var ks kinds
	want := map[string]*calendar{}
	for step := range 5000 {
		k := fmt.Sprintf("kind-%d", rng.IntN(40))
		if rng.IntN(2) == 0 {
			c := newCalendar()
			ks.put(k, c)
			want[k] = c
		}
		if got := ks.get(k); got != want[k] {
			t.Fatalf("step %d: get(%s) = %p, the map says %p", step, k, got, want[k])
		}
		if len(ks) != len(want) {
			t.Fatalf("step %d: %d kinds, the map has %d", step, len(ks), len(want))
		}
	}
	if !slices.IsSortedFunc(ks, func(a, b kindCal) int { return strings.Compare(a.kind, b.kind) }) {
		t.Fatalf("kinds out of order: %v", ks)
	}
	if ks.get("not-a-kind") != nil {
		t.Fatal("an unknown kind has a calendar")
	}
}
