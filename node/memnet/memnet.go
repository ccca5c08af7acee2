package memnet

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	mh "github.com/multiformats/go-multihash"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// Epoch is the virtual time at which every Net starts.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// PeerID is the peer id memnet tests give the manager named name: a valid
// libp2p peer id (an identity multihash of the name), short and the same
// in every run, so that addresses built from it parse as real ones do.
func PeerID(name string) string {
	h, err := mh.Sum([]byte(name), mh.IDENTITY, -1)
	if err != nil {
		panic(fmt.Sprintf("memnet: peer id of %q: %v", name, err))
	}
	return h.B58String()
}

// Addr is the transport address of the manager named name on a Net
// (nothing resolves it: the Net routes by peer id).
func Addr(name string) string { return "/dns4/" + name + ".memnet/tcp/4001" }

// PeerAddrs is the manager named name as a superiors list names it.
func PeerAddrs(name string) peeraddr.PeerAddrs {
	return peeraddr.PeerAddrs{Peer: PeerID(name), Addrs: []string{Addr(name)}}
}

// clientBit marks the channel ids of client sessions (mesh channels count
// up from 1 below it).
const clientBit = 1 << 62

// Net is a simulated network of Cores under a virtual clock. Everything
// happens as if in the goroutine that calls Run*, in time order, ties
// broken by insertion order, so a run is a function of the seed and the
// calls made (with Workers, the managers of a window run on several
// goroutines, the same run: parallel.go); hooks are called in that
// goroutine.
// Each manager's Ready is carried out by a node.Applier, as under the real
// Driver; the Net is its Transport, Storage (Disk) and plugin runner.
type Net struct {
	main  ctx // the Net's own goroutine: its clock is the virtual time
	rng   *rand.Rand
	seq   uint64
	queue calendar
	nodes map[string]*Node
	order []*Node // nodes sorted by peer id; nil after Add
	gen   uint64
	fifo  []int64 // by channel and direction: when its last message arrives (with Link)

	// Latency is the one-way delay of every message and connection step
	// (and of every client request and reply) unless Link says otherwise.
	Latency time.Duration
	// Link, if set, is the one-way delay of a message or connection step
	// from one manager to another, asked each time (so it may jitter):
	// a wide-area model. Messages on one channel still arrive in the
	// order sent, as on a stream. Clients stay one Latency from their
	// manager.
	Link func(from, to *Node) time.Duration
	// DialTimeout is how long a dial across a dropped link (Drop says true
	// for a nil envelope) hangs before it fails, as a real dial into a
	// partition does; a dial to a manager that is down fails at once
	// (connection refused). Default 10s, as node/p2p's.
	DialTimeout time.Duration
	// TickEvery is the grid of times at which a Core may be ticked (each
	// manager's grid has a random phase). A Core is ticked at the first
	// grid time at or after its NextDeadline, and not at the others.
	TickEvery time.Duration
	// TickAlways ticks every Core at every grid time, as a runtime that
	// ignores NextDeadline would. With CheckIdle, a tick before a Core's
	// NextDeadline that asks for anything panics: NextDeadline was wrong.
	TickAlways, CheckIdle bool
	// Drop, if set, is asked about every message at send time; true drops it
	// silently (a lossy or partitioned link).
	Drop func(from, to string, env *wire.Envelope) bool
	// Trace, if set, sees every message as it is delivered, with the
	// manager it is delivered to.
	Trace func(at time.Time, from string, to *Node, env *wire.Envelope)
	// Sized, if set, sees every message as it is delivered (after Trace)
	// with its encoded size (SizeVT, the same as proto.Size), computed where the message is
	// delivered: on a worker, in a parallel window, not in the window's
	// serial part (sizing every message is costly).
	Sized func(to *Node, env *wire.Envelope, size int)
	// Log is given to each Core (nil discards).
	Log *slog.Logger
	// Plugin, if set, runs admin plugins (after one latency); nil: no
	// manager has any.
	Plugin func(nd *Node, name string, args []string, stdin []byte) (output string, exitCode int, err error)
	// OnEvent, if set, sees each relation event a Core reports, in place
	// of Node.Events (which then stays empty: a large grid's events would
	// not fit in memory).
	OnEvent func(nd *Node, e node.Event)
	// OnReply, if set, sees each client reply as it arrives, in place of
	// Node.Replies.
	OnReply func(nd *Node, session uint64, env *wire.Envelope)
	// Exprs, if set, is the compiled-expression cache every Core shares
	// (see node.Core.ShareExprs): a requirement is compiled once for the
	// whole Net instead of once per manager.
	Exprs *query.Cache
	// App, if set, is every manager's application runtime: it sees every
	// node.CallApp call (reservation ends and the start's reconcile
	// included; call.Req is a node.AppCall) and answers those with an ID,
	// after Latency, with what it returns (see node.CallApp).
	App func(nd *Node, call node.Call) (any, error)
	// OnPublish, if set, sees each monitoring event a Core produces, in
	// place of Node.Published. Either way, a utilization sample reaches
	// the superior it names (Core.Observe) one link later, as the event
	// bus carries it.
	OnPublish func(nd *Node, ev *wire.Event)
	// DiscardPublished drops the monitoring events the Cores produce:
	// neither OnPublish nor Node.Published sees them (a large grid's
	// would not fit in memory, and in a window each one was held, with
	// the closure that would hand it over, until the window's replay).
	// A utilization sample still reaches the superior it names.
	DiscardPublished bool
	// Ticks counts the Core.Tick calls made (for tests and benchmarks).
	Ticks int
	// Steps counts the events run (deliveries, ticks, dials, writes...).
	Steps uint64

	// Workers, if above 1, runs RunFor on that many goroutines (see
	// parallel.go): the events of a window of Lookahead virtual time are
	// run per manager, concurrently, and the run is the same as on one
	// goroutine. It needs Lookahead > 0, no Drop, no TickAlways, and a
	// Link that is safe to call concurrently and asks no randomness.
	Workers int
	// Lookahead is the least delay between one manager acting and
	// another (or a client, or the caller) seeing it: no message, dial,
	// reply or sample may take less (a Link that gives less panics).
	Lookahead time.Duration
	pw        windows
}

