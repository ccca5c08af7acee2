package p2p

// Direct writes (channel.direct) against a scripted stream: a peer whose
// window fills and empties at chosen moments, a write that fails, a reset
// while a direct write waits. The stream is fake so that each case is
// reached every time, not by luck of the scheduler.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-msgio/pbio"
	"github.com/multiformats/go-varint"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/wire"
)

// fakeStream is the write half of a stream whose peer takes room bytes
// and then nothing until it is given more (a full yamux window): a write
// waits for room or for its deadline, like yamux's.
type fakeStream struct {
	network.Stream // not used: calling anything else panics

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at every change
	out      bytes.Buffer  // what the peer received
	room     int           // bytes the peer takes before it blocks; <0: no limit
	dl       time.Time
	err      error // every write fails with it
	blocked  int   // writes waiting for room now
	writes   int
	reset    bool
	closed   bool
	halfDone bool
}

func newFakeStream(room int) *fakeStream {
	return &fakeStream{room: room, changed: make(chan struct{})}
}

// change wakes waiting writes; f.mu is held.
func (f *fakeStream) change() {
	close(f.changed)
	f.changed = make(chan struct{})
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o deadline reached" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func (f *fakeStream) Write(b []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	total := 0
	for {
		switch {
		case f.reset:
			return total, network.ErrReset
		case f.err != nil:
			return total, f.err
		case f.halfDone || f.closed:
			return total, errors.New("write on closed stream")
		}
		n := len(b)
		if f.room >= 0 {
			n = min(n, f.room)
			f.room -= n
		}
		f.out.Write(b[:n])
		total += n
		b = b[n:]
		if len(b) == 0 {
			return total, nil
		}
		if !f.dl.IsZero() && !time.Now().Before(f.dl) {
			return total, timeoutErr{}
		}
		ch := f.changed
		var timer <-chan time.Time
		if !f.dl.IsZero() {
			timer = time.After(time.Until(f.dl))
		}
		f.blocked++
		f.mu.Unlock()
		select {
		case <-ch:
		case <-timer:
		}
		f.mu.Lock()
		f.blocked--
	}
}

func (f *fakeStream) SetWriteDeadline(t time.Time) error {
	f.mu.Lock()
	f.dl = t
	f.change()
	f.mu.Unlock()
	return nil
}

func (f *fakeStream) SetReadDeadline(time.Time) error { return nil }

func (f *fakeStream) Reset() error {
	f.mu.Lock()
	f.reset = true
	f.change()
	f.mu.Unlock()
	return nil
}

func (f *fakeStream) Close() error {
	f.mu.Lock()
	f.closed = true
	f.change()
	f.mu.Unlock()
	return nil
}

func (f *fakeStream) CloseWrite() error {
	f.mu.Lock()
	f.halfDone = true
	f.change()
	f.mu.Unlock()
	return nil
}

// give lets the peer take n more bytes (n < 0: everything from now on).
func (f *fakeStream) give(n int) {
	f.mu.Lock()
	if n < 0 || f.room < 0 {
		f.room = -1
	} else {
		f.room += n
	}
	f.change()
	f.mu.Unlock()
}

// fail makes every write fail with err from now on.
func (f *fakeStream) fail(err error) {
	f.mu.Lock()
	f.err = err
	f.change()
	f.mu.Unlock()
}

func (f *fakeStream) waitBlocked(t *testing.T) {
	t.Helper()
	eventually(t, "a write to wait for room", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.blocked > 0
	})
}

// ids decodes what the peer received and returns the envelopes' ids.
func (f *fakeStream) ids(t *testing.T) []uint64 {
	t.Helper()
	f.mu.Lock()
	data := bytes.Clone(f.out.Bytes())
	f.mu.Unlock()
	r := pbio.NewDelimitedReader(bytes.NewReader(data), DefaultMaxFrame)
	var out []uint64
	for {
		env := new(wire.Envelope)
		if err := r.ReadMsg(env); err != nil {
			return out
		}
		out = append(out, env.Id)
	}
}

