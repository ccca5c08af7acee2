package memnet

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// The event queue hands events out in (at, seq) order, pushes and pops
// interleaved at random, many at the same time; and it keeps no event
// it handed out (their closures hold managers' messages).
func TestEventsInTimeThenSeqOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 300 {
		var q events
		var want []event // what is in q, kept sorted
		seq := uint64(0)
		var last event
		for step := range 2000 {
			if len(q) == 0 || rng.IntN(3) > 0 {
				seq++
				// Never before the last popped: a queue only moves forward.
				e := event{at: last.at + rng.Int64N(int64(1+trial%50)), seq: seq, fn: func(*ctx) {}}
				q.push(e)
				i, _ := slices.BinarySearchFunc(want, e, func(a, b event) int {
					if c := cmp.Compare(a.at, b.at); c != 0 {
						return c
					}
					return cmp.Compare(a.seq, b.seq)
				})
				want = slices.Insert(want, i, e)
				continue
			}
			got := q.pop()
			if got.at != want[0].at || got.seq != want[0].seq {
				t.Fatalf("trial %d step %d: popped (at %d, seq %d), want (at %d, seq %d)", trial, step, got.at, got.seq, want[0].at, want[0].seq)
			}
			want = want[1:]
			last = got
			if len(q) != len(want) {
				t.Fatalf("trial %d step %d: %d events left, want %d", trial, step, len(q), len(want))
			}
			if tail := q[len(q):cap(q)]; len(tail) > 0 && (tail[0].fn != nil || tail[0].seq != 0) {
				t.Fatalf("trial %d step %d: the popped slot still holds (at %d, seq %d)", trial, step, tail[0].at, tail[0].seq)
			}
		}
	}
}
