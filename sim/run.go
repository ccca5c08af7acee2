package sim

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// rtoMin is Linux's minimum TCP retransmission timeout.
const rtoMin = 200 * time.Millisecond

// Options are how a run is carried out; none of them changes its figures.
type Options struct {
	// Progress, if set, receives a progress line every ProgressEvery of
	// wall time (default 5s): virtual time, events, managers up, memory,
	// the action running. It needs Wall.
	Progress      io.Writer
	ProgressEvery time.Duration
	// Check is how often (virtual time) the hierarchy is read while
	// waiting for it to heal; the reconvergence times have this
	// resolution. Default 50ms.
	Check time.Duration
	// Wall, if set, is the wall clock (for the progress line and
	// Result.Wall only).
	Wall func() time.Time
	// MeasureHeap collects the garbage at the end of the run, with every
	// manager still in memory, and reports the live heap in
	// Result.LiveHeap (a second of wall time at a million managers).
	MeasureHeap bool
	// TraceHeap collects the garbage once per second of virtual time so
	// that Result.PeakLive is the largest live heap of the run, not only of
	// the collections the runtime happened to make. It is slow (a second
	// of wall time per virtual second at a million managers): it is for
	// measuring the memory model (TestMemoryModel), not for runs.
	TraceHeap bool
	// MaxLive, if set, stops the run with an error (ErrMemory) when the
	// live heap after a collection exceeds it: past it the collector would
	// run without pause and then the machine swap or kill the process,
	// the way an estimate that was wrong shows itself. 0: no limit.
	MaxLive uint64
	// HugePages asks the kernel to back the run's heap with transparent
	// huge pages where it gives them only on request (its "madvise"
	// mode; hugepages_linux.go): fewer TLB misses among a million
	// managers. Linux only; it changes no figure.
	HugePages bool
	// Workers is how many goroutines run the managers (memnet's parallel
	// windows; the run is the same whatever it is). 0: GOMAXPROCS. A
	// scenario with link jitter or loss runs on one (the jitter is drawn
	// from one random source in the order messages are sent).
	Workers int
}

// While it runs, Run bounds the memory the Go runtime may hold (its
// soft limit, debug.SetMemoryLimit) to what the run needs: its live heap
// and half as much again for the collector to allocate into, from the
// memory model (EstimateMemory) and, as the run goes, from the live heap
// measured, whichever is more (never above the limit in force before, and
// not at all if GOMEMLIMIT is set). Below it, the collector's GOGC stays
// what the caller chose (`gridmgr sim` sets 400): a run holds its
// managers live (1.2 to 1.4 GB at 100,000) and allocates a few GB of
// short-lived garbage besides, and with GOGC=400 alone the heap grew to
// 4 to 5 times the live one, in fresh memory the kernel faulted in and the
// runtime cleared. A lower GOGC bounds it too but collects all through
// the build, while the heap grows from nothing: with the limit the
// collector waits until the heap reaches it (measured at 100,000
// managers: GOGC=40 cost 40 s more CPU time than GOGC=400 alone).
//
// The room is at least heapRoomMin: with half of a 100,000-manager run's
// live heap (780 MB) alone, the collector ran often enough to cost that
// run a tenth more time (26–29 s against 31–32 s, three alternated runs),
// for 60 MB less. It is at most heapRoomMax, which only runs of more than
// about 700,000 to 800,000 managers reach (a live heap of 5 GiB): the live heap a collection reports counts
// what was allocated while it marked, which at a million managers, where
// marking takes seconds, is up to a sixth more than what stays live (7.2
// GiB reported at the whole-grid query, 6.2 GiB at the end); half of that
// again took the run to 10.4 GiB; with 2.5 GiB it peaked at 9.3 GiB, in
// the same CPU time (571 s, one run each).
const (
	heapRoom     = 1.5
	heapRoomMin  = 512 << 20
	heapRoomMax  = 2560 << 20
	heapOverhead = 64 << 20
)

