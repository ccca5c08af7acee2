package query

import (
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

// Offers the asker ranks alike are ordered by the owner's rank of the
// request, as in the ClassAd paper (the machine's Rank breaks the job's
// ties); an owner without a rank, or whose rank is undefined, counts as
// 0; only then does the name decide. The asker's rank always comes
// first: an owner's wish never lifts an offer the asker ranks lower.
func TestMergeBreaksTiesByOwnerRank(t *testing.T) {
	offer := func(name string, rank float64, ranked bool, owner float64, ownerRanked bool) *wire.Offer {
		return &wire.Offer{Name: name, Peer: "P-" + name, Rank: rank, Ranked: ranked, OwnerRank: owner, OwnerRanked: ownerRanked}
	}
	all := []*wire.Offer{
		offer("a-none", 5, true, 0, false),        // no owner's rank: 0
		offer("b-dislikes", 5, true, -1, true),    // the owner ranks the request below 0
		offer("c-wants", 5, true, 10, true),       // the owner wants the request most
		offer("d-likes", 5, true, 1, true),        //
		offer("e-zero", 5, true, 0, true),         // ties with a-none: the name decides
		offer("f-better", 6, true, -100, true),    // the asker's rank first
		offer("g-unranked", 0, false, 100, true),  // undefined for the asker: last, whatever the owner says
		offer("h-unranked", 0, false, 0, false),   //
		offer("i-undefined", 5, true, 1e9, false), // an owner's rank that was undefined counts as 0
	}
	want := "f-better c-wants d-likes a-none e-zero i-undefined b-dislikes g-unranked h-unranked"
	// Every manager merges in its own order: the result must not depend on it.
	for _, split := range []int{0, 3, 5, len(all)} {
		in := append([]*wire.Offer(nil), all...)
		out := Merge(Merge(nil, in[split:], 0), in[:split], 0)
		var names []string
		for _, o := range out {
			names = append(names, o.Name)
		}
		if got := strings.Join(names, " "); got != want {
			t.Errorf("merged after %d:\n got %s\nwant %s", split, got, want)
		}
	}
	// The cut keeps the owner's favourite among ties.
	out := Merge(nil, []*wire.Offer{offer("a", 1, true, 0, false), offer("b", 1, true, 3, true)}, 1)
	if len(out) != 1 || out[0].Name != "b" {
		t.Errorf("cut to 1: %v", out)
	}
}

// An explained query gathers this manager's verdict and those its
// inferiors send; a query that does not ask for them gets none.
func TestWalkVerdicts(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	infs := []Neighbor{{Peer: "P2", Name: "m2", Live: true}}
	for _, explain := range []bool{false, true} {
		req := &wire.QueryRequest{Requirement: "true", Down: 1, Want: 1, Limit: 10, BudgetMs: 1000, Explain: explain}
		w, asks := NewWalk(now, Self{Peer: "P1", Name: "m1"}, req, "", "", nil, infs, nil)
		if len(asks) != 1 || asks[0].Req.Explain != explain {
			t.Fatalf("explain %v: asks %v", explain, asks)
		}
		w.AddVerdict(&wire.Verdict{Peer: "P1", Name: "m1", Why: "drained"})
		w.OnReply(now, "P2", &wire.QueryReply{Visited: 3, VerdictsMore: 2,
			Verdicts: []*wire.Verdict{{Peer: "P2", Name: "m2", Why: "requirement", Clause: "cpus > 4"}}})
		if !w.Done() {
			t.Fatal("not done")
		}
		rep := w.Reply()
		if !explain {
			if len(rep.Verdicts) != 0 || rep.VerdictsMore != 0 {
				t.Errorf("verdicts without explain: %v", rep.Verdicts)
			}
			continue
		}
		if len(rep.Verdicts) != 2 || rep.Verdicts[0].Why != "drained" || rep.Verdicts[1].Name != "m2" || rep.VerdictsMore != 2 {
			t.Errorf("verdicts %v, more %d", rep.Verdicts, rep.VerdictsMore)
		}
	}
}
