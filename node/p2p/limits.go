package p2p

import (
	"net/netip"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/x/rate"
)

// Limits raised over libp2p's defaults, which scale with this machine's
// memory and refuse a superior with more than a few dozen inferiors (see
// LIBP2P-NOTES.md). File descriptors stay bounded by the process limit:
// a superior of thousands needs LimitNOFILE raised (configs/gridmgr.service).
const (
	maxInboundConns  = 8192
	maxConns         = 16384
	maxMeshStreamsIn = 8192
	maxClientStreams = 1024
	perPeerMesh      = 8 // streams per peer on the mesh protocol
	// One client key is one peer id however many processes use it: a
	// script or job wrapper that runs 200 CLI commands at once opens 200
	// connections from one peer, where libp2p allows a peer 8. A peer may
	// hold perPeerConns connections, each with its client stream and
	// identify's streams; the per-subnet count (conns4PerSubnet) and the
	// system limits still bound them all.
	perPeerConns   = 512
	perPeerStreams = 4 * perPeerConns
	perPeerClient  = perPeerConns // concurrent client streams from one peer
	// yamuxWindow is what yamux reserves from its peer's memory for each
	// stream it opens (its initial receive window).
	yamuxWindow       = 256 << 10
	conns4PerSubnet   = 1024
	connRatePerSubnet = 50 // new connections per second per /32 (/56), after a burst
	connBurstSubnet   = 1024
	maxWebStreamsOut  = 64 // client streams a manager opens to others (web UI, jobs)
	// Client streams a manager opens to one other: the job runtime's
	// session, the web UI's questions. One more waits for a place
	// (clientuse.go).
	maxClientStreamsOutPerPeer = 8
)

// resourceManager builds the resource manager: limiter's limits, plus
// per-subnet connection counts and rates raised for managers behind one NAT.
func resourceManager() (network.ResourceManager, error) {
	loopback := []rate.PrefixLimit{
		{Prefix: netip.MustParsePrefix("127.0.0.0/8")},
		{Prefix: netip.MustParsePrefix("::1/128")},
	}
	subnet := rate.Limit{RPS: connRatePerSubnet, Burst: connBurstSubnet}
	return rcmgr.NewResourceManager(
		limiter(),
		// Many managers behind one NAT share an address.
		rcmgr.WithLimitPerSubnet(
			[]rcmgr.ConnLimitPerSubnet{{PrefixLength: 32, ConnCount: conns4PerSubnet}},
			[]rcmgr.ConnLimitPerSubnet{{PrefixLength: 56, ConnCount: conns4PerSubnet}}),
		rcmgr.WithConnRateLimiters(&rate.Limiter{
			NetworkPrefixLimits: loopback,
			SubnetRateLimiter: rate.SubnetLimiter{
				IPv4SubnetLimits: []rate.SubnetLimit{{PrefixLength: 32, Limit: subnet}},
				IPv6SubnetLimits: []rate.SubnetLimit{{PrefixLength: 56, Limit: subnet}},
			},
		}),
	)
}

// limiter gives libp2p's own services their default limits, raises the
// system and transient limits, and sets explicit limits for the gridmgr
// protocols, scaled to this machine.
func limiter() rcmgr.Limiter {
	limits := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&limits)
	raise := func(l *rcmgr.BaseLimit, connsIn, conns, streamsIn, streams int) {
		l.ConnsInbound = max(l.ConnsInbound, connsIn)
		l.ConnsOutbound = max(l.ConnsOutbound, conns/2)
		l.Conns = max(l.Conns, conns)
		l.StreamsInbound = max(l.StreamsInbound, streamsIn)
		l.StreamsOutbound = max(l.StreamsOutbound, streams/2)
		l.Streams = max(l.Streams, streams)
	}
	raise(&limits.SystemBaseLimit, maxInboundConns, maxConns, 4*maxInboundConns, 8*maxInboundConns)
	raise(&limits.TransientBaseLimit, maxInboundConns/8, maxConns/8, maxInboundConns/4, maxInboundConns/2)
	// Every peer: libp2p sets a peer's limits when its first connection is
	// authenticated, before it opens any stream, so a CLI process cannot
	// be told from a manager there. What managers do with their
	// connection keeps its own limits: the mesh protocol's per peer below.
	p := &limits.PeerBaseLimit
	p.ConnsInbound = max(p.ConnsInbound, perPeerConns)
	p.Conns = max(p.Conns, perPeerConns+p.ConnsOutbound)
	p.FD = max(p.FD, perPeerConns)
	p.StreamsInbound = max(p.StreamsInbound, perPeerStreams)
	p.Streams = max(p.Streams, perPeerStreams+p.StreamsOutbound)
	p.Memory = max(p.Memory, perPeerStreams*yamuxWindow)
	limits.AddProtocolLimit(MeshProtocol,
		rcmgr.BaseLimit{StreamsInbound: maxMeshStreamsIn, StreamsOutbound: maxMeshStreamsIn, Streams: 2 * maxMeshStreamsIn, Memory: 256 << 20},
		rcmgr.BaseLimitIncrease{Memory: 64 << 20})
	limits.AddProtocolPeerLimit(MeshProtocol,
		rcmgr.BaseLimit{StreamsInbound: perPeerMesh, StreamsOutbound: perPeerMesh, Streams: 2 * perPeerMesh, Memory: 16 << 20},
		rcmgr.BaseLimitIncrease{})
	// Outbound client streams: the web UI asks other managers as a client
	// (details of a manager, the landscape), a few at a time, and the job
	// runtime keeps a session with each manager its jobs run on.
	limits.AddProtocolLimit(ClientProtocol,
		rcmgr.BaseLimit{StreamsInbound: maxClientStreams, StreamsOutbound: maxWebStreamsOut, Streams: maxClientStreams + maxWebStreamsOut, Memory: 128 << 20},
		rcmgr.BaseLimitIncrease{Memory: 16 << 20})
	limits.AddProtocolPeerLimit(ClientProtocol,
		rcmgr.BaseLimit{StreamsInbound: perPeerClient, StreamsOutbound: maxClientStreamsOutPerPeer, Streams: perPeerClient + maxClientStreamsOutPerPeer, Memory: 16 << 20},
		rcmgr.BaseLimitIncrease{})
	return rcmgr.NewFixedLimiter(limits.AutoScale())
}
