package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// Errors of Core.Step.
var (
	// ErrProtocol: a peer broke the protocol (wrong message for the state).
	ErrProtocol = errors.New("node: protocol violation")
	// ErrBadMessage: a message failed validation.
	ErrBadMessage = errors.New("node: bad message")
)

// Limits on what the Core keeps for others.
const (
	maxEvents     = 64 // relation events kept for status
	minHopBudget  = 2 * time.Millisecond
	exprCacheSize = 256
)

// Core is the protocol state machine of one grid manager. It does no I/O:
// the runtime feeds it what happened (Start, Tick, Connected, Disconnected,
// DialFailed, Step, ClientStep, SetHost, CallDone, StoreFailed), each
// with the current time, and after each call takes what the Core wants
// done with Ready. One holder at a time owns a Core (the Driver's lock,
// memnet's loop); it is not safe for concurrent use.
//
// The Core itself keeps the lifecycle, the relations (handshake,
// heartbeats, failure detection) and the dispatch of messages; each
// capability keeps its own state in a module (module.go): failover,
// queries (tree, ping, query), admin, reservations (with the values and
// calendars), applications, monitoring.
type Core struct {
	// cfg is the config in force, but for what own holds (the manager's
	// name, host name, superiors and attributes; cfg's are not read).
	// From NewCoreShared both are the caller's until the Core changes
	// them (ownConfig makes a copy of cfg first; own is replaced whole).
	cfg       *config.Config
	own       *Own
	cfgOwned  bool
	stopping  bool
	relDirty  bool // superiors changed since the last Ready
	attrDirty bool // attrs changed since the last Ready
	self      string
	addrs     []string
	rng       *rand.Rand
	// wakeAt: the earliest a module asked to be ticked since the last
	// Tick (WakeAt)
	wakeAt time.Time
	log    *slog.Logger
	set    *relations.Set
	live   relations.Liveness

	started time.Time
	now     time.Time
	nextID  uint64

	pendingIn   map[string]time.Time // inbound channels awaiting Hello → deadline
	lastChain   uint64               // chainHash of the ancestors last sent down
	chainPB     []*wire.Ancestor     // the ancestors as last sent down (shared by the heartbeats sent: never changed)
	events      []Event
	unknownMsgs uint64           // messages from relations with a body this version does not know
	attrs       *SavedAttributes // attributes set at runtime (nil: none)
	saved       *relations.Saved // superiors to restore at Start

	exprs *query.Cache // compiled requirements and ranks, shared by the modules

	q    *queries
	res  *reservations
	fo   *failover
	adm  *admins
	apps *apps
	mon  *monitor
	jobs *jobsMod
	// metrics receives counts and timings (SetMetrics).
	metrics Metrics
	// callers routes the end of a Call to the module that owns its kind.
	callers [callKinds]func(time.Time, CallDone)

	rd Ready
	// dl caches NextDeadline (deadline.go).
	dl deadlineCache
}

// Ready is what the Core asks the runtime to do. The runtime performs it in
// this order: send Messages; write Persist, Relations and Audit (the
// durable writes) and only then send Client messages (in order per peer or
// session) — and hold back later Client messages too while a write is in
// progress, so that no answer ever tells of a change a crash could lose;
// then Closes (after flushing what was queued for that peer), then Dials.
// Events are informational. Applier does all of this.
type Ready struct {
	Persist reservation.Batch
	// Relations, when set, are the superiors to save (atomically) in the
	// data dir, for the next start; the runtime writes the latest one.
	Relations *relations.Saved
	// Attributes, when set, are the attributes set at runtime, to save
	// (atomically) for the next start; the runtime writes the latest.
	Attributes *SavedAttributes
	Messages   []Message
	Client     []ClientMessage
	Closes     []Close
	Dials      []Dial
	Events     []Event
	// Publish are monitoring events to publish on the grid's event bus
	// (docs/monitoring.md), in order; informational, like Events.
	Publish []*wire.Event
	// Audit are admin commands that asked for a change (accepted or
	// refused), to append to the audit log.
	Audit []AuditRecord
	// Calls are work for the runtime (plugins, applications, the event
	// archive), in the order asked; report each with an ID with CallDone.
	Calls []Call
	// Config, when set, is the config after a set command: the runtime
	// applies what it owns (log level).
	Config *config.Config
	// Shutdown, when set, asks the runtime to stop the manager gracefully
	// (Stop, then exit), for this reason.
	Shutdown string
}

// Message is an envelope for a peer over its mesh channel.
type Message struct {
	To  string
	Env *wire.Envelope
}

// ClientMessage is an envelope for a client session.
type ClientMessage struct {
	Session uint64
	Env     *wire.Envelope
}

// Dial asks the runtime to open a mesh channel to Peer and report
// Connected(outbound) or DialFailed.
type Dial struct {
	Peer  string
	Addrs []string
}

// Close asks the runtime to close the mesh channel to Peer.
type Close struct {
	Peer   string
	Reason string
	// Dead: the peer went silent, so the connection under the channel
	// is probably dead too (a half-open TCP connection after a cut link);
	// the runtime should drop it so that a redial opens a fresh one.
	Dead bool
}

// Event is a relation change worth showing to an operator. State changes
// carry the role and the new state; other events (refusals, departures)
// leave them zero.
type Event struct {
	At    time.Time
	Peer  string
	Name  string
	What  string
	Role  relations.Role
	State relations.State
}

// NewCore returns a Core for the manager with peer id self, listening on
// addrs (transport multiaddrs without /p2p). cfg must have passed Validate.
// rng supplies all randomness (jitter, request ids); log receives the
// Core's log lines (nil discards them).
func NewCore(cfg config.Config, self string, addrs []string, rng *rand.Rand, log *slog.Logger) *Core {
	own := OwnOf(&cfg)
	return newCore(&cfg, &own, true, self, addrs, rng, log)
}