// heapLimit is the memory a live heap of live bytes needs: itself, the
// collector's room and the runtime's own.
func heapLimit(live uint64) uint64 {
	return live + min(max(uint64(float64(live)*(heapRoom-1)), heapRoomMin), heapRoomMax) + heapOverhead
}

// bound lowers the runtime's memory limit to what a live heap of live
// bytes needs, or raises it back towards ceiling.
func (r *runner) bound(live uint64) {
	if r.ceiling == 0 {
		return
	}
	want := min(heapLimit(live), r.ceiling)
	if want > r.limit {
		r.limit = want
		debug.SetMemoryLimit(int64(want))
	}
}

// ErrMemory is the error of a run stopped by Options.MaxLive.
var ErrMemory = errors.New("out of memory")

// Result is what a run measured.
type Result struct {
	Scenario *Scenario
	Figures  []Figure
	Timeline []Sample
	// Steps is the number of events the network ran; Virtual the virtual
	// time simulated. Wall is the wall time taken (not part of the
	// figures: it depends on the machine).
	Steps   uint64
	Virtual time.Duration
	Wall    time.Duration
	// LiveHeap is the Go heap in use at the end, with every manager in
	// memory (Options.MeasureHeap); 0 if not measured.
	LiveHeap uint64
	// HugePagesResident is the process's memory in huge pages at the end
	// (AnonHugePages), with Options.HugePages; 0 otherwise.
	HugePagesResident uint64
	// PeakLive is the largest live heap (the heap marked live by a
	// collection) seen during the run: at each collection the runtime
	// made that was read (once per virtual second and per progress line),
	// or at every virtual second with Options.TraceHeap.
	PeakLive uint64
	// Notes say what went wrong that the figures only count: the first
	// error each action's requests met, what kept the tree from healing;
	// and what a model means where it is not the expectation (the bound
	// of a rejoin time).
	Notes []string
	// Violations are broken invariants (a cycle, a double booking): a
	// run with any is a failed run.
	Violations []string
}

// Sample is the grid once per second of virtual time.
type Sample struct {
	At time.Duration
	// Up is how many managers run; Cut how many of them are cut off from
	// the rest by a partition (they run, but the other side cannot reach
	// them).
	Up, Cut  int
	Messages [numKinds]uint64 // delivered during the second before At, by kind
}

// msgKind classifies mesh messages for the figures.
type msgKind int

const (
	kindHeartbeat msgKind = iota
	kindQuery
	kindAdmin
	kindHandshake
	kindOther
	numKinds
)

var kindNames = [numKinds]string{"heartbeat", "query", "admin", "handshake", "other"}

func classify(env *wire.Envelope) msgKind {
	switch env.Body.(type) {
	case *wire.Envelope_Heartbeat:
		return kindHeartbeat
	case *wire.Envelope_QueryRequest, *wire.Envelope_QueryReply:
		return kindQuery
	case *wire.Envelope_AdminRequest, *wire.Envelope_AdminReply:
		return kindAdmin
	case *wire.Envelope_Hello, *wire.Envelope_Welcome, *wire.Envelope_Refuse, *wire.Envelope_Goodbye,
		*wire.Envelope_Invite, *wire.Envelope_InviteReply:
		return kindHandshake
	}
	return kindOther
}

