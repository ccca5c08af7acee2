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
	maxEvents     = 64   // relation events kept for status
	maxOps        = 4096 // concurrent tree and ping operations
	seenTreeTTL   = time.Minute
	maxSeenTrees  = 1 << 16
	minHopBudget  = 2 * time.Millisecond
	defaultPingTO = 5 * time.Second
)

// Core is the protocol state machine of one grid manager. It does no I/O:
// the runtime feeds it what happened (Start, Tick, Connected, Disconnected,
// DialFailed, Step, ClientStep), each with the current time, and after each
// call takes what the Core wants done with Ready. One goroutine owns a Core;
// it is not safe for concurrent use.
type Core struct {
	cfg   Config
	self  string
	addrs []string
	rng   *rand.Rand
	log   *slog.Logger
	set   *relations.Set
	live  relations.Liveness

	started time.Time
	now     time.Time
	nextID  uint64

	pendingIn   map[string]time.Time // inbound channels awaiting Hello → deadline
	ops         []*op                // operations in flight, oldest first
	byEnv       map[uint64]*op       // our request envelope id → operation
	seenTrees   *seenSet             // tree request ids seen lately
	seenQueries *seenSet             // query ids seen lately
	host        HostValues           // from the runtime (SetHost)
	vals        query.Values         // query attributes now (values(), refreshed by SetHost)
	policy      *query.Program       // the owner's policy; nil: none
	exprs       *query.Cache         // compiled requirements and ranks
	lastChain   string               // fingerprint of the ancestors last sent down
	ledger      *reservation.Ledger  // reservations of this manager's resources
	memAvail    int64                // memory available on the host, before reservations
	storeErr    string               // set when the store failed: no more reservation changes
	events      []Event
	stopping    bool
	failovers   map[string]*failover // failed superior's peer → search for its replacement
	floods      []*adminFlood        // --all commands collecting answers
	floodByEnv  map[uint64]*adminFlood
	adminWaits  map[string]*adminCall // peer waited on → command (add-superior, reparent, add-inferior)
	invites     map[string]*adminCall // peer invited (add-inferior) → command
	removedBy   map[string]bool       // superiors that removed us: never candidates again
	plugins     map[uint64]*adminCall // plugin calls running in the runtime
	nextPlugin  uint64
	drained     bool             // refuse new reservations
	unknownMsgs uint64           // messages from relations with a body this version does not know
	relDirty    bool             // superiors changed since the last Ready
	saved       *relations.Saved // superiors to restore at Start

	rd Ready
}

