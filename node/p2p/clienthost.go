package p2p

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	"github.com/libp2p/go-msgio/pbio"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/node/p2p/transfer"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/wire"
)

// ClientHostOptions configure NewClientHost.
type ClientHostOptions struct {
	Key crypto.PrivKey // the client's identity; nil: a fresh key
	PSK pnet.PSK       // the grid's pre-shared key, if it has one
	// MaxFrame bounds one reply, bytes. Default 4 MiB.
	MaxFrame int
}

// ClientHost is the libp2p host a client speaks from: it does not listen,
// it has the client's identity (the peer id that holds reservations) and
// the grid's pre-shared key. Open opens client streams to managers; several
// streams (to one manager or many) share the host. It implements
// client.Dialer.
type ClientHost struct {
	h        host.Host
	maxFrame int
}

// NewClientHost makes a client host. Close it when done.
func NewClientHost(opts ClientHostOptions) (*ClientHost, error) {
	key := opts.Key
	if key == nil {
		var err error
		if key, err = GenerateIdentity(); err != nil {
			return nil, err
		}
	}
	o := []libp2p.Option{
		libp2p.Identity(key),
		libp2p.NoListenAddrs,
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.DisableRelay(),
		libp2p.DisableMetrics(),
		libp2p.UserAgent("gridmgr-client"),
	}
	if opts.PSK != nil {
		o = append(o, libp2p.PrivateNetwork(opts.PSK))
	}
	h, err := libp2p.New(o...)
	if err != nil {
		return nil, fmt.Errorf("p2p: client host: %w", err)
	}
	if opts.MaxFrame <= 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	return &ClientHost{h: h, maxFrame: opts.MaxFrame}, nil
}

// PeerID is the client's peer id.
func (c *ClientHost) PeerID() string { return c.h.ID().String() }

// Close closes every stream and the host.
func (c *ClientHost) Close() error { return c.h.Close() }

// LibP2P exposes the underlying host (tests and benchmarks).
func (c *ClientHost) LibP2P() host.Host { return c.h }

// Open connects to the manager pa and opens a client stream
// (/gridmgr/client/1.0.0) to it.
func (c *ClientHost) Open(ctx context.Context, pa peeraddr.PeerAddrs) (*ClientStream, error) {
	return openClient(ctx, c.h, c.maxFrame, pa)
}

// OpenClient opens a client stream from this manager to the manager pa,
// as a client would (the web UI and the job runtime ask other managers
// this way), from the libp2p host that knows pa.Peer (For): a private
// network's when the peer is connected or known there only.
//
// The stream holds the peer (HoldPeer) until it is closed, and waits for
// a place if this manager has its most client streams open to pa already.
func (h *Host) OpenClient(ctx context.Context, pa peeraddr.PeerAddrs) (*ClientStream, error) {
	id, err := peer.Decode(pa.Peer)
	if err != nil {
		return nil, fmt.Errorf("%w: peer id %q: %v", peeraddr.ErrAddr, pa.Peer, err)
	}
	u := h.hold(id)
	if err := u.slot(ctx, pa.Peer); err != nil {
		h.release(id)
		return nil, err
	}
	done := func() {
		<-u.slots
		h.release(id)
	}
	cs, err := openClient(ctx, h.hostFor(id), h.opts.MaxFrame, pa)
	if err != nil {
		done()
		return nil, err
	}
	cs.done = done
	return cs, nil
}