// runner is the state of one run.
type runner struct {
	sc    *Scenario
	opt   Options
	net   *memnet.Net
	huge  *hugePages     // the heap marked for huge pages (Options.HugePages); nil: none
	nodes []*memnet.Node // by index
	g     *grid
	rng   *rand.Rand // the scenario's choices (victims, entries, arrivals)
	lrng  *rand.Rand // link jitter and loss
	t0    time.Time

	dead []bool
	comp []uint8 // partition component of each manager (0: the main one)
	// exact: the hierarchy should be the configured one with dead or cut
	// off superiors replaced by their nearest live ancestors. A restart,
	// churn or rewiring makes other shapes correct too; then only
	// "settled" is checked.
	exact bool
	up    int

	// Counters of mesh messages delivered (bytes only at rest: Net.Sized).
	msgs, bytes [numKinds]uint64
	recv        []uint32 // per manager, since the start
	secMsgs     [numKinds]uint64
	// Query messages per query id, read when the query's answer arrives.
	qmsgs map[uint64]int32

	clients  map[clientKey]func(env *wire.Envelope) bool
	reqSeq   uint64
	streams  int // streams (rate for a while, churn) still running
	falseRep int // superiors declared failed while up and reachable
	failedAt int

	why string // what kept the hierarchy from healing, at the last check
	// Relation events seen, and changes made to the world (kills, cuts,
	// restarts); the last reading of the hierarchy was at checkedAt, with
	// these counts.
	eventSeq, world, checkedSeq, checkedWorld uint64
	checkedAt                                 time.Time
	recent                                    []recentEvent
	notes                                     []string
	cycles, overbooked                        int // hierarchy readings with a cycle, ledger readings over capacity
	figs                                      []Figure
	timeline                                  []Sample
	violations                                []string

	wallStart, lastProgress time.Time
	action                  string
	building                int  // managers created (then N + managers started) while building
	built                   bool // every manager started: the timeline runs
	peakLive                uint64
	hier                    *hier     // the last reading of the hierarchy, for the models
	cutAt                   time.Time // when the partition in force began
	stop                    error     // set when the run must stop (Options.MaxLive)
	limit, ceiling          uint64    // the memory limit set, and the one in force before (0: none set)
}

// recentEvent is a relation event of manager m, kept to explain a tree
// that does not heal.
type recentEvent struct {
	m int
	e node.Event
}

// eventsOf tells manager m's last relation events, oldest first.
func (r *runner) eventsOf(m int) string {
	var out []string
	for _, re := range r.recent {
		if re.m == m {
			out = append(out, fmt.Sprintf("%v %s: %s", re.e.At.Sub(r.t0).Round(time.Millisecond), re.e.Name, re.e.What))
		}
	}
	if len(out) > 5 {
		out = out[len(out)-5:]
	}
	if len(out) == 0 {
		return ""
	}
	return "; its last events: " + strings.Join(out, " | ")
}

type clientKey struct {
	node int
	sid  uint64
}

