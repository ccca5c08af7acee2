package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// ErrStopped is returned by Driver.Request once the driver has stopped.
var ErrStopped = errors.New("node: manager stopped")

// Transport is the seam between a Driver and the network. node/p2p
// implements it over libp2p; memnet drives Cores without it. Every stream
// the transport opens or accepts gets a channel id, unique for the life of
// the transport; the driver addresses streams by it. Methods are called
// from the driver goroutine and must not block: they queue work and report
// results back through Driver.Deliver.
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
}

// PeerCloser is implemented by transports that can drop every connection
// to a peer (after a channel was closed because the peer went silent).
type PeerCloser interface {
	ClosePeer(peer string)
}

// InputKind says what an Input reports.
type InputKind uint8

// Kinds of Input.
const (
	InputConnected    InputKind = iota + 1 // mesh channel Chan to Peer open (Outbound says who dialled)
	InputDisconnected                      // mesh channel Chan closed or failed (Err says why)
	InputDialFailed                        // a Dial to Peer failed (Err says why)
	InputMessage                           // Env arrived from Peer on mesh channel Chan
	InputClient                            // Env arrived on client channel Chan
	InputHost                              // fresh host values in Host
	InputPluginDone                        // plugin call Plugin ended (Output, ExitCode, PluginErr)
)

// PluginRunner runs admin command plugins for the Driver. RunPlugin may
// block up to its own timeout; the Driver calls it on a goroutine of its
// own. An error wrapping ErrPluginNotFound means there is no such plugin.
type PluginRunner interface {
	RunPlugin(ctx context.Context, name string, args []string, stdin []byte) (output string, exitCode int, err error)
}

// Input is something the transport reports to the Driver. For one channel
// the transport reports Connected first, then its messages in order, then
// at most one Disconnected.
type Input struct {
	Kind     InputKind
	Peer     string
	Chan     uint64
	Outbound bool
	Env      *wire.Envelope
	Err      string
	Host     HostValues
	// InputPluginDone
	Plugin    uint64
	Output    string
	ExitCode  int
	PluginErr error
}

// LocalSessionBit marks session ids of in-process requests (Driver.Request);
// transports must allocate channel ids below it.
const LocalSessionBit = 1 << 63

// inboxSize bounds the queue of inputs; a full inbox blocks the stream
// readers, which pushes back on the senders.
const inboxSize = 4096

// Driver owns one Core and runs it in one goroutine: it feeds the Core
// inputs from the transport, wall-clock ticks and in-process requests, and
// carries out what the Core hands back.
type Driver struct {
	cfg   Config
	core  *Core
	tr    Transport
	log   *slog.Logger
	in    chan Input
	calls chan call
	done  chan struct{}

	local     map[uint64]chan *wire.Envelope
	nextLocal uint64
	mesh      map[string]uint64 // peer → its current mesh channel

	// OnEvent, if set before Run, is called in the driver goroutine for
	// each relation event. It must not block.
	OnEvent func(Event)
	// Sample, if set before Run, reads the host; Run calls it on its own
	// goroutine at start and every Config.HostRefresh, and the readings
	// reach the Core as InputHost.
	Sample func() HostValues
	// Store, if set before LoadStore and Run, keeps the reservations
	// durable: LoadStore restores the Core from it, and Run writes every
	// Persist batch to it before sending the client replies that follow.
	// Batches that queue up during one write go to disk together in the
	// next (group commit), so durability costs one write per burst, not
	// one per request. nil keeps reservations in memory only.
	Store reservation.Store
	// RelationsFile, if set before LoadRelations and Run, keeps the
	// superiors across restarts: LoadRelations restores them, and Run
	// rewrites the file atomically whenever they change (rarely: a
	// failover, an admin command), in the driver goroutine.
	RelationsFile string
	// AuditFile, if set before Run, receives one JSON line per admin
	// command that asked for a change (accepted or refused), appended and
	// synced.
	AuditFile string
	// Plugins, if set before Run, runs admin command plugins.
	Plugins PluginRunner
	// LogLevel, if set before Run, is changed by `set log_level`.
	LogLevel *slog.LevelVar

	tick     *time.Ticker
	shutdown chan string // a shutdown command asked to stop
	ctx      context.Context

	writes   chan []reservation.Batch // to the writer goroutine
	synced   chan error               // from it: the write finished
	syncing  bool                     // a write is in progress
	queued   []reservation.Batch      // batches for the next write
	heldNow  []ClientMessage          // replies waiting for the write in progress
	heldNext []ClientMessage          // replies waiting for the next write
}