// Node is one manager in the Net.
type Node struct {
	Peer string
	Name string
	// Index is the order in which it was added (0 for the first): the
	// caller's handle for its own tables about the manager.
	Index int32
	up    bool
	Core  *node.Core
	// Cfg and Own are the manager's properties file: Own holds its own
	// fields (name, host name, superiors, attributes; Cfg's are blank),
	// Cfg the rest, which AddShared's managers share. Its Core reads both
	// in place (node.NewCoreShared): change them only while the manager is
	// down, and Cfg only with SetConfig. Config gives the whole file.
	Cfg *config.Config
	Own node.Own
	// Host is what the manager's host measures (nil: nothing, zero
	// values); given to the Core at Start and by SetHost. Managers may
	// share one: nothing here changes it (SetHost sets a new one), and a
	// Host without a time (At) is sampled at the manager's first start.
	Host *node.HostValues

	net     *Net
	cx      *ctx // where the event running on this manager runs
	a       *node.Applier
	epoch   uint32 // incarnation, bumped by Kill
	tickGen uint32 // bumped when tickAt moves; stale tick events are ignored
	links   links  // mesh channels (links.go)
	nextSid uint64
	hostAt  int64 // Host's time if it has none: the first start, in Unix ns (0: not started)
	// The tick grid's origin (the manager's start plus a random phase)
	// and when its next tick is scheduled (0: none), as offsets from
	// Epoch: a million managers hold these.
	grid, tickAt time.Duration
	// Replies holds client replies by session, in arrival order.
	Replies map[uint64][]*wire.Envelope
	// Events are the relation events the Core reported, oldest first.
	Events []node.Event
	// Published are the monitoring events the Core produced, oldest first
	// (unless Net.OnPublish takes them).
	Published []*wire.Event
	// Disk is the manager's durable storage: it survives Kill, and a
	// restarted Core restores from it.
	Disk Disk
}

// Disk is a manager's simulated disk. A write takes Delay of virtual time
// (0: done at once, before the replies that wait for it leave) and is then
// reported to the manager; while FailWrites is above zero, each write
// fails (and decrements it) instead: the reservation store is then down,
// as after an fsync error.
type Disk struct {
	Records map[string]reservation.Reservation
	NextSeq uint64
	Writes  int // writes done
	// Relations are the saved superiors, as the daemon would write them
	// to relations.json; a restarted Core restores its superiors from
	// them. (The file's format is the daemon's business, tested there.)
	Relations *relations.Saved
	// Attributes are the attributes set at runtime, restored at start.
	Attributes *node.SavedAttributes
	// Audit is the admin audit log.
	Audit []node.AuditRecord

	Delay      time.Duration
	FailWrites int
}

