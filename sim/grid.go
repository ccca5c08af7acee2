package sim

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/memnet"
)

// grid is the static picture of a scenario's managers: the configured
// hierarchy (a DAG when some have two superiors), where each one sits
// in the network, and what its host has. Managers are indexed 0..N-1 and
// named m0..m(N-1); m0 is the root.
type grid struct {
	n        int
	parents  [][]int32 // configured superiors, the first is the primary
	depth    []int32
	region   []uint8
	rack     []int32
	names    []string // region names
	leafList []int32  // leaves(), once asked
}

// buildGrid draws the hierarchy and the placement from the scenario.
func buildGrid(sc *Scenario, rng *rand.Rand) *grid {
	n := sc.Grid.Managers
	g := &grid{n: n, parents: make([][]int32, n), depth: make([]int32, n), region: make([]uint8, n), rack: make([]int32, n)}
	byDepth := [][]int32{{0}}
	for i := 1; i < n; i++ {
		var p int
		if sc.Grid.Shape == "random" {
			p = rng.IntN(i)
		} else {
			p = (i - 1) / sc.Grid.Fanout
		}
		d := g.depth[p] + 1
		g.depth[i] = d
		g.parents[i] = []int32{int32(p)}
		if int(d) >= len(byDepth) {
			byDepth = append(byDepth, nil)
		}
		byDepth[d] = append(byDepth[d], int32(i))
	}
	if sc.Grid.SecondSuperior > 0 {
		for i := 1; i < n; i++ {
			d := g.depth[i]
			if d < 2 || rng.Float64() >= sc.Grid.SecondSuperior {
				continue
			}
			level := byDepth[d-1]
			if len(level) < 2 {
				continue
			}
			q := level[rng.IntN(len(level))]
			if q == g.parents[i][0] {
				continue
			}
			g.parents[i] = append(g.parents[i], q)
		}
	}
	// Regions by subtree of the root's inferiors, dealt out in turn.
	g.names = sc.Network.Regions
	if len(g.names) == 0 {
		g.names = []string{"region"}
	}
	child := 0
	perRegion := make([]int32, len(g.names))
	for i := 0; i < n; i++ {
		switch {
		case i == 0:
			g.region[i] = 0
		case g.depth[i] == 1:
			g.region[i] = uint8(child % len(g.names))
			child++
		default:
			g.region[i] = g.region[g.parents[i][0]]
		}
	}
	// Racks: consecutive managers of a region, in index order (which is
	// breadth-first for a balanced tree), RackSize to a rack.
	rackBase := make([]int32, len(g.names))
	for r := range rackBase {
		rackBase[r] = int32(r) << 24
	}
	for i := 0; i < n; i++ {
		r := g.region[i]
		g.rack[i] = rackBase[r] + perRegion[r]/int32(sc.Network.RackSize)
		perRegion[r]++
	}
	return g
}

// name is the name of manager i.
func name(i int) string { return fmt.Sprintf("m%d", i) }

// leaves are the managers no one names as a superior, computed once.
func (g *grid) leaves() []int32 {
	if g.leafList != nil {
		return g.leafList
	}
	has := make([]bool, g.n)
	for _, ps := range g.parents {
		for _, p := range ps {
			has[p] = true
		}
	}
	var out []int32
	for i := range has {
		if !has[i] {
			out = append(out, int32(i))
		}
	}
	g.leafList = out
	return out
}

