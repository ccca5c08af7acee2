package daemon_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/node/p2p/events"
	"github.com/gridmgr/gridmgr/wire"
)

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %s: %s", resp.Status, b)
	}
	return string(b)
}

// value of the first sample of series (name{labels} as printed).
func value(t *testing.T, text, series string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no series %s in /metrics", series)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func ask(t *testing.T, m *daemon.Manager, env *wire.Envelope) *wire.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := m.Driver.Request(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// The six managers over libp2p: an event produced at one end of the tree
// reaches a consumer connected at the other end; /metrics carries every
// family and its counters move with traffic; the archive keeps the events
// across a restart; bad HTTP requests are refused and the manager serves on.
func TestMonitoringOverLibp2p(t *testing.T) {
	g := newGrid(t)
	root := g.cfgs["gm152"]
	root.HTTPListen = "127.0.0.1:0"
	root.ArchiveEnabled = true
	g.cfgs["gm152"] = root
	for _, e := range patent {
		cfg := g.cfgs[e[0]]
		cfg.MonitorInterval = time.Second
		cfg.CPUs = 64
		g.cfgs[e[0]] = cfg
		g.start(e[0])
	}
	g.waitTree("gm152", "gm152(gm154(gm160,gm162),gm156(gm164))", 10*time.Second)
	m152 := g.mgrs["gm152"]
	addr := m152.HTTPAddr()
	if addr == "" {
		t.Fatal("no web address")
	}

	// A consumer connected to the root subscribes to reservations.
	ch, err := p2p.NewClientHost(p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := client.Dial(ctx, &client.Host{ClientHost: ch}, m152.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	bus, err := events.New(ctx, ch.LibP2P(), events.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	sub, err := bus.Subscribe(events.KindTopic(wire.EventKind_EVENT_KIND_RESERVATION))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	// Reservations at gm164, the far end; the mesh grafts at gossipsub's
	// heartbeats, so reserve until the consumer hears one.
	m164 := g.mgrs["gm164"]
	var got *wire.Event
	for i := 0; got == nil && i < 50; i++ {
		rep := ask(t, m164, &wire.Envelope{TraceId: "trace-" + strconv.Itoa(i), Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
			RequestId: "r" + strconv.Itoa(i), Amounts: []*wire.Amount{{Kind: "cpus", N: 1}}, HoldMs: 20_000}}})
		if rep.GetReservationReply() == nil {
			t.Fatalf("reserve: %v", rep)
		}
		select {
		case r := <-sub.C:
			got = r.Event
		case <-time.After(200 * time.Millisecond):
		}
	}
	if got == nil || got.Manager != "gm164" || got.Type != "held" || !strings.HasPrefix(got.TraceId, "trace-") {
		t.Fatalf("consumer got %v", got)
	}

	// Metrics: the families are there and lint-clean, and counters move.
	before := scrape(t, addr)
	for _, fam := range []string{"gridmgr_relations", "gridmgr_relation_rtt_seconds", "gridmgr_heartbeats_sent_total",
		"gridmgr_heartbeats_received_total", "gridmgr_heartbeats_missed_total", "gridmgr_failovers_total",
		"gridmgr_query_hops_total", "gridmgr_query_hop_duration_seconds", "gridmgr_queries_forwarded_total",
		"gridmgr_messages_total", "gridmgr_message_bytes_total", "gridmgr_reservation_events_total", "gridmgr_reservations_live",
		"gridmgr_store_commit_seconds", "gridmgr_events_produced_total", "gridmgr_event_bus_total", "gridmgr_info",
		"libp2p_rcmgr_", "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(before, "\n"+fam) {
			t.Errorf("/metrics has no %s", fam)
		}
	}
	if v := value(t, before, `gridmgr_relations{role="inferior",state="up"}`); v != 2 {
		t.Errorf("gm152 has %v inferiors up, want 2", v)
	}
	q := func() {
		rep := ask(t, m152, &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{Requirement: "cpus > 0", Down: 9, Want: 9}}})
		if rep.GetQueryReply() == nil {
			t.Fatalf("query: %v", rep)
		}
	}
	q()
	q()
	after := scrape(t, addr)
	if d := value(t, after, `gridmgr_query_hops_total{result="complete",role="entry"}`) - value(t, before, `gridmgr_query_hops_total{result="complete",role="entry"}`); d != 2 {
		t.Errorf("entry query hops moved by %v, want 2", d)
	}
	if value(t, after, `gridmgr_queries_forwarded_total`) < value(t, before, `gridmgr_queries_forwarded_total`)+4 {
		t.Error("queries forwarded did not move with two queries to two inferiors")
	}
	if value(t, after, `gridmgr_message_bytes_total{direction="out",protocol="mesh"}`) <= value(t, before, `gridmgr_message_bytes_total{direction="out",protocol="mesh"}`) {
		t.Error("mesh bytes out did not move")
	}
	if value(t, after, `gridmgr_heartbeats_sent_total`) <= value(t, before, `gridmgr_heartbeats_sent_total`) && value(t, after, `gridmgr_heartbeats_received_total`) == 0 {
		t.Error("heartbeats do not move")
	}
	problems, err := testutil.GatherAndLint(m152.MetricsRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "gridmgr_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}

	// Bad HTTP requests are refused; the manager serves on.
	for _, c := range []struct{ method, path string }{
		{"POST", "/metrics"}, {"DELETE", "/"}, {"GET", "/../../etc/passwd"}, {"GET", "/api/nope"}, {"PUT", "/api/admin"},
	} {
		req, _ := http.NewRequest(c.method, "http://"+addr+c.path, strings.NewReader("x"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 || resp.StatusCode >= 500 {
			t.Errorf("%s %s: %s, want a 4xx refusal", c.method, c.path, resp.Status)
		}
	}
	scrape(t, addr)

	// DNS rebinding: a request naming another host is refused on /metrics
	// and the UI alike; the address and localhost (loopback) pass.
	_, port, _ := net.SplitHostPort(addr)
	for _, c := range []struct {
		host, path string
		want       int
	}{
		{"evil.example:" + port, "/metrics", 421}, {"evil.example", "/metrics", 421},
		{"evil.example:" + port, "/api/self", 421}, {"evil.example:" + port, "/", 421},
		{addr, "/metrics", 200}, {"localhost:" + port, "/metrics", 200}, {"localhost:" + port, "/api/self", 200},
	} {
		req, _ := http.NewRequest("GET", "http://"+addr+c.path, nil)
		req.Host = c.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want || c.want == 421 && !strings.Contains(string(b), "http_hosts") {
			t.Errorf("GET %s with Host %s: %s %.200s; want %d", c.path, c.host, resp.Status, b, c.want)
		}
	}

	// The archive has gm164's reservation event, read back over the
	// client protocol with a filter, and keeps it across a restart.
	read := func() []*wire.Event {
		t.Helper()
		c2, err := client.Dial(ctx, &client.Host{ClientHost: ch}, g.mgrs["gm152"].Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		env, err := c2.Call(ctx, &wire.Envelope{Body: &wire.Envelope_EventsRequest{EventsRequest: &wire.EventsRequest{
			Filter: `event.kind == "reservation" && event.manager == "gm164"`}}})
		if err != nil {
			t.Fatal(err)
		}
		if env.GetEventsReply() == nil {
			t.Fatalf("events: %v", env)
		}
		return env.GetEventsReply().Events
	}
	deadline := time.Now().Add(5 * time.Second)
	var archived []*wire.Event
	for len(archived) == 0 && time.Now().Before(deadline) {
		archived = read()
		time.Sleep(50 * time.Millisecond) // the archive writes in batches
	}
	if len(archived) == 0 {
		t.Fatal("the archive has no reservation event of gm164")
	}
	for _, ev := range archived {
		if ev.Manager != "gm164" || ev.Kind != wire.EventKind_EVENT_KIND_RESERVATION {
			t.Fatalf("the filter let through %v", ev)
		}
	}
	g.stop("gm152")
	g.start("gm152")
	if again := read(); len(again) < len(archived) {
		t.Fatalf("after a restart the archive has %d events, before %d", len(again), len(archived))
	}
	// A manager without an archive says so.
	env := ask(t, g.mgrs["gm154"], &wire.Envelope{Body: &wire.Envelope_EventsRequest{EventsRequest: &wire.EventsRequest{}}})
	if e := env.GetError(); e == nil || !strings.Contains(e.Message, "archive") {
		t.Fatalf("events at gm154: %v", env)
	}
}
