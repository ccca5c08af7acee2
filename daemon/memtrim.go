package daemon

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/gridmgr/gridmgr/internal/memtrim"
)

// trimGap is the least time between two trims in one process, whatever
// the number of managers it runs (tests, demos): the least memory_trim.
const trimGap = 10 * time.Second

// collectBelow bounds the heap trimProcess collects before it trims: a
// manager that has just started holds a few MiB, which a collection
// that gives the free pages back goes through in a millisecond or two.
// A process with a larger heap (one running many managers: the tests,
// the demo) is left to collect at its own pace: giving back every free
// page of hundreds of MiB at once holds the heap's lock long enough to
// delay heartbeats.
const collectBelow = 64 << 20

// heapBytes is the bytes of the heap's live and dead objects, read
// without stopping the world.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// The process's last trim (trimProcess).
var trimmed struct {
	sync.Mutex
	at time.Time
}

// trimProcess lets go of the pages of the executable the process does
// not use (internal/memtrim), unless it did less than trimGap ago; with
// collect, and a heap under collectBelow, it first collects the garbage
// and gives its pages back, so that the collector's own pages go too.
// done says whether it did.
func trimProcess(collect bool) (n int64, done bool, err error) {
	trimmed.Lock()
	defer trimmed.Unlock()
	if !trimmed.at.IsZero() && time.Since(trimmed.at) < trimGap {
		return 0, false, nil
	}
	trimmed.at = time.Now()
	if collect && heapBytes() < collectBelow {
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