// configs makes each manager's properties: the config all share, once,
// and each one's own fields (name, host name, superiors, attributes).
// Attributes that hosts share are shared too, not copied: at a million
// managers that is the difference between fitting in memory or not.
func (g *grid) configs(sc *Scenario, rng *rand.Rand, add func(i int, base *config.Config, own node.Own, hv *node.HostValues)) error {
	base := config.Default()
	base.Name = "m0"
	for _, k := range slices.Sorted(maps.Keys(sc.Grid.Config)) {
		var err error
		if base, _, _, err = config.Set(base, k, sc.Grid.Config[k]); err != nil {
			return fmt.Errorf("grid.config.%s: %s", k, text.Human(err))
		}
	}
	mems := make([]uint64, len(sc.Hosts.Mem))
	for i, m := range sc.Hosts.Mem {
		v, err := text.ParseSize(m)
		if err != nil {
			return fmt.Errorf("hosts.mem: %q: %w", m, err)
		}
		mems[i] = v
	}
	attrKeys := slices.Sorted(maps.Keys(sc.Hosts.Attrs))
	shared := map[string]map[string]any{}
	// Hosts differ only in their cpus and memory: each pair is one
	// HostValues, which the Core copies. The host name, which each has
	// its own, is the manager's name, from its properties (a Core
	// prefers a hostname property to the host's).
	type hostKey struct {
		cpus int64
		mem  uint64
	}
	hosts := map[hostKey]*node.HostValues{}
	var common *config.Config
	for i := 0; i < g.n; i++ {
		cfg := base
		cfg.Name = name(i)
		if base.Hostname == "" {
			cfg.Hostname = cfg.Name
		}
		cfg.Superiors = nil
		for _, p := range g.parents[i] {
			cfg.Superiors = append(cfg.Superiors, memnet.PeerAddrs(name(int(p))))
		}
		if len(attrKeys) > 0 {
			var key strings.Builder
			vals := make([]string, len(attrKeys))
			for j, k := range attrKeys {
				vs := sc.Hosts.Attrs[k]
				vals[j] = vs[rng.IntN(len(vs))]
				key.WriteString(vals[j] + "\x00")
			}
			m, ok := shared[key.String()]
			if !ok {
				m = map[string]any{}
				for j, k := range attrKeys {
					m[k] = vals[j]
				}
				shared[key.String()] = m
			}
			cfg.Attributes = m
		}
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("%s: %s", cfg.Name, text.Human(err))
		}
		own := node.OwnOf(&cfg)
		if i == 0 {
			// What all share is the first manager's config, validated,
			// without the fields that are each one's own (no default
			// Validate sets depends on them).
			common, _ = node.Split(cfg)
		}
		cpus := sc.Hosts.CPUs[rng.IntN(len(sc.Hosts.CPUs))]
		mem := mems[rng.IntN(len(mems))]
		hk := hostKey{cpus, mem}
		hv, ok := hosts[hk]
		if !ok {
			hv = &node.HostValues{CPUs: int(cpus), Mem: mem, MemAvail: mem, CPUUtil: -1, OS: "linux", Arch: "amd64"}
			hosts[hk] = hv
		}
		add(i, common, own, hv)
	}
	return nil
}

// latency is the base one-way delay between managers a and b.
func (g *grid) latency(nw *Network, a, b int) time.Duration {
	ra, rb := g.region[a], g.region[b]
	switch {
	case ra == rb && g.rack[a] == g.rack[b]:
		return nw.SameRack.D()
	case ra == rb:
		return nw.SameRegion.D()
	}
	x, y := g.names[ra], g.names[rb]
	if d, ok := nw.Between[x+"-"+y]; ok {
		return d.D()
	}
	if d, ok := nw.Between[y+"-"+x]; ok {
		return d.D()
	}
	return nw.CrossRegion.D()
}

// ancestorsAt returns the live ancestors of i nearest to it (smallest
// depth below i) that alive accepts, following configured superiors: the
// managers failover may pick in place of a dead superior.
func (g *grid) nearestLive(start int32, alive func(int32) bool) []int32 {
	frontier := []int32{start}
	seen := map[int32]bool{start: true}
	for len(frontier) > 0 {
		var found, next []int32
		for _, m := range frontier {
			for _, p := range g.parents[m] {
				if seen[p] {
					continue
				}
				seen[p] = true
				if alive(p) {
					found = append(found, p)
				} else {
					next = append(next, p)
				}
			}
		}
		if len(found) > 0 {
			return found
		}
		frontier = next
	}
	return nil
}

// liveAncestors returns every ancestor of start that alive accepts.
func (g *grid) liveAncestors(start int32, alive func(int32) bool) []int32 {
	var out []int32
	seen := map[int32]bool{start: true}
	stack := []int32{start}
	for len(stack) > 0 {
		m := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, p := range g.parents[m] {
			if !seen[p] {
				seen[p] = true
				stack = append(stack, p)
				if alive(p) {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// peerIndex maps a peer id to its manager's index.
func peerIndex(net *memnet.Net, peer string) int {
	if nd := net.Node(peer); nd != nil {
		return int(nd.Index)
	}
	return -1
}

// addrOf is the full address (with /p2p) of manager i on a memnet.
func addrOf(i int) string {
	pa := memnet.PeerAddrs(name(i))
	return pa.Addrs[0] + "/p2p/" + pa.Peer
}
