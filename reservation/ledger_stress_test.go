package reservation_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rv "github.com/gridmgr/gridmgr/reservation"
)

// The stress test runs many goroutines against one ledger with a shared
// virtual clock and checks, after every operation, that no kind is over
// its capacity; at quiescent points, that the accounting matches the
// records and the stored batches; at the end, that no id was issued twice
// and that every grant fitted next to the reservations that were certainly
// live while it was being made.

const stLicense = "licenses.matlab"

var stCaps = map[string]int64{rv.CPUs: 16, rv.Mem: 64 * ltGiB, ltGPUs: 4, stLicense: 2}

// stGrant is a reservation a worker was granted (not a duplicate), with the
// stamps taken just before the call and just after its return.
type stGrant struct {
	id        string
	holder    rv.Holder
	amounts   []rv.Amount
	call, ret int64
}

// stEnd is a call that may have ended reservation id (a release that
// succeeded, or an Expire that reported it lapsed), stamped before the
// call.
type stEnd struct {
	id   string
	call int64
}

// stCheckAvailability checks that every grant fitted: at the moment the
// ledger made it, the reservations that were certainly live then (granted,
// with the grant returned before this call began, and not ended by any
// call that began before this one returned) plus the grant itself must not
// exceed a capacity. This is a lower bound on what was in use, so a
// correct ledger always passes and one that over-commits fails as soon as
// the over-commit is not hidden by concurrency.
func stCheckAvailability(caps map[string]int64, grants []stGrant, ends []stEnd) (tight int, err error) {
	end := make(map[string]int64, len(grants))
	for _, g := range grants {
		end[g.id] = math.MaxInt64
	}
	for _, e := range ends {
		if cur, ok := end[e.id]; ok && e.call < cur {
			end[e.id] = e.call
		}
	}
	byRet := slices.Clone(grants)
	slices.SortFunc(byRet, func(a, b stGrant) int { return int(a.ret - b.ret) })
	byCall := slices.Clone(grants)
	slices.SortFunc(byCall, func(a, b stGrant) int { return int(a.call - b.call) })
	active := map[string]stGrant{} // returned before the current call, not ended before it
	next := 0
	for _, g := range byCall {
		for ; next < len(byRet) && byRet[next].ret < g.call; next++ {
			active[byRet[next].id] = byRet[next]
		}
		used := map[string]int64{}
		for id, r := range active {
			if end[id] <= g.call {
				delete(active, id) // ended before g began: never certainly live again
				continue
			}
			if end[id] > g.ret {
				for _, a := range r.amounts {
					used[a.Kind] += a.N
				}
			}
		}
		for _, a := range g.amounts {
			if used[a.Kind]+a.N == caps[a.Kind] {
				tight++ // would have failed with one unit less of capacity
			}
			if used[a.Kind]+a.N > caps[a.Kind] {
				return tight, fmt.Errorf("grant %s of %s %d (stamps %d..%d) did not fit: %d already certainly in use, capacity %d",
					g.id, a.Kind, a.N, g.call, g.ret, used[a.Kind], caps[a.Kind])
			}
		}
	}
	return tight, nil
}

func TestLedgerStressChecker(t *testing.T) {
	caps := map[string]int64{rv.CPUs: 2}
	base := []stGrant{{id: "a", amounts: ltAm(rv.CPUs, 2), call: 1, ret: 2}}
	// b overlaps nothing and a is live throughout: over-commit.
	over := append(slices.Clone(base), stGrant{id: "b", amounts: ltAm(rv.CPUs, 1), call: 3, ret: 4})
	if _, err := stCheckAvailability(caps, over, nil); err == nil {
		t.Error("an over-commit was not detected")
	}
	// a's release began before b returned: it may have freed in time.
	if _, err := stCheckAvailability(caps, over, []stEnd{{"a", 4}}); err != nil {
		t.Errorf("a legal history was rejected: %v", err)
	}
	// a's release began after b returned: over-commit again.
	if _, err := stCheckAvailability(caps, over, []stEnd{{"a", 5}}); err == nil {
		t.Error("an over-commit before a release was not detected")
	}
	// b was called before a returned: concurrent, could have gone first... and
	// then a would not have fitted, which the check of a catches.
	conc := append(slices.Clone(base), stGrant{id: "b", amounts: ltAm(rv.CPUs, 1), call: 2, ret: 3})
	if _, err := stCheckAvailability(caps, conc, nil); err != nil {
		t.Errorf("concurrent grants rejected: %v", err)
	}
	if _, err := stCheckAvailability(caps, []stGrant{{id: "c", amounts: ltAm(rv.CPUs, 3), call: 1, ret: 2}}, nil); err == nil {
		t.Error("a grant above capacity was not detected")
	}
}

