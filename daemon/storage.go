package daemon

import (
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/reservation"
)

// storage is the manager's node.Storage: a writer goroutine that makes
// each Write durable — the reservation changes in the store (one fsynced
// bbolt transaction), the saved superiors in relations.json (atomically),
// the audit records appended and synced — and reports it to the driver.
// The driver's goroutine never waits on the disk: it hands the Write over
// and holds the replies that depend on it until the report arrives.
type storage struct {
	store      reservation.Store // nil: reservations stay in memory
	relations  string            // relations.json path; "" none
	attributes string            // attributes.json path; "" none
	audit      string            // audit.log path; "" none
	writes     chan node.Write
	observe    func(time.Duration) // each write's time (metrics); may be nil

	// killAfter, when > 0, is a test's crash point: the process kills
	// itself with SIGKILL right after its killAfter-th reservation write
	// is synced, before the driver hears of it (and so before any answer
	// that waits for it): KillAfterWritesEnv.
	killAfter int
	resWrites int
}

// KillAfterWritesEnv names the environment variable that makes a manager
// kill itself with SIGKILL right after its Nth reservation write is on
// disk and before it answers the requests of that write (N, a positive
// integer). Only the kill -9 tests set it (cmd/gridmgr durability_test.go).
const KillAfterWritesEnv = "GRIDMGR_TEST_KILL_AFTER_WRITES"

func newStorage(store reservation.Store, relationsFile, attributesFile, auditFile string) *storage {
	// The Applier gives one Write at a time and waits for its report, so
	// one slot is all the channel ever needs.
	s := &storage{store: store, relations: relationsFile, attributes: attributesFile, audit: auditFile, writes: make(chan node.Write, 1)}
	if n, err := strconv.Atoi(os.Getenv(KillAfterWritesEnv)); err == nil && n > 0 {
		s.killAfter = n
	}
	return s
}

// Write implements node.Storage.
func (s *storage) Write(w node.Write) { s.writes <- w }

// run writes until close; report is the driver's Deliver.
func (s *storage) run(report func(node.Input) bool) {
	for w := range s.writes {
		start := time.Now()
		var res node.Written
		if s.store != nil && !w.Reservations.Empty() {
			res.Reservations = s.store.Write(w.Reservations)
			if s.resWrites++; s.killAfter > 0 && s.resWrites == s.killAfter && res.Reservations == nil {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the kill is on its way; report nothing
			}
		}
		if s.relations != "" && w.Relations != nil {
			res.Relations = WriteRelations(s.relations, w.Relations)
		}
		if s.attributes != "" && w.Attributes != nil {
			res.Attributes = WriteAttributes(s.attributes, w.Attributes)
		}
		if s.audit != "" && len(w.Audit) > 0 {
			res.Audit = AppendAudit(s.audit, w.Audit)
		}
		if s.observe != nil {
			s.observe(time.Since(start))
		}
		if !report(node.Input{Kind: node.InputWritten, Written: res}) {
			return
		}
	}
}

// close ends run once the pending write is done.
func (s *storage) close() { close(s.writes) }
