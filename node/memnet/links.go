package memnet

import (
	"slices"

	"github.com/gridmgr/gridmgr/node"
)

// links are a manager's mesh channels: for each peer the channel open
// now (what a map peer → channel would say), and for each channel the
// peer it goes to, kept for a replaced channel until it is closed or the
// manager stops (what a map channel → peer would say). A slice, not two
// maps: a simulated manager has a few channels, and at a million managers
// two small maps each cost more than everything else of a link.
type links []link

type link struct {
	nd  *Node  // the peer: a send finds it here, not in the Net's map of a million
	tag uint64 // node.PeerTag(nd.Peer), compared before the id
	ch  uint64
	cur bool // the channel open now to the peer
}

// chanTo is the channel open now to peer, 0 if none.
func (ls links) chanTo(peer string) uint64 {
	tag := node.PeerTag(peer)
	for i := range ls {
		if l := &ls[i]; l.cur && l.tag == tag && l.nd.Peer == peer {
			return l.ch
		}
	}
	return 0
}

// peerOf is the peer channel ch goes to.
func (ls links) peerOf(ch uint64) (*Node, bool) {
	for _, l := range ls {
		if l.ch == ch {
			return l.nd, true
		}
	}
	return nil, false
}

// open makes ch the channel open now to peer; one it replaces is kept
// for peerOf.
func (ls *links) open(peer *Node, ch uint64) {
	ls.drop(peer.Peer)
	*ls = append(*ls, link{nd: peer, tag: node.PeerTag(peer.Peer), ch: ch, cur: true})
}

// drop: no channel is open now to peer (its last one stays for peerOf).
func (ls links) drop(peer string) {
	tag := node.PeerTag(peer)
	for i := range ls {
		if ls[i].cur && ls[i].tag == tag && ls[i].nd.Peer == peer {
			ls[i].cur = false
		}
	}
}

// forget forgets channel ch.
func (ls *links) forget(ch uint64) {
	*ls = slices.DeleteFunc(*ls, func(l link) bool { return l.ch == ch })
}

// peers are the peers with a channel open now, sorted.
func (ls links) peers() []string {
	var ps []string
	for _, l := range ls {
		if l.cur {
			ps = append(ps, l.nd.Peer)
		}
	}
	slices.Sort(ps)
	return ps
}
