package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

// adminManager answers an admin request with partial replies (with All)
// and then final, recording the command it got.
func adminManager(got *[]*wire.AdminRequest, partials []*wire.AdminReply, final *wire.AdminReply) *multiConn {
	return newMultiConn(func(env *wire.Envelope) []*wire.Envelope {
		req := env.GetAdminRequest()
		*got = append(*got, req)
		var out []*wire.Envelope
		if req.All {
			for _, p := range partials {
				out = append(out, &wire.Envelope{Body: &wire.Envelope_AdminReply{AdminReply: p}})
			}
		}
		return append(out, &wire.Envelope{Body: &wire.Envelope_AdminReply{AdminReply: final}})
	})
}

// multiConn answers each request with serve's envelopes, in order.
type multiConn struct {
	serve func(*wire.Envelope) []*wire.Envelope
	out   chan *wire.Envelope
	done  chan struct{}
}

func newMultiConn(serve func(*wire.Envelope) []*wire.Envelope) *multiConn {
	return &multiConn{serve: serve, out: make(chan *wire.Envelope, 64), done: make(chan struct{})}
}

func (f *multiConn) Peer() string { return "manager" }
func (f *multiConn) Self() string { return "client" }
func (f *multiConn) Send(env *wire.Envelope, _ time.Time) error {
	for _, rep := range f.serve(env) {
		rep.ReplyTo = env.Id
		f.out <- rep
	}
	return nil
}
func (f *multiConn) Recv() (*wire.Envelope, error) {
	select {
	case env := <-f.out:
		return env, nil
	case <-f.done:
		return nil, fmt.Errorf("closed")
	}
}
func (f *multiConn) Close() error {
	select {
	case <-f.done:
	default:
		close(f.done)
	}
	return nil
}

func TestAdminSpecCommand(t *testing.T) {
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"remove-inferior 'gm162"}, "remove-inferior 'gm162"}, // one word: as typed
		{[]string{"set", "heartbeat.interval", "500ms"}, "set heartbeat.interval 500ms"},
		{[]string{"hello-world", "one", "two three"}, "hello-world one 'two three'"},
	} {
		if got := (AdminSpec{Words: c.words}).Command(); got != c.want {
			t.Errorf("%q: %q, want %q", c.words, got, c.want)
		}
	}
}

func TestRunAdminOne(t *testing.T) {
	var got []*wire.AdminRequest
	conn := adminManager(&got, nil, &wire.AdminReply{Name: "gm1", Ok: false, Code: wire.ErrorReply_CODE_UNAVAILABLE, Output: "no"})
	c := New(conn, nil)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.RunAdmin(ctx, AdminSpec{}); !errors.Is(err, ErrNoAdminCommand) {
		t.Fatalf("no words: %v", err)
	}
	res, err := c.RunAdmin(ctx, AdminSpec{Words: []string{"drain"}, Each: func(int, *wire.AdminReply) { t.Error("Each without All") }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reply.Output != "no" || res.Answered != 1 || res.Failed != 1 || len(got) != 1 || got[0].All || got[0].Command != "drain" {
		t.Fatalf("result %+v, sent %v", res, got)
	}
}

// With All: every manager once (a repeated answer and a duplicate are
// not shown again), in the order answers came, then the rest of the
// final reply by name; failures counted over the final reply.
func TestRunAdminAll(t *testing.T) {
	a := &wire.AdminReply{Name: "a", Peer: "pa", Ok: true}
	b := &wire.AdminReply{Name: "b", Peer: "pb", Ok: false, Code: wire.ErrorReply_CODE_NOT_FOUND}
	c2 := &wire.AdminReply{Name: "c", Peer: "pc", Ok: true}
	dup := &wire.AdminReply{Name: "a", Peer: "pa", Ok: true, Duplicate: true}
	d := &wire.AdminReply{Name: "d", Peer: "pd", Ok: false}
	partials := []*wire.AdminReply{{Partial: true, Replies: []*wire.AdminReply{c2, dup}}, {Partial: true, Replies: []*wire.AdminReply{c2, a}}}
	final := &wire.AdminReply{Ok: true, Replies: []*wire.AdminReply{d, c2, b, a, dup},
		Missing: []*wire.Silent{{Name: "e", Why: "timeout"}}}
	var got []*wire.AdminRequest
	c := New(adminManager(&got, partials, final), nil)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var order []string
	res, err := c.RunAdmin(ctx, AdminSpec{Words: []string{"relations"}, All: true, Each: func(n int, r *wire.AdminReply) {
		order = append(order, fmt.Sprintf("%d:%s", n, r.Name))
	}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(order) != "[1:c 2:a 3:b 4:d]" {
		t.Errorf("order %v", order)
	}
	if res.Answered != 4 || res.Failed != 2 || res.Reply != final || len(res.Reply.Missing) != 1 {
		t.Errorf("result %+v", res)
	}
	if len(got) != 1 || !got[0].All || got[0].Command != "relations" || got[0].BudgetMs == 0 {
		t.Errorf("sent %v", got)
	}
}
