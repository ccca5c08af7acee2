package p2p

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/wire"
)

// Protocol ids.
const (
	MeshProtocol   protocol.ID = "/gridmgr/mesh/1.0.0"
	ClientProtocol protocol.ID = "/gridmgr/client/1.0.0"
)

// Defaults of Options.
const (
	DefaultMaxFrame    = 4 << 20
	DefaultDialTimeout = 10 * time.Second
	DefaultClientIdle  = 5 * time.Minute
)

// Options configure a Host.
type Options struct {
	Key    crypto.PrivKey // identity; required
	Listen []string       // TCP multiaddrs; required
	PSK    pnet.PSK       // pre-shared key; nil for an open grid
	Log    *slog.Logger
	// MaxFrame bounds one message on a stream, bytes. Default 4 MiB.
	MaxFrame int
	// MeshIdle is how long a mesh stream may stay silent before the read
	// fails. It backs up the heartbeat failure detector; set it above
	// heartbeat.misses × heartbeat.interval. Default 30s.
	MeshIdle time.Duration
	// ClientIdle is the same for client streams. Default 5m.
	ClientIdle time.Duration
	// DialTimeout bounds connecting to a superior and opening the stream.
	DialTimeout time.Duration
	// QueueBytes bounds what one channel holds for its peer (encoded
	// frames queued or being written); a message that would go over it
	// resets the channel, as a peer that has not taken that much is not
	// reading. One message always fits in an empty queue. Default
	// 2 × MaxFrame.
	QueueBytes int
	// WriteStall is how long a write to a peer may make no progress (its
	// window full: it stopped reading) before the channel is reset.
	// Default DefaultWriteStall.
	WriteStall time.Duration
	// DirectWrite bounds how long Send may write to a stream itself (when
	// nothing is queued for it) before it leaves the rest to the
	// channel's writer goroutine: the longest a peer whose window is full
	// can hold up the driver, once, before its channel queues. Default
	// DefaultDirectWrite; negative: Send always queues for the writer.
	DirectWrite time.Duration
	// UserAgent is told to peers by identify.
	UserAgent string
	// Registerer, if set, receives libp2p's own metrics (the resource
	// manager's, the swarm's, identify's); nil turns them off.
	Registerer prometheus.Registerer
}

// Sink receives what the Host reports; node.Driver implements it.
type Sink interface {
	Deliver(node.Input) bool
}

// NowSink is a Sink that can also handle an input on the caller's
// goroutine (node.Driver.DeliverNow): the stream readers hand it the
// frames they read, which saves a goroutine hand-off per message.
type NowSink interface {
	Sink
	DeliverNow(node.Input) bool
}

// Host is a libp2p host serving gridmgr; it implements node.Transport.
type Host struct {
	h    host.Host
	opts Options
	log  *slog.Logger
	sink Sink
	now  NowSink // sink, when it can handle frames on the reader's goroutine
	// attached is closed by Attach: streams that arrive earlier (the host
	// listens from New on) wait for it instead of being refused.
	attached chan struct{}

	nextChan  atomic.Uint64
	traffic   [2]counters   // mesh, client
	directCut atomic.Uint64 // direct writes a deadline cut short (tests)
	mu        sync.Mutex
	chans     map[uint64]*channel
	protect   map[string]int // peer/tag → streams holding the tag
	nets      []*Network     // private networks (privnet.go)
	closed    bool
	wg        sync.WaitGroup // dials

	umu     sync.Mutex             // uses, and closing a connection nobody uses
	uses    map[peer.ID]*clientUse // what this manager has open to peers as their client (clientuse.go)
	streams sync.WaitGroup         // stream readers and writers
}

