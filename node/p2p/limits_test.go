package p2p

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/network"
)

// The limits in force let a superior hold thousands of inferiors: libp2p's
// defaults here allow ~252 inbound connections in all and 75 inbound
// streams per protocol (LIBP2P-NOTES.md).
func TestLimitsRaised(t *testing.T) {
	l := limiter()
	sys := l.GetSystemLimits()
	if got := sys.GetConnLimit(network.DirInbound); got < maxInboundConns {
		t.Errorf("system inbound connections %d < %d", got, maxInboundConns)
	}
	if got := sys.GetConnTotalLimit(); got < maxConns {
		t.Errorf("system connections %d < %d", got, maxConns)
	}
	if got := l.GetTransientLimits().GetConnLimit(network.DirInbound); got < maxInboundConns/8 {
		t.Errorf("transient inbound connections %d", got)
	}
	if got := l.GetProtocolLimits(MeshProtocol).GetStreamLimit(network.DirInbound); got < maxMeshStreamsIn {
		t.Errorf("mesh inbound streams %d < %d", got, maxMeshStreamsIn)
	}
	if got := l.GetProtocolPeerLimits(MeshProtocol).GetStreamLimit(network.DirInbound); got != perPeerMesh {
		t.Errorf("mesh inbound streams per peer %d, want %d", got, perPeerMesh)
	}
	if got := l.GetProtocolLimits(ClientProtocol).GetStreamLimit(network.DirInbound); got < maxClientStreams {
		t.Errorf("client inbound streams %d < %d", got, maxClientStreams)
	}
	// One client key, many processes: each is a connection of one peer.
	peer := l.GetPeerLimits("")
	if got := peer.GetConnLimit(network.DirInbound); got < perPeerConns {
		t.Errorf("inbound connections per peer %d < %d", got, perPeerConns)
	}
	if got := peer.GetFDLimit(); got < perPeerConns {
		t.Errorf("file descriptors per peer %d < %d", got, perPeerConns)
	}
	if got := peer.GetStreamLimit(network.DirInbound); got < perPeerStreams {
		t.Errorf("inbound streams per peer %d < %d", got, perPeerStreams)
	}
	if got := peer.GetMemoryLimit(); got < perPeerStreams*yamuxWindow {
		t.Errorf("memory per peer %d < %d streams' yamux windows", got, perPeerStreams)
	}
	if got := l.GetProtocolPeerLimits(ClientProtocol).GetStreamLimit(network.DirInbound); got != perPeerClient {
		t.Errorf("client inbound streams per peer %d, want %d", got, perPeerClient)
	}
	if _, err := resourceManager(); err != nil {
		t.Fatal(err)
	}
}
