package client

import (
	"context"

	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/peeraddr"
)

// Host is node/p2p's libp2p client host as a Dialer: every Conn it opens
// speaks as the host's peer id, the client identity that holds
// reservations.
type Host struct{ *p2p.ClientHost }

// NewHost makes a libp2p client host. Close it when done.
func NewHost(opts p2p.ClientHostOptions) (*Host, error) {
	h, err := p2p.NewClientHost(opts)
	if err != nil {
		return nil, err
	}
	return &Host{h}, nil
}

// Open implements Dialer.
func (h *Host) Open(ctx context.Context, pa peeraddr.PeerAddrs) (Conn, error) {
	s, err := h.ClientHost.Open(ctx, pa)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// DialNew connects to the manager at addr over a client host of its own,
// which the Client's Close closes too.
func DialNew(ctx context.Context, addr string, opts p2p.ClientHostOptions) (*Client, error) {
	h, err := NewHost(opts)
	if err != nil {
		return nil, err
	}
	c, err := Dial(ctx, h, addr)
	if err != nil {
		h.Close()
		return nil, err
	}
	c.owned = h
	return c, nil
}
