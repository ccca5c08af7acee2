package node

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// Transport is the seam between an Applier and the network. node/p2p
// implements it over libp2p, node/memnet over a simulated network. Every
// stream the transport opens or accepts gets a channel id, unique for the
// life of the transport; the Applier addresses streams by it. Methods are
// called from the goroutine that owns the Core and must not block: they
// queue work and report results back as Inputs.
type Transport interface {
	// Dial opens a mesh channel to peer and reports InputConnected
	// (Outbound) or InputDialFailed.
	Dial(peer string, addrs []string)
	// Send queues env on channel ch (mesh or client). On a channel that is
	// gone the envelope is dropped; the failure detector notices silence.
	Send(ch uint64, env *wire.Envelope)
	// CloseChannel flushes what was queued on ch and closes it. No
	// InputDisconnected follows for that channel.
	CloseChannel(ch uint64, reason string)
	// ClosePeer drops every connection to peer (after a channel was closed
	// because the peer went silent), so that a redial does not open its
	// stream on a half-open connection.
	ClosePeer(peer string)
}

// Storage is the seam between an Applier and the disk. It makes a Write
// durable off the owner's goroutine and reports it back as InputWritten, in
// the order the writes were given. The Applier gives it one Write at a
// time (the next only after the previous was reported), so Write need not
// queue; it must not block. It may report at once, from inside Write
// (node/memnet's disk does, to model an instant fsync).
type Storage interface {
	Write(w Write)
}

// Write is one durable write, the changes of one or more Readies merged:
// reservation changes (later changes of a record win), the latest saved
// superiors (nil: unchanged), and audit records to append.
type Write struct {
	Reservations reservation.Batch
	Relations    *relations.Saved
	Attributes   *SavedAttributes
	Audit        []AuditRecord
}

// Empty reports whether w has nothing to write.
func (w *Write) Empty() bool {
	return w.Reservations.Empty() && w.Relations == nil && w.Attributes == nil && len(w.Audit) == 0
}

func (w *Write) merge(rd *Ready) {
	if !rd.Persist.Empty() {
		w.Reservations.Changes = append(w.Reservations.Changes, rd.Persist.Changes...)
		w.Reservations.NextSeq = max(w.Reservations.NextSeq, rd.Persist.NextSeq)
	}
	if rd.Relations != nil {
		w.Relations = rd.Relations
	}
	if rd.Attributes != nil {
		w.Attributes = rd.Attributes
	}
	w.Audit = append(w.Audit, rd.Audit...)
}

// Written is what the Storage reports for one Write: an error per part.
// A reservation store that fails makes the Core refuse every further
// reservation change (StoreFailed); the others are logged.
type Written struct {
	Reservations error
	Relations    error
	Attributes   error
	Audit        error
}

// Hooks are what an Applier tells its runtime; each may be nil. They run
// in the owner's goroutine and must not block.
type Hooks struct {
	// Event sees every relation event.
	Event func(Event)
	// Config sees the config after an admin set (the runtime applies what
	// it owns: the log level).
	Config func(config.Config)
	// Shutdown: an admin asked the manager to stop, for this reason.
	Shutdown func(reason string)
	// Sent sees every mesh message the Applier hands to the Transport,
	// with the peer it goes to (client replies are not mesh messages and
	// are not shown). It runs where the Core runs (one holder at a time)
	// and must not block,
	// keep env or change it. Tests use it to count messages.
	Sent func(peer string, env *wire.Envelope)
	// Publish sees every monitoring event the Core produced, in order, to
	// publish on the event bus, held like client replies behind the
	// durable write of its Ready and of every Ready before it: an event
	// never tells of a change a crash could still lose, and the events of
	// one group commit come together (the bus signs them as one message).
	// Utilization samples, measurements rather than changes, do not wait.
	// It runs where the Core runs (one holder at a time) and must not
	// block (queue, and drop with a count when the queue is full).
	Publish func(*wire.Event)
}

// InputKind says what an Input reports.
type InputKind uint8