// nullHost is a libp2p host with a connection manager that does nothing:
// all a channel asks of it.
type nullHost struct{ host.Host }

func (nullHost) ConnManager() connmgr.ConnManager { return &connmgr.NullConnMgr{} }

// recSink records what the channel reports.
type recSink struct {
	mu  sync.Mutex
	got []node.Input
}

func (s *recSink) Deliver(in node.Input) bool {
	s.mu.Lock()
	s.got = append(s.got, in)
	s.mu.Unlock()
	return true
}

func (s *recSink) lost() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, in := range s.got {
		if in.Kind == node.InputDisconnected {
			out = append(out, in.Err)
		}
	}
	return out
}

// fakeChannel is a registered mesh channel over f, with its writer
// running, in a Host with opts.
func fakeChannel(t *testing.T, f *fakeStream, opts Options) (*channel, *recSink) {
	t.Helper()
	s := &recSink{}
	h := &Host{opts: withDefaults(opts), chans: map[uint64]*channel{}, protect: map[string]int{}, sink: s}
	h.log = h.opts.Log
	c := &channel{h: h, lh: nullHost{}, id: 1, s: f, peer: "peer", mesh: true, tag: "inferior",
		wake: make(chan struct{}, 1), quit: make(chan struct{})}
	if !h.register(c) {
		t.Fatal("not registered")
	}
	h.streams.Done() // no reader
	go c.writeLoop()
	t.Cleanup(func() {
		c.end(errors.New("test over"), true)
		h.streams.Wait()
	})
	return c, s
}

func frame(id uint64, n int) *wire.Envelope {
	return &wire.Envelope{Id: id, Body: &wire.Envelope_Goodbye{Goodbye: &wire.Goodbye{Reason: strings.Repeat("x", n)}}}
}

func checkOrder(t *testing.T, ids []uint64, n int) {
	t.Helper()
	if len(ids) != n {
		t.Fatalf("peer received %d messages, want %d", len(ids), n)
	}
	for i, id := range ids {
		if id != uint64(i+1) {
			t.Fatalf("message %d has id %d: order lost", i+1, id)
		}
	}
}

// A message written directly never overtakes one queued for the writer,
// nor one whose direct write the deadline cut short: the peer's window
// fills and empties while messages are sent, so that some go directly,
// some are cut and finished by the writer, and some wait in the queue.
func TestDirectWritesKeepOrderWithQueued(t *testing.T) {
	f := newFakeStream(0)
	c, s := fakeChannel(t, f, Options{DirectWrite: time.Millisecond, WriteStall: time.Minute})
	const n = 3000
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the peer: reads in bursts of varying size
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(i%3) * 200 * time.Microsecond):
			}
			f.give((i % 7) * 3000)
		}
	}()
	for i := 1; i <= n; i++ {
		c.send(frame(uint64(i), (i%5)*700))
		if i%100 == 0 {
			time.Sleep(time.Millisecond) // the queue drains: direct writes again
		}
	}
	close(stop)
	wg.Wait()
	f.give(-1)
	eventually(t, "everything to be written", func() bool {
		c.q.mu.Lock()
		defer c.q.mu.Unlock()
		return len(c.q.buf) == 0 && c.q.inflight == 0
	})
	checkOrder(t, f.ids(t), n)
	if c.h.directCut.Load() == 0 {
		t.Fatal("no direct write was cut short: the test did not reach the case it is for")
	}
	if lost := s.lost(); len(lost) > 0 {
		t.Fatalf("channel reported lost: %v", lost)
	}
}

