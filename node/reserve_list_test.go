package node_test

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/reservation"
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

// pager lists one manager's reservations page by page on the simulated
// network, as clients of its choosing, checking what every page says of
// itself.
type pager struct {
	t    *testing.T
	n    *memnet.Net
	peer string
}

// page asks for one page as client from, and fails the test unless the
// answer is a listing.
func (p pager) page(from string, req *wire.ReservationsRequest) *wire.ReservationsReply {
	p.t.Helper()
	rep := p.ask(from, &wire.Envelope{Body: &wire.Envelope_ReservationsRequest{ReservationsRequest: req}})
	list := rep.GetReservationsReply()
	if list == nil {
		p.t.Fatalf("after %q: no listing: %v", req.After, rep)
	}
	if (list.More == 0) != (list.Next == "") {
		p.t.Fatalf("after %q: more %d but next %q", req.After, list.More, list.Next)
	}
	if list.Next != "" && list.Next != list.Reservations[len(list.Reservations)-1].Id {
		p.t.Fatalf("after %q: next %q is not the last one listed", req.After, list.Next)
	}
	return list
}

// ask sends env as client from and returns the first answer.
func (p pager) ask(from string, env *wire.Envelope) *wire.Envelope {
	p.t.Helper()
	nd := p.n.Node(p.peer)
	sid := p.n.RequestFrom(p.peer, from, env)
	if !p.n.RunUntil(func() bool { return len(nd.Replies[sid]) > 0 }, time.Second) {
		p.t.Fatalf("no answer to %v", env)
	}
	return nd.Replies[sid][0]
}

// reserve makes one reservation of 1 cpu as client from, at once (commit,
// lease 1 h) or held for hold.
func (p pager) reserve(from string, i int, commit bool, hold time.Duration) string {
	p.t.Helper()
	rep := p.ask(from, &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
		RequestId: fmt.Sprint("r", i), Amounts: []*wire.Amount{{Kind: "cpus", N: 1}},
		Commit: commit, LeaseMs: uint64(time.Hour / time.Millisecond), HoldMs: uint64(hold / time.Millisecond)}}})
	if rep.GetReservationReply() == nil {
		p.t.Fatalf("reserve %d: %v", i, rep)
	}
	return rep.GetReservationReply().Reservation.Id
}

// all follows next from the first page to the last and returns the pages.
func (p pager) all(from string, req *wire.ReservationsRequest, between func()) []*wire.ReservationsReply {
	p.t.Helper()
	var pages []*wire.ReservationsReply
	for {
		rep := p.page(from, req)
		pages = append(pages, rep)
		if rep.Next == "" {
			return pages
		}
		if len(pages) > 100000 {
			p.t.Fatal("paging does not end")
		}
		if between != nil {
			between()
		}
		req.After = rep.Next
	}
}

