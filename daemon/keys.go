package daemon

import (
	"github.com/gridmgr/gridmgr/node/p2p"
)

// The key files of a grid, for the commands that make and read them
// (gridmgr id, keygen, web-token) without the transport.

// Protocols are the libp2p protocol ids a manager speaks: between
// managers, and with clients.
const (
	MeshProtocol   = string(p2p.MeshProtocol)
	ClientProtocol = string(p2p.ClientProtocol)
)

// ManagerID is the peer id of the manager identity at path (IdentityPath),
// created (0600) if missing, so that the id can be handed out before the
// manager first runs; created says it was.
func ManagerID(path string) (id string, created bool, err error) {
	key, created, err := p2p.LoadOrCreateIdentity(path)
	if err != nil {
		return "", false, err
	}
	return p2p.PeerIDOf(key), created, nil
}

// DialableAddrs are the listen multiaddrs as others can dial them:
// unspecified IPs (0.0.0.0, ::) become this machine's interface
// addresses, non-loopback first.
func DialableAddrs(listen []string) []string { return p2p.DialableAddrs(listen) }

// NewIdentityFile writes a new Ed25519 identity key to path (0600) and
// returns its peer id. It never overwrites a file (an error wrapping
// fs.ErrExist).
func NewIdentityFile(path string) (string, error) {
	key, err := p2p.GenerateIdentity()
	if err != nil {
		return "", err
	}
	if err := p2p.WriteIdentity(path, key); err != nil {
		return "", err
	}
	return p2p.PeerIDOf(key), nil
}

// NewPSKFile writes a new libp2p pre-shared key for a private grid to
// path (0600). It never overwrites a file (an error wrapping fs.ErrExist).
func NewPSKFile(path string) error { return p2p.WritePSK(path) }

// WebTokenFile is the web UI's admin token of the manager whose identity
// key is at path (WebToken). The errors are ReadIdentity's, unwrapped.
func WebTokenFile(path string) (string, error) {
	key, err := p2p.ReadIdentity(path)
	if err != nil {
		return "", err
	}
	return WebToken(key)
}
