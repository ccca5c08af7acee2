package query

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

var evTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func resEvent() *wire.Event {
	return &wire.Event{
		Version: 1, Kind: wire.EventKind_EVENT_KIND_RESERVATION, Type: "committed",
		Manager: "gm160", Peer: "12D3KooWgm160", TimeUnixMs: evTime.UnixMilli(), Seq: 7, TraceId: "t-1",
		Body: &wire.Event_Reservation{Reservation: &wire.ReservationChange{
			Id: "gm160-7-abc", HolderPeer: "12D3KooWclient", User: "alice",
			Amounts:       []*wire.Amount{{Kind: "cpus", N: 4}, {Kind: "mem", N: 8 << 30}},
			ExpiresUnixMs: evTime.Add(5 * time.Minute).UnixMilli(), Group: "g1",
		}},
	}
}

func utilEvent(util float64) *wire.Event {
	return &wire.Event{
		Version: 1, Kind: wire.EventKind_EVENT_KIND_UTILIZATION, Type: "sample",
		Manager: "gm161", Peer: "12D3KooWgm161", TimeUnixMs: evTime.Add(time.Minute).UnixMilli(), Seq: 8,
		Body: &wire.Event_Utilization{Utilization: &wire.Utilization{
			CpuUtil: util, Free: []*wire.Amount{{Kind: "cpus", N: 12}},
			Usage:        []*wire.Usage{{Kind: "cpus", Capacity: 16, Used: 4}},
			Reservations: 2, Instances: 3, Running: 1, SubtreeManagers: 5,
			SubtreeFree: []*wire.Amount{{Kind: "cpus", N: 40}}, Superior: "12D3KooWroot",
		}},
	}
}

func relEvent() *wire.Event {
	return &wire.Event{
		Version: 1, Kind: wire.EventKind_EVENT_KIND_RELATION, Type: "down",
		Manager: "gm162", Peer: "p162", TimeUnixMs: evTime.UnixMilli(), Seq: 1,
		Body: &wire.Event_Relation{Relation: &wire.RelationChange{
			Peer: "p1", Name: "gm1", Role: wire.Role_ROLE_SUPERIOR,
			From: wire.RelationState_RELATION_STATE_SUSPECT, To: wire.RelationState_RELATION_STATE_DOWN, Cause: "heartbeat",
		}},
	}
}

func appEvent() *wire.Event {
	return &wire.Event{
		Version: 1, Kind: wire.EventKind_EVENT_KIND_APP, Type: "started",
		Manager: "gm163", Peer: "p163", TimeUnixMs: evTime.UnixMilli(), Seq: 2,
		Body: &wire.Event_App{App: &wire.AppChange{
			Instance: "r1.ticker", App: "ticker", Reservation: "r1", State: "running",
			CpuSeconds: 1.5, MemBytes: 1 << 20, CpuLimit: 2, MemLimit: 1 << 30,
		}},
	}
}

func adminEvent() *wire.Event {
	return &wire.Event{
		Version: 1, Kind: wire.EventKind_EVENT_KIND_ADMIN, Type: "command",
		Manager: "gm164", Peer: "p164", TimeUnixMs: evTime.UnixMilli(), Seq: 3,
		Body: &wire.Event_Admin{Admin: &wire.AdminRun{Author: "p9", Command: "drain", Ok: true}},
	}
}

