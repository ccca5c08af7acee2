package node_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/wire"
	"google.golang.org/protobuf/proto"
)

// appsNet is one manager with 8 cpus and an application runtime that
// records every call and answers with the instance it was asked about.
func appsNet(t *testing.T) (*memnet.Net, *[]node.AppCall) {
	t.Helper()
	cfg := config.Default()
	cfg.Name = "gm1"
	cfg.CPUs = 8
	cfg.Memory = 8 << 30
	cfg.Admins = []string{"root-peer"}
	cfg.Reservations.HoldTimeout = 2 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n := newNet(5)
	var calls []node.AppCall
	n.App = func(nd *memnet.Node, nc node.Call) (any, error) {
		call := nc.Req.(node.AppCall)
		calls = append(calls, call)
		if call.Req == nil {
			return nil, nil
		}
		return &wire.AppReply{Instances: []*wire.AppInstance{{Id: call.Req.Instance, CpuLimit: float64(call.Grant.CPUs), MemLimit: call.Grant.Mem}}}, nil
	}
	n.Add("P-gm1", cfg)
	n.Start("P-gm1")
	n.RunFor(100 * time.Millisecond)
	return n, &calls
}

func reserveAs(t *testing.T, n *memnet.Net, who string, commit bool) string {
	t.Helper()
	sid := n.RequestFrom("P-gm1", who, &wire.Envelope{Id: 1, Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
		RequestId: who + time.Duration(n.Now().UnixNano()).String(), Commit: commit, LeaseMs: 60_000,
		Amounts: []*wire.Amount{{Kind: "cpus", N: 2}, {Kind: "mem", N: 1 << 30}}}}})
	n.RunFor(100 * time.Millisecond)
	rep := n.Node("P-gm1").Replies[sid]
	if len(rep) == 0 || rep[0].GetReservationReply() == nil {
		t.Fatalf("reserve: %v", rep)
	}
	return rep[0].GetReservationReply().Reservation.Id
}

func appAsk(t *testing.T, n *memnet.Net, who string, req *wire.AppRequest) *wire.Envelope {
	t.Helper()
	sid := n.RequestFrom("P-gm1", who, &wire.Envelope{Id: 7, Body: &wire.Envelope_AppRequest{AppRequest: req}})
	n.RunFor(100 * time.Millisecond)
	rep := n.Node("P-gm1").Replies[sid]
	if len(rep) != 1 {
		t.Fatalf("%v: %d replies", req, len(rep))
	}
	return rep[0]
}

func wantErr(t *testing.T, env *wire.Envelope, code wire.ErrorReply_Code, words string) {
	t.Helper()
	e := env.GetError()
	if e == nil || e.Code != code || !strings.Contains(e.Message, words) {
		t.Fatalf("got %v, want %v with %q", env, code, words)
	}
}

