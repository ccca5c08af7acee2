package node_test

import (
	"testing"

	"github.com/gridmgr/gridmgr/node/memnet"
)

// tickAlways makes newNet tick every Core at every grid time and check
// that a tick before a Core's NextDeadline asks for nothing.
var tickAlways bool

// newNet is memnet.New for the tests of this package: by default Cores
// are ticked only when their NextDeadline is due, as every runtime does.
func newNet(seed uint64) *memnet.Net {
	n := memnet.New(seed)
	n.TickAlways, n.CheckIdle = tickAlways, tickAlways
	return n
}

// A runtime may tick a Core only when NextDeadline says something is due:
// ticking it at every grid time instead must change nothing. Every scenario
// file and the tree tests run here with a Core ticked at every grid time,
// checking at each tick before NextDeadline that the Core asks for nothing,
// and their outputs must be the same as when ticked only when due (the
// same expected files). A NextDeadline that is late for anything fails
// here with the manager, the time and what it asked for.
func TestIdleTicksDoNothing(t *testing.T) {
	tickAlways = true
	defer func() { tickAlways = false }()
	for name, test := range map[string]func(*testing.T){
		"query":              TestQueryScenarios,
		"reserve":            TestReserveScenarios,
		"failover":           TestFailoverScenarios,
		"admin":              TestAdminScenarios,
		"any start order":    TestTreeFormsInAnyStartOrder,
		"heartbeat states":   TestHeartbeatStates,
		"configured cycles":  TestConfiguredCycleNeverForms,
		"two-cycle race":     TestTwoCycleRaceResolves,
		"query brute force":  TestQueryMatchesBruteForce,
		"bad messages":       TestBadMessagesDropped,
		"admin --all leaves": TestAdminAllInferiorLeaves,
	} {
		t.Run(name, test)
	}
}