// Own is what is a manager's own in its properties: the fields that set
// it apart from the other managers of a simulated grid, which share the
// rest of one config (NewCoreShared).
type Own struct {
	Name       string               // name
	Hostname   string               // hostname
	Superiors  []peeraddr.PeerAddrs // superiors
	Attributes map[string]any       // attributes
}

// OwnOf is cfg's own fields.
func OwnOf(cfg *config.Config) Own {
	return Own{Name: cfg.Name, Hostname: cfg.Hostname, Superiors: cfg.Superiors, Attributes: cfg.Attributes}
}

// Split is cfg's own fields, and cfg without them (blank): the two parts
// NewCoreShared takes.
func Split(cfg config.Config) (*config.Config, Own) {
	own := OwnOf(&cfg)
	cfg.Name, cfg.Hostname, cfg.Superiors, cfg.Attributes = "", "", nil, nil
	return &cfg, own
}

// Config is cfg with o's fields in place of its own.
func (o *Own) Config(cfg config.Config) config.Config {
	cfg.Name, cfg.Hostname, cfg.Superiors, cfg.Attributes = o.Name, o.Hostname, o.Superiors, o.Attributes
	return cfg
}

// NewCoreShared is NewCore reading its config where it is rather than a
// copy of it, in two parts: what is the manager's own from *own, the rest
// from *cfg, whose Name, Hostname, Superiors and Attributes it never
// reads. A simulation of many managers keeps the config they have in
// common once, and each manager's own fields. The Core never writes *cfg
// or *own (what an admin set or restored attributes change goes in a copy
// of its own); the caller must change neither while the Core is in use.
func NewCoreShared(cfg *config.Config, own *Own, self string, addrs []string, rng *rand.Rand, log *slog.Logger) *Core {
	return newCore(cfg, own, false, self, addrs, rng, log)
}

func newCore(cfg *config.Config, own *Own, owned bool, self string, addrs []string, rng *rand.Rand, log *slog.Logger) *Core {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Core{
		cfg:      cfg,
		own:      own,
		cfgOwned: owned,
		self:     self,
		addrs:    addrs,
		rng:      rng,
		log:      log.With("manager", own.Name),
		set:      relations.NewSet(self, own.Name),
		live:     cfg.Liveness(),
		exprs:    query.NewCache(exprCacheSize),
	}
	c.q = newQueries(c)
	c.res = newReservations(c)
	c.fo = newFailover(c)
	c.adm = newAdmins(c)
	c.apps = newApps(c)
	c.mon = newMonitor(c)
	c.jobs = newJobs(c)
	c.metrics = nopMetrics{}
	// The order in which the modules tick (and are offered messages and
	// told that a relation ended): failover first, then heartbeats (see
	// beats), then the rest.
	c.callers = [callKinds]func(time.Time, CallDone){
		CallPlugin:  c.adm.callDone,
		CallApp:     c.apps.callDone,
		CallArchive: c.mon.callDone,
		CallJob:     c.jobs.callDone,
	}
	c.res.vals = c.res.values(&HostValues{})
	return c
}

// ShareExprs makes the Core compile requirements and ranks through cache,
// which other Cores may share (a simulation of many managers compiles
// each expression once, whichever goroutine runs each Core).
func (c *Core) ShareExprs(cache *query.Cache) { c.exprs = cache }

// Relations exposes the relation set for inspection (tests, status). The
// caller must not change it.
func (c *Core) Relations() *relations.Set { return c.set }

// Self is the manager's peer id.
func (c *Core) Self() string { return c.self }

// Name is the manager's name.
func (c *Core) Name() string { return c.own.Name }

// Config is the config in force (changed by admin set).
func (c *Core) Config() config.Config { return c.config() }

func (c *Core) config() config.Config { return c.own.Config(*c.cfg) }

// ownConfig is the config in force, to be changed: the Core's own copy
// (NewCoreShared's is the caller's).
func (c *Core) ownConfig() *config.Config {
	if !c.cfgOwned {
		cp := *c.cfg
		c.cfg, c.cfgOwned = &cp, true
	}
	return c.cfg
}

// HasReady reports whether Ready has anything.
func (c *Core) HasReady() bool {
	return !c.rd.empty() || c.res.ledger.Pending() || c.relDirty || c.attrDirty
}

// empty reports whether r asks for nothing. Every field of Ready must be
// here (TestReadyEmptyCoversEveryField checks).
func (r *Ready) empty() bool {
	return r.Persist.Empty() && r.Relations == nil && r.Attributes == nil &&
		len(r.Messages)+len(r.Client)+len(r.Closes)+len(r.Dials)+len(r.Events)+len(r.Publish)+len(r.Audit)+len(r.Calls) == 0 &&
		r.Config == nil && r.Shutdown == ""
}

// Ready hands over what the Core wants done and clears it.
func (c *Core) Ready() Ready {
	if c.res.ledger.Pending() {
		c.rd.Persist = c.res.ledger.TakeBatch()
	}
	if c.relDirty {
		c.rd.Relations = c.set.SaveSuperiors(c.own.Superiors)
		c.relDirty = false
	}
	if c.attrDirty {
		c.rd.Attributes = c.attrs.clone()
		c.attrDirty = false
	}
	rd := c.rd
	c.rd = Ready{}
	return rd
}

