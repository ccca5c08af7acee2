package client

import (
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/wire"
)

// idleConn is a session that says nothing until closed.
type idleConn struct {
	peer   string
	closed chan struct{}
	once   sync.Once
}

func (c *idleConn) Peer() string                         { return c.peer }
func (c *idleConn) Self() string                         { return "client" }
func (c *idleConn) Send(*wire.Envelope, time.Time) error { return nil }
func (c *idleConn) Close() error                         { c.once.Do(func() { close(c.closed) }); return nil }
func (c *idleConn) Recv() (*wire.Envelope, error)        { <-c.closed; return nil, io.EOF }

// slowDialer counts its dials; each takes a while, and fails while fail
// is set or the dialler's context ends.
type slowDialer struct {
	dials atomic.Int32
	fail  atomic.Bool
	hold  chan struct{} // if set, a dial waits for it to close instead
}

func (d *slowDialer) Open(ctx context.Context, pa peeraddr.PeerAddrs) (Conn, error) {
	d.dials.Add(1)
	wait := time.After(20 * time.Millisecond)
	if d.hold != nil {
		wait = nil
	}
	select {
	case <-wait:
	case <-d.hold:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if d.fail.Load() {
		return nil, errors.New("connection refused")
	}
	return &idleConn{peer: pa.Peer, closed: make(chan struct{})}, nil
}

// Many goroutines asking for the same owner at once get one session from
// one dial; a lost session is dialled again once; a dial that fails fails
// every caller waiting on it, with its reason; and a caller whose own
// context ended does not make the others fail.
func TestOwnerDialsEachOwnerOnce(t *testing.T) {
	d := &slowDialer{}
	entry := New(&idleConn{peer: "entry", closed: make(chan struct{})}, d)
	r := NewReserver(entry)
	defer r.Close()
	ctx := context.Background()
	addrs := []string{"/ip4/127.0.0.1/tcp/1"}
	ask := func(n int, ctx func() context.Context) ([]*Client, []error) {
		cs, errs := make([]*Client, n), make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { cs[i], errs[i] = r.Owner(ctx(), "owner", addrs) })
		}
		wg.Wait()
		return cs, errs
	}
	cs, errs := ask(32, func() context.Context { return ctx })
	for i := range cs {
		if errs[i] != nil || cs[i] != cs[0] {
			t.Fatalf("caller %d: %v, %p; want caller 0's session %p", i, errs[i], cs[i], cs[0])
		}
	}
	if n := d.dials.Load(); n != 1 {
		t.Fatalf("32 callers at once dialled %d times, want 1", n)
	}

	cs[0].Close()
	<-cs[0].Done()
	again, errs := ask(8, func() context.Context { return ctx })
	for i := range again {
		if errs[i] != nil || again[i] != again[0] || again[i] == cs[0] {
			t.Fatalf("after the session was lost, caller %d: %v, %p (the lost one %p)", i, errs[i], again[i], cs[0])
		}
	}
	if n := d.dials.Load(); n != 2 {
		t.Fatalf("a lost session was dialled again %d times, want once", n-1)
	}

	again[0].Close()
	<-again[0].Done()
	d.fail.Store(true)
	_, errs = ask(8, func() context.Context { return ctx })
	for i, err := range errs {
		if err == nil || !errors.Is(err, errors.Unwrap(err)) || err.Error() != errs[0].Error() {
			t.Fatalf("caller %d of a failed dial: %v (caller 0: %v)", i, err, errs[0])
		}
	}
	if n := d.dials.Load(); n != 3 {
		t.Fatalf("8 callers of a failing owner dialled %d times, want once", n-2)
	}
	if got := errs[0].Error(); got != "cannot reach manager owner: connection refused" {
		t.Fatalf("error %q", got)
	}

	// The first caller gives up at once; the one waiting on its dial
	// dials again rather than take the first one's reason.
	d.fail.Store(false)
	d.hold = make(chan struct{})
	quick, cancel := context.WithCancel(ctx)
	firstErr := make(chan error, 1)
	go func() {
		_, err := r.Owner(quick, "owner", addrs)
		firstErr <- err
	}()
	for d.dials.Load() != 4 {
		runtime.Gosched()
	}
	second := make(chan error, 1)
	go func() {
		_, err := r.Owner(ctx, "owner", addrs)
		second <- err
	}()
	for waiting := 0; waiting == 0; {
		r.mu.Lock()
		if d := r.dialing["owner"]; d != nil {
			waiting = d.waiting
		}
		r.mu.Unlock()
		runtime.Gosched()
	}
	cancel()
	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up: %v", err)
	}
	close(d.hold)
	if err := <-second; err != nil {
		t.Fatalf("the caller still waiting failed with the other's reason: %v", err)
	}
}
