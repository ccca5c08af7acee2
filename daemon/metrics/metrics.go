package metrics

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gridmgr/gridmgr/jobs"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/node/p2p/events"
	"github.com/gridmgr/gridmgr/wire"
)

// Source is what a scrape asks of the manager. Any field may be nil.
type Source struct {
	Status       func(ctx context.Context) (*wire.StatusReply, error)
	Reservations func(ctx context.Context) (*wire.ReservationsReply, error)
	Traffic      func() []p2p.Traffic
	Bus          func() events.Stats
	Apps         func() []*wire.AppInstance
}

// Metrics is one manager's registry and the series the Core feeds.
type Metrics struct {
	Reg *prometheus.Registry

	hops      *prometheus.CounterVec
	hopTime   *prometheus.HistogramVec
	forwarded prometheus.Counter
	resv      *prometheus.CounterVec
	hbSent    prometheus.Counter
	hbRecv    prometheus.Counter
	hbMissed  prometheus.Counter
	failovers *prometheus.CounterVec
	produced  *prometheus.CounterVec
	commit    prometheus.Histogram
	jobs      *prometheus.GaugeVec
	dags      *prometheus.GaugeVec
	glideins  prometheus.Gauge
	jobEvents *prometheus.CounterVec
	jobStart  prometheus.Histogram

	// The children of the labels known in advance, made once: a
	// WithLabelValues hashes its labels and takes a lock, on every query
	// hop and every reservation change. Read-only after New.
	hopKids  map[string]hopKids
	resvKids map[string]prometheus.Counter

	src    Source
	scrape *scrapeCollector
}

// New makes the registry of the manager called name.
func New(name, version string) *Metrics {
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) prometheus.Collector { reg.MustRegister(c); return c }
	m := &Metrics{Reg: reg}
	m.hops = f(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gridmgr_query_hops_total",
		Help: "Queries this manager took part in, by its role (entry: a client asked it; down: a superior; up: an inferior) and result (complete, partial).",
	}, []string{"role", "result"})).(*prometheus.CounterVec)
	m.hopTime = f(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gridmgr_query_hop_duration_seconds",
		Help:    "Time from receiving a query to answering it, by role; the entry's is the client's latency.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"role"})).(*prometheus.HistogramVec)
	m.forwarded = f(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gridmgr_queries_forwarded_total", Help: "Query requests this manager sent to its relations.",
	})).(prometheus.Counter)
	m.resv = f(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gridmgr_reservation_events_total",
		Help: "Reservation changes at this manager by type: held, committed, renewed, released, expired, refused.",
	}, []string{"type"})).(*prometheus.CounterVec)
	m.hbSent = f(prometheus.NewCounter(prometheus.CounterOpts{Name: "gridmgr_heartbeats_sent_total", Help: "Heartbeats sent on all relations."})).(prometheus.Counter)
	m.hbRecv = f(prometheus.NewCounter(prometheus.CounterOpts{Name: "gridmgr_heartbeats_received_total", Help: "Heartbeats received on all relations."})).(prometheus.Counter)
	m.hbMissed = f(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gridmgr_heartbeats_missed_total", Help: "Times a relation missed a heartbeat (became suspect).",
	})).(prometheus.Counter)
	m.failovers = f(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gridmgr_failovers_total",
		Help: "Superior failures by outcome: declared (a superior failed), reparented (a new superior took this manager), root (none could be found).",
	}, []string{"outcome"})).(*prometheus.CounterVec)
	m.produced = f(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gridmgr_events_produced_total", Help: "Monitoring events this manager produced, by kind.",
	}, []string{"kind"})).(*prometheus.CounterVec)
	m.jobs = f(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gridmgr_jobs",
		Help: "Jobs in this manager's queue by state (idle, matched, reserved, staged, running, staging-out, completed, failed, held, removed, waiting).",
	}, []string{"state"})).(*prometheus.GaugeVec)
	m.glideins = f(prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gridmgr_glideins_joined",
		Help: "Glide-ins this manager launched (gridmgr glidein) that are joined under it now.",
	})).(prometheus.Gauge)
	m.dags = f(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gridmgr_dags",
		Help: "Workflows in this manager's queue by state (running, held, completed, failed, removed).",
	}, []string{"state"})).(*prometheus.GaugeVec)
	m.jobEvents = f(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gridmgr_job_events_total",
		Help: "Lines of job logs at this manager's queue by type: submitted, matched, reserved, staged, started, exited, retried, lost, discarded, held, unheld, removed, completed, failed, released, rerun; and workflows' own changes: dag-submitted, dag-completed, dag-failed, dag-held, dag-removed, dag-running, dag-rerun.",
	}, []string{"type"})).(*prometheus.CounterVec)
	m.jobStart = f(prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "gridmgr_job_submit_to_start_seconds",
		Help:    "Time from a job's submission to the start of its first try.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 20),
	})).(prometheus.Histogram)
	m.commit = f(prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "gridmgr_store_commit_seconds",
		Help:    "Time to make one batch of changes durable (reservation store transaction, relations file, audit log), fsync included.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	})).(prometheus.Histogram)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gridmgr_info", Help: "The manager's name and version (value 1).",
		ConstLabels: prometheus.Labels{"name": name, "version": version},
	})
	info.Set(1)
	reg.MustRegister(info)
	m.hopKids = make(map[string]hopKids)
	for _, r := range []string{"entry", "down", "up"} {
		m.hopKids[r] = hopKids{complete: m.hops.WithLabelValues(r, "complete"), partial: m.hops.WithLabelValues(r, "partial"),
			took: m.hopTime.WithLabelValues(r)}
	}
	m.resvKids = make(map[string]prometheus.Counter)
	for _, t := range []string{"held", "committed", "renewed", "released", "expired", "refused"} {
		m.resvKids[t] = m.resv.WithLabelValues(t)
	}
	for _, o := range []string{"declared", "reparented", "root"} {
		m.failovers.WithLabelValues(o)
	}
	m.scrape = &scrapeCollector{m: m}
	reg.MustRegister(m.scrape)
	return m
}

