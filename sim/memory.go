package sim

import (
	"fmt"

	"github.com/gridmgr/gridmgr/internal/text"
)

// The memory model: what a run holds live, from the scenario, before it
// starts. It is fitted to measurements, not derived: the largest live
// heap of the run (a collection every virtual second, Options.TraceHeap)
// of the common scenario (`gridmgr sim --managers N`: build, a whole-grid
// query, kill 1 %, heal, 10 s at rest) at several sizes, measured by
//
//	GRIDMGR_SIM_MEASURE=1000,3000,10000,30000,100000,scenarios/load-10k.toml \
//	  go test -run TestMemoryModel -v -timeout 1h ./sim/
//
// on the development machine (2 cores, 24 GiB, Go 1.26, linux/amd64),
// at commit "sim: estimate the memory a run needs", and again (but
// load-10k) once the job module joined the Core (its config keys and the
// module, ~850 B a manager; its queue is made only where a runtime keeps
// one, which no simulated manager does), and again (1,000 to 100,000) on
// 2026-11-27 after the calendar queue (node/memnet/calendar.go):
//
//	managers   peak live heap   per manager   model
//	   1,000          9.1 MB        9,145 B   −4.1 %
//	  10,000         68.4 MB        6,836 B   −0.0 %
//	  30,000        202.0 MB        6,735 B   −0.6 %
//	 100,000        664.3 MB        6,643 B   +0.0 %
//
// A line through them gives a fixed part (the runtime, the expression
// cache, the queue) and a part per manager (its Core: relations,
// ledger, modules, queues; its memnet node and config). Streams of
// requests add a part per request: what load-10k holds beyond its
// managers, 681.8 MB over 180,000 requests (queries that visit about 50
// managers each, each of which remembers the query's id for a while;
// reservations with 30 s leases; the figures' samples). A query that
// visits more managers holds more.
const (
	memFixed      = 2_150_000 // bytes
	memPerManager = 6_620     // bytes
	memPerRequest = 3_800     // bytes
)

// The collector needs room beside the live heap to allocate into: with
// a quarter of it (GOGC=25) it collects four times as often as Go's
// default (GOGC=100, as much room as live heap) and a run is slower but
// goes on; with less it collects without pause. memOverhead is what the
// process holds besides its heap (code, stacks, the runtime's own).
const (
	memRoomMin  = 1.25
	memRoomGood = 2
	memOverhead = 100 << 20
)

// MemoryEstimate is what a scenario is expected to need.
type MemoryEstimate struct {
	Managers, Requests int
	// Live is the largest live heap expected.
	Live uint64
	// Need is the least memory the run needs: the live heap, a quarter of
	// it for the collector to allocate into, and the runtime. Good is
	// what lets the collector run as seldom as Go's default.
	Need, Good uint64
}

// EstimateMemory estimates what running sc needs (see the model above).
// The estimate is within 10% of the measured live heap for the common
// scenario from 1,000 managers up (TestMemoryModel); scenarios with
// streams of queries that visit many managers each hold more per request
// than the model's.
func EstimateMemory(sc *Scenario) MemoryEstimate {
	e := MemoryEstimate{Managers: sc.Grid.Managers}
	for _, a := range sc.Actions {
		if a.Do != "query" && a.Do != "reserve" {
			continue
		}
		if a.Rate > 0 {
			e.Requests += int(a.Rate * a.For.D().Seconds())
		} else {
			e.Requests += max(a.Count, 1)
		}
	}
	e.Live = memFixed + memPerManager*uint64(e.Managers) + memPerRequest*uint64(e.Requests)
	e.Need = uint64(float64(e.Live)*memRoomMin) + memOverhead
	e.Good = uint64(float64(e.Live)*memRoomGood) + memOverhead
	return e
}

// EstimateSweep estimates what running sc once per value of param needs
// (a sweep, see Vary): the largest of its runs, and sc's own unless param
// is "managers" (then sc's own size is not run). Values Vary refuses are
// left out. With no param it is EstimateMemory(sc).
func EstimateSweep(sc *Scenario, param string, values []float64) MemoryEstimate {
	est := EstimateMemory(sc)
	if param == "managers" {
		est = MemoryEstimate{}
	}
	for _, v := range values {
		if vsc, _ := Vary(sc, param, v); vsc != nil {
			if e := EstimateMemory(vsc); e.Need > est.Need {
				est = e
			}
		}
	}
	return est
}

// String says what the estimate is made of.
func (e MemoryEstimate) String() string {
	s := fmt.Sprintf("a live heap of about %s: %s per manager", text.Bytes(e.Live), text.Bytes(memPerManager))
	if req := uint64(e.Requests) * memPerRequest; req > e.Live/100 {
		s += fmt.Sprintf(" and %s per request (%d requests)", text.Bytes(memPerRequest), e.Requests)
	}
	return s + ", and a quarter more for the collector (sim/memory.go)"
}