func TestEventFilterMatch(t *testing.T) {
	res, util, rel, app, adm := resEvent(), utilEvent(0.75), relEvent(), appEvent(), adminEvent()
	cases := []struct {
		src  string
		ev   *wire.Event
		want bool
		err  bool // evaluation fails
	}{
		{`event.kind == "reservation" && event.manager == "gm160"`, res, true, false},
		{`event.kind == "reservation" && event.manager == "gm160"`, util, false, false},
		{`event.kind == "utilization" && event.utilization.cpu_util > 0.5`, util, true, false},
		{`event.kind == "utilization" && event.utilization.cpu_util > 0.5`, utilEvent(0.25), false, false},
		{`event.kind == "utilization" && event.utilization.cpu_util > 0.5`, res, false, false},
		{`event.time > timestamp("2026-01-01T00:00:00Z")`, res, true, false},
		{`event.time < timestamp("2026-01-01T00:00:00Z")`, res, false, false},
		{`event.time == timestamp("2026-03-01T12:00:00Z")`, res, true, false},
		{`event.seq == 7 && event.seq > 6.5 && event.version == 1`, res, true, false},
		{`event.trace_id == "t-1" && event.peer.startsWith("12D3")`, res, true, false},
		{`event.type in ["committed", "renewed"]`, res, true, false},
		{`event.reservation.id == "gm160-7-abc" && event.reservation.user == "alice"`, res, true, false},
		{`event.reservation.amounts.cpus >= 4 && event.reservation.amounts["mem"] == 8 * 1073741824`, res, true, false},
		{`!has(event.reservation.amounts.gpus)`, res, true, false},
		{`event.reservation.expires - event.time == duration("5m")`, res, true, false},
		{`event.reservation.group == "g1" && event.reservation.reason == "" && event.reservation.holder_peer != ""`, res, true, false},
		{`event.relation.name == "gm1" && event.relation.role == "superior" && event.relation.to == "down" && event.relation.from == "suspect"`, rel, true, false},
		{`event.relation.peer == "p1" && event.relation.cause == "heartbeat"`, rel, true, false},
		{`event.kind == "relation"`, rel, true, false},
		{`event.app.instance == "r1.ticker" && event.app.state == "running" && event.app.cpu_seconds > 1`, app, true, false},
		{`event.app.mem_bytes == 1048576 && event.app.cpu_limit == 2 && event.app.mem_limit > 0 && event.app.app == "ticker" && event.app.reservation == "r1" && event.app.detail == ""`, app, true, false},
		{`event.admin.command == "drain" && event.admin.ok && event.admin.author == "p9" && event.admin.detail == ""`, adm, true, false},
		{`event.utilization.free.cpus == 12 && event.utilization.subtree_free.cpus == 40`, util, true, false},
		{`event.utilization.usage.cpus.capacity - event.utilization.usage.cpus.used == 12`, util, true, false},
		{`event.utilization.reservations == 2 && event.utilization.instances == 3 && event.utilization.running == 1`, util, true, false},
		{`event.utilization.subtree_managers == 5 && event.utilization.superior == "12D3KooWroot"`, util, true, false},
		// Bodies of other kinds are absent: has() tests them, reading them fails.
		{`has(event.app)`, res, false, false},
		{`has(event.reservation)`, res, true, false},
		{`!has(event.app) || event.app.state == "running"`, res, true, false},
		{`event.app.state == "running"`, res, false, true},
		{`event.?app.state.orValue("") == ""`, res, true, false},
		{`event.reservation.amounts.gpus > 0`, res, false, true},
		// Kleene logic: a decided side absorbs a failing one.
		{`event.app.state == "running" || true`, res, true, false},
		{`event.kind == "app" && event.app.state == "running"`, res, false, false},
		{`event.seq / 0 == 1`, res, false, true},
		{`event.kind`, res, false, true},
	}
	for _, c := range cases {
		f, err := CompileEventFilter(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		if f.Source() != c.src {
			t.Errorf("Source() = %q", f.Source())
		}
		got, err := f.Match(c.ev)
		if (err != nil) != c.err {
			t.Errorf("%s on %s: err = %v, want error %v", c.src, c.ev.GetType(), err, c.err)
		}
		if got != c.want {
			t.Errorf("%s on %s: %v, want %v", c.src, c.ev.GetType(), got, c.want)
		}
	}
}

func TestEventFilterCompileErrors(t *testing.T) {
	cases := []struct {
		src  string
		msg  string // in ExprError.Msg
		line int
		col  int
	}{
		{``, "empty filter", 1, 1},
		{"  \n ", "empty filter", 1, 1},
		{`event.kind ==`, "syntax error", 1, 14},
		{`"a" + event.kind`, "a filter must be bool, got string", 1, 1},
		{`event.seq + 1`, "", 1, 1},
		{`kind == "app"`, "undeclared reference to 'kind' (did you mean 'event.kind'?)", 1, 1},
		{`evnt.kind == "app"`, "undeclared reference to 'evnt' (did you mean 'event'?)", 1, 1},
		{`cpus > 1`, "undeclared reference to 'cpus'", 1, 1},
		{`event.knd == "app"`, `event has no key "knd" (did you mean 'kind'?)`, 1, 7},
		{`event.kind == "app" &&` + "\n  event.app.instanse == \"x\"", `event.app has no key "instanse" (did you mean 'instance'?)`, 2, 13},
		{`has(event.apps)`, `event has no key "apps" (did you mean 'app'?)`, 1, 11},
		{"event.\n  knd == 1", `event has no key "knd"`, 2, 3},
		{`"é" == event.?knd.orValue(1)`, `event has no key "knd"`, 1, 15},
		{`event["reservation"]["usr"] == "a"`, `event.reservation has no key "usr" (did you mean 'user'?)`, 1, 23},
		{strings.Repeat("x", MaxExprLen+1), "the limit is 4096", 1, 1},
		{"event.type == \"a\xffb\"", "not valid UTF-8", 1, 17},
	}
	for _, c := range cases {
		_, err := CompileEventFilter(c.src)
		if err == nil {
			t.Errorf("%q compiles", c.src)
			continue
		}
		var ee *ExprError
		if !errors.As(err, &ee) || !errors.Is(err, ErrExpr) {
			t.Fatalf("%q: error %T %v, want *ExprError wrapping ErrExpr", c.src, err, err)
		}
		if ee.Kind != Filter {
			t.Errorf("%q: Kind %v", c.src, ee.Kind)
		}
		if !strings.HasPrefix(err.Error(), "filter: ") {
			t.Errorf("%q: Error() = %q, want the prefix filter:", c.src, err)
		}
		if c.msg != "" && !strings.Contains(ee.Msg, c.msg) {
			t.Errorf("%q: Msg %q, want %q", c.src, ee.Msg, c.msg)
		}
		if ee.Line != c.line || c.col != 0 && ee.Col != c.col {
			t.Errorf("%q: at %d:%d, want %d:%d", c.src, ee.Line, ee.Col, c.line, c.col)
		}
	}
}

// The error shows the source line and a caret under the bad key.
func TestEventFilterErrorRendering(t *testing.T) {
	_, err := CompileEventFilter(`event.kind == "app" && event.managr == "gm1"`)
	want := "filter: 1:30: event has no key \"managr\" (did you mean 'manager'?)\n" +
		"  event.kind == \"app\" && event.managr == \"gm1\"\n" +
		"                               ^"
	if err == nil || err.Error() != want {
		t.Fatalf("error:\n%v\nwant:\n%s", err, want)
	}
}

// A comprehension variable named event shadows the variable, so its keys
// are not checked.
func TestEventFilterShadowed(t *testing.T) {
	f, err := CompileEventFilter(`[{"x": 1}].exists(event, event.x == 1) && event.kind == "reservation"`)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := f.Match(resEvent()); !ok || err != nil {
		t.Fatalf("Match = %v, %v", ok, err)
	}
}

// An evaluation over MaxCost is an error, not a hang.
func TestEventFilterCost(t *testing.T) {
	ev := resEvent()
	r := ev.GetReservation()
	for i := range 1000 {
		r.Amounts = append(r.Amounts, &wire.Amount{Kind: "k" + strconv.Itoa(i), N: int64(i)})
	}
	a := "event.reservation.amounts"
	f, err := CompileEventFilter(a + ".all(k, " + a + ".all(j, k + j != \"\"))")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ok, err := f.Match(ev)
	if ok || err == nil {
		t.Fatalf("Match = %v, %v; want a cost error", ok, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestEventMap(t *testing.T) {
	m := EventMap(resEvent())
	if m["kind"] != "reservation" || m["seq"] != int64(7) || !m["time"].(time.Time).Equal(evTime) {
		t.Fatalf("EventMap = %v", m)
	}
	for _, k := range []string{"app", "admin", "relation", "utilization"} {
		if _, ok := m[k]; ok {
			t.Errorf("key %q set on a reservation event", k)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"time":"2026-03-01T12:00:00Z"`, `"amounts":{"cpus":4,"mem":8589934592}`, `"kind":"reservation"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON %s lacks %s", b, want)
		}
	}
	// Every key eventKeys lists is set by EventMap, and no other.
	for _, ev := range []*wire.Event{resEvent(), utilEvent(0.5), relEvent(), appEvent(), adminEvent()} {
		m := EventMap(ev)
		for k, v := range m {
			if !contains(eventKeys[""], k) {
				t.Errorf("EventMap sets key %q that the filter check does not know", k)
			}
			if body, ok := v.(map[string]any); ok && eventKeys[k] != nil {
				if len(body) != len(eventKeys[k]) {
					t.Errorf("%s: keys %v, want %v", k, body, eventKeys[k])
				}
				for bk := range body {
					if !contains(eventKeys[k], bk) {
						t.Errorf("EventMap sets %s.%s that the filter check does not know", k, bk)
					}
				}
			}
		}
	}
	// A nil event and an unknown kind give a map, not a panic.
	if m := EventMap(nil); m["kind"] != "unspecified" || m["seq"] != int64(0) {
		t.Errorf("EventMap(nil) = %v", m)
	}
	if m := EventMap(&wire.Event{Kind: 42, Seq: 1 << 63}); m["kind"] != "42" || m["seq"] != int64(1<<63-1) {
		t.Errorf("EventMap(kind 42) = %v", m)
	}
}

func contains(xs []string, x string) bool {
	for _, e := range xs {
		if e == x {
			return true
		}
	}
	return false
}

func BenchmarkEventFilterMatch(b *testing.B) {
	f, err := CompileEventFilter(`event.kind == "utilization" && event.utilization.cpu_util > 0.5 && event.time > timestamp("2026-01-01T00:00:00Z")`)
	if err != nil {
		b.Fatal(err)
	}
	ev := utilEvent(0.75)
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := f.Match(ev); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