// SetSource gives the scrape what it asks of the manager. Call it before
// serving Handler.
func (m *Metrics) SetSource(s Source) { m.src = s }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Reg, promhttp.HandlerOpts{Registry: m.Reg, ErrorHandling: promhttp.ContinueOnError})
}

// hopKids are one query role's children of hops and hopTime.
type hopKids struct {
	complete, partial prometheus.Counter
	took              prometheus.Observer
}

// QueryHop implements node.Metrics.
func (m *Metrics) QueryHop(role string, took time.Duration, asked, _ int, partial bool) {
	k, ok := m.hopKids[role]
	if !ok { // a role added to node without a child here
		k = hopKids{complete: m.hops.WithLabelValues(role, "complete"), partial: m.hops.WithLabelValues(role, "partial"),
			took: m.hopTime.WithLabelValues(role)}
	}
	if partial {
		k.partial.Inc()
	} else {
		k.complete.Inc()
	}
	k.took.Observe(took.Seconds())
	m.forwarded.Add(float64(asked))
}

// Reservation implements node.Metrics.
func (m *Metrics) Reservation(typ string) {
	if c, ok := m.resvKids[typ]; ok {
		c.Inc()
		return
	}
	m.resv.WithLabelValues(typ).Inc()
}

// Heartbeat implements node.Metrics.
func (m *Metrics) Heartbeat(sent bool) {
	if sent {
		m.hbSent.Inc()
	} else {
		m.hbRecv.Inc()
	}
}

// HeartbeatMissed implements node.Metrics.
func (m *Metrics) HeartbeatMissed() { m.hbMissed.Inc() }

// Failover implements node.Metrics.
func (m *Metrics) Failover(outcome string) { m.failovers.WithLabelValues(outcome).Inc() }

// Published implements node.Metrics.
func (m *Metrics) Published(kind wire.EventKind) {
	m.produced.WithLabelValues(events.KindName(kind)).Inc()
}

// Job implements node.Metrics.
func (m *Metrics) Job(typ string, latency time.Duration) {
	m.jobEvents.WithLabelValues(typ).Inc()
	if typ == "started" && latency > 0 {
		m.jobStart.Observe(latency.Seconds())
	}
}

// JobStates implements node.Metrics.
func (m *Metrics) JobStates(counts [wire.JobState_JOB_STATE_WAITING + 1]int) {
	for s := wire.JobState_JOB_STATE_IDLE; s <= wire.JobState_JOB_STATE_WAITING; s++ {
		m.jobs.WithLabelValues(jobs.StateName(s)).Set(float64(counts[s]))
	}
}

// Glideins implements node.Metrics.
func (m *Metrics) Glideins(n int) { m.glideins.Set(float64(n)) }

// DagStates implements node.Metrics.
func (m *Metrics) DagStates(counts map[string]int) {
	for s, n := range counts {
		m.dags.WithLabelValues(s).Set(float64(n))
	}
}

// Commit records one durable write's time.
func (m *Metrics) Commit(d time.Duration) { m.commit.Observe(d.Seconds()) }

var (
	descRelations = prometheus.NewDesc("gridmgr_relations", "Relations of this manager by role (superior, inferior) and state (connecting, up, suspect, down).", []string{"role", "state"}, nil)
	descRTT       = prometheus.NewDesc("gridmgr_relation_rtt_seconds", "Round trip of each live relation, measured by heartbeats.", []string{"role", "peer_name"}, nil)
	descLive      = prometheus.NewDesc("gridmgr_reservations_live", "Reservations held or committed now.", nil, nil)
	descCap       = prometheus.NewDesc("gridmgr_ledger_capacity", "Capacity of each reservable kind (cpus, mem in bytes, tokens).", []string{"kind"}, nil)
	descUsed      = prometheus.NewDesc("gridmgr_ledger_used", "Amount of each kind reserved now.", []string{"kind"}, nil)
	descMsgs      = prometheus.NewDesc("gridmgr_messages_total", "Messages on the gridmgr protocols, by protocol and direction.", []string{"protocol", "direction"}, nil)
	descBytes     = prometheus.NewDesc("gridmgr_message_bytes_total", "Bytes of those messages (without framing).", []string{"protocol", "direction"}, nil)
	descBus       = prometheus.NewDesc("gridmgr_event_bus_total", "Event bus counts: published, dropped (queue full), publish_errors, received, rejected (validation), lagged (slow local consumer), notices (a neighbour takes single events only).", []string{"what"}, nil)
	descInst      = prometheus.NewDesc("gridmgr_app_instances", "Application instances here, by application and state.", []string{"app", "state"}, nil)
	descAppCPU    = prometheus.NewDesc("gridmgr_app_cpu_seconds_total", "CPU time used by each application's instances here (since each started).", []string{"app"}, nil)
	descAppMem    = prometheus.NewDesc("gridmgr_app_memory_bytes", "Memory in use by each application's instances here.", []string{"app"}, nil)
	descScrape    = prometheus.NewDesc("gridmgr_scrape_errors", "Parts of this scrape that could not be read from the manager (1 each).", []string{"part"}, nil)
)

