package p2p

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	"github.com/libp2p/go-msgio/pbio"

	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/wire"
)

// blocked counts the connections a resource manager refused.
type blocked struct{ conns atomic.Int64 }

func (b *blocked) ConsumeEvent(e rcmgr.TraceEvt) {
	if e.Type == rcmgr.TraceBlockAddConnEvt {
		b.conns.Add(1)
	}
}

// tinyManager is a libp2p host that serves the client protocol (echoing
// the first envelope, then holding the stream until the client closes it)
// under a resource manager that
// lets one peer hold peerConns connections and peerStreams client streams.
func tinyManager(t *testing.T, peerConns, peerStreams int) (peeraddr.PeerAddrs, *blocked) {
	t.Helper()
	limits := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&limits)
	limits.PeerBaseLimit.ConnsInbound = peerConns
	limits.PeerBaseLimit.Conns = peerConns
	limits.AddProtocolPeerLimit(ClientProtocol, rcmgr.BaseLimit{StreamsInbound: peerStreams, Streams: peerStreams, Memory: 1 << 20}, rcmgr.BaseLimitIncrease{})
	b := &blocked{}
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits.AutoScale()), rcmgr.WithTraceReporter(b))
	if err != nil {
		t.Fatal(err)
	}
	key, err := GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	h, err := libp2p.New(libp2p.Identity(key), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
		libp2p.Transport(tcp.NewTCPTransport), libp2p.Security(noise.ID, noise.New), libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.DisableRelay(), libp2p.DisableMetrics(), libp2p.ResourceManager(rm))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	h.SetStreamHandler(ClientProtocol, func(s network.Stream) {
		env := new(wire.Envelope)
		if pbio.NewDelimitedReader(s, DefaultMaxFrame).ReadMsg(env) == nil {
			_ = pbio.NewDelimitedWriter(s).WriteMsg(env)
		}
		_, _ = io.Copy(io.Discard, s)
		s.Close()
	})
	pa := peeraddr.PeerAddrs{Peer: h.ID().String()}
	for _, a := range h.Addrs() {
		pa.Addrs = append(pa.Addrs, a.String())
	}
	return pa, b
}

// A manager that refuses a client's connection by its per-peer limit:
// the client (a second process with the same key) tries again with
// backoff until its deadline and then says which limit refused it; once
// the other process's session ends it gets in.
func TestClientRetriesLimitRefusal(t *testing.T) {
	mgr, blocked := tinyManager(t, 1, 8)
	key, err := GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	newClient := func() *ClientHost {
		c, err := NewClientHost(ClientHostOptions{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	first := newClient()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s1, err := first.Open(ctx, mgr)
	if err != nil {
		t.Fatal(err)
	}

	// The second, with a short deadline, is refused each time.
	second := newClient()
	sctx, scancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err = second.Open(sctx, mgr)
	scancel()
	var le *LimitError
	if !errors.As(err, &le) || !errors.Is(err, ErrLimit) {
		t.Fatalf("second client with the same key: %v, want a LimitError", err)
	}
	if !le.Conn || le.Tries < 2 || blocked.conns.Load() < 2 {
		t.Fatalf("refusal: conn %v, %d tries, %d blocked by the manager; want a connection refused at least twice", le.Conn, le.Tries, blocked.conns.Load())
	}
	for _, w := range []string{"refused the connection", "limit of connections from one peer id (one client key)", "times in"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the refusal does not say %q: %v", w, err)
		}
	}

	// A third waits its turn: refused while the first holds the
	// manager's only place for this peer, in once it is free.
	before := blocked.conns.Load()
	third := newClient()
	done := make(chan error, 1)
	go func() {
		s, err := third.Open(ctx, mgr)
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	for blocked.conns.Load() == before {
		select {
		case err := <-done:
			t.Fatalf("the third client was never refused: %v", err)
		case <-time.After(5 * time.Millisecond): // polling the manager's refusals
		}
	}
	s1.Close()
	first.Close()
	if err := <-done; err != nil {
		t.Fatalf("the third client did not get in once the first left: %v", err)
	}
}

// The backoff between tries doubles from 20 ms to 1 s, jittered over the
// upper half of each step.
func TestLimitBackoff(t *testing.T) {
	for try, want := range map[int]time.Duration{1: 20 * time.Millisecond, 2: 40 * time.Millisecond, 5: 320 * time.Millisecond, 7: time.Second, 60: time.Second} {
		if lo, hi := limitBackoff(try, 0), limitBackoff(try, 0.999999); lo != want/2 || hi > want || hi < want*99/100 {
			t.Errorf("try %d: waits %v to %v, want %v to %v", try, lo, hi, want/2, want)
		}
	}
}

// A client stream the manager refuses by its limit of client streams from
// one peer is reset with a code that says so, which the client tells from
// other resets: the first reply's wait ends in a LimitReset.
func TestClientStreamLimitReset(t *testing.T) {
	mgr, _ := tinyManager(t, 4, 1)
	c, err := NewClientHost(ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s1, err := c.Open(ctx, mgr)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	// The first stream holds the one place once the manager answered it.
	if err := s1.Send(&wire.Envelope{Id: 1}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Recv(); err != nil {
		t.Fatal(err)
	}
	s2, err := c.Open(ctx, mgr)
	if err != nil {
		// Refused while opening (the protocol was negotiated eagerly).
		if !errors.Is(err, ErrLimit) {
			t.Fatalf("second stream: %v, want a refusal by the limit", err)
		}
		return
	}
	defer s2.Close()
	_ = s2.Send(&wire.Envelope{Id: 1}, time.Time{})
	got := make(chan error, 1)
	go func() { _, err := s2.Recv(); got <- err }()
	select {
	case err = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the second stream was neither answered nor reset")
	}
	if err == nil || !LimitReset(err) {
		t.Fatalf("second stream's first read: %v, want a reset by the manager's limit", err)
	}
	t.Logf("refused at the first read: %v", err)
	if LimitReset(io.EOF) || LimitReset(errors.New("stream reset")) {
		t.Fatal("LimitReset takes other errors for refusals")
	}
}