type stEntry struct {
	id     string
	holder rv.Holder
}

// stPool is the ids the workers know, shared so that workers act on each
// other's reservations (as holders' peers, non-holders or admins).
type stPool struct {
	mu  sync.Mutex
	ids []stEntry
	n   int
}

func (p *stPool) add(e stEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ids) < 64 {
		p.ids = append(p.ids, e)
	} else {
		p.ids[p.n%len(p.ids)] = e
	}
	p.n++
}

func (p *stPool) pick(rng *rand.Rand) (stEntry, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ids) == 0 {
		return stEntry{}, false
	}
	return p.ids[rng.IntN(len(p.ids))], true
}

type stReq struct {
	req    rv.Request
	lastID string // the reservation it was last granted, "" if none
}

// stWorker is one goroutine's state and record; it survives phases.
type stWorker struct {
	g      int
	rng    *rand.Rand
	reqs   []stReq
	grants []stGrant
	ends   []stEnd
	n      int
	stats  map[string]int
}

type stEnv struct {
	t       *testing.T
	l       *ownedLedger
	lim     rv.Limits
	clock   atomic.Int64 // virtual time: nanoseconds since ltEpoch
	stamp   atomic.Int64 // real-time order of calls and returns
	peers   []rv.Holder
	pool    stPool
	storeMu sync.Mutex
	store   *ltStore
	failed  atomic.Bool
	ends    []stEnd // lapses seen by quiescent
}

func (e *stEnv) now() time.Time { return ltEpoch.Add(time.Duration(e.clock.Load())) }

func (e *stEnv) fail(format string, args ...any) {
	e.failed.Store(true)
	e.t.Errorf(format, args...)
}

// checkUsage: used ≤ capacity (and ≥ 0) for every kind, in one atomic
// snapshot.
func (e *stEnv) checkUsage(after string) {
	u := e.l.Usage()
	if len(u) != len(stCaps) {
		e.fail("after %s: Usage has %d kinds: %+v", after, len(u), u)
	}
	for _, k := range u {
		if k.Used < 0 || k.Used > k.Capacity || k.Capacity != stCaps[k.Kind] {
			e.fail("after %s: %s used %d of %d (want capacity %d)", after, k.Kind, k.Used, k.Capacity, stCaps[k.Kind])
		}
	}
}

func (e *stEnv) randomAmounts(rng *rand.Rand) []rv.Amount {
	for {
		var out []rv.Amount
		if rng.IntN(2) == 0 {
			out = append(out, rv.Amount{Kind: rv.CPUs, N: 1 + rng.Int64N(4)})
		}
		if rng.IntN(2) == 0 {
			out = append(out, rv.Amount{Kind: rv.Mem, N: (1 + rng.Int64N(8)) * ltGiB})
		}
		if rng.IntN(3) == 0 {
			out = append(out, rv.Amount{Kind: ltGPUs, N: 1 + rng.Int64N(2)})
		}
		if rng.IntN(4) == 0 {
			out = append(out, rv.Amount{Kind: stLicense, N: 1})
		}
		if len(out) > 0 {
			rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
			return out
		}
	}
}