// scrapeCollector reads the manager's state at each scrape.
type scrapeCollector struct {
	m *Metrics
}

func (c *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRelations, descRTT, descLive, descCap, descUsed, descMsgs, descBytes, descBus, descInst, descAppCPU, descAppMem, descScrape} {
		ch <- d
	}
}

func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.m.src
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	failed := func(part string) {
		ch <- prometheus.MustNewConstMetric(descScrape, prometheus.GaugeValue, 1, part)
	}
	if src.Status != nil {
		if st, err := src.Status(ctx); err == nil {
			counts := map[[2]string]int{}
			for _, role := range []string{"superior", "inferior"} {
				for _, state := range []string{"connecting", "up", "suspect", "down"} {
					counts[[2]string{role, state}] = 0
				}
			}
			for _, r := range st.Relations {
				role := roleWord(r.Role)
				counts[[2]string{role, stateWord(r.State)}]++
				if r.RttUs > 0 && (r.State == wire.RelationState_RELATION_STATE_UP || r.State == wire.RelationState_RELATION_STATE_SUSPECT) {
					ch <- prometheus.MustNewConstMetric(descRTT, prometheus.GaugeValue, float64(r.RttUs)/1e6, role, r.Name)
				}
			}
			for k, n := range counts {
				ch <- prometheus.MustNewConstMetric(descRelations, prometheus.GaugeValue, float64(n), k[0], k[1])
			}
		} else {
			failed("status")
		}
	}
	if src.Reservations != nil {
		if rr, err := src.Reservations(ctx); err == nil {
			ch <- prometheus.MustNewConstMetric(descLive, prometheus.GaugeValue, float64(rr.Live))
			for _, u := range rr.Usage {
				ch <- prometheus.MustNewConstMetric(descCap, prometheus.GaugeValue, float64(u.Capacity), u.Kind)
				ch <- prometheus.MustNewConstMetric(descUsed, prometheus.GaugeValue, float64(u.Used), u.Kind)
			}
		} else {
			failed("reservations")
		}
	}
	if src.Traffic != nil {
		for _, t := range src.Traffic() {
			p := strings.Split(strings.Trim(t.Protocol, "/"), "/")[1] // /gridmgr/mesh/1.0.0 → mesh
			ch <- prometheus.MustNewConstMetric(descMsgs, prometheus.CounterValue, float64(t.MsgsIn), p, "in")
			ch <- prometheus.MustNewConstMetric(descMsgs, prometheus.CounterValue, float64(t.MsgsOut), p, "out")
			ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(t.BytesIn), p, "in")
			ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(t.BytesOut), p, "out")
		}
	}
	if src.Bus != nil {
		s := src.Bus()
		for what, v := range map[string]uint64{"published": s.Published, "dropped": s.Dropped, "publish_errors": s.PublishErrors,
			"received": s.Received, "rejected": s.Rejected, "lagged": s.Lagged, "notices": s.Notices} {
			ch <- prometheus.MustNewConstMetric(descBus, prometheus.CounterValue, float64(v), what)
		}
	}
	if src.Apps != nil {
		type agg struct {
			cpu float64
			mem int64
		}
		states := map[[2]string]int{}
		apps := map[string]*agg{}
		for _, ai := range src.Apps() {
			states[[2]string{ai.App, ai.State}]++
			a := apps[ai.App]
			if a == nil {
				a = &agg{}
				apps[ai.App] = a
			}
			a.cpu += ai.CpuSeconds
			a.mem += ai.MemBytes
		}
		for k, n := range states {
			ch <- prometheus.MustNewConstMetric(descInst, prometheus.GaugeValue, float64(n), k[0], k[1])
		}
		for app, a := range apps {
			ch <- prometheus.MustNewConstMetric(descAppCPU, prometheus.CounterValue, a.cpu, app)
			ch <- prometheus.MustNewConstMetric(descAppMem, prometheus.GaugeValue, float64(a.mem), app)
		}
	}
}

func roleWord(r wire.Role) string {
	if r == wire.Role_ROLE_SUPERIOR {
		return "superior"
	}
	return "inferior"
}

func stateWord(s wire.RelationState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "RELATION_STATE_"))
}