// Kinds of Input.
const (
	InputConnected    InputKind = iota + 1 // mesh channel Chan to Peer open (Outbound says who dialled)
	InputDisconnected                      // mesh channel Chan closed or failed (Err says why)
	InputDialFailed                        // a Dial to Peer failed (Err says why)
	InputMessage                           // Env arrived from Peer on mesh channel Chan
	InputClient                            // Env arrived on client channel Chan from client Peer
	InputHost                              // fresh host values in Host
	InputCallDone                          // a Call ended (Done), reported by its Runner
	InputWritten                           // the Storage finished the Write it was given (Written)
	InputApps                              // the application instances here (Apps, or AppList)
	InputObserved                          // a monitoring event from the event bus (Event)
)

// Input is something the runtime reports to an Applier. For one channel
// the transport reports Connected first, then its messages in order, then
// at most one Disconnected.
type Input struct {
	Kind     InputKind
	Peer     string
	Chan     uint64
	Outbound bool
	Env      *wire.Envelope
	Err      string
	Host     *HostValues // InputHost: the fresh values (a pointer: see TestInputIsSmall)
	// InputCallDone (made by Call.Done)
	Done CallDone
	// InputWritten
	Written Written
	// InputApps: AppList, when set, is every instance (ReportApps);
	// else Apps, the counts only (SetApps).
	Apps    map[string]query.AppCount
	AppList []*wire.AppInstance
	// InputObserved
	Event *wire.Event
}

// LocalSessionBit marks session ids of in-process requests
// (Applier.Request); transports must allocate channel ids below it.
const LocalSessionBit = 1 << 63

// Applier carries out what a Core asks for, the same way under every
// runtime: node.Driver (libp2p, the wall clock) and node/memnet (a
// simulated network, a virtual clock) both feed it Inputs and call Flush.
// It keeps one mesh channel per peer — a new channel replaces the old one,
// which is closed and reported to the Core as lost, and anything from a
// replaced channel is ignored — and it holds client replies behind the
// durable write they depend on: a Ready's reservation changes, saved
// superiors and audit records go to the Storage, and that Ready's client
// replies (and every later one) leave only once the write was reported;
// so do its monitoring events (Hooks.Publish). Writes that queue up
// while one is in flight go together in the next (group commit). One
// holder at a time owns an Applier and its Core (the Driver's lock).
type Applier struct {
	core  *Core
	tr    Transport
	st    Storage           // nil: nothing is durable; writes complete at once
	run   [callKinds]Runner // by kind; nil: none
	hooks Hooks
	log   *slog.Logger

	mesh      meshChans // peer → its current mesh channel
	local     map[uint64]chan *wire.Envelope
	nextLocal uint64

	writing  bool            // a Write is with the Storage
	flushing bool            // in Flush: pubOut goes at its end, in the documented order
	queued   Write           // for the next Write
	heldNow  []ClientMessage // replies waiting for the write in flight
	heldNext []ClientMessage // replies waiting for the next write
	pubNow   []*wire.Event   // events waiting for the write in flight
	pubNext  []*wire.Event   // events waiting for the next write
	pubOut   []*wire.Event   // events free to go, at the end of Flush or of a reported write
}

// NewApplier returns an Applier for core over tr. st may be nil. It has no
// Runner: give it one per kind of Call the runtime serves (SetRunner).
func NewApplier(core *Core, tr Transport, st Storage, hooks Hooks, log *slog.Logger) *Applier {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Applier{
		core:  core,
		tr:    tr,
		st:    st,
		hooks: hooks,
		log:   log.With("manager", core.Name()),
	}
}

// SetRunner gives the Applier the runner of the Calls of kind (nil: none).
// A call of a kind with no runner is answered at once as unserved (no
// plugins, no applications, no event archive).
func (a *Applier) SetRunner(kind CallKind, r Runner) {
	if kind >= callKinds {
		panic(fmt.Sprintf("node: SetRunner: no call kind %d", kind))
	}
	a.run[kind] = r
}

// Core is the Core the Applier drives.
func (a *Applier) Core() *Core { return a.core }

// Writing reports whether a durable write is in flight or queued (a
// stopping runtime waits for it: what was granted must be on disk, and
// its answers sent, before the manager goes).
func (a *Applier) Writing() bool { return a.writing || !a.queued.Empty() }