// Ready is what the Core asks the runtime to do. The runtime performs it in
// this order: send Messages; write Persist to the reservation store and
// only then send Client messages (in order per peer or session) — and hold
// back later Client messages too while a write is in progress, so that no
// answer ever tells of a reservation a crash could lose; then Closes (after
// flushing what was queued for that peer), then Dials. Events are
// informational.
type Ready struct {
	Persist reservation.Batch
	// Relations, when set, are the superiors to save (atomically) in the
	// data dir, for the next start; the runtime writes the latest one.
	Relations *relations.Saved
	Messages  []Message
	Client    []ClientMessage
	Closes    []Close
	Dials     []Dial
	Events    []Event
	// Audit are admin commands that asked for a change (accepted or
	// refused), to append to the audit log.
	Audit []AuditRecord
	// Plugins are admin commands to run as plugins; report each with
	// PluginDone.
	Plugins []PluginCall
	// Config, when set, is the config after a set command: the runtime
	// applies what it owns (tick interval, log level).
	Config *Config
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
func NewCore(cfg Config, self string, addrs []string, rng *rand.Rand, log *slog.Logger) *Core {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Core{
		cfg:         cfg,
		self:        self,
		addrs:       addrs,
		rng:         rng,
		log:         log.With("manager", cfg.Name),
		set:         relations.NewSet(self, cfg.Name),
		live:        cfg.Liveness(),
		pendingIn:   make(map[string]time.Time),
		byEnv:       make(map[uint64]*op),
		seenTrees:   newSeenSet(seenTreeTTL, maxSeenTrees),
		seenQueries: newSeenSet(seenQueryTTL, maxSeenQueries),
		policy:      cfg.policy,
		exprs:       query.NewCache(exprCacheSize),
		ledger:      newLedger(&cfg, self),
		failovers:   make(map[string]*failover),
		floodByEnv:  make(map[uint64]*adminFlood),
		adminWaits:  make(map[string]*adminCall),
		invites:     make(map[string]*adminCall),
		removedBy:   make(map[string]bool),
		plugins:     make(map[uint64]*adminCall),
	}
	c.vals = c.values()
	return c
}

// Relations exposes the relation set for inspection (tests, status). The
// caller must not change it.
func (c *Core) Relations() *relations.Set { return c.set }

// Self is the manager's peer id.
func (c *Core) Self() string { return c.self }

// Name is the manager's name.
func (c *Core) Name() string { return c.cfg.Name }

// HasReady reports whether Ready has anything.
func (c *Core) HasReady() bool {
	r := &c.rd
	return len(r.Messages)+len(r.Client)+len(r.Closes)+len(r.Dials)+len(r.Events)+len(r.Audit)+len(r.Plugins) > 0 ||
		r.Config != nil || r.Shutdown != "" || c.ledger.Pending() || c.relDirty
}

// Ready hands over what the Core wants done and clears it.
func (c *Core) Ready() Ready {
	if c.ledger.Pending() {
		c.rd.Persist = c.ledger.TakeBatch()
	}
	if c.relDirty {
		c.rd.Relations = c.set.SaveSuperiors(c.cfg.Superiors)
		c.relDirty = false
	}
	rd := c.rd
	c.rd = Ready{}
	return rd
}

// Start begins the manager's life at now: it registers the superiors (the
// saved ones, see RestoreRelations, else the configured ones) and dials
// them. A superior that is this manager is skipped with an error log.
func (c *Core) Start(now time.Time) {
	c.started, c.now = now, now
	c.startSuperiors(now)
	c.dialDue(now)
}

// AddSuperior adds a superior at runtime and dials it. The superior refuses
// if we are among its ancestors (the hello carries our chain and it knows
// its own); the refusal shows in the relation's LastError.
func (c *Core) AddSuperior(now time.Time, pa relations.PeerAddrs) error {
	c.now = now
	if _, err := c.set.AddSuperior(now, pa, false, c.backoff()); err != nil {
		return err
	}
	c.relationsChanged()
	c.dialDue(now)
	return nil
}

// Stop says goodbye on every live relation and closes every channel.
func (c *Core) Stop(now time.Time, reason string) {
	c.now = now
	c.stopping = true
	for _, r := range c.set.All() {
		if r.State.Live() {
			c.send(r.Peer, &wire.Envelope{Body: &wire.Envelope_Goodbye{Goodbye: &wire.Goodbye{Reason: reason}}})
		}
		c.closeChan(r.Peer, reason)
	}
}

// Tick advances the Core's clock: dials that are due, handshake timeouts,
// the failure detector, heartbeats and operation deadlines.
func (c *Core) Tick(now time.Time) {
	c.now = now
	c.handshakeTimeouts(now)
	for _, ch := range c.set.Check(now, c.live) {
		if ch.To == relations.Down {
			c.rd.Closes = append(c.rd.Closes, Close{Peer: ch.Peer, Reason: ch.Cause, Dead: true})
		}
		c.onChange(now, ch)
	}
	if !c.stopping {
		c.failoverTick(now)
	}
	c.heartbeats(now)
	c.expireOps(now)
	c.expireAdmin(now)
	c.expireReservations(now)
	c.dialDue(now)
}

// Connected reports that a mesh channel to peer is open: outbound when we
// dialled it (the peer is a superior), inbound when it dialled us.
func (c *Core) Connected(now time.Time, peer string, outbound bool) {
	c.now = now
	if !outbound {
		c.pendingIn[peer] = now.Add(c.cfg.HandshakeTimeout)
		return
	}
	r := c.set.Get(peer)
	if (r == nil || r.Role != relations.Superior) && !c.stopping && c.inviteConnected(peer) {
		return
	}
	if r == nil || r.Role != relations.Superior || c.stopping {
		c.closeChan(peer, "not a superior of this manager")
		return
	}
	r.Dialling = false
	r.HandshakeDeadline = now.Add(c.cfg.HandshakeTimeout)
	r.StartProbe(now)
	c.send(peer, &wire.Envelope{Body: &wire.Envelope_Hello{Hello: &wire.Hello{
		ProtocolVersion: ProtocolVersion,
		Name:            c.cfg.Name,
		Role:            wire.Role_ROLE_INFERIOR,
		Addrs:           c.addrs,
		Ancestors:       ancestorsToPB(c.set.Ancestors()),
		Version:         c.cfg.Version,
	}}})
}

// Disconnected reports that the mesh channel to peer closed or failed.
func (c *Core) Disconnected(now time.Time, peer string, reason string) {
	c.now = now
	delete(c.pendingIn, peer)
	// An invite's channel may close before its answer is read (the
	// invitee's hello on a new channel replaces it): the command then
	// completes with that hello, or times out.
	delete(c.invites, peer)
	r := c.set.Get(peer)
	if r == nil {
		return
	}
	r.Dialling = false
	r.LastError = "channel lost: " + reason
	c.lost(now, r, r.LastError)
}

// DialFailed reports that a Dial did not produce a channel.
func (c *Core) DialFailed(now time.Time, peer string, reason string) {
	c.now = now
	if call := c.invites[peer]; call != nil {
		delete(c.invites, peer)
		delete(c.adminWaits, peer)
		c.abandonWait(now, call, "dial failed: "+firstLine(reason))
	}
	r := c.set.Get(peer)
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
	c.now = now
	if num := unknownBody(env); num != 0 && c.pendingIn[peer].IsZero() && c.invites[peer] == nil {
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
	if ir := env.GetInviteReply(); ir != nil && c.invites[peer] != nil {
		c.onInviteReply(now, peer, ir)
		return nil
	}
	r := c.set.Get(peer)
	if r == nil {
		c.closeChan(peer, "no relation")
		return fmt.Errorf("%w: %T from %s, which is not a relation", ErrProtocol, env.Body, relations.ShortPeer(peer))
	}
	if r.Role == relations.Superior && r.State == relations.Connecting && !r.HandshakeDeadline.IsZero() {
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
	case *wire.Envelope_AdminReply:
		return c.onAdminReply(now, r, env.ReplyTo, b.AdminReply)
	case *wire.Envelope_TreeReply:
		return c.onTreeReply(now, r, env.ReplyTo, b.TreeReply)
	case *wire.Envelope_PingReply:
		return c.onPingReply(now, r, env.ReplyTo)
	case *wire.Envelope_QueryReply:
		return c.onQueryReply(now, r, env.ReplyTo, b.QueryReply)
	case *wire.Envelope_Error:
		return c.onErrorReply(now, r, env.ReplyTo, b.Error)
	case *wire.Envelope_Hello, *wire.Envelope_Welcome, *wire.Envelope_Refuse, *wire.Envelope_Invite, *wire.Envelope_InviteReply:
		err := fmt.Errorf("%w: %T from %s after the handshake", ErrProtocol, env.Body, r.DisplayName())
		c.closeChan(peer, err.Error())
		c.forget(now, peer, err.Error())
		return err
	}
	return c.request(now, origin{peer: peer, id: env.Id}, env)
}

// ClientStep handles one request from a client session. client is the
// client's peer id as the transport authenticated it (the manager's own id
// for in-process requests); reservations are held in its name.
func (c *Core) ClientStep(now time.Time, session uint64, client string, env *wire.Envelope) error {
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
	if num := unknownBody(env); num != 0 {
		c.replyErr(origin{session: session, id: env.Id}, wire.ErrorReply_CODE_UNSUPPORTED, fmt.Sprintf(
			"%s (gridmgr %s) does not know this request (envelope field %d); it may come from a newer client", c.cfg.Name, c.cfg.Version, num))
		return fmt.Errorf("%w: unknown request body (field %d)", ErrBadMessage, num)
	}
	if err := validateEnvelope(env); err != nil {
		c.replyErr(origin{session: session, id: env.GetId()}, wire.ErrorReply_CODE_BAD_REQUEST, strings.TrimPrefix(err.Error(), ErrBadMessage.Error()+": "))
		return err
	}
	o := origin{session: session, client: client, id: env.Id}
	switch b := env.Body.(type) {
	case *wire.Envelope_ReserveRequest:
		c.onReserve(now, o, b.ReserveRequest)
		return nil
	case *wire.Envelope_ReservationOp:
		c.onReservationOp(now, o, b.ReservationOp)
		return nil
	case *wire.Envelope_ReservationsRequest:
		c.onReservations(o, b.ReservationsRequest)
		return nil
	}
	switch env.Body.(type) {
	case *wire.Envelope_Hello, *wire.Envelope_Welcome, *wire.Envelope_Refuse, *wire.Envelope_Heartbeat,
		*wire.Envelope_Goodbye, *wire.Envelope_TreeReply, *wire.Envelope_PingReply, *wire.Envelope_QueryReply,
		*wire.Envelope_AdminReply, *wire.Envelope_Invite, *wire.Envelope_InviteReply:
		err := fmt.Errorf("%w: %T is a mesh message, not a client request", ErrBadMessage, env.Body)
		c.replyErr(origin{session: session, id: env.Id}, wire.ErrorReply_CODE_BAD_REQUEST, err.Error())
		return err
	}
	return c.request(now, origin{session: session, client: client, id: env.Id}, env)
}

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
			"%s (gridmgr %s) does not know this request (envelope field %d)", c.cfg.Name, c.cfg.Version, num))
	}
}