func (d *Disk) apply(w node.Write) node.Written {
	if d.FailWrites > 0 {
		d.FailWrites--
		return node.Written{Reservations: errors.New("memnet: simulated write failure")}
	}
	if d.Records == nil {
		d.Records = make(map[string]reservation.Reservation)
	}
	for _, ch := range w.Reservations.Changes {
		if ch.Rec == nil {
			delete(d.Records, ch.ID)
		} else {
			d.Records[ch.ID] = ch.Rec.Clone()
		}
	}
	d.NextSeq = max(d.NextSeq, w.Reservations.NextSeq)
	if w.Relations != nil {
		d.Relations = w.Relations
	}
	if w.Attributes != nil {
		d.Attributes = w.Attributes
	}
	d.Audit = append(d.Audit, w.Audit...)
	d.Writes++
	return node.Written{}
}

// Snapshot returns what the disk holds, records sorted by id.
func (d *Disk) Snapshot() reservation.Snapshot {
	snap := reservation.Snapshot{NextSeq: d.NextSeq}
	for _, r := range d.Records {
		snap.Records = append(snap.Records, r.Clone())
	}
	slices.SortFunc(snap.Records, func(a, b reservation.Reservation) int { return strings.Compare(a.ID, b.ID) })
	return snap
}

// New returns an empty network whose randomness comes from seed.
func New(seed uint64) *Net {
	n := &Net{
		rng:         rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		nodes:       make(map[string]*Node),
		Latency:     time.Millisecond,
		DialTimeout: 10 * time.Second,
		TickEvery:   100 * time.Millisecond,
	}
	n.main = ctx{n: n, now: Epoch}
	return n
}

// Now is the virtual time.
func (n *Net) Now() time.Time { return n.main.now }

// Rand is the network's random source (for tests that need more).
func (n *Net) Rand() *rand.Rand { return n.rng }

// Add creates a manager that is not started yet. cfg must have passed
// Validate; peer is its id.
func (n *Net) Add(peer string, cfg config.Config) *Node {
	// The config kept has the own fields blank (node.Split): a Core that
	// read them there would show it in the tests that run through Add.
	rest, own := node.Split(cfg)
	return n.AddShared(peer, rest, own)
}

// AddShared is Add for a manager whose config is own's fields and *cfg's
// others: many managers may share cfg (a simulated grid keeps it once),
// which must not change while any of them is in the network.
func (n *Net) AddShared(peer string, cfg *config.Config, own node.Own) *Node {
	if _, dup := n.nodes[peer]; dup {
		panic(fmt.Sprintf("memnet: peer %s added twice", peer))
	}
	nd := &Node{Peer: peer, Name: own.Name, Index: int32(len(n.nodes)), Cfg: cfg, Own: own, net: n, cx: &n.main}
	n.nodes[peer] = nd
	n.order = nil
	return nd
}

// Config is the manager's properties file, whole.
func (nd *Node) Config() config.Config { return nd.Own.Config(*nd.Cfg) }

// SetConfig replaces the manager's properties file (it must be down, and
// cfg must have passed Validate); a restart starts from it.
func (nd *Node) SetConfig(cfg config.Config) {
	if nd.up {
		panic(fmt.Sprintf("memnet: SetConfig on %s while it is up", nd.Name))
	}
	nd.Cfg, nd.Own = node.Split(cfg)
	nd.Name = cfg.Name
}

// Node returns the manager with peer id peer, or nil.
func (n *Net) Node(peer string) *Node { return n.nodes[peer] }

// Nodes returns every manager sorted by peer id. The caller must not
// change the slice.
func (n *Net) Nodes() []*Node {
	if n.order == nil {
		n.order = make([]*Node, 0, len(n.nodes))
		for _, nd := range n.nodes {
			n.order = append(n.order, nd)
		}
		slices.SortFunc(n.order, func(a, b *Node) int { return strings.Compare(a.Peer, b.Peer) })
	}
	return n.order
}

// Live is the config in force, after admin set commands (Cfg, which a
// restart starts from, is the properties file and does not change).
func (nd *Node) Live() config.Config {
	if nd.Core == nil {
		return nd.Config()
	}
	return nd.Core.Config()
}

// Up reports whether the manager is running.
func (nd *Node) Up() bool { return nd.up }

// Start starts (or restarts) a manager with a fresh Core: a restarted
// process keeps its peer id and config and loses its memory.
func (n *Net) Start(peer string) {
	nd := n.nodes[peer]
	if nd.up {
		return
	}
	nd.make(n.rng.Uint64())
	n.launch(nd, n.tickPhase())
}

