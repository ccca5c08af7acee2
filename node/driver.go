package node

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/wire"
)

// ErrStopped is returned by Driver.Request once the driver has stopped.
var ErrStopped = errors.New("node: manager stopped")

// PluginRunner runs admin command plugins for the Driver. RunPlugin may
// block up to its own timeout; the Driver calls it on a goroutine of its
// own. An error wrapping ErrPluginNotFound means there is no such plugin.
type PluginRunner interface {
	RunPlugin(ctx context.Context, name string, args []string, stdin []byte) (output string, exitCode int, err error)
}

// DriverOptions are what a Driver needs besides its Core and Transport.
// Every field may be left zero.
type DriverOptions struct {
	// Storage makes reservation changes, saved superiors and audit records
	// durable, off the driver goroutine (daemon implements it); nil keeps
	// everything in memory. It reports each write with Deliver.
	Storage Storage
	// Plugins runs admin command plugins; nil: none.
	Plugins PluginRunner
	// Sample reads the host; Run calls it on its own goroutine at start
	// and every Config.HostRefresh, and the readings reach the Core.
	Sample func() HostValues
	// OnEvent sees each relation event, where the Core runs (under the
	// driver's lock, on Run's goroutine or a stream reader's); it must not
	// block.
	OnEvent func(Event)
	// OnSend sees every mesh message handed to the transport (Hooks.Sent),
	// where the Core runs; it must not block, keep env or change it.
	OnSend func(peer string, env *wire.Envelope)
	// LogLevel, if set, is changed by `set log_level`.
	LogLevel *slog.LevelVar
	// Apps, if set, runs applications: the CallApp calls (it reports
	// through Deliver).
	Apps Runner
	// Publish, if set, sees every monitoring event the Core produces
	// (Hooks.Publish), where the Core runs; it must not block.
	Publish func(*wire.Event)
	// Metrics, if set, receives the Core's counts and timings.
	Metrics Metrics
	// Archive, if set, reads the event archive: the CallArchive calls (it
	// reports through Deliver).
	Archive Runner
	// Jobs, if set, keeps the job queue and does its work: the CallJob
	// calls (nil: the manager takes no jobs).
	Jobs Runner
}

// inboxSize bounds the queue of inputs; a full inbox blocks the stream
// readers, which pushes back on the senders.
const inboxSize = 4096

// maxIdle bounds how long an idle Driver sleeps between looks at its
// Core (it forgets old request ids then).
const maxIdle = time.Minute

// Driver owns one Core and runs it with the wall clock, one input at a
// time: it feeds the Core inputs from the transport, the storage, the host
// sampler and in-process requests through an Applier, and ticks it when
// NextDeadline says something is due (looking again at least every
// Config.TickInterval, so that inputs that bring a deadline forward are
// served within it). It never waits on a socket or a disk: the Transport
// and the Storage queue work and report back through Deliver.
//
// The Core runs under the driver's lock (mu), not on one goroutine: Run's
// loop takes it for the inputs queued in the inbox, the in-process
// requests and the ticks, and DeliverNow and Request take it to handle
// their input on the caller's own goroutine when the Core is free and
// nothing is queued, which saves a goroutine hand-off per message (a
// stream reader runs the Core on the frame it has just read). Inputs
// from one goroutine keep their order: DeliverNow handles at once only
// when nothing delivered earlier is still queued (queued counts what was
// sent to the inbox and not yet handled). Hooks (DriverOptions) run under
// the lock, one at a time, on whichever goroutine holds it.
type Driver struct {
	cfg   config.Config
	core  *Core
	a     *Applier
	opts  DriverOptions
	log   *slog.Logger
	in    chan Input
	calls chan call
	done  chan struct{}
	ctx   context.Context

	// mu is held while the Core, the Applier and the fields below it run.
	mu      sync.Mutex
	queued  atomic.Int64   // inputs sent to in and not yet handled
	running bool           // Run has started the Core and not stopped it
	timer   *time.Timer    // Run's wake-up
	armed   time.Time      // when timer fires
	turn    *turnTransport // nil: the transport writes each Send itself

	shutdown chan string // a shutdown command asked to stop

	// refresh is cfg.HostRefresh for the sampler's goroutine (the config
	// is the driver's, under mu; `set resources.refresh` changes it).
	refresh atomic.Int64
}

