package relations

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gridmgr/gridmgr/peeraddr"
)

// ErrSaved is wrapped by every error of ParseSaved.
var ErrSaved = errors.New("relations: bad saved relations")

// SavedVersion is the format version Marshal writes and ParseSaved reads.
const SavedVersion = 1

// Limits of ParseSaved: a real file is far below them.
const (
	maxSavedSize      = 1 << 20
	maxSavedSuperiors = 1024
	maxSavedAddrs     = 64
)

// Saved is a manager's current superiors as written to its data dir after
// every change, so that a restart keeps what failover and administrators
// did. Configured records the properties file's superiors at the time:
// when the properties file names other superiors at the next start, the
// operator changed it, and the file wins over what was saved.
type Saved struct {
	Version    int             `json:"version"`
	Manager    string          `json:"manager"`
	Configured []SavedPeer     `json:"configured"`
	Superiors  []SavedSuperior `json:"superiors"`
}

// SavedPeer is a peer id with its transport addresses (no /p2p).
type SavedPeer struct {
	Peer  string   `json:"peer"`
	Addrs []string `json:"addrs"`
}

// SavedSuperior is one superior.
type SavedSuperior struct {
	Peer      string   `json:"peer"`
	Name      string   `json:"name,omitempty"`
	Addrs     []string `json:"addrs"`
	Origin    string   `json:"origin"`               // configured, adopted, fallback, admin
	StandsFor string   `json:"stands_for,omitempty"` // the failed superior it replaced
	// Ancestors are the superior's own ancestors as it last reported them
	// (depth 1: its superior): if it does not answer after a restart,
	// they are the candidates to try.
	Ancestors []SavedAncestor `json:"ancestors,omitempty"`
}

// SavedAncestor is one entry of a superior's chain: an Ancestor, so that
// a snapshot shares the relation's chain rather than copying it (about
// 300 bytes per manager of a simulated grid at every save).
type SavedAncestor = Ancestor

// SaveSuperiors snapshots the set's superiors (candidates in trial are
// left out: they are not ours yet) with the properties file's superiors.
// The snapshot shares its lists of addresses and each superior's chain of
// ancestors with the set, and configured's lists with it: none of them is
// changed in place (MergeAddrs makes a new list, a new chain replaces the
// old one), so the snapshot stays what it was when taken, and a copy of
// each cost about 80 and 300 bytes per manager of a simulated grid at
// every save.
func (s *Set) SaveSuperiors(configured []peeraddr.PeerAddrs) *Saved {
	sv := &Saved{Version: SavedVersion, Manager: s.name, Configured: []SavedPeer{}, Superiors: []SavedSuperior{}}
	for _, pa := range configured {
		sv.Configured = append(sv.Configured, SavedPeer{Peer: pa.Peer, Addrs: pa.Addrs})
	}
	for _, r := range s.Superiors() {
		if r.Trial != "" {
			continue
		}
		ss := SavedSuperior{
			Peer: r.Peer, Name: r.Name, Addrs: r.Addrs, Origin: r.Origin.String(), StandsFor: r.StandsFor,
			Ancestors: r.Ancestors,
		}
		sv.Superiors = append(sv.Superiors, ss)
	}
	return sv
}

// SameConfigured reports whether the saved properties superiors are the
// peers of configured (addresses may differ: they are merged on dial).
func (sv *Saved) SameConfigured(configured []peeraddr.PeerAddrs) bool {
	if len(sv.Configured) != len(configured) {
		return false
	}
	var a, b []string
	for _, p := range sv.Configured {
		a = append(a, p.Peer)
	}
	for _, p := range configured {
		b = append(b, p.Peer)
	}
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// Marshal renders the saved relations as indented JSON.
func (sv *Saved) Marshal() []byte {
	b, err := json.MarshalIndent(sv, "", "  ")
	if err != nil {
		panic(err) // plain strings and slices always marshal
	}
	return append(b, '\n')
}

// ParseSaved reads saved relations. Every error wraps ErrSaved and names
// the field at fault, e.g. `superiors[2].origin: unknown origin "x"`.
func ParseSaved(data []byte) (*Saved, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrSaved, fmt.Sprintf(format, args...))
	}
	if len(data) > maxSavedSize {
		return nil, bad("%d bytes; the limit is %d", len(data), maxSavedSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var sv Saved
	if err := dec.Decode(&sv); err != nil {
		return nil, bad("%v", err)
	}
	if dec.More() {
		return nil, bad("data after the JSON object")
	}
	if sv.Version != SavedVersion {
		return nil, bad("version: %d is not supported (this build reads %d)", sv.Version, SavedVersion)
	}
	if len(sv.Configured) > maxSavedSuperiors || len(sv.Superiors) > maxSavedSuperiors {
		return nil, bad("more than %d superiors", maxSavedSuperiors)
	}
	checkPeer := func(where, p string, addrs []string) error {
		id, err := peeraddr.ParsePeerID(p)
		if err != nil || id != p {
			return bad("%s.peer: %q is not a peer id", where, p)
		}
		if len(addrs) > maxSavedAddrs {
			return bad("%s.addrs: %d addresses; the limit is %d", where, len(addrs), maxSavedAddrs)
		}
		for i, a := range addrs {
			if !strings.HasPrefix(a, "/") || strings.Contains(a, "/p2p/") || len(a) > 512 {
				return bad("%s.addrs[%d]: %q is not a transport multiaddr without /p2p", where, i, a)
			}
		}
		return nil
	}
	for i, p := range sv.Configured {
		if err := checkPeer(fmt.Sprintf("configured[%d]", i), p.Peer, p.Addrs); err != nil {
			return nil, err
		}
	}
	seen := map[string]int{}
	for i, s := range sv.Superiors {
		where := fmt.Sprintf("superiors[%d]", i)
		if err := checkPeer(where, s.Peer, s.Addrs); err != nil {
			return nil, err
		}
		if j, dup := seen[s.Peer]; dup {
			return nil, bad("%s.peer: same peer as superiors[%d]", where, j)
		}
		seen[s.Peer] = i
		if _, ok := ParseOrigin(s.Origin); !ok {
			return nil, bad("%s.origin: unknown origin %q (configured, adopted, fallback or admin)", where, s.Origin)
		}
		if s.StandsFor != "" {
			if id, err := peeraddr.ParsePeerID(s.StandsFor); err != nil || id != s.StandsFor {
				return nil, bad("%s.stands_for: %q is not a peer id", where, s.StandsFor)
			}
		}
		if len(s.Name) > 256 {
			return nil, bad("%s.name: %d bytes; the limit is 256", where, len(s.Name))
		}
		if len(s.Ancestors) > MaxAncestors {
			return nil, bad("%s.ancestors: %d entries; the limit is %d", where, len(s.Ancestors), MaxAncestors)
		}
		for j, a := range s.Ancestors {
			aw := fmt.Sprintf("%s.ancestors[%d]", where, j)
			if err := checkPeer(aw, a.Peer, a.Addrs); err != nil {
				return nil, err
			}
			if a.Depth < 1 || a.Depth > MaxAncestors {
				return nil, bad("%s.depth: %d is outside 1..%d", aw, a.Depth, MaxAncestors)
			}
			if len(a.Name) > 256 {
				return nil, bad("%s.name: %d bytes; the limit is 256", aw, len(a.Name))
			}
		}
	}
	return &sv, nil
}
