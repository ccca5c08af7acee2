package memnet

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gridmgr/gridmgr/relations"
)

// Shape is the hierarchy that the running managers form now, read from
// their relation sets: an edge is a superior relation that is live on the
// inferior's side.
type Shape struct {
	// Superiors maps each running manager's name to the names of its live
	// superiors, sorted.
	Superiors map[string][]string
	// Origins maps "inferior>superior" to the superior's origin when it
	// is not from the properties file (adopted, fallback, admin).
	Origins map[string]string
	// Roots are the running managers without a live superior, sorted.
	Roots []string
	// Problems are what keeps the shape from being settled: a cycle, a
	// relation live on one side only, a manager that does not reach a
	// root, a failover in progress. Sorted.
	Problems []string
}

// Settled reports whether the shape has no problems.
func (s Shape) Settled() bool { return len(s.Problems) == 0 }

// Shape reads the current hierarchy.
func (n *Net) Shape() Shape {
	s := Shape{Superiors: map[string][]string{}, Origins: map[string]string{}}
	problem := func(format string, args ...any) { s.Problems = append(s.Problems, fmt.Sprintf(format, args...)) }
	for _, nd := range n.Nodes() {
		if !nd.up {
			continue
		}
		sups := []string{}
		for _, r := range nd.Core.Relations().Superiors() {
			if r.Trial != "" {
				problem("%s is trying %s in place of a failed superior", nd.Name, r.DisplayName())
			}
			if !r.State.Live() {
				continue
			}
			other := n.nodes[r.Peer]
			if other == nil || !other.up {
				problem("%s has %s as a live superior, but it is not running", nd.Name, r.DisplayName())
				continue
			}
			if ir := other.Core.Relations().Get(nd.Peer); ir == nil || ir.Role != relations.Inferior || !ir.State.Live() {
				problem("%s has %s as a live superior, but %s does not have it as a live inferior", nd.Name, other.Name, other.Name)
			}
			sups = append(sups, other.Name)
			if r.Origin != relations.FromConfig {
				s.Origins[nd.Name+">"+other.Name] = r.Origin.String()
			}
		}
		slices.Sort(sups)
		s.Superiors[nd.Name] = sups
		if len(sups) == 0 {
			s.Roots = append(s.Roots, nd.Name)
		}
		if len(sups) > 0 {
			for _, f := range nd.Core.Failovers() {
				problem("%s is still looking for a replacement of %s", nd.Name, f)
			}
		}
	}
	slices.Sort(s.Roots)
	// Every manager must reach a root; a walk that comes back to a manager
	// on its own path is a cycle. Each manager is walked from once (a
	// depth-first search that remembers what it finished), so this costs
	// one visit per relation, whatever the depth.
	const (
		walking = 1
		done    = 2
	)
	mark := make(map[string]uint8, len(s.Superiors))
	var path []string
	var walk func(m string)
	walk = func(m string) {
		switch mark[m] {
		case done:
			return
		case walking:
			i := slices.Index(path, m)
			problem("cycle: %s", strings.Join(append(slices.Clone(path[i:]), m), " → "))
			return
		}
		mark[m] = walking
		path = append(path, m)
		for _, sup := range s.Superiors[m] {
			walk(sup)
		}
		path = path[:len(path)-1]
		mark[m] = done
	}
	for _, name := range slices.Sorted(maps.Keys(s.Superiors)) {
		walk(name)
	}
	slices.Sort(s.Problems)
	s.Problems = slices.Compact(s.Problems)
	return s
}

// String draws the shape as indented trees under each root (a manager with
// several superiors appears under each), then the problems.
func (s Shape) String() string {
	children := map[string][]string{}
	for m, sups := range s.Superiors {
		for _, sup := range sups {
			children[sup] = append(children[sup], m)
		}
	}
	for _, c := range children {
		slices.Sort(c)
	}
	var b strings.Builder
	var walk func(m string, depth int, seen []string)
	walk = func(m string, depth int, seen []string) {
		if slices.Contains(seen, m) {
			return
		}
		for _, c := range children[m] {
			fmt.Fprintf(&b, "%s%s", strings.Repeat("  ", depth), c)
			if o := s.Origins[c+">"+m]; o != "" {
				fmt.Fprintf(&b, " (%s)", o)
			}
			b.WriteString("\n")
			walk(c, depth+1, append(seen, m))
		}
	}
	for _, r := range s.Roots {
		b.WriteString(r + "\n")
		walk(r, 1, nil)
	}
	for _, p := range s.Problems {
		b.WriteString("problem: " + p + "\n")
	}
	return b.String()
}