type call struct {
	as    string // "": the manager itself
	env   *wire.Envelope
	reply chan *wire.Envelope
}

// NewDriver returns a driver for a manager with peer id self listening on
// addrs. cfg must have passed Validate. Restore the Core (Core().Restore,
// Core().RestoreRelations) before Run; call Run to start it.
func NewDriver(cfg config.Config, self string, addrs []string, tr Transport, log *slog.Logger, opts DriverOptions) *Driver {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	seed := rand.Uint64() // the only global randomness: the seed of the Core's own source
	core := NewCore(cfg, self, addrs, rand.New(rand.NewPCG(seed, seed>>1|1)), log)
	d := &Driver{
		cfg:      cfg,
		core:     core,
		opts:     opts,
		log:      log.With("manager", core.Name()),
		in:       make(chan Input, inboxSize),
		calls:    make(chan call),
		done:     make(chan struct{}),
		shutdown: make(chan string, 1),
	}
	d.refresh.Store(int64(cfg.HostRefresh))
	if bt, ok := tr.(BatchTransport); ok {
		d.turn = &turnTransport{BatchTransport: bt}
		tr = d.turn
	}
	d.a = NewApplier(core, tr, opts.Storage, Hooks{
		Event:    opts.OnEvent,
		Config:   d.onConfig,
		Shutdown: d.onShutdown,
		Sent:     opts.OnSend,
		Publish:  opts.Publish,
	}, log)
	core.SetMetrics(opts.Metrics)
	if opts.Plugins != nil {
		d.a.SetRunner(CallPlugin, driverPlugins{d})
	}
	if opts.Jobs != nil {
		d.a.SetRunner(CallJob, opts.Jobs)
	}
	if opts.Archive != nil {
		d.a.SetRunner(CallArchive, opts.Archive)
	}
	if opts.Apps != nil {
		d.a.SetRunner(CallApp, opts.Apps)
	}
	return d
}

// Core is the driver's Core, for restoring it before Run (and for tests);
// once Run has started, only the driver may use it (under its lock).
func (d *Driver) Core() *Core { return d.core }

// Deliver hands an input to the driver. It blocks while the inbox is full
// and returns false once the driver has stopped. Safe for concurrent use.
func (d *Driver) Deliver(in Input) bool {
	d.queued.Add(1)
	select {
	case d.in <- in:
		return true
	case <-d.done:
		d.queued.Add(-1)
		return false
	}
}

// DeliverNow is Deliver for a goroutine that may run the Core itself (a
// stream reader): when the Core is free and nothing is queued, it
// handles in on the caller's goroutine, sends what that makes, and
// returns; otherwise it queues in as Deliver does. Inputs a goroutine
// hands over by DeliverNow and Deliver reach the Core in the order it
// handed them. It returns false once the driver has stopped.
func (d *Driver) DeliverNow(in Input) bool {
	if d.queued.Load() != 0 || !d.mu.TryLock() {
		return d.Deliver(in)
	}
	// Checked again under the lock: the loop may have taken an input
	// from the inbox that it has not handled yet.
	if !d.running || d.queued.Load() != 0 {
		d.mu.Unlock()
		return d.Deliver(in)
	}
	now := time.Now()
	d.a.Handle(now, in)
	d.settle(now, false)
	d.mu.Unlock()
	return true
}

// handle handles an input taken from the inbox; d.mu is held.
func (d *Driver) handle(now time.Time, in Input) {
	d.a.Handle(now, in)
	d.queued.Add(-1)
}

