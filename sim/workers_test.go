package sim

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestWorkersSameRun: a run on several workers (memnet's parallel
// windows) is the same run as on one — the same figures, events and
// timeline — over the actions the workers run (build, queries, streams,
// kills, restarts, churn, admin, rewiring), a partition (which runs on
// one) included.
func TestWorkersSameRun(t *testing.T) {
	everything := func() *Scenario {
		sc := parseFile(t, "testdata/everything.toml")
		sc.Network.Jitter, sc.Network.Loss = 0, 0 // jitter runs on one worker
		return sc
	}
	quick := func() *Scenario {
		sc := Quick(QuickOptions{Managers: 5000, Fanout: 16, Shape: "balanced", Seed: 3, Kill: 2, Rest: 2 * time.Second})
		return sc
	}
	for name, mk := range map[string]func() *Scenario{"everything": everything, "quick-5000": quick} {
		t.Run(name, func(t *testing.T) {
			var first string
			for _, w := range []int{1, 2, 3} {
				res, err := Run(mk(), Options{Workers: w})
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Violations) > 0 {
					t.Fatalf("invariants broken: %v", res.Violations)
				}
				got := fmt.Sprintf("steps %d, virtual %v\n%v\n%s", res.Steps, res.Virtual, slices.Clone(res.Timeline), csvOf(t, res))
				if w == 1 {
					first = got
					continue
				}
				if got != first {
					t.Fatalf("%d workers ran another run than one:\n%s\n--- one:\n%s", w, got, first)
				}
			}
		})
	}
}