// seqOf is the sequence number of a reservation number.
func seqOf(t *testing.T, id string) uint64 {
	t.Helper()
	_, seq, _, err := reservation.ParseID(id)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// listed returns the ids the pages listed, in order, failing the test if
// one comes twice or out of the order of making.
func listed(t *testing.T, pages []*wire.ReservationsReply) []string {
	t.Helper()
	var ids []string
	seen := map[string]bool{}
	var last uint64
	for i, p := range pages {
		for _, r := range p.Reservations {
			if seen[r.Id] {
				t.Fatalf("page %d lists %s a second time", i, r.Id)
			}
			seen[r.Id] = true
			if s := seqOf(t, r.Id); s <= last {
				t.Fatalf("page %d lists %s after number %d: out of order", i, r.Id, last)
			} else {
				last = s
			}
			ids = append(ids, r.Id)
		}
	}
	return ids
}

func newPagedManager(t *testing.T, seed uint64, cpus int, retain time.Duration) pager {
	t.Helper()
	cfg := config.Default()
	cfg.Name = "lst"
	cfg.CPUs = cpus
	cfg.Reservations.Retain = retain
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n := newNet(seed)
	n.Add("P-lst", cfg)
	n.Start("P-lst")
	return pager{t: t, n: n, peer: "P-lst"}
}

// 12,000 reservations, all made in the same instant (their creation times
// tie), listed by following next: pages of 5,000 by default, and the
// union is every reservation exactly once, in the order they were made.
// The same with small pages and only one client's.
func TestReservationPagesListEveryOneOnce(t *testing.T) {
	p := newPagedManager(t, 4, 20000, 0)
	const total = 12000
	var sids []uint64
	for i := range total {
		sids = append(sids, p.n.RequestFrom(p.peer, []string{"alice", "bob"}[i%2], &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
			RequestId: fmt.Sprint("r", i), Amounts: []*wire.Amount{{Kind: "cpus", N: 1}}, Commit: true}}}))
	}
	p.n.RunFor(time.Second)
	var made, bobs []string
	created := map[int64]bool{}
	for i, sid := range sids {
		r := p.n.Node(p.peer).Replies[sid][0].GetReservationReply().GetReservation()
		if r == nil {
			t.Fatalf("reserve %d: %v", i, p.n.Node(p.peer).Replies[sid])
		}
		made = append(made, r.Id)
		if i%2 == 1 {
			bobs = append(bobs, r.Id)
		}
		created[r.CreatedUnixMs] = true
	}
	if len(created) != 1 {
		t.Fatalf("the reservations were made at %d times, want 1 (ties)", len(created))
	}
	// made is in the order the manager took the requests: their numbers'.
	slices.SortFunc(made, func(a, b string) int { return cmp.Compare(seqOf(t, a), seqOf(t, b)) })
	slices.SortFunc(bobs, func(a, b string) int { return cmp.Compare(seqOf(t, a), seqOf(t, b)) })

	pages := p.all("carol", &wire.ReservationsRequest{}, nil)
	var sizes, more []int
	for _, pg := range pages {
		sizes, more = append(sizes, len(pg.Reservations)), append(more, int(pg.More))
		if pg.Live != total {
			t.Fatalf("live %d, want %d", pg.Live, total)
		}
	}
	if !slices.Equal(sizes, []int{5000, 5000, 2000}) || !slices.Equal(more, []int{7000, 2000, 0}) {
		t.Fatalf("pages of %v with %v more, want 5000, 5000, 2000 with 7000, 2000, 0", sizes, more)
	}
	if got := listed(t, pages); !slices.Equal(got, made) {
		t.Fatalf("the pages list %d reservations, not the %d made in order", len(got), len(made))
	}
	// Small pages, other filters: the same, every page the size asked.
	for _, c := range []struct {
		from string
		req  *wire.ReservationsRequest
		want []string
	}{
		{"carol", &wire.ReservationsRequest{Limit: 997}, made},
		{"carol", &wire.ReservationsRequest{Limit: 1, All: true}, made[:10]}, // checked below on the first 10 pages only
		{"bob", &wire.ReservationsRequest{Limit: 1000, Mine: true}, bobs},
	} {
		if c.req.Limit == 1 {
			var ids []string
			for range 10 {
				pg := p.page(c.from, c.req)
				ids = append(ids, pg.Reservations[0].Id)
				if int(pg.More) != total-len(ids) {
					t.Fatalf("limit 1: page %d says %d more", len(ids), pg.More)
				}
				c.req.After = pg.Next
			}
			if !slices.Equal(ids, c.want) {
				t.Fatalf("limit 1: %v, want %v", ids, c.want)
			}
			continue
		}
		pages := p.all(c.from, c.req, nil)
		for i, pg := range pages[:len(pages)-1] {
			if len(pg.Reservations) != int(c.req.Limit) {
				t.Fatalf("limit %d: page %d has %d", c.req.Limit, i, len(pg.Reservations))
			}
		}
		if got := listed(t, pages); !slices.Equal(got, c.want) {
			t.Fatalf("%s, limit %d: %d listed, want the %d in order", c.from, c.req.Limit, len(got), len(c.want))
		}
	}
}