// BatchTransport is a Transport that can take what one turn of the
// driver sends and write it at the end of the turn, several messages for
// one channel in one write (node/p2p's Host): the driver hands the
// Applier a Transport whose Send calls Queue, and calls Push after every
// Flush with the channels queued on.
type BatchTransport interface {
	Transport
	// Queue is Send, except that nothing is written before Push.
	Queue(ch uint64, env *wire.Envelope)
	// Push writes (or has written) what Queue left on each channel of chs.
	Push(chs []uint64)
}

// turnTransport collects the channels Send queued on during a turn; only
// the holder of the driver's lock uses it.
type turnTransport struct {
	BatchTransport
	pending []uint64
}

func (t *turnTransport) Send(ch uint64, env *wire.Envelope) {
	t.Queue(ch, env)
	if n := len(t.pending); n == 0 || t.pending[n-1] != ch {
		t.pending = append(t.pending, ch)
	}
}

// flush has the Applier carry out what the Core made and the transport
// write what that queued; d.mu is held.
func (d *Driver) flush(now time.Time) {
	d.a.Flush(now)
	if t := d.turn; t != nil && len(t.pending) > 0 {
		t.Push(t.pending)
		t.pending = t.pending[:0]
	}
}

// settle sends what the Core made (Flush) and sets Run's timer: when the
// next deadline is due, and after an input (which may have brought one
// forward) within a tick interval at most. d.mu is held.
func (d *Driver) settle(now time.Time, ticked bool) {
	d.flush(now)
	if ticked || d.armed.Sub(now) > d.cfg.TickInterval() {
		w := d.wait(now)
		d.armed = now.Add(w)
		d.timer.Reset(w)
	} else if at := d.core.WakeAt(); !at.IsZero() && at.Before(d.armed) {
		// a module asked to be ticked sooner than the timer is set
		d.armed = at
		d.timer.Reset(max(at.Sub(now), 0))
	}
}

// Done is closed when Run has returned.
func (d *Driver) Done() <-chan struct{} { return d.done }

// Run runs the manager until ctx ends or a shutdown command; then it says
// goodbye to every relation, finishes the durable writes (what was granted
// must be on disk, and its answers sent, before the manager goes), hands
// the last messages to the transport and returns.
func (d *Driver) Run(ctx context.Context) error {
	defer close(d.done)
	d.ctx = ctx
	if d.opts.Sample != nil {
		go d.sampleLoop(ctx)
	}
	d.mu.Lock()
	now := time.Now()
	d.core.Start(now)
	d.flush(now)
	w := d.wait(now)
	d.armed = now.Add(w)
	d.timer = time.NewTimer(w)
	timer := d.timer
	defer timer.Stop()
	d.running = true
	d.mu.Unlock()
	for {
		select {
		case in := <-d.in:
			d.mu.Lock()
			now := time.Now()
			d.handle(now, in)
			d.settle(now, false)
			d.mu.Unlock()
		case c := <-d.calls:
			d.mu.Lock()
			d.request(c)
			d.mu.Unlock()
		case <-timer.C:
			d.mu.Lock()
			// Inputs already waiting came before this tick: handle them
			// first. Otherwise a busy loop (select picks among ready cases
			// at random) judges peers silent whose heartbeats sit in the
			// inbox, and turns every relation suspect at once.
			for n := len(d.in); n > 0; n-- {
				d.handle(time.Now(), <-d.in)
			}
			now := time.Now()
			if due := d.core.NextDeadline(now); !due.IsZero() && !now.Before(due) {
				d.core.Tick(now)
			}
			d.settle(now, true)
			d.mu.Unlock()
		case reason := <-d.shutdown:
			d.log.Warn("shutting down", "reason", reason)
			d.mu.Lock()
			d.stop(reason)
			d.mu.Unlock()
			return nil
		case <-ctx.Done():
			d.mu.Lock()
			d.stop("shutting down")
			d.mu.Unlock()
			return nil
		}
	}
}

// request hands an in-process request to the Core and sends what it
// made; d.mu is held.
func (d *Driver) request(c call) {
	now := time.Now()
	if c.as != "" {
		d.a.RequestAs(now, c.as, c.env, c.reply)
	} else {
		d.a.Request(now, c.env, c.reply)
	}
	d.settle(now, false)
}

