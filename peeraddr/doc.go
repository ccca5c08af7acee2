// Package peeraddr is how gridmgr names a manager on the network: a peer
// id and the transport addresses it is reached at (PeerAddrs), and the one
// parser of a manager's full multiaddr as a superiors list, a flag or a
// saved relation writes it,
// /ip4|/ip6|/dns|/dns4|/dns6/<host>/tcp/<port>/p2p/<peer id>
// (ParsePeerMaddr), and of a bare peer id (ParsePeerID).
//
// It is a leaf: pure (no I/O, no clock), it imports only go-multiaddr and
// internal/text. The properties file (config), the relation set
// (relations, whose PeerAddrs is this one), the client library, the
// transport and the daemon all parse and pass addresses with it. It is
// not internal: client's Dialer, which outside Go programs implement,
// takes a PeerAddrs.
//
// What the caller must do: nothing but check errors; every parse error
// wraps ErrAddr and says what is wrong with the address. PeerAddrs.Addrs
// never hold the /p2p part; String puts it back.
package peeraddr