// Reservations are made, released and lapse between the pages of a
// listing. Nothing is listed twice; every reservation that was live
// throughout is listed, and so is every one live at the end (one made
// while paging comes after every page already listed); with all, every
// reservation made before the last page is, whatever became of it.
func TestReservationPagesUnderChurn(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		for _, all := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed=%d,all=%v", seed, all), func(t *testing.T) {
				p := newPagedManager(t, seed, 65536, 0)
				rng := p.n.Rand()
				made := map[string]bool{} // every reservation ever made
				holder := map[string]string{}
				var order []string
				i := 0
				reserve := func() {
					from := []string{"alice", "bob"}[rng.IntN(2)]
					commit := rng.IntN(3) > 0 // else held, for 0.5 to 3 s: it lapses while paging
					id := p.reserve(from, i, commit, time.Duration(500+rng.IntN(2500))*time.Millisecond)
					i++
					made[id], holder[id] = true, from
					order = append(order, id)
				}
				for range 3000 {
					reserve()
				}
				isLive := func(id string) bool {
					r, ok := p.n.Node(p.peer).Core.Ledger().Get(id)
					return ok && r.State.Live()
				}
				var throughout []string // live before the first page and after the last
				for _, id := range order {
					if isLive(id) {
						throughout = append(throughout, id)
					}
				}
				released := 0
				between := func() {
					for range rng.IntN(60) {
						reserve()
					}
					for range rng.IntN(60) { // release any, listed or not yet
						id := order[rng.IntN(len(order))]
						rep := p.ask(holder[id], &wire.Envelope{Body: &wire.Envelope_ReservationOp{ReservationOp: &wire.ReservationOpRequest{
							Op: wire.ReservationOpRequest_OP_RELEASE, Id: id, RequestId: fmt.Sprint("rel-", released)}}})
						if rep.GetReservationReply() == nil {
							t.Fatalf("release %s: %v", id, rep)
						}
						released++
					}
					p.n.RunFor(time.Duration(rng.IntN(400)) * time.Millisecond) // holds lapse
				}
				pages := p.all("carol", &wire.ReservationsRequest{Limit: 97, All: all}, between)
				got := listed(t, pages)
				if len(pages) < 15 {
					t.Fatalf("only %d pages", len(pages))
				}
				seen := map[string]bool{}
				for _, id := range got {
					seen[id] = true
				}
				for _, pg := range pages {
					for _, r := range pg.Reservations {
						if !all && r.State != wire.ReservationState_RESERVATION_STATE_HELD && r.State != wire.ReservationState_RESERVATION_STATE_COMMITTED {
							t.Fatalf("%s is listed %v without all", r.Id, r.State)
						}
					}
				}
				missing := func(what string, ids []string) {
					t.Helper()
					for _, id := range ids {
						if !seen[id] {
							t.Fatalf("%s %s is not listed", what, id)
						}
					}
				}
				var liveNow []string
				for _, id := range throughout {
					if !isLive(id) {
						continue // released or lapsed meanwhile: listed or not
					}
					liveNow = append(liveNow, id)
				}
				missing("reservation live throughout", liveNow)
				var liveEnd []string
				for _, id := range order {
					if isLive(id) {
						liveEnd = append(liveEnd, id)
					}
				}
				missing("reservation live at the end", liveEnd)
				if all {
					missing("reservation", order)
					if len(got) != len(made) {
						t.Fatalf("all: %d listed, %d made", len(got), len(made))
					}
				}
				lapsed := 0 // while paging
				for _, id := range throughout {
					if r, _ := p.n.Node(p.peer).Core.Ledger().Get(id); r.State == reservation.Expired {
						lapsed++
					}
				}
				t.Logf("%d pages, %d made, %d releases, %d lapsed, %d of %d live throughout, %d live at the end",
					len(pages), len(order), released, lapsed, len(liveNow), len(throughout), len(liveEnd))
				if len(order) < 3300 || released < 300 || lapsed < 50 || len(liveNow) < 1000 {
					t.Fatalf("too little happened: %d made, %d releases, %d lapsed, %d of %d live throughout", len(order), released, lapsed, len(liveNow), len(throughout))
				}
			})
		}
	}
}

// A cursor that is not a number of this manager is a bad request that
// names the field and says what is wrong; a number past the last one, or
// of a reservation long forgotten, is a fine place to go on from.
func TestReservationPagesCursor(t *testing.T) {
	p := newPagedManager(t, 5, 16, time.Second)
	var ids []string
	for i := range 6 {
		ids = append(ids, p.reserve("alice", i, true, 0))
	}
	name, _, tag, err := reservation.ParseID(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	for after, want := range map[string]string{
		"nope":                  `reservation number "nope" is malformed`,
		name + "-0-" + tag:      "is not a positive number",
		name + "-3-" + "aaaaaa": "is not this manager's (lst, tag " + tag + ")",
		reservation.FormatID("gm160", 3, reservation.Tag("P-other")): "is not this manager's",
		strings.Repeat("x", 200):                                     "reservations_request.after is 200 bytes, limit 128",
		"lst-1-\xff":                                                 "reservations_request.after is not valid UTF-8",
	} {
		rep := p.ask("carol", &wire.Envelope{Body: &wire.Envelope_ReservationsRequest{ReservationsRequest: &wire.ReservationsRequest{After: after, Limit: 2}}})
		e := rep.GetError()
		if e == nil || e.Code != wire.ErrorReply_CODE_BAD_REQUEST || !strings.Contains(e.Message, "reservations_request.after") || !strings.Contains(e.Message, want) {
			t.Errorf("after %q: %v, want a bad request naming reservations_request.after and saying %q", after, rep, want)
		}
	}
	// Past the end: nothing, and no next.
	for _, after := range []string{ids[5], reservation.FormatID(name, 1000000, tag), reservation.FormatID("renamed", 7, tag)} {
		if pg := p.page("carol", &wire.ReservationsRequest{After: after}); len(pg.Reservations) != 0 || pg.More != 0 || pg.Next != "" || pg.Live != 6 {
			t.Errorf("after %s: %v", after, pg)
		}
	}
	// From a reservation released and forgotten since: the rest.
	rep := p.ask("alice", &wire.Envelope{Body: &wire.Envelope_ReservationOp{ReservationOp: &wire.ReservationOpRequest{
		Op: wire.ReservationOpRequest_OP_RELEASE, Id: ids[2], RequestId: "rel"}}})
	if rep.GetReservationReply() == nil {
		t.Fatalf("release: %v", rep)
	}
	p.n.RunFor(5 * time.Second) // past retain
	if _, known := p.n.Node(p.peer).Core.Ledger().Get(ids[2]); known {
		t.Fatalf("%s is still remembered", ids[2])
	}
	pg := p.page("carol", &wire.ReservationsRequest{After: ids[2], Limit: 1})
	if len(pg.Reservations) != 1 || pg.Next != ids[3] || pg.More != 2 {
		t.Fatalf("after the forgotten %s: %v", ids[2], pg)
	}
}