// Start begins the manager's life at now: it registers the superiors (the
// saved ones, see RestoreRelations, else the configured ones) and dials
// them. A superior that is this manager is skipped with an error log.
func (c *Core) Start(now time.Time) {
	c.dl.ok = false // see NextDeadline
	c.started, c.now = now, now
	c.fo.startSuperiors(now)
	c.dialDue(now)
	c.apps.reconcile()
	c.jobs.start()
}

// AddSuperior adds a superior at runtime and dials it. The superior refuses
// if we are among its ancestors (the hello carries our chain and it knows
// its own); the refusal shows in the relation's LastError.
func (c *Core) AddSuperior(now time.Time, pa peeraddr.PeerAddrs) error {
	c.dl.ok = false // see NextDeadline
	c.now = now
	if _, err := c.set.AddSuperior(now, pa, false, c.backoff()); err != nil {
		return err
	}
	c.relationsChanged()
	c.dialDue(now)
	return nil
}

// Stop says goodbye on every live relation and closes every channel.
// Reservation requests waiting in a claim window are decided first, so
// that their clients get an answer (written before the manager goes).
func (c *Core) Stop(now time.Time, reason string) {
	c.dl.ok = false // see NextDeadline
	c.now = now
	if len(c.res.pending) > 0 {
		c.res.decide(now)
	}
	c.stopping = true
	for _, r := range c.set.All() {
		if r.State.Live() {
			c.send(r.Peer, &wire.Envelope{Body: &wire.Envelope_Goodbye{Goodbye: &wire.Goodbye{Reason: reason}}})
		}
		c.closeChan(r.Peer, reason)
	}
}

// Tick advances the Core's clock and does what is due: handshake
// timeouts, the failure detector, then every module in order (failover,
// heartbeats, queries, admin, reservations, applications, monitoring),
// then dials. Calling it before NextDeadline does nothing; the runtime may
// call it as often as it likes, or only when NextDeadline is due.
func (c *Core) Tick(now time.Time) {
	// A tick long after the earliest thing was due means our own loop was
	// starved: the failure detector must not hold that against the peers.
	var late time.Duration
	if due := c.NextDeadline(now); !due.IsZero() && now.After(due) {
		late = now.Sub(due)
	}
	// NextDeadline just now left in c.dl what the Core is as Tick
	// begins: with no handshake under way, handshakeTimeouts has nothing
	// to do (most ticks: it walked the superiors at each).
	handshakes := c.dl.handshakes
	if CheckDeadlines && !handshakes {
		if _, _, hs := c.deadlines(now); hs {
			panic(fmt.Sprintf("node: %s: Tick at %v skipped a handshake under way", c.own.Name, now))
		}
	}
	c.dl.ok = false // see NextDeadline
	c.now = now
	c.wakeAt = time.Time{}
	if handshakes {
		c.handshakeTimeouts(now)
	}
	for _, ch := range c.set.Check(now, c.live, late) {
		if ch.To == relations.Down {
			c.rd.Closes = append(c.rd.Closes, Close{Peer: ch.Peer, Reason: ch.Cause, Dead: true})
		}
		c.onChange(now, ch)
	}
	for _, m := range c.modules() {
		m.tick(now)
	}
	c.dialDue(now)
}

// NextDeadline is when Tick next has something to do: the earliest of the
// handshake times, the failure detector's next verdict, the next dial,
// and every module's deadline. A time at or before now means at once;
// zero means nothing is scheduled (Tick may still be called). The runtime
// should call it after every input it fed (and Ready it carried out): an
// input can bring a deadline forward.
//
// The answer is cached (deadline.go): it is recomputed only after an
// input that may have changed it, or when it depended on now.
func (c *Core) NextDeadline(now time.Time) time.Time {
	if c.dl.ok && !now.Before(c.dl.from) {
		if CheckDeadlines {
			c.checkDeadline(now)
		}
		c.dl.hits++
		return c.dl.at
	}
	next, rest, hs := c.deadlines(now)
	c.dl.ok = (next.IsZero() || next.After(now)) && c.jobs.state != jobsReady
	c.dl.at, c.dl.rest, c.dl.from, c.dl.handshakes = next, rest, now, hs
	return next
}

// nextDeadline computes NextDeadline afresh.
func (c *Core) nextDeadline(now time.Time) time.Time {
	next, _, _ := c.deadlines(now)
	return next
}

// earliest is the earlier of two deadlines, zero being none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// deadlines computes NextDeadline afresh (next), and what it is besides
// the relations' silence deadlines (rest: the earliest of all but
// relations.Set.NextCheck), and whether a handshake is under way (hs: an
// inbound channel waits for its hello, or a superior for its welcome),
// which is all that handshakeTimeouts looks at.
func (c *Core) deadlines(now time.Time) (next, rest time.Time, hs bool) {
	at := func(t time.Time) {
		if !t.IsZero() && (rest.IsZero() || t.Before(rest)) {
			rest = t
		}
	}
	for _, dl := range c.pendingIn {
		hs = true
		at(dl.Add(1)) // handshakeTimeouts acts once now is after dl
	}
	for _, r := range c.set.Superiors() {
		handshaking := r.State == relations.Connecting && !r.HandshakeDeadline().IsZero()
		if handshaking {
			hs = true
			at(r.HandshakeDeadline().Add(1))
		} else if !c.stopping && !r.Dialling && !r.State.Live() && !r.NextDial().IsZero() {
			at(r.NextDial())
		}
	}
	for _, m := range c.modules() {
		at(m.deadline(now))
	}
	return earliest(rest, c.set.NextCheck(now, c.live)), rest, hs
}

