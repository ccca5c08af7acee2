package p2p

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/node/p2p/transfer"
)

// What this manager has open to other managers as their client: the job
// runtime's sessions and uploads, the web UI's questions. Each session or
// upload holds the peer; the last one to end closes the connection unless
// the peer is a relation (IsManager) or is itself using the connection as
// a client of this manager, so that the event bus does not go on
// gossiping over a connection nobody needs. Client streams to one peer
// are also counted against maxClientStreamsOutPerPeer: one more waits for
// a place rather than run into the resource manager's refusal.

// clientUse is what this manager has open to one peer as its client.
type clientUse struct {
	n     int           // sessions and uploads open
	slots chan struct{} // a token per open client stream
}

// hold marks one more use of the connection to id and returns its use.
func (h *Host) hold(id peer.ID) *clientUse {
	h.umu.Lock()
	defer h.umu.Unlock()
	if h.uses == nil {
		h.uses = make(map[peer.ID]*clientUse)
	}
	u := h.uses[id]
	if u == nil {
		u = &clientUse{slots: make(chan struct{}, maxClientStreamsOutPerPeer)}
		h.uses[id] = u
	}
	u.n++
	return u
}

// release ends one use of the connection to id; the last closes it, on
// every libp2p host of this Host, unless it is still needed. The lock is
// held while closing, so a use that begins meanwhile dials afresh.
func (h *Host) release(id peer.ID) {
	h.umu.Lock()
	defer h.umu.Unlock()
	u := h.uses[id]
	if u == nil {
		return
	}
	if u.n--; u.n > 0 {
		return
	}
	delete(h.uses, id)
	if h.IsManager(id.String()) {
		return
	}
	for _, lh := range h.allHosts() {
		if peerUses(lh.Network().ConnsToPeer(id)) {
			continue
		}
		_ = lh.Network().ClosePeer(id)
	}
}

// peerUses reports whether the peer has a gridmgr stream of its own open
// on one of conns: it asks this manager as a client, or uploads to it.
func peerUses(conns []network.Conn) bool {
	for _, c := range conns {
		for _, s := range c.GetStreams() {
			if s.Stat().Direction == network.DirInbound && strings.HasPrefix(string(s.Protocol()), "/gridmgr/") {
				return true
			}
		}
	}
	return false
}

// HoldPeer marks a use of the connection to the manager peerID by this
// manager as its client (a bundle upload, say), so that no session that
// closes meanwhile drops the connection; call the function it returns
// when done. OpenClient's streams hold the peer themselves.
func (h *Host) HoldPeer(peerID string) (release func()) {
	id, err := peer.Decode(peerID)
	if err != nil {
		return func() {}
	}
	h.hold(id)
	var once sync.Once
	return func() { once.Do(func() { h.release(id) }) }
}

// SendBundle uploads file to the manager peerID for reservation (package
// transfer), from the libp2p host the peer is on (For), holding the peer
// while it does.
func (h *Host) SendBundle(ctx context.Context, peerID, file, reservation string, o transfer.SendOptions) (transfer.Result, error) {
	id, err := peer.Decode(peerID)
	if err != nil {
		return transfer.Result{}, fmt.Errorf("bad peer id %q: %w", peerID, err)
	}
	defer h.HoldPeer(peerID)()
	return transfer.SendWith(ctx, h.hostFor(id), id, file, reservation, o)
}

// slot waits for a place among the client streams this manager may have
// open to one peer, until ctx ends.
func (u *clientUse) slot(ctx context.Context, peerID string) error {
	select {
	case u.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("this manager has %d client sessions open with manager %s already, its most, and none ended in time: %w",
			maxClientStreamsOutPerPeer, text.ShortPeer(peerID), ctx.Err())
	}
}
