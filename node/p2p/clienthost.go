package p2p

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	"github.com/libp2p/go-msgio/pbio"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gridmgr/gridmgr/node/p2p/transfer"
	"github.com/gridmgr/gridmgr/relations"
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
func (c *ClientHost) Open(ctx context.Context, pa relations.PeerAddrs) (*ClientStream, error) {
	return openClient(ctx, c.h, c.maxFrame, pa)
}

// OpenClient opens a client stream from this manager to the manager pa,
// as a client would (the web UI asks other managers this way).
func (h *Host) OpenClient(ctx context.Context, pa relations.PeerAddrs) (*ClientStream, error) {
	return openClient(ctx, h.h, h.opts.MaxFrame, pa)
}

func openClient(ctx context.Context, h host.Host, maxFrame int, pa relations.PeerAddrs) (*ClientStream, error) {
	id, err := peer.Decode(pa.Peer)
	if err != nil {
		return nil, fmt.Errorf("%w: peer id %q: %v", relations.ErrAddr, pa.Peer, err)
	}
	ai := peer.AddrInfo{ID: id}
	for _, a := range pa.Addrs {
		m, err := ma.NewMultiaddr(a)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", relations.ErrAddr, a, err)
		}
		ai.Addrs = append(ai.Addrs, m)
	}
	if len(ai.Addrs) == 0 {
		return nil, fmt.Errorf("%w: manager %s has no known address", relations.ErrAddr, relations.ShortPeer(pa.Peer))
	}
	if err := h.Connect(ctx, ai); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", pa, err)
	}
	s, err := h.NewStream(ctx, id, ClientProtocol)
	if err != nil {
		return nil, fmt.Errorf("open client stream to %s: %w", pa, err)
	}
	cs := &ClientStream{s: s, peer: pa.Peer, bw: bufio.NewWriter(s)}
	cs.w = pbio.NewDelimitedWriter(cs.bw)
	cs.r = pbio.NewDelimitedReader(s, maxFrame)
	return cs, nil
}

// ClientStream is one client stream to a manager: envelopes framed as on
// every gridmgr stream (varint length, then the protobuf bytes). Send may
// be called from several goroutines; Recv from one.
type ClientStream struct {
	s    network.Stream
	peer string
	bw   *bufio.Writer
	w    pbio.Writer
	r    pbio.ReadCloser
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
		return err
	}
	return s.bw.Flush()
}

// Recv reads the next envelope.
func (s *ClientStream) Recv() (*wire.Envelope, error) {
	env := new(wire.Envelope)
	if err := s.r.ReadMsg(env); err != nil {
		return nil, err
	}
	return env, nil
}

// Close half-closes the stream: the manager sees the end of the session.
func (s *ClientStream) Close() error {
	err := s.s.Close()
	if errors.Is(err, network.ErrReset) {
		return nil
	}
	return err
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