type call struct {
	env   *wire.Envelope
	reply chan *wire.Envelope
}

// NewDriver returns a driver for a manager with peer id self listening on
// addrs. cfg must have passed Validate. Call Run to start it.
func NewDriver(cfg Config, self string, addrs []string, tr Transport, log *slog.Logger) *Driver {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	seed := rand.Uint64() // the only global randomness: the seed of the Core's own source
	core := NewCore(cfg, self, addrs, rand.New(rand.NewPCG(seed, seed>>1|1)), log)
	return &Driver{
		cfg:   cfg,
		core:  core,
		tr:    tr,
		log:   log.With("manager", cfg.Name),
		in:    make(chan Input, inboxSize),
		calls: make(chan call),
		done:  make(chan struct{}),
		local: make(map[uint64]chan *wire.Envelope),
		mesh:  make(map[string]uint64),
	}
}

// Deliver hands an input to the driver. It blocks while the inbox is full
// and returns false once the driver has stopped. Safe for concurrent use.
func (d *Driver) Deliver(in Input) bool {
	select {
	case d.in <- in:
		return true
	case <-d.done:
		return false
	}
}

// LoadStore restores the Core's reservations from Store. Call it once
// before Run; an error (an unreadable store) means the manager must not
// start, or it would forget reservations it granted.
func (d *Driver) LoadStore() error {
	if d.Store == nil {
		return nil
	}
	snap, err := d.Store.Load()
	if err != nil {
		return err
	}
	return d.core.Restore(time.Now(), snap)
}

// LoadRelations restores the superiors saved in RelationsFile by an
// earlier run. Call it once before Run. No file is fine (the properties
// file is the start); a file that cannot be parsed is an error naming it.
func (d *Driver) LoadRelations() error {
	if d.RelationsFile == "" {
		return nil
	}
	sv, err := ReadRelations(d.RelationsFile)
	if err != nil {
		return err
	}
	d.log.Info(d.core.RestoreRelations(sv), "file", d.RelationsFile)
	return nil
}

// Done is closed when Run has returned.
func (d *Driver) Done() <-chan struct{} { return d.done }

// Run runs the manager until ctx ends; then it says goodbye to every
// relation, hands the last messages to the transport and returns.
func (d *Driver) Run(ctx context.Context) error {
	defer close(d.done)
	if d.Sample != nil {
		go d.sampleLoop(ctx)
	}
	d.tick = time.NewTicker(d.cfg.TickInterval())
	defer d.tick.Stop()
	d.ctx = ctx
	d.shutdown = make(chan string, 1)
	if d.Store != nil {
		d.writes = make(chan []reservation.Batch, 1)
		d.synced = make(chan error, 1)
		go d.writer()
		defer close(d.writes)
	}
	d.core.Start(time.Now())
	d.flush()
	for {
		select {
		case err := <-d.synced:
			d.onSynced(err)
		case in := <-d.in:
			// Act on each input at once: every send is its own stream
			// write anyway, so holding Ready back for a batch would only
			// add latency.
			d.handle(in)
		case c := <-d.calls:
			d.nextLocal++
			sid := LocalSessionBit | d.nextLocal
			d.local[sid] = c.reply
			if c.env.Id == 0 {
				c.env.Id = 1
			}
			if err := d.core.ClientStep(time.Now(), sid, d.core.Self(), c.env); err != nil {
				d.log.Debug("local request", "err", err)
			}
		case <-d.tick.C:
			d.core.Tick(time.Now())
		case reason := <-d.shutdown:
			d.log.Warn("shutting down", "reason", reason)
			d.core.Stop(time.Now(), reason)
			d.flush()
			for d.syncing {
				d.onSynced(<-d.synced)
			}
			return nil
		case <-ctx.Done():
			d.core.Stop(time.Now(), "shutting down")
			d.flush()
			// Finish the writes: what was granted must be on disk, and its
			// answers sent, before the manager goes.
			for d.syncing {
				d.onSynced(<-d.synced)
			}
			return nil
		}
		d.flush()
	}
}