// A peer that takes nothing holds the sender up once, for DirectWrite,
// not once per message: after the first cut everything queues, and when
// the peer reads again every message arrives, in order.
func TestStalledPeerCutsOneDirectWrite(t *testing.T) {
	f := newFakeStream(10 << 10)
	c, s := fakeChannel(t, f, Options{DirectWrite: 20 * time.Millisecond, WriteStall: time.Minute})
	for i := 1; i <= 200; i++ {
		c.send(frame(uint64(i), 1000))
	}
	if cuts := c.h.directCut.Load(); cuts != 1 {
		t.Fatalf("%d direct writes cut short, want 1 (later messages must queue)", cuts)
	}
	f.give(-1)
	eventually(t, "the queue to drain", func() bool {
		c.q.mu.Lock()
		defer c.q.mu.Unlock()
		return len(c.q.buf) == 0 && c.q.inflight == 0
	})
	// Direct writes resume once the queue is empty.
	writes := func() int { f.mu.Lock(); defer f.mu.Unlock(); return f.writes }
	w0 := writes()
	c.send(frame(201, 10))
	if writes() != w0+1 {
		t.Fatal("the message after the queue drained was not written directly")
	}
	checkOrder(t, f.ids(t), 201)
	if lost := s.lost(); len(lost) > 0 {
		t.Fatalf("channel reported lost: %v", lost)
	}
}

// A direct write that fails has the effect a failed write of the writer
// has: the channel is reset and reported lost once, with the same words,
// and later messages are dropped.
func TestDirectWriteErrorSameAsWriters(t *testing.T) {
	report := func(direct time.Duration) (lost []string, reset bool) {
		f := newFakeStream(-1)
		c, s := fakeChannel(t, f, Options{DirectWrite: direct})
		c.send(frame(1, 10))
		eventually(t, "the first message", func() bool { return len(f.ids(t)) == 1 })
		f.fail(errors.New("connection broke"))
		c.send(frame(2, 10))
		eventually(t, "the loss to be reported", func() bool { return len(s.lost()) > 0 })
		c.send(frame(3, 10))
		c.h.streams.Wait() // the writer has ended
		if got := f.ids(t); len(got) != 1 {
			t.Fatalf("the peer received %v, want only message 1", got)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		return s.lost(), f.reset
	}
	queued, qreset := report(-1)
	direct, dreset := report(time.Millisecond)
	if fmt.Sprint(direct) != fmt.Sprint(queued) || dreset != qreset {
		t.Fatalf("direct write error: lost %q (reset %v); the writer's: lost %q (reset %v)", direct, dreset, queued, qreset)
	}
	if len(direct) != 1 || !strings.Contains(direct[0], "connection broke") || !dreset {
		t.Fatalf("lost %q, reset %v: want one report of the write error and a reset", direct, dreset)
	}
}

// The channel ends (its reader saw the peer reset it) while a direct
// write waits for room: the write returns, the loss is reported once,
// with the reader's reason, and nothing more is written or queued.
func TestChannelEndsDuringDirectWrite(t *testing.T) {
	f := newFakeStream(0)
	c, s := fakeChannel(t, f, Options{DirectWrite: time.Hour, WriteStall: time.Hour})
	sent := make(chan struct{})
	go func() { c.send(frame(1, 100)); close(sent) }()
	f.waitBlocked(t)
	c.end(errors.New("stream reset by peer"), false)
	select {
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("the direct write did not return after the channel ended")
	}
	c.send(frame(2, 100))
	c.h.streams.Wait()
	if lost := s.lost(); len(lost) != 1 || lost[0] != "stream reset by peer" {
		t.Fatalf("lost %q, want one report with the reader's reason", lost)
	}
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	if c.q.state != qEnded || len(c.q.buf) != 0 {
		t.Fatalf("queue %d with %d bytes after the end", c.q.state, len(c.q.buf))
	}
}

// The driver closes the channel (a new one replaced it) right after a
// direct write was cut short: what was cut and what was queued after it
// still reach the peer, in order, before the half-close, and nothing is
// reported.
func TestCloseAfterCutDirectWrite(t *testing.T) {
	f := newFakeStream(150)
	c, s := fakeChannel(t, f, Options{DirectWrite: 5 * time.Millisecond, WriteStall: time.Minute})
	c.send(frame(1, 100))
	c.send(frame(2, 1000)) // cut: partly written, the rest queued
	c.send(frame(3, 100))
	if c.h.directCut.Load() != 1 {
		t.Fatalf("%d cut direct writes, want 1", c.h.directCut.Load())
	}
	c.closeGracefully("replaced")
	c.send(frame(4, 100)) // after the close: dropped
	f.give(-1)
	eventually(t, "the half-close", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.halfDone })
	checkOrder(t, f.ids(t), 3)
	if lost := s.lost(); len(lost) > 0 {
		t.Fatalf("a closed channel was reported lost: %v", lost)
	}
}

