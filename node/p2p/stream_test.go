package p2p_test

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	"github.com/libp2p/go-msgio/pbio"

	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/wire"
)

// sink records what a Host reports. Deliver never blocks the Host for
// long: the buffer is far larger than any test needs.
type sink struct {
	in   chan node.Input
	stop chan struct{}
	once sync.Once
}

func newSink() *sink { return &sink{in: make(chan node.Input, 1<<14), stop: make(chan struct{})} }

func (s *sink) Deliver(in node.Input) bool {
	select {
	case s.in <- in:
		return true
	case <-s.stop:
		return false
	}
}

func (s *sink) close() { s.once.Do(func() { close(s.stop) }) }

// next waits for the next input of kind on channel ch (0: any channel),
// skipping others; it fails the test after within.
func (s *sink) next(t *testing.T, kind node.InputKind, ch uint64, within time.Duration) node.Input {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case in := <-s.in:
			if in.Kind == kind && (ch == 0 || in.Chan == ch) {
				return in
			}
		case <-timeout:
			t.Fatalf("no input of kind %d on channel %d within %v", kind, ch, within)
		}
	}
}

// newHost starts a Host on loopback with opts' queue settings, attached to
// a fresh sink. Both are closed at the end of the test.
func newHost(t *testing.T, opts p2p.Options) (*p2p.Host, *sink) {
	t.Helper()
	key, err := p2p.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	opts.Key = key
	opts.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	h, err := p2p.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	s := newSink()
	h.Attach(s)
	t.Cleanup(func() { s.close(); h.Close() })
	return h, s
}

// peerHost is a bare libp2p host that dials the Host under test.
func peerHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.NoListenAddrs, libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(noise.ID, noise.New), libp2p.Muxer(yamux.ID, yamux.DefaultTransport), libp2p.DisableRelay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// openMesh opens a mesh stream from a new peer to h and returns it with
// the channel id h reported for it.
func openMesh(t *testing.T, h *p2p.Host, s *sink) (network.Stream, uint64) {
	t.Helper()
	ph := peerHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := h.LibP2P().ID()
	if err := ph.Connect(ctx, peer.AddrInfo{ID: id, Addrs: h.LibP2P().Addrs()}); err != nil {
		t.Fatal(err)
	}
	st, err := ph.NewStream(ctx, id, p2p.MeshProtocol)
	if err != nil {
		t.Fatal(err)
	}
	// The stream reaches the Host's handler with its first frame.
	if err := pbio.NewDelimitedWriter(st).WriteMsg(&wire.Envelope{Id: 1, Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}}); err != nil {
		t.Fatal(err)
	}
	in := s.next(t, node.InputConnected, 0, 10*time.Second)
	if in.Peer != ph.ID().String() {
		t.Fatalf("connected %s, want %s", in.Peer, ph.ID())
	}
	s.next(t, node.InputMessage, in.Chan, 10*time.Second)
	return st, in.Chan
}

// bulky is an envelope of about n bytes.
func bulky(id uint64, n int) *wire.Envelope {
	return &wire.Envelope{Id: id, Body: &wire.Envelope_Goodbye{Goodbye: &wire.Goodbye{Reason: strings.Repeat("x", n)}}}
}

// readN reads n envelopes from st and checks that their ids are 1..n in
// order.
func readN(t *testing.T, st network.Stream, n int) {
	t.Helper()
	_ = st.SetReadDeadline(time.Now().Add(20 * time.Second))
	r := pbio.NewDelimitedReader(st, p2p.DefaultMaxFrame)
	for i := 1; i <= n; i++ {
		env := new(wire.Envelope)
		if err := r.ReadMsg(env); err != nil {
			t.Fatalf("reading message %d of %d: %v", i, n, err)
		}
		if env.Id != uint64(i) {
			t.Fatalf("message %d has id %d: order lost", i, env.Id)
		}
	}
}

// A peer that stops reading stalls only its own channel: Sends to it go on
// returning while another channel of the same Host carries its messages,
// and once the stalled channel's queue is full it is reset and reported
// lost; the other channel stays.
func TestStalledReaderFillsItsQueueOnly(t *testing.T) {
	// A write that makes no progress would block for a minute: the test
	// ends long before that unless Send returns without writing.
	h, s := newHost(t, p2p.Options{QueueBytes: 1 << 20, WriteStall: time.Minute})
	stalled, sch := openMesh(t, h, s)
	healthy, hch := openMesh(t, h, s)

	// 4 MiB for a peer that reads nothing: more than its yamux window
	// (256 KiB) and its queue (1 MiB) hold.
	for i := 1; i <= 64; i++ {
		h.Send(sch, bulky(uint64(i), 64<<10))
	}
	// The healthy channel is served meanwhile, in order.
	for i := 1; i <= 100; i++ {
		h.Send(hch, bulky(uint64(i), 1<<10))
	}
	readN(t, healthy, 100)

	in := s.next(t, node.InputDisconnected, sch, 10*time.Second)
	if !strings.Contains(in.Err, "not reading") {
		t.Fatalf("stalled channel lost with %q, want it to say the peer is not reading", in.Err)
	}
	expectReset(t, stalled)
	// The healthy channel is still there.
	for i := 1; i <= 10; i++ {
		h.Send(hch, bulky(uint64(100+i), 1<<10))
	}
	readIDs(t, healthy, 101, 110)
	select {
	case in := <-s.in:
		if in.Kind == node.InputDisconnected {
			t.Fatalf("channel %d lost too: %s", in.Chan, in.Err)
		}
	default:
	}
}

