package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/wire"
)

// TestAnsweredQueriesLetGo: once a whole-grid query is answered, no
// manager keeps its part of the walk (the offers, the requests it sent,
// the visits) until its next tick, and a manager that answered at once
// (a leaf) keeps no operation at all. In a whole-grid query of a large
// simulated grid the walks kept were about 1 KB a manager, most of a
// run's peak heap above the grid at rest.
func TestAnsweredQueriesLetGo(t *testing.T) {
	const managers, fanout = 200, 6
	// Ticked only when due, as in the simulator (newNet may tick at
	// every grid time, which would hide what waits for the next tick).
	n := memnet.New(3)
	name := func(i int) string { return fmt.Sprintf("q%03d", i) }
	startTree(t, n, managers, fanout, name, func(int) node.HostValues {
		return node.HostValues{CPUs: 4, Mem: 1 << 30, MemAvail: 1 << 30, CPUUtil: 0.1}
	})
	// From a leaf, up and down: every manager takes part.
	from := name(managers - 1)
	env := n.Ask(pid(from), &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{
		Requirement: "true", Up: 255, Down: 255, Want: 1000, Limit: 1000, BudgetMs: 10000}}}, 20*time.Second)
	rep := env.GetQueryReply()
	if rep == nil || len(rep.Offers) != managers {
		t.Fatalf("the query got %v, want %d offers", env, managers)
	}
	leaves := 0
	for i := range managers {
		c := n.Node(pid(name(i))).Core
		ops, walks := node.QueryOpsHeld(c)
		if walks > 0 {
			t.Errorf("%s still holds %d answered walk(s)", name(i), walks)
		}
		if i*fanout+1 >= managers && name(i) != from { // no inferiors, not the entry
			leaves++
			if ops > 0 {
				t.Errorf("%s (a leaf) still holds %d operation(s) after answering", name(i), ops)
			}
		}
	}
	if leaves < managers/2 {
		t.Fatalf("only %d leaves: the tree is not what the test means", leaves)
	}
}