// request handles what both clients and related managers may ask.
func (c *Core) request(now time.Time, o origin, env *wire.Envelope) error {
	switch b := env.Body.(type) {
	case *wire.Envelope_StatusRequest:
		c.reply(o, &wire.Envelope{Body: &wire.Envelope_StatusReply{StatusReply: c.status(now)}})
	case *wire.Envelope_TreeRequest:
		c.startTree(now, o, b.TreeRequest)
	case *wire.Envelope_PingRequest:
		c.startPing(now, o, b.PingRequest)
	case *wire.Envelope_QueryRequest:
		c.startQuery(now, o, b.QueryRequest)
	case *wire.Envelope_ResourcesRequest:
		c.reply(o, &wire.Envelope{Body: &wire.Envelope_ResourcesReply{ResourcesReply: c.resources(now)}})
	case *wire.Envelope_AdminRequest:
		c.onAdmin(now, o, b.AdminRequest, o.peer)
	default:
		if env.Id != 0 {
			c.replyErr(o, wire.ErrorReply_CODE_UNSUPPORTED, fmt.Sprintf("request type %T is not supported by %s", env.Body, c.cfg.Version))
		}
		return fmt.Errorf("%w: unsupported body %T", ErrBadMessage, env.Body)
	}
	return nil
}

