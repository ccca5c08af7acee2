package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/peeraddr"
)

// The sentinels a client program may meet when it dials, so that it need
// not import the transport to tell them apart.
var (
	// ErrAddr: not a manager address (a full multiaddr ending in
	// /p2p/<peer id>).
	ErrAddr = peeraddr.ErrAddr
	// ErrKey: the client identity or the PSK file is not a usable key file.
	ErrKey = p2p.ErrKey
	// ErrLimit: the manager refused this client by one of its resource
	// limits (client streams from one peer id, or in all, were full).
	ErrLimit = p2p.ErrLimit

	// ErrNoManager: Options name no manager (neither Addr nor DataDir).
	ErrNoManager = errors.New("client: no manager given")
	// ErrTwoManagers: Options name a manager twice (both Addr and DataDir).
	ErrTwoManagers = errors.New("client: both an address and a data dir given")
)

// AddrFile is the file in a manager's data dir that lists the running
// manager's full multiaddrs, one a line, loopback first: the daemon writes
// it when it starts and removes it when it stops.
const AddrFile = "addr"

// ReadAddrFile returns the first address in DATA_DIR/addr: how a client on
// the manager's host finds it.
func ReadAddrFile(dataDir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dataDir, AddrFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("no manager running with data dir %s (no %s file)", dataDir, AddrFile)
		}
		return "", err
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(data)), "\n")
	if first == "" {
		return "", fmt.Errorf("%s is empty", filepath.Join(dataDir, AddrFile))
	}
	return first, nil
}

// DefaultKeyPath is where a client keeps its identity, the peer id that
// holds its reservations (so that a later run may commit, renew or release
// them): $GRIDMGR_CLIENT_KEY, else $XDG_CONFIG_HOME/gridmgr/client.key,
// else ~/.config/gridmgr/client.key; "" if there is no home directory.
func DefaultKeyPath() string {
	if p := os.Getenv("GRIDMGR_CLIENT_KEY"); p != "" {
		return p
	}
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "gridmgr", "client.key")
}

// Options say how a client program reaches a manager: which one, with
// which identity, on which grid.
type Options struct {
	// Addr is the manager's full multiaddr, ending in /p2p/<peer id>.
	Addr string
	// DataDir, instead of Addr, is the data dir of a manager running on
	// this host: its AddrFile says where it listens.
	DataDir string
	// PSKFile is the grid's pre-shared key file, if the grid has one.
	PSKFile string
	// KeyFile holds the client identity, created if missing; "" is
	// DefaultKeyPath().
	KeyFile string
	// OneOff uses a fresh identity instead of KeyFile: for a program that
	// holds nothing (a watcher), so that several may run at once from one
	// account (two hosts with one peer id would clash).
	OneOff bool
}

// OptionError is an Options field that could not be used: "DataDir" (no
// address file) or "PSKFile" (no usable key).
type OptionError struct {
	Field string
	Err   error
}

func (e *OptionError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// Address is the manager's multiaddr: Addr, or the first line of
// DataDir's AddrFile. Errors: ErrNoManager, ErrTwoManagers, or an
// *OptionError for DataDir.
func (o Options) Address() (string, error) {
	switch {
	case o.Addr != "" && o.DataDir != "":
		return "", ErrTwoManagers
	case o.Addr == "" && o.DataDir == "":
		return "", ErrNoManager
	case o.Addr == "":
		a, err := ReadAddrFile(o.DataDir)
		if err != nil {
			return "", &OptionError{Field: "DataDir", Err: err}
		}
		return a, nil
	}
	return o.Addr, nil
}

// HostOptions are the libp2p client host options of o: the identity and
// the PSK. An identity that cannot be kept (KeyFile unwritable, say) is
// not an error: the host gets a one-off identity and keyErr says why, for
// the program to warn that what it reserves is held only by this run. A
// PSK that cannot be read is an *OptionError for PSKFile.
func (o Options) HostOptions() (opts p2p.ClientHostOptions, keyErr, err error) {
	if !o.OneOff {
		path := o.KeyFile
		if path == "" {
			path = DefaultKeyPath()
		}
		if path != "" {
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err == nil {
				if key, _, err := p2p.LoadOrCreateIdentity(path); err == nil {
					opts.Key = key
				} else {
					keyErr = err
				}
			} else {
				keyErr = err
			}
		}
	}
	if o.PSKFile != "" {
		psk, err := p2p.ReadPSK(o.PSKFile)
		if err != nil {
			return opts, keyErr, &OptionError{Field: "PSKFile", Err: err}
		}
		opts.PSK = psk
	}
	return opts, keyErr, nil
}

// DialError: the manager at Addr could not be reached. Err wraps ErrAddr
// for a malformed address, ErrLimit when the manager refused the client by
// one of its resource limits, else it is the dialer's (a context
// deadline, a refused connection...).
type DialError struct {
	Addr string
	Err  error
}

func (e *DialError) Error() string { return "dial " + e.Addr + ": " + e.Err.Error() }
func (e *DialError) Unwrap() error { return e.Err }

// Connect dials the manager of o over a client host of its own, which the
// Client's Close closes too. Errors: those of Address and HostOptions, or
// a *DialError.
func Connect(ctx context.Context, o Options) (*Client, error) {
	addr, err := o.Address()
	if err != nil {
		return nil, err
	}
	opts, keyErr, err := o.HostOptions()
	if err != nil {
		return nil, err
	}
	c, err := DialNew(ctx, addr, opts)
	if err != nil {
		return nil, &DialError{Addr: addr, Err: err}
	}
	c.keyErr = keyErr
	return c, nil
}

// IdentityErr says why Connect could not keep the client identity (and
// used a one-off one instead); nil if it did, or for a Client not made by
// Connect.
func (c *Client) IdentityErr() error { return c.keyErr }

// ErrNoKeyPath: no place to keep the client identity (no KeyFile, no
// $GRIDMGR_CLIENT_KEY and no home directory).
var ErrNoKeyPath = errors.New("client: no place for the client key")

// SelfID is the peer id of the client identity in keyFile ("" is
// DefaultKeyPath()), created (with its directory) if missing: the id a
// manager's owner lists among its admins. Errors: ErrNoKeyPath, the
// directory's, or an *OptionError for KeyFile (not a usable key).
func SelfID(keyFile string) (string, error) {
	path := keyFile
	if path == "" {
		path = DefaultKeyPath()
	}
	if path == "" {
		return "", ErrNoKeyPath
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	key, _, err := p2p.LoadOrCreateIdentity(path)
	if err != nil {
		return "", &OptionError{Field: "KeyFile", Err: err}
	}
	return p2p.PeerIDOf(key), nil
}
