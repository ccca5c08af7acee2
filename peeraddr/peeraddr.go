package peeraddr

import (
	"errors"
	"fmt"
	"slices"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/gridmgr/gridmgr/internal/text"
)

// PeerAddrs names one peer and the addresses (without /p2p) it is reached at.
type PeerAddrs struct {
	Peer  string   // peer id, base58 text form
	Addrs []string // transport multiaddrs without the /p2p part
}

// ErrAddr is wrapped by ParsePeerMaddr's errors.
var ErrAddr = errors.New("peeraddr: bad manager address")

// ParsePeerMaddr reads a manager's full address, as a superiors list
// holds it: /ip4|/ip6|/dns|/dns4|/dns6/<host>/tcp/<port>/p2p/<peer id>.
func ParsePeerMaddr(s string) (PeerAddrs, error) {
	peer, addr, msg := splitPeerMaddr(s, "address")
	if msg != "" {
		return PeerAddrs{}, fmt.Errorf("%w: %q: %s", ErrAddr, s, msg)
	}
	return PeerAddrs{Peer: peer, Addrs: []string{addr}}, nil
}

// splitPeerMaddr splits a manager's full address
// (/ip4|/ip6|/dns|/dns4|/dns6/<host>/tcp/<port>/p2p/<peer id>) into its peer
// id and transport part, or says what is wrong (msg != ""), calling the
// address noun.
func splitPeerMaddr(s, noun string) (peer, addr, msg string) {
	m, err := ma.NewMultiaddr(s)
	if err != nil {
		return "", "", fmt.Sprintf("invalid multiaddr: %v", err)
	}
	last := len(m) - 1
	switch k := slices.IndexFunc(m, func(c ma.Component) bool { return c.Code() == ma.P_P2P }); {
	case k < 0:
		return "", "", noun + " has no /p2p/<peer id> part"
	case k != last:
		return "", "", fmt.Sprintf("%s %s must end with its /p2p/<peer id> part", noun, m)
	}
	if last != 2 || !slices.Contains([]int{ma.P_IP4, ma.P_IP6, ma.P_DNS, ma.P_DNS4, ma.P_DNS6}, m[0].Code()) || m[1].Code() != ma.P_TCP {
		return "", "", fmt.Sprintf("%s %s is not /ip4|/ip6|/dns|/dns4|/dns6/<host>/tcp/<port>/p2p/<peer id>", noun, m)
	}
	return m[last].Value(), m[:last].String(), ""
}

// ParsePeerID checks a peer id and returns its canonical (base58) form.
func ParsePeerID(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty")
	}
	m, err := ma.NewMultiaddr("/p2p/" + s)
	if err != nil {
		return "", err
	}
	if len(m) != 1 || m[0].Code() != ma.P_P2P {
		return "", errors.New("not a single peer id")
	}
	return m[0].Value(), nil
}

// String is the peer's first full address (ADDR/p2p/PEER), or its short
// peer id when it has no address.
func (pa PeerAddrs) String() string {
	if len(pa.Addrs) == 0 {
		return text.ShortPeer(pa.Peer)
	}
	return pa.Addrs[0] + "/p2p/" + pa.Peer
}