// origin is who asked: a related manager (peer) or a client session (and
// the client's peer id).
type origin struct {
	peer    string
	session uint64
	client  string
	id      uint64 // their envelope id, echoed as reply_to
	// call: the answer goes to an admin command (rendered as its text).
	call  *adminCall
	flood *adminFlood
}

func (c *Core) reply(o origin, env *wire.Envelope) {
	if o.call != nil {
		c.adminResult(o.call, env)
		return
	}
	if o.id == 0 {
		return // the asker wants no answer
	}
	env.ReplyTo = o.id
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

// onChange logs a relation state change and reacts to Down.
func (c *Core) onChange(now time.Time, ch relations.Change) {
	what := fmt.Sprintf("%s %s → %s: %s", ch.Role, ch.From, ch.To, ch.Cause)
	c.addEvent(Event{At: now, Peer: ch.Peer, Name: ch.Name, What: what, Role: ch.Role, State: ch.To})
	lvl := slog.LevelInfo
	if ch.To == relations.Down || ch.To == relations.Suspect {
		lvl = slog.LevelWarn
	}
	c.log.Log(context.Background(), lvl, "relation "+ch.To.String(), "role", ch.Role.String(), "peer", ch.Name, "from", ch.From.String(), "cause", ch.Cause)
	if ch.To == relations.Down {
		c.closeChan(ch.Peer, ch.Cause)
		c.failOps(ch.Peer, "down")
		c.failAdmin(ch.Peer)
		r := c.set.Get(ch.Peer)
		if r != nil && c.set.RestoreSuperior(now, r) {
			c.log.Info("configured superior is free again, will dial it", "peer", r.DisplayName())
		}
		if r != nil && r.Role == relations.Superior {
			c.scheduleRedial(now, r)
			c.pushChain(now)
		}
	}
}

// lost handles the end of a relation's channel.
func (c *Core) lost(now time.Time, r *relations.Relation, cause string) {
	ch, ok := c.set.SetState(now, r, relations.Down, cause)
	if ok {
		c.onChange(now, ch)
		return
	}
	if r.Role == relations.Superior && r.NextDial.IsZero() && !r.Dialling {
		c.scheduleRedial(now, r)
	}
}

// forget drops a peer whose message was malformed: its channel is closed
// (by the caller) and the relation goes down like a lost channel.
func (c *Core) forget(now time.Time, peer, cause string) {
	delete(c.pendingIn, peer)
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
		c.trialFailed(now, r)
		return
	}
	if c.adminSuperiorFailed(now, r) {
		return // an admin's add-superior that did not work: undone
	}
	d, newStep := r.Backoff.Next(c.rng)
	r.NextDial = now.Add(d)
	r.Attempts++
	if newStep {
		addr := ""
		if len(r.Addrs) > 0 {
			addr = r.Addrs[0]
		}
		c.log.Warn("superior not up, will retry", "peer", r.DisplayName(), "addr", addr, "attempt", r.Attempts,
			"retry_in", d.Round(time.Millisecond).String(), "err", r.LastError)
	}
}

