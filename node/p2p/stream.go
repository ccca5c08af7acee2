package p2p

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/wire"
)

// errBadFrame marks read errors caused by what the peer sent (garbage,
// oversized frames) as opposed to the stream ending.
var errBadFrame = errors.New("p2p: bad frame")

// channel is one long-lived stream: a reader goroutine decodes frames and
// hands them to the sink; writes happen in the caller's goroutine (the
// driver's), through a buffered writer flushed once per message. A yamux
// stream write only queues the frame for the connection's send loop, so it
// blocks only when the peer stopped reading; a write deadline bounds that
// and the stream is then reset.
type channel struct {
	h    *Host
	id   uint64
	s    network.Stream
	pid  peer.ID
	peer string
	mesh bool
	tag  string // connection-manager protection tag (mesh only)

	wmu     sync.Mutex // guards bw, w, wdl and the write half of s
	bw      *bufio.Writer
	w       pbio.WriteCloser
	wdl     time.Time // write deadline last set
	closing atomic.Bool
	endOnce sync.Once
	stpOnce sync.Once
}

// writeStall bounds how long one send may block on a peer that does not
// read (its yamux window full). Well under a heartbeat interval.
const writeStall = 250 * time.Millisecond

// serve runs a stream until it ends: registers it, starts its writer,
// reports it and reads it.
func (h *Host) serve(s network.Stream, mesh, outbound bool) {
	c := &channel{
		h:    h,
		id:   h.nextChan.Add(1),
		s:    s,
		pid:  s.Conn().RemotePeer(),
		peer: s.Conn().RemotePeer().String(),
		mesh: mesh,
	}
	c.bw = bufio.NewWriterSize(s, 4<<10)
	c.w = pbio.NewDelimitedWriter(c.bw)
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
	h.readers.Add(1)
	defer h.readers.Done()
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
	h.chans[c.id] = c
	if c.mesh {
		key := c.peer + "/" + c.tag
		if h.protect[key] == 0 {
			h.h.ConnManager().Protect(c.pid, c.tag)
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
			h.h.ConnManager().Unprotect(c.pid, c.tag)
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
	r := pbio.NewDelimitedReader(c.s, c.h.opts.MaxFrame)
	// Each SetReadDeadline allocates a timer in yamux; move the deadline
	// only when it has come within 7/8 of idle, so it stays between
	// 7/8 × idle and idle ahead at every read.
	var rdl time.Time
	for {
		if now := time.Now(); !c.closing.Load() && rdl.Sub(now) < idle*7/8 {
			rdl = now.Add(idle)
			_ = c.s.SetReadDeadline(rdl)
		}
		env := new(wire.Envelope)
		if err := r.ReadMsg(env); err != nil {
			c.end(c.readError(err))
			return
		}
		if !c.h.sink.Deliver(node.Input{Kind: kind, Peer: c.peer, Chan: c.id, Env: env}) {
			c.end(errors.New("manager stopped"), true)
			return
		}
	}
}

// readError says why a read failed and whether the stream should be reset
// (the peer sent something wrong) rather than closed.
func (c *channel) readError(err error) (error, bool) {
	switch {
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

// end finishes the stream once: reset or close it, unregister it, and
// report the loss to the driver unless the driver closed it itself.
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
		reported := c.h.unregister(c)
		level := "debug"
		if errors.Is(err, errBadFrame) {
			level = "warn"
			c.h.log.Warn("dropped bad frame, stream reset", "peer", c.peer, "mesh", c.mesh, "err", err)
		}
		if level == "debug" {
			c.h.log.Debug("stream ended", "peer", c.peer, "mesh", c.mesh, "err", err)
		}
		if reported && c.mesh && !graceful {
			c.h.sink.Deliver(node.Input{Kind: node.InputDisconnected, Peer: c.peer, Chan: c.id, Err: err.Error()})
		}
	})
}

// send writes one envelope and flushes it. Called from the driver
// goroutine; a failure ends the stream from another goroutine, because
// reporting it to the driver must not block the driver.
func (c *channel) send(env *wire.Envelope) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closing.Load() {
		return
	}
	// Move the deadline before writing: a message larger than the buffer
	// goes to the stream inside WriteMsg. As for reads, keep the deadline
	// between writeStall/2 and writeStall ahead without a new timer per
	// message; a large message gets time in proportion to its size.
	now := time.Now()
	stall := writeStall
	if n := proto.Size(env); n > largeMsg {
		stall += time.Duration(n/largeMsg) * writeStall
	}
	if c.wdl.Sub(now) < stall/2 {
		c.wdl = now.Add(stall)
		_ = c.s.SetWriteDeadline(c.wdl)
	}
	err := c.w.WriteMsg(env)
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		go c.end(fmt.Errorf("write: %w", err), true)
	}
}

// largeMsg is the size beyond which a write gets extra time: one more
// writeStall per largeMsg bytes.
const largeMsg = 64 << 10

// closeWait bounds how long a half-closed stream waits for the peer's EOF.
const closeWait = 2 * time.Second

// closeGracefully is the driver's close: nothing is reported; what was
// written is flushed and the stream half-closed (FIN), and the reader keeps
// reading until the peer closes its side, so that the last messages (a
// goodbye, a refusal) are read before any reset can overtake them.
func (c *channel) closeGracefully(reason string) {
	c.stpOnce.Do(func() {
		c.wmu.Lock()
		c.closing.Store(true)
		c.wmu.Unlock()
		c.h.unregister(c)
		c.h.log.Debug("closing stream", "peer", c.peer, "mesh", c.mesh, "reason", reason)
		_ = c.s.SetReadDeadline(time.Now().Add(closeWait))
		_ = c.s.SetWriteDeadline(time.Now().Add(time.Second))
		_ = c.s.CloseWrite()
	})
}
