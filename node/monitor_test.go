package node_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/wire"
)

// evText is a published event in one line: "relation/down gm160" names
// the other side of a relation event, the reservation number of a
// reservation event, the instance of an application event.
func evText(ev *wire.Event) string {
	kind := strings.ToLower(strings.TrimPrefix(ev.Kind.String(), "EVENT_KIND_"))
	s := kind + "/" + ev.Type
	switch b := ev.Body.(type) {
	case *wire.Event_Relation:
		s += " " + b.Relation.Name
	case *wire.Event_Reservation:
		if b.Reservation.Id != "" {
			s += " " + b.Reservation.Id
		}
	case *wire.Event_App:
		s += " " + b.App.Instance
	case *wire.Event_Admin:
		s += fmt.Sprintf(" %q ok=%v", b.Admin.Command, b.Admin.Ok)
	}
	return s
}

// takeEvents returns the events of the named manager other than
// utilization samples, since the last call, as text.
func takeEvents(n *memnet.Net, name string) []string {
	nd := n.Node(pid(name))
	var out []string
	for _, ev := range nd.Published {
		if ev.Kind != wire.EventKind_EVENT_KIND_UTILIZATION {
			out = append(out, evText(ev))
		}
	}
	nd.Published = nil
	return out
}

func wantEvents(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("events:\n  got  %q\n  want %q", got, want)
	}
}

