package relations

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/peeraddr"
)

// TestSetAgainstMap drives a Set with random additions, role changes and
// removals, and checks each step against a plain map of peer to role:
// Get finds every relation and nothing else, All is sorted by role then
// peer, Superiors and Inferiors split it, and a slice handed out earlier
// keeps what it held when the set changes.
func TestSetAgainstMap(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		peers := 12 + 12*int(seed%3) // sets small enough to scan and large enough to search
		s := NewSet("self", "gm0")
		want := map[string]Role{}
		now := time.Unix(100, 0)
		b := Backoff{Initial: time.Second, Max: time.Second}
		for step := range 400 {
			p := fmt.Sprintf("p%02d", rng.IntN(peers))
			held, heldCopy := s.All(), slices.Clone(s.All())
			heldSup, heldSupCopy := s.Superiors(), slices.Clone(s.Superiors())
			what := ""
			switch rng.IntN(5) {
			case 0, 1:
				what = "add superior " + p
				_, err := s.AddSuperior(now, peeraddr.PeerAddrs{Peer: p}, rng.IntN(2) == 0, b)
				if role, ok := want[p]; ok && role == Inferior {
					if err == nil {
						t.Fatalf("seed %d step %d: %s: an inferior became a superior", seed, step, what)
					}
				} else if err != nil {
					t.Fatalf("seed %d step %d: %s: %v", seed, step, what, err)
				} else {
					want[p] = Superior
				}
			case 2, 3:
				what = "add inferior " + p
				s.AddInferior(now, p, "n"+p, nil)
				want[p] = Inferior
			case 4:
				what = "remove " + p
				s.Remove(p)
				delete(want, p)
			}
			if r := s.Get(p); r != nil && r.Role == Inferior && r.Configured && rng.IntN(3) == 0 {
				what += ", restored"
				s.RestoreSuperior(now, r)
				want[p] = Superior
			}
			if !slices.Equal(held, heldCopy) || !slices.Equal(heldSup, heldSupCopy) {
				t.Fatalf("seed %d step %d: %s changed a slice All returned before", seed, step, what)
			}
			var got []string
			for _, r := range s.All() {
				got = append(got, fmt.Sprintf("%d/%s", r.Role, r.Peer))
			}
			var exp []string
			for _, p := range slices.Sorted(maps.Keys(want)) {
				exp = append(exp, fmt.Sprintf("%d/%s", want[p], p))
			}
			slices.Sort(exp) // role first (1 superior, 2 inferior), then peer
			if !slices.Equal(got, exp) {
				t.Fatalf("seed %d step %d: after %s:\n all %v\nwant %v", seed, step, what, got, exp)
			}
			for _, r := range s.Superiors() {
				if r.Role != Superior {
					t.Fatalf("seed %d step %d: %s: Superiors holds %s, a %s", seed, step, what, r.Peer, r.Role)
				}
			}
			if len(s.Superiors())+len(s.Inferiors()) != s.Len() || s.Len() != len(want) {
				t.Fatalf("seed %d step %d: %s: %d superiors + %d inferiors, Len %d, want %d", seed, step, what, len(s.Superiors()), len(s.Inferiors()), s.Len(), len(want))
			}
			for i := range peers {
				q := fmt.Sprintf("p%02d", i)
				r := s.Get(q)
				role, ok := want[q]
				if ok != (r != nil) || ok && (r.Role != role || r.Peer != q) {
					t.Fatalf("seed %d step %d: %s: Get(%s) = %v, want role %v (%v)", seed, step, what, q, r, role, ok)
				}
			}
		}
	}
}