func (e *stEnv) reserve(w *stWorker) {
	rng := w.rng
	var sr *stReq
	if len(w.reqs) > 0 && rng.IntN(5) == 0 {
		sr = &w.reqs[rng.IntN(len(w.reqs))] // a retry
	} else {
		req := rv.Request{
			RequestID: "w" + strconv.Itoa(w.g) + "-" + strconv.Itoa(w.n),
			Holder:    e.peers[rng.IntN(len(e.peers))],
			Amounts:   e.randomAmounts(rng),
		}
		if rng.IntN(2) == 0 {
			req.Hold = time.Duration(1+rng.IntN(5)) * time.Second
		}
		if rng.IntN(3) == 0 {
			req.Commit = true
			req.Lease = time.Duration(rng.IntN(11)) * time.Second // 0: default
		}
		w.reqs = append(w.reqs, stReq{req: req})
		sr = &w.reqs[len(w.reqs)-1]
	}
	call := e.stamp.Add(1)
	var r rv.Reservation
	var dup bool
	var err error
	now := e.l.at(e.now, func(l *rv.Ledger, now time.Time) { r, dup, err = l.Reserve(now, sr.req) })
	ret := e.stamp.Add(1)
	switch {
	case err != nil:
		w.stats["reserve refused"]++
		if rv.CodeOf(err) != rv.CodeRefused {
			e.fail("reserve %s: %v (code %v)", sr.req.RequestID, err, rv.CodeOf(err))
		}
		if sr.lastID != "" {
			// A retry is answered while the first grant is remembered.
			if _, ok := e.l.Get(sr.lastID); ok {
				e.fail("retry of %s refused (%v) while %s is remembered", sr.req.RequestID, err, sr.lastID)
			}
		}
	case dup:
		w.stats["reserve dup"]++
		if r.ID != sr.lastID || sr.lastID == "" {
			e.fail("retry of %s returned %s, granted %q", sr.req.RequestID, r.ID, sr.lastID)
		}
	default:
		w.stats["reserve granted"]++
		if sr.lastID != "" {
			if _, ok := e.l.Get(sr.lastID); ok {
				e.fail("retry of %s granted anew (%s) while %s is remembered", sr.req.RequestID, r.ID, sr.lastID)
			}
		}
		want := slices.Clone(sr.req.Amounts)
		slices.SortFunc(want, func(a, b rv.Amount) int { return cmpString(a.Kind, b.Kind) })
		state := rv.Held
		if sr.req.Commit {
			state = rv.Committed
		}
		if !slices.Equal(r.Amounts, want) || r.Holder != sr.req.Holder || r.State != state || r.Created.Before(now) || r.RequestID != sr.req.RequestID {
			e.fail("grant %+v does not match request %+v", r, sr.req)
		}
		for _, a := range r.Amounts {
			if a.N > stCaps[a.Kind] {
				e.fail("grant %s: %s %d above capacity", r.ID, a.Kind, a.N)
			}
		}
		sr.lastID = r.ID
		w.grants = append(w.grants, stGrant{id: r.ID, holder: r.Holder, amounts: r.Amounts, call: call, ret: ret})
		e.pool.add(stEntry{id: r.ID, holder: r.Holder})
	}
}

func (e *stEnv) apply(w *stWorker) {
	rng := w.rng
	ent, ok := e.pool.pick(rng) // recent, often live
	if len(w.grants) > 0 && rng.IntN(8) == 0 {
		// one of this worker's, from its whole history: often forgotten
		g := w.grants[rng.IntN(len(w.grants))]
		ent, ok = stEntry{id: g.id, holder: g.holder}, true
	}
	if !ok {
		return
	}
	m := rv.Mutation{Op: rv.Op(1 + rng.IntN(3)), ID: ent.id}
	switch x := rng.IntN(20); {
	case x < 12:
		m.By = ent.holder
	case x < 13:
		m.By, m.Admin = e.peers[0], true
	default:
		m.By = e.peers[rng.IntN(len(e.peers))]
	}
	if rng.IntN(4) != 0 {
		m.RequestID = "w" + strconv.Itoa(w.g) + "-op-" + strconv.Itoa(w.n)
	}
	if m.Op != rv.OpRelease && rng.IntN(2) == 0 {
		m.Lease = time.Duration(1+rng.IntN(10)) * time.Second
	}
	call := e.stamp.Add(1)
	var r rv.Reservation
	var dup bool
	var err error
	now := e.l.at(e.now, func(l *rv.Ledger, now time.Time) { r, dup, err = l.Apply(now, m) })
	allowed := m.By.Peer == ent.holder.Peer || m.Admin
	w.stats[m.Op.String()+" "+codeKey(err)]++
	if err != nil {
		switch c := rv.CodeOf(err); {
		case c == rv.CodeForbidden && allowed, c != rv.CodeForbidden && c != rv.CodeNotFound && !allowed:
			e.fail("%v %s by %v (holder %v, admin %v): %v", m.Op, m.ID, m.By, ent.holder, m.Admin, err)
		case c == rv.CodeBadRequest,
			c == rv.CodeRefused,
			c == rv.CodeGone && m.Op == rv.OpRelease,
			c == rv.CodeConflict && m.Op != rv.OpRenew,
			c == 0:
			e.fail("%v %s: unexpected %v (code %v)", m.Op, m.ID, err, c)
		}
		return
	}
	if !allowed {
		e.fail("%v %s by non-holder %v succeeded (holder %v)", m.Op, m.ID, m.By, ent.holder)
	}
	if r.ID != m.ID || r.Holder != ent.holder {
		e.fail("%v %s returned %+v", m.Op, m.ID, r)
	}
	switch m.Op {
	case rv.OpCommit, rv.OpRenew:
		if r.State != rv.Committed {
			e.fail("%v %s: state %v", m.Op, m.ID, r.State)
		}
		if m.Op == rv.OpRenew && !dup {
			lease := m.Lease
			if lease == 0 {
				lease = r.Lease
			}
			if r.Lease != lease || !r.Expires.Equal(now.Add(lease)) {
				e.fail("renew %s at %v lease %v: %+v", m.ID, now, m.Lease, r)
			}
		}
	case rv.OpRelease:
		if r.State != rv.Released && r.State != rv.Expired {
			e.fail("release %s: state %v", m.ID, r.State)
		}
		w.ends = append(w.ends, stEnd{id: m.ID, call: call})
	}
	if dup && !slices.ContainsFunc(r.Ops, func(o rv.OpRecord) bool { return o.RequestID == m.RequestID }) {
		e.fail("%v %s dup without its op record: %+v", m.Op, m.ID, r.Ops)
	}
	// Sometimes retry at once: a duplicate (or, if the op changed nothing and
	// so was not recorded, the same answer again).
	if m.RequestID != "" && rng.IntN(4) == 0 {
		var r2 rv.Reservation
		var dup2 bool
		var err2 error
		e.l.at(e.now, func(l *rv.Ledger, now time.Time) { r2, dup2, err2 = l.Apply(now, m) })
		w.stats["retry"]++
		if err2 == nil && dup2 && r2.ID != r.ID {
			e.fail("retry of %v %s returned %s", m.Op, m.ID, r2.ID)
		}
		if err2 != nil && rv.CodeOf(err2) != rv.CodeNotFound && rv.CodeOf(err2) != rv.CodeGone {
			e.fail("retry of %v %s: %v", m.Op, m.ID, err2)
		}
	}
}