// dialDue emits dials for superiors whose retry time has come.
func (c *Core) dialDue(now time.Time) {
	if c.stopping {
		return
	}
	for _, r := range c.set.Superiors() {
		if r.Dialling || r.State.Live() || r.NextDial.IsZero() || now.Before(r.NextDial) {
			continue
		}
		if r.State == relations.Connecting && !r.HandshakeDeadline.IsZero() {
			continue // handshake in progress
		}
		r.Dialling = true
		r.NextDial = time.Time{}
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
		delete(c.pendingIn, peer)
		c.log.Warn("no hello on inbound channel, closing", "peer", relations.ShortPeer(peer))
		c.closeChan(peer, "no hello within the handshake timeout")
	}
	for _, r := range c.set.Superiors() {
		if r.State == relations.Connecting && !r.HandshakeDeadline.IsZero() && now.After(r.HandshakeDeadline) {
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
			chain = ancestorsToPB(c.set.Ancestors())
		}
		c.sendBeat(now, r, chain)
	}
}

func (c *Core) sendBeat(now time.Time, r *relations.Relation, chain []*wire.Ancestor) {
	b := r.NextBeat(now)
	hb := &wire.Heartbeat{Seq: b.Seq, EchoSeq: b.EchoSeq, EchoHoldUs: uint64(b.Hold / time.Microsecond),
		IntervalMs: uint32(c.cfg.HeartbeatInterval / time.Millisecond)}
	if r.Role == relations.Inferior {
		hb.Ancestors, hb.HasAncestors = chain, true
	}
	c.send(r.Peer, &wire.Envelope{Body: &wire.Envelope_Heartbeat{Heartbeat: hb}})
}

// pushChain sends an immediate heartbeat to every live inferior when our
// ancestor chain changed, so that chains propagate down without waiting a
// heartbeat interval per level.
func (c *Core) pushChain(now time.Time) {
	anc := c.set.Ancestors()
	fp := chainFingerprint(anc)
	if fp == c.lastChain {
		return
	}
	c.lastChain = fp
	chain := ancestorsToPB(anc)
	for _, r := range c.set.Inferiors() {
		if r.State.Live() {
			c.sendBeat(now, r, chain)
		}
	}
}

func (c *Core) onHeartbeat(now time.Time, r *relations.Relation, hb *wire.Heartbeat) error {
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
	anc := ancestorsFromPB(hb.Ancestors)
	if err := c.set.CheckSuperiorChain(r.Peer, anc); err != nil {
		// The chain shows a cycle (two managers took each other as
		// superiors at the same time). Leave this superior; the redial
		// after backoff is refused or accepted on fresh chains.
		c.send(r.Peer, &wire.Envelope{Body: &wire.Envelope_Goodbye{Goodbye: &wire.Goodbye{Reason: err.Error()}}})
		r.LastError = err.Error()
		c.lost(now, r, err.Error())
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
		c.removedBySuperior(now, r, reason)
		return
	}
	r.LastError = cause
	if r.Role == relations.Inferior && !r.Configured {
		// It left on purpose; forget it.
		c.set.Remove(r.Peer)
		c.event(now, r.Peer, r.DisplayName(), "inferior left: "+reason)
		c.log.Info("inferior left", "peer", r.DisplayName(), "reason", reason)
		c.closeChan(r.Peer, cause)
		c.failOps(r.Peer, "down")
		return
	}
	wasSuperior := r.Role == relations.Superior
	c.lost(now, r, cause)
	if wasSuperior {
		c.superiorGone(now, r, cause)
	}
}
