package reservation_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	rv "github.com/gridmgr/gridmgr/reservation"
)

// Linearizability of the calendar: concurrent reservations of windows
// (whole hours ahead) and leases from now, releases, and reads of what
// each hour has free, checked with porcupine against a sequential model.
// Time is fixed, so the calendar is hours 0..cnHours-1 from now; a lease
// from now (5 minutes) lies in hour 0, and every window covers whole
// hours, so the model's use per hour is exact.

const cnHours = 5

var cnCaps = [2]int64{6, 2} // cpus, gpus

type cnIn struct {
	op     int // lnReserve, lnRelease, lnRead
	amt    [2]int64
	from   int // first hour; -1: a lease from now
	length int // hours
	seq    uint64
}

type cnOut struct {
	ok   bool
	seq  uint64
	free [cnHours][2]int64 // read: free per hour and kind
}

type cnState struct {
	used [cnHours][2]int64
	next uint64
	live map[uint64]cnIn
}

func (i cnIn) hours() (int, int) {
	if i.from < 0 {
		return 0, 1
	}
	return i.from, i.from + i.length
}

func cnModel(caps [2]int64) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return cnState{next: 1, live: map[uint64]cnIn{}} },
		Step: func(st, in, out any) (bool, any) {
			s, i, o := st.(cnState), in.(cnIn), out.(cnOut)
			switch i.op {
			case lnReserve:
				a, b := i.hours()
				for h := a; h < b; h++ {
					for k := range 2 {
						if s.used[h][k]+i.amt[k] > caps[k] {
							return !o.ok, s
						}
					}
				}
				if !o.ok || o.seq != s.next {
					return false, s
				}
				n := cnState{used: s.used, next: s.next + 1, live: make(map[uint64]cnIn, len(s.live)+1)}
				for q, v := range s.live {
					n.live[q] = v
				}
				for h := a; h < b; h++ {
					for k := range 2 {
						n.used[h][k] += i.amt[k]
					}
				}
				n.live[o.seq] = i
				return true, n
			case lnRelease:
				r, live := s.live[i.seq]
				if !live {
					return !o.ok, s
				}
				if !o.ok {
					return false, s
				}
				n := cnState{used: s.used, next: s.next, live: make(map[uint64]cnIn, len(s.live))}
				for q, v := range s.live {
					if q != i.seq {
						n.live[q] = v
					}
				}
				a, b := r.hours()
				for h := a; h < b; h++ {
					for k := range 2 {
						n.used[h][k] -= r.amt[k]
					}
				}
				return true, n
			default:
				for h := range cnHours {
					for k := range 2 {
						if o.free[h][k] != caps[k]-s.used[h][k] {
							return false, s
						}
					}
				}
				return true, s
			}
		},
		Equal: func(a, b any) bool {
			x, y := a.(cnState), b.(cnState)
			if x.used != y.used || x.next != y.next || len(x.live) != len(y.live) {
				return false
			}
			for q := range x.live {
				if _, ok := y.live[q]; !ok {
					return false
				}
			}
			return true
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(cnIn), out.(cnOut)
			switch i.op {
			case lnReserve:
				return fmt.Sprintf("reserve(%v hours %d+%d) -> %v #%d", i.amt, i.from, i.length, o.ok, o.seq)
			case lnRelease:
				return fmt.Sprintf("release(#%d) -> %v", i.seq, o.ok)
			}
			return fmt.Sprintf("read -> %v", o.free)
		},
	}
}

