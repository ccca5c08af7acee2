package reservation_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	rv "github.com/gridmgr/gridmgr/reservation"
)

// The calendar property test drives one ledger and a brute-force model of
// its calendar with the same random operations — leases from now, windows
// ahead, commits, renewals, releases, expiry that comes late or not at
// all, time that only moves forward — and checks that every answer is the
// model's (granted or refused, and the window granted), that use at every
// boundary from now on never exceeds a capacity, and that Usage, FreeOver
// and Earliest agree with the model's sums over all instants.

// cmRec is the model's record of one reservation.
type cmRec struct {
	id                   string
	amounts              map[string]int64
	start, end, expires  time.Time
	live, window, commit bool
	lease                time.Duration
}

type calModel struct {
	caps map[string]int64
	recs []*cmRec
	lim  rv.Limits
}

func (m *calModel) liveRecs() []*cmRec {
	var out []*cmRec
	for _, r := range m.recs {
		if r.live {
			out = append(out, r)
		}
	}
	return out
}

// use is what kind has in use at t as seen at now: windows that hold t,
// plus live records whose window is over but that Expire has not lapsed.
func (m *calModel) use(kind string, t, now time.Time) int64 {
	var u int64
	for _, r := range m.liveRecs() {
		if !r.end.After(now) || !t.Before(r.start) && t.Before(r.end) {
			u += r.amounts[kind]
		}
	}
	return u
}

// booked is what the windows of live records hold at t: the calendar,
// which must never exceed a capacity at any instant. (A record whose
// window is over but that Expire has not lapsed yet holds no instant; new
// requests still count it until it lapses, as use.)
func (m *calModel) booked(kind string, t time.Time) int64 {
	var u int64
	for _, r := range m.liveRecs() {
		if !t.Before(r.start) && t.Before(r.end) {
			u += r.amounts[kind]
		}
	}
	return u
}

// peak is the largest use over [s, e) at now, by checking every instant
// where use may change.
func (m *calModel) peak(kind string, s, e, now time.Time) int64 {
	p := m.use(kind, s, now)
	for _, r := range m.liveRecs() {
		for _, t := range []time.Time{r.start, r.end} {
			if t.After(s) && t.Before(e) {
				p = max(p, m.use(kind, t, now))
			}
		}
	}
	return p
}

func (m *calModel) fits(amounts map[string]int64, s, e, now time.Time) bool {
	for k, n := range amounts {
		if m.peak(k, s, e, now)+n > m.caps[k] {
			return false
		}
	}
	return true
}

func (m *calModel) find(id string) *cmRec {
	for _, r := range m.recs {
		if r.id == id {
			return r
		}
	}
	return nil
}

// resize moves r's end if the calendar has room (r's own use excluded
// over the part it adds).
func (m *calModel) resize(r *cmRec, end, now time.Time) bool {
	if end.After(r.end) {
		if !m.fits(r.amounts, r.end, end, now) {
			return false
		}
	}
	r.end = end
	return true
}

func TestCalendarAgainstModel(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) { calendarAgainstModel(t, seed, 2500) })
	}
}

