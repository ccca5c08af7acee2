package client

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

// fakeConn answers each request with serve's envelope, in order.
type fakeConn struct {
	serve func(*wire.Envelope) *wire.Envelope
	mu    sync.Mutex
	reqs  []*wire.Envelope // what was sent
	out   chan *wire.Envelope
	done  chan struct{}
	once  sync.Once
}

func newFakeConn(serve func(*wire.Envelope) *wire.Envelope) *fakeConn {
	return &fakeConn{serve: serve, out: make(chan *wire.Envelope, 1), done: make(chan struct{})}
}

func (f *fakeConn) Peer() string { return "manager" }
func (f *fakeConn) Self() string { return "client" }
func (f *fakeConn) Send(env *wire.Envelope, _ time.Time) error {
	f.mu.Lock()
	f.reqs = append(f.reqs, env)
	f.mu.Unlock()
	rep := f.serve(env)
	rep.ReplyTo = env.Id
	f.out <- rep
	return nil
}
func (f *fakeConn) Recv() (*wire.Envelope, error) {
	select {
	case env := <-f.out:
		return env, nil
	case <-f.done:
		return nil, io.EOF
	}
}
func (f *fakeConn) Close() error { f.once.Do(func() { close(f.done) }); return nil }

func (f *fakeConn) sent() []*wire.ReservationsRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*wire.ReservationsRequest
	for _, e := range f.reqs {
		out = append(out, e.GetReservationsRequest())
	}
	return out
}

// pagedManager lists ids (in order) as a manager does: limit per page
// (0: 5,000), after the id the request names. between, if set, runs
// before every page after the first.
func pagedManager(ids *[]string, between func()) func(*wire.Envelope) *wire.Envelope {
	pages := 0
	return func(env *wire.Envelope) *wire.Envelope {
		req := env.GetReservationsRequest()
		if pages > 0 && between != nil {
			between()
		}
		pages++
		limit := int(req.Limit)
		if limit == 0 || limit > 5000 {
			limit = 5000
		}
		rest := *ids
		if req.After != "" {
			i := slices.Index(rest, req.After)
			if i < 0 {
				return &wire.Envelope{Body: &wire.Envelope_Error{Error: &wire.ErrorReply{Code: wire.ErrorReply_CODE_BAD_REQUEST, Message: "reservations_request.after: unknown"}}}
			}
			rest = rest[i+1:]
		}
		rep := &wire.ReservationsReply{Name: "m", Live: uint32(len(*ids))}
		for _, id := range rest[:min(limit, len(rest))] {
			rep.Reservations = append(rep.Reservations, &wire.Reservation{Id: id})
		}
		if len(rest) > limit {
			rep.More, rep.Next = uint32(len(rest)-limit), rest[limit-1]
		}
		return &wire.Envelope{Body: &wire.Envelope_ReservationsReply{ReservationsReply: rep}}
	}
}

func idsOf(rs []*wire.Reservation) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Id)
	}
	return out
}

// AllReservations follows next to the last page and returns every
// reservation once, in order, with each request the one before's next and
// the caller's filters and limit; the caller's request is not changed.
func TestAllReservationsFollowsNext(t *testing.T) {
	var ids []string
	for i := range 12000 {
		ids = append(ids, fmt.Sprintf("m-%d-aaaaaa", i+1))
	}
	made := len(ids)
	grow := func() { // made between pages: listed, as they come after
		made++
		ids = append(ids, fmt.Sprintf("m-%d-aaaaaa", made))
	}
	f := newFakeConn(pagedManager(&ids, grow))
	c := New(f, nil)
	defer c.Close()
	req := &wire.ReservationsRequest{All: true, Mine: true, Limit: 1000}
	all, err := c.AllReservations(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := idsOf(all.Reservations); !slices.Equal(got, ids) {
		t.Fatalf("%d listed, want the %d in order", len(got), len(ids))
	}
	if all.Next != "" || all.More != 0 || all.Live != uint32(len(ids)) || all.Name != "m" {
		t.Fatalf("merged reply: next %q, more %d, live %d, name %q", all.Next, all.More, all.Live, all.Name)
	}
	sent := f.sent()
	if len(sent) != 13 {
		t.Fatalf("%d pages asked, want 13", len(sent))
	}
	for i, r := range sent {
		want := ""
		if i > 0 {
			want = ids[i*1000-1]
		}
		if !r.All || !r.Mine || r.Limit != 1000 || r.After != want {
			t.Fatalf("request %d: %v, want after %q with the caller's filters", i, r, want)
		}
	}
	if req.After != "" {
		t.Fatalf("the caller's request was changed: %v", req)
	}
}

// ReservationPages asks for no page the loop does not take; a failure
// ends the pages with the error; a manager whose next does not move on
// is an error, not an endless loop.
func TestReservationPagesStops(t *testing.T) {
	ids := []string{"m-1-aaaaaa", "m-2-aaaaaa", "m-3-aaaaaa", "m-4-aaaaaa"}
	f := newFakeConn(pagedManager(&ids, nil))
	c := New(f, nil)
	defer c.Close()
	for page, err := range c.ReservationPages(context.Background(), &wire.ReservationsRequest{Limit: 1}) {
		if err != nil || page.Reservations[0].Id != "m-1-aaaaaa" {
			t.Fatalf("first page: %v, %v", page, err)
		}
		break
	}
	if n := len(f.sent()); n != 1 {
		t.Fatalf("%d pages asked after a break, want 1", n)
	}
	// From a cursor, to the end.
	var got []string
	for page, err := range c.ReservationPages(context.Background(), &wire.ReservationsRequest{Limit: 1, After: "m-2-aaaaaa"}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, idsOf(page.Reservations)...)
	}
	if !slices.Equal(got, ids[2:]) {
		t.Fatalf("after m-2: %v", got)
	}
	// The manager refuses the cursor: the error comes through.
	if _, err := c.AllReservations(context.Background(), &wire.ReservationsRequest{After: "x"}); err == nil || !strings.Contains(err.Error(), "reservations_request.after") {
		t.Fatalf("bad cursor: %v", err)
	}

	for name, bad := range map[string]*wire.ReservationsReply{
		"same next":  {Reservations: []*wire.Reservation{{Id: "m-1-aaaaaa"}}, More: 1, Next: "m-1-aaaaaa"},
		"empty page": {More: 1, Next: "m-9-aaaaaa"},
	} {
		n := 0
		f := newFakeConn(func(*wire.Envelope) *wire.Envelope {
			n++
			return &wire.Envelope{Body: &wire.Envelope_ReservationsReply{ReservationsReply: bad}}
		})
		c := New(f, nil)
		_, err := c.AllReservations(context.Background(), &wire.ReservationsRequest{After: "m-1-aaaaaa"})
		c.Close()
		if err == nil || !strings.Contains(err.Error(), "does not advance") || n > 2 {
			t.Errorf("%s: %v after %d pages", name, err, n)
		}
	}
}