// StartAll starts the managers given, in that order, as many calls of
// Start would: the same run. The Cores are made on another goroutine,
// ahead of the one that starts them (a million Cores are a million
// fresh objects to allocate and fault in, half of a start's time).
// progress, if set, is called with how many have started, every few
// thousand and at the end. Nothing else may use the Net meanwhile.
func (n *Net) StartAll(peers []string, progress func(started int)) {
	type next struct {
		nd    *Node
		seed  uint64
		phase time.Duration
	}
	todo := make([]next, 0, len(peers))
	for _, p := range peers {
		nd := n.nodes[p]
		if nd.up {
			continue // running, or given twice
		}
		nd.up = true // nothing runs until all have started
		// Start draws these two, in this order, and nothing between
		// two Starts draws from the Net's randomness.
		seed := n.rng.Uint64()
		todo = append(todo, next{nd: nd, seed: seed, phase: n.tickPhase()})
	}
	const batch = 256
	made := make(chan int, len(todo)/batch+1)
	go func() {
		for i := range todo {
			todo[i].nd.make(todo[i].seed)
			if (i+1)%batch == 0 || i+1 == len(todo) {
				made <- i + 1
			}
		}
	}()
	ready := 0
	for i := range todo {
		for i >= ready {
			ready = <-made
		}
		n.launch(todo[i].nd, todo[i].phase)
		if progress != nil && ((i+1)%4096 == 0 || i+1 == len(todo)) {
			progress(i + 1)
		}
	}
}

// tickPhase is a manager's random phase on the tick grid, so that
// managers do not act in step.
func (n *Net) tickPhase() time.Duration {
	return time.Duration(n.rng.Int64N(int64(n.TickEvery))) + 1
}

// make gives a manager that is down a fresh Core and Applier, from seed.
// It reads only the manager and what Cores share (StartAll runs it on
// another goroutine).
func (nd *Node) make(seed uint64) {
	n, peer := nd.net, nd.Peer
	// The Core reads nd.Cfg and nd.Own in place, which nothing here
	// changes.
	nd.Core = node.NewCoreShared(nd.Cfg, &nd.Own, peer, []string{Addr(nd.Name)}, rand.New(rand.NewPCG(seed, seed>>3|1)), n.Log)
	if ex := n.Exprs; ex != nil {
		nd.Core.ShareExprs(ex)
	}
	nd.a = node.NewApplier(nd.Core, transport{nd}, disk{nd}, node.Hooks{
		Event: func(e node.Event) {
			nd.cx.hook(func() {
				if n.OnEvent != nil {
					n.OnEvent(nd, e)
				} else {
					nd.Events = append(nd.Events, e)
				}
			})
		},
		Shutdown: func(reason string) { nd.cx.after(nd, 0, func(*ctx) { n.Stop(nd.Peer, reason) }) },
		Publish:  func(ev *wire.Event) { n.publish(nd, ev) },
	}, n.Log)
	nd.a.SetRunner(node.CallPlugin, plugins{nd})
	if n.App != nil {
		nd.a.SetRunner(node.CallApp, apps{nd})
	}
}

// launch starts a manager whose Core is made: it restores from its disk,
// starts, and has its ticks begin after phase.
func (n *Net) launch(nd *Node, phase time.Duration) {
	nd.up = true
	nd.epoch++
	now := n.main.now
	if err := nd.Core.Restore(now, nd.Disk.Snapshot()); err != nil {
		panic(fmt.Sprintf("memnet: %s: restore: %v", nd.Name, err))
	}
	if nd.Disk.Relations != nil {
		nd.Core.RestoreRelations(nd.Disk.Relations)
	}
	nd.Core.RestoreAttributes(nd.Disk.Attributes)
	nd.Core.Start(now)
	var hv node.HostValues
	if nd.Host != nil {
		hv = *nd.Host
	}
	if hv.At.IsZero() {
		if nd.hostAt == 0 {
			nd.hostAt = now.UnixNano()
		}
		hv.At = time.Unix(0, nd.hostAt).In(Epoch.Location())
	}
	nd.Core.SetHost(now, hv)
	nd.grid = now.Add(phase).Sub(Epoch)
	nd.tickAt = 0
	n.flush(nd)
	if n.TickAlways {
		n.main.after(nd, phase, func(*ctx) { n.tickAlways(nd, nd.epoch) })
	}
}

