package node_test

import (
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/wire"
)

// tokensQuery runs requirement at peer and returns its offers.
func tokensQuery(t *testing.T, n *memnet.Net, peer, requirement string) []*wire.Offer {
	t.Helper()
	req := &wire.QueryRequest{Requirement: requirement, Want: 1, Limit: 10, BudgetMs: 1000}
	rep := n.Ask(peer, &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: req}}, 5*time.Second)
	if rep == nil {
		t.Fatalf("query %q: no answer", requirement)
	}
	if e := rep.GetError(); e != nil {
		t.Fatalf("query %q: %s: %s", requirement, e.Code, e.Message)
	}
	return rep.GetQueryReply().GetOffers()
}

// matchedValue is the value an offer shows for ref in its matched list.
func matchedValue(o *wire.Offer, ref string) (string, bool) {
	for _, a := range o.Matched {
		if a.Key == ref {
			return a.Value, true
		}
	}
	return "", false
}

func TestTokensInQueries(t *testing.T) {
	cfg := config.Default()
	cfg.Name = "gpu1"
	cfg.CPUs = 8
	cfg.Tokens = map[string]int64{"gpus": 2, "licenses.matlab": 5}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n := newNet(1)
	peer := pid("gpu1")
	n.Add(peer, cfg)
	n.Start(peer)
	n.RunFor(time.Second)

	const need = `tokens.gpus >= 1`
	check := func(when string, want bool, free string) {
		t.Helper()
		offers := tokensQuery(t, n, peer, need)
		if got := len(offers) == 1; got != want {
			t.Fatalf("%s: %s matched %d offers, want match %v", when, need, len(offers), want)
		}
		if want {
			if v, ok := matchedValue(offers[0], "tokens.gpus"); !ok || v != free {
				t.Errorf("%s: matched tokens.gpus = %q (%v), want %q", when, v, ok, free)
			}
		}
	}
	check("at start", true, "2")

	// The other forms: a key that is not an identifier, and a token this
	// manager does not declare.
	offers := tokensQuery(t, n, peer, `tokens["licenses.matlab"] >= 2`)
	if len(offers) != 1 {
		t.Fatalf(`tokens["licenses.matlab"] >= 2 matched %d offers`, len(offers))
	}
	if v, ok := matchedValue(offers[0], `tokens["licenses.matlab"]`); !ok || v != "5" {
		t.Errorf(`matched tokens["licenses.matlab"] = %q (%v), want "5"`, v, ok)
	}
	for _, src := range []string{`tokens.fpgas >= 0`, `tokens.fpgas == 0 || false`} {
		if offers := tokensQuery(t, n, peer, src); len(offers) != 0 {
			t.Errorf("%s: a token not declared matched", src)
		}
	}
	if offers := tokensQuery(t, n, peer, `!has(tokens.fpgas) && "gpus" in tokens`); len(offers) != 1 {
		t.Error(`!has(tokens.fpgas) && "gpus" in tokens did not match`)
	}

	// Reserving both gpus leaves none free.
	rep := n.Ask(peer, &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
		RequestId: "r1", Amounts: []*wire.Amount{{Kind: "gpus", N: 2}},
	}}}, 5*time.Second)
	res := rep.GetReservationReply().GetReservation()
	if res == nil {
		t.Fatalf("reserve: %v", rep)
	}
	check("reserved", false, "")
	if offers := tokensQuery(t, n, peer, `tokens.gpus == 0 && tokens["licenses.matlab"] == 5`); len(offers) != 1 {
		t.Error("reserved: tokens.gpus == 0 did not match")
	}

	// Releasing them makes them free again.
	rep = n.Ask(peer, &wire.Envelope{Body: &wire.Envelope_ReservationOp{ReservationOp: &wire.ReservationOpRequest{
		Op: wire.ReservationOpRequest_OP_RELEASE, Id: res.Id, RequestId: "r2",
	}}}, 5*time.Second)
	if rep.GetReservationReply().GetReservation().GetState() != wire.ReservationState_RESERVATION_STATE_RELEASED {
		t.Fatalf("release: %v", rep)
	}
	check("released", true, "2")

	// New host values (which rebuild the values) keep the counts net of
	// reservations.
	rep = n.Ask(peer, &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
		RequestId: "r3", Amounts: []*wire.Amount{{Kind: "gpus", N: 1}},
	}}}, 5*time.Second)
	if rep.GetReservationReply().GetReservation() == nil {
		t.Fatalf("reserve one: %v", rep)
	}
	n.SetHost(peer, node.HostValues{CPUs: 8, Mem: 1 << 30, MemAvail: 1 << 30, CPUUtil: 0.1})
	check("one reserved, host values refreshed", true, "1")
}

// A manager that declares no tokens matches no token requirement.
func TestNoTokens(t *testing.T) {
	n := newNet(1)
	peer := pid("plain")
	n.Add(peer, testConfig(t, "plain"))
	n.Start(peer)
	n.RunFor(time.Second)
	if offers := tokensQuery(t, n, peer, `tokens.gpus >= 0`); len(offers) != 0 {
		t.Error("tokens.gpus >= 0 matched a manager without tokens")
	}
	if offers := tokensQuery(t, n, peer, `size(tokens) == 0`); len(offers) != 1 {
		t.Error("size(tokens) == 0 did not match a manager without tokens")
	}
}