func calendarAgainstModel(t *testing.T, seed uint64, ops int) {
	rng := rand.New(rand.NewPCG(seed, 77))
	lim := rv.Limits{HoldTimeout: 20 * time.Second, DefaultLease: time.Minute, MinLease: time.Second, MaxLease: time.Hour, Retain: time.Minute, MaxWindow: 6 * time.Hour, Horizon: 48 * time.Hour}
	caps := map[string]int64{rv.CPUs: 1 + rng.Int64N(16), ltGPUs: 1 + rng.Int64N(4)}
	l := rv.NewLedger("gm", "calPeer", lim)
	for k, c := range caps {
		l.SetCapacity(k, c)
	}
	m := &calModel{caps: caps, lim: lim.WithDefaults()}
	holder := rv.Holder{Peer: "p1", User: "u"}
	now := ltEpoch
	kinds := []string{rv.CPUs, ltGPUs}
	randAmounts := func() ([]rv.Amount, map[string]int64) {
		var as []rv.Amount
		mm := map[string]int64{}
		for _, k := range kinds {
			if rng.IntN(2) == 0 || len(as) == 0 && k == ltGPUs {
				n := 1 + rng.Int64N(caps[k])
				as = append(as, rv.Amount{Kind: k, N: n})
				mm[k] = n
			}
		}
		return as, mm
	}
	// ahead is a random instant to come: near ones collide, far ones spread.
	ahead := func() time.Time {
		return now.Add(time.Duration(rng.Int64N(int64(3 * time.Hour))).Truncate(time.Minute))
	}
	var ids []string
	for i := range ops {
		now = now.Add(time.Duration(rng.Int64N(int64(90 * time.Second))))
		what := ""
		switch op := rng.IntN(10); {
		case op < 4: // reserve
			as, mm := randAmounts()
			req := rv.Request{RequestID: "r" + strconv.Itoa(i), Holder: holder, Amounts: as, Commit: rng.IntN(2) == 0}
			switch rng.IntN(3) {
			case 0: // a lease from now
				req.Lease = time.Duration(1+rng.IntN(120)) * time.Second
			default: // a window
				req.Begin = ahead()
				req.Duration = time.Duration(1+rng.IntN(120)) * time.Minute
			}
			what = fmt.Sprintf("reserve %+v", req)
			r, _, err := l.Reserve(now, req)
			// The model.
			var s, e time.Time
			hold := lim.HoldTimeout
			if req.Duration == 0 {
				s, e = now, now.Add(req.Lease)
				if !req.Commit {
					e = now.Add(max(hold, req.Lease))
				}
			} else {
				s, e = maxT(req.Begin, now), req.Begin.Add(req.Duration)
			}
			want := e.After(now) && m.fits(mm, s, e, now)
			if want != (err == nil) {
				t.Fatalf("op %d %s: granted %v (err %v), model says %v", i, what, err == nil, err, want)
			}
			if err != nil {
				if rv.CodeOf(err) != rv.CodeRefused && rv.CodeOf(err) != rv.CodeBadRequest {
					t.Fatalf("op %d %s: %v (code %v)", i, what, err, rv.CodeOf(err))
				}
				break
			}
			if !r.Start.Equal(s) || !r.End.Equal(e) {
				t.Fatalf("op %d %s: window [%v, %v), model [%v, %v)", i, what, r.Start, r.End, s, e)
			}
			rec := &cmRec{id: r.ID, amounts: mm, start: s, end: e, live: true, window: req.Duration != 0, commit: req.Commit, lease: req.Lease}
			rec.expires = minT(now.Add(hold), e)
			if req.Commit {
				rec.expires = e
			}
			m.recs = append(m.recs, rec)
			ids = append(ids, r.ID)
		case op < 8 && len(ids) > 0: // commit, renew, release
			id := ids[rng.IntN(len(ids))]
			mu := rv.Mutation{Op: rv.Op(1 + rng.IntN(3)), ID: id, By: holder, Lease: time.Duration(1+rng.IntN(120)) * time.Second}
			what = fmt.Sprintf("%v %s lease %v", mu.Op, id, mu.Lease)
			got, _, err := l.Apply(now, mu)
			rec := m.find(id)
			if rec == nil {
				t.Fatalf("op %d %s: not in the model", i, what)
			}
			if rv.CodeOf(err) == rv.CodeNotFound && !rec.live {
				break // ended, and forgotten after Retain
			}
			ok := true
			switch mu.Op {
			case rv.OpRelease:
				rec.live = false
			case rv.OpCommit:
				switch {
				case !rec.live:
					ok = false
				case rec.commit:
				case rec.window:
					rec.commit, rec.expires = true, rec.end
				default:
					if ok = m.resize(rec, now.Add(mu.Lease), now); ok {
						rec.commit, rec.expires, rec.lease = true, rec.end, mu.Lease
					}
				}
			case rv.OpRenew:
				switch {
				case !rec.live || !rec.commit:
					ok = false
				default:
					if ok = m.resize(rec, maxT(now, rec.start).Add(mu.Lease), now); ok {
						rec.expires, rec.lease = rec.end, mu.Lease
					}
				}
			}
			if ok != (err == nil) {
				t.Fatalf("op %d %s: ok %v (err %v), model says %v", i, what, err == nil, err, ok)
			}
			if err == nil && rec.live && (!got.End.Equal(rec.end) || !got.Expires.Equal(rec.expires)) {
				t.Fatalf("op %d %s: end %v expires %v, model %v %v", i, what, got.End, got.Expires, rec.end, rec.expires)
			}
		default: // expire, or not (a late tick)
			if rng.IntN(3) == 0 {
				break
			}
			what = "expire"
			lapsed := l.Expire(now)
			var want []string
			for _, r := range m.liveRecs() {
				if !r.expires.After(now) {
					r.live = false
					want = append(want, r.id)
				}
			}
			var got []string
			for _, r := range lapsed {
				got = append(got, r.ID)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("op %d expire at %v: lapsed %v, model %v", i, now, got, want)
			}
		}
		// Never over-committed at any boundary from now on, and the
		// ledger's use and free amounts are the model's.
		for _, k := range kinds {
			bounds := []time.Time{now}
			for _, r := range m.liveRecs() {
				bounds = append(bounds, r.start, r.end)
			}
			for _, b := range bounds {
				if b.Before(now) {
					continue
				}
				if u := m.booked(k, b); u > caps[k] {
					t.Fatalf("op %d %s: %s over-committed at %v: %d of %d", i, what, k, b, u, caps[k])
				}
			}
			if got, want := l.Free(k), max(0, caps[k]-m.use(k, now, now)); what != "" && got != want {
				// Free is as of the latest call; after a refused or
				// skipped call that is still now.
				t.Fatalf("op %d %s: Free(%s) = %d, model %d", i, what, k, got, want)
			}
			s := now.Add(time.Duration(rng.Int64N(int64(2 * time.Hour))))
			e := s.Add(time.Duration(1 + rng.Int64N(int64(3*time.Hour))))
			if got, want := l.FreeOver(k, s, e), max(0, caps[k]-m.peak(k, s, e, now)); what != "" && got != want {
				for _, r := range m.recs {
					t.Logf("model %+v", *r)
				}
				for _, r := range l.List(nil) {
					t.Logf("ledger %+v", r)
				}
				t.Fatalf("op %d %s: FreeOver(%s, %v, %v) = %d, model %d", i, what, k, s, e, got, want)
			}
		}
		if i%50 == 0 && what != "" {
			checkEarliest(t, i, l, m, now, rng)
		}
	}
}