// Kill stops a manager like kill -9: its peers see their channels reset
// after one latency; nothing it had queued is sent, and writes not yet
// done are lost.
func (n *Net) Kill(peer string) {
	nd := n.nodes[peer]
	if !nd.up {
		return
	}
	nd.up = false
	nd.tickGen++
	for _, p := range nd.links.peers() { // sorted: the run must not depend on the order made
		n.disconnect(&n.main, p, peer, nd.links.chanTo(p), "connection reset by peer")
	}
	nd.links = nil
}

// Client is the peer id of the client that Request and Ask speak as.
const Client = "client"

// Request sends a client request to a manager and returns its session id;
// the answer appears in Node.Replies[session].
func (n *Net) Request(peer string, env *wire.Envelope) uint64 {
	return n.RequestFrom(peer, Client, env)
}

// RequestFrom is Request from the client with peer id from.
func (n *Net) RequestFrom(peer, from string, env *wire.Envelope) uint64 {
	if env.Id == 0 {
		env.Id = 1
	}
	return n.Send(peer, from, env)
}

// Send is RequestFrom without giving env an id if it has none (tests of
// what a manager does with a request it cannot answer by id).
func (n *Net) Send(peer, from string, env *wire.Envelope) uint64 {
	nd := n.nodes[peer]
	nd.nextSid++
	sid := nd.nextSid
	epoch := nd.epoch
	n.main.after(nd, n.Latency, func(c *ctx) {
		if !nd.up || nd.epoch != epoch {
			return
		}
		nd.a.Handle(c.now, node.Input{Kind: node.InputClient, Chan: clientBit | sid, Peer: from, Env: env})
		n.flush(nd)
	})
	return sid
}

// Ask sends a client request and runs the network until the first answer
// arrives or within passes; it returns nil on timeout.
func (n *Net) Ask(peer string, env *wire.Envelope, within time.Duration) *wire.Envelope {
	nd := n.nodes[peer]
	sid := n.Request(peer, env)
	n.RunUntil(func() bool { return len(nd.Replies[sid]) > 0 }, within)
	if r := nd.Replies[sid]; len(r) > 0 {
		return r[0]
	}
	return nil
}

// SetHost changes what a manager's host measures, now.
func (n *Net) SetHost(peer string, hv node.HostValues) {
	nd := n.nodes[peer]
	hv.At = n.main.now
	nd.Host = &hv
	if nd.up {
		nd.a.Handle(n.main.now, node.Input{Kind: node.InputHost, Host: &hv})
		n.flush(nd)
	}
}

// Inject delivers env to manager to as if from sent it over their channel,
// now, and returns what the Core's Step said. It is for tests of bad input.
func (n *Net) Inject(from, to string, env *wire.Envelope) error {
	dst := n.nodes[to]
	err := dst.Core.Step(n.main.now, from, env)
	n.flush(dst)
	return err
}

// Do runs fn on a manager's Core now and carries out what it asked for.
func (n *Net) Do(peer string, fn func(c *node.Core, now time.Time)) {
	nd := n.nodes[peer]
	fn(nd.Core, n.main.now)
	n.flush(nd)
}

// RunFor advances the virtual clock by d, running everything due.
func (n *Net) RunFor(d time.Duration) { n.runTo(n.main.now.Add(d), nil) }

// RunUntil runs until cond holds (checked after every event) or limit of
// virtual time passes. It reports whether cond held.
func (n *Net) RunUntil(cond func() bool, limit time.Duration) bool {
	if cond() {
		return true
	}
	return n.runTo(n.main.now.Add(limit), cond)
}

func (n *Net) runTo(end time.Time, cond func() bool) bool {
	last := int64(end.Sub(Epoch))
	par := cond == nil && n.parallel()
	if par {
		defer n.endCrew()
	}
	for f := n.queue.front(); f != nil && f.at <= last; f = n.queue.front() {
		if par && f.owner != nil {
			n.window(last)
			continue
		}
		e := n.queue.pop()
		n.main.now = Epoch.Add(time.Duration(e.at))
		n.Steps++
		e.fn(&n.main)
		if cond != nil && cond() {
			return true
		}
	}
	n.main.now = end
	return cond != nil && cond()
}

// After runs fn after d of virtual time, in the Net's one goroutine (for
// drivers that schedule their own actions: clients, failures).
func (n *Net) After(d time.Duration, fn func()) { n.main.after(nil, d, func(*ctx) { fn() }) }

// Pending is the number of events scheduled and not yet run.
func (n *Net) Pending() int { return n.queue.Len() }

// link is the one-way delay from one manager to another.
func (n *Net) link(from, to *Node) time.Duration {
	if n.Link == nil || from == nil || to == nil {
		return n.Latency
	}
	return n.Link(from, to)
}

