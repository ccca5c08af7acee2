package daemon

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	jobstore "github.com/gridmgr/gridmgr/jobs/store"
)

// A manager whose queue never held a job does not look for reservations
// left from before its start (a query of the whole grid, 3 s after every
// start of every manager); one whose queue has handed out a job number
// does, even with no record left.
func TestSweepOnlyAfterJobs(t *testing.T) {
	heard := make(chan bool, 1)
	loadedHook = func(sweep bool) { heard <- sweep }
	defer func() { loadedHook = nil }()
	dir := t.TempDir()
	start := func() bool {
		t.Helper()
		cfg := config.Default()
		cfg.Name = "solo"
		cfg.DataDir = dir
		cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
		cfg.CPUs, cfg.Memory = 2, 4<<30
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		m, err := Start(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Stop()
		select {
		case sweep := <-heard:
			return sweep
		case <-time.After(30 * time.Second):
			t.Fatal("the job queue was not read")
			return false
		}
	}
	if start() {
		t.Fatal("a manager that never queued a job swept the grid at its start")
	}
	st, err := jobstore.Open(filepath.Join(dir, JobsDir))
	if err != nil {
		t.Fatal(err)
	}
	// a job was numbered, ran and was forgotten: no record left
	if err := st.Write(nil, 7, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if !start() {
		t.Fatal("a manager whose queue had handed out job numbers did not sweep")
	}
}