// A write that makes no progress for WriteStall resets the channel, even
// with room left in its queue.
func TestStalledWriteDeadline(t *testing.T) {
	h, s := newHost(t, p2p.Options{WriteStall: 200 * time.Millisecond})
	stalled, sch := openMesh(t, h, s)
	for i := 1; i <= 16; i++ { // 1 MiB: four times the window, well under the queue
		h.Send(sch, bulky(uint64(i), 64<<10))
	}
	in := s.next(t, node.InputDisconnected, sch, 10*time.Second)
	if !strings.Contains(in.Err, "nothing could be written") {
		t.Fatalf("stalled channel lost with %q, want the write deadline", in.Err)
	}
	expectReset(t, stalled)
}

// A 4 MiB message (the frame limit) fits in the default queue, after other
// messages, and arrives whole; a slow reader that keeps reading is not cut
// although the whole batch takes longer than WriteStall.
func TestLargeMessageFitsAndSlowReaderIsNotCut(t *testing.T) {
	h, s := newHost(t, p2p.Options{WriteStall: 300 * time.Millisecond})
	st, ch := openMesh(t, h, s)
	h.Send(ch, bulky(1, 1<<10))
	h.Send(ch, bulky(2, p2p.DefaultMaxFrame-64))
	h.Send(ch, bulky(3, 1<<10))
	_ = st.SetReadDeadline(time.Now().Add(30 * time.Second))
	// Read in 32 KiB steps with a pause between steps for the first
	// 700 ms: the whole takes about twice WriteStall, and every step
	// makes progress.
	r := pbio.NewDelimitedReader(&slowReader{r: st, until: time.Now().Add(700 * time.Millisecond)}, p2p.DefaultMaxFrame)
	for i := 1; i <= 3; i++ {
		env := new(wire.Envelope)
		if err := r.ReadMsg(env); err != nil || env.Id != uint64(i) {
			t.Fatalf("message %d: id %d, %v", i, env.GetId(), err)
		}
	}
	select {
	case in := <-s.in:
		if in.Kind == node.InputDisconnected {
			t.Fatalf("slow but reading peer was cut: %s", in.Err)
		}
	default:
	}
}

// CloseChannel writes what was queued, then half-closes: the peer reads
// every message and then EOF (not a reset), and nothing is reported.
func TestCloseChannelFlushesThenHalfCloses(t *testing.T) {
	h, s := newHost(t, p2p.Options{})
	st, ch := openMesh(t, h, s)
	for i := 1; i <= 500; i++ {
		h.Send(ch, bulky(uint64(i), 2<<10))
	}
	h.CloseChannel(ch, "test")
	h.Send(ch, bulky(501, 10)) // after the close: dropped
	readN(t, st, 500)
	if _, err := st.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("after the queued messages: %v, want EOF", err)
	}
	_ = st.Close()
	// Once the channel's goroutines are gone, anything it reported is in
	// the sink.
	waitFor(t, "the channel to end", func() bool { return !stackHas("p2p.(*channel)") })
	for len(s.in) > 0 {
		if in := <-s.in; in.Kind == node.InputDisconnected {
			t.Fatalf("a channel the driver closed was reported lost: %s", in.Err)
		}
	}
}

// Close returns in bounded time with a channel stalled on a full window
// and one open to a healthy peer, and leaves no stream goroutine behind.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	h, s := newHost(t, p2p.Options{WriteStall: time.Minute})
	stalled, sch := openMesh(t, h, s)
	_, hch := openMesh(t, h, s)
	for i := 1; i <= 16; i++ {
		h.Send(sch, bulky(uint64(i), 64<<10))
	}
	h.Send(hch, bulky(1, 10))
	waitFor(t, "the stalled writer to block", func() bool { return stackHas("(*writer).write") })
	if !stackHas("p2p.(*channel).readLoop") {
		t.Fatal("no reader goroutine while channels are open")
	}
	done := make(chan struct{})
	go func() { h.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("Close did not return")
	}
	_ = stalled
	waitFor(t, "stream goroutines to end", func() bool {
		return !stackHas("p2p.(*channel)") && !stackHas("p2p.(*writer)")
	})
}

func readIDs(t *testing.T, st network.Stream, from, to uint64) {
	t.Helper()
	_ = st.SetReadDeadline(time.Now().Add(20 * time.Second))
	r := pbio.NewDelimitedReader(st, p2p.DefaultMaxFrame)
	for i := from; i <= to; i++ {
		env := new(wire.Envelope)
		if err := r.ReadMsg(env); err != nil || env.Id != i {
			t.Fatalf("message %d: id %d, %v", i, env.GetId(), err)
		}
	}
}

func expectReset(t *testing.T, st network.Stream) {
	t.Helper()
	_ = st.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, st)
	if !errors.Is(err, network.ErrReset) {
		t.Fatalf("stalled stream ended with %v, want a reset", err)
	}
}

// stackHas reports whether any goroutine's stack mentions fn.
func stackHas(fn string) bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Contains(string(buf[:n]), "gridmgr/node/p2p."+strings.TrimPrefix(fn, "p2p."))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// waitFor polls cond (the goroutines of a real network) for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slowReader reads at most 32 KiB at a time and pauses 5 ms before each
// read until until.
type slowReader struct {
	r     io.Reader
	until time.Time
}

func (s *slowReader) Read(p []byte) (int, error) {
	if time.Now().Before(s.until) {
		time.Sleep(5 * time.Millisecond) // pacing a reader, not timing a test
	}
	return s.r.Read(p[:min(len(p), 32<<10)])
}