func cnDo(l *ownedLedger, h rv.Holder, rid string, in cnIn, fail func(string, ...any)) cnOut {
	switch in.op {
	case lnReserve:
		var amounts []rv.Amount
		for k, kind := range lnKinds {
			if in.amt[k] > 0 {
				amounts = append(amounts, rv.Amount{Kind: kind, N: in.amt[k]})
			}
		}
		req := rv.Request{RequestID: rid, Holder: h, Amounts: amounts, Commit: true, Lease: 5 * time.Minute}
		if in.from >= 0 {
			req.Lease, req.Begin, req.Duration = 0, ltEpoch.Add(time.Duration(in.from)*time.Hour), time.Duration(in.length)*time.Hour
		}
		r, _, err := l.Reserve(ltEpoch, req)
		if err != nil {
			if rv.CodeOf(err) != rv.CodeRefused {
				fail("reserve %+v: %v", in, err)
			}
			return cnOut{}
		}
		_, seq, _, _ := rv.ParseID(r.ID)
		return cnOut{ok: true, seq: seq}
	case lnRelease:
		id := rv.FormatID(ltName, in.seq, rv.Tag(ltPeer))
		r, _, err := l.Apply(ltEpoch, rv.Mutation{Op: rv.OpRelease, ID: id, By: ltAdmin, Admin: true, RequestID: rid})
		if err != nil {
			fail("release %s: %v", id, err)
			return cnOut{}
		}
		return cnOut{ok: slices.ContainsFunc(r.Ops, func(o rv.OpRecord) bool { return o.RequestID == rid })}
	default:
		var o cnOut
		l.at(func() time.Time { return ltEpoch }, func(led *rv.Ledger, now time.Time) {
			for hr := range cnHours {
				for k, kind := range lnKinds {
					s := now.Add(time.Duration(hr) * time.Hour)
					o.free[hr][k] = led.FreeOver(kind, s, s.Add(time.Hour))
				}
			}
		})
		return o
	}
}

func cnRun(t *testing.T, seed uint64, clients, ops int) []porcupine.Operation {
	l := rv.NewLedger(ltName, ltPeer, ltLimits())
	for k, kind := range lnKinds {
		l.SetCapacity(kind, cnCaps[k])
	}
	ol := own(l)
	var granted grants
	return concurrentHistory(seed, clients, ops, func(g int) (func(*rand.Rand) cnIn, func(cnIn) cnOut) {
		h := rv.Holder{Peer: "12D3KooWCalPeer" + strconv.Itoa(g)}
		n := 0
		next := func(rng *rand.Rand) cnIn {
			switch x := rng.IntN(10); {
			case x < 5:
				in := cnIn{op: lnReserve, amt: [2]int64{1 + rng.Int64N(3), rng.Int64N(2)}, from: rng.IntN(cnHours+1) - 1}
				if in.from >= 0 {
					in.length = 1 + rng.IntN(cnHours-in.from)
				}
				return in
			case x < 8:
				if seq, ok := granted.pick(rng); ok {
					return cnIn{op: lnRelease, seq: seq}
				}
			}
			return cnIn{op: lnRead}
		}
		do := func(in cnIn) cnOut {
			n++
			out := cnDo(ol, h, "c"+strconv.Itoa(g)+"-"+strconv.Itoa(n), in, t.Errorf)
			if in.op == lnReserve && out.ok {
				granted.add(out.seq)
			}
			return out
		}
		return next, do
	})
}

func TestCalendarLinearizable(t *testing.T) {
	good, wrong := cnModel(cnCaps), cnModel([2]int64{cnCaps[0] + 1, cnCaps[1]})
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	wrongRejected, windows := 0, 0
	for seed := range uint64(seeds) {
		hist := cnRun(t, seed, 6, 30)
		for _, op := range hist {
			if in := op.Input.(cnIn); in.op == lnReserve && in.from >= 0 && op.Output.(cnOut).ok {
				windows++
			}
		}
		if !porcupine.CheckOperations(good, hist) {
			t.Errorf("seed %d: history of %d operations is not linearizable", seed, len(hist))
		}
		if !porcupine.CheckOperations(wrong, hist) {
			wrongRejected++
		}
	}
	t.Logf("%d windows granted; the wrong model rejected %d of %d histories", windows, wrongRejected, seeds)
	if windows == 0 {
		t.Errorf("no window was granted: nothing in time was checked")
	}
	if wrongRejected == 0 {
		t.Errorf("a model with capacity+1 accepted every history: the check cannot fail")
	}
}