func openClient(ctx context.Context, h host.Host, maxFrame int, pa peeraddr.PeerAddrs) (*ClientStream, error) {
	id, err := peer.Decode(pa.Peer)
	if err != nil {
		return nil, fmt.Errorf("%w: peer id %q: %v", peeraddr.ErrAddr, pa.Peer, err)
	}
	ai := peer.AddrInfo{ID: id}
	for _, a := range pa.Addrs {
		m, err := ma.NewMultiaddr(a)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", peeraddr.ErrAddr, a, err)
		}
		ai.Addrs = append(ai.Addrs, m)
	}
	if len(ai.Addrs) == 0 {
		return nil, fmt.Errorf("%w: manager %s has no known address", peeraddr.ErrAddr, text.ShortPeer(pa.Peer))
	}
	// A manager at one of its resource limits refuses the connection or
	// the stream: many processes with one client key at once (one peer
	// id), or more clients than it takes. Each refusal is over at once
	// and others' sessions end soon, so wait a little and try again,
	// until the caller's deadline.
	start := time.Now()
	var lerr *LimitError // the last refusal
	for try := 1; ; try++ {
		s, err := openStream(ctx, h, ai, pa)
		if err == nil {
			cs := &ClientStream{s: s, peer: pa.Peer, bw: bufio.NewWriter(s)}
			cs.w = pbio.NewDelimitedWriter(cs.bw)
			cs.r = &frameReader{r: bufio.NewReader(s), max: maxFrame}
			return cs, nil
		}
		conn, refused := limitRefusal(err)
		if !refused {
			if lerr != nil && ctx.Err() != nil {
				// The deadline came during a try after refusals:
				// the refusals are what the caller needs to know.
				lerr.For = time.Since(start)
				return nil, lerr
			}
			return nil, err
		}
		lerr = &LimitError{Manager: pa.Peer, Conn: conn, Tries: try, Err: err}
		wait := limitBackoff(try, rand.Float64())
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			lerr.For = time.Since(start)
			return nil, lerr
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			lerr.For = time.Since(start)
			return nil, lerr
		}
		// A refused dial puts the manager in the swarm's dial backoff,
		// which would refuse the next try without dialing.
		if sw, ok := h.Network().(*swarm.Swarm); ok {
			sw.Backoff().Clear(id)
		}
	}
}

// openStream connects to the manager and opens a client stream, once.
func openStream(ctx context.Context, h host.Host, ai peer.AddrInfo, pa peeraddr.PeerAddrs) (network.Stream, error) {
	if err := h.Connect(ctx, ai); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", pa, err)
	}
	s, err := h.NewStream(ctx, ai.ID, ClientProtocol)
	if err != nil {
		return nil, fmt.Errorf("open client stream to %s: %w", pa, err)
	}
	return s, nil
}

// ErrLimit is what a LimitError is: a manager refused a client by one of
// its resource limits, until the client's deadline.
var ErrLimit = errors.New("refused by the manager's resource limits")

// LimitError is a manager's refusal of a client's connection or stream by
// one of its resource limits (libp2p's resource manager), every time the
// client tried until its deadline.
type LimitError struct {
	Manager string        // the manager's peer id
	Conn    bool          // the connection was refused; else the stream
	Tries   int           // how many times the client tried
	For     time.Duration // how long it tried
	Err     error         // the last refusal, as libp2p reported it
}

// Error says which limit in plain words; what to do is the caller's to
// say (it knows where the client's key comes from).
func (e *LimitError) Error() string {
	what := "the connection %d times in %s (it closed each right after the handshake): " +
		"its limit of connections from one peer id (one client key), or of connections in all, was full"
	if !e.Conn {
		what = "the client stream %d times in %s: " +
			"its limit of client streams from one peer id (one client key), or of client streams in all, was full"
	}
	return fmt.Sprintf("manager %s refused "+what, text.ShortPeer(e.Manager), e.Tries, text.FormatDuration(e.For.Round(time.Millisecond)))
}

// Is makes errors.Is(err, ErrLimit) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// Unwrap is the last refusal.
func (e *LimitError) Unwrap() error { return e.Err }

// limitRefusal reports whether err is a manager's refusal by a resource
// limit, and whether of the connection (else of the stream). A stream is
// refused with a code that says so. A connection is refused after the
// security handshake without a word (libp2p closes it when the peer's
// scope is full): the client saw the connection accepted and gone before
// its stream could open, or the muxer negotiation cut off. Failures
// before the handshake (refused, unreachable, a wrong pre-shared key) are
// not refusals by a limit.
func limitRefusal(err error) (conn, refused bool) {
	if LimitReset(err) {
		return false, true
	}
	var ce *network.ConnError
	if errors.As(err, &ce) && ce.Remote &&
		(ce.ErrorCode == network.ConnResourceLimitExceeded || ce.ErrorCode == network.ConnRateLimited) {
		return true, true
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "open client stream to ") && strings.HasSuffix(msg, ": connection failed"):
		// basic host: the connection closed before the stream opened.
		return true, true
	case strings.Contains(msg, "failed to negotiate stream multiplexer"):
		return true, true
	}
	return false, false
}