// handle feeds one input to the Core. It keeps one mesh channel per peer:
// a new channel replaces the old one (closed, and reported to the Core as
// lost), and anything from a replaced channel is ignored.
func (d *Driver) handle(in Input) {
	now := time.Now()
	switch in.Kind {
	case InputHost:
		d.core.SetHost(now, in.Host)
	case InputConnected:
		if old, ok := d.mesh[in.Peer]; ok && old != in.Chan {
			d.tr.CloseChannel(old, "replaced by a new channel")
			d.core.Disconnected(now, in.Peer, "replaced by a new channel")
		}
		d.mesh[in.Peer] = in.Chan
		d.core.Connected(now, in.Peer, in.Outbound)
	case InputDisconnected:
		if d.mesh[in.Peer] != in.Chan {
			return
		}
		delete(d.mesh, in.Peer)
		d.core.Disconnected(now, in.Peer, in.Err)
	case InputDialFailed:
		d.core.DialFailed(now, in.Peer, in.Err)
	case InputMessage:
		if d.mesh[in.Peer] != in.Chan {
			return
		}
		if err := d.core.Step(now, in.Peer, in.Env); err != nil {
			d.log.Warn("dropped message", "peer", in.Peer, "err", err)
		}
	case InputClient:
		if err := d.core.ClientStep(now, in.Chan, in.Peer, in.Env); err != nil {
			d.log.Debug("client request", "chan", in.Chan, "err", err)
		}
	case InputPluginDone:
		d.core.PluginDone(now, in.Plugin, in.Output, in.ExitCode, in.PluginErr)
	}
}

// admin carries out the admin parts of a Ready: audit lines, plugin
// runs, a changed config, a shutdown.
func (d *Driver) admin(rd *Ready) {
	if len(rd.Audit) > 0 && d.AuditFile != "" {
		if err := AppendAudit(d.AuditFile, rd.Audit); err != nil {
			d.log.Error("could not write the audit log", "file", d.AuditFile, "err", err)
		}
	}
	for _, p := range rd.Plugins {
		if d.Plugins == nil {
			d.core.PluginDone(time.Now(), p.ID, "", 0, fmt.Errorf("%w: this manager runs no plugins", ErrPluginNotFound))
			continue
		}
		go func() {
			out, code, err := d.Plugins.RunPlugin(d.ctx, p.Name, p.Args, p.Stdin)
			select {
			case d.in <- Input{Kind: InputPluginDone, Plugin: p.ID, Output: out, ExitCode: code, PluginErr: err}:
			case <-d.ctx.Done():
			}
		}()
	}
	if rd.Config != nil {
		old := d.cfg.TickInterval()
		d.cfg = *rd.Config
		if ti := d.cfg.TickInterval(); ti != old && d.tick != nil {
			d.tick.Reset(ti)
		}
		if d.LogLevel != nil {
			var l slog.Level
			if err := l.UnmarshalText([]byte(d.cfg.LogLevel)); err == nil {
				d.LogLevel.Set(l)
			}
		}
	}
	if rd.Shutdown != "" && d.shutdown != nil {
		select {
		case d.shutdown <- rd.Shutdown:
		default:
		}
	}
}

