package relations

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/peeraddr"
)

// ancestorsByMap is Ancestors as it was written before, with a map.
func ancestorsByMap(s *Set) []Ancestor {
	best := make(map[string]Ancestor)
	add := func(a Ancestor) {
		if a.Peer == "" || a.Peer == s.self {
			return
		}
		if old, ok := best[a.Peer]; !ok || a.Depth < old.Depth {
			best[a.Peer] = a
		}
	}
	for _, r := range s.Superiors() {
		if !r.State.Live() {
			continue
		}
		add(Ancestor{Peer: r.Peer, Name: r.Name, Addrs: r.Addrs, Depth: 1})
		for _, a := range r.Ancestors {
			a.Depth++
			add(a)
		}
	}
	out := slices.Collect(maps.Values(best))
	slices.SortFunc(out, func(a, b Ancestor) int {
		if a.Depth != b.Depth {
			return a.Depth - b.Depth
		}
		return strings.Compare(a.Peer, b.Peer)
	})
	if len(out) > MaxAncestors {
		out = out[:MaxAncestors]
	}
	return out
}

// Ancestors (a slice searched in full) gives what the map gave: each peer
// once at its smallest depth, the first seen among equals (their names
// and addresses may differ), sorted, cut at MaxAncestors.
func TestAncestorsAsByMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	now := time.Unix(0, 0)
	for range 3000 {
		s := NewSet("self", "me")
		peer := func() string { return fmt.Sprintf("p%d", rng.IntN(MaxAncestors+10)) }
		for range 1 + rng.IntN(3) {
			r, err := s.AddSuperior(now, peeraddr.PeerAddrs{Peer: peer(), Addrs: []string{fmt.Sprint(rng.IntN(3))}}, false, Backoff{Initial: time.Second, Max: time.Second})
			if err != nil {
				continue
			}
			if rng.IntN(4) > 0 {
				s.SetState(now, r, Up, "test")
			}
			for range rng.IntN(MaxAncestors + 5) {
				p := peer()
				if rng.IntN(20) == 0 {
					p = "self"
				}
				r.Ancestors = append(r.Ancestors, Ancestor{Peer: p, Name: fmt.Sprint(rng.IntN(3)), Depth: 1 + rng.IntN(6)})
			}
		}
		got, want := s.Ancestors(), ancestorsByMap(s)
		if !slices.EqualFunc(got, want, func(a, b Ancestor) bool {
			return a.Peer == b.Peer && a.Name == b.Name && a.Depth == b.Depth && slices.Equal(a.Addrs, b.Addrs)
		}) {
			t.Fatalf("Ancestors:\n%v\nby the map:\n%v", got, want)
		}
		if got == nil {
			t.Fatal("Ancestors is nil, not empty")
		}
	}
}