// LimitReset reports whether err is a stream reset by the manager because
// one of its resource limits was full (libp2p's code for it). The
// manager refuses a client stream so before it reads anything from it;
// as the protocol is agreed lazily, the client may learn it only when it
// reads the first reply.
func LimitReset(err error) bool {
	var se *network.StreamError
	return errors.As(err, &se) && se.Remote &&
		(se.ErrorCode == network.StreamResourceLimitExceeded || se.ErrorCode == network.StreamRateLimited)
}

// limitBackoff is how long to wait before try+1 after a refusal by a
// limit: 20 ms doubling to 1 s at most, jittered (u in [0, 1)) over its
// upper half so that the processes of one script do not come back
// together.
func limitBackoff(try int, u float64) time.Duration {
	d := limitRetryFirst << min(try-1, 10)
	d = min(d, limitRetryMax)
	return d/2 + time.Duration(u*float64(d/2))
}

// Limits of limitBackoff.
const (
	limitRetryFirst = 20 * time.Millisecond
	limitRetryMax   = time.Second
)

// ClientStream is one client stream to a manager: envelopes framed as on
// every gridmgr stream (varint length, then the protobuf bytes). Send may
// be called from several goroutines; Recv from one.
type ClientStream struct {
	s    network.Stream
	peer string
	bw   *bufio.Writer
	w    pbio.Writer // protobuf-go's encoder, which refuses a string that is not UTF-8 here rather than at the manager
	r    *frameReader
	// done, if set, is called by the first Close (a manager's hold on
	// the peer: OpenClient).
	done     func()
	doneOnce sync.Once
}

// Peer is the manager's peer id.
func (s *ClientStream) Peer() string { return s.peer }

// Self is the client's own peer id.
func (s *ClientStream) Self() string { return s.s.Conn().LocalPeer().String() }

// Send writes one envelope and flushes it, giving up at deadline (zero:
// no deadline). The caller serialises Send calls.
func (s *ClientStream) Send(env *wire.Envelope, deadline time.Time) error {
	_ = s.s.SetWriteDeadline(deadline)
	if err := s.w.WriteMsg(env); err != nil {
		if field := wire.InvalidUTF8(env); field != "" {
			// protobuf-go refused it, before writing anything, without
			// saying where
			return fmt.Errorf("%s is %w", field, wire.ErrInvalidUTF8)
		}
		return err
	}
	return s.bw.Flush()
}

// Recv reads the next envelope.
func (s *ClientStream) Recv() (*wire.Envelope, error) {
	env := new(wire.Envelope)
	if _, err := s.r.read(env); err != nil {
		return nil, err
	}
	return env, nil
}

// Close half-closes the stream: the manager sees the end of the session.
func (s *ClientStream) Close() error {
	err := s.s.Close()
	if s.done != nil {
		s.doneOnce.Do(s.done)
	}
	if errors.Is(err, network.ErrReset) {
		return nil
	}
	return err
}

// Speaks reports whether the peer peerID, once connected (libp2p's
// identify exchange, which opening a stream waits for, told this host its
// protocols), speaks protocol; it implements client.ProtocolChecker.
func (c *ClientHost) Speaks(peerID, proto string) bool {
	id, err := peer.Decode(peerID)
	if err != nil {
		return false
	}
	ps, err := c.h.Peerstore().SupportsProtocols(id, protocol.ID(proto))
	return err == nil && len(ps) > 0
}

// SendBundle uploads an application bundle to the manager peer on the
// bundle stream (package transfer), for reservation; it implements
// client.BundleSender. The client must be connected to peer already (a
// client session opens the connection).
func (c *ClientHost) SendBundle(ctx context.Context, peerID, file, reservation string, progress func(sent, total int64)) (string, error) {
	id, err := peer.Decode(peerID)
	if err != nil {
		return "", fmt.Errorf("bad peer id %q: %w", peerID, err)
	}
	return transfer.Send(ctx, c.h, id, file, reservation, progress)
}