// flush carries out a Core's Ready through its Applier, then schedules
// its next tick: the first time on its grid at or after its NextDeadline.
func (n *Net) flush(nd *Node) {
	if !nd.up {
		return
	}
	c := nd.cx
	nd.a.Flush(c.now)
	if !nd.up || n.TickAlways {
		return
	}
	n.schedule(nd, nd.Core.NextDeadline(c.now))
}

// schedule sets nd's next tick: the first time on its grid at or after
// due, unless one as early is set already (zero: nothing to do).
func (n *Net) schedule(nd *Node, due time.Time) {
	if due.IsZero() {
		return
	}
	c := nd.cx
	at := n.gridTime(nd, due)
	if nd.tickAt != 0 && !at.Before(Epoch.Add(nd.tickAt)) {
		return // an earlier tick is scheduled already
	}
	nd.tickAt = at.Sub(Epoch)
	nd.tickGen++
	gen, epoch := nd.tickGen, nd.epoch
	c.after(nd, at.Sub(c.now), func(c *ctx) { n.tick(c, nd, epoch, gen) })
}

// gridTime is the first time of nd's tick grid strictly after now and at
// or after t.
func (n *Net) gridTime(nd *Node, t time.Time) time.Time {
	grid := Epoch.Add(nd.grid)
	if t.Before(grid) {
		t = grid
	}
	g := grid.Add(t.Sub(grid) / n.TickEvery * n.TickEvery)
	for !g.After(nd.cx.now) || g.Before(t) {
		g = g.Add(n.TickEvery)
	}
	return g
}

func (n *Net) tick(c *ctx, nd *Node, epoch, gen uint32) {
	if !nd.up || nd.epoch != epoch || nd.tickGen != gen {
		return
	}
	nd.tickAt = 0
	// A tick is set for the deadline of its time; an input since may
	// have moved that deadline later (a heartbeat heard puts off the
	// verdict on its relation): a third of the ticks of a grid at rest.
	// Then nothing is due, and the Core is ticked when it is (Tick's
	// contract allows either).
	if due := nd.Core.NextDeadline(c.now); due.IsZero() || due.After(c.now) {
		n.schedule(nd, due)
		return
	}
	if c == &n.main {
		n.Ticks++
	} else {
		c.ticks++
	}
	nd.Core.Tick(c.now)
	n.flush(nd)
}

// tickAlways is the TickAlways schedule: every grid time, due or not.
func (n *Net) tickAlways(nd *Node, epoch uint32) {
	if !nd.up || nd.epoch != epoch {
		return
	}
	idle := false
	if n.CheckIdle {
		due := nd.Core.NextDeadline(n.main.now)
		idle = due.IsZero() || n.main.now.Before(due)
	}
	n.Ticks++
	nd.Core.Tick(n.main.now)
	if idle && nd.Core.HasReady() {
		panic(fmt.Sprintf("memnet: %s ticked at %v before its NextDeadline %v asked for: %+v",
			nd.Name, n.main.now.Sub(Epoch), nd.Core.NextDeadline(n.main.now).Sub(Epoch), nd.Core.Ready()))
	}
	n.flush(nd)
	n.main.after(nd, n.TickEvery, func(*ctx) { n.tickAlways(nd, epoch) })
}

// Stop stops a manager gracefully: its Core says goodbye on every
// relation (delivered), then it is down.
func (n *Net) Stop(peer, reason string) {
	nd := n.nodes[peer]
	if !nd.up {
		return
	}
	nd.Core.Stop(nd.cx.now, reason)
	n.flush(nd)
	nd.up = false
	nd.tickGen++
	nd.links = nil
}

// transport is a Node's node.Transport: messages, dials and closes go
// through the Net's event queue.
type transport struct{ nd *Node }

func (t transport) Dial(peer string, _ []string) { t.nd.net.dial(t.nd, peer) }

func (t transport) Send(ch uint64, env *wire.Envelope) {
	nd, n := t.nd, t.nd.net
	if ch&clientBit != 0 {
		sid := ch &^ clientBit
		nd.cx.after(nil, n.Latency, func(*ctx) {
			if n.OnReply != nil {
				n.OnReply(nd, sid, env)
			} else {
				if nd.Replies == nil {
					nd.Replies = make(map[uint64][]*wire.Envelope)
				}
				nd.Replies[sid] = append(nd.Replies[sid], env)
			}
		})
		return
	}
	if dst, ok := nd.links.peerOf(ch); ok {
		n.send(nd, dst, ch, env)
	}
}

