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
	peer string
	tag  uint64 // node.PeerTag(peer), compared before peer
	ch   uint64
	cur  bool // the channel open now to peer
}

// chanTo is the channel open now to peer, 0 if none.
func (ls links) chanTo(peer string) uint64 {
	tag := node.PeerTag(peer)
	for i := range ls {
		if l := &ls[i]; l.cur && l.tag == tag && l.peer == peer {
			return l.ch
		}
	}
	return 0
}

// peerOf is the peer channel ch goes to.
func (ls links) peerOf(ch uint64) (string, bool) {
	for _, l := range ls {
		if l.ch == ch {
			return l.peer, true
		}
	}
	return "", false
}

// open makes ch the channel open now to peer; one it replaces is kept
// for peerOf.
func (ls *links) open(peer string, ch uint64) {
	ls.drop(peer)
	*ls = append(*ls, link{peer: peer, tag: node.PeerTag(peer), ch: ch, cur: true})
}

// drop: no channel is open now to peer (its last one stays for peerOf).
func (ls links) drop(peer string) {
	tag := node.PeerTag(peer)
	for i := range ls {
		if ls[i].cur && ls[i].tag == tag && ls[i].peer == peer {
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
			ps = append(ps, l.peer)
		}
	}
	slices.Sort(ps)
	return ps
}
