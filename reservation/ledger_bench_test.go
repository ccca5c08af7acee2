package reservation_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	rv "github.com/gridmgr/gridmgr/reservation"
)

// BenchmarkLedger measures ledger operations per second in process, with no
// persistence, and the same work on a baseline measured in the same run:
// one sync.Mutex Lock/Unlock plus one map operation per ledger operation
// (insert for reserve, lookup for commit and renew, delete for release) on
// a map of about the size the ledger keeps (records are retained 1024
// virtual ms, time advances 1ms per iteration). x_baseline is ledger time
// per operation over baseline time per operation, so it is comparable
// between noisy runs. There is no parallel variant: one goroutine owns a
// ledger (the Core's), so requests never contend for it. The steady-state
// upkeep of a
// manager (Expire and TakeBatch, every 256 iterations) is in the timed
// loop.

const (
	lbRetain = 1024 * time.Millisecond
	lbEvery  = 256
	lbKeys   = 1024
)

func lbLedger() *rv.Ledger {
	l := rv.NewLedger(ltName, ltPeer, rv.Limits{Retain: lbRetain, MaxLive: 1 << 30})
	l.SetCapacity(rv.CPUs, 1<<40)
	l.SetCapacity(rv.Mem, 1<<60)
	return l
}

// lbIter does one iteration (2 or 4 ledger operations) at virtual ms i.
func lbIter(b *testing.B, l *rv.Ledger, i int64, full bool) {
	now := ltEpoch.Add(time.Duration(i) * time.Millisecond)
	r, _, err := l.Reserve(now, rv.Request{RequestID: "r" + strconv.FormatInt(i, 10), Holder: ltAlice,
		Amounts: []rv.Amount{{Kind: rv.CPUs, N: 1}, {Kind: rv.Mem, N: ltGiB}}})
	if err != nil {
		b.Error(err) // not Fatal: this may run in a RunParallel goroutine
		return
	}
	m := rv.Mutation{ID: r.ID, By: ltAlice}
	if full {
		m.Op = rv.OpCommit
		if _, _, err := l.Apply(now, m); err != nil {
			b.Error(err)
			return
		}
		m.Op = rv.OpRenew
		if _, _, err := l.Apply(now, m); err != nil {
			b.Error(err)
			return
		}
	}
	m.Op = rv.OpRelease
	if _, _, err := l.Apply(now, m); err != nil {
		b.Error(err)
		return
	}
	if i%lbEvery == 0 {
		l.Expire(now)
		l.TakeBatch()
	}
}

type lbBase struct {
	mu   sync.Mutex
	m    map[string]*rv.Reservation
	keys []string // lbKeys in the map, then lbKeys inserted and deleted by iter
	v    *rv.Reservation
}

func newLBBase() *lbBase {
	s := &lbBase{m: make(map[string]*rv.Reservation, 2*lbKeys), v: &rv.Reservation{}}
	for i := range 2 * lbKeys {
		s.keys = append(s.keys, rv.FormatID(ltName, uint64(i+1), rv.Tag(ltPeer)))
		if i < lbKeys {
			s.m[s.keys[i]] = s.v
		}
	}
	return s
}

var lbSink *rv.Reservation

// iter is the baseline of lbIter: the same number of lock/unlock pairs,
// each with one map operation; the map keeps lbKeys entries.
func (s *lbBase) iter(i int64, full bool) {
	k := s.keys[lbKeys+i%lbKeys]
	s.mu.Lock()
	s.m[k] = s.v
	s.mu.Unlock()
	if full {
		for range 2 {
			s.mu.Lock()
			lbSink = s.m[k]
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	delete(s.m, k)
	s.mu.Unlock()
}

func BenchmarkLedger(b *testing.B) {
	for _, v := range []struct {
		name string
		full bool
	}{
		{"reserve+release", false},
		{"reserve+commit+renew+release", true},
	} {
		ops := 2
		if v.full {
			ops = 4
		}
		b.Run(v.name, func(b *testing.B) {
			// Baseline, same iterations.
			base := newLBBase()
			t0 := time.Now()
			for i := range int64(b.N) {
				base.iter(i, v.full)
			}
			baseNs := float64(time.Since(t0).Nanoseconds()) / float64(int64(b.N)*int64(ops))

			l := lbLedger()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range int64(b.N) {
				lbIter(b, l, i+1, v.full)
			}
			b.StopTimer()
			el := b.Elapsed()
			ledgerNs := float64(el.Nanoseconds()) / float64(int64(b.N)*int64(ops))
			b.ReportMetric(float64(int64(b.N)*int64(ops))/el.Seconds(), "ops/s")
			b.ReportMetric(ledgerNs/baseNs, "x_baseline")
			b.ReportMetric(baseNs, "baseline_ns/op")
			if l.Live() != 0 {
				b.Fatalf("%d reservations left live", l.Live())
			}
		})
	}
}

// BenchmarkCalendar is BenchmarkLedger's full cycle (reserve, commit,
// renew, release) on an empty calendar and on one with 10,000 windows
// booked ahead (an hour each, beginning every minute over a week), in the
// same run: x_empty is the time per operation with the windows ÷ without
// (goal ≤ 1.25, that is ≥ 0.8 of the rate). x_baseline is against the
// same mutex-and-map baseline as BenchmarkLedger, so it compares with the
// ledger before calendars (git stash; go test -bench 'Ledger/reserve\+commit').
//
//	go test -run '^$' -bench 'Calendar' ./reservation/
func BenchmarkCalendar(b *testing.B) {
	const ops = 4
	run := func(windows int) float64 {
		l := lbLedger()
		for i := range windows {
			begin := ltEpoch.Add(time.Hour + time.Duration(i%(7*24*60))*time.Minute)
			if _, _, err := l.Reserve(ltEpoch, rv.Request{RequestID: "w" + strconv.Itoa(i), Holder: ltBob, Commit: true,
				Amounts: []rv.Amount{{Kind: rv.CPUs, N: 1}}, Begin: begin, Duration: time.Hour}); err != nil {
				b.Fatal(err)
			}
		}
		t0 := time.Now()
		for i := range int64(b.N) {
			lbIter(b, l, i+1, true)
		}
		return float64(time.Since(t0).Nanoseconds()) / float64(int64(b.N)*ops)
	}
	base := newLBBase()
	t0 := time.Now()
	for i := range int64(b.N) {
		base.iter(i, true)
	}
	baseNs := float64(time.Since(t0).Nanoseconds()) / float64(int64(b.N)*ops)
	empty := run(0)
	b.ResetTimer()
	booked := run(10_000)
	b.StopTimer()
	b.ReportMetric(empty, "empty_ns/op")
	b.ReportMetric(booked, "booked_ns/op")
	b.ReportMetric(booked/empty, "x_empty")
	b.ReportMetric(booked/baseNs, "x_baseline")
}