func (t transport) CloseChannel(ch uint64, reason string) {
	nd := t.nd
	dst, ok := nd.links.peerOf(ch)
	if !ok || nd.links.chanTo(dst.Peer) != ch {
		return
	}
	nd.links.forget(ch)
	nd.net.disconnect(nd.cx, dst.Peer, nd.Peer, ch, "closed by peer: "+reason)
}

func (t transport) ClosePeer(string) {}

// disk is a Node's node.Storage: its Disk, after Disk.Delay.
type disk struct{ nd *Node }

func (d disk) Write(w node.Write) {
	nd, n := d.nd, d.nd.net
	if nd.Disk.Delay == 0 {
		// An instant fsync: done before the replies it holds leave.
		nd.a.Handle(nd.cx.now, node.Input{Kind: node.InputWritten, Written: nd.Disk.apply(w)})
		return
	}
	epoch := nd.epoch
	nd.cx.after(nd, nd.Disk.Delay, func(c *ctx) {
		if !nd.up || nd.epoch != epoch {
			return // killed before the write was done: lost
		}
		res := nd.Disk.apply(w)
		nd.a.Handle(c.now, node.Input{Kind: node.InputWritten, Written: res})
		n.flush(nd)
	})
}

// plugins is a Node's plugin runner: Net.Plugin, after one latency.
type plugins struct{ nd *Node }

func (p plugins) Run(call node.Call) {
	nd, n := p.nd, p.nd.net
	pc := call.Req.(node.PluginCall)
	epoch := nd.epoch
	nd.cx.after(nil, n.Latency, func(c *ctx) {
		if !nd.up || nd.epoch != epoch {
			return
		}
		out, code, err := "", 0, error(fmt.Errorf("%w: no plugins on the simulated network", node.ErrPluginNotFound))
		if n.Plugin != nil {
			out, code, err = n.Plugin(nd, pc.Name, pc.Args, pc.Stdin)
		}
		nd.a.Handle(c.now, call.Done(node.PluginResult{Output: out, ExitCode: code}, err))
		n.flush(nd)
	})
}

func (n *Net) send(from, dst *Node, ch uint64, env *wire.Envelope) {
	to := dst.Peer
	if n.Drop != nil && n.Drop(from.Peer, to, env) {
		return
	}
	c := from.cx
	d := n.link(from, dst)
	if n.Link != nil {
		// A channel is a stream: messages arrive in the order sent, so a
		// message that would overtake the one before it (jitter) waits
		// for it, as TCP holds data behind a retransmission.
		k := int(ch) * 2
		if from.Peer < to {
			k++
		}
		if k >= len(n.fifo) {
			if c != &n.main {
				panic("memnet: channel without a slot in a parallel window")
			}
			n.fifo = append(n.fifo, make([]int64, k+1-len(n.fifo)+len(n.fifo)/2)...)
		}
		at := int64(c.now.Sub(Epoch) + d)
		if at < n.fifo[k] {
			at = n.fifo[k]
		}
		n.fifo[k] = at
		d = time.Duration(at) - c.now.Sub(Epoch)
	}
	c.after(dst, d, func(c *ctx) {
		if !dst.up || dst.links.chanTo(from.Peer) != ch {
			return
		}
		if n.Trace != nil || n.Sized != nil {
			c.trace(from.Peer, dst, env)
		}
		dst.a.Handle(c.now, node.Input{Kind: node.InputMessage, Peer: from.Peer, Chan: ch, Env: env})
		n.flush(dst)
	})
}

// disconnect tells peer, after one latency, that its channel ch to other
// is gone, unless a newer channel replaced it meanwhile.
func (n *Net) disconnect(c *ctx, peer, other string, ch uint64, why string) {
	nd := n.nodes[peer]
	c.after(nd, n.link(n.nodes[other], nd), func(c *ctx) {
		if nd == nil || !nd.up || nd.links.chanTo(other) != ch {
			return
		}
		nd.links.forget(ch)
		nd.a.Handle(c.now, node.Input{Kind: node.InputDisconnected, Peer: other, Chan: ch, Err: why})
		n.flush(nd)
	})
}

