package node_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/wire"
)

// randomGrid is a random tree of n managers with random resources.
type randomGrid struct {
	n        *memnet.Net
	names    []string
	sup      map[string]string   // child → superior ("" for the root)
	children map[string][]string // superior → children, sorted
	cpus     map[string]int
}

func newRandomGrid(t testing.TB, seed uint64, size int) *randomGrid {
	rng := rand.New(rand.NewPCG(seed, seed*7+1))
	g := &randomGrid{n: newNet(seed), sup: map[string]string{}, children: map[string][]string{}, cpus: map[string]int{}}
	for i := 0; i < size; i++ {
		name := fmt.Sprintf("m%04d", i)
		g.names = append(g.names, name)
		cfg := config.Default()
		cfg.Name = name
		if i > 0 {
			// Mostly attach near the end, so that trees get deep as well
			// as wide.
			j := i - 1 - rng.IntN(min(i, 1+rng.IntN(i)))
			s := g.names[j]
			g.sup[name] = s
			g.children[s] = append(g.children[s], name)
			cfg.Superiors = []peeraddr.PeerAddrs{memnet.PeerAddrs(s)}
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		nd := g.n.Add(pid(name), cfg)
		g.cpus[name] = 1 << rng.IntN(7)
		nd.Host = &node.HostValues{CPUs: g.cpus[name], Mem: 1 << 30, MemAvail: 1 << 30, CPUUtil: 0.5}
	}
	for _, c := range g.children {
		slices.Sort(c)
	}
	for _, i := range rng.Perm(size) {
		g.n.Start(pid(g.names[i]))
	}
	formed := func() bool {
		for c, s := range g.sup {
			if relState(g.n, c, s) != "superior:up" || relState(g.n, s, c) != "inferior:up" {
				return false
			}
		}
		return true
	}
	if !g.n.RunUntil(formed, 2*time.Minute) {
		t.Fatalf("random grid of %d did not form", size)
	}
	return g
}

// region lists m and the managers below it within down levels, skipping
// the subtree of exclude.
func (g *randomGrid) region(m string, down uint32, exclude string) []string {
	out := []string{m}
	if down == 0 {
		return out
	}
	for _, c := range g.children[m] {
		if c != exclude {
			out = append(out, g.region(c, down-1, "")...)
		}
	}
	return out
}

// brute answers a query by the definition: the entry searches its region;
// while the manager that searched last found fewer than still needed and
// climbing is allowed, its superior searches its own region without the
// subtree the query came from. It returns the offers (names, best first)
// and how many managers were visited.
func (g *randomGrid) brute(entry string, least int, req *wire.QueryRequest) ([]string, int) {
	match := func(ms []string) []string {
		var out []string
		for _, m := range ms {
			if g.cpus[m] >= least {
				out = append(out, m)
			}
		}
		return out
	}
	region := g.region(entry, req.Down, "")
	visited := len(region)
	found := match(region)
	all := found
	need, up, cur := int(req.Want), req.Up, entry
	for up > 0 && g.sup[cur] != "" && len(found) < need {
		need -= len(found)
		s := g.sup[cur]
		region = g.region(s, req.Down, cur)
		visited += len(region)
		found = match(region)
		all = append(all, found...)
		cur, up = s, up-1
	}
	// Rank is cpus, higher first; ties by name.
	slices.SortFunc(all, func(a, b string) int {
		if g.cpus[a] != g.cpus[b] {
			return g.cpus[b] - g.cpus[a]
		}
		return strings.Compare(a, b)
	})
	if len(all) > int(req.Limit) {
		all = all[:req.Limit]
	}
	return all, visited
}

func TestQueryMatchesBruteForce(t *testing.T) {
	sizes := []int{1, 2, 7, 40, 300, 1000}
	var climbed, bigVisits, cut int
	if testing.Short() {
		sizes = sizes[:5]
	}
	for _, size := range sizes {
		for seed := uint64(1); seed <= 3; seed++ {
			g := newRandomGrid(t, seed*1000+uint64(size), size)
			rng := rand.New(rand.NewPCG(seed, uint64(size)))
			var msgs int
			g.n.Trace = func(_ time.Time, _ string, _ *memnet.Node, env *wire.Envelope) {
				switch env.Body.(type) {
				case *wire.Envelope_QueryRequest, *wire.Envelope_QueryReply:
					msgs++
				}
			}
			queries := 20
			if size >= 300 {
				queries = 12
			}
			for q := 0; q < queries; q++ {
				entry := g.names[rng.IntN(size)]
				least := 1 << rng.IntN(7)
				levels := func() uint32 {
					if rng.IntN(3) == 0 {
						return 255
					}
					return uint32(rng.IntN(5))
				}
				req := &wire.QueryRequest{
					Requirement: fmt.Sprintf("cpus >= %d", least),
					Rank:        "cpus",
					Down:        levels(),
					Up:          min(levels(), 4),
					Want:        uint32(1 + rng.IntN(30)),
					Limit:       uint32(1 + rng.IntN(40)),
					BudgetMs:    60000,
				}
				want, visited := g.brute(entry, least, req)
				if visited > len(g.region(entry, req.Down, "")) {
					climbed++
				}
				if visited >= 100 {
					bigVisits++
				}
				msgs = 0
				rep := g.n.Ask(pid(entry), &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: req}}, time.Minute)
				qr := rep.GetQueryReply()
				if qr == nil {
					t.Fatalf("size %d seed %d: no answer: %v", size, seed, rep)
				}
				var got []string
				for _, o := range qr.Offers {
					got = append(got, o.Name)
				}
				what := fmt.Sprintf("size %d seed %d query %d at %s (%s down %d up %d want %d limit %d)",
					size, seed, q, entry, req.Requirement, req.Down, req.Up, req.Want, req.Limit)
				if qr.Matched > uint32(len(qr.Offers)) {
					cut++
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s:\n got  %v\n want %v", what, got, want)
				}
				if len(qr.Missing) > 0 {
					t.Fatalf("%s: missing %v", what, qr.Missing)
				}
				if int(qr.Visited) != visited {
					t.Fatalf("%s: visited %d, brute force %d", what, qr.Visited, visited)
				}
				// Every visited manager got one request and sent one reply;
				// the entry's are the client's two messages.
				if msgs+2 != 2*visited {
					t.Fatalf("%s: %d messages for %d managers visited, want exactly %d", what, msgs+2, visited, 2*visited)
				}
			}
		}
	}
	// The random queries must have exercised climbing, large walks and
	// the limit cut, or the comparison proves little.
	if !testing.Short() && (climbed < 10 || bigVisits < 3 || cut < 10) { // -short runs too few to judge
		t.Fatalf("weak coverage: %d climbed, %d visited >= 100, %d cut by the limit", climbed, bigVisits, cut)
	}
	t.Logf("%d queries climbed, %d visited >= 100 managers, %d were cut by the limit", climbed, bigVisits, cut)
}
