package p2p

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/multiformats/go-varint"

	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/wire"
)

// errBadFrame marks read errors caused by what the peer sent (garbage,
// oversized frames) as opposed to the stream ending.
var errBadFrame = errors.New("p2p: bad frame")

// errStopped ends a write because the channel failed or ended meanwhile.
var errStopped = errors.New("p2p: channel stopped")

// channel is one long-lived stream. A reader goroutine decodes frames and
// hands them to the sink; a writer goroutine owns the write half while it
// has anything to write. The driver's Send (or its Queue, then Push at the
// end of its turn: all that a turn sends to the channel in one write)
// writes to the stream itself when the writer has nothing (a direct
// write: one goroutine hand-off less per message), bounded by a write
// deadline of Options.DirectWrite; what that deadline cuts short, and
// every frame sent until the writer has emptied the queue again, is left
// to the writer (the queue is bounded in bytes, Options.QueueBytes), so
// the driver never waits on a socket for longer than DirectWrite: a peer
// that stops reading (its yamux window full) stalls only its own writer,
// and costs the driver one DirectWrite, not one per message. The writer
// takes everything queued, writes it as one batch (a burst of messages
// costs one write to the stream) and goes back for more. A full queue, or
// a write that makes no progress for Options.WriteStall, resets this
// channel only and reports it as lost, exactly as a read error does.
//
// Order: every frame is appended to the queue first; a direct write
// writes the queue from its start, with q.mu held, and only when the
// writer holds nothing (inflight 0) and was not woken for it (woken), so
// it can neither overtake a frame nor run beside the writer's write; what
// it could not write stays first in the queue.
type channel struct {
	h    *Host
	lh   host.Host // the libp2p host the stream is on (h's own or a private network's)
	id   uint64
	s    network.Stream
	pid  peer.ID
	peer string
	mesh bool
	tag  string // connection-manager protection tag (mesh only)

	q    outq
	wake chan struct{} // a token: the queue has work (capacity 1)
	quit chan struct{} // closed by end: the writer stops

	rmu   sync.Mutex // guards the read deadline against the close's
	rdone bool       // the close's read deadline is set; the reader leaves it

	closing atomic.Bool // the driver closed the channel (or the host is closing)
	endOnce sync.Once
	stpOnce sync.Once
}

// outq is a channel's outbound queue: encoded frames (varint length, then
// the envelope) appended to one buffer, which the writer swaps for an
// empty one and writes.
type outq struct {
	mu       sync.Mutex
	buf      []byte // frames queued, not yet taken by the writer
	inflight int    // bytes the writer took and has not written yet
	state    qstate
	err      error     // why the queue failed (qFailed)
	dl       time.Time // the stream's write deadline, as last set (direct writes and the writer both set it)
	// woken: the writer was woken for what is queued and has not found
	// the queue empty since; no direct write until it has.
	woken bool
}

type qstate uint8

const (
	qOpen    qstate = iota
	qClosing        // write what is queued, then half-close
	qFailed         // reset the channel and report err
	qEnded          // the channel ended; drop everything
)

// Defaults of the outbound queue.
const (
	// DefaultDirectWrite is how long Send may write to a stream itself:
	// a frame that fits the peer's window is written in microseconds.
	DefaultDirectWrite = time.Millisecond
	// DefaultWriteStall is how long a write may make no progress (the
	// peer's window full) before the channel is reset.
	DefaultWriteStall = 2 * time.Second
	// writeChunk is how much is written between two checks of the write
	// deadline: a large batch that keeps moving is not cut, a stalled one
	// is cut after WriteStall.
	writeChunk = 64 << 10
	// keepBuf is the largest buffer a channel keeps between batches; a
	// larger one (a big reply) is left to the garbage collector.
	keepBuf = 64 << 10
)

// serve runs a stream until it ends: registers it, starts its writer,
// reports it and reads it.
func (h *Host) serve(lh host.Host, s network.Stream, mesh, outbound bool) {
	c := &channel{
		h:    h,
		lh:   lh,
		id:   h.nextChan.Add(1),
		s:    s,
		pid:  s.Conn().RemotePeer(),
		peer: s.Conn().RemotePeer().String(),
		mesh: mesh,
		wake: make(chan struct{}, 1),
		quit: make(chan struct{}),
	}
	if mesh {
		c.tag = "inferior"
		if outbound {
			c.tag = "superior"
		}
	}
	if !h.register(c) {
		s.Reset()
		return
	}
	defer h.streams.Done()
	go c.writeLoop()
	if mesh && !h.sink.Deliver(node.Input{Kind: node.InputConnected, Peer: c.peer, Chan: c.id, Outbound: outbound}) {
		c.end(errors.New("manager stopped"), true)
		return
	}
	c.readLoop()
}

