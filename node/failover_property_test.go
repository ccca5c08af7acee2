package node_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/memnet"
)

// randomTree builds n managers m0..m(n-1) on a memnet: m0 is the root and
// each other manager's superior is a random earlier one (a random
// recursive tree: depth about ln n, a few wide nodes). It returns the net
// and each manager's superior index (-1 for the root).
func randomTree(t testing.TB, n int, seed uint64) (*memnet.Net, []int) {
	net := newNet(seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	parent := make([]int, n)
	parent[0] = -1
	for i := 0; i < n; i++ {
		cfg := config.Default()
		cfg.Name = fmt.Sprintf("m%d", i)
		if i > 0 {
			parent[i] = rng.IntN(i)
			cfg.Superiors = append(cfg.Superiors, peerAddrs(fmt.Sprintf("m%d", parent[i])))
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		nd := net.Add(pid(cfg.Name), cfg)
		nd.Host = &node.HostValues{CPUs: 1, Mem: 1 << 30, MemAvail: 1 << 30, Hostname: cfg.Name, OS: "linux", Arch: "amd64"}
	}
	for i := 0; i < n; i++ {
		net.Start(pid(fmt.Sprintf("m%d", i)))
	}
	return net, parent
}

// expectedShape is what failover must reach after the managers in dead
// failed: every live manager under its nearest live ancestor of the
// original tree, or a root when none is left.
func expectedShape(parent []int, dead []bool) map[string][]string {
	want := map[string][]string{}
	for i := range parent {
		if dead[i] {
			continue
		}
		p := parent[i]
		for p >= 0 && dead[p] {
			p = parent[p]
		}
		if p < 0 {
			want[fmt.Sprintf("m%d", i)] = []string{}
		} else {
			want[fmt.Sprintf("m%d", i)] = []string{fmt.Sprintf("m%d", p)}
		}
	}
	return want
}

func shapeMatches(sh memnet.Shape, want map[string][]string) (bool, string) {
	if !sh.Settled() {
		return false, fmt.Sprintf("%d problem(s), first: %s", len(sh.Problems), sh.Problems[0])
	}
	if len(sh.Superiors) != len(want) {
		return false, fmt.Sprintf("%d managers running, want %d", len(sh.Superiors), len(want))
	}
	for m, w := range want {
		if !slices.Equal(sh.Superiors[m], w) {
			return false, fmt.Sprintf("%s is under %v, want %v", m, sh.Superiors[m], w)
		}
	}
	return true, ""
}

// checkEvery is how often (virtual time) runUntilEvery checks its
// condition: reading the shape of 10,000 managers after every event would
// cost more than running them.
const checkEvery = 20 * time.Millisecond

// runUntilEvery runs until cond holds, checking it every step (of virtual
// time), or until limit passes.
func runUntilEvery(net *memnet.Net, step time.Duration, cond func() bool, limit time.Duration) bool {
	for end := net.Now().Add(limit); net.Now().Before(end); {
		if cond() {
			return true
		}
		net.RunFor(step)
	}
	return cond()
}

// TestFailoverAtScale kills 1% and 10% of random trees of 1,000 and 10,000
// managers at once, and checks that every live manager ends under its
// nearest live ancestor (so: it reaches a root, there is no cycle, and each
// part has exactly one root: the original root, or a manager all of whose
// ancestors died). Seeded and deterministic; it logs the reconvergence time
// in virtual time, from the kill to the moment the shape is as expected
// (checked every 20ms of virtual time).
//
// 10,000 managers run only with GRIDMGR_LONG=1 (CI sets it; under -race
// they take a minute and a half): the README's test command runs 1,000.
func TestFailoverAtScale(t *testing.T) {
	sizes := []int{1000}
	if os.Getenv("GRIDMGR_LONG") != "" && !testing.Short() {
		sizes = append(sizes, 10000)
	} else {
		t.Log("10,000 managers skipped: set GRIDMGR_LONG=1 to run them")
	}
	for _, n := range sizes {
		for _, pct := range []int{1, 10} {
			t.Run(fmt.Sprintf("n=%d/kill=%d%%", n, pct), func(t *testing.T) {
				seed := uint64(n*100 + pct)
				net, parent := randomTree(t, n, seed)
				formed := expectedShape(parent, make([]bool, n))
				ok := runUntilEvery(net, 10*checkEvery, func() bool { m, _ := shapeMatches(net.Shape(), formed); return m }, 2*time.Minute)
				if !ok {
					_, why := shapeMatches(net.Shape(), formed)
					t.Fatalf("tree of %d did not form: %s", n, why)
				}
				net.RunFor(2 * time.Second)

				rng := rand.New(rand.NewPCG(seed, 11))
				dead := make([]bool, n)
				kill := n * pct / 100
				for _, i := range rng.Perm(n)[:kill] {
					dead[i] = true
				}
				start := net.Now()
				for i := range dead {
					if dead[i] {
						net.Kill(pid(fmt.Sprintf("m%d", i)))
					}
				}
				want := expectedShape(parent, dead)
				roots := 0
				for _, sups := range want {
					if len(sups) == 0 {
						roots++
					}
				}
				var last string
				ok = runUntilEvery(net, checkEvery, func() bool {
					m, why := shapeMatches(net.Shape(), want)
					last = why
					return m
				}, 2*time.Minute)
				if !ok {
					t.Fatalf("after killing %d of %d: not reconverged within 2m of virtual time: %s", kill, n, last)
				}
				took := net.Now().Sub(start)
				// Stays so: no late flapping.
				net.RunFor(10 * time.Second)
				if m, why := shapeMatches(net.Shape(), want); !m {
					t.Fatalf("reconverged, then changed: %s", why)
				}
				t.Logf("%d managers, %d killed at once (%d%%): every survivor under its nearest live ancestor, %d root(s), after %v of virtual time",
					n, kill, pct, roots, took.Round(time.Millisecond))
			})
		}
	}
}