// modules are the Core's modules, in the order they are told things
// (module.go). They are made at each call, not kept: a slice of them cost
// every manager 128 bytes (and the failover wrapper 32 more), while making
// them costs no allocation, every entry being a pointer.
func (c *Core) modules() [8]module {
	return [8]module{untilStop{c}, beats{c}, c.q, c.adm, c.res, c.apps, c.mon, c.jobs}
}

// untilStop is the failover module while the manager runs: once it is
// stopping, failover neither ticks nor has a deadline (no search for a new
// superior while the manager says goodbye). One pointer, so that it is an
// interface value without an allocation.
type untilStop struct{ c *Core }

func (u untilStop) handle(now time.Time, o origin, env *wire.Envelope) (bool, error) {
	return u.c.fo.handle(now, o, env)
}

func (u untilStop) relationEnded(now time.Time, r *relations.Relation, why string) {
	u.c.fo.relationEnded(now, r, why)
}

func (u untilStop) tick(now time.Time) {
	if !u.c.stopping {
		u.c.fo.tick(now)
	}
}

func (u untilStop) deadline(now time.Time) time.Time {
	if u.c.stopping {
		return time.Time{}
	}
	return u.c.fo.deadline(now)
}

// beats is the module of heartbeats: the part of keeping relations that
// Tick does after failover (which may push the ancestor chain at once or
// forget inferiors) and before the other modules, which is where its
// place in Core.modules puts it. It takes no message: heartbeats are the
// Core's (onHeartbeat).
type beats struct{ c *Core }

