package p2p

import (
	"errors"
	"fmt"
	"slices"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
)

// ErrNetwork is wrapped by errors about private networks.
var ErrNetwork = errors.New("p2p: private network")

// Network is a private network a Host serves besides its own: a second
// libp2p host with the same identity (so the same peer id), its own
// pre-shared key and its own listen addresses. Streams that arrive on it
// are served into the Host like the Host's own: one channel id space, one
// sink, one set of relations, so a manager that joins over it is an
// ordinary relation of the Core.
type Network struct {
	name string
	h    host.Host
}

// Name is the network's name, as AddNetwork was given it.
func (n *Network) Name() string { return n.name }

// LibP2P is the network's libp2p host.
func (n *Network) LibP2P() host.Host { return n.h }

// Addrs are the network's transport multiaddrs (without /p2p), as Host.Addrs.
func (n *Network) Addrs() []string { return dialable(n.h.Network().ListenAddresses()) }

// FullAddrs are Addrs with /p2p/<peer id> appended.
func (n *Network) FullAddrs() []string {
	var out []string
	for _, a := range n.Addrs() {
		out = append(out, a+"/p2p/"+n.h.ID().String())
	}
	return out
}

// AddNetwork starts a private network named name: a libp2p host with this
// Host's identity key and options, the pre-shared key psk (required),
// listening on listen, serving the gridmgr protocols into this Host. Its
// metrics are not registered (libp2p's collectors are the main host's).
// A name already in use is an error; so is a Host made by Wrap (it has no
// identity key).
func (h *Host) AddNetwork(name string, psk pnet.PSK, listen []string) (*Network, error) {
	if h.opts.Key == nil {
		return nil, fmt.Errorf("%w %q: the host has no identity key", ErrNetwork, name)
	}
	if psk == nil {
		return nil, fmt.Errorf("%w %q: no pre-shared key", ErrNetwork, name)
	}
	if len(listen) == 0 {
		return nil, fmt.Errorf("%w %q: no listen address", ErrNetwork, name)
	}
	h.mu.Lock()
	used := h.closed || slices.ContainsFunc(h.nets, func(n *Network) bool { return n.name == name })
	closed := h.closed
	h.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w %q: the host is closed", ErrNetwork, name)
	}
	if used {
		return nil, fmt.Errorf("%w %q: already open", ErrNetwork, name)
	}
	lh, err := newLibp2p(h.opts, psk, listen, nil)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrNetwork, name, err)
	}
	n := &Network{name: name, h: lh}
	h.mu.Lock()
	if h.closed || slices.ContainsFunc(h.nets, func(n *Network) bool { return n.name == name }) {
		h.mu.Unlock()
		_ = lh.Close()
		return nil, fmt.Errorf("%w %q: already open, or the host closed", ErrNetwork, name)
	}
	h.nets = append(h.nets, n)
	h.mu.Unlock()
	h.handle(lh)
	return n, nil
}

// RemoveNetwork closes the private network name: its libp2p host closes,
// so its streams are reset and the driver hears its relations lost (as
// node.InputDisconnected). It reports whether there was such a network.
func (h *Host) RemoveNetwork(name string) bool {
	h.mu.Lock()
	i := slices.IndexFunc(h.nets, func(n *Network) bool { return n.name == name })
	var n *Network
	if i >= 0 {
		n = h.nets[i]
		h.nets = slices.Delete(h.nets, i, i+1)
	}
	h.mu.Unlock()
	if n == nil {
		return false
	}
	n.h.RemoveStreamHandler(MeshProtocol)
	n.h.RemoveStreamHandler(ClientProtocol)
	_ = n.h.Close()
	return true
}

// Networks are the private networks open now.
func (h *Host) Networks() []*Network {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.nets)
}

// For is the libp2p host to reach peerID from (a client stream, a bundle):
// a private network's when the peer is connected there, else this Host's
// own when it is connected here, else a private network's whose peerstore
// alone knows addresses of the peer (it was connected there before), else
// this Host's own. A bad peer id gets this Host's own.
func (h *Host) For(peerID string) host.Host {
	id, err := peer.Decode(peerID)
	if err != nil {
		return h.h
	}
	return h.hostFor(id)
}

func (h *Host) hostFor(id peer.ID) host.Host {
	h.mu.Lock()
	nets := slices.Clone(h.nets)
	h.mu.Unlock()
	if len(nets) == 0 {
		return h.h
	}
	for _, n := range nets {
		if n.h.Network().Connectedness(id) == network.Connected {
			return n.h
		}
	}
	if h.h.Network().Connectedness(id) == network.Connected || len(h.h.Peerstore().Addrs(id)) > 0 {
		return h.h
	}
	for _, n := range nets {
		if len(n.h.Peerstore().Addrs(id)) > 0 {
			return n.h
		}
	}
	return h.h
}

// allHosts are this Host's own libp2p host and its private networks'.
func (h *Host) allHosts() []host.Host {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]host.Host{h.h}, netHosts(h.nets)...)
}

func netHosts(nets []*Network) []host.Host {
	out := make([]host.Host, 0, len(nets))
	for _, n := range nets {
		out = append(out, n.h)
	}
	return out
}
