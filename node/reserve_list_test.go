package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/wire"
)

// A listing is bounded (the reply must fit a frame); what was left out is
// counted, and --mine lists only the asker's.
func TestReservationListingIsBounded(t *testing.T) {
	cfg := config.Default()
	cfg.Name = "lst"
	cfg.CPUs = 16
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n := newNet(3)
	n.Add("P-lst", cfg)
	n.Start("P-lst")
	for i := 0; i < 7; i++ {
		from := []string{"alice", "bob"}[i%2]
		n.RequestFrom("P-lst", from, &wire.Envelope{Id: 1, Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
			RequestId: fmt.Sprint("r", i), Amounts: []*wire.Amount{{Kind: "cpus", N: 1}}}}})
	}
	n.RunFor(time.Second)
	list := func(req *wire.ReservationsRequest) *wire.ReservationsReply {
		rep := n.Ask("P-lst", &wire.Envelope{Body: &wire.Envelope_ReservationsRequest{ReservationsRequest: req}}, time.Second)
		if rep.GetReservationsReply() == nil {
			t.Fatalf("no listing: %v", rep)
		}
		return rep.GetReservationsReply()
	}
	if r := list(&wire.ReservationsRequest{Limit: 5}); len(r.Reservations) != 5 || r.More != 2 || r.Live != 7 {
		t.Fatalf("limit 5: %d listed, %d more, %d live", len(r.Reservations), r.More, r.Live)
	}
	if r := list(&wire.ReservationsRequest{}); len(r.Reservations) != 7 || r.More != 0 {
		t.Fatalf("no limit: %d listed, %d more", len(r.Reservations), r.More)
	}
	sid := n.RequestFrom("P-lst", "bob", &wire.Envelope{Id: 1, Body: &wire.Envelope_ReservationsRequest{ReservationsRequest: &wire.ReservationsRequest{Mine: true}}})
	n.RunFor(100 * time.Millisecond)
	mine := n.Node("P-lst").Replies[sid][0].GetReservationsReply()
	if len(mine.Reservations) != 3 {
		t.Fatalf("bob's: %d listed, want 3", len(mine.Reservations))
	}
	for _, r := range mine.Reservations {
		if r.HolderPeer != "bob" {
			t.Fatalf("bob's listing has %s's reservation", r.HolderPeer)
		}
	}
}
