package memnet

import (
	"container/heap"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// Epoch is the virtual time at which every Net starts.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Net is a simulated network of Cores under a virtual clock. Everything
// happens in the goroutine that calls Run*, in time order, ties broken by
// insertion order, so a run is a function of the seed and the calls made.
type Net struct {
	now   time.Time
	rng   *rand.Rand
	seq   uint64
	queue events
	nodes map[string]*Node
	gen   uint64

	// Latency is the one-way delay of every message and connection step.
	Latency time.Duration
	// DialTimeout is how long a dial across a dropped link (Drop says true
	// for a nil envelope) hangs before it fails, as a real dial into a
	// partition does; a dial to a manager that is down fails at once
	// (connection refused). Default 10s, as node/p2p's.
	DialTimeout time.Duration
	// TickEvery is how often each Core is ticked.
	TickEvery time.Duration
	// Drop, if set, is asked about every message at send time; true drops it
	// silently (a lossy or partitioned link).
	Drop func(from, to string, env *wire.Envelope) bool
	// Trace, if set, sees every message as it is delivered.
	Trace func(at time.Time, from, to string, env *wire.Envelope)
	// Log is given to each Core (nil discards).
	Log *slog.Logger
	// Plugin, if set, runs admin plugins (after one latency); nil: no
	// manager has any.
	Plugin func(nd *Node, name string, args []string, stdin []byte) (output string, exitCode int, err error)
}

// Node is one manager in the Net.
type Node struct {
	Peer string
	Name string
	Core *node.Core
	Cfg  node.Config
	// Host is what the manager's host measures; given to the Core at
	// Start and by SetHost.
	Host node.HostValues

	net     *Net
	up      bool
	epoch   uint64            // incarnation, bumped by Kill
	chans   map[string]uint64 // peer → generation of the open channel
	nextSid uint64
	// Replies holds client replies by session, in arrival order.
	Replies map[uint64][]*wire.Envelope
	// Events are the relation events the Core reported, oldest first.
	Events []node.Event
	// Disk is the manager's reservation store: it survives Kill, and a
	// restarted Core restores from it.
	Disk Disk
}

// Disk is an in-memory reservation store. Batches are applied the moment
// the Core hands them over, which is before its replies leave (as the
// real driver does after fsync).
type Disk struct {
	Records map[string]reservation.Reservation
	NextSeq uint64
	Writes  int // batches written
	// Relations is the saved-relations file, as the driver would write
	// it; a restarted Core restores its superiors from it.
	Relations []byte
	// Audit is the admin audit log.
	Audit []node.AuditRecord
}

func (d *Disk) apply(b reservation.Batch) {
	if d.Records == nil {
		d.Records = make(map[string]reservation.Reservation)
	}
	for _, ch := range b.Changes {
		if ch.Rec == nil {
			delete(d.Records, ch.ID)
		} else {
			d.Records[ch.ID] = ch.Rec.Clone()
		}
	}
	d.NextSeq = max(d.NextSeq, b.NextSeq)
	d.Writes++
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
	return &Net{
		now:         Epoch,
		rng:         rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		nodes:       make(map[string]*Node),
		Latency:     time.Millisecond,
		DialTimeout: 10 * time.Second,
		TickEvery:   100 * time.Millisecond,
	}
}

// Now is the virtual time.
func (n *Net) Now() time.Time { return n.now }

// Rand is the network's random source (for tests that need more).
func (n *Net) Rand() *rand.Rand { return n.rng }

// Add creates a manager that is not started yet. cfg must have passed
// Validate; peer is its id.
func (n *Net) Add(peer string, cfg node.Config) *Node {
	if _, dup := n.nodes[peer]; dup {
		panic(fmt.Sprintf("memnet: peer %s added twice", peer))
	}
	nd := &Node{Peer: peer, Name: cfg.Name, Cfg: cfg, net: n, chans: make(map[string]uint64), Replies: make(map[uint64][]*wire.Envelope)}
	n.nodes[peer] = nd
	return nd
}

// Node returns the manager with peer id peer, or nil.
func (n *Net) Node(peer string) *Node { return n.nodes[peer] }

// Nodes returns every manager sorted by peer id.
func (n *Net) Nodes() []*Node {
	out := make([]*Node, 0, len(n.nodes))
	for _, nd := range n.nodes {
		out = append(out, nd)
	}
	slices.SortFunc(out, func(a, b *Node) int { return strings.Compare(a.Peer, b.Peer) })
	return out
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
	nd.up = true
	nd.epoch++
	seed := n.rng.Uint64()
	nd.Core = node.NewCore(nd.Cfg, peer, []string{"/memnet/" + nd.Name}, rand.New(rand.NewPCG(seed, seed>>3|1)), n.Log)
	if err := nd.Core.Restore(n.now, nd.Disk.Snapshot()); err != nil {
		panic(fmt.Sprintf("memnet: %s: restore: %v", nd.Name, err))
	}
	if nd.Disk.Relations != nil {
		// Test peer ids are not libp2p ids, so ParseSaved would refuse
		// them: decode without its checks (its tests cover them).
		sv := new(relations.Saved)
		if err := json.Unmarshal(nd.Disk.Relations, sv); err != nil {
			panic(fmt.Sprintf("memnet: %s: saved relations: %v", nd.Name, err))
		}
		nd.Core.RestoreRelations(sv)
	}
	nd.Core.Start(n.now)
	if nd.Host.At.IsZero() {
		nd.Host.At = n.now
	}
	nd.Core.SetHost(n.now, nd.Host)
	n.flush(nd)
	// Ticks start at a random phase so that managers do not act in step.
	n.after(time.Duration(n.rng.Int64N(int64(n.TickEvery)))+1, func() { n.tick(nd, nd.epoch) })
}

// Kill stops a manager like kill -9: its peers see their channels reset
// after one latency; nothing it had queued is sent.
func (n *Net) Kill(peer string) {
	nd := n.nodes[peer]
	if !nd.up {
		return
	}
	nd.up = false
	peers := make([]string, 0, len(nd.chans))
	for p := range nd.chans {
		peers = append(peers, p)
	}
	slices.Sort(peers) // map order would make the run depend on luck
	for _, p := range peers {
		n.disconnect(p, peer, nd.chans[p], "connection reset by peer")
		delete(nd.chans, p)
	}
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
	nd := n.nodes[peer]
	nd.nextSid++
	sid := nd.nextSid
	if env.Id == 0 {
		env.Id = 1
	}
	n.after(n.Latency, func() {
		if !nd.up {
			return
		}
		_ = nd.Core.ClientStep(n.now, sid, from, env)
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
	hv.At = n.now
	nd.Host = hv
	if nd.up {
		nd.Core.SetHost(n.now, hv)
	}
}

// Inject delivers env to manager to as if from sent it over their channel,
// now, and returns what the Core's Step said. It is for tests of bad input.
func (n *Net) Inject(from, to string, env *wire.Envelope) error {
	dst := n.nodes[to]
	err := dst.Core.Step(n.now, from, env)
	n.flush(dst)
	return err
}

// Do runs fn on a manager's Core now and carries out what it asked for.
func (n *Net) Do(peer string, fn func(c *node.Core, now time.Time)) {
	nd := n.nodes[peer]
	fn(nd.Core, n.now)
	n.flush(nd)
}

// RunFor advances the virtual clock by d, running everything due.
func (n *Net) RunFor(d time.Duration) { n.runTo(n.now.Add(d), nil) }

// RunUntil runs until cond holds (checked after every event) or limit of
// virtual time passes. It reports whether cond held.
func (n *Net) RunUntil(cond func() bool, limit time.Duration) bool {
	if cond() {
		return true
	}
	return n.runTo(n.now.Add(limit), cond)
}

func (n *Net) runTo(end time.Time, cond func() bool) bool {
	for n.queue.Len() > 0 && !n.queue[0].at.After(end) {
		e := heap.Pop(&n.queue).(*event)
		n.now = e.at
		e.fn()
		if cond != nil && cond() {
			return true
		}
	}
	n.now = end
	return cond != nil && cond()
}

func (n *Net) after(d time.Duration, fn func()) {
	n.seq++
	heap.Push(&n.queue, &event{at: n.now.Add(d), seq: n.seq, fn: fn})
}

func (n *Net) tick(nd *Node, epoch uint64) {
	if !nd.up || nd.epoch != epoch {
		return
	}
	nd.Core.Tick(n.now)
	n.flush(nd)
	n.after(n.TickEvery, func() { n.tick(nd, epoch) })
}

// flush carries out a Core's Ready: the same order as node.Driver.
func (n *Net) flush(nd *Node) {
	if !nd.Core.HasReady() {
		return
	}
	rd := nd.Core.Ready()
	for _, m := range rd.Messages {
		n.send(nd, m.To, m.Env)
	}
	if !rd.Persist.Empty() {
		nd.Disk.apply(rd.Persist)
	}
	if rd.Relations != nil {
		nd.Disk.Relations = rd.Relations.Marshal()
	}
	nd.Disk.Audit = append(nd.Disk.Audit, rd.Audit...)
	for _, p := range rd.Plugins {
		epoch := nd.epoch
		n.after(n.Latency, func() {
			if !nd.up || nd.epoch != epoch {
				return
			}
			out, code, err := "", 0, error(fmt.Errorf("%w: no plugins on the simulated network", node.ErrPluginNotFound))
			if n.Plugin != nil {
				out, code, err = n.Plugin(nd, p.Name, p.Args, p.Stdin)
			}
			nd.Core.PluginDone(n.now, p.ID, out, code, err)
			n.flush(nd)
		})
	}
	for _, m := range rd.Client {
		sid, env := m.Session, m.Env
		n.after(n.Latency, func() { nd.Replies[sid] = append(nd.Replies[sid], env) })
	}
	for _, c := range rd.Closes {
		if gen, ok := nd.chans[c.Peer]; ok {
			delete(nd.chans, c.Peer)
			n.disconnect(c.Peer, nd.Peer, gen, "closed by peer: "+c.Reason)
		}
	}
	for _, d := range rd.Dials {
		n.dial(nd, d.Peer)
	}
	nd.Events = append(nd.Events, rd.Events...)
	if rd.Shutdown != "" {
		// As the driver: say goodbye, send it, and stop.
		n.after(0, func() { n.Stop(nd.Peer, rd.Shutdown) })
	}
}

// Stop stops a manager gracefully: its Core says goodbye on every
// relation (delivered), then it is down.
func (n *Net) Stop(peer, reason string) {
	nd := n.nodes[peer]
	if !nd.up {
		return
	}
	nd.Core.Stop(n.now, reason)
	n.flush(nd)
	nd.up = false
	nd.chans = make(map[string]uint64)
}

func (n *Net) send(from *Node, to string, env *wire.Envelope) {
	gen, ok := from.chans[to]
	if !ok {
		return // no channel: dropped, as by the real transport
	}
	if n.Drop != nil && n.Drop(from.Peer, to, env) {
		return
	}
	n.after(n.Latency, func() {
		dst := n.nodes[to]
		if !dst.up || dst.chans[from.Peer] != gen {
			return
		}
		if n.Trace != nil {
			n.Trace(n.now, from.Peer, to, env)
		}
		_ = dst.Core.Step(n.now, from.Peer, env)
		n.flush(dst)
	})
}

// disconnect tells peer, after one latency, that its channel gen to other
// is gone, unless a newer channel replaced it meanwhile.
func (n *Net) disconnect(peer, other string, gen uint64, why string) {
	n.after(n.Latency, func() {
		nd := n.nodes[peer]
		if nd == nil || !nd.up || nd.chans[other] != gen {
			return
		}
		delete(nd.chans, other)
		nd.Core.Disconnected(n.now, other, why)
		n.flush(nd)
	})
}

// dial connects from to peer after one latency if peer is up and the link
// passes Drop (asked with a nil envelope); a channel already open between
// them is replaced, as a new libp2p stream replaces the old one.
func (n *Net) dial(from *Node, peer string) {
	epoch := from.epoch
	n.after(n.Latency, func() {
		if !from.up || from.epoch != epoch {
			return
		}
		dst := n.nodes[peer]
		if n.Drop != nil && n.Drop(from.Peer, peer, nil) {
			n.after(n.DialTimeout, func() {
				if from.up && from.epoch == epoch {
					from.Core.DialFailed(n.now, peer, "dial timeout")
					n.flush(from)
				}
			})
			return
		}
		if dst == nil || !dst.up {
			from.Core.DialFailed(n.now, peer, "connection refused")
			n.flush(from)
			return
		}
		for _, pair := range [][2]*Node{{from, dst}, {dst, from}} {
			a, b := pair[0], pair[1]
			if _, old := a.chans[b.Peer]; old {
				delete(a.chans, b.Peer)
				a.Core.Disconnected(n.now, b.Peer, "replaced by a new channel")
				n.flush(a)
			}
		}
		n.gen++
		from.chans[peer] = n.gen
		dst.chans[from.Peer] = n.gen
		dst.Core.Connected(n.now, from.Peer, false)
		n.flush(dst)
		from.Core.Connected(n.now, peer, true)
		n.flush(from)
	})
}

type event struct {
	at  time.Time
	seq uint64
	fn  func()
}

type events []*event

func (q events) Len() int { return len(q) }
func (q events) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q events) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *events) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}
