package sim

import (
	"flag"
	"os"
	"testing"

	"github.com/gridmgr/gridmgr/node"
)

// TestMain runs the tests of the simulator with every Core's cached
// deadline checked against a full computation at each answer
// (node.CheckDeadlines): whole scenarios (build, queries, kills,
// restarts, churn, partitions) on one or more workers. Benchmarks run
// without it.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		node.CheckDeadlines = true
	}
	os.Exit(m.Run())
}