// flush carries out the Core's Ready in the documented order.
func (d *Driver) flush() {
	if !d.core.HasReady() {
		return
	}
	rd := d.core.Ready()
	for _, m := range rd.Messages {
		if ch, ok := d.mesh[m.To]; ok {
			d.tr.Send(ch, m.Env)
		}
	}
	if d.RelationsFile != "" && rd.Relations != nil {
		if err := WriteRelations(d.RelationsFile, rd.Relations); err != nil {
			d.log.Error("could not save relations; a restart would start from the last saved ones", "err", err)
		}
	}
	if d.Store != nil && !rd.Persist.Empty() {
		d.queued = append(d.queued, rd.Persist)
	}
	if d.syncing || len(d.queued) > 0 {
		d.heldNext = append(d.heldNext, rd.Client...)
	} else {
		d.sendClient(rd.Client)
	}
	for _, c := range rd.Closes {
		if ch, ok := d.mesh[c.Peer]; ok {
			delete(d.mesh, c.Peer)
			d.tr.CloseChannel(ch, c.Reason)
		}
		if pc, ok := d.tr.(PeerCloser); ok && c.Dead {
			pc.ClosePeer(c.Peer)
		}
	}
	for _, dl := range rd.Dials {
		d.tr.Dial(dl.Peer, dl.Addrs)
	}
	d.startWrite()
	d.admin(&rd)
	if d.OnEvent != nil {
		for _, e := range rd.Events {
			d.OnEvent(e)
		}
	}
}

func (d *Driver) sendClient(ms []ClientMessage) {
	for _, m := range ms {
		if m.Session&LocalSessionBit != 0 {
			if ar := m.Env.GetAdminReply(); ar != nil && ar.Partial {
				continue // in-process callers get the final --all reply only
			}
			if ch, ok := d.local[m.Session]; ok {
				delete(d.local, m.Session)
				ch <- m.Env // buffered: never blocks
			}
			continue
		}
		d.tr.Send(m.Session, m.Env)
	}
}

// startWrite hands the queued batches to the writer unless it is busy.
func (d *Driver) startWrite() {
	if d.syncing || len(d.queued) == 0 {
		return
	}
	d.syncing = true
	d.heldNow, d.heldNext = d.heldNext, nil
	d.writes <- d.queued // the writer is idle: never blocks
	d.queued = nil
}

// onSynced finishes a write: its replies go out (or, if the write failed,
// errors in place of the reservation answers it would have made durable),
// and the next write starts.
func (d *Driver) onSynced(err error) {
	d.syncing = false
	if err != nil {
		d.core.StoreFailed(time.Now(), err)
		for i, m := range d.heldNow {
			if _, ok := m.Env.Body.(*wire.Envelope_ReservationReply); ok {
				d.heldNow[i].Env = &wire.Envelope{ReplyTo: m.Env.ReplyTo, Body: &wire.Envelope_Error{Error: &wire.ErrorReply{
					Code:    wire.ErrorReply_CODE_UNAVAILABLE,
					Message: d.cfg.Name + ": could not make the reservation durable: " + err.Error(),
				}}}
			}
		}
	}
	d.sendClient(d.heldNow)
	d.heldNow = nil
	if len(d.queued) == 0 {
		d.sendClient(d.heldNext)
		d.heldNext = nil
	}
	d.startWrite()
}

// writer writes batches to the store, one merged batch per write.
func (d *Driver) writer() {
	for bs := range d.writes {
		d.synced <- d.Store.Write(mergeBatches(bs))
	}
}

// mergeBatches joins batches in order into one: later changes of a record
// come later and win.
func mergeBatches(bs []reservation.Batch) reservation.Batch {
	if len(bs) == 1 {
		return bs[0]
	}
	var out reservation.Batch
	for _, b := range bs {
		out.Changes = append(out.Changes, b.Changes...)
		out.NextSeq = max(out.NextSeq, b.NextSeq)
	}
	return out
}

// sampleLoop reads the host off the driver goroutine (reading /proc and
// sysfs is I/O) and delivers the readings.
func (d *Driver) sampleLoop(ctx context.Context) {
	// Utilisation needs two readings: take the second one soon, so that
	// queries do not see it unknown for a whole refresh interval.
	wait := min(time.Second, d.cfg.HostRefresh)
	for {
		if !d.Deliver(Input{Kind: InputHost, Host: d.Sample()}) {
			return
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
		wait = d.cfg.HostRefresh
	}
}

// Request asks the manager in-process, exactly as a client session would,
// and waits for the answer.
func (d *Driver) Request(ctx context.Context, env *wire.Envelope) (*wire.Envelope, error) {
	c := call{env: env, reply: make(chan *wire.Envelope, 1)}
	select {
	case d.calls <- c:
	case <-d.done:
		return nil, ErrStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-c.reply:
		return r, nil
	case <-d.done:
		return nil, ErrStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
