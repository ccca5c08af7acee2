package daemon

import (
	"context"
	"runtime/debug"
	"sync"
	"time"

	"github.com/gridmgr/gridmgr/internal/memtrim"
)

// trimGap is the least time between two trims in one process, whatever
// the number of managers it runs (tests, demos): the least memory_trim.
const trimGap = 10 * time.Second

// The process's last trim (trimProcess).
var trimmed struct {
	sync.Mutex
	at time.Time
}

// trimProcess lets go of the pages of the executable the process does
// not use (internal/memtrim), unless it did less than trimGap ago; with
// collect, it first collects the garbage and gives its pages back, so
// that the collector's own pages go too. done says whether it did.
func trimProcess(collect bool) (n int64, done bool, err error) {
	trimmed.Lock()
	defer trimmed.Unlock()
	if !trimmed.at.IsZero() && time.Since(trimmed.at) < trimGap {
		return 0, false, nil
	}
	trimmed.at = time.Now()
	if collect {
		debug.FreeOSMemory()
	}
	n, err = memtrim.Executable()
	return n, err == nil, err
}

// startTrim lets go of the pages of the executable that starting the
// manager touched and running it does not use: now (with what starting
// left to collect), and then every memory_trim, until ctx ends.
func (m *Manager) startTrim(ctx context.Context) {
	every := m.Cfg.MemoryTrim
	if every <= 0 {
		return
	}
	trim := func(collect bool) bool {
		n, done, err := trimProcess(collect)
		if err != nil {
			m.log.Warn("cannot let go of the executable's unused pages; memory_trim is off until the manager restarts", "err", err)
			return false
		}
		if done {
			m.log.Debug("let go of the executable's unused pages", "mapped_bytes", n)
		}
		return true
	}
	go func() {
		if !trim(true) {
			return
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if !trim(false) {
					return
				}
			}
		}
	}()
}