// Run carries out a scenario and returns its figures. The same scenario
// (seed included) gives the same figures, byte for byte.
func Run(sc *Scenario, opt Options) (*Result, error) {
	sc.Defaults()
	if opt.Check == 0 {
		opt.Check = 50 * time.Millisecond
	}
	if opt.ProgressEvery == 0 {
		opt.ProgressEvery = 5 * time.Second
	}
	r := &runner{sc: sc, opt: opt, rng: rand.New(rand.NewPCG(sc.Seed, 1)), lrng: rand.New(rand.NewPCG(sc.Seed, 2)),
		qmsgs: map[uint64]int32{}, recent: make([]recentEvent, 0, 4096), clients: map[clientKey]func(*wire.Envelope) bool{}, exact: true}
	if opt.Wall != nil {
		r.wallStart = opt.Wall()
		r.lastProgress = r.wallStart
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		r.ceiling = uint64(debug.SetMemoryLimit(-1))
		defer debug.SetMemoryLimit(int64(r.ceiling))
		r.bound(EstimateMemory(sc).Live)
	}
	if opt.HugePages {
		// The heap the run will need, and its room (bound), within the
		// limit in force.
		want := heapLimit(EstimateMemory(sc).Live) - heapOverhead
		if limit := debug.SetMemoryLimit(-1); limit > 0 {
			_, held := readHeap()
			want = min(want, uint64(limit)-min(uint64(limit), held+heapOverhead))
		}
		r.huge = reserveHugePages(want)
	}
	if opt.Progress != nil {
		fmt.Fprintf(opt.Progress, "sim: creating and starting %d managers…\n", sc.Grid.Managers)
	}
	if err := r.build(); err != nil {
		return nil, err
	}
	if r.stop != nil {
		return nil, r.stop
	}
	if opt.Progress != nil && opt.Wall != nil {
		fmt.Fprintf(opt.Progress, "sim: %d managers started in %s of wall time; memory %s\n", sc.Grid.Managers,
			opt.Wall().Sub(r.wallStart).Round(100*time.Millisecond), r.memLine())
		r.lastProgress = opt.Wall()
	}
	for i := range sc.Actions {
		a := &sc.Actions[i]
		if at := r.t0.Add(a.At.D()); at.After(r.net.Now()) {
			r.runTo(at)
		}
		r.action = fmt.Sprintf("%d/%d %s", i+1, len(sc.Actions), a.Do)
		if err := r.do(i, a); err != nil {
			return nil, fmt.Errorf("action %d (%s): %w", i+1, a.Do, err)
		}
		if r.stop != nil {
			return nil, fmt.Errorf("action %d (%s): %w", i+1, a.Do, r.stop)
		}
	}
	// Let streams still running finish, and every request be answered
	// or time out.
	for (r.streams > 0 || len(r.clients) > 0) && r.stop == nil {
		r.step(r.opt.Check)
	}
	if r.stop != nil {
		return nil, r.stop
	}
	r.checkLedgers()
	zero := 0.0
	r.add(r.fig(0, nil, "cycles seen (invariant)", "", []float64{float64(r.cycles)}, &zero),
		r.fig(0, nil, "double bookings seen (invariant)", "", []float64{float64(r.overbooked)}, &zero),
		r.fig(0, nil, "superiors declared failed", "", []float64{float64(r.failedAt)}, nil),
		r.fig(0, nil, "false failure detections (superior up and reachable)", "", []float64{float64(r.falseRep)}, nil))
	r.sampleHeap(false)
	res := &Result{Scenario: sc, Figures: r.figs, Timeline: r.timeline, Steps: r.net.Steps,
		Virtual: r.net.Now().Sub(r.t0), Violations: r.violations, Notes: r.notes}
	// Streams report when they end: put every action's figures in
	// timeline order, the whole run's last.
	order := func(f Figure) int {
		if f.Action == 0 {
			return math.MaxInt
		}
		return f.Action
	}
	slices.SortStableFunc(res.Figures, func(a, b Figure) int { return cmp.Compare(order(a), order(b)) })
	if opt.Wall != nil {
		res.Wall = opt.Wall().Sub(r.wallStart)
	}
	if opt.MeasureHeap {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		res.LiveHeap = ms.HeapAlloc
		r.peakLive = max(r.peakLive, ms.HeapAlloc)
		runtime.KeepAlive(r)
	}
	res.PeakLive = r.peakLive
	if opt.HugePages {
		res.HugePagesResident = hugePagesResident()
	}
	return res, nil
}