// Handle feeds one input to the Core.
func (a *Applier) Handle(now time.Time, in Input) {
	c := a.core
	switch in.Kind {
	case InputHost:
		if in.Host != nil {
			c.SetHost(now, *in.Host)
		}
	case InputConnected:
		if old, ok := a.mesh.get(in.Peer); ok && old != in.Chan {
			a.tr.CloseChannel(old, "replaced by a new channel")
			c.Disconnected(now, in.Peer, "replaced by a new channel")
		}
		a.mesh.set(in.Peer, in.Chan)
		c.Connected(now, in.Peer, in.Outbound)
	case InputDisconnected:
		if ch, _ := a.mesh.get(in.Peer); ch != in.Chan {
			return
		}
		a.mesh.del(in.Peer)
		c.Disconnected(now, in.Peer, in.Err)
	case InputDialFailed:
		c.DialFailed(now, in.Peer, in.Err)
	case InputMessage:
		if ch, _ := a.mesh.get(in.Peer); ch != in.Chan {
			return
		}
		if err := c.Step(now, in.Peer, in.Env); err != nil {
			a.log.Warn("dropped message", "peer", text.ShortPeer(in.Peer), "err", err)
		}
	case InputClient:
		if err := c.ClientStep(now, in.Chan, in.Peer, in.Env); err != nil {
			a.log.Debug("client request", "chan", in.Chan, "err", err)
		}
	case InputCallDone:
		c.CallDone(now, in.Done)
	case InputWritten:
		a.written(now, in.Written)
	case InputApps:
		if in.AppList != nil {
			c.ReportApps(now, in.AppList)
		} else {
			c.SetApps(now, in.Apps)
		}
	case InputObserved:
		c.Observe(now, in.Event)
	}
}

// Request asks the Core in-process, exactly as a client session would;
// the answer (the final one, for --all) goes to reply, which must have
// room for it.
func (a *Applier) Request(now time.Time, env *wire.Envelope, reply chan *wire.Envelope) {
	a.RequestAs(now, a.core.Self(), env, reply)
}

// RequestAs is Request on behalf of client, a peer id the runtime
// authenticated (a stream of another protocol asking what that client
// may do).
func (a *Applier) RequestAs(now time.Time, client string, env *wire.Envelope, reply chan *wire.Envelope) {
	a.nextLocal++
	sid := LocalSessionBit | a.nextLocal
	if a.local == nil {
		a.local = make(map[uint64]chan *wire.Envelope)
	}
	a.local[sid] = reply
	if env.Id == 0 {
		env.Id = 1
	}
	if err := a.core.ClientStep(now, sid, client, env); err != nil {
		a.log.Debug("local request", "err", err)
	}
}

// Flush carries out the Core's Ready in the documented order: messages;
// the durable write (client replies held behind it); closes; dials; then
// calls, config, shutdown and events.
func (a *Applier) Flush(now time.Time) {
	c := a.core
	if !c.HasReady() {
		return
	}
	rd := c.Ready()
	for _, m := range rd.Messages {
		if ch, ok := a.mesh.get(m.To); ok {
			if a.hooks.Sent != nil {
				a.hooks.Sent(m.To, m.Env)
			}
			a.tr.Send(ch, m.Env)
		}
	}
	// Client replies wait for the write of this Ready (and any before
	// it); a write that completes at once sends them here.
	a.queued.merge(&rd)
	a.heldNext = append(a.heldNext, rd.Client...)
	for _, e := range rd.Publish {
		if e.Kind == wire.EventKind_EVENT_KIND_UTILIZATION {
			a.pubOut = append(a.pubOut, e) // a measurement, not a change: it does not wait for a slow disk
		} else {
			a.pubNext = append(a.pubNext, e)
		}
	}
	a.flushing = true
	a.startWrite(now)
	if !a.Writing() {
		a.sendClient(a.heldNext)
		a.heldNext = nil
		a.pubOut = append(a.pubOut, a.pubNext...)
		a.pubNext = nil
	}
	for _, cl := range rd.Closes {
		if ch, ok := a.mesh.get(cl.Peer); ok {
			a.mesh.del(cl.Peer)
			a.tr.CloseChannel(ch, cl.Reason)
		}
		if cl.Dead {
			a.tr.ClosePeer(cl.Peer)
		}
	}
	for _, d := range rd.Dials {
		a.tr.Dial(d.Peer, d.Addrs)
	}
	for _, call := range rd.Calls {
		var r Runner
		if call.Kind < callKinds {
			r = a.run[call.Kind]
		}
		switch {
		case r != nil:
			r.Run(call)
		case call.ID != 0:
			c.CallDone(now, CallDone{ID: call.ID, Kind: call.Kind, Err: unserved(call.Kind)})
		}
	}
	if rd.Config != nil && a.hooks.Config != nil {
		a.hooks.Config(*rd.Config)
	}
	if rd.Shutdown != "" && a.hooks.Shutdown != nil {
		a.hooks.Shutdown(rd.Shutdown)
	}
	if a.hooks.Event != nil {
		for _, e := range rd.Events {
			a.hooks.Event(e)
		}
	}
	a.flushing = false
	a.publishOut()
	if c.HasReady() {
		a.Flush(now) // a call with no runner answered at once
	}
}

