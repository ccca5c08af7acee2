package sim

import (
	"runtime"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/node/memnet"
)

// BenchmarkSimAtRest runs a built grid of 10,000 managers at rest and
// reports the simulator's events per second of wall time, beside a
// baseline measured in the same run: the same number of empty events
// through the same event queue. The ratio is what the production Core,
// its Applier and the message encoding cost per event over the queue
// alone (the machine's noise cancels out of it). It also reports the
// live heap per manager with the grid in memory, and the speed-up of
// running the managers on GOMAXPROCS workers (the default) over one, the
// same run (x-one-worker: one worker's wall time over the default's).
func BenchmarkSimAtRest(b *testing.B) {
	sc := Quick(QuickOptions{Managers: 10000, Fanout: 16, Shape: "balanced", Seed: 1})
	sc.Actions = sc.Actions[:1] // settle
	var events, heap uint64
	var simWall, oneWall time.Duration
	for range b.N {
		res, err := Run(withRest(sc, 5*time.Second), Options{Wall: time.Now, MeasureHeap: true})
		if err != nil {
			b.Fatal(err)
		}
		events += res.Steps
		simWall += res.Wall
		heap = res.LiveHeap
		one, err := Run(withRest(sc, 5*time.Second), Options{Wall: time.Now, Workers: 1})
		if err != nil {
			b.Fatal(err)
		}
		if one.Steps != res.Steps {
			b.Fatalf("one worker ran %d events, %d workers %d", one.Steps, runtime.GOMAXPROCS(0), res.Steps)
		}
		oneWall += one.Wall
	}
	// Baseline: as many no-op events through memnet's queue, scheduled a
	// few at a time as the simulation schedules them.
	net := memnet.New(1)
	start := time.Now()
	var n uint64
	var tick func()
	tick = func() {
		n++
		if n < events {
			net.After(time.Microsecond, tick)
		}
	}
	for range 10000 { // as many in flight as managers
		net.After(time.Microsecond, tick)
	}
	net.RunUntil(func() bool { return n >= events }, 24*time.Hour)
	base := time.Since(start)
	simRate := float64(events) / simWall.Seconds()
	baseRate := float64(n) / base.Seconds()
	b.ReportMetric(simRate, "events/s")
	b.ReportMetric(baseRate/simRate, "x-queue-alone")
	b.ReportMetric(float64(heap)/10000, "live-B/manager")
	b.ReportMetric(oneWall.Seconds()/simWall.Seconds(), "x-one-worker")
}

func withRest(sc *Scenario, d time.Duration) *Scenario {
	c := *sc
	c.Actions = append(append([]Action(nil), sc.Actions...), Action{Do: "rest", For: Duration(d)})
	return &c
}
