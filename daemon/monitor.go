package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridmgr/gridmgr/daemon/archive"
	"github.com/gridmgr/gridmgr/daemon/metrics"
	"github.com/gridmgr/gridmgr/daemon/web"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/p2p/events"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/wire"
)

// EventsFile is the event archive in a manager's data dir.
const EventsFile = "events.db"

// monitoring is a manager's part in observing the grid: its event bus
// (producer and relay), the consumers inside the manager (the Core's
// subtree totals, the archive, the web UI's live streams), its metrics
// and its HTTP server.
type monitoring struct {
	m       *Manager
	bus     *events.Bus
	sub     *events.Sub
	subDone chan struct{}
	metrics *metrics.Metrics
	arch    *archive.Archive
	archIn  chan *wire.Event
	archWG  sync.WaitGroup
	http    *http.Server
	httpLn  net.Listener
	log     *slog.Logger

	mu     sync.Mutex
	locals map[int]chan *wire.Event // live consumers (web UI streams)
	nextID int
	latest map[string]*wire.Event // latest utilization sample by producer
}

// archiveBatch bounds the events written in one archive transaction.
const archiveBatch = 256

func newMonitoring(m *Manager) *monitoring {
	return &monitoring{
		m: m, log: m.log.With("manager", m.Cfg.Name),
		metrics: metrics.New(m.Cfg.Name, m.Cfg.Version),
		locals:  make(map[int]chan *wire.Event),
		latest:  make(map[string]*wire.Event),
	}
}

// openArchive opens the event archive when [archive] enabled = true.
func (mo *monitoring) openArchive() error {
	cfg := mo.m.Cfg
	if !cfg.ArchiveEnabled {
		return nil
	}
	a, err := archive.Open(filepath.Join(cfg.DataDir, EventsFile), archive.Options{MaxAge: cfg.ArchiveMaxAge, MaxEvents: cfg.ArchiveMaxEvents})
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	mo.arch = a
	mo.archIn = make(chan *wire.Event, 4096)
	mo.archWG.Add(1)
	go mo.archiveLoop()
	return nil
}

// archiveLoop writes what arrives in batches.
func (mo *monitoring) archiveLoop() {
	defer mo.archWG.Done()
	for ev := range mo.archIn {
		batch := []*wire.Event{ev}
	more:
		for len(batch) < archiveBatch {
			select {
			case e, ok := <-mo.archIn:
				if !ok {
					break more
				}
				batch = append(batch, e)
			default:
				break more
			}
		}
		if err := mo.arch.Append(batch); err != nil {
			mo.log.Warn("archiving events", "events", len(batch), "err", err)
		}
	}
}

// startBus starts the event bus once the host is up: the manager relays
// the event topics and hears its inferiors' samples.
func (mo *monitoring) startBus(ctx context.Context) error {
	h := mo.m.Host
	bus, err := events.New(ctx, h.LibP2P(), events.Options{
		Log:    mo.log,
		Accept: func(from peer.ID) bool { return h.IsManager(from.String()) },
	})
	if err != nil {
		return err
	}
	topics := []string{events.UtilTopic(h.PeerID())}
	for _, k := range events.Kinds {
		topics = append(topics, events.KindTopic(k))
	}
	sub, err := bus.Subscribe(topics...)
	if err != nil {
		bus.Close()
		return err
	}
	mo.bus, mo.sub = bus, sub
	mo.subDone = make(chan struct{})
	go mo.consume()
	return nil
}

// consume hands each event the bus delivers to the consumers inside the
// manager.
func (mo *monitoring) consume() {
	defer close(mo.subDone)
	for r := range mo.sub.C {
		ev := r.Event
		if ev.Kind == wire.EventKind_EVENT_KIND_UTILIZATION {
			mo.m.Driver.Deliver(node.Input{Kind: node.InputObserved, Event: ev})
		}
		mo.local(ev)
	}
}

// publish is the driver's Publish hook: to the bus, and this manager's
// own samples (which go to its superior's topic) to its local consumers.
func (mo *monitoring) publish(ev *wire.Event) {
	if mo.bus != nil {
		mo.bus.Publish(ev)
	}
	if ev.Kind == wire.EventKind_EVENT_KIND_UTILIZATION || mo.bus == nil {
		mo.local(ev)
	}
}

// local gives ev to the archive and the live consumers, never blocking.
func (mo *monitoring) local(ev *wire.Event) {
	if mo.archIn != nil {
		select {
		case mo.archIn <- ev:
		default:
			mo.log.Debug("archive queue full: event not archived", "kind", events.KindName(ev.Kind))
		}
	}
	mo.mu.Lock()
	defer mo.mu.Unlock()
	if ev.Kind == wire.EventKind_EVENT_KIND_UTILIZATION {
		mo.latest[ev.Peer] = ev
	}
	for _, ch := range mo.locals {
		select {
		case ch <- ev:
		default: // a slow consumer loses events; it re-reads the state
		}
	}
}

// subscribe gives a live consumer the events from now until ctx ends.
func (mo *monitoring) subscribe(ctx context.Context) <-chan *wire.Event {
	ch := make(chan *wire.Event, 256)
	mo.mu.Lock()
	id := mo.nextID
	mo.nextID++
	mo.locals[id] = ch
	mo.mu.Unlock()
	go func() {
		<-ctx.Done()
		mo.mu.Lock()
		delete(mo.locals, id)
		mo.mu.Unlock()
		close(ch)
	}()
	return ch
}

// samples returns the latest utilization sample of each manager heard.
func (mo *monitoring) samples() []*wire.Event {
	mo.mu.Lock()
	defer mo.mu.Unlock()
	out := make([]*wire.Event, 0, len(mo.latest))
	for _, ev := range mo.latest {
		out = append(out, ev)
	}
	return out
}