// New starts a libp2p host listening on opts.Listen. The gridmgr stream
// handlers are registered at once, but streams wait (up to the dial
// timeout) until Attach gives the host its sink, so a peer that dials in
// while the manager is still starting is served, not refused with
// "protocols not supported".
func New(opts Options) (*Host, error) {
	if opts.Key == nil {
		return nil, errors.New("p2p: no identity key")
	}
	if len(opts.Listen) == 0 {
		return nil, errors.New("p2p: no listen address")
	}
	opts = withDefaults(opts)
	h, err := newLibp2p(opts, opts.PSK, opts.Listen, opts.Registerer)
	if err != nil {
		return nil, err
	}
	return Wrap(h, opts), nil
}

// newLibp2p builds a libp2p host with opts' identity and limits, listening
// on listen, with psk (nil: none) and libp2p's metrics registered with reg
// (nil: off; only one host of a process may register them).
func newLibp2p(opts Options, psk pnet.PSK, listen []string, reg prometheus.Registerer) (host.Host, error) {
	rm, err := resourceManager()
	if err != nil {
		return nil, fmt.Errorf("p2p: resource manager: %w", err)
	}
	cm, err := connmgr.NewConnManager(160, 192, connmgr.WithGracePeriod(time.Minute))
	if err != nil {
		return nil, fmt.Errorf("p2p: connection manager: %w", err)
	}
	o := []libp2p.Option{
		libp2p.Identity(opts.Key),
		libp2p.ListenAddrStrings(listen...),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.DisableRelay(),
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
		libp2p.UserAgent(opts.UserAgent),
	}
	if reg != nil {
		o = append(o, libp2p.PrometheusRegisterer(reg))
		rcmgr.MustRegisterWith(reg)
	} else {
		o = append(o, libp2p.DisableMetrics())
	}
	if psk != nil {
		o = append(o, libp2p.PrivateNetwork(psk))
	}
	h, err := libp2p.New(o...)
	if err != nil {
		return nil, fmt.Errorf("p2p: %w", err)
	}
	return h, nil
}

// Wrap serves gridmgr over a libp2p host the caller built (a mocknet host
// in simulations and benchmarks). opts.Key, Listen and PSK are ignored: the
// host has them already. Closing the Host closes h.
func Wrap(h host.Host, opts Options) *Host {
	opts = withDefaults(opts)
	hh := &Host{
		h:        h,
		opts:     opts,
		log:      opts.Log,
		attached: make(chan struct{}),
		chans:    make(map[uint64]*channel),
		protect:  make(map[string]int),
	}
	hh.handle(h)
	return hh
}

// handle serves the gridmgr protocols on lh (this host's own libp2p host
// or a private network's) into this Host.
func (h *Host) handle(lh host.Host) {
	wait := func(serve func(network.Stream)) network.StreamHandler {
		return func(s network.Stream) {
			select {
			case <-h.attached:
				serve(s)
			case <-time.After(h.opts.DialTimeout):
				_ = s.Reset()
			}
		}
	}
	lh.SetStreamHandler(MeshProtocol, wait(func(s network.Stream) { h.serve(lh, s, true, false) }))
	lh.SetStreamHandler(ClientProtocol, wait(func(s network.Stream) { h.serve(lh, s, false, false) }))
}

func withDefaults(opts Options) Options {
	if opts.MaxFrame <= 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	if opts.MeshIdle <= 0 {
		opts.MeshIdle = 30 * time.Second
	}
	if opts.ClientIdle <= 0 {
		opts.ClientIdle = DefaultClientIdle
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = 2 * opts.MaxFrame
	}
	if opts.WriteStall <= 0 {
		opts.WriteStall = DefaultWriteStall
	}
	if opts.DirectWrite == 0 {
		opts.DirectWrite = DefaultDirectWrite
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "gridmgr/" + config.Version
	}
	return opts
}

// PeerID is this host's peer id.
func (h *Host) PeerID() string { return h.h.ID().String() }

// LibP2P exposes the underlying host (for tests and benchmarks).
func (h *Host) LibP2P() host.Host { return h.h }

// Addrs are the transport multiaddrs (without /p2p) others can dial: the
// bound listen addresses, expanded as by DialableAddrs.
func (h *Host) Addrs() []string {
	return dialable(h.h.Network().ListenAddresses())
}