func (b beats) handle(time.Time, origin, *wire.Envelope) (bool, error) { return false, nil }
func (b beats) tick(now time.Time)                                     { b.c.heartbeats(now) }
func (b beats) relationEnded(time.Time, *relations.Relation, string)   {}
func (b beats) deadline(now time.Time) time.Time {
	var next time.Time
	for _, r := range b.c.set.All() {
		if t := r.NextHeartbeat(now, b.c.cfg.HeartbeatInterval); !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	return next
}

// Connected reports that a mesh channel to peer is open: outbound when we
// dialled it (the peer is a superior), inbound when it dialled us.
func (c *Core) Connected(now time.Time, peer string, outbound bool) {
	c.dl.ok = false // see NextDeadline
	c.now = now
	if !outbound {
		if c.pendingIn == nil {
			c.pendingIn = make(map[string]time.Time)
		}
		c.pendingIn[peer] = now.Add(c.cfg.HandshakeTimeout)
		return
	}
	r := c.set.Get(peer)
	if (r == nil || r.Role != relations.Superior) && !c.stopping && c.adm.inviteConnected(peer) {
		return
	}
	if r == nil && !c.stopping && c.fo.probeConnected(peer) {
		return
	}
	if r == nil || r.Role != relations.Superior || c.stopping {
		c.closeChan(peer, "not a superior of this manager")
		return
	}
	r.Dialling = false
	r.SetHandshakeDeadline(now.Add(c.cfg.HandshakeTimeout))
	r.StartProbe(now)
	c.send(peer, &wire.Envelope{Body: &wire.Envelope_Hello{Hello: &wire.Hello{
		ProtocolVersion: ProtocolVersion,
		Name:            c.own.Name,
		Role:            wire.Role_ROLE_INFERIOR,
		Addrs:           c.addrs,
		Ancestors:       ancestorsToPB(c.set.Ancestors()),
		Version:         c.cfg.Version,
	}}})
}

// Disconnected reports that the mesh channel to peer closed or failed.
func (c *Core) Disconnected(now time.Time, peer string, reason string) {
	c.dl.ok = false // see NextDeadline
	c.now = now
	c.notPending(peer)
	// An invite's channel may close before its answer is read (the
	// invitee's hello on a new channel replaces it): the command then
	// completes with that hello, or times out.
	c.adm.inviteChannelLost(peer)
	c.fo.askerGone(peer)
	r := c.set.Get(peer)
	if r == nil {
		c.fo.probeChanLost(now, peer)
		return
	}
	r.Dialling = false
	r.LastError = "channel lost: " + reason
	c.lost(now, r, r.LastError)
}

// DialFailed reports that a Dial did not produce a channel.
func (c *Core) DialFailed(now time.Time, peer string, reason string) {
	c.dl.ok = false // see NextDeadline
	c.now = now
	c.adm.inviteDialFailed(now, peer, reason)
	r := c.set.Get(peer)
	if r == nil {
		c.fo.probeChanLost(now, peer)
	}
	if r == nil || r.Role != relations.Superior {
		return
	}
	r.Dialling = false
	r.LastError = reason
	if ch, ok := c.set.SetState(now, r, relations.Down, "dial failed: "+reason); ok && ch.From != relations.Connecting {
		c.onChange(now, ch)
	}
	c.scheduleRedial(now, r)
}

// Step handles one envelope that arrived from peer on its mesh channel. It
// returns an error for a message that was wrong or malformed; the Core has
// already reacted (refused, closed the channel); the runtime only logs it.
func (c *Core) Step(now time.Time, peer string, env *wire.Envelope) error {
	keep, kept := c.beatKeepsDeadline(peer, env)
	c.dl.ok = false // see NextDeadline
	err := c.step(now, peer, env)
	if kept && err == nil && keep.still(c, peer) {
		if keep.earliest {
			// The beat moved the earliest deadline, its relation's
			// silence: only the relations' part is computed again.
			next := earliest(c.dl.rest, c.set.NextCheck(now, c.live))
			if !next.IsZero() && !next.After(now) {
				return err
			}
			c.dl.at, c.dl.from = next, now
		}
		c.dl.ok = true
		c.dl.kept++
	}
	return err
}

func (c *Core) step(now time.Time, peer string, env *wire.Envelope) error {
	c.now = now
	if num := unknownBody(env); num != 0 && c.pendingIn[peer].IsZero() && !c.adm.invited(peer) {
		if r := c.set.Get(peer); r != nil && r.State.Live() {
			c.unknownFrom(now, r, env, num)
			return nil
		}
	}
	if err := validateEnvelope(env); err != nil {
		c.closeChan(peer, err.Error())
		c.forget(now, peer, err.Error())
		return err
	}
	if _, ok := c.pendingIn[peer]; ok {
		return c.stepHandshake(now, peer, env)
	}
	if ir := env.GetInviteReply(); ir != nil && c.adm.invited(peer) {
		c.adm.onInviteReply(now, peer, ir)
		return nil
	}
	r := c.set.Get(peer)
	if (r == nil || !r.State.Live()) && c.fo.probeMsg(now, peer, env) {
		return nil // an indirect probe on a channel opened for it
	}
	if r == nil {
		c.closeChan(peer, "no relation")
		return fmt.Errorf("%w: %T from %s, which is not a relation", ErrProtocol, env.Body, text.ShortPeer(peer))
	}
	if r.Role == relations.Superior && r.State == relations.Connecting && !r.HandshakeDeadline().IsZero() {
		return c.stepWelcome(now, r, env)
	}
	if !r.State.Live() {
		// Late message on a channel we already gave up on.
		return nil
	}
	r.Heard(now)
	switch b := env.Body.(type) {
	case *wire.Envelope_Heartbeat:
		return c.onHeartbeat(now, r, b.Heartbeat)
	case *wire.Envelope_Goodbye:
		c.onGoodbye(now, r, b.Goodbye)
		return nil
	case *wire.Envelope_Hello, *wire.Envelope_Welcome, *wire.Envelope_Refuse, *wire.Envelope_Invite, *wire.Envelope_InviteReply:
		err := fmt.Errorf("%w: %T from %s after the handshake", ErrProtocol, env.Body, r.DisplayName())
		c.closeChan(peer, err.Error())
		c.forget(now, peer, err.Error())
		return err
	}
	return c.dispatch(now, origin{peer: peer, id: env.Id, trace: env.TraceId}, env)
}

// ClientStep handles one request from a client session. client is the
// client's peer id as the transport authenticated it (the manager's own id
// for in-process requests); reservations are held in its name.
func (c *Core) ClientStep(now time.Time, session uint64, client string, env *wire.Envelope) error {
	c.dl.ok = false // see NextDeadline
	c.now = now
	if env.GetId() == 0 {
		// A reply names its request by id: one with id 0 could not be
		// matched, so say so once, with reply_to 0, instead of silence.
		c.rd.Client = append(c.rd.Client, ClientMessage{Session: session, Env: &wire.Envelope{Body: &wire.Envelope_Error{Error: &wire.ErrorReply{
			Code:    wire.ErrorReply_CODE_BAD_REQUEST,
			Message: "the request has id 0: give every request a non-zero id (Envelope.id); its reply carries it in reply_to",
		}}}})
		return fmt.Errorf("%w: a client request with id 0", ErrBadMessage)
	}
	o := origin{session: session, client: client, id: env.Id, trace: env.TraceId}
	if num := unknownBody(env); num != 0 {
		c.replyErr(o, wire.ErrorReply_CODE_UNSUPPORTED, fmt.Sprintf(
			"%s (gridmgr %s) does not know this request (envelope field %d); it may come from a newer client", c.own.Name, c.cfg.Version, num))
		return fmt.Errorf("%w: unknown request body (field %d)", ErrBadMessage, num)
	}
	if err := validateEnvelope(env); err != nil {
		c.replyErr(o, wire.ErrorReply_CODE_BAD_REQUEST, strings.TrimPrefix(err.Error(), ErrBadMessage.Error()+": "))
		return err
	}
	switch env.Body.(type) {
	case *wire.Envelope_Hello, *wire.Envelope_Welcome, *wire.Envelope_Refuse, *wire.Envelope_Heartbeat,
		*wire.Envelope_Goodbye, *wire.Envelope_TreeReply, *wire.Envelope_PingReply, *wire.Envelope_QueryReply,
		*wire.Envelope_AdminReply, *wire.Envelope_Invite, *wire.Envelope_InviteReply, *wire.Envelope_Error, *wire.Envelope_EventsReply,
		*wire.Envelope_IndirectProbe, *wire.Envelope_IndirectProbeReply:
		err := fmt.Errorf("%w: %s is a message between managers, not a client request", ErrBadMessage, bodyName(env))
		c.replyErr(o, wire.ErrorReply_CODE_BAD_REQUEST, strings.TrimPrefix(err.Error(), ErrBadMessage.Error()+": "))
		return err
	}
	return c.dispatch(now, o, env)
}

// bodyName is the .proto name of env's body ("heartbeat", "query_request").
func bodyName(env *wire.Envelope) string {
	m := env.ProtoReflect()
	if fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("body")); fd != nil {
		return string(fd.Name())
	}
	return "an empty envelope"
}

// ask makes a request in-process, as if from a client (o says who, and
// o.answer takes the answer): a module asks another for what it serves
// without naming it.
func (c *Core) ask(now time.Time, o origin, env *wire.Envelope) {
	if err := c.dispatch(now, o, env); err != nil {
		c.log.Debug("in-process request", "err", err)
	}
}