// dial connects from to peer after one latency if peer is up and the link
// passes Drop (asked with a nil envelope). A channel already open between
// them is replaced, as a new libp2p stream replaces the old one: the
// Appliers close the old one when the new one is reported.
func (n *Net) dial(from *Node, peer string) {
	epoch := from.epoch
	dst := n.nodes[peer]
	// It touches both managers: it runs alone (no owner), never in a
	// parallel window.
	from.cx.after(nil, n.link(from, dst), func(c *ctx) {
		if !from.up || from.epoch != epoch {
			return
		}
		if n.Drop != nil && n.Drop(from.Peer, peer, nil) {
			c.after(nil, n.DialTimeout, func(c *ctx) {
				if from.up && from.epoch == epoch {
					from.a.Handle(c.now, node.Input{Kind: node.InputDialFailed, Peer: peer, Err: "dial timeout"})
					n.flush(from)
				}
			})
			return
		}
		if dst == nil || !dst.up {
			from.a.Handle(c.now, node.Input{Kind: node.InputDialFailed, Peer: peer, Err: "connection refused"})
			n.flush(from)
			return
		}
		n.gen++
		ch := n.gen
		if n.Link != nil && int(ch)*2+1 >= len(n.fifo) {
			// The slots of a channel are made here, where it runs alone.
			n.fifo = append(n.fifo, make([]int64, int(ch)*2+2-len(n.fifo)+len(n.fifo)/2)...)
		}
		from.links.open(dst, ch)
		dst.links.open(from, ch)
		dst.a.Handle(c.now, node.Input{Kind: node.InputConnected, Peer: from.Peer, Chan: ch})
		n.flush(dst)
		from.a.Handle(c.now, node.Input{Kind: node.InputConnected, Peer: peer, Chan: ch, Outbound: true})
		n.flush(from)
	})
}

// event is one thing to run at a virtual time (nanoseconds since Epoch);
// ties run in the order they were scheduled (seq).
type event struct {
	at  int64
	seq uint64
	fn  func(c *ctx)
	// owner is the one manager whose state fn reads and changes (nil:
	// fn may touch several, or the caller's: it runs alone).
	owner *Node
}

func (a *event) before(b *event) bool {
	return a.at < b.at || a.at == b.at && a.seq < b.seq
}

// events is a 4-ary min-heap of events held by value: no allocation per
// event beyond fn, and no interface calls (container/heap's cost showed
// at 100,000 managers). Four children to a node make the heap half as
// deep as a binary one, and they sit in two cache lines; an element
// moves into the hole left for it instead of being swapped at each
// level. Events are ordered by (at, seq) and seq is unique, so the order
// they come out in is the same whatever the heap's shape.
type events []event

const arity = 4

func (q *events) push(e event) {
	h := append(*q, event{})
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / arity
		if !e.before(&h[p]) {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = e
	*q = h
}

func (q *events) pop() event {
	h := *q
	top := h[0]
	last := len(h) - 1
	e := h[last]
	h[last] = event{}
	h = h[:last]
	if n := len(h); n > 0 {
		i := 0
		for {
			c := arity*i + 1
			if c >= n {
				break
			}
			m := c
			for k := c + 1; k < min(c+arity, n); k++ {
				if h[k].before(&h[m]) {
					m = k
				}
			}
			if !h[m].before(&e) {
				break
			}
			h[i] = h[m]
			i = m
		}
		h[i] = e
	}
	*q = h
	return top
}

type apps struct{ nd *Node }

func (p apps) Run(call node.Call) {
	nd, n := p.nd, p.nd.net
	epoch := nd.epoch
	nd.cx.after(nil, n.Latency, func(c *ctx) {
		if !nd.up || nd.epoch != epoch {
			return
		}
		rep, err := n.App(nd, call)
		if call.ID != 0 {
			nd.a.Handle(c.now, call.Done(rep, err))
			n.flush(nd)
		}
	})
}

// publish keeps or hands over a monitoring event, and carries a
// utilization sample to the superior it names.
func (n *Net) publish(nd *Node, ev *wire.Event) {
	if !n.DiscardPublished {
		nd.cx.hook(func() {
			if n.OnPublish != nil {
				n.OnPublish(nd, ev)
			} else {
				nd.Published = append(nd.Published, ev)
			}
		})
	}
	u := ev.GetUtilization()
	if u == nil || u.Superior == "" {
		return
	}
	sup := n.nodes[u.Superior]
	if sup == nil {
		return
	}
	epoch := sup.epoch
	nd.cx.after(sup, n.link(nd, sup), func(c *ctx) {
		if !sup.up || sup.epoch != epoch {
			return
		}
		sup.a.Handle(c.now, node.Input{Kind: node.InputObserved, Event: ev})
		n.flush(sup)
	})
}
