package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/relations"
)

// The deadline cache (node/deadline.go) must answer what a full
// computation answers. Every test of this package checks that after every
// input (CheckDeadlines is set for them all); this one makes sure the
// check is not vacuous on a grid that forms, rests, loses managers,
// heals and gets managers back: the cache answers most calls, and is
// kept across most heartbeats.
func TestDeadlineCacheHolds(t *testing.T) {
	if !node.CheckDeadlines {
		t.Fatal("the tests of node must run with CheckDeadlines")
	}
	g := newRandomGrid(t, 7, 60)
	g.n.RunFor(5 * time.Second)
	for _, m := range []string{"m0003", "m0017", "m0030", "m0041"} {
		g.n.Kill(pid(m))
	}
	g.n.RunFor(10 * time.Second)
	for _, m := range []string{"m0003", "m0030"} {
		g.n.Start(pid(m))
	}
	g.n.RunFor(10 * time.Second)
	var hits, kept uint32
	for _, m := range g.names {
		h, k := node.DeadlineCacheStats(g.n.Node(pid(m)).Core)
		hits += h
		kept += k
	}
	t.Logf("%d answers from the cache, kept across %d heartbeats, over %d events", hits, kept, g.n.Steps)
	if hits == 0 || kept == 0 || uint64(hits) < g.n.Steps/4 {
		t.Fatalf("the cache answered %d times and was kept %d times in %d events: the check above proves little", hits, kept, g.n.Steps)
	}
}

// The check itself: a change the Core was not told of (here a relation's
// silence clock moved back behind its back, which no input does) makes
// the next answer from the cache differ from a full computation, and the
// check panics.
func TestDeadlineCheckCatchesStaleCache(t *testing.T) {
	g := newRandomGrid(t, 3, 8)
	g.n.RunFor(2 * time.Second)
	c := g.n.Node(pid("m0000")).Core
	var inf *relations.Relation
	for _, r := range c.Relations().Inferiors() {
		inf = r
	}
	if inf == nil {
		t.Fatal("m0000 has no inferior")
	}
	now := g.n.Now()
	due := c.NextDeadline(now) // computed, or from the cache already
	if !due.After(now) {
		t.Fatalf("m0000 is due at once (%v at %v): nothing is cached", due, now)
	}
	inf.SetLastHeard(due.Add(-24 * time.Hour)) // now due a day earlier
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("a stale cached deadline was not caught")
		} else if s := fmt.Sprint(r); testing.Verbose() {
			t.Log(s)
		}
	}()
	c.NextDeadline(now)
}

// A caller that reads the ledger through LedgerToRead leaves the cached
// deadline in place (the simulator reads every manager's once a virtual
// second); Ledger, whose caller may change the ledger, does not.
func TestLedgerToReadKeepsTheCache(t *testing.T) {
	g := newRandomGrid(t, 3, 8)
	g.n.RunFor(2 * time.Second)
	c := g.n.Node(pid("m0000")).Core
	now := g.n.Now()
	if due := c.NextDeadline(now); !due.After(now) {
		t.Fatalf("m0000 is due at once (%v at %v): nothing is cached", due, now)
	}
	hits := func() uint32 { h, _ := node.DeadlineCacheStats(c); return h }
	h0 := hits()
	c.LedgerToRead().Usage()
	c.NextDeadline(now)
	if got := hits(); got != h0+1 {
		t.Fatalf("after LedgerToRead, NextDeadline was computed afresh (%d answers from the cache, %d before)", got, h0)
	}
	c.Ledger()
	c.NextDeadline(now)
	if got := hits(); got != h0+1 {
		t.Fatalf("after Ledger, NextDeadline answered from the cache (%d answers from it, %d before)", got, h0+1)
	}
}