func maxT(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func minT(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// checkEarliest compares the ledger's feasible starts for a random request
// with the model's, instant by instant on a minute grid (the test's
// windows begin on whole minutes; leases from now do not, so between grid
// points the answer is checked at each span's ends as well).
func checkEarliest(t *testing.T, i int, l *rv.Ledger, m *calModel, now time.Time, rng *rand.Rand) {
	n := 1 + rng.Int64N(m.caps[rv.CPUs])
	d := time.Duration(1+rng.IntN(90)) * time.Minute
	until := now.Add(4 * time.Hour)
	spans := l.Earliest([]rv.Amount{{Kind: rv.CPUs, N: n}}, now, until, d, 0)
	in := func(t time.Time) bool {
		for _, s := range spans {
			if !t.Before(s.From) && !t.After(s.To) {
				return true
			}
		}
		return false
	}
	ok := func(s time.Time) bool { return m.fits(map[string]int64{rv.CPUs: n}, s, s.Add(d), now) }
	check := func(at time.Time) {
		if at.Before(now) || at.After(until) {
			return
		}
		if in(at) != ok(at) {
			t.Fatalf("op %d: Earliest(cpus %d, %v) spans %v: start %v feasible %v, model %v", i, n, d, spans, at, in(at), ok(at))
		}
	}
	for at := now.Truncate(time.Minute).Add(time.Minute); !at.After(until); at = at.Add(time.Minute) {
		check(at)
	}
	for _, s := range spans {
		check(s.From)
		check(s.To)
	}
	check(now)
}