// DialableAddrs turns listen multiaddrs into addresses others can dial:
// unspecified IPs (0.0.0.0, ::) become this machine's interface addresses,
// non-loopback first. Malformed entries are skipped.
func DialableAddrs(listen []string) []string {
	var ms []ma.Multiaddr
	for _, a := range listen {
		if m, err := ma.NewMultiaddr(a); err == nil {
			ms = append(ms, m)
		}
	}
	return dialable(ms)
}

func dialable(listen []ma.Multiaddr) []string {
	ifaces, err := manet.InterfaceMultiaddrs()
	if err == nil {
		if res, err := manet.ResolveUnspecifiedAddresses(listen, ifaces); err == nil {
			listen = res
		}
	}
	var out, lo []string
	for _, a := range listen {
		if manet.IsIPLoopback(a) {
			lo = append(lo, a.String())
		} else {
			out = append(out, a.String())
		}
	}
	out = append(out, lo...)
	return slices.Compact(out)
}

// FullAddrs are Addrs with /p2p/<peer id> appended: what a superiors list
// or a CLI -n flag should use.
func (h *Host) FullAddrs() []string {
	var out []string
	for _, a := range h.Addrs() {
		out = append(out, a+"/p2p/"+h.PeerID())
	}
	return out
}

// Attach gives the Host its sink: from then on streams are served and
// reported to it. Call it once, after the driver exists.
func (h *Host) Attach(sink Sink) {
	h.sink = sink
	h.now, _ = sink.(NowSink)
	close(h.attached)
}

// deliverNow hands a frame read from a stream to the sink, on the
// reader's goroutine when the sink can (NowSink).
func (h *Host) deliverNow(in node.Input) bool {
	if h.now != nil {
		return h.now.DeliverNow(in)
	}
	return h.sink.Deliver(in)
}

// Close closes every stream (its writer writes what was queued, then the
// stream is half-closed and its reader waits for the peer to close its
// side, for up to closeWait in all), resets those still open after that,
// waits (again for up to closeWait) for their goroutines, and closes the
// libp2p host.
func (h *Host) Close() error {
	h.mu.Lock()
	h.closed = true
	chans := make([]*channel, 0, len(h.chans))
	for _, c := range h.chans {
		chans = append(chans, c)
	}
	nets := h.nets
	h.nets = nil
	h.mu.Unlock()
	for _, lh := range append([]host.Host{h.h}, netHosts(nets)...) {
		lh.RemoveStreamHandler(MeshProtocol)
		lh.RemoveStreamHandler(ClientProtocol)
	}
	for _, c := range chans {
		c.closeGracefully("host closing")
	}
	done := make(chan struct{})
	go func() { h.wg.Wait(); h.streams.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeWait):
		// A reset ends a writer blocked on a full window and a reader
		// waiting for an EOF at once.
		for _, c := range chans {
			c.end(errors.New("host closed"), true)
		}
		select {
		case <-done:
		case <-time.After(closeWait):
			h.log.Warn("stream goroutines still running after close")
		}
	}
	for _, n := range nets {
		_ = n.h.Close()
	}
	return h.h.Close()
}

// Dial implements node.Transport.
func (h *Host) Dial(peerID string, addrs []string) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		lh, s, err := h.dial(peerID, addrs)
		if err != nil {
			h.sink.Deliver(node.Input{Kind: node.InputDialFailed, Peer: peerID, Err: err.Error()})
			return
		}
		h.serve(lh, s, true, true)
	}()
}