func (r *runner) build() error {
	sc := r.sc
	r.g = buildGrid(sc, r.rng)
	r.net = memnet.New(sc.Seed)
	r.net.Latency = sc.Network.Client.D()
	r.net.Exprs = query.NewCache(1024)
	r.t0 = r.net.Now()
	if w := r.opt.Workers; sc.Network.Jitter == 0 && sc.Network.Loss == 0 {
		if w <= 0 {
			w = runtime.GOMAXPROCS(0)
		}
		r.net.Workers = w
		r.net.Lookahead = lookahead(&sc.Network)
	}
	n := sc.Grid.Managers
	r.dead = make([]bool, n)
	r.comp = make([]uint8, n)
	r.recv = make([]uint32, n)
	nw := &sc.Network
	r.net.Link = func(from, to *memnet.Node) time.Duration {
		base := r.g.latency(nw, int(from.Index), int(to.Index))
		d := base
		if nw.Jitter > 0 {
			d = time.Duration(float64(d) * (1 + nw.Jitter*(2*r.lrng.Float64()-1)))
		}
		// The mesh runs over TCP: a lost packet is sent again after the
		// retransmission timeout (at least 200ms on Linux, plus two round
		// trips of the link here), it is not lost to the manager.
		if nw.Loss > 0 && r.lrng.Float64() < nw.Loss {
			d += rtoMin + 4*base
		}
		return max(d, time.Microsecond)
	}
	r.net.Trace = func(_ time.Time, _ string, to *memnet.Node, env *wire.Envelope) {
		k := classify(env)
		r.msgs[k]++
		r.secMsgs[k]++
		r.recv[to.Index]++
		if q := env.GetQueryRequest(); q != nil {
			r.qmsgs[q.QueryId]++
		}
	}
	// Monitoring events are not kept (a large grid's would not fit in
	// memory); utilization samples still reach their superiors (memnet
	// carries them).
	r.net.DiscardPublished = true
	r.net.OnEvent = func(nd *memnet.Node, e node.Event) {
		if len(r.recent) == cap(r.recent) {
			r.recent = r.recent[:copy(r.recent, r.recent[len(r.recent)/2:])]
		}
		r.recent = append(r.recent, recentEvent{int(nd.Index), e})
		r.eventSeq++
		if !strings.HasPrefix(e.What, "superior failed") {
			return
		}
		r.failedAt++
		if j := peerIndex(r.net, e.Peer); j >= 0 && !r.dead[j] && r.comp[j] == r.comp[int(nd.Index)] {
			r.falseRep++
		}
	}
	r.net.OnReply = func(nd *memnet.Node, sid uint64, env *wire.Envelope) {
		k := clientKey{int(nd.Index), sid}
		if h, ok := r.clients[k]; ok && h(env) {
			delete(r.clients, k)
		}
	}
	err := r.g.configs(sc, r.rng, func(i int, base *config.Config, own node.Own, hv *node.HostValues) {
		nd := r.net.AddShared(memnet.PeerID(own.Name), base, own)
		nd.Host = hv
		r.nodes = append(r.nodes, nd)
		if i%4096 == 0 && r.stop == nil {
			r.building = i
			r.progress()
		}
	})
	if err != nil {
		return err
	}
	peers := make([]string, len(r.nodes))
	for i, nd := range r.nodes {
		peers[i] = nd.Peer
	}
	r.net.StartAll(peers, func(started int) {
		if r.stop == nil {
			r.building = n + started
			r.progress()
		}
	})
	r.built = true
	r.up = n
	return nil
}

// lookahead is the least delay of a message, dial or reply in the
// network model: no manager can reach another (or a client) faster.
func lookahead(nw *Network) time.Duration {
	d := min(nw.Client.D(), nw.SameRack.D(), nw.SameRegion.D(), nw.CrossRegion.D())
	for _, b := range nw.Between {
		d = min(d, b.D())
	}
	return max(d, time.Microsecond) // the least Link gives
}

// cut sets the partition components (nil: none): while some manager is
// cut off, every message and dial between components is dropped. Without
// a partition the network asks nothing of the sim per message.
func (r *runner) cut(inCut func(m int) bool) {
	any := false
	for m := range r.comp {
		r.comp[m] = 0
		if inCut != nil && inCut(m) {
			r.comp[m] = 1
			any = true
		}
	}
	r.world++
	r.net.Drop = nil
	if any {
		r.net.Drop = func(from, to string, _ *wire.Envelope) bool {
			a, b := peerIndex(r.net, from), peerIndex(r.net, to)
			return a >= 0 && b >= 0 && r.comp[a] != r.comp[b]
		}
	}
}

// peer is the peer id of manager i.
func (r *runner) peer(i int) string { return r.nodes[i].Peer }

// nodeAt is manager i.
func (r *runner) nodeAt(i int) *memnet.Node { return r.nodes[i] }