func (h *Host) register(c *channel) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	// The reader and the writer; counted under mu so that Close, which
	// sets closed under mu before it waits, never races an Add.
	h.streams.Add(2)
	h.chans[c.id] = c
	if c.mesh {
		key := c.peer + "/" + c.tag
		if h.protect[key] == 0 {
			c.lh.ConnManager().Protect(c.pid, c.tag)
		}
		h.protect[key]++
	}
	return true
}

// unregister removes c and reports whether it was still registered.
func (h *Host) unregister(c *channel) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.chans[c.id]; !ok {
		return false
	}
	delete(h.chans, c.id)
	if c.mesh {
		key := c.peer + "/" + c.tag
		if h.protect[key]--; h.protect[key] <= 0 {
			delete(h.protect, key)
			c.lh.ConnManager().Unprotect(c.pid, c.tag)
		}
	}
	return true
}

func (c *channel) readLoop() {
	idle := c.h.opts.ClientIdle
	kind := node.InputClient
	if c.mesh {
		idle, kind = c.h.opts.MeshIdle, node.InputMessage
	}
	r := frameReader{r: bufio.NewReader(c.s), max: c.h.opts.MaxFrame}
	// Each SetReadDeadline allocates a timer in yamux; move the deadline
	// only when it has come within 7/8 of idle, so it stays between
	// 7/8 × idle and idle ahead at every read.
	var rdl time.Time
	for {
		if now := time.Now(); rdl.Sub(now) < idle*7/8 {
			rdl = now.Add(idle)
			c.rmu.Lock()
			if !c.rdone {
				_ = c.s.SetReadDeadline(rdl)
			}
			c.rmu.Unlock()
		}
		env := new(wire.Envelope)
		n, err := r.read(env)
		if err != nil {
			c.end(c.readError(err))
			return
		}
		c.h.traffic[c.protoIndex()].in(n)
		if !c.h.deliverNow(node.Input{Kind: kind, Peer: c.peer, Chan: c.id, Env: env}) {
			c.end(errors.New("manager stopped"), true)
			return
		}
	}
}

// frameReader reads varint-delimited envelopes as pbio's delimited
// reader does (the same errors: io.ErrShortBuffer for a frame over max),
// decoding them with wire.UnmarshalEnvelope (the generated decoder),
// and also returns each frame's length, which the traffic counters need
// (sizing the decoded envelope again cost a walk over it per frame).
type frameReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

func (f *frameReader) read(env *wire.Envelope) (int, error) {
	n64, err := varint.ReadUvarint(f.r)
	if err != nil {
		return 0, err
	}
	n := int(n64)
	if n < 0 || n > f.max {
		return 0, io.ErrShortBuffer
	}
	if len(f.buf) < n {
		f.buf = make([]byte, n)
	}
	b := f.buf[:n]
	if _, err := io.ReadFull(f.r, b); err != nil {
		return 0, err
	}
	if err := wire.UnmarshalEnvelope(b, env); err != nil {
		// %v, not %w: a message cut short inside a whole frame is the
		// peer's bad frame, not the stream's end (io.ErrUnexpectedEOF).
		return n, fmt.Errorf("%w: %v", errBadFrame, err)
	}
	return n, nil
}

// readError says why a read failed and whether the stream should be reset
// (the peer sent something wrong) rather than closed.
func (c *channel) readError(err error) (error, bool) {
	switch {
	case errors.Is(err, errBadFrame):
		return err, true
	case errors.Is(err, io.EOF):
		return errors.New("closed by peer"), false
	case c.closing.Load() && errors.Is(err, os.ErrDeadlineExceeded):
		return errors.New("peer did not close after our close"), true
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errors.New("silent for longer than the idle timeout"), true
	case errors.Is(err, network.ErrReset):
		return errors.New("stream reset by peer"), false
	case errors.Is(err, io.ErrShortBuffer):
		return fmt.Errorf("%w: frame larger than the %d-byte limit", errBadFrame, c.h.opts.MaxFrame), true
	case c.closing.Load():
		return errors.New("closed"), false
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) {
		return err, true
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("closed by peer mid-frame"), true
	}
	return fmt.Errorf("%w: %v", errBadFrame, err), true
}

