package main

import (
	"os"
	"testing"

	"github.com/gridmgr/gridmgr/deploy/runner"
)

// TestMain lets the test binary supervise applications, as gridmgr does:
// the demo and the daemon tests start some.
func TestMain(m *testing.M) {
	runner.MaybeShim()
	os.Exit(m.Run())
}