// step runs d of virtual time, keeping the timeline and the progress line.
func (r *runner) step(d time.Duration) {
	end := r.net.Now().Add(d)
	for r.net.Now().Before(end) && r.stop == nil {
		next := r.t0.Add((r.net.Now().Sub(r.t0)/time.Second + 1) * time.Second)
		if next.After(end) {
			r.net.RunFor(end.Sub(r.net.Now()))
		} else {
			r.net.RunFor(next.Sub(r.net.Now()))
			r.timeline = append(r.timeline, Sample{At: next.Sub(r.t0), Up: r.up, Cut: r.cutUp(), Messages: r.secMsgs})
			r.secMsgs = [numKinds]uint64{}
			r.checkLedgers() // once a virtual second, so streams are checked as they run
			r.sampleHeap(r.opt.TraceHeap)
		}
		r.progress()
	}
}

// cutUp is how many running managers are cut off from the main part.
func (r *runner) cutUp() int {
	if r.net.Drop == nil {
		return 0
	}
	n := 0
	for m, c := range r.comp {
		if c != 0 && !r.dead[m] {
			n++
		}
	}
	return n
}

// heapMetrics are read by sampleHeap and the progress line.
var heapMetrics = []metrics.Sample{
	{Name: "/gc/heap/live:bytes"},
	{Name: "/memory/classes/total:bytes"},
	{Name: "/memory/classes/heap/released:bytes"},
}

// readHeap returns the live heap as of the last collection and the
// memory the Go runtime holds from the system (mapped and not released:
// about the resident set).
func readHeap() (live, held uint64) {
	s := slices.Clone(heapMetrics)
	metrics.Read(s)
	get := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	return get(0), get(1) - min(get(1), get(2))
}

// sampleHeap records the live heap (after a collection, with gc) in the
// peak, and stops the run if it is past Options.MaxLive.
func (r *runner) sampleHeap(gc bool) {
	if gc {
		runtime.GC()
	}
	live, _ := readHeap()
	r.peakLive = max(r.peakLive, live)
	r.bound(live)
	if r.opt.MaxLive > 0 && live > r.opt.MaxLive && r.stop == nil {
		r.stop = fmt.Errorf("%w: stopped at %v of virtual time: the live heap is %s, past the %s this run may hold "+
			"(the collector would run without pause, then the machine swap or kill the process)",
			ErrMemory, r.net.Now().Sub(r.t0).Round(time.Millisecond), text.Bytes(live), text.Bytes(r.opt.MaxLive))
	}
}

// memLine is the memory now, for the progress line.
func (r *runner) memLine() string {
	live, held := readHeap()
	return fmt.Sprintf("%s (live heap %s at the last collection)", text.Bytes(held), text.Bytes(live))
}

func (r *runner) runTo(t time.Time) {
	for r.net.Now().Before(t) {
		r.step(min(r.opt.Check, t.Sub(r.net.Now())))
	}
}

// progress prints the progress line if it is time, and reads the heap
// (MaxLive is checked there too, so a run that outgrows its memory stops
// within a few seconds even between virtual seconds).
func (r *runner) progress() {
	r.huge.grow()
	if r.ceiling != 0 { // a run the model underestimates: room as it grows
		live, _ := readHeap()
		r.bound(live)
	}
	if r.opt.Wall == nil || r.opt.Progress == nil && r.opt.MaxLive == 0 {
		return
	}
	now := r.opt.Wall()
	if now.Sub(r.lastProgress) < r.opt.ProgressEvery {
		return
	}
	r.lastProgress = now
	r.sampleHeap(false)
	if r.opt.Progress == nil {
		return
	}
	wall := now.Sub(r.wallStart)
	if !r.built {
		n := r.sc.Grid.Managers
		what := fmt.Sprintf("created %d/%d managers", r.building, n)
		if r.building >= n {
			what = fmt.Sprintf("started %d/%d managers", r.building-n, n)
		}
		fmt.Fprintf(r.opt.Progress, "sim: wall %s  %s  memory %s\n", wall.Round(time.Second), what, r.memLine())
		return
	}
	fmt.Fprintf(r.opt.Progress, "sim: wall %s  virtual %s  %d events (%.0fk/s)  up %d/%d  memory %s  action %s\n",
		wall.Round(time.Second), r.net.Now().Sub(r.t0).Round(time.Millisecond), r.net.Steps,
		float64(r.net.Steps)/wall.Seconds()/1000, r.up, r.sc.Grid.Managers, r.memLine(), r.action)
}