// dial connects to the peer from the libp2p host that knows it (For) and
// opens a mesh stream.
func (h *Host) dial(peerID string, addrs []string) (host.Host, network.Stream, error) {
	id, err := peer.Decode(peerID)
	if err != nil {
		return nil, nil, fmt.Errorf("bad peer id %q: %w", peerID, err)
	}
	ai := peer.AddrInfo{ID: id}
	for _, a := range addrs {
		m, err := ma.NewMultiaddr(a)
		if err != nil {
			return nil, nil, fmt.Errorf("bad address %q: %w", a, err)
		}
		ai.Addrs = append(ai.Addrs, m)
	}
	lh := h.hostFor(id)
	// The Core spaces retries with its own jittered backoff; libp2p's
	// dial backoff would refuse a superior that came up meanwhile.
	if sw, ok := lh.Network().(*swarm.Swarm); ok {
		sw.Backoff().Clear(id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.DialTimeout)
	defer cancel()
	if err := lh.Connect(ctx, ai); err != nil {
		return nil, nil, err
	}
	s, err := lh.NewStream(ctx, id, MeshProtocol)
	return lh, s, err
}

// Send implements node.Transport.
func (h *Host) Send(ch uint64, env *wire.Envelope) {
	h.mu.Lock()
	c := h.chans[ch]
	h.mu.Unlock()
	if c == nil {
		return
	}
	c.send(env)
}

// Queue implements node.BatchTransport: Send, but nothing is written
// before Push, so that what a turn of the driver sends to one channel
// goes out in one write.
func (h *Host) Queue(ch uint64, env *wire.Envelope) {
	h.mu.Lock()
	c := h.chans[ch]
	h.mu.Unlock()
	if c != nil {
		c.queue(env)
	}
}

// Push implements node.BatchTransport: it writes what Queue left on each
// channel, directly when its writer holds nothing (bounded by
// DirectWrite, as Send's direct write), else by waking its writer.
func (h *Host) Push(chs []uint64) {
	for _, ch := range chs {
		h.mu.Lock()
		c := h.chans[ch]
		h.mu.Unlock()
		if c != nil {
			c.push()
		}
	}
}

// ClosePeer implements node.PeerCloser: it drops every connection to a
// peer that went silent, in the background, so that the next dial does
// not open its stream on a half-open connection that only TCP's
// retransmission timeout would end.
func (h *Host) ClosePeer(peerID string) {
	id, err := peer.Decode(peerID)
	if err != nil {
		return
	}
	hosts := h.allHosts()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for _, lh := range hosts {
			_ = lh.Network().ClosePeer(id)
		}
	}()
}

// CloseChannel implements node.Transport.
func (h *Host) CloseChannel(ch uint64, reason string) {
	h.mu.Lock()
	c := h.chans[ch]
	h.mu.Unlock()
	if c != nil {
		c.closeGracefully(reason)
	}
}

// counters are one protocol's messages and bytes (frames without their
// length prefix), in and out.
type counters struct {
	msgsIn, msgsOut, bytesIn, bytesOut atomic.Uint64
}

func (c *counters) in(n int)  { c.msgsIn.Add(1); c.bytesIn.Add(uint64(n)) }
func (c *counters) out(n int) { c.msgsOut.Add(1); c.bytesOut.Add(uint64(n)) }

// Traffic is what one protocol carried since the host started.
type Traffic struct {
	Protocol                           string
	MsgsIn, MsgsOut, BytesIn, BytesOut uint64
}

// Traffic returns the messages and bytes of the mesh and client protocols.
func (h *Host) Traffic() []Traffic {
	out := make([]Traffic, 2)
	for i, p := range []protocol.ID{MeshProtocol, ClientProtocol} {
		c := &h.traffic[i]
		out[i] = Traffic{Protocol: string(p), MsgsIn: c.msgsIn.Load(), MsgsOut: c.msgsOut.Load(), BytesIn: c.bytesIn.Load(), BytesOut: c.bytesOut.Load()}
	}
	return out
}

func (c *channel) protoIndex() int {
	if c.mesh {
		return 0
	}
	return 1
}

// IsManager reports whether peerID has a mesh channel open with this
// manager (a relation, or one being handshaken): the event bus accepts
// what such peers forward.
func (h *Host) IsManager(peerID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	// protect counts the mesh channels per peer and role (register).
	return h.protect[peerID+"/inferior"] > 0 || h.protect[peerID+"/superior"] > 0
}