// Every kind of event is produced exactly when its cause happens, and
// every event is stamped with its producer, its clock and a sequence.
func TestEventsAtTheirCauses(t *testing.T) {
	n := patentNet(t, 3)
	for _, e := range patent {
		n.Node(pid(e[0])).Host = &node.HostValues{CPUs: 4}
		n.Start(pid(e[0]))
	}
	if !n.RunUntil(func() bool { return formed(n) }, 10*time.Second) {
		t.Fatal("tree did not form")
	}
	// gm154 saw its superior and its two inferiors come up.
	got := takeEvents(n, "gm154")
	slices.Sort(got)
	wantEvents(t, got, "relation/up gm152", "relation/up gm160", "relation/up gm162")
	for _, e := range patent {
		takeEvents(n, e[0])
	}
	n.RunFor(30 * time.Second) // at rest: no events but samples
	for _, e := range patent {
		wantEvents(t, takeEvents(n, e[0]))
	}

	// Reservations: held, committed, renewed, released, refused, expired.
	gm := pid("gm160")
	ask := func(env *wire.Envelope) *wire.Envelope {
		t.Helper()
		rep := n.Ask(gm, env, time.Second)
		if rep == nil {
			t.Fatalf("no answer to %v", env)
		}
		return rep
	}
	reserve := func(rid string, cpus int64, commit bool) *wire.Envelope {
		return ask(&wire.Envelope{Id: 1, TraceId: "t-" + rid, Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
			RequestId: rid, Commit: commit, HoldMs: 1000, Amounts: []*wire.Amount{{Kind: "cpus", N: cpus}}}}})
	}
	r1 := reserve("a", 1, false).GetReservationReply().GetReservation().GetId()
	wantEvents(t, takeEvents(n, "gm160"), "reservation/held "+r1)
	reserve("a", 1, false) // a retry is no new event
	wantEvents(t, takeEvents(n, "gm160"))
	op := func(o wire.ReservationOpRequest_Op, id string) {
		ask(&wire.Envelope{Id: 2, Body: &wire.Envelope_ReservationOp{ReservationOp: &wire.ReservationOpRequest{Op: o, Id: id, LeaseMs: 60_000}}})
	}
	op(wire.ReservationOpRequest_OP_COMMIT, r1)
	op(wire.ReservationOpRequest_OP_RENEW, r1)
	op(wire.ReservationOpRequest_OP_RELEASE, r1)
	op(wire.ReservationOpRequest_OP_RELEASE, r1) // idempotent: no event
	wantEvents(t, takeEvents(n, "gm160"), "reservation/committed "+r1, "reservation/renewed "+r1, "reservation/released "+r1)
	if rep := reserve("b", 1<<20, false); rep.GetError() == nil {
		t.Fatalf("a million cpus reserved: %v", rep)
	}
	nd := n.Node(gm)
	refused := nd.Published[len(nd.Published)-1]
	wantEvents(t, takeEvents(n, "gm160"), "reservation/refused")
	if refused.TraceId != "t-b" || !strings.Contains(refused.GetReservation().Reason, "cpus") {
		t.Fatalf("refusal event: %v", refused)
	}
	r3 := reserve("c", 1, false).GetReservationReply().GetReservation().GetId()
	takeEvents(n, "gm160")
	n.RunFor(2 * time.Second)
	wantEvents(t, takeEvents(n, "gm160"), "reservation/expired "+r3)

	// Admin: a command that changes something is an event; one that only
	// reads is not.
	ask(&wire.Envelope{Id: 3, Body: &wire.Envelope_AdminRequest{AdminRequest: &wire.AdminRequest{Command: "status"}}})
	wantEvents(t, takeEvents(n, "gm160"))
	ask(&wire.Envelope{Id: 4, Body: &wire.Envelope_AdminRequest{AdminRequest: &wire.AdminRequest{Command: "set heartbeat.interval 1s"}}})
	wantEvents(t, takeEvents(n, "gm160"), `admin/command "set heartbeat.interval 1s" ok=false`) // not an admin: refused, and told

	// Applications: what the runtime reports is compared with what it
	// reported before.
	report := func(list ...*wire.AppInstance) {
		n.Do(gm, func(c *node.Core, now time.Time) { c.ReportApps(now, list) })
	}
	report()
	wantEvents(t, takeEvents(n, "gm160"))
	inst := &wire.AppInstance{Id: r1 + ".web", App: "web", Reservation: r1, State: "installed"}
	report(inst)
	inst2 := proto.CloneOf(inst)
	inst2.State, inst2.CpuSeconds = "running", 1.5
	report(inst2)
	inst3 := proto.CloneOf(inst2)
	inst3.State = "paused"
	report(inst3)
	report(inst2)
	report(inst2) // no change: no event
	report()
	wantEvents(t, takeEvents(n, "gm160"), "app/installed "+inst.Id, "app/started "+inst.Id, "app/paused "+inst.Id,
		"app/resumed "+inst.Id, "app/removed "+inst.Id)

	// Failure: gm154 dies. gm160 sees it suspect, then down, declares its
	// superior failed and reparents under gm152; gm152 sees its inferior
	// go down. Each producer's sequence numbers rise by one.
	n.Kill(pid("gm154"))
	n.RunUntil(func() bool { return relState(n, "gm160", "gm152") == "superior:up" }, 20*time.Second)
	got = takeEvents(n, "gm160")
	want := []string{"relation/down gm154", "relation/failed-superior gm154", "relation/up gm152", "relation/reparented gm152"}
	if !slices.Equal(got, want) {
		t.Fatalf("gm160 events after gm154 died:\n  got  %q\n  want %q", got, want)
	}
	if got := takeEvents(n, "gm152"); !slices.Contains(got, "relation/down gm154") || !slices.Contains(got, "relation/up gm160") {
		t.Fatalf("gm152 events: %q", got)
	}
	// A relation that misses a heartbeat is suspect, then up again.
	takeEvents(n, "gm156")
	n.Drop = func(from, to string, env *wire.Envelope) bool { return from == pid("gm164") && to == pid("gm156") }
	n.RunFor(1500 * time.Millisecond)
	n.Drop = nil
	n.RunFor(2 * time.Second)
	wantEvents(t, takeEvents(n, "gm156"), "relation/suspect gm164", "relation/up gm164")

	n.RunFor(20 * time.Second)
	var last uint64
	for _, ev := range n.Node(gm).Published {
		if ev.Peer != gm || ev.Manager != "gm160" || ev.Version != node.EventVersion || ev.TimeUnixMs == 0 {
			t.Fatalf("event not stamped by its producer: %v", ev)
		}
		if last != 0 && ev.Seq != last+1 {
			t.Fatalf("sequence %d after %d", ev.Seq, last)
		}
		last = ev.Seq
	}
}

// A manager that loses every superior says it acts as a root, once per
// failure.
func TestRootEvent(t *testing.T) {
	n := newNet(4)
	n.Add(pid("gm1"), testConfig(t, "gm1"))
	n.Add(pid("gm2"), testConfig(t, "gm2", "gm1"))
	n.Start(pid("gm1"))
	n.Start(pid("gm2"))
	n.RunUntil(func() bool { return relState(n, "gm2", "gm1") == "superior:up" }, 5*time.Second)
	takeEvents(n, "gm2")
	n.Kill(pid("gm1"))
	n.RunFor(60 * time.Second)
	got := takeEvents(n, "gm2")
	roots := 0
	for _, e := range got {
		if e == "relation/root gm1" {
			roots++
		}
	}
	if roots != 1 {
		t.Fatalf("root events %d in %q", roots, got)
	}
}