// dispatch hands a request, reply or one-way message to the module it
// belongs to. A request no module takes is answered UNSUPPORTED.
func (c *Core) dispatch(now time.Time, o origin, env *wire.Envelope) error {
	c.res.vals.Now = now // what expressions see as now
	if env.Body == nil {
		return fmt.Errorf("%w: the envelope has no body", ErrBadMessage)
	}
	if _, ok := env.Body.(*wire.Envelope_StatusRequest); ok {
		c.reply(o, &wire.Envelope{Body: &wire.Envelope_StatusReply{StatusReply: c.status(now)}})
		return nil
	}
	for _, m := range c.modules() {
		if ok, err := m.handle(now, o, env); ok {
			return err
		}
	}
	if _, reply := env.Body.(*wire.Envelope_Error); reply {
		return nil // an error answering something that already ended
	}
	if env.Id != 0 {
		c.replyErr(o, wire.ErrorReply_CODE_UNSUPPORTED, c.own.Name+": "+notServed(bodyName(env), o.peer != ""))
	}
	return fmt.Errorf("%w: unsupported body %T", ErrBadMessage, env.Body)
}

// notServed says why a body that no module takes as a request is answered
// UNSUPPORTED: a reply sent with an id, as if it were a request, or a
// client's request sent by a manager. A client is told what it may send.
func notServed(body string, fromManager bool) string {
	switch {
	case strings.HasSuffix(body, "_reply"):
		body += " is a reply, not a request"
	case fromManager && slices.Contains(clientRequests, body):
		return body + " is a client's request, not one managers send each other"
	case fromManager:
		return body + " is not a request managers send each other"
	default:
		body += " is not a request a client may send"
	}
	if fromManager {
		return body
	}
	last := len(clientRequests) - 1
	return body + ": a client may send " + strings.Join(clientRequests[:last], ", ") + " or " + clientRequests[last]
}

// clientRequests are the bodies a client may send, in the order of the
// Envelope's oneof: the requests (NAME_request) and reservation_op.
var clientRequests = func() []string {
	var out []string
	fields := (&wire.Envelope{}).ProtoReflect().Descriptor().Oneofs().ByName("body").Fields()
	for i := range fields.Len() {
		if n := string(fields.Get(i).Name()); strings.HasSuffix(n, "_request") || n == "reservation_op" {
			out = append(out, n)
		}
	}
	return out
}()

// unknownFrom handles a message from a live relation whose body this
// version does not know (a newer peer, during a rolling upgrade): it counts
// as life, a request is answered UNSUPPORTED, anything else is ignored. The
// relation stays: dropping it would turn every new one-way message into a
// failover across the grid.
func (c *Core) unknownFrom(now time.Time, r *relations.Relation, env *wire.Envelope, num protowire.Number) {
	r.Heard(now)
	c.unknownMsgs++
	if c.unknownMsgs == 1 {
		c.log.Warn("ignoring a message this version does not know (is the peer newer?); counted in status", "peer", r.DisplayName(), "field", int(num), "version", c.cfg.Version)
	}
	if env.Id != 0 {
		c.replyErr(origin{peer: r.Peer, id: env.Id}, wire.ErrorReply_CODE_UNSUPPORTED, fmt.Sprintf(
			"%s (gridmgr %s) does not know this request (envelope field %d)", c.own.Name, c.cfg.Version, num))
	}
}

// origin is who asked: a related manager (peer) or a client session (and
// the client's peer id).
type origin struct {
	peer    string
	session uint64
	client  string
	id      uint64 // their envelope id, echoed as reply_to
	trace   string // the request's trace id (Envelope.trace_id), echoed
	// answer, when set, takes the answer in place of the asker's channel:
	// a request a module made in-process (ask), e.g. an admin command
	// that renders a tree as its text.
	answer func(*wire.Envelope)
}

func (c *Core) reply(o origin, env *wire.Envelope) {
	if o.answer != nil {
		o.answer(env)
		return
	}
	if o.id == 0 {
		return // the asker wants no answer
	}
	env.ReplyTo = o.id
	env.TraceId = o.trace
	if o.peer != "" {
		c.send(o.peer, env)
		return
	}
	c.rd.Client = append(c.rd.Client, ClientMessage{Session: o.session, Env: env})
}

func (c *Core) replyErr(o origin, code wire.ErrorReply_Code, msg string) {
	c.reply(o, &wire.Envelope{Body: &wire.Envelope_Error{Error: &wire.ErrorReply{Code: code, Message: msg}}})
}

func (c *Core) send(peer string, env *wire.Envelope) {
	c.rd.Messages = append(c.rd.Messages, Message{To: peer, Env: env})
}

// newID returns a fresh envelope id for a request we send.
func (c *Core) newID() uint64 {
	c.nextID++
	return c.nextID
}

func (c *Core) closeChan(peer, reason string) {
	c.rd.Closes = append(c.rd.Closes, Close{Peer: peer, Reason: reason})
}

func (c *Core) backoff() relations.Backoff {
	return relations.Backoff{Initial: c.cfg.RetryInitial, Max: c.cfg.RetryMax}
}

func (c *Core) event(now time.Time, peer, name, what string) {
	c.addEvent(Event{At: now, Peer: peer, Name: name, What: what})
}

func (c *Core) addEvent(e Event) {
	if len(c.events) == maxEvents {
		copy(c.events, c.events[1:])
		c.events = c.events[:maxEvents-1]
	}
	c.events = append(c.events, e)
	c.rd.Events = append(c.rd.Events, e)
}

// userOf is request.user for a request from client that states declared:
// its [users] name if it is mapped, else declared if the owner takes
// stated names (users.allow_declared), else "peer:<client>". The manager's
// own in-process requests keep what they state.
func (c *Core) userOf(client, declared string) string {
	if client == "" || client == c.self {
		return declared
	}
	if name, ok := c.cfg.UserOf(client); ok {
		return name
	}
	if c.cfg.AllowDeclaredUsers() {
		return declared
	}
	return "peer:" + client
}