// Run implements node.Runner for node.CallArchive: it reads the archive
// for a client.
func (mo *monitoring) Run(call node.Call) {
	req := call.Req.(node.ArchiveCall).Req
	go func() {
		rep, err := mo.read(req)
		mo.m.Driver.Deliver(call.Done(rep, err))
	}()
}

func (mo *monitoring) read(req *wire.EventsRequest) (*wire.EventsReply, error) {
	match := func(*wire.Event) bool { return true }
	if req.Filter != "" {
		f, err := query.CompileEventFilter(req.Filter)
		if err != nil {
			return nil, node.AppErrorf(wire.ErrorReply_CODE_BAD_REQUEST, "%v", err)
		}
		match = func(ev *wire.Event) bool {
			ok, err := f.Match(ev)
			return err == nil && ok
		}
	}
	var since, until time.Time
	if req.SinceUnixMs > 0 {
		since = time.UnixMilli(req.SinceUnixMs)
	}
	if req.UntilUnixMs > 0 {
		until = time.UnixMilli(req.UntilUnixMs)
	}
	evs, more, err := mo.arch.Query(since, until, match, int(req.Limit))
	if err != nil {
		return nil, err
	}
	return &wire.EventsReply{Events: evs, More: uint32(more)}, nil
}

// startHTTP serves /metrics and the web UI on http_listen, with the
// handler that handler makes for the address the listener got (its port
// chosen, if http_listen asks for port 0).
func (mo *monitoring) startHTTP(handler func(addr string) (http.Handler, error)) error {
	ln, err := net.Listen("tcp", mo.m.Cfg.HTTPListen)
	if err != nil {
		return fmt.Errorf("http_listen: %w", err)
	}
	h, err := handler(ln.Addr().String())
	if err != nil {
		ln.Close()
		return err
	}
	mo.httpLn = ln
	mo.http = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(mo.log.Handler(), slog.LevelDebug),
	}
	go func() {
		if err := mo.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			mo.log.Error("web server stopped", "err", err)
		}
	}()
	return nil
}

// EventBusStats are the counts of the manager's event bus (zero before it
// is up): the benchmarks print the events per signed message.
func (m *Manager) EventBusStats() events.Stats {
	if m.mon.bus == nil {
		return events.Stats{}
	}
	return m.mon.bus.Stats()
}

// MetricsRegistry is the manager's Prometheus registry (what /metrics
// serves).
func (m *Manager) MetricsRegistry() *prometheus.Registry { return m.mon.metrics.Reg }

// HTTPAddr is where the manager serves its web UI and /metrics ("" if
// it does not).
func (m *Manager) HTTPAddr() string {
	if m.mon == nil || m.mon.httpLn == nil {
		return ""
	}
	return m.mon.httpLn.Addr().String()
}

// close stops the HTTP server, the bus and the archive.
func (mo *monitoring) close() {
	if mo.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = mo.http.Shutdown(ctx)
		cancel()
		_ = mo.http.Close()
	}
	if mo.bus != nil {
		mo.bus.Close()
	}
	if mo.sub != nil {
		mo.sub.Close()
		<-mo.subDone
	}
	if mo.archIn != nil {
		close(mo.archIn)
		mo.archWG.Wait()
		if err := mo.arch.Close(); err != nil {
			mo.log.Warn("closing the event archive", "err", err)
		}
	}
}

// metricsSource is what a scrape asks of the manager: its Core through
// in-process requests (answered by the owner goroutine), the host's
// traffic, the bus's counts and the applications.
func (m *Manager) metricsSource() metrics.Source {
	ask := func(ctx context.Context, env *wire.Envelope) (*wire.Envelope, error) {
		rep, err := m.Driver.Request(ctx, env)
		if err == nil && rep.GetError() != nil {
			err = errors.New(rep.GetError().Message)
		}
		return rep, err
	}
	return metrics.Source{
		Status: func(ctx context.Context) (*wire.StatusReply, error) {
			rep, err := ask(ctx, &wire.Envelope{Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}})
			return rep.GetStatusReply(), err
		},
		Reservations: func(ctx context.Context) (*wire.ReservationsReply, error) {
			rep, err := ask(ctx, &wire.Envelope{Body: &wire.Envelope_ReservationsRequest{ReservationsRequest: &wire.ReservationsRequest{Limit: 1}}})
			return rep.GetReservationsReply(), err
		},
		Traffic: m.Host.Traffic,
		Bus:     m.mon.bus.Stats,
		Apps:    m.apps.ex.List,
	}
}

// httpHandler is what http_listen serves on addr (the listener's
// address): /metrics, and the web UI, both only to requests whose Host
// is addr or a name of http_hosts (see web.HostCheck).
func (m *Manager) httpHandler(addr string) (http.Handler, error) {
	names := slices.Clone(m.Cfg.HTTPHosts)
	// http_listen given as a name ("gm152.lan:8150") answers to that name.
	if host, _, err := net.SplitHostPort(m.Cfg.HTTPListen); err == nil && host != "" && net.ParseIP(host) == nil {
		if _, port, err := net.SplitHostPort(addr); err == nil {
			names = append(names, net.JoinHostPort(host, port))
		}
	}
	hosts, err := web.NewHostCheck(addr, names)
	if err != nil {
		return nil, fmt.Errorf("web UI hosts (http_listen, http_hosts): %w", err)
	}
	ui, err := m.webHandler(hosts)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	metrics := m.mon.metrics.Handler()
	mux.Handle("/metrics", hosts.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "/metrics is read with GET", http.StatusMethodNotAllowed)
			return
		}
		metrics.ServeHTTP(w, r)
	})))
	mux.Handle("/", ui)
	return mux, nil
}
