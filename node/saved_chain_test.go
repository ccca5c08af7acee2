package node_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/node"
)

// TestSavedChainKeepsWhenTheChainChanges: a saved snapshot of a manager's
// superiors (what the daemon writes to relations.json) shares each
// superior's chain of ancestors with the live relation, to save a copy
// per manager. When a failover above changes the chain, the snapshot
// taken before must still read as it was: the Core replaces a chain, it
// never writes a new one over the old one in place. In a line r ← a ← b
// ← c, killing a makes b adopt r, and c's chain goes from b, a, r to b,
// r: its second entry changes, and an in-place copy would show up in the
// old snapshot.
func TestSavedChainKeepsWhenTheChainChanges(t *testing.T) {
	n := newNet(5)
	names := []string{"r", "a", "b", "c"}
	name := func(i int) string { return names[i] }
	startTree(t, n, len(names), 1, name, func(int) node.HostValues {
		return node.HostValues{CPUs: 1, Mem: 1 << 30, MemAvail: 1 << 30}
	})
	c := n.Node(pid("c"))
	chain := func() string {
		var b strings.Builder
		for _, s := range c.Disk.Relations.Superiors {
			for _, a := range s.Ancestors {
				fmt.Fprintf(&b, "%s@%d ", a.Name, a.Depth)
			}
		}
		return b.String()
	}
	n.RunFor(5 * time.Second) // the chain reaches c with a heartbeat and is saved
	if got := chain(); got != "a@1 r@2 " {
		t.Fatalf("c saved the chain %q, want a@1 r@2", got)
	}
	before := c.Disk.Relations
	want := string(before.Marshal())
	n.Kill(pid("a"))
	if !n.RunUntil(func() bool { return chain() == "r@1 " }, time.Minute) {
		t.Fatalf("c's saved chain is %q a minute after a's death, want r@1", chain())
	}
	if got := string(before.Marshal()); got != want {
		t.Fatalf("the snapshot taken before the failover changed with it:\n got %s\nwant %s", got, want)
	}
}
