package p2p_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/wire"
)

func newPSK(t *testing.T) pnet.PSK {
	t.Helper()
	k, err := p2p.GeneratePSK()
	if err != nil {
		t.Fatal(err)
	}
	psk, err := pnet.DecodeV1PSK(bytes.NewReader(k))
	if err != nil {
		t.Fatal(err)
	}
	return psk
}

// A private network serves its peers into the same Host: one channel id
// space and sink, the same peer id; only peers with its key get in; Send,
// IsManager and For work for its peers; removing it loses them.
func TestPrivateNetworkServesIntoTheHost(t *testing.T) {
	a, as := newHost(t, p2p.Options{})
	psk := newPSK(t)
	n, err := a.AddNetwork("glide", psk, []string{"/ip4/127.0.0.1/tcp/0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.AddNetwork("glide", psk, []string{"/ip4/127.0.0.1/tcp/0"}); err == nil {
		t.Fatal("a second network of one name was opened")
	}
	if n.LibP2P().ID().String() != a.PeerID() {
		t.Fatalf("private network's peer id %s, want the host's %s", n.LibP2P().ID(), a.PeerID())
	}
	if len(a.Networks()) != 1 || len(n.FullAddrs()) == 0 {
		t.Fatalf("networks %d, addrs %q", len(a.Networks()), n.FullAddrs())
	}
	for _, full := range n.FullAddrs() {
		if slices.Contains(a.FullAddrs(), full) {
			t.Fatalf("private address %s is also the host's own", full)
		}
	}

	// b, with the key, dials a over the private network as a manager.
	b, _ := newHost(t, p2p.Options{PSK: psk})
	b.Dial(a.PeerID(), n.Addrs())
	in := as.next(t, node.InputConnected, 0, 10*time.Second)
	if in.Peer != b.PeerID() {
		t.Fatalf("connected %s, want %s", in.Peer, b.PeerID())
	}
	if !a.IsManager(b.PeerID()) {
		t.Fatal("a peer with a mesh channel over the private network is not a manager")
	}
	if got := a.For(b.PeerID()); got != n.LibP2P() {
		t.Fatal("For does not name the private network for a peer connected there")
	}
	if got := a.For(p2p.PeerIDOf(mustKey(t))); got != a.LibP2P() {
		t.Fatal("For does not name the host's own for an unknown peer")
	}

	// A client with no key, or with another key, cannot reach a there.
	pa, err := peeraddr.ParsePeerMaddr(n.FullAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []pnet.PSK{nil, newPSK(t)} {
		ch, err := p2p.NewClientHost(p2p.ClientHostOptions{PSK: key})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		s, err := ch.Open(ctx, pa)
		cancel()
		if err == nil {
			s.Close()
			t.Errorf("a client with key %v opened a stream on the private network", key != nil)
		}
		ch.Close()
	}
	// One with the key can, and a's client stream reaches it through For.
	ch, err := p2p.NewClientHost(p2p.ClientHostOptions{PSK: psk})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := ch.Open(ctx, pa)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&wire.Envelope{Id: 7, Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	ci := as.next(t, node.InputClient, 0, 10*time.Second)
	if ci.Chan == in.Chan {
		t.Fatal("a client channel on the private network got the mesh channel's id")
	}
	a.Send(ci.Chan, &wire.Envelope{ReplyTo: 7, Body: &wire.Envelope_StatusReply{StatusReply: &wire.StatusReply{Name: "a"}}})
	rep, err := s.Recv()
	if err != nil || rep.GetStatusReply().GetName() != "a" {
		t.Fatalf("reply %v, %v", rep, err)
	}
	s.Close()

	// Removing the network loses its relations.
	if !a.RemoveNetwork("glide") || a.RemoveNetwork("glide") {
		t.Fatal("RemoveNetwork does not report what it removed")
	}
	lost := as.next(t, node.InputDisconnected, in.Chan, 10*time.Second)
	if lost.Peer != b.PeerID() {
		t.Fatalf("lost %s, want %s", lost.Peer, b.PeerID())
	}
	waitFor(t, "b to stop being a manager", func() bool { return !a.IsManager(b.PeerID()) })
}

func mustKey(t *testing.T) crypto.PrivKey {
	t.Helper()
	k, err := p2p.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
