package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// usersNet is one manager whose [users] table maps alice to her client
// peer id, with two gpus only alice may reserve and a policy that serves
// alice and carol; P-admin is its admin.
func usersNet(t *testing.T, allowDeclared bool) *memnet.Net {
	t.Helper()
	cfg := config.Default()
	cfg.Name = "gm1"
	cfg.CPUs = 8
	cfg.Tokens = map[string]int64{"gpus": 2}
	cfg.Access = reservation.Access{"gpus": {"user:alice"}}
	cfg.Users = map[string][]string{"alice": {"P-alice"}}
	cfg.UsersDeclared = &allowDeclared
	cfg.Policy = `request.user in ["alice", "carol"]`
	cfg.Admins = []string{"P-admin"}
	return oneManager(t, "P-gm1", cfg, 8)
}

func reserveGPU(t *testing.T, n *memnet.Net, from, user string) *wire.Envelope {
	t.Helper()
	sid := n.RequestFrom("P-gm1", from, &wire.Envelope{Id: 1, Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
		RequestId: from + user, User: user, Amounts: []*wire.Amount{{Kind: "gpus", N: 1}}}}})
	n.RunFor(100 * time.Millisecond)
	rep := n.Node("P-gm1").Replies[sid]
	if len(rep) != 1 {
		t.Fatalf("%d replies", len(rep))
	}
	return rep[0]
}

func offersTo(t *testing.T, n *memnet.Net, from, user string) int {
	t.Helper()
	sid := n.RequestFrom("P-gm1", from, &wire.Envelope{Id: 2, Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{
		Requirement: "true", User: user}}})
	n.RunFor(100 * time.Millisecond)
	rep := n.Node("P-gm1").Replies[sid]
	if len(rep) != 1 || rep[0].GetQueryReply() == nil {
		t.Fatalf("query: %v", rep)
	}
	return len(rep[0].GetQueryReply().Offers)
}

// A mapped peer is its user whatever it states; an unmapped one is
// peer:<id> when stated names are not taken; the access list on gpus for
// user:alice and the policy then mean what they say.
func TestAuthenticatedUsers(t *testing.T) {
	n := usersNet(t, false)
	// alice's peer states "bob": it is alice all the same.
	rep := reserveGPU(t, n, "P-alice", "bob")
	r := rep.GetReservationReply().GetReservation()
	if r == nil || r.User != "alice" {
		t.Fatalf("alice's peer reserving as bob: %v", rep)
	}
	// mallory states "alice": she is peer:P-mallory, and refused.
	rep = reserveGPU(t, n, "P-mallory", "alice")
	if e := rep.GetError(); e == nil || e.Code != wire.ErrorReply_CODE_REFUSED || !strings.Contains(e.Message, "access list") {
		t.Fatalf("mallory claiming alice: %v", rep)
	}
	if got := n.Node("P-gm1").Published[len(n.Node("P-gm1").Published)-1].GetReservation().GetUser(); got != "peer:P-mallory" {
		t.Fatalf("the refusal names user %q, want peer:P-mallory", got)
	}
	// The policy serves alice (by her peer), not a peer claiming carol.
	if got := offersTo(t, n, "P-alice", ""); got != 1 {
		t.Fatalf("alice got %d offers", got)
	}
	if got := offersTo(t, n, "P-mallory", "carol"); got != 0 {
		t.Fatalf("a peer claiming carol got %d offers", got)
	}

	// With allow_declared (the default), stated names are taken: not
	// security, as documented; a mapped peer still cannot change name.
	n = usersNet(t, true)
	if rep := reserveGPU(t, n, "P-mallory", "alice"); rep.GetReservationReply() == nil {
		t.Fatalf("with allow_declared, a stated alice is alice: %v", rep)
	}
	if got := offersTo(t, n, "P-mallory", "carol"); got != 1 {
		t.Fatalf("with allow_declared, a stated carol got %d offers", got)
	}
	if rep := reserveGPU(t, n, "P-alice", "mallory"); rep.GetReservationReply().GetReservation().GetUser() != "alice" {
		t.Fatalf("alice's peer stating mallory: %v", rep)
	}
}

// The users table set at runtime by admin command (set user, unset user):
// a peer mapped that way is its user whatever it states, the access list
// and policy follow, the change survives a restart, and unset takes it
// back. Run with admin --all, this is the grid's users file.
func TestUsersSetAtRuntime(t *testing.T) {
	const dana = "12D3KooWLdCdUaSVFAAYc9se4oCb2KS6gqFSsgCCK1bSwAy6x9q4" // a real peer id: set user checks them
	n := usersNet(t, false)
	if rep := reserveGPU(t, n, dana, "alice"); rep.GetError() == nil {
		t.Fatalf("an unmapped peer claiming alice got a gpu: %v", rep)
	}
	for _, c := range []struct{ cmd, want string }{
		{"set user alice not-a-peer", "invalid peer id"},
		{"set user 'a b' " + dana, "is not a user name"},
		{"set user alice", "set user: give NAME and PEER_ID"},
	} {
		if rep := adminAs(t, n, "P-admin", c.cmd); rep.Ok || !strings.Contains(rep.Output, c.want) {
			t.Errorf("%s: %v; want a refusal with %q", c.cmd, rep, c.want)
		}
	}
	if rep := adminAs(t, n, "P-user", "set user alice "+dana); rep.Ok {
		t.Fatalf("a non-admin set a user: %v", rep)
	}
	if rep := adminAs(t, n, "P-admin", "set user alice "+dana); !rep.Ok {
		t.Fatalf("set user: %v", rep)
	}
	check := func(when string, want bool) {
		t.Helper()
		rep := reserveGPU(t, n, dana, "bob"+when)
		r := rep.GetReservationReply().GetReservation()
		if got := r != nil && r.User == "alice"; got != want {
			t.Fatalf("%s: dana's peer reserving a gpu as bob: %v (want granted as alice: %v)", when, rep, want)
		}
		if r != nil {
			n.RequestFrom("P-gm1", dana, &wire.Envelope{Id: 9, Body: &wire.Envelope_ReservationOp{ReservationOp: &wire.ReservationOpRequest{
				Op: wire.ReservationOpRequest_OP_RELEASE, Id: r.Id}}})
			n.RunFor(100 * time.Millisecond)
		}
	}
	check("now", true)
	if d := n.Node("P-gm1").Disk.Attributes; d == nil || len(d.Users["alice"]) != 1 {
		t.Fatalf("saved: %+v", d)
	}
	n.Kill("P-gm1")
	n.Start("P-gm1")
	n.RunFor(100 * time.Millisecond)
	check("after a restart", true)
	if rep := adminAs(t, n, "P-admin", "unset user alice"); !rep.Ok {
		t.Fatalf("unset user: %v", rep)
	}
	check("after unset", false)
	n.Kill("P-gm1")
	n.Start("P-gm1")
	n.RunFor(100 * time.Millisecond)
	check("after unset and a restart", false)
}