// eventually polls cond (other goroutines' progress) for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// The stream reader's frame reader reads what pbio's delimited reader
// reads and fails where it fails, on good and hostile input: truncated
// frames and varints, a frame over the limit, a non-minimal varint,
// garbage; and it reports each frame's length. Framing errors are pbio's
// own; a frame whose bytes do not decode is a bad frame (errBadFrame),
// which protobuf-go's message may word differently, and which must not
// read as the stream ending mid-frame (io.ErrUnexpectedEOF) even where the
// decoder found a message cut short inside the frame.
func TestFrameReaderAsPbio(t *testing.T) {
	var good bytes.Buffer
	w := pbio.NewDelimitedWriter(&good)
	for i := 1; i <= 5; i++ {
		if err := w.WriteMsg(frame(uint64(i), i*37)); err != nil {
			t.Fatal(err)
		}
	}
	g := good.Bytes()
	rng := rand.New(rand.NewPCG(1, 2))
	inputs := [][]byte{nil, g, g[:len(g)-1], g[:1], {0x80}, {0x80, 0x80}, {0x81, 0x00}, {0xff, 0xff, 0xff, 0x7f},
		{0x05, 1, 2}, {0x00}, {0x03, 0xff, 0xff, 0xff}}
	for i := 0; i < 300; i++ {
		b := make([]byte, rng.IntN(64))
		for j := range b {
			b[j] = byte(rng.UintN(256))
		}
		if i%2 == 0 {
			b = append(bytes.Clone(g[:rng.IntN(len(g))]), b...)
		}
		inputs = append(inputs, b)
	}
	const max = 200
	for _, in := range inputs {
		want := ""
		pr := pbio.NewDelimitedReader(bytes.NewReader(in), max)
		for {
			env := new(wire.Envelope)
			if err := pr.ReadMsg(env); err != nil {
				switch {
				case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.ErrShortBuffer),
					errors.Is(err, varint.ErrNotMinimal), errors.Is(err, varint.ErrOverflow):
					want += "err " + err.Error() // the framing's
				default:
					want += "bad frame" // protobuf-go's, on the frame's bytes
				}
				break
			}
			want += fmt.Sprintf("%d:%d ", env.Id, proto.Size(env))
		}
		got := ""
		fr := frameReader{r: bufio.NewReader(bytes.NewReader(in)), max: max}
		for {
			env := new(wire.Envelope)
			n, err := fr.read(env)
			if err != nil {
				if errors.Is(err, errBadFrame) {
					if errors.Is(err, io.ErrUnexpectedEOF) {
						t.Errorf("input %x: a bad frame reads as the stream's end: %v", in, err)
					}
					got += "bad frame"
				} else {
					got += "err " + err.Error()
				}
				break
			}
			got += fmt.Sprintf("%d:%d ", env.Id, n)
		}
		if got != want {
			t.Fatalf("input %x:\n got %s\nwant %s", in, got, want)
		}
	}
}