// Only the holder of a committed reservation (or an admin) may install on
// it and control its instances; the runtime gets the reservation's limits.
func TestAppRequestsCheckTheHolder(t *testing.T) {
	n, calls := appsNet(t)
	sha := strings.Repeat("ab", 32)
	id := reserveAs(t, n, "alice", true)
	held := reserveAs(t, n, "alice", false)

	rep := appAsk(t, n, "alice", &wire.AppRequest{Op: wire.AppRequest_OP_INSTALL, Reservation: id, BundleSha256: sha})
	if rep.GetAppReply() == nil {
		t.Fatalf("holder's install: %v", rep)
	}
	last := (*calls)[len(*calls)-1]
	if last.Grant.CPUs != 2 || last.Grant.Mem != 1<<30 || last.Grant.Holder != "alice" || last.Client != "alice" {
		t.Fatalf("grant %+v, client %s", last.Grant, last.Client)
	}
	wantErr(t, appAsk(t, n, "mallory", &wire.AppRequest{Op: wire.AppRequest_OP_INSTALL, Reservation: id, BundleSha256: sha}),
		wire.ErrorReply_CODE_FORBIDDEN, "only its holder or an admin")
	wantErr(t, appAsk(t, n, "mallory", &wire.AppRequest{Op: wire.AppRequest_OP_STOP, Instance: id + ".hello"}),
		wire.ErrorReply_CODE_FORBIDDEN, "held by")
	wantErr(t, appAsk(t, n, "mallory", &wire.AppRequest{Op: wire.AppRequest_OP_UPLOAD, Reservation: id}),
		wire.ErrorReply_CODE_FORBIDDEN, "held by")
	if rep := appAsk(t, n, "alice", &wire.AppRequest{Op: wire.AppRequest_OP_UPLOAD, Reservation: id}); rep.GetAppReply() == nil {
		t.Fatalf("holder's upload: %v", rep)
	}
	if rep := appAsk(t, n, "root-peer", &wire.AppRequest{Op: wire.AppRequest_OP_STOP, Instance: id + ".hello"}); rep.GetAppReply() == nil {
		t.Fatalf("admin's stop: %v", rep)
	}
	// Anyone may look.
	if rep := appAsk(t, n, "mallory", &wire.AppRequest{Op: wire.AppRequest_OP_STATUS, Instance: id + ".hello"}); rep.GetAppReply() == nil {
		t.Fatalf("status: %v", rep)
	}
	wantErr(t, appAsk(t, n, "alice", &wire.AppRequest{Op: wire.AppRequest_OP_INSTALL, Reservation: held, BundleSha256: sha}),
		wire.ErrorReply_CODE_CONFLICT, "commit it first")
	wantErr(t, appAsk(t, n, "alice", &wire.AppRequest{Op: wire.AppRequest_OP_START, Instance: "hello"}),
		wire.ErrorReply_CODE_BAD_REQUEST, "RESERVATION.APP")
	wantErr(t, appAsk(t, n, "alice", &wire.AppRequest{Op: wire.AppRequest_OP_START, Instance: id + ".Hello!"}),
		wire.ErrorReply_CODE_BAD_REQUEST, "not an application name")
	wantErr(t, appAsk(t, n, "alice", &wire.AppRequest{Op: wire.AppRequest_OP_INSTALL, Reservation: id, BundleSha256: "xyz"}),
		wire.ErrorReply_CODE_BAD_REQUEST, "not a sha256")
	wantErr(t, appAsk(t, n, "alice", &wire.AppRequest{Op: wire.AppRequest_OP_START, Instance: "gm1-999-aaaaaa.hello"}),
		wire.ErrorReply_CODE_NOT_FOUND, "no reservation")
	wantErr(t, appAsk(t, n, "alice", &wire.AppRequest{Op: 99, Instance: id + ".hello"}),
		wire.ErrorReply_CODE_UNSUPPORTED, "does not know application operation 99")
}

// A reservation that ends — released, or its lease run out — tells the
// runtime to remove its instances; a restart names the live ones.
func TestReservationEndRemovesApps(t *testing.T) {
	n, calls := appsNet(t)
	if len(*calls) != 1 || !(*calls)[0].Reconcile || len((*calls)[0].Live) != 0 {
		t.Fatalf("start: %+v", *calls)
	}
	a := reserveAs(t, n, "alice", true)
	b := reserveAs(t, n, "bob", true)
	sid := n.RequestFrom("P-gm1", "alice", &wire.Envelope{Id: 3, Body: &wire.Envelope_ReservationOp{ReservationOp: &wire.ReservationOpRequest{
		Op: wire.ReservationOpRequest_OP_RELEASE, Id: a, RequestId: "rel"}}})
	n.RunFor(100 * time.Millisecond)
	if n.Node("P-gm1").Replies[sid][0].GetReservationReply() == nil {
		t.Fatal("release failed")
	}
	ended := func() []string {
		var out []string
		for _, c := range *calls {
			out = append(out, c.Ended...)
		}
		return out
	}
	if got := ended(); !slices.Equal(got, []string{a}) {
		t.Fatalf("after release: ended %v", got)
	}
	wantErr(t, appAsk(t, n, "alice", &wire.AppRequest{Op: wire.AppRequest_OP_START, Instance: a + ".hello"}),
		wire.ErrorReply_CODE_GONE, "its applications were removed")

	n.Kill("P-gm1")
	*calls = nil
	n.Start("P-gm1")
	n.RunFor(100 * time.Millisecond)
	if len(*calls) == 0 || !(*calls)[0].Reconcile || !slices.Equal((*calls)[0].Live, []string{b}) {
		t.Fatalf("restart: %+v", *calls)
	}
	n.RunFor(2 * time.Minute) // b's lease (1m) runs out
	if got := ended(); !slices.Equal(got, []string{b}) {
		t.Fatalf("after the lease: ended %v", got)
	}
}