// isAdmin reports whether peer may change the manager or act on anyone's
// reservation: the manager itself (in-process requests) and the
// configured admins.
func (c *Core) isAdmin(peer string) bool {
	return peer == c.self || slices.Contains(c.cfg.Admins, peer)
}

// relationsChanged asks the runtime to save the superiors.
func (c *Core) relationsChanged() { c.relDirty = true }

// relationEnded tells every module that the relation with r ended: it went
// down, said goodbye, or was removed (why: "down" or "removed"). It is the
// one place where what waits on a relation is cleaned up.
func (c *Core) relationEnded(now time.Time, r *relations.Relation, why string) {
	for _, m := range c.modules() {
		m.relationEnded(now, r, why)
	}
}

// removeRelation forgets a relation (it left, an admin removed it, or a
// failover act let it go) and tells the modules: the one removal.
func (c *Core) removeRelation(now time.Time, r *relations.Relation, why string) {
	c.set.Remove(r.Peer)
	c.relationEnded(now, r, why)
}

// onChange logs a relation state change and reacts to Down.
func (c *Core) onChange(now time.Time, ch relations.Change) {
	what := fmt.Sprintf("%s %s → %s: %s", ch.Role, ch.From, ch.To, ch.Cause)
	c.addEvent(Event{At: now, Peer: ch.Peer, Name: ch.Name, What: what, Role: ch.Role, State: ch.To})
	lvl := slog.LevelInfo
	if ch.To == relations.Down || ch.To == relations.Suspect {
		lvl = slog.LevelWarn
	}
	c.log.Log(context.Background(), lvl, "relation "+ch.To.String(), "role", ch.Role.String(), "peer", ch.Name, "from", ch.From.String(), "cause", ch.Cause)
	if ch.To != relations.Connecting {
		c.publishRelation(now, strings.ToLower(ch.To.String()), ch.Peer, ch.Name, ch.Role, ch.From, ch.To, ch.Cause)
	}
	if ch.To == relations.Suspect {
		c.metrics.HeartbeatMissed()
	}
	if ch.Role == relations.Inferior {
		c.jobs.inferiorChanged(now, ch)
	}
	if ch.To != relations.Down {
		return
	}
	c.closeChan(ch.Peer, ch.Cause)
	r := c.set.Get(ch.Peer)
	if r == nil {
		return
	}
	c.relationEnded(now, r, "down")
	if c.set.RestoreSuperior(now, r) {
		c.log.Info("configured superior is free again, will dial it", "peer", r.DisplayName())
	}
	if r.Role == relations.Superior {
		c.scheduleRedial(now, r)
		c.pushChain(now)
	}
}

// lost handles the end of a relation's channel.
func (c *Core) lost(now time.Time, r *relations.Relation, cause string) {
	ch, ok := c.set.SetState(now, r, relations.Down, cause)
	if ok {
		c.onChange(now, ch)
		return
	}
	if r.Role == relations.Superior && r.NextDial().IsZero() && !r.Dialling {
		c.scheduleRedial(now, r)
	}
}

// forget drops a peer whose message was malformed: its channel is closed
// (by the caller) and the relation goes down like a lost channel.
func (c *Core) forget(now time.Time, peer, cause string) {
	c.notPending(peer)
	if r := c.set.Get(peer); r != nil {
		r.LastError = cause
		c.lost(now, r, "bad message: "+cause)
	}
}

// scheduleRedial sets when to dial a superior next, logging once per
// backoff step.
func (c *Core) scheduleRedial(now time.Time, r *relations.Relation) {
	if c.stopping || r.Role != relations.Superior {
		return
	}
	if r.Trial != "" {
		// A candidate in place of a failed superior is not redialled:
		// the next candidate is tried instead.
		c.fo.trialFailed(now, r)
		return
	}
	if c.adm.superiorFailed(now, r) {
		return // an admin's add-superior that did not work: undone
	}
	d, newStep := r.Backoff.Next(c.rng)
	r.SetNextDial(now.Add(d))
	r.Attempts++
	if newStep {
		addr := ""
		if len(r.Addrs) > 0 {
			addr = r.Addrs[0]
		}
		c.log.Warn("superior not up, will retry", "peer", r.DisplayName(), "addr", addr, "attempt", r.Attempts,
			"retry_in", text.FormatDuration(d.Round(time.Millisecond)), "err", r.LastError)
	}
}

// dialDue emits dials for superiors whose retry time has come.
func (c *Core) dialDue(now time.Time) {
	if c.stopping {
		return
	}
	for _, r := range c.set.Superiors() {
		if r.Dialling || r.State.Live() || r.NextDial().IsZero() || now.Before(r.NextDial()) {
			continue
		}
		if r.State == relations.Connecting && !r.HandshakeDeadline().IsZero() {
			continue // handshake in progress
		}
		r.Dialling = true
		r.SetNextDial(time.Time{})
		c.set.SetState(now, r, relations.Connecting, "dialling")
		c.rd.Dials = append(c.rd.Dials, Dial{Peer: r.Peer, Addrs: r.Addrs})
	}
}

// handshakeTimeouts closes channels whose handshake did not finish in time.
func (c *Core) handshakeTimeouts(now time.Time) {
	var late []string
	for peer, dl := range c.pendingIn {
		if now.After(dl) {
			late = append(late, peer)
		}
	}
	slices.Sort(late) // map order would make simulations depend on luck
	for _, peer := range late {
		c.notPending(peer)
		c.log.Warn("no hello on inbound channel, closing", "peer", text.ShortPeer(peer))
		c.closeChan(peer, "no hello within the handshake timeout")
	}
	for _, r := range c.set.Superiors() {
		if r.State == relations.Connecting && !r.HandshakeDeadline().IsZero() && now.After(r.HandshakeDeadline()) {
			r.LastError = "no welcome within the handshake timeout"
			c.rd.Closes = append(c.rd.Closes, Close{Peer: r.Peer, Reason: r.LastError, Dead: true})
			c.set.SetState(now, r, relations.Down, r.LastError)
			c.scheduleRedial(now, r)
		}
	}
}

