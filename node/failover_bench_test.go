package node_test

import (
	"slices"
	"testing"
	"time"
)

// BenchmarkPatentKillReattach kills gm154 of the patent tree at a random
// moment (one run per iteration, each with its own seed) and measures, in
// virtual time on the simulated network (1 ms latency, default heartbeat
// 1s × 3 misses), how long until gm160 and gm162 are both up under gm152.
// gm160 and gm162 see their channels to gm154 reset, ask gm152 (gm154's
// superior) one interval later whether it reaches gm154, and move when it
// does not (relations/probe.go); before indirect probes they waited for
// the 3.5s heartbeat timeout. It reports the p50, p99 and max over the
// iterations:
//
//	go test -run '^$' -bench PatentKillReattach -benchtime 500x ./node/
func BenchmarkPatentKillReattach(b *testing.B) {
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		n := patentNet(b, uint64(1000+i))
		for _, e := range patent {
			n.Start(pid(e[0]))
		}
		if !n.RunUntil(func() bool { return formed(n) }, time.Minute) {
			b.Fatal("tree not formed")
		}
		// A random phase against the heartbeats.
		n.RunFor(2*time.Second + time.Duration(n.Rand().Int64N(int64(time.Second))))
		n.Kill(pid("gm154"))
		start := n.Now()
		healed := func() bool {
			for _, o := range []string{"gm160", "gm162"} {
				if relState(n, o, "gm152") != "superior:up" || relState(n, "gm152", o) != "inferior:up" {
					return false
				}
			}
			return true
		}
		if !n.RunUntil(healed, time.Minute) {
			b.Fatalf("seed %d: not healed within a minute:\n%s", 1000+i, dump(n))
		}
		took = append(took, n.Now().Sub(start))
	}
	slices.Sort(took)
	pct := func(p float64) float64 { return took[int(p*float64(len(took)-1))].Seconds() }
	b.ReportMetric(pct(0.50), "p50_s")
	b.ReportMetric(pct(0.99), "p99_s")
	b.ReportMetric(took[len(took)-1].Seconds(), "max_s")
	b.ReportMetric(0, "ns/op")
}