// The answer to a release waits for the runtime to remove the
// reservation's instances and says which it removed; a runtime slower
// than releaseWait gets an answer then, naming those still being removed
// (as the runtime last reported them). Releasing a hold, which runs
// nothing, is answered at once.
func TestReleaseSaysWhatItRemoved(t *testing.T) {
	n, calls := appsNet(t)
	nd := n.Node("P-gm1")
	var removed []*wire.AppRemoval // what the runtime says it removed
	var lastID uint64              // the id of the last call
	n.App = func(_ *memnet.Node, nc node.Call) (any, error) {
		call := nc.Req.(node.AppCall)
		*calls = append(*calls, call)
		lastID = nc.ID
		if nc.ID != 0 && len(call.Ended) > 0 && removed != nil {
			nd.Core.ReportApps(n.Now(), nil)
			nd.Core.CallDone(n.Now(), node.CallDone{ID: nc.ID, Kind: node.CallApp, Result: removed})
		}
		return nil, nil
	}
	release := func(id string) (*wire.Reservation, time.Duration) {
		t.Helper()
		start := n.Now()
		sid := n.RequestFrom("P-gm1", "alice", &wire.Envelope{Id: 3, Body: &wire.Envelope_ReservationOp{ReservationOp: &wire.ReservationOpRequest{
			Op: wire.ReservationOpRequest_OP_RELEASE, Id: id, RequestId: "rel-" + id}}})
		if !n.RunUntil(func() bool { return len(nd.Replies[sid]) > 0 }, 30*time.Second) {
			t.Fatalf("release %s: no answer", id)
		}
		r := nd.Replies[sid][0].GetReservationReply().GetReservation()
		if r == nil || r.State != wire.ReservationState_RESERVATION_STATE_RELEASED {
			t.Fatalf("release %s: %v", id, nd.Replies[sid][0])
		}
		return r, n.Now().Sub(start)
	}
	report := func(ids ...string) {
		var list []*wire.AppInstance
		for _, id := range ids {
			res, app, _ := node.SplitInstance(id)
			list = append(list, &wire.AppInstance{Id: id, App: app, Reservation: res, State: "running"})
		}
		n.Do("P-gm1", func(c *node.Core, now time.Time) { c.ReportApps(now, list) })
	}

	// The runtime removes and says so: the answer is what it said.
	a := reserveAs(t, n, "alice", true)
	report(a + ".web")
	removed = []*wire.AppRemoval{{Id: a + ".web", App: "web", Version: "1", State: "running", Removed: true, Undone: 7}}
	r, _ := release(a)
	if len(r.AppsRemoved) != 1 || !proto.Equal(r.AppsRemoved[0], removed[0]) {
		t.Fatalf("release %s: removed %v", a, r.AppsRemoved)
	}
	last := (*calls)[len(*calls)-1]
	if lastID == 0 || !slices.Equal(last.Ended, []string{a}) {
		t.Fatalf("the runtime was asked %+v", last)
	}

	// The runtime takes longer than releaseWait: the answer comes then,
	// with the instances the runtime last reported, still there.
	b := reserveAs(t, n, "alice", true)
	report(b+".web", b+".db")
	removed = nil
	n.Latency = 10 * time.Second // the runtime (and the client) far away
	r, took := release(b)
	n.Latency = time.Millisecond
	if way := 20 * time.Second; took < way+3*time.Second || took > way+3*time.Second+100*time.Millisecond {
		t.Errorf("answered after %v, want 3s (the wait) + the way there and back (20s)", took)
	}
	if len(r.AppsRemoved) != 2 || r.AppsRemoved[0].Id != b+".db" || r.AppsRemoved[1].Id != b+".web" ||
		r.AppsRemoved[0].Removed || r.AppsRemoved[0].State != "running" || r.AppsRemoved[0].Error != "" {
		t.Fatalf("release %s: removed %v", b, r.AppsRemoved)
	}

	// A hold runs nothing: answered at once, nothing removed.
	h := reserveAs(t, n, "alice", false)
	r, took = release(h)
	if len(r.AppsRemoved) != 0 || took > 5*time.Millisecond {
		t.Fatalf("release of a hold: %v after %v", r.AppsRemoved, took)
	}
	// Released again: the original answer, at once.
	r, took = release(h)
	if len(r.AppsRemoved) != 0 || took > 5*time.Millisecond {
		t.Fatalf("release again: %v after %v", r.AppsRemoved, took)
	}
}
