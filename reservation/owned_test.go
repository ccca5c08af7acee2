package reservation_test

import (
	"sync"
	"time"

	rv "github.com/gridmgr/gridmgr/reservation"
)

// ownedLedger lets many goroutines use one ledger the way a manager does:
// one owner at a time (in a manager, the Core's goroutine; here a mutex),
// each operation whole. The stress and linearizability tests drive it from
// many goroutines, so operations interleave in every order the scheduler
// picks.
type ownedLedger struct {
	mu sync.Mutex
	l  *rv.Ledger
}

func own(l *rv.Ledger) *ownedLedger { return &ownedLedger{l: l} }

// at runs f on the ledger with the time clock reads once the ledger is
// taken. The ledger's owner (the Core's goroutine) reads its clock as it
// takes each call, so the times it passes never go back; goroutines that
// read a shared clock before they queue would pass times out of order, and
// a calendar whose present moves back and forth is not the ledger's
// contract.
func (o *ownedLedger) at(clock func() time.Time, f func(l *rv.Ledger, now time.Time)) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := clock()
	f(o.l, now)
	return now
}

func (o *ownedLedger) Reserve(now time.Time, req rv.Request) (rv.Reservation, bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.l.Reserve(now, req)
}

func (o *ownedLedger) Apply(now time.Time, m rv.Mutation) (rv.Reservation, bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.l.Apply(now, m)
}

func (o *ownedLedger) Expire(now time.Time) []rv.Reservation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.l.Expire(now)
}

func (o *ownedLedger) TakeBatch() rv.Batch {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.l.TakeBatch()
}

func (o *ownedLedger) Get(id string) (rv.Reservation, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.l.Get(id)
}

func (o *ownedLedger) List(keep func(*rv.Reservation) bool) []rv.Reservation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.l.List(keep)
}

func (o *ownedLedger) Usage() []rv.Usage {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.l.Usage()
}

func (o *ownedLedger) Free(kind string) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.l.Free(kind)
}

func (o *ownedLedger) Live() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.l.Live()
}

func (o *ownedLedger) SetCapacity(kind string, n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.l.SetCapacity(kind, n)
}
