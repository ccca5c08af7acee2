package memnet

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestCalendarAgainstHeap pushes and pops the same events through the
// calendar and a plain heap and wants the same order: times in the
// bucket being run and before it (a caller scheduling after a RunFor
// that peeked ahead), ties, bursts into one bucket, events past the
// ring's horizon and far past it, and a queue run empty and refilled.
func TestCalendarAgainstHeap(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		var cal calendar
		var ref events
		var seq uint64
		now := int64(0) // the time of the last event popped
		push := func(at int64) {
			seq++
			e := event{at: at, seq: seq}
			cal.push(e)
			ref.push(e)
		}
		for step := 0; step < 60_000; step++ {
			switch k := rng.IntN(100); {
			case k < 45 || ref.len() == 0:
				var d int64
				switch rng.IntN(8) {
				case 0:
					d = 0 // a tie with now
				case 1:
					d = rng.Int64N(int64(time.Millisecond)) // the current bucket
				case 2:
					d = rng.Int64N(int64(10 * time.Second)) // past the ring
				case 3:
					d = int64(time.Hour) + rng.Int64N(int64(time.Hour))
				case 4:
					// Before now's bucket's start: a push while the
					// calendar had moved ahead to peek.
					d = -rng.Int64N(now%(1<<bucketShift) + 1)
				default:
					d = rng.Int64N(int64(200 * time.Millisecond))
				}
				n := 1
				if rng.IntN(200) == 0 {
					n = 5000 // a burst
				}
				for range n {
					push(max(now+d, 0))
				}
			case k < 50:
				// Peek, as runTo does before deciding not to run it.
				if f := cal.front(); f == nil || !same(*f, ref[0]) {
					t.Fatalf("seed %d step %d: front %+v, want %+v", seed, step, f, ref[0])
				}
			default:
				got, want := cal.pop(), ref.pop()
				if !same(got, want) {
					t.Fatalf("seed %d step %d: popped %+v, want %+v", seed, step, got, want)
				}
				if got.at > now {
					now = got.at
				}
			}
			if cal.Len() != ref.len() {
				t.Fatalf("seed %d step %d: %d events, want %d", seed, step, cal.Len(), ref.len())
			}
		}
		for ref.len() > 0 {
			if got, want := cal.pop(), ref.pop(); !same(got, want) {
				t.Fatalf("seed %d at the end: popped %+v, want %+v", seed, got, want)
			}
		}
		if cal.front() != nil || cal.Len() != 0 {
			t.Fatalf("seed %d: %d events left", seed, cal.Len())
		}
	}
}

func (q events) len() int { return len(q) }

// same: seq is unique, so (at, seq) names an event.
func same(a, b event) bool { return a.at == b.at && a.seq == b.seq }