func codeKey(err error) string {
	if err == nil {
		return "ok"
	}
	return rv.CodeOf(err).String()
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (e *stEnv) step(w *stWorker) {
	rng := w.rng
	w.n++
	var what string
	switch x := rng.IntN(100); {
	case x < 38:
		what = "reserve"
		e.reserve(w)
	case x < 70:
		what = "apply"
		e.apply(w)
	case x < 78:
		what = "expire"
		call := e.stamp.Add(1)
		var lapsed []rv.Reservation
		now := e.l.at(e.now, func(l *rv.Ledger, now time.Time) { lapsed = l.Expire(now) })
		for _, r := range lapsed {
			if r.State != rv.Expired || r.Updated != now {
				e.fail("Expire(%v) lapsed %+v", now, r)
			}
			w.ends = append(w.ends, stEnd{id: r.ID, call: call})
		}
	case x < 90:
		what = "tick"
		e.clock.Add(rng.Int64N(int64(400 * time.Millisecond)))
	case x < 94:
		what = "batch"
		e.storeMu.Lock()
		e.store.apply(e.l.TakeBatch())
		e.storeMu.Unlock()
	default:
		what = "read"
		if ent, ok := e.pool.pick(rng); ok {
			if r, ok := e.l.Get(ent.id); ok && (r.ID != ent.id || r.Holder != ent.holder) {
				e.fail("Get(%s) = %+v", ent.id, r)
			}
		}
		if n := e.l.Live(); n < 0 || n > e.lim.MaxLive {
			e.fail("Live = %d", n)
		}
		for k, c := range stCaps {
			if f := e.l.Free(k); f < 0 || f > c {
				e.fail("Free(%s) = %d", k, f)
			}
		}
	}
	e.checkUsage(what)
}

// quiescent checks, with no worker running, that the semaphores equal the
// sums over the live records, that the stored batches reproduce the
// records, and that a restore of the store reproduces the ledger.
func (e *stEnv) quiescent(phase int) {
	t := e.t
	call := e.stamp.Add(1)
	var lapsed []rv.Reservation
	now := e.l.at(e.now, func(l *rv.Ledger, now time.Time) { lapsed = l.Expire(now) })
	for _, r := range lapsed {
		e.ends = append(e.ends, stEnd{id: r.ID, call: call})
	}
	list := e.l.List(nil)
	sums := map[string]int64{}
	live := 0
	for _, r := range list {
		if r.State.Live() {
			live++
			for _, a := range r.Amounts {
				sums[a.Kind] += a.N
			}
		}
	}
	for _, u := range e.l.Usage() {
		if u.Used != sums[u.Kind] {
			t.Errorf("phase %d: %s used %d, live reservations hold %d", phase, u.Kind, u.Used, sums[u.Kind])
		}
	}
	if live != e.l.Live() {
		t.Errorf("phase %d: %d live records, Live() = %d", phase, live, e.l.Live())
	}
	e.storeMu.Lock()
	defer e.storeMu.Unlock()
	e.store.apply(e.l.TakeBatch())
	if len(e.store.recs) != len(list) {
		t.Errorf("phase %d: store has %d records, ledger %d", phase, len(e.store.recs), len(list))
	}
	for _, r := range list {
		if s, ok := e.store.recs[r.ID]; !ok || !reflect.DeepEqual(s, r) {
			t.Errorf("phase %d: store has %+v (%v) for %+v", phase, s, ok, r)
		}
	}
	b := rv.NewLedger("gm-stress", "stress-manager", e.lim)
	for k, c := range stCaps {
		b.SetCapacity(k, c)
	}
	if err := b.Restore(now, e.store.snapshot()); err != nil {
		t.Fatalf("phase %d: restore: %v", phase, err)
	}
	if !reflect.DeepEqual(b.Usage(), e.l.Usage()) || !reflect.DeepEqual(b.List(nil), list) || b.Live() != live || b.Pending() {
		t.Errorf("phase %d: restored ledger differs: %+v vs %+v", phase, b.Usage(), e.l.Usage())
	}
	t.Logf("phase %d at %v: %d records, %d live, usage %+v", phase, time.Duration(e.clock.Load()), len(list), live, e.l.Usage())
}

func TestLedgerStress(t *testing.T) {
	const workers, phases = 64, 4
	opsPerPhase := 200 // per worker
	if testing.Short() {
		opsPerPhase = 25
	}
	lim := rv.Limits{
		HoldTimeout:  5 * time.Second,
		DefaultLease: 4 * time.Second,
		MinLease:     time.Second,
		MaxLease:     10 * time.Second,
		Retain:       20 * time.Second,
		MaxLive:      48,
	}
	e := &stEnv{t: t, lim: lim, l: own(rv.NewLedger("gm-stress", "stress-manager", lim)), store: ltNewStore()}
	for k, c := range stCaps {
		e.l.SetCapacity(k, c)
	}
	for i := range 6 {
		e.peers = append(e.peers, rv.Holder{Peer: "12D3KooWStressPeer" + strconv.Itoa(i), User: "u" + strconv.Itoa(i%3)})
	}
	const seed = 20300102
	ws := make([]*stWorker, workers)
	for g := range ws {
		ws[g] = &stWorker{g: g, rng: rand.New(rand.NewPCG(seed, uint64(g))), stats: map[string]int{}}
	}
	start := time.Now()
	for p := range phases {
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Go(func() {
				for range opsPerPhase {
					if e.failed.Load() {
						return
					}
					e.step(w)
				}
			})
		}
		wg.Wait()
		if e.failed.Load() {
			t.FailNow()
		}
		e.quiescent(p)
	}

	var grants []stGrant
	ends := e.ends
	stats := map[string]int{}
	for _, w := range ws {
		grants = append(grants, w.grants...)
		ends = append(ends, w.ends...)
		for k, v := range w.stats {
			stats[k] += v
		}
	}
	seen := map[string]bool{}
	for _, g := range grants {
		if seen[g.id] {
			t.Errorf("id %s granted twice", g.id)
		}
		seen[g.id] = true
	}
	tight, err := stCheckAvailability(stCaps, grants, ends)
	if err != nil {
		t.Error(err)
	}
	if tight == 0 && !testing.Short() {
		t.Errorf("no grant was checked against a full kind: the availability check had no power")
	}
	// The run must have exercised what it claims to.
	for _, k := range []string{"reserve granted", "reserve refused", "reserve dup", "commit ok", "renew ok", "release ok",
		"commit forbidden", "release forbidden", "commit gone", "renew gone", "renew conflict", "release not found"} {
		if stats[k] == 0 && !testing.Short() {
			t.Errorf("the run never saw %q: %v", k, stats)
		}
	}
	t.Logf("%d grants (%d checked against a full kind), %d ends, %d ops in %v; %v", len(grants), tight, len(ends), workers*phases*opsPerPhase, time.Since(start), stats)
}
