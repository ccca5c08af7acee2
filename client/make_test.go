package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/wire"
)

// The requests of each mode are those the CLI's reserve always sent.
func TestReserveSpecRequests(t *testing.T) {
	gpus := []*wire.Amount{{Kind: "gpus", N: 1}}
	begin := time.UnixMilli(1_800_000_000_000)
	attrs := map[string]string{"job": "x"}

	q, req := ReserveSpec{CPUs: 2, Mem: 4 << 30, Tokens: gpus, User: "ann", Attrs: attrs, Hold: time.Second}.Requests()
	wantQ := &wire.QueryRequest{Requirement: `cpus_free >= 2 && mem_free >= 4294967296 && tokens["gpus"] >= 1`, User: "ann",
		Cpus: 2, Mem: 4 << 30, Down: 255, Up: 255, Want: 3, Limit: 10, Attrs: attrs}
	wantReq := &wire.ReserveRequest{User: "ann", HoldMs: 1000, Attrs: attrs, Requirement: wantQ.Requirement,
		Amounts: []*wire.Amount{{Kind: "cpus", N: 2}, {Kind: "mem", N: 4 << 30}, {Kind: "gpus", N: 1}}}
	if !proto.Equal(q, wantQ) || !proto.Equal(req, wantReq) {
		t.Errorf("best offer:\n got %v\n     %v\nwant %v\n     %v", q, req, wantQ, wantReq)
	}

	// A window, the caller's requirement, --at: the requirement is the
	// caller's, checked there.
	q, req = ReserveSpec{CPUs: 1, User: "ann", At: "gm154", Requirement: "cpu_util < 0.5", Begin: begin, Duration: time.Hour, Commit: true}.Requests()
	if req.Requirement != "cpu_util < 0.5" || q.Requirement != "cpu_util < 0.5" || !req.Commit ||
		req.BeginUnixMs != begin.UnixMilli() || req.DurationMs != 3_600_000 || q.BeginUnixMs != req.BeginUnixMs {
		t.Errorf("at with a window: %v / %v", q, req)
	}
	_, req = ReserveSpec{CPUs: 1, User: "ann", At: "gm154"}.Requests()
	if req.Requirement != "" {
		t.Errorf("at without a requirement sent %q", req.Requirement)
	}
	// A Begin without a Duration is no window.
	if _, req = (ReserveSpec{CPUs: 1, User: "ann", Begin: begin, Lease: time.Minute}).Requests(); req.BeginUnixMs != 0 || req.LeaseMs != 60_000 {
		t.Errorf("no window: %v", req)
	}
	// A co-reservation: the requirement is All's, and it commits.
	q, req = ReserveSpec{CPUs: 8, User: "ann", All: "cpus_free >= 8", Count: 3}.Requests()
	if q.Requirement != "cpus_free >= 8" || req.Requirement != "cpus_free >= 8" || !req.Commit {
		t.Errorf("all: %v / %v", q, req)
	}
	// No user: the login name.
	if _, req = (ReserveSpec{CPUs: 1}).Requests(); req.User != LoginName() {
		t.Errorf("user %q, want the login name %q", req.User, LoginName())
	}
}

func TestReserverMake(t *testing.T) {
	var sent []*wire.Envelope
	conn := newFakeConn(func(env *wire.Envelope) *wire.Envelope {
		sent = append(sent, env)
		switch {
		case env.GetQueryRequest() != nil:
			return &wire.Envelope{Body: &wire.Envelope_QueryReply{QueryReply: &wire.QueryReply{Offers: []*wire.Offer{
				{Name: "gm1", Peer: "manager"}, {Name: "gm1bis", Peer: "manager"}}}}}
		case env.GetReserveRequest() != nil:
			if len(sent) == 2 { // the first offer was taken meanwhile
				return &wire.Envelope{Body: &wire.Envelope_Error{Error: &wire.ErrorReply{Code: wire.ErrorReply_CODE_REFUSED, Message: "taken"}}}
			}
			return &wire.Envelope{Body: &wire.Envelope_ReservationReply{ReservationReply: &wire.ReservationReply{Reservation: &wire.Reservation{Id: "r1", OwnerName: "gm1bis"}}}}
		}
		return &wire.Envelope{Body: &wire.Envelope_Error{Error: &wire.ErrorReply{Code: wire.ErrorReply_CODE_BAD_REQUEST, Message: "?"}}}
	})
	c := New(conn, nil)
	defer c.Close()
	r := NewReserver(c)
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.Make(ctx, ReserveSpec{User: "ann"}); !errors.Is(err, ErrNothingToReserve) {
		t.Fatalf("nothing: %v", err)
	}
	got, err := r.Make(ctx, ReserveSpec{CPUs: 1, User: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Reservations) != 1 || got.Reservations[0].Id != "r1" || len(got.Tries) != 2 || got.Tries[0].Err == nil {
		t.Errorf("made %v, tries %v", got.Reservations, got.Tries)
	}
	if q := sent[0].GetQueryRequest(); q.GetRequirement() != "cpus_free >= 1" {
		t.Errorf("query %v", q)
	}
}

func TestCheckReservationIDAndSplitInstance(t *testing.T) {
	if err := CheckReservationID("not a number"); err == nil {
		t.Error("a bad reservation number passed")
	}
	if _, _, err := SplitInstance("no-dot"); err == nil {
		t.Error("an instance without .APP passed")
	}
}