// The frame reader reads every frame into one buffer it keeps; what it
// decoded from a frame (strings, bytes, unknown fields) must not change
// when the next frame overwrites that buffer.
func TestFrameReaderKeepsNothingOfItsBuffer(t *testing.T) {
	mk := func(fill byte) *wire.Envelope {
		return &wire.Envelope{Id: uint64(fill), TraceId: strings.Repeat(string(rune(fill)), 40),
			Body: &wire.Envelope_AppRequest{AppRequest: &wire.AppRequest{Path: strings.Repeat(string(rune(fill)), 30), Data: bytes.Repeat([]byte{fill}, 300)}}}
	}
	var in bytes.Buffer
	w := pbio.NewDelimitedWriter(&in)
	for _, fill := range []byte{'a', 'b'} {
		if err := w.WriteMsg(mk(fill)); err != nil {
			t.Fatal(err)
		}
	}
	fr := frameReader{r: bufio.NewReader(&in), max: 4096}
	first, second := new(wire.Envelope), new(wire.Envelope)
	if _, err := fr.read(first); err != nil {
		t.Fatal(err)
	}
	if _, err := fr.read(second); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(first, mk('a')) || !proto.Equal(second, mk('b')) {
		t.Fatalf("read %v and %v, want the a and the b frames", first, second)
	}
	// the same with an unknown field, which a decoder keeps as bytes
	unknown := protowire.AppendBytes(protowire.AppendTag(nil, 999, protowire.BytesType), bytes.Repeat([]byte{'u'}, 50))
	var in2 bytes.Buffer
	for _, b := range [][]byte{unknown, bytes.Repeat([]byte{0x08, 0x01}, 30)} {
		in2.Write(protowire.AppendVarint(nil, uint64(len(b))))
		in2.Write(b)
	}
	fr = frameReader{r: bufio.NewReader(&in2), max: 4096}
	u := new(wire.Envelope)
	if _, err := fr.read(u); err != nil {
		t.Fatal(err)
	}
	if _, err := fr.read(new(wire.Envelope)); err != nil {
		t.Fatal(err)
	}
	if got := u.ProtoReflect().GetUnknown(); !bytes.Equal(got, unknown) {
		t.Fatalf("the unknown field changed to %x", got)
	}
}

// What a turn of the driver queues for one channel goes out in one write
// at its push; with the writer busy (the peer's window full), push leaves
// it to the writer, behind what the writer holds, and order is kept.
func TestQueuedTurnIsOneWrite(t *testing.T) {
	f := newFakeStream(-1)
	c, s := fakeChannel(t, f, Options{DirectWrite: 5 * time.Millisecond, WriteStall: time.Minute})
	writes := func() int { f.mu.Lock(); defer f.mu.Unlock(); return f.writes }
	for i := 1; i <= 20; i++ {
		c.queue(frame(uint64(i), 300))
	}
	if w := writes(); w != 0 {
		t.Fatalf("%d writes before the push", w)
	}
	c.push()
	if w := writes(); w != 1 {
		t.Fatalf("a turn of 20 messages took %d writes, want 1", w)
	}
	// The peer stops taking: the next turn's write is cut and the writer
	// takes over; the turn after that queues behind it.
	f.mu.Lock()
	f.room = 1000
	f.mu.Unlock()
	for i := 21; i <= 40; i++ {
		c.queue(frame(uint64(i), 300))
	}
	c.push()
	for i := 41; i <= 60; i++ {
		c.queue(frame(uint64(i), 300))
	}
	c.push()
	f.give(-1)
	eventually(t, "everything to be written", func() bool {
		c.q.mu.Lock()
		defer c.q.mu.Unlock()
		return len(c.q.buf) == 0 && c.q.inflight == 0
	})
	checkOrder(t, f.ids(t), 60)
	if c.h.directCut.Load() != 1 {
		t.Fatalf("%d cut direct writes, want 1", c.h.directCut.Load())
	}
	if lost := s.lost(); len(lost) > 0 {
		t.Fatalf("channel reported lost: %v", lost)
	}
}
