package node

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestMeshChansAsAMap runs random sets, gets and deletes on the table and
// on a map side by side, over few peers and many (past meshSmall, when
// the map takes over, and back down by deletes), and requires the same
// answers; also with peer ids whose last 8 bytes are all the same (one
// PeerTag for all), where only the ids themselves tell them apart.
func TestMeshChansAsAMap(t *testing.T) {
	for _, sameTag := range []bool{false, true} {
		for _, peers := range []int{1, 3, meshSmall, meshSmall + 1, 4 * meshSmall} {
			meshChansAsAMap(t, peers, sameTag)
		}
	}
}

func meshChansAsAMap(t *testing.T, peers int, sameTag bool) {
	t.Helper()
	id := func(i int) string { return fmt.Sprintf("peer-%03d", i) }
	if sameTag {
		id = func(i int) string { return fmt.Sprintf("%03d-the-same-end", i) }
		if PeerTag(id(1)) != PeerTag(id(2)) {
			t.Fatal("the ids meant to share a tag do not")
		}
	}
	{
		rng := rand.New(rand.NewPCG(uint64(peers), 7))
		var m meshChans
		want := map[string]uint64{}
		for step := range 20000 {
			p := id(rng.IntN(peers))
			switch rng.IntN(3) {
			case 0:
				ch := rng.Uint64N(1000) + 1

				m.set(p, ch)
				want[p] = ch
			case 1:
				m.del(p)
				delete(want, p)
			}
			got, ok := m.get(p)
			if w, wok := want[p]; got != w || ok != wok {
				t.Fatalf("%d peers, step %d: get(%s) = %d, %v; the map says %d, %v", peers, step, p, got, ok, w, wok)
			}
			if m.len() != len(want) {
				t.Fatalf("%d peers, step %d: %d entries, the map has %d", peers, step, m.len(), len(want))
			}
		}
		for p, w := range want {
			if got, ok := m.get(p); !ok || got != w {
				t.Fatalf("%d peers: at the end get(%s) = %d, %v; want %d", peers, p, got, ok, w)
			}
		}
		if peers >= 4*meshSmall && m.big == nil {
			t.Errorf("%d peers: the table never moved to a map", peers)
		}
	}
}
