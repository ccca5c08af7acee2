package node

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// randomChain is a chain of ancestors drawn from a few peers, names and
// addresses, some with the separators of chainFingerprint in them, so
// that equal and different chains and fingerprints both come up.
func randomChain(rng *rand.Rand) []relations.Ancestor {
	parts := []string{"a", "b", "a/1", "b,c", "c;", "", "é", "\xff"}
	pick := func() string { return parts[rng.IntN(len(parts))] }
	var anc []relations.Ancestor
	for range rng.IntN(4) {
		a := relations.Ancestor{Peer: pick(), Name: pick(), Depth: rng.IntN(3) - 0}
		for range rng.IntN(3) {
			a.Addrs = append(a.Addrs, pick())
		}
		anc = append(anc, a)
	}
	return anc
}

// chainHash tells chains apart exactly when their peers, depths or
// addresses differ (names do not count), with separators inside the
// strings that a text fingerprint would confuse; equal chains hash alike.
func TestChainHashTellsChainsApart(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	same := 0
	for range 200000 {
		a, b := randomChain(rng), randomChain(rng)
		want := slices.EqualFunc(a, b, func(x, y relations.Ancestor) bool {
			return x.Peer == y.Peer && x.Depth == y.Depth && slices.Equal(x.Addrs, y.Addrs)
		})
		if got := chainHash(a) == chainHash(b); got != want {
			t.Fatalf("chainHash(%v) == chainHash(%v) is %v, want %v", a, b, got, want)
		}
		if want {
			same++
		}
	}
	if same < 1000 {
		t.Fatalf("only %d equal chains drawn", same)
	}
	if chainHash(nil) != 0 {
		t.Fatal("the empty chain does not hash to 0")
	}
}

// sameChainPB is sameChain(ancestorsFromPB(pb), anc).
func TestSameChainPB(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		a, b := randomChain(rng), randomChain(rng)
		for i := range a {
			a[i].Depth = max(a[i].Depth, 0)
		}
		pb := ancestorsToPB(a)
		if got, want := sameChainPB(pb, b), sameChain(ancestorsFromPB(pb), b); got != want {
			t.Fatalf("sameChainPB(%v, %v) = %v, want %v", a, b, got, want)
		}
	}
}

// checkAncestors with its fast path (ancestorOK) says what it said
// before: the same error, or none, for every entry.
func TestCheckAncestorsFastPath(t *testing.T) {
	slow := func(field string, anc []*wire.Ancestor) error { // as before ancestorOK
		if len(anc) > relations.MaxAncestors {
			return fmt.Errorf("%w: %s has %d entries, limit %d", ErrBadMessage, field, len(anc), relations.MaxAncestors)
		}
		for i, a := range anc {
			f := fmt.Sprintf("%s[%d]", field, i)
			if a.Peer == "" || len(a.Peer) > maxAddrLen {
				return fmt.Errorf("%w: %s.peer is empty or too long", ErrBadMessage, f)
			}
			if err := checkText(f+".name", a.Name, maxNameLen); err != nil {
				return err
			}
			if len(a.Addrs) > maxAddrs {
				return fmt.Errorf("%w: %s has %d entries, limit %d", ErrBadMessage, f+".addrs", len(a.Addrs), maxAddrs)
			}
			for j, addr := range a.Addrs {
				if err := checkText(fmt.Sprintf("%s[%d]", f+".addrs", j), addr, maxAddrLen); err != nil {
					return err
				}
			}
			if a.Depth < 1 || a.Depth > relations.MaxAncestors {
				return fmt.Errorf("%w: %s.depth %d is out of range 1..%d", ErrBadMessage, f, a.Depth, relations.MaxAncestors)
			}
		}
		return nil
	}
	rng := rand.New(rand.NewPCG(5, 6))
	texts := []string{"", "p", "\xff", strings.Repeat("x", maxAddrLen), strings.Repeat("x", maxAddrLen+1),
		strings.Repeat("n", maxNameLen+1), "/ip4/1.2.3.4/tcp/1"}
	pick := func() string { return texts[rng.IntN(len(texts))] }
	for range 100000 {
		var anc []*wire.Ancestor
		for range rng.IntN(4) {
			a := &wire.Ancestor{Peer: pick(), Name: pick(), Depth: uint32(rng.IntN(relations.MaxAncestors + 2))}
			for range rng.IntN(3) {
				a.Addrs = append(a.Addrs, pick())
			}
			if rng.IntN(50) == 0 {
				a.Addrs = make([]string, maxAddrs+1)
			}
			anc = append(anc, a)
		}
		got, want := fmt.Sprint(checkAncestors("h.ancestors", anc)), fmt.Sprint(slow("h.ancestors", anc))
		if got != want {
			t.Fatalf("checkAncestors: %s, before: %s", got, want)
		}
	}
}

// chainToPB hands the heartbeats the chain built last only while it is
// the same chain, names included (the fingerprint leaves names out), and
// never changes a chain already sent.
func TestChainToPBCachesOnlyTheSameChain(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	c := &Core{}
	var sent [][]*wire.Ancestor // every chain handed out, with a copy of what it said then
	var said [][]relations.Ancestor
	reused := 0
	for range 20000 {
		anc := randomChain(rng)
		if rng.IntN(2) == 0 && len(said) > 0 {
			anc = append([]relations.Ancestor(nil), said[len(said)-1]...) // the same chain again
		}
		prev := c.chainPB
		got := c.chainToPB(anc)
		if got == nil || !sameChainPB(got, anc) || len(got) != len(anc) {
			t.Fatalf("chainToPB(%+v) = %v", anc, got)
		}
		if len(got) > 0 && len(prev) == len(got) && &got[0] == &prev[0] {
			reused++
		}
		sent = append(sent, got)
		said = append(said, anc)
	}
	for i, pb := range sent {
		if !sameChainPB(pb, said[i]) {
			t.Fatalf("chain %d changed after it was handed out: %v, was %+v", i, pb, said[i])
		}
	}
	if reused < 5000 {
		t.Fatalf("the chain was reused %d times in 20000 (about half repeat the last): the cache does nothing", reused)
	}
}