// publishOut hands the events free to go to the Publish hook.
func (a *Applier) publishOut() {
	if a.hooks.Publish != nil {
		for _, e := range a.pubOut {
			a.hooks.Publish(e)
		}
	}
	clear(a.pubOut)
	a.pubOut = a.pubOut[:0]
}

func (a *Applier) sendClient(ms []ClientMessage) {
	for _, m := range ms {
		if m.Session&LocalSessionBit != 0 {
			if ar := m.Env.GetAdminReply(); ar != nil && ar.Partial {
				continue // in-process callers get the final --all reply only
			}
			if ch, ok := a.local[m.Session]; ok {
				delete(a.local, m.Session)
				ch <- m.Env // the caller made room: never blocks
			}
			continue
		}
		a.tr.Send(m.Session, m.Env)
	}
}

// startWrite hands the queued write to the Storage unless one is in
// flight. Without a Storage it completes at once.
func (a *Applier) startWrite(now time.Time) {
	if a.writing || a.queued.Empty() {
		return
	}
	w := a.queued
	a.queued = Write{}
	a.heldNow, a.heldNext = a.heldNext, nil
	a.pubNow, a.pubNext = a.pubNext, nil
	if a.st == nil {
		a.written(now, Written{})
		return
	}
	a.writing = true
	a.st.Write(w)
}

// written finishes a write: its replies go out (or, if the reservation
// store failed, errors in place of the reservation answers it would have
// made durable), and the next write starts.
func (a *Applier) written(now time.Time, res Written) {
	a.writing = false
	c := a.core
	if res.Reservations != nil {
		c.StoreFailed(now, res.Reservations)
		for i, m := range a.heldNow {
			if _, ok := m.Env.Body.(*wire.Envelope_ReservationReply); ok {
				a.heldNow[i].Env = &wire.Envelope{ReplyTo: m.Env.ReplyTo, Body: &wire.Envelope_Error{Error: &wire.ErrorReply{
					Code:    wire.ErrorReply_CODE_UNAVAILABLE,
					Message: c.Name() + ": could not make the reservation durable: " + res.Reservations.Error(),
				}}}
			}
		}
	}
	if res.Relations != nil {
		a.log.Error("could not save relations; a restart would start from the last saved ones", "err", res.Relations)
	}
	if res.Attributes != nil {
		a.log.Error("could not save the attributes set at runtime; a restart would go back to the last saved ones", "err", res.Attributes)
	}
	if res.Audit != nil {
		a.log.Error("could not write the audit log", "err", res.Audit)
	}
	a.sendClient(a.heldNow)
	a.heldNow = nil
	a.pubOut = append(a.pubOut, a.pubNow...)
	a.pubNow = nil
	if a.queued.Empty() {
		a.sendClient(a.heldNext)
		a.heldNext = nil
		a.pubOut = append(a.pubOut, a.pubNext...)
		a.pubNext = nil
	}
	a.startWrite(now)
	if !a.flushing {
		a.publishOut()
	}
}