// Utilization samples go to the superior and fold up: the root's sample
// counts every manager of the tree and sums their free cpus.
func TestUtilizationFoldsUp(t *testing.T) {
	n := patentNet(t, 5)
	for _, e := range patent {
		nd := n.Node(pid(e[0]))
		nd.Host = &node.HostValues{CPUs: 4}
		n.Start(pid(e[0]))
	}
	n.RunUntil(func() bool { return formed(n) }, 10*time.Second)
	n.RunFor(45 * time.Second) // samples climb one level per interval
	var rootSample *wire.Utilization
	for _, ev := range n.Node(pid("gm152")).Published {
		if u := ev.GetUtilization(); u != nil {
			rootSample = u
		}
	}
	if rootSample == nil {
		t.Fatal("the root published no sample")
	}
	if rootSample.SubtreeManagers != uint32(len(patent)) || rootSample.Superior != "" {
		t.Fatalf("root sample: %v", rootSample)
	}
	var free int64
	for _, a := range rootSample.SubtreeFree {
		if a.Kind == "cpus" {
			free = a.N
		}
	}
	if free != int64(4*len(patent)) {
		t.Fatalf("subtree cpus free %d, want %d (%v)", free, 4*len(patent), rootSample)
	}
	// A leaf's samples name its superior.
	for _, ev := range n.Node(pid("gm160")).Published {
		if u := ev.GetUtilization(); u != nil && u.Superior != pid("gm154") {
			t.Fatalf("gm160's sample names superior %q", u.Superior)
		}
	}
}

// With DiscardPublished (the simulator's setting) no event is handed to
// OnPublish or kept in Node.Published, and the samples still climb: the
// root's view of its subtree counts every manager.
func TestDiscardPublishedStillCarriesSamples(t *testing.T) {
	n := patentNet(t, 5)
	n.DiscardPublished = true
	handed := 0
	n.OnPublish = func(*memnet.Node, *wire.Event) { handed++ }
	for _, e := range patent {
		n.Node(pid(e[0])).Host = &node.HostValues{CPUs: 4}
		n.Start(pid(e[0]))
	}
	n.RunUntil(func() bool { return formed(n) }, 10*time.Second)
	n.RunFor(45 * time.Second)
	if got := node.SubtreeManagers(n.Node(pid("gm152")).Core); got != uint32(len(patent)) {
		t.Fatalf("the root counts %d managers in its subtree, want %d", got, len(patent))
	}
	for _, e := range patent {
		if p := n.Node(pid(e[0])).Published; len(p) > 0 || handed > 0 {
			t.Fatalf("%s kept %d events, %d handed to OnPublish", e[0], len(p), handed)
		}
	}
}

// Trace ids travel with a query to every manager it reaches, and come back
// on the answer.
func TestQueryTraceTravels(t *testing.T) {
	n := patentNet(t, 6)
	for _, e := range patent {
		n.Start(pid(e[0]))
	}
	n.RunUntil(func() bool { return formed(n) }, 10*time.Second)
	seen := map[string]string{}
	n.Trace = func(_ time.Time, from string, dst *memnet.Node, env *wire.Envelope) {
		to := dst.Peer
		if env.GetQueryRequest() != nil {
			seen[to] = env.TraceId
		}
	}
	rep := n.Ask(pid("gm160"), &wire.Envelope{Id: 9, TraceId: "trace-1", Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{
		Requirement: "false", Up: 9, Down: 9}}}, 5*time.Second)
	if rep == nil || rep.TraceId != "trace-1" {
		t.Fatalf("answer %v", rep)
	}
	if len(seen) < len(patent)-1 {
		t.Fatalf("the query reached %d managers: %v", len(seen), seen)
	}
	for to, tr := range seen {
		if tr != "trace-1" {
			t.Fatalf("%s got trace %q", to, tr)
		}
	}
	// A bad trace id is refused with the field named.
	rep = n.Ask(pid("gm160"), &wire.Envelope{Id: 10, TraceId: "bad trace!", Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}}, time.Second)
	if e := rep.GetError(); e == nil || !strings.Contains(e.Message, "trace_id") {
		t.Fatalf("bad trace: %v", rep)
	}
}
