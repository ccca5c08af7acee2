// Package memnet is a simulated network of grid managers with a virtual
// clock, for deterministic tests and benchmarks of the unchanged Core:
// every event runs in time order (ties in insertion order), so a run is a
// function of the seed and the calls made. The events wait in a calendar
// queue (calendar.go): buckets of about a millisecond, each sorted when
// the clock reaches it.
//
// Each manager's Ready is carried out by a node.Applier, exactly as under
// the real Driver; the Net is its Transport (messages after Latency, links
// that Drop, dials that time out into a partition), its Storage (a Disk
// that survives Kill, may take Delay per write and may fail on demand) and
// its plugin runner. A Core is ticked only when its NextDeadline is due, at
// the first time of its tick grid (TickEvery, random phase) at or after
// it; TickAlways ticks it at every grid time instead, and CheckIdle then
// panics when a tick before NextDeadline asks for anything.
//
// Latency is one delay for every message; Link, if set, gives a delay per
// message and pair of managers (a wide-area model, with jitter), and each
// channel still delivers in the order sent, as a stream does. Drop loses
// messages (a partition). OnEvent and OnReply take relation events and
// client replies as they come instead of keeping them on the Node, and
// Exprs shares one compiled-expression cache among all Cores: what lets
// package sim run a million managers in one process.
//
// Workers (with Lookahead, the least delay between managers) runs RunFor
// on several goroutines, a conservative parallel event loop: the events
// due within Lookahead of the earliest are run per manager, the workers
// taking the managers' tasks as they come (a worker that starts late
// leaves its share to the others), and what they schedule or report (Trace,
// OnEvent, OnPublish) is replayed afterwards in the order of the one
// goroutine, so the run is the same with any number of workers
// (parallel.go). An event that may touch several managers or the caller's
// state (a dial, a client reply, the caller's After) runs alone, as does
// everything under RunUntil, Drop or TickAlways.
//
// The caller Adds managers (validated configs, any peer ids; AddShared for
// many that share one config, each with its own node.Own), Starts them
// (StartAll: many, their Cores made on another goroutine),
// runs the clock (RunFor, RunUntil), asks (Request, Ask), schedules its own
// actions (After), and may Kill, Stop and Start them again.
package memnet