// end finishes the stream once: reset or close it, unregister it, stop
// the writer, and report the loss to the driver unless the driver closed
// it itself.
func (c *channel) end(err error, reset bool) {
	c.endOnce.Do(func() {
		graceful := c.closing.Load()
		// Graceful: we half-closed and the peer has now closed too (EOF),
		// or did not within closeWait (reset).
		if reset {
			_ = c.s.Reset()
		} else {
			_ = c.s.Close()
		}
		c.q.mu.Lock()
		c.q.state, c.q.buf = qEnded, nil
		c.q.mu.Unlock()
		close(c.quit)
		reported := c.h.unregister(c)
		if errors.Is(err, errBadFrame) {
			c.h.log.Warn("dropped bad frame, stream reset", "peer", c.peer, "mesh", c.mesh, "err", err)
		} else {
			c.h.log.Debug("stream ended", "peer", c.peer, "mesh", c.mesh, "err", err)
		}
		if reported && c.mesh && !graceful {
			c.h.sink.Deliver(node.Input{Kind: node.InputDisconnected, Peer: c.peer, Chan: c.id, Err: err.Error()})
		}
	})
}

// send writes env to the stream directly when nothing is queued or being
// written (direct), else encodes it into the outbound queue and wakes the
// writer. It never waits on the stream for longer than
// Options.DirectWrite: a full queue (the peer has not taken QueueBytes) or
// a failed direct write fails the channel, which the writer then resets
// and reports from its own goroutine, because reporting to the driver
// must not block the driver.
func (c *channel) send(env *wire.Envelope) { c.put(env, false) }

// queue encodes env into the outbound queue and leaves the writing to
// push (the driver's turn: Host.Queue, Host.Push), so that what a turn
// sends to one channel goes out in one write.
func (c *channel) queue(env *wire.Envelope) { c.put(env, true) }

func (c *channel) put(env *wire.Envelope, hold bool) {
	n := env.SizeVT()
	q := &c.q
	q.mu.Lock()
	if q.state != qOpen {
		q.mu.Unlock()
		return
	}
	held := len(q.buf) + q.inflight
	if held > 0 && held+n+binary.MaxVarintLen64 > c.h.opts.QueueBytes {
		c.fail(fmt.Errorf("peer is not reading: %d bytes wait for it, the limit is %d", held, c.h.opts.QueueBytes))
		q.mu.Unlock()
		c.signal()
		return
	}
	start := len(q.buf)
	c.h.traffic[c.protoIndex()].out(n)
	var err error
	q.buf, err = wire.AppendFrame(q.buf, env, n) // as it was on an error
	if err != nil {
		c.fail(fmt.Errorf("write: %w", err))
	}
	switch {
	case err == nil && hold:
		q.mu.Unlock()
	case err == nil && start == 0 && q.inflight == 0 && !q.woken && c.h.opts.DirectWrite > 0:
		c.direct()
	default:
		wake := start == 0 || err != nil
		q.woken = q.woken || wake
		q.mu.Unlock()
		if wake {
			c.signal()
		}
	}
}

// push writes what queue left, directly when the writer holds nothing,
// else by waking the writer.
func (c *channel) push() {
	q := &c.q
	q.mu.Lock()
	if q.state == qOpen && q.inflight == 0 && !q.woken && len(q.buf) > 0 && c.h.opts.DirectWrite > 0 {
		c.direct()
		return
	}
	q.woken = true
	q.mu.Unlock()
	c.signal()
}

// direct is the direct write: called with q.mu held (it unlocks it),
// frames in the queue and nothing in flight (so the writer is not
// writing, and nothing can overtake what is queued), it writes the whole
// queue to the stream with a write deadline of DirectWrite from now (kept
// when it is already between half of that and that ahead, as each move
// costs a timer in yamux). A write the deadline cuts short leaves its
// unwritten tail queued for the writer, which moves the deadline to
// WriteStall before it writes. Any other error fails the channel as the
// writer's own write error would.
func (c *channel) direct() {
	q := &c.q
	b := q.buf
	wait := c.h.opts.DirectWrite
	if now := time.Now(); q.dl.Sub(now) < wait/2 || q.dl.Sub(now) > wait {
		q.dl = now.Add(wait)
		_ = c.s.SetWriteDeadline(q.dl)
	}
	k, err := c.s.Write(b)
	switch {
	case err == nil:
		if q.buf = b[:0]; cap(b) > keepBuf {
			q.buf = nil
		}
		q.mu.Unlock()
		return
	case isTimeout(err):
		// The peer's window (or the connection) is full: the writer
		// takes over from the first byte not written.
		q.buf = append(b[:0], b[k:]...)
		q.woken = true
		c.h.directCut.Add(1)
	default:
		c.fail(c.writeError(err))
	}
	q.mu.Unlock()
	c.signal()
}

// isTimeout reports whether a write error is a deadline's.
func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &te) && te.Timeout()
}

