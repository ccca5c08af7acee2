package node

import (
	"fmt"
	"hash/fnv"
	"maps"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/internal/keys"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// EventVersion is the version of the monitoring events this Core produces.
const EventVersion = 1

// Metrics receives the Core's counts and timings; daemon/metrics turns
// them into Prometheus series. The Core calls it from its own goroutine:
// methods must be cheap and must not block. The zero Core uses a no-op.
type Metrics interface {
	// QueryHop: this manager finished its part of a query (role "entry",
	// "down" or "up"), after took, having asked asked relations, with
	// offers in its answer; partial: some managers' answers are missing.
	QueryHop(role string, took time.Duration, asked, offers int, partial bool)
	// Reservation: a reservation event of this type (held, committed,
	// renewed, released, expired, refused).
	Reservation(typ string)
	// Heartbeat: one heartbeat sent (sent) or received.
	Heartbeat(sent bool)
	// HeartbeatMissed: a relation missed a heartbeat (it became suspect).
	HeartbeatMissed()
	// Failover: a superior was declared failed ("declared"), replaced
	// ("reparented"), or none could be found ("root").
	Failover(outcome string)
	// Published: the Core produced a monitoring event of kind.
	Published(kind wire.EventKind)
	// Job: a job's log got a line of this type (submitted, started,
	// completed, …); for "started" on a first try, latency is how long
	// since it was submitted (else 0).
	Job(typ string, latency time.Duration)
	// JobStates: the queue's jobs by state (index: wire.JobState), after
	// a change.
	JobStates(counts [wire.JobState_JOB_STATE_WAITING + 1]int)
	// DagStates sets the workflows of this manager's queue by state.
	DagStates(counts map[string]int)
	// Glideins sets how many glide-ins this manager launched are joined
	// under it now.
	Glideins(n int)
}

type nopMetrics struct{}

func (nopMetrics) QueryHop(string, time.Duration, int, int, bool)     {}
func (nopMetrics) Reservation(string)                                 {}
func (nopMetrics) Heartbeat(bool)                                     {}
func (nopMetrics) HeartbeatMissed()                                   {}
func (nopMetrics) Failover(string)                                    {}
func (nopMetrics) Published(wire.EventKind)                           {}
func (nopMetrics) Job(string, time.Duration)                          {}
func (nopMetrics) JobStates([wire.JobState_JOB_STATE_WAITING + 1]int) {}
func (nopMetrics) DagStates(map[string]int)                           {}
func (nopMetrics) Glideins(int)                                       {}

// SetMetrics sets where the Core reports its counts (nil: nowhere).
func (c *Core) SetMetrics(m Metrics) {
	c.dl.ok = false // see NextDeadline
	if m == nil {
		m = nopMetrics{}
	}
	c.metrics = m
}

// monitor is the module of the monitoring events (docs/monitoring.md): it
// numbers the events the Core produces (Ready.Publish), samples this
// manager's utilization every monitor.interval, and folds its inferiors'
// samples (Core.Observe) into the subtree totals it publishes.
type monitor struct {
	e          monitorEnv
	seq        uint64
	nextSample time.Time
	off        bool
	inferiors  map[string]subtreeSample // what each inferior's latest sample says of its subtree
	apps       map[string]appSeen       // instances as last reported
	calls      map[uint64]origin        // archive reads in flight
	next       uint64
}

// subtreeSample is what publishUtilization needs of an inferior's
// sample: its subtree's managers and free amounts. Keeping the whole
// sample (its host's use, its own free amounts, names) cost each superior
// about 600 bytes per inferior, most of a simulated grid's managers.
type subtreeSample struct {
	managers uint32
	free     []kindAmount
}

type kindAmount struct {
	kind string
	n    int64
}

type appSeen struct {
	state string
	app   string
}

// monitorEnv is what the monitor sees of the Core besides env.
type monitorEnv interface {
	env
	// lifecycle says when the manager started (zero: not yet) and
	// whether it is stopping.
	lifecycle() (started time.Time, stopping bool)
	// emit adds a numbered event to Ready.Publish.
	emit(ev *wire.Event)
	// localUse is this manager's own part of a utilization sample (cpu
	// utilization, usage, reservations, instances) and what is free
	// here, by kind.
	localUse() (*wire.Utilization, map[string]int64)
	// appsHere tells what queries see of the applications here.
	appsHere(now time.Time, counts map[string]query.AppCount)
}

func newMonitor(e monitorEnv) *monitor {
	return &monitor{e: e} // maps made at their first entry
}

// DisableSamples stops the periodic utilization samples (the simulator,
// which has no consumer for them, saves the work). Other events are still
// produced.
func (c *Core) DisableSamples() { c.mon.off, c.dl.ok = true, false }

// ArchiveCall is the request of a CallArchive: read the event archive
// for Client, and report a *wire.EventsReply.
type ArchiveCall struct {
	Req    *wire.EventsRequest
	Client string
}

// MaxEventsListed bounds one EventsReply.
const MaxEventsListed = 10000

func (m *monitor) handle(_ time.Time, o origin, env *wire.Envelope) (bool, error) {
	req := env.GetEventsRequest()
	if req == nil || o.peer != "" {
		return false, nil
	}
	e := m.e
	if len(req.Filter) > 4096 {
		e.replyErr(o, wire.ErrorReply_CODE_BAD_REQUEST, fmt.Sprintf("%s: the filter is %d bytes; at most 4096", e.name(), len(req.Filter)))
		return true, nil
	}
	if req.Limit == 0 || req.Limit > MaxEventsListed {
		req.Limit = MaxEventsListed
	}
	m.next++
	if m.calls == nil {
		m.calls = make(map[uint64]origin)
	}
	m.calls[m.next] = o
	e.call(CallArchive, m.next, ArchiveCall{Req: req, Client: o.client})
	return true, nil
}

// callDone answers a CallArchive: its *wire.EventsReply, or its error (an
// *AppError gives the code; any other error is UNAVAILABLE).
func (m *monitor) callDone(_ time.Time, d CallDone) {
	if o, ok := runtimeDone(m.e, m.calls, d.ID, d.Err); ok {
		rep, _ := d.Result.(*wire.EventsReply)
		m.e.reply(o, &wire.Envelope{Body: &wire.Envelope_EventsReply{EventsReply: rep}})
	}
}

func (m *monitor) tick(now time.Time) {
	started, stopping := m.e.lifecycle()
	if m.off || started.IsZero() || stopping {
		return
	}
	if m.nextSample.IsZero() {
		// The first sample waits one heartbeat, so that it names the
		// superior the manager attached to.
		m.nextSample = started.Add(m.e.conf().HeartbeatInterval)
	}
	if now.Before(m.nextSample) {
		return
	}
	m.nextSample = now.Add(m.e.conf().MonitorInterval)
	m.publishUtilization(now)
}

func (m *monitor) relationEnded(_ time.Time, r *relations.Relation, _ string) {
	delete(m.inferiors, r.Peer)
}

func (m *monitor) deadline(time.Time) time.Time {
	started, stopping := m.e.lifecycle()
	if m.off || started.IsZero() || stopping {
		return time.Time{}
	}
	if m.nextSample.IsZero() {
		return started.Add(m.e.conf().HeartbeatInterval)
	}
	return m.nextSample
}

// publish numbers an event of kind and typ and emits it; body fills its
// body.
func (m *monitor) publish(now time.Time, kind wire.EventKind, typ, trace string, body func(ev *wire.Event)) {
	m.seq++
	ev := &wire.Event{
		Version:    EventVersion,
		Kind:       kind,
		Type:       typ,
		Manager:    m.e.name(),
		Peer:       m.e.me(),
		TimeUnixMs: now.UnixMilli(),
		Seq:        m.seq,
		TraceId:    trace,
	}
	body(ev)
	m.e.emit(ev)
}

// publishUtilization publishes this manager's sample, with the subtree
// totals folded from its inferiors' last samples.
func (m *monitor) publishUtilization(now time.Time) {
	u, free := m.e.localUse()
	for _, k := range keys.Sorted(free) {
		u.Free = append(u.Free, &wire.Amount{Kind: k, N: free[k]})
	}
	subtree := maps.Clone(free)
	u.SubtreeManagers = 1
	set := m.e.relations()
	for _, r := range set.Inferiors() {
		s, ok := m.inferiors[r.Peer]
		if !ok || !r.State.Live() {
			continue
		}
		u.SubtreeManagers += s.managers
		for _, a := range s.free {
			subtree[a.kind] += a.n
		}
	}
	for _, k := range keys.Sorted(subtree) {
		u.SubtreeFree = append(u.SubtreeFree, &wire.Amount{Kind: k, N: subtree[k]})
	}
	for _, r := range set.Superiors() {
		if r.State.Live() {
			u.Superior = r.Peer
			break
		}
	}
	m.publish(now, wire.EventKind_EVENT_KIND_UTILIZATION, "sample", "", func(ev *wire.Event) {
		ev.Body = &wire.Event_Utilization{Utilization: u}
	})
}

// Observe takes a monitoring event another manager produced, as the event
// bus delivered it: the utilization samples of this manager's inferiors
// feed its subtree totals. Other events are ignored.
func (c *Core) Observe(now time.Time, ev *wire.Event) {
	c.dl.ok = false // see NextDeadline
	c.now = now
	c.mon.observe(ev)
}

func (m *monitor) observe(ev *wire.Event) {
	u := ev.GetUtilization()
	if u == nil || ev.Peer == m.e.me() {
		return
	}
	r := m.e.relations().Get(ev.Peer)
	if r == nil || r.Role != relations.Inferior {
		return
	}
	if m.inferiors == nil {
		m.inferiors = make(map[string]subtreeSample)
	}
	s := subtreeSample{managers: u.SubtreeManagers, free: m.inferiors[ev.Peer].free[:0]}
	for _, a := range u.SubtreeFree {
		s.free = append(s.free, kindAmount{a.GetKind(), a.GetN()})
	}
	m.inferiors[ev.Peer] = s
}

// ReportApps tells the Core the application instances here (the runtime
// calls it after each change and periodically): queries see their counts
// (apps), and each instance that appeared, changed state or went away is
// published as an application event with its use.
func (c *Core) ReportApps(now time.Time, list []*wire.AppInstance) {
	c.dl.ok = false // see NextDeadline
	c.now = now
	c.mon.reportApps(now, list)
}

func (m *monitor) reportApps(now time.Time, list []*wire.AppInstance) {
	counts := map[string]query.AppCount{}
	seen := make(map[string]appSeen, len(list))
	for _, ai := range list {
		n := counts[ai.App]
		n.Instances++
		if ai.State == "running" || ai.State == "paused" {
			n.Running++
		}
		counts[ai.App] = n
		seen[ai.Id] = appSeen{state: ai.State, app: ai.App}
		prev, had := m.apps[ai.Id]
		if m.apps != nil && (!had || prev.state != ai.State) {
			m.publishApp(now, appEventType(prev.state, ai.State, had), ai)
		}
	}
	if m.apps != nil {
		for _, id := range keys.Sorted(m.apps) {
			if _, ok := seen[id]; !ok {
				prev := m.apps[id]
				res, _, _ := SplitInstance(id)
				m.publishApp(now, "removed", &wire.AppInstance{Id: id, App: prev.app, Reservation: res, State: "removed"})
			}
		}
	}
	m.apps = seen
	m.e.appsHere(now, counts)
}

// appEventType names the change of an instance from state from to to.
func appEventType(from, to string, had bool) string {
	switch {
	case !had:
		if to == "running" {
			return "started" // installed and started in one step
		}
		return "installed"
	case to == "running" && from == "paused":
		return "resumed"
	case to == "running":
		return "started"
	case to == "paused":
		return "paused"
	case to == "stopped" || to == "installed":
		return "stopped"
	}
	return "exited" // exited, failed, oom-killed, restarting
}

func (m *monitor) publishApp(now time.Time, typ string, ai *wire.AppInstance) {
	m.publish(now, wire.EventKind_EVENT_KIND_APP, typ, "", func(ev *wire.Event) {
		ev.Body = &wire.Event_App{App: &wire.AppChange{
			Instance: ai.Id, App: ai.App, Reservation: ai.Reservation, State: ai.State,
			CpuSeconds: ai.CpuSeconds, MemBytes: ai.MemBytes, CpuLimit: ai.CpuLimit, MemLimit: ai.MemLimit,
			Detail: ai.LastExit,
		}}
	})
}

// traceOf is the trace id of a request: the one it carries, else one made
// from what names it (so retries share it and no randomness is drawn).
func traceOf(given string, parts ...string) string {
	if given != "" {
		return given
	}
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// validTrace reports whether a trace id from the wire is acceptable: at
// most 64 characters of [0-9A-Za-z_-].
func validTrace(s string) bool {
	if len(s) > 64 {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' || r == '_')
	}) < 0
}