// heartbeats sends the heartbeats that are due. Inferiors get our ancestor
// chain with every heartbeat.
func (c *Core) heartbeats(now time.Time) {
	var chain []*wire.Ancestor
	for _, r := range c.set.All() {
		if !r.HeartbeatDue(now, c.cfg.HeartbeatInterval) {
			continue
		}
		if r.Role == relations.Inferior && chain == nil {
			var buf [8]relations.Ancestor
			chain = c.chainToPB(c.set.AppendAncestors(buf[:0]))
		}
		c.sendBeat(now, r, chain)
	}
}

// chainToPB is anc as sent in heartbeats: the chain sent last if it is
// the same, so that a manager at rest builds it once, not once a beat.
func (c *Core) chainToPB(anc []relations.Ancestor) []*wire.Ancestor {
	if c.chainPB == nil || !sameChainPB(c.chainPB, anc) {
		c.chainPB = ancestorsToPB(anc)
	}
	return c.chainPB
}

// beatMsg is a heartbeat's envelope, its body and the heartbeat in one
// allocation instead of three (a simulated grid at rest sends little else).
type beatMsg struct {
	env  wire.Envelope
	body wire.Envelope_Heartbeat
	hb   wire.Heartbeat
}

func (c *Core) sendBeat(now time.Time, r *relations.Relation, chain []*wire.Ancestor) {
	b := r.NextBeat(now)
	m := &beatMsg{}
	hb := &m.hb
	hb.Seq, hb.EchoSeq, hb.EchoHoldUs = b.Seq, b.EchoSeq, uint64(b.Hold/time.Microsecond)
	hb.IntervalMs = uint32(c.cfg.HeartbeatInterval / time.Millisecond)
	if r.Role == relations.Inferior {
		hb.Ancestors, hb.HasAncestors = chain, true
	}
	m.body.Heartbeat = hb
	m.env.Body = &m.body
	c.send(r.Peer, &m.env)
	c.metrics.Heartbeat(true)
}

// pushChain sends an immediate heartbeat to every live inferior when our
// ancestor chain changed, so that chains propagate down without waiting a
// heartbeat interval per level.
func (c *Core) pushChain(now time.Time) {
	var buf [8]relations.Ancestor
	anc := c.set.AppendAncestors(buf[:0])
	h := chainHash(anc)
	if h == c.lastChain {
		return
	}
	c.lastChain = h
	var chain []*wire.Ancestor
	for _, r := range c.set.Inferiors() {
		if r.State.Live() {
			if chain == nil {
				chain = c.chainToPB(anc)
			}
			c.sendBeat(now, r, chain)
		}
	}
}

func (c *Core) onHeartbeat(now time.Time, r *relations.Relation, hb *wire.Heartbeat) error {
	c.metrics.Heartbeat(false)
	r.OnBeat(now, relations.Beat{Seq: hb.Seq, EchoSeq: hb.EchoSeq, Hold: time.Duration(hb.EchoHoldUs) * time.Microsecond})
	r.PeerInterval = min(time.Duration(hb.IntervalMs)*time.Millisecond, time.Hour)
	if r.State == relations.Suspect {
		if ch, ok := c.set.SetState(now, r, relations.Up, "heard again"); ok {
			c.onChange(now, ch)
		}
	}
	if r.Role != relations.Superior || !hb.HasAncestors {
		return nil
	}
	anc := r.Ancestors // the same chain as before, most of the time
	if anc == nil || !sameChainPB(hb.Ancestors, anc) {
		anc = ancestorsFromPB(hb.Ancestors)
	}
	if err := c.set.CheckSuperiorChain(r.Peer, anc); err != nil {
		// The chain shows a cycle (two managers took each other as
		// superiors at the same time). Leave this superior; the redial
		// after backoff is refused or accepted on fresh chains.
		why := text.Human(err)
		c.send(r.Peer, &wire.Envelope{Body: &wire.Envelope_Goodbye{Goodbye: &wire.Goodbye{Reason: why}}})
		r.LastError = why
		c.lost(now, r, why)
		return nil
	}
	if !sameChain(anc, r.Ancestors) {
		c.relationsChanged() // saved with the superior: the candidates after a restart
	}
	r.Ancestors = anc
	c.pushChain(now)
	return nil
}

func (c *Core) onGoodbye(now time.Time, r *relations.Relation, g *wire.Goodbye) {
	reason := g.GetReason()
	cause := "goodbye: " + reason
	if g.GetRemoved() && r.Role == relations.Superior && r.Trial == "" {
		c.fo.removedBySuperior(now, r, reason)
		return
	}
	r.LastError = cause
	if r.Role == relations.Inferior && !r.Configured {
		// It left on purpose; forget it.
		c.event(now, r.Peer, r.DisplayName(), "inferior left: "+reason)
		c.log.Info("inferior left", "peer", r.DisplayName(), "reason", reason)
		c.closeChan(r.Peer, cause)
		c.removeRelation(now, r, "down")
		return
	}
	wasSuperior := r.Role == relations.Superior
	c.lost(now, r, cause)
	if wasSuperior {
		c.fo.superiorGone(now, r, cause)
	}
}