// waitUntil runs until cond holds (checked every Options.Check) or
// within passes; it returns the time taken and whether cond held.
func (r *runner) waitUntil(cond func() bool, within time.Duration) (time.Duration, bool) {
	start := r.net.Now()
	for {
		if cond() {
			return r.net.Now().Sub(start), true
		}
		if r.net.Now().Sub(start) >= within || r.stop != nil {
			return within, false
		}
		r.step(r.opt.Check)
	}
}

// healed reports whether the hierarchy is what it should be now, and
// records a violation for any cycle it sees.
func (r *runner) healed() bool {
	// Reading a million managers costs a second of wall time; the
	// hierarchy changes only with a relation event (every change of
	// state, failover and handshake reports one), so without one since
	// the last reading the answer stands — re-read each second anyway,
	// and always after the world changed (kill, cut, heal, restart).
	now := r.net.Now()
	if r.checkedSeq == r.eventSeq && r.checkedWorld == r.world && now.Sub(r.checkedAt) < time.Second && !r.checkedAt.IsZero() {
		return r.why == ""
	}
	r.checkedSeq, r.checkedWorld, r.checkedAt = r.eventSeq, r.world, now
	why := r.unhealed()
	r.why = why
	return why == ""
}

// unhealed says what keeps the hierarchy from being what it should be
// now ("" when nothing does), and records a violation for any cycle.
func (r *runner) unhealed() string {
	n := r.g.n
	sups := make([][]int32, n)
	why, who, i := "", -1, 0
	bad := func(format string, args ...any) {
		if why == "" {
			why = fmt.Sprintf(format, args...)
			who = i
		}
	}
	for i = 0; i < n; i++ {
		if r.dead[i] {
			continue
		}
		nd := r.nodeAt(i)
		for _, rel := range nd.Core.Relations().Superiors() {
			if rel.Trial != "" {
				bad("%s is trying %s in place of a failed superior", name(i), rel.DisplayName())
			}
			if !rel.State.Live() {
				continue
			}
			j := peerIndex(r.net, rel.Peer)
			if j < 0 || r.dead[j] || r.comp[j] != r.comp[i] {
				bad("%s still takes %s, dead or cut off, as a live superior", name(i), rel.DisplayName())
				continue
			}
			other := r.nodeAt(j)
			if ir := other.Core.Relations().Get(nd.Peer); ir == nil || ir.Role != relations.Inferior || !ir.State.Live() {
				bad("%s has %s as a live superior, but not the other way round", name(i), name(j))
			}
			sups[i] = append(sups[i], int32(j))
		}
		if len(sups[i]) > 0 && len(nd.Core.Failovers()) > 0 {
			bad("%s is still looking for a replacement of %s", name(i), nd.Core.Failovers()[0])
		}
		// A superior has noticed that an inferior died or was cut off.
		for _, rel := range nd.Core.Relations().Inferiors() {
			if j := peerIndex(r.net, rel.Peer); rel.State.Live() && (j < 0 || r.dead[j] || r.comp[j] != r.comp[i]) {
				bad("%s still takes %s, dead or cut off, as a live inferior", name(i), rel.DisplayName())
			}
		}
		if why != "" {
			continue
		}
		same := func(m int32) bool { return !r.dead[m] && r.comp[m] == r.comp[i] }
		if !r.exact {
			// Settled: a root exactly when no live ancestor is reachable.
			if reach := len(r.g.nearestLive(int32(i), same)) > 0; reach != (len(sups[i]) > 0) {
				if reach {
					bad("%s has no superior, but a live ancestor is reachable", name(i))
				} else {
					bad("%s has a superior, but no live ancestor is reachable", name(i))
				}
			}
			continue
		}
		// Exact: each configured superior, or its nearest live
		// ancestors in its place, and nothing else.
		allowed := map[int32]bool{}
		for _, p := range r.g.parents[i] {
			if same(p) {
				allowed[p] = true
				if !containsI(sups[i], p) {
					bad("%s is not under its superior %s", name(i), name(int(p)))
				}
				continue
			}
			cands := r.g.nearestLive(p, same)
			if len(r.g.parents[i]) > 1 {
				// With several superiors, the replacement comes from the
				// ancestors the failed one reported, which in a DAG need
				// not be the nearest: any live ancestor of it will do.
				cands = r.g.liveAncestors(p, same)
			}
			hit := len(cands) == 0
			for _, c := range cands {
				allowed[c] = true
				hit = hit || containsI(sups[i], c)
			}
			if !hit {
				bad("%s is not under %s, the nearest live ancestor in place of %s", name(i), name(int(cands[0])), name(int(p)))
			}
		}
		for _, s := range sups[i] {
			if !allowed[s] {
				bad("%s is under %s, which is neither a configured superior nor the nearest live ancestor in place of one", name(i), name(int(s)))
			}
		}
	}
	if c := findCycle(sups); c != "" {
		r.cycles++
		r.violations = append(r.violations, fmt.Sprintf("at %v: cycle %s", r.net.Now().Sub(r.t0), c))
		return "cycle " + c
	}
	if who >= 0 {
		why += r.eventsOf(who)
	}
	return why
}