// fail marks the queue failed and cuts a write in progress short (a
// deadline in the past wakes it at once, where a reset could block on the
// connection), so that the writer resets the channel and reports err.
// Called with q.mu held: the writer moves its deadline under q.mu too, so
// it cannot push this one back into the future.
func (c *channel) fail(err error) {
	c.q.state, c.q.err = qFailed, err
	_ = c.s.SetWriteDeadline(longAgo)
}

// longAgo is a deadline that has passed.
var longAgo = time.Unix(1, 0)

// signal wakes the writer; a token already there will do.
func (c *channel) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// writeLoop is the channel's writer: it writes what is queued, batch by
// batch, until the channel ends, fails, or is closed (then it writes what
// was queued before the close and half-closes).
func (c *channel) writeLoop() {
	defer c.h.streams.Done()
	w := writer{c: c}
	for {
		select {
		case <-c.wake:
		case <-c.quit:
			return
		}
		if !w.drain() {
			return
		}
	}
}

// writer is the writer goroutine's own state.
type writer struct {
	c     *channel
	spare []byte // an emptied batch buffer, reused for the next batch
}

// drain writes batches until the queue is empty. It returns false when the
// writer is done: the channel ended, failed or was half-closed.
func (w *writer) drain() bool {
	c, q := w.c, &w.c.q
	for {
		q.mu.Lock()
		batch, state, qerr := q.buf, q.state, q.err
		if len(batch) == 0 && state == qOpen {
			q.woken = false // back to waiting: direct writes may resume
		}
		if len(batch) > 0 && (state == qOpen || state == qClosing) {
			// The writer now owns batch; Send fills the spare buffer.
			q.buf, q.inflight, w.spare = w.spare[:0], len(batch), nil
		}
		q.mu.Unlock()
		switch {
		case state == qEnded:
			return false
		case state == qFailed:
			c.end(qerr, true)
			return false
		case len(batch) > 0:
			if err := w.write(batch); err != nil {
				q.mu.Lock()
				if q.state == qFailed {
					err = q.err // the cause, not the deadline it set
				} else {
					err = c.writeError(err)
				}
				q.mu.Unlock()
				c.end(err, true)
				return false
			}
			if w.spare = batch[:0]; cap(w.spare) > keepBuf {
				w.spare = nil
			}
		case state == qClosing:
			c.halfClose()
			return false
		default:
			return true
		}
	}
}

// write writes one batch in chunks, keeping the write deadline between
// WriteStall/2 and WriteStall ahead of each chunk (moved only when it has
// come closer, as each move costs a timer in yamux), so that only a write
// that makes no progress for that long fails.
func (w *writer) write(b []byte) error {
	c := w.c
	stall := c.h.opts.WriteStall
	for len(b) > 0 {
		c.q.mu.Lock()
		if c.q.state == qFailed || c.q.state == qEnded {
			c.q.mu.Unlock()
			return errStopped
		}
		if now := time.Now(); c.q.dl.Sub(now) < stall/2 {
			c.q.dl = now.Add(stall)
			_ = c.s.SetWriteDeadline(c.q.dl)
		}
		c.q.mu.Unlock()
		k := min(len(b), writeChunk)
		n, err := c.s.Write(b[:k])
		c.q.mu.Lock()
		c.q.inflight -= n
		c.q.mu.Unlock()
		if err != nil {
			return err
		}
		b = b[k:]
	}
	return nil
}

// writeError says why a write failed, in the words the driver will show.
func (c *channel) writeError(err error) error {
	if isTimeout(err) {
		return fmt.Errorf("peer is not reading: nothing could be written to it for %v", c.h.opts.WriteStall)
	}
	return fmt.Errorf("write: %w", err)
}

// closeWait bounds how long a half-closed stream waits for the peer's EOF.
const closeWait = 2 * time.Second

// closeGracefully is the driver's close: nothing is reported; the writer
// writes what was queued and half-closes the stream (FIN), and the reader
// keeps reading until the peer closes its side, so that the last messages
// (a goodbye, a refusal) are read before any reset can overtake them.
func (c *channel) closeGracefully(reason string) {
	c.stpOnce.Do(func() {
		c.closing.Store(true)
		c.q.mu.Lock()
		if c.q.state == qOpen {
			c.q.state = qClosing
		}
		c.q.mu.Unlock()
		c.signal()
		c.h.unregister(c)
		c.h.log.Debug("closing stream", "peer", c.peer, "mesh", c.mesh, "reason", reason)
	})
}

// halfClose ends the write half once the queue is written, and gives the
// peer closeWait to close its side before the reader gives up.
func (c *channel) halfClose() {
	_ = c.s.CloseWrite()
	c.rmu.Lock()
	c.rdone = true
	_ = c.s.SetReadDeadline(time.Now().Add(closeWait))
	c.rmu.Unlock()
}