// wait is how long to sleep before looking at the Core again: until its
// next deadline but no longer than a tick interval (a late tick is not
// held against the peers, but it is still late), not at all when
// something is due, and maxIdle when nothing is scheduled (an input that
// schedules something makes Run look again within a tick interval).
func (d *Driver) wait(now time.Time) time.Duration {
	due := d.core.NextDeadline(now)
	if due.IsZero() {
		return maxIdle
	}
	return min(d.cfg.TickInterval(), max(due.Sub(now), 0))
}

// stop says goodbye, carries it out, and waits for the durable writes;
// d.mu is held, and the Core is not run again (DeliverNow and Request
// queue from then on, and find the driver done).
func (d *Driver) stop(reason string) {
	d.running = false
	d.core.Stop(time.Now(), reason)
	d.flush(time.Now())
	for d.a.Writing() {
		in := <-d.in
		d.queued.Add(-1)
		if in.Kind == InputWritten {
			d.a.Handle(time.Now(), in)
			d.flush(time.Now())
		}
	}
}

func (d *Driver) onConfig(cfg config.Config) {
	d.cfg = cfg
	d.refresh.Store(int64(cfg.HostRefresh))
	if d.opts.LogLevel != nil {
		var l slog.Level
		if err := l.UnmarshalText([]byte(cfg.LogLevel)); err == nil {
			d.opts.LogLevel.Set(l)
		}
	}
}

func (d *Driver) onShutdown(reason string) {
	select {
	case d.shutdown <- reason:
	default:
	}
}

// driverPlugins runs plugins on goroutines of their own.
type driverPlugins struct{ d *Driver }

func (p driverPlugins) Run(call Call) {
	d := p.d
	pc := call.Req.(PluginCall)
	go func() {
		out, code, err := d.opts.Plugins.RunPlugin(d.ctx, pc.Name, pc.Args, pc.Stdin)
		d.queued.Add(1)
		select {
		case d.in <- call.Done(PluginResult{Output: out, ExitCode: code}, err):
		case <-d.ctx.Done():
			d.queued.Add(-1)
		}
	}()
}

// sampleLoop reads the host off the driver goroutine (reading /proc and
// sysfs is I/O) and delivers the readings.
func (d *Driver) sampleLoop(ctx context.Context) {
	// Utilisation needs two readings: take the second one soon, so that
	// queries do not see it unknown for a whole refresh interval.
	wait := min(time.Second, time.Duration(d.refresh.Load()))
	for {
		hv := d.opts.Sample()
		if !d.Deliver(Input{Kind: InputHost, Host: &hv}) {
			return
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
		wait = time.Duration(d.refresh.Load())
	}
}

// Request asks the manager in-process, exactly as a client session would,
// and waits for the answer.
func (d *Driver) Request(ctx context.Context, env *wire.Envelope) (*wire.Envelope, error) {
	return d.RequestAs(ctx, "", env)
}

// RequestAs is Request on behalf of the client with peer id client (""
// for the manager itself), authenticated by the caller.
func (d *Driver) RequestAs(ctx context.Context, client string, env *wire.Envelope) (*wire.Envelope, error) {
	c := call{as: client, env: env, reply: make(chan *wire.Envelope, 1)}
	if !d.requestNow(c) {
		select {
		case d.calls <- c:
		case <-d.done:
			return nil, ErrStopped
		case <-ctx.Done():
			return nil, ctx.Err()
		}
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

// requestNow asks the Core on the caller's goroutine when it is free and
// no input is queued (as DeliverNow does), and reports whether it did.
func (d *Driver) requestNow(c call) bool {
	if d.queued.Load() != 0 || !d.mu.TryLock() {
		return false
	}
	ok := d.running && d.queued.Load() == 0
	if ok {
		d.request(c)
	}
	d.mu.Unlock()
	return ok
}