func containsI(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// findCycle returns a cycle of the superior graph, drawn, or "".
func findCycle(sups [][]int32) string {
	state := make([]uint8, len(sups)) // 0 new, 1 on the path, 2 done
	var path []int32
	var found string
	var walk func(m int32)
	walk = func(m int32) {
		if found != "" {
			return
		}
		switch state[m] {
		case 2:
			return
		case 1:
			var names []string
			on := false
			for _, p := range path {
				on = on || p == m
				if on {
					names = append(names, name(int(p)))
				}
			}
			found = strings.Join(append(names, name(int(m))), " → ")
			return
		}
		state[m] = 1
		path = append(path, m)
		for _, s := range sups[m] {
			walk(s)
		}
		path = path[:len(path)-1]
		state[m] = 2
	}
	for i := range sups {
		walk(int32(i))
	}
	return found
}

// checkLedgers records a violation for any manager whose reservations
// exceed what it has: a double booking.
func (r *runner) checkLedgers() {
	for i := 0; i < r.g.n; i++ {
		if r.dead[i] {
			continue
		}
		l := r.nodeAt(i).Core.LedgerToRead()
		if l.Live() == 0 { // nothing booked: nothing over capacity
			continue
		}
		for _, u := range l.Usage() {
			if u.Used > u.Capacity {
				r.overbooked++
				r.violations = append(r.violations, fmt.Sprintf("at %v: %s has %d %s reserved of %d",
					r.net.Now().Sub(r.t0), name(i), u.Used, u.Kind, u.Capacity))
			}
		}
	}
}

// pick chooses the entry manager for a request.
func (r *runner) pick(from string) int {
	switch from {
	case "root":
		return 0
	case "leaf":
		leaves := r.g.leaves()
		for range 100 {
			if l := int(leaves[r.rng.IntN(len(leaves))]); !r.dead[l] {
				return l
			}
		}
	case "random":
	default:
		return nameIndex(from, r.g.n)
	}
	for range 1000 {
		if i := r.rng.IntN(r.g.n); !r.dead[i] {
			return i
		}
	}
	return 0
}

// request sends a client request to manager i; h sees each reply and
// says when the exchange is over. If it is not over within timeout, h
// sees nil, once, and the exchange is over.
func (r *runner) request(i int, from string, env *wire.Envelope, timeout time.Duration, h func(*wire.Envelope) bool) {
	r.reqSeq++
	env.Id = r.reqSeq
	sid := r.net.RequestFrom(r.peer(i), from, env)
	k := clientKey{i, sid}
	r.clients[k] = h
	r.net.After(timeout, func() {
		if h, ok := r.clients[k]; ok {
			delete(r.clients, k)
			h(nil)
		}
	})
}
