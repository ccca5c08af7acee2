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
// one, which no simulated manager does):
//
//	managers   peak live heap   per manager   model
//	   1,000         15.6 MB       15,634 B   −6.3 %
//	   3,000         41.7 MB       13,888 B   −1.7 %
//	  10,000        133.3 MB       13,332 B   −0.2 %
//	  30,000        396.4 MB       13,215 B   −0.1 %
//	 100,000      1,316.4 MB       13,164 B    0.0 %
//	load-10k        806.3 MB       80,628 B   (180,000 requests, before)
//
// and again at the commit "sim: a manager's config is kept once" (its
// Core reads memnet's copy in place; its channels are a slice, not two
// maps), 2026-11-26:
//
//	managers   peak live heap   per manager   model
//	   1,000         14.0 MB       14,007 B   −2.2 %
//	   3,000         38.1 MB       12,701 B   +0.0 %
//	  10,000        123.4 MB       12,336 B   +0.1 %
//	  30,000        365.7 MB       12,191 B   +0.5 %
//	 100,000      1,221.0 MB       12,210 B   +0.0 %
//
// and again at the commit "relations: a saved snapshot of the superiors
// shares its lists of addresses with the set" (a superior keeps only the
// subtree totals of its inferiors' samples; the chain pushed down is kept
// as a hash; Relation, the reservations module and the Applier fit
// smaller size classes), 2026-11-26:
//
//	managers   peak live heap   per manager   model
//	   1,000         12.5 MB       12,480 B   −0.6 %
//	   3,000         33.4 MB       11,118 B   −0.2 %
//	  10,000        107.3 MB       10,731 B   +0.2 %
//	  30,000        317.6 MB       10,587 B   +0.6 %
//	 100,000      1,060.2 MB       10,602 B   +0.1 %
//
// and again at the commit "node: the three sets of request ids seen lately
// are kept inline and small" (an answered query lets its walk go; the
// reservations module keeps no copy of the host's values; the window's
// hooks are chunks that the settle lets go; the Core's module list is
// made at each call; the seen sets are inline), 2026-11-26:
//
//	managers   peak live heap   per manager   model
//	   1,000         11.1 MB       11,128 B   −4.6 %
//	   3,000         28.3 MB        9,442 B   −0.9 %
//	  10,000         89.1 MB        8,912 B    0.0 %
//	  30,000        263.4 MB        8,782 B    0.0 %
//	 100,000        874.1 MB        8,741 B    0.0 %
//
// and again at the commit "relations: a relation keeps its times as
// 8-byte offsets" (a saved snapshot shares the chains of ancestors,
// memnet's Node shares its host values, a relation's times are
// offsets), 2026-11-27:
//
//	managers   peak live heap   per manager   model
//	   1,000         10.3 MB       10,269 B   −3.6 %
//	   3,000         25.6 MB        8,519 B   −0.6 %
//	  10,000         79.7 MB        7,966 B    0.0 %
//	  30,000        234.6 MB        7,819 B    0.0 %
//	 100,000        777.2 MB        7,772 B    0.0 %
//
// and again at the commit "node: managers of a simulated grid share one
// config" (a manager keeps only its name, host name, superiors and
// attributes; memnet's Node held a whole config, 864 B), 2026-11-27:
//
//	managers   peak live heap   per manager   model
//	   1,000          9.3 MB        9,340 B   −7.2 %
//	   3,000         23.0 MB        7,660 B   −2.0 %
//	  10,000         71.3 MB        7,126 B   −0.4 %
//	  30,000        209.4 MB        6,981 B   −0.0 %
//	 100,000        694.1 MB        6,941 B    0.0 %
//
// and again at the commit "relations: a set of relations is a sorted
// slice, not a map", 2026-11-27:
//
//	managers   peak live heap   per manager   model
//	   1,000          9.0 MB        8,994 B   −7.6 %
//	   3,000         21.9 MB        7,297 B   −2.1 %
//	  10,000         67.6 MB        6,760 B   −0.4 %
//	  30,000        198.5 MB        6,616 B   +0.0 %
//	 100,000        657.5 MB        6,575 B   +0.0 %
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
	memFixed      = 1_750_000 // bytes
	memPerManager = 6_560     // bytes
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
