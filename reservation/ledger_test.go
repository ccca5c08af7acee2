package reservation_test

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rv "github.com/gridmgr/gridmgr/reservation"
)

// Shared fixtures of the ledger tests. Names start with lt so they do not
// collide with helpers of other test files in this package.

var ltEpoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	ltName = "gm1"
	ltPeer = "12D3KooWManagerOfTheLedgerTests"
	ltGiB  = int64(1) << 30
	ltGPUs = "gpus"
)

var (
	ltAlice = rv.Holder{Peer: "12D3KooWAlicePeer", User: "alice"}
	ltBob   = rv.Holder{Peer: "12D3KooWBobPeer", User: "bob"}
	ltAdmin = rv.Holder{Peer: "12D3KooWAdminPeer", User: "root"}
)

func ltAt(d time.Duration) time.Time { return ltEpoch.Add(d) }

func ltLimits() rv.Limits {
	return rv.Limits{
		HoldTimeout:  30 * time.Second,
		DefaultLease: 5 * time.Minute,
		MinLease:     time.Second,
		MaxLease:     time.Hour,
		Retain:       10 * time.Minute,
		MaxLive:      100,
	}
}

// ltNew is a ledger with cpus 8, mem 16GiB and gpus 2.
func ltNew(t testing.TB) *rv.Ledger {
	t.Helper()
	l := rv.NewLedger(ltName, ltPeer, ltLimits())
	l.SetCapacity(rv.CPUs, 8)
	l.SetCapacity(rv.Mem, 16*ltGiB)
	l.SetCapacity(ltGPUs, 2)
	return l
}

func ltAm(kv ...any) []rv.Amount {
	var out []rv.Amount
	for i := 0; i < len(kv); i += 2 {
		var n int64
		switch v := kv[i+1].(type) {
		case int:
			n = int64(v)
		case int64:
			n = v
		default:
			panic("ltAm: bad amount type")
		}
		out = append(out, rv.Amount{Kind: kv[i].(string), N: n})
	}
	return out
}

func ltReq(rid string, h rv.Holder, amounts []rv.Amount) rv.Request {
	return rv.Request{RequestID: rid, Holder: h, Amounts: amounts}
}

// ltMustReserve reserves or fails the test.
func ltMustReserve(t testing.TB, l *rv.Ledger, now time.Time, req rv.Request) rv.Reservation {
	t.Helper()
	r, dup, err := l.Reserve(now, req)
	if err != nil || dup {
		t.Fatalf("Reserve(%+v) = dup %v, err %v", req, dup, err)
	}
	return r
}

func ltMustApply(t testing.TB, l *rv.Ledger, now time.Time, m rv.Mutation) rv.Reservation {
	t.Helper()
	r, dup, err := l.Apply(now, m)
	if err != nil || dup {
		t.Fatalf("Apply(%v %s) = dup %v, err %v", m.Op, m.ID, dup, err)
	}
	return r
}

// ltWantErr checks err's code and that its message names what was wrong.
func ltWantErr(t testing.TB, err error, code rv.Code, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want %v containing %q", code, subs)
	}
	if got := rv.CodeOf(err); got != code {
		t.Errorf("code = %v, want %v (err %q)", got, code, err)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("message %q does not contain %q", err, s)
		}
	}
}

type ltState struct {
	Usage []rv.Usage
	List  []rv.Reservation
	Live  int
	Next  time.Time
}

func ltCapture(l *rv.Ledger) ltState {
	return ltState{Usage: l.Usage(), List: l.List(nil), Live: l.Live(), Next: l.NextExpiry()}
}

// ltDrain takes the pending batch so that a later change is visible.
func ltDrain(l *rv.Ledger) rv.Batch { return l.TakeBatch() }

// ltUnchanged checks that nothing changed since before was captured on a
// drained ledger whose next sequence number was seq.
func ltUnchanged(t testing.TB, l *rv.Ledger, before ltState, seq uint64) {
	t.Helper()
	if after := ltCapture(l); !reflect.DeepEqual(before, after) {
		t.Errorf("a refused request changed the ledger:\nbefore %+v\nafter  %+v", before, after)
	}
	if l.Pending() {
		t.Errorf("a refused request left a change pending")
	}
	if b := l.TakeBatch(); !b.Empty() || b.NextSeq != seq {
		t.Errorf("a refused request produced batch %+v (want empty, NextSeq %d)", b, seq)
	}
}

func TestLedgerReserveRefusals(t *testing.T) {
	long := strings.Repeat("k", 100)
	many := make([]rv.Amount, rv.MaxKinds+1)
	for i := range many {
		many[i] = rv.Amount{Kind: "k" + strconv.Itoa(i), N: 1}
	}
	type tc struct {
		name string
		req  rv.Request
		code rv.Code
		subs []string
		not  []string // must not be in the message
	}
	base := func(amounts []rv.Amount) rv.Request { return ltReq("req-new", ltAlice, amounts) }
	with := func(r rv.Request, f func(*rv.Request)) rv.Request { f(&r); return r }
	cases := []tc{
		{"zero amount", base(ltAm(rv.CPUs, 0)), rv.CodeBadRequest, []string{"amount of cpus is 0", "positive"}, nil},
		{"negative amount", base(ltAm(rv.CPUs, 1, ltGPUs, -3)), rv.CodeBadRequest, []string{"amount of gpus is -3", "positive"}, nil},
		{"no amounts", base(nil), rv.CodeBadRequest, []string{"names no amounts", "cpus, gpus, mem"}, nil},
		{"unknown kind", base(ltAm("fpga", 1)), rv.CodeBadRequest, []string{`unknown resource kind "fpga"`, "offers cpus, gpus, mem"}, nil},
		{"unknown long kind", base(ltAm(long, 1)), rv.CodeBadRequest, []string{`"` + long[:rv.MaxKindLen] + `…"`, "cpus, gpus, mem"}, []string{long}},
		{"kind named twice", base(ltAm(rv.CPUs, 1, ltGPUs, 1, rv.CPUs, 2)), rv.CodeBadRequest, []string{`kind "cpus" is named twice`}, nil},
		{"too many kinds", base(many), rv.CodeBadRequest, []string{"33 kinds, limit 32"}, nil},
		{"no request id", ltReq("", ltAlice, ltAm(rv.CPUs, 1)), rv.CodeBadRequest, []string{"no request id"}, nil},
		{"request id too long", ltReq(strings.Repeat("r", rv.MaxRequestIDLen+1), ltAlice, ltAm(rv.CPUs, 1)), rv.CodeBadRequest, []string{"request id is longer than 128 bytes"}, nil},
		{"request id not utf8", ltReq("r\xff", ltAlice, ltAm(rv.CPUs, 1)), rv.CodeBadRequest, []string{"not UTF-8"}, nil},
		{"no holder", ltReq("r", rv.Holder{User: "alice"}, ltAm(rv.CPUs, 1)), rv.CodeBadRequest, []string{"no holder"}, nil},
		{"user too long", ltReq("r", rv.Holder{Peer: "p", User: strings.Repeat("u", rv.MaxUserLen+1)}, ltAm(rv.CPUs, 1)), rv.CodeBadRequest, []string{"user longer than 64"}, nil},
		{"group too long", with(base(ltAm(rv.CPUs, 1)), func(r *rv.Request) { r.Group = strings.Repeat("g", rv.MaxGroupLen+1) }), rv.CodeBadRequest, []string{"group longer than 128"}, nil},
		{"hold negative", with(base(ltAm(rv.CPUs, 1)), func(r *rv.Request) { r.Hold = -time.Second }), rv.CodeBadRequest, []string{"hold -1s is out of bounds (0, 30s]"}, nil},
		{"hold too long", with(base(ltAm(rv.CPUs, 1)), func(r *rv.Request) { r.Hold = 31 * time.Second }), rv.CodeBadRequest, []string{"hold 31s is out of bounds (0, 30s]"}, nil},
		{"lease too short", with(base(ltAm(rv.CPUs, 1)), func(r *rv.Request) { r.Commit, r.Lease = true, 500*time.Millisecond }), rv.CodeBadRequest, []string{"lease 500ms is out of bounds [1s, 1h0m0s]"}, nil},
		{"lease too long", with(base(ltAm(rv.CPUs, 1)), func(r *rv.Request) { r.Commit, r.Lease = true, 2*time.Hour }), rv.CodeBadRequest, []string{"lease 2h0m0s is out of bounds [1s, 1h0m0s]"}, nil},
		{"lease negative", with(base(ltAm(rv.CPUs, 1)), func(r *rv.Request) { r.Commit, r.Lease = true, -time.Minute }), rv.CodeBadRequest, []string{"lease -1m0s is out of bounds"}, nil},
		{"not enough cpus", base(ltAm(rv.CPUs, 6)), rv.CodeRefused, []string{"not enough free", "cpus: asked 6, free 5 of 8"}, []string{"gpus", "mem"}},
		{"not enough mem", base(ltAm(rv.Mem, 15*ltGiB)), rv.CodeRefused, []string{"mem: asked 15GiB, free 14GiB of 16GiB"}, nil},
		{"not enough mem odd", base(ltAm(rv.Mem, 15*ltGiB+1)), rv.CodeRefused, []string{"mem: asked 16106127361B, free 14GiB of 16GiB"}, nil},
		// All or nothing: cpus would fit, gpus do not, nothing is taken.
		{"all or nothing", base(ltAm(rv.CPUs, 2, ltGPUs, 2)), rv.CodeRefused, []string{"gpus: asked 2, free 1 of 2"}, []string{"cpus:"}},
		{"every short kind named", base(ltAm(ltGPUs, 2, rv.CPUs, 7, rv.Mem, ltGiB)), rv.CodeRefused, []string{"(cpus: asked 7, free 5 of 8; gpus: asked 2, free 1 of 2)"}, []string{"mem:"}},
		// The existing request id with other amounts is a conflict.
		{"request id reused", ltReq("req-old", ltBob, ltAm(rv.CPUs, 2)), rv.CodeConflict, []string{`request id "req-old" was already used for reservation ` + rv.FormatID(ltName, 1, rv.Tag(ltPeer))}, nil},
		{"request id reused other group", with(ltReq("req-old", ltBob, ltAm(rv.CPUs, 3, ltGPUs, 1, rv.Mem, 2*ltGiB)), func(r *rv.Request) { r.Group = "co-1" }), rv.CodeConflict, []string{"req-old"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := ltNew(t)
			ltMustReserve(t, l, ltAt(0), ltReq("req-old", ltBob, ltAm(rv.CPUs, 3, ltGPUs, 1, rv.Mem, 2*ltGiB)))
			ltDrain(l)
			before := ltCapture(l)
			r, dup, err := l.Reserve(ltAt(time.Second), c.req)
			ltWantErr(t, err, c.code, c.subs...)
			for _, s := range c.not {
				if err != nil && strings.Contains(err.Error(), s) {
					t.Errorf("message %q names %q, which was not wrong", err, s)
				}
			}
			if dup || !reflect.DeepEqual(r, rv.Reservation{}) {
				t.Errorf("refusal returned dup %v and %+v", dup, r)
			}
			ltUnchanged(t, l, before, 2)
		})
	}
}

func TestLedgerReserveGrants(t *testing.T) {
	l := ltNew(t)
	if b := l.TakeBatch(); !b.Empty() || b.NextSeq != 1 {
		t.Fatalf("fresh ledger batch %+v", b)
	}
	req := ltReq("r-1", ltAlice, ltAm(ltGPUs, 1, rv.CPUs, 2)) // unsorted on purpose
	req.Group = "co-7"
	now := ltAt(time.Minute)
	r := ltMustReserve(t, l, now, req)
	want := rv.Reservation{
		ID:        rv.FormatID(ltName, 1, rv.Tag(ltPeer)),
		Holder:    ltAlice,
		Amounts:   ltAm(rv.CPUs, 2, ltGPUs, 1),
		State:     rv.Held,
		Created:   now,
		Updated:   now,
		Expires:   now.Add(30 * time.Second),
		RequestID: "r-1",
		Group:     "co-7",
		Start:     now,                      // a lease from now: its window on the calendar
		End:       now.Add(5 * time.Minute), // the default lease it means to commit with
	}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("reserve:\n got %+v\nwant %+v", r, want)
	}
	if g, ok := l.Get(r.ID); !ok || !reflect.DeepEqual(g, want) {
		t.Errorf("Get = %+v, %v", g, ok)
	}
	if got, want := l.Usage(), []rv.Usage{{rv.CPUs, 8, 2}, {ltGPUs, 2, 1}, {rv.Mem, 16 * ltGiB, 0}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Usage = %+v, want %+v", got, want)
	}
	if l.Free(rv.CPUs) != 6 || l.Free(ltGPUs) != 1 || l.Free(rv.Mem) != 16*ltGiB || l.Free("fpga") != 0 {
		t.Errorf("Free = %d %d %d %d", l.Free(rv.CPUs), l.Free(ltGPUs), l.Free(rv.Mem), l.Free("fpga"))
	}
	if l.Live() != 1 || l.NextExpiry() != now.Add(30*time.Second) {
		t.Errorf("Live %d, NextExpiry %v", l.Live(), l.NextExpiry())
	}

	// A shorter hold, and a reservation committed at once.
	req2 := ltReq("r-2", ltBob, ltAm(rv.Mem, 4*ltGiB))
	req2.Hold = 5 * time.Second
	r2 := ltMustReserve(t, l, now, req2)
	if r2.ID != rv.FormatID(ltName, 2, rv.Tag(ltPeer)) || r2.State != rv.Held || r2.Expires != now.Add(5*time.Second) || r2.Lease != 0 {
		t.Errorf("short hold: %+v", r2)
	}
	req3 := ltReq("r-3", ltBob, ltAm(rv.CPUs, 1))
	req3.Commit = true
	r3 := ltMustReserve(t, l, now, req3)
	if r3.State != rv.Committed || r3.Lease != 5*time.Minute || r3.Expires != now.Add(5*time.Minute) {
		t.Errorf("commit at once, default lease: %+v", r3)
	}
	req4 := ltReq("r-4", ltBob, ltAm(rv.CPUs, 1))
	req4.Commit, req4.Lease = true, 20*time.Minute
	r4 := ltMustReserve(t, l, now, req4)
	if r4.State != rv.Committed || r4.Lease != 20*time.Minute || r4.Expires != now.Add(20*time.Minute) {
		t.Errorf("commit at once, lease: %+v", r4)
	}
	// Exactly the capacity is granted.
	ltMustReserve(t, l, now, ltReq("r-5", ltBob, ltAm(rv.CPUs, 4, ltGPUs, 1, rv.Mem, 12*ltGiB)))
	for _, u := range l.Usage() {
		if u.Used != u.Capacity || u.Free() != 0 {
			t.Errorf("after filling: %+v free %d", u, u.Free())
		}
	}
	if l.Live() != 5 {
		t.Errorf("Live = %d", l.Live())
	}
	b := l.TakeBatch()
	if b.NextSeq != 6 || len(b.Changes) != 5 {
		t.Fatalf("batch %+v", b)
	}
	for i, c := range b.Changes {
		if c.ID != rv.FormatID(ltName, uint64(i+1), rv.Tag(ltPeer)) || c.Rec == nil || c.Rec.ID != c.ID {
			t.Errorf("change %d = %+v", i, c)
		}
	}
	if !reflect.DeepEqual(*b.Changes[0].Rec, want) {
		t.Errorf("batch record %+v, want %+v", *b.Changes[0].Rec, want)
	}
}

func TestLedgerMaxLive(t *testing.T) {
	lim := ltLimits()
	lim.MaxLive = 2
	l := rv.NewLedger(ltName, ltPeer, lim)
	l.SetCapacity(rv.CPUs, 100)
	a := ltMustReserve(t, l, ltEpoch, ltReq("a", ltAlice, ltAm(rv.CPUs, 1)))
	ltMustReserve(t, l, ltEpoch, ltReq("b", ltAlice, ltAm(rv.CPUs, 1)))
	ltDrain(l)
	before := ltCapture(l)
	_, _, err := l.Reserve(ltEpoch, ltReq("c", ltAlice, ltAm(rv.CPUs, 1)))
	ltWantErr(t, err, rv.CodeRefused, "already has 2 live reservations, its limit")
	ltUnchanged(t, l, before, 3)
	// A retry is still answered when the ledger is full.
	if r, dup, err := l.Reserve(ltEpoch, ltReq("a", ltAlice, ltAm(rv.CPUs, 1))); err != nil || !dup || r.ID != a.ID {
		t.Errorf("retry when full: %v %v %v", r.ID, dup, err)
	}
	ltMustApply(t, l, ltEpoch, rv.Mutation{Op: rv.OpRelease, ID: a.ID, By: ltAlice})
	ltMustReserve(t, l, ltEpoch, ltReq("c", ltAlice, ltAm(rv.CPUs, 1)))
}

func TestLedgerReserveRetry(t *testing.T) {
	l := ltNew(t)
	req := ltReq("r-1", ltAlice, ltAm(rv.CPUs, 2, ltGPUs, 1))
	req.Group = "co"
	r := ltMustReserve(t, l, ltAt(0), req)
	ltDrain(l)
	before := ltCapture(l)

	// Same request, amounts in another order, later: the same reservation.
	retry := ltReq("r-1", ltAlice, ltAm(ltGPUs, 1, rv.CPUs, 2))
	retry.Group = "co"
	retry.Hold = 10 * time.Second // not part of the identity of a request
	got, dup, err := l.Reserve(ltAt(time.Second), retry)
	if err != nil || !dup || !reflect.DeepEqual(got, r) {
		t.Fatalf("retry = %+v dup %v err %v, want %+v", got, dup, err, r)
	}
	ltUnchanged(t, l, before, 2)

	// Same request id, other amounts or group: a conflict, nothing taken.
	for _, bad := range []rv.Request{
		ltReq("r-1", ltAlice, ltAm(rv.CPUs, 3, ltGPUs, 1)),
		ltReq("r-1", ltAlice, ltAm(rv.CPUs, 2)),
		ltReq("r-1", ltAlice, ltAm(rv.CPUs, 2, ltGPUs, 1)), // no group
	} {
		_, _, err := l.Reserve(ltAt(time.Second), bad)
		ltWantErr(t, err, rv.CodeConflict, `"r-1"`, r.ID, "other amounts")
		ltUnchanged(t, l, before, 2)
	}

	// Same request id from another peer is another request; the user
	// (stated, not authenticated) does not matter.
	other := retry
	other.Holder = rv.Holder{Peer: ltBob.Peer, User: ltAlice.User}
	r2, dup, err := l.Reserve(ltAt(time.Second), other)
	if err != nil || dup || r2.ID == r.ID || r2.Holder != other.Holder {
		t.Fatalf("other peer: %+v dup %v err %v", r2, dup, err)
	}
	if l.Free(rv.CPUs) != 4 || l.Free(ltGPUs) != 0 {
		t.Errorf("free after two grants: cpus %d gpus %d", l.Free(rv.CPUs), l.Free(ltGPUs))
	}

	// A retry after the release gets the released reservation back, and
	// takes nothing.
	ltMustApply(t, l, ltAt(2*time.Second), rv.Mutation{Op: rv.OpRelease, ID: r.ID, By: ltAlice})
	ltDrain(l)
	before = ltCapture(l)
	got, dup, err = l.Reserve(ltAt(3*time.Second), retry)
	if err != nil || !dup || got.ID != r.ID || got.State != rv.Released {
		t.Fatalf("retry after release = %+v dup %v err %v", got, dup, err)
	}
	ltUnchanged(t, l, before, 3)
}

// ltApplyFixture: a ledger at ltAt(2s) with alice's reservations in every
// state. held has hold 30s; committed was committed with request id
// "commit-1"; released was released; expired lapsed at 1s.
type ltApplyFixture struct {
	l                                  *rv.Ledger
	held, committed, released, expired rv.Reservation
	now                                time.Time
	nextSeq                            uint64
}

func ltNewApplyFixture(t *testing.T) *ltApplyFixture {
	t.Helper()
	l := ltNew(t)
	f := &ltApplyFixture{l: l, now: ltAt(2 * time.Second), nextSeq: 5}
	f.held = ltMustReserve(t, l, ltAt(0), ltReq("h", ltAlice, ltAm(rv.CPUs, 1)))
	c := ltMustReserve(t, l, ltAt(0), ltReq("c", ltAlice, ltAm(rv.CPUs, 1)))
	f.committed = ltMustApply(t, l, ltAt(0), rv.Mutation{Op: rv.OpCommit, ID: c.ID, By: ltAlice, RequestID: "commit-1"})
	r := ltMustReserve(t, l, ltAt(0), ltReq("r", ltAlice, ltAm(ltGPUs, 1)))
	f.released = ltMustApply(t, l, ltAt(0), rv.Mutation{Op: rv.OpRelease, ID: r.ID, By: ltAlice})
	e := rv.Request{RequestID: "e", Holder: ltAlice, Amounts: ltAm(ltGPUs, 1), Hold: time.Second}
	ltMustReserve(t, l, ltAt(0), e)
	lapsed := l.Expire(ltAt(time.Second))
	if len(lapsed) != 1 || lapsed[0].RequestID != "e" || lapsed[0].State != rv.Expired {
		t.Fatalf("fixture: lapsed %+v", lapsed)
	}
	f.expired = lapsed[0]
	ltDrain(l)
	return f
}

func TestLedgerApplyRefusals(t *testing.T) {
	long := strings.Repeat("q", rv.MaxRequestIDLen+1)
	cases := []struct {
		name string
		m    func(f *ltApplyFixture) rv.Mutation
		code rv.Code
		subs func(f *ltApplyFixture) []string
	}{
		{"op zero", func(f *ltApplyFixture) rv.Mutation { return rv.Mutation{ID: f.held.ID, By: ltAlice} },
			rv.CodeBadRequest, func(*ltApplyFixture) []string { return []string{"unknown operation op(0)"} }},
		{"op out of range", func(f *ltApplyFixture) rv.Mutation {
			return rv.Mutation{Op: rv.OpRelease + 1, ID: f.held.ID, By: ltAlice}
		},
			rv.CodeBadRequest, func(*ltApplyFixture) []string { return []string{"unknown operation op(4)"} }},
		{"request id too long", func(f *ltApplyFixture) rv.Mutation {
			return rv.Mutation{Op: rv.OpRelease, ID: f.held.ID, By: ltAlice, RequestID: long}
		}, rv.CodeBadRequest, func(*ltApplyFixture) []string { return []string{"request id is longer than 128 bytes"} }},
		{"unknown id", func(f *ltApplyFixture) rv.Mutation {
			return rv.Mutation{Op: rv.OpRelease, ID: rv.FormatID(ltName, 99, rv.Tag(ltPeer)), By: ltAlice}
		}, rv.CodeNotFound, func(*ltApplyFixture) []string {
			return []string{rv.FormatID(ltName, 99, rv.Tag(ltPeer)), "unknown here", "forgotten 10m0s"}
		}},
		{"other manager's id", func(f *ltApplyFixture) rv.Mutation {
			return rv.Mutation{Op: rv.OpCommit, ID: rv.FormatID("gm2", 1, rv.Tag("other")), By: ltAlice}
		}, rv.CodeNotFound, func(*ltApplyFixture) []string {
			return []string{rv.FormatID("gm2", 1, rv.Tag("other")), "not this manager's", "tag " + rv.Tag(ltPeer)}
		}},
		{"malformed id", func(f *ltApplyFixture) rv.Mutation { return rv.Mutation{Op: rv.OpRenew, ID: "gm1/17", By: ltAlice} },
			rv.CodeNotFound, func(*ltApplyFixture) []string { return []string{`"gm1/17"`, "malformed", "NAME-SEQ-TAG"} }},
		{"commit by non-holder", func(f *ltApplyFixture) rv.Mutation { return rv.Mutation{Op: rv.OpCommit, ID: f.held.ID, By: ltBob} },
			rv.CodeForbidden, func(f *ltApplyFixture) []string {
				return []string{f.held.ID, "held by user alice", "only its holder or an admin may commit"}
			}},
		{"renew by non-holder", func(f *ltApplyFixture) rv.Mutation { return rv.Mutation{Op: rv.OpRenew, ID: f.committed.ID, By: ltBob} },
			rv.CodeForbidden, func(f *ltApplyFixture) []string { return []string{f.committed.ID, "may renew"} }},
		{"release by non-holder", func(f *ltApplyFixture) rv.Mutation { return rv.Mutation{Op: rv.OpRelease, ID: f.held.ID, By: ltBob} },
			rv.CodeForbidden, func(f *ltApplyFixture) []string { return []string{f.held.ID, "may release"} }},
		{"release of a released one by non-holder", func(f *ltApplyFixture) rv.Mutation {
			return rv.Mutation{Op: rv.OpRelease, ID: f.released.ID, By: ltBob}
		}, rv.CodeForbidden, func(f *ltApplyFixture) []string { return []string{f.released.ID} }},
		{"same user other peer", func(f *ltApplyFixture) rv.Mutation {
			return rv.Mutation{Op: rv.OpRelease, ID: f.held.ID, By: rv.Holder{Peer: ltBob.Peer, User: ltAlice.User}}
		}, rv.CodeForbidden, func(f *ltApplyFixture) []string { return []string{f.held.ID} }},
		{"commit lease too short", func(f *ltApplyFixture) rv.Mutation {
			return rv.Mutation{Op: rv.OpCommit, ID: f.held.ID, By: ltAlice, Lease: time.Millisecond}
		}, rv.CodeBadRequest, func(*ltApplyFixture) []string { return []string{"lease 1ms is out of bounds [1s, 1h0m0s]"} }},
		{"commit lease too long", func(f *ltApplyFixture) rv.Mutation {
			return rv.Mutation{Op: rv.OpCommit, ID: f.held.ID, By: ltAlice, Lease: 61 * time.Minute}
		}, rv.CodeBadRequest, func(*ltApplyFixture) []string { return []string{"lease 1h1m0s is out of bounds"} }},
		{"renew lease too short", func(f *ltApplyFixture) rv.Mutation {
			return rv.Mutation{Op: rv.OpRenew, ID: f.committed.ID, By: ltAlice, Lease: -time.Second}
		}, rv.CodeBadRequest, func(*ltApplyFixture) []string { return []string{"lease -1s is out of bounds"} }},
		{"renew lease too long", func(f *ltApplyFixture) rv.Mutation {
			return rv.Mutation{Op: rv.OpRenew, ID: f.committed.ID, By: ltAdmin, Admin: true, Lease: 2 * time.Hour}
		}, rv.CodeBadRequest, func(*ltApplyFixture) []string { return []string{"lease 2h0m0s is out of bounds"} }},
		{"renew of held", func(f *ltApplyFixture) rv.Mutation { return rv.Mutation{Op: rv.OpRenew, ID: f.held.ID, By: ltAlice} },
			rv.CodeConflict, func(f *ltApplyFixture) []string {
				return []string{f.held.ID, "is held, not committed", "commit it first", "2030-01-02T03:04:35Z"}
			}},
		{"commit of released", func(f *ltApplyFixture) rv.Mutation {
			return rv.Mutation{Op: rv.OpCommit, ID: f.released.ID, By: ltAlice}
		},
			rv.CodeGone, func(f *ltApplyFixture) []string {
				return []string{f.released.ID, "cannot be committed: it is released (released by its holder)"}
			}},
		{"renew of released", func(f *ltApplyFixture) rv.Mutation {
			return rv.Mutation{Op: rv.OpRenew, ID: f.released.ID, By: ltAlice}
		},
			rv.CodeGone, func(f *ltApplyFixture) []string { return []string{f.released.ID, "cannot be renewed: it is released"} }},
		{"commit of expired", func(f *ltApplyFixture) rv.Mutation {
			return rv.Mutation{Op: rv.OpCommit, ID: f.expired.ID, By: ltAdmin, Admin: true}
		}, rv.CodeGone, func(f *ltApplyFixture) []string {
			return []string{f.expired.ID, "cannot be committed: it is expired (hold timed out)"}
		}},
		{"renew of expired", func(f *ltApplyFixture) rv.Mutation { return rv.Mutation{Op: rv.OpRenew, ID: f.expired.ID, By: ltAlice} },
			rv.CodeGone, func(f *ltApplyFixture) []string { return []string{f.expired.ID, "cannot be renewed: it is expired"} }},
		{"request id used for another op", func(f *ltApplyFixture) rv.Mutation {
			return rv.Mutation{Op: rv.OpRenew, ID: f.committed.ID, By: ltAlice, RequestID: "commit-1"}
		}, rv.CodeConflict, func(f *ltApplyFixture) []string {
			return []string{`request id "commit-1" was already used to commit reservation ` + f.committed.ID}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := ltNewApplyFixture(t)
			before := ltCapture(f.l)
			r, dup, err := f.l.Apply(f.now, c.m(f))
			ltWantErr(t, err, c.code, c.subs(f)...)
			if dup || !reflect.DeepEqual(r, rv.Reservation{}) {
				t.Errorf("refusal returned dup %v and %+v", dup, r)
			}
			ltUnchanged(t, f.l, before, f.nextSeq)
		})
	}
}

func TestLedgerApplyCommitRenewRelease(t *testing.T) {
	l := ltNew(t)
	r := ltMustReserve(t, l, ltAt(0), ltReq("a", ltAlice, ltAm(rv.CPUs, 2)))
	ltDrain(l)

	c := ltMustApply(t, l, ltAt(time.Second), rv.Mutation{Op: rv.OpCommit, ID: r.ID, By: ltAlice})
	if c.State != rv.Committed || c.Lease != 5*time.Minute || c.Expires != ltAt(time.Second+5*time.Minute) || c.Updated != ltAt(time.Second) || c.Created != ltAt(0) {
		t.Errorf("commit, default lease: %+v", c)
	}
	if b := l.TakeBatch(); len(b.Changes) != 1 || !reflect.DeepEqual(*b.Changes[0].Rec, c) {
		t.Errorf("commit batch %+v", b)
	}
	// Committing a committed one returns it unchanged and writes nothing.
	before := ltCapture(l)
	if again, dup, err := l.Apply(ltAt(2*time.Second), rv.Mutation{Op: rv.OpCommit, ID: r.ID, By: ltAlice, Lease: time.Hour}); err != nil || dup || !reflect.DeepEqual(again, c) {
		t.Errorf("second commit = %+v dup %v err %v", again, dup, err)
	}
	ltUnchanged(t, l, before, 2)

	// Renew with no lease keeps the lease length; with one, changes it.
	n := ltMustApply(t, l, ltAt(time.Minute), rv.Mutation{Op: rv.OpRenew, ID: r.ID, By: ltAlice})
	if n.Lease != 5*time.Minute || n.Expires != ltAt(6*time.Minute) {
		t.Errorf("renew, no lease: %+v", n)
	}
	n = ltMustApply(t, l, ltAt(2*time.Minute), rv.Mutation{Op: rv.OpRenew, ID: r.ID, By: ltAlice, Lease: 30 * time.Minute})
	if n.Lease != 30*time.Minute || n.Expires != ltAt(32*time.Minute) {
		t.Errorf("renew, lease: %+v", n)
	}
	n = ltMustApply(t, l, ltAt(3*time.Minute), rv.Mutation{Op: rv.OpRenew, ID: r.ID, By: ltAlice})
	if n.Lease != 30*time.Minute || n.Expires != ltAt(33*time.Minute) {
		t.Errorf("renew keeps the last lease: %+v", n)
	}

	// Release frees, records who and when.
	rel := ltMustApply(t, l, ltAt(4*time.Minute), rv.Mutation{Op: rv.OpRelease, ID: r.ID, By: ltAlice})
	if rel.State != rv.Released || rel.Reason != "released by its holder" || rel.Updated != ltAt(4*time.Minute) || rel.Expires != ltAt(14*time.Minute) {
		t.Errorf("release: %+v", rel)
	}
	if l.Free(rv.CPUs) != 8 || l.Live() != 0 {
		t.Errorf("after release: free %d live %d", l.Free(rv.CPUs), l.Live())
	}
	// A commit with a lease: held → committed with that lease.
	r2 := ltMustReserve(t, l, ltAt(5*time.Minute), ltReq("b", ltAlice, ltAm(rv.CPUs, 1)))
	c2 := ltMustApply(t, l, ltAt(5*time.Minute), rv.Mutation{Op: rv.OpCommit, ID: r2.ID, By: ltAlice, Lease: 2 * time.Second})
	if c2.Lease != 2*time.Second || c2.Expires != ltAt(5*time.Minute+2*time.Second) {
		t.Errorf("commit with lease: %+v", c2)
	}
}

func TestLedgerApplyByAdmin(t *testing.T) {
	l := ltNew(t)
	a := ltMustReserve(t, l, ltAt(0), ltReq("a", ltAlice, ltAm(rv.CPUs, 1)))
	adm := rv.Mutation{ID: a.ID, By: ltAdmin, Admin: true}
	adm.Op = rv.OpCommit
	if r := ltMustApply(t, l, ltAt(1), adm); r.State != rv.Committed || r.Holder != ltAlice {
		t.Errorf("admin commit: %+v", r)
	}
	adm.Op = rv.OpRenew
	if r := ltMustApply(t, l, ltAt(2), adm); r.Expires != ltAt(2).Add(5*time.Minute) || r.Holder != ltAlice {
		t.Errorf("admin renew: %+v", r)
	}
	adm.Op = rv.OpRelease
	r := ltMustApply(t, l, ltAt(3), adm)
	if r.State != rv.Released || !strings.Contains(r.Reason, "released by admin user root") || r.Holder != ltAlice {
		t.Errorf("admin release: %+v", r)
	}
	// The holder releasing with Admin set is still "its holder".
	b := ltMustReserve(t, l, ltAt(0), ltReq("b", ltAdmin, ltAm(rv.CPUs, 1)))
	if r := ltMustApply(t, l, ltAt(3), rv.Mutation{Op: rv.OpRelease, ID: b.ID, By: ltAdmin, Admin: true}); r.Reason != "released by its holder" {
		t.Errorf("holder admin release reason %q", r.Reason)
	}
}

func TestLedgerReleaseIdempotent(t *testing.T) {
	l := ltNew(t)
	r := ltMustReserve(t, l, ltAt(0), ltReq("a", ltAlice, ltAm(rv.CPUs, 3)))
	first := ltMustApply(t, l, ltAt(time.Second), rv.Mutation{Op: rv.OpRelease, ID: r.ID, By: ltAlice, RequestID: "rel-1"})
	ltDrain(l)
	before := ltCapture(l)
	for i, m := range []rv.Mutation{
		{Op: rv.OpRelease, ID: r.ID, By: ltAlice},
		{Op: rv.OpRelease, ID: r.ID, By: ltAlice, RequestID: "rel-2"},
		{Op: rv.OpRelease, ID: r.ID, By: ltAdmin, Admin: true},
	} {
		got, dup, err := l.Apply(ltAt(time.Minute), m)
		if err != nil || dup || !reflect.DeepEqual(got, first) {
			t.Errorf("release %d again = %+v dup %v err %v, want %+v", i, got, dup, err, first)
		}
		ltUnchanged(t, l, before, 2)
	}
	// The retry of the release itself is a duplicate.
	if got, dup, err := l.Apply(ltAt(time.Minute), rv.Mutation{Op: rv.OpRelease, ID: r.ID, By: ltAlice, RequestID: "rel-1"}); err != nil || !dup || !reflect.DeepEqual(got, first) {
		t.Errorf("release retry = %+v dup %v err %v", got, dup, err)
	}
	ltUnchanged(t, l, before, 2)
	// Releasing an expired one: unchanged, still expired.
	e := ltMustReserve(t, l, ltAt(0), rv.Request{RequestID: "e", Holder: ltAlice, Amounts: ltAm(rv.CPUs, 1), Hold: time.Second})
	l.Expire(ltAt(time.Second))
	ltDrain(l)
	before = ltCapture(l)
	if got, dup, err := l.Apply(ltAt(time.Minute), rv.Mutation{Op: rv.OpRelease, ID: e.ID, By: ltAlice}); err != nil || dup || got.State != rv.Expired {
		t.Errorf("release of expired = %+v dup %v err %v", got, dup, err)
	}
	ltUnchanged(t, l, before, 3)
}

func TestLedgerApplyRetry(t *testing.T) {
	l := ltNew(t)
	r := ltMustReserve(t, l, ltAt(0), ltReq("a", ltAlice, ltAm(rv.CPUs, 1)))
	c := ltMustApply(t, l, ltAt(time.Second), rv.Mutation{Op: rv.OpCommit, ID: r.ID, By: ltAlice, RequestID: "c1"})
	if len(c.Ops) != 1 || c.Ops[0] != (rv.OpRecord{RequestID: "c1", Op: rv.OpCommit, State: rv.Committed, Expires: c.Expires}) {
		t.Errorf("op record %+v", c.Ops)
	}
	n := ltMustApply(t, l, ltAt(time.Minute), rv.Mutation{Op: rv.OpRenew, ID: r.ID, By: ltAlice, RequestID: "n1"})
	if n.Expires != ltAt(6*time.Minute) {
		t.Fatalf("renew: %+v", n)
	}
	ltDrain(l)
	before := ltCapture(l)
	// Retries: duplicates, no change; the renew retry does not extend again.
	for _, m := range []rv.Mutation{
		{Op: rv.OpRenew, ID: r.ID, By: ltAlice, RequestID: "n1"},
		{Op: rv.OpRenew, ID: r.ID, By: ltAlice, RequestID: "n1", Lease: time.Hour},
		{Op: rv.OpCommit, ID: r.ID, By: ltAlice, RequestID: "c1"},
	} {
		got, dup, err := l.Apply(ltAt(3*time.Minute), m)
		if err != nil || !dup || !reflect.DeepEqual(got, n) {
			t.Errorf("retry %v %s = %+v dup %v err %v, want %+v", m.Op, m.RequestID, got, dup, err, n)
		}
		ltUnchanged(t, l, before, 2)
	}
	// A retry by another peer is still refused: the holder check comes first.
	_, _, err := l.Apply(ltAt(3*time.Minute), rv.Mutation{Op: rv.OpRenew, ID: r.ID, By: ltBob, RequestID: "n1"})
	ltWantErr(t, err, rv.CodeForbidden)
	ltUnchanged(t, l, before, 2)
	// A new request id renews.
	if n2 := ltMustApply(t, l, ltAt(3*time.Minute), rv.Mutation{Op: rv.OpRenew, ID: r.ID, By: ltAlice, RequestID: "n2"}); n2.Expires != ltAt(8*time.Minute) {
		t.Errorf("new renew: %+v", n2)
	}
}

func TestLedgerOpRecordsBounded(t *testing.T) {
	l := ltNew(t)
	r := ltMustReserve(t, l, ltAt(0), ltReq("a", ltAlice, ltAm(rv.CPUs, 1)))
	ltMustApply(t, l, ltAt(0), rv.Mutation{Op: rv.OpCommit, ID: r.ID, By: ltAlice, RequestID: "n0"})
	var last rv.Reservation
	for i := 1; i <= 10; i++ {
		last = ltMustApply(t, l, ltAt(time.Duration(i)*time.Second), rv.Mutation{Op: rv.OpRenew, ID: r.ID, By: ltAlice, RequestID: "n" + strconv.Itoa(i)})
	}
	if len(last.Ops) != 8 || last.Ops[0].RequestID != "n3" || last.Ops[7].RequestID != "n10" {
		t.Fatalf("ops kept: %+v", last.Ops)
	}
	// The latest is recognised, the forgotten oldest is not.
	if _, dup, err := l.Apply(ltAt(20*time.Second), rv.Mutation{Op: rv.OpRenew, ID: r.ID, By: ltAlice, RequestID: "n10"}); err != nil || !dup {
		t.Errorf("latest retry: dup %v err %v", dup, err)
	}
	if got, dup, err := l.Apply(ltAt(20*time.Second), rv.Mutation{Op: rv.OpRenew, ID: r.ID, By: ltAlice, RequestID: "n1"}); err != nil || dup || got.Expires != ltAt(20*time.Second+5*time.Minute) {
		t.Errorf("forgotten retry: %+v dup %v err %v", got, dup, err)
	}
}

func TestLedgerHoldLapsesExactly(t *testing.T) {
	l := ltNew(t)
	created := ltAt(time.Minute)
	r := ltMustReserve(t, l, created, rv.Request{RequestID: "a", Holder: ltAlice, Amounts: ltAm(rv.CPUs, 2, ltGPUs, 2), Hold: 7 * time.Second})
	ltDrain(l)
	end := created.Add(7 * time.Second)
	if l.NextExpiry() != end {
		t.Errorf("NextExpiry %v, want %v", l.NextExpiry(), end)
	}
	if got := l.Expire(end.Add(-time.Nanosecond)); len(got) != 0 || l.Live() != 1 || l.Pending() {
		t.Fatalf("lapsed one nanosecond early: %+v", got)
	}
	got := l.Expire(end)
	if len(got) != 1 || got[0].ID != r.ID || got[0].State != rv.Expired || got[0].Reason != "hold timed out" || got[0].Updated != end || got[0].Expires != end.Add(10*time.Minute) {
		t.Fatalf("lapsed: %+v", got)
	}
	if l.Live() != 0 || l.Free(rv.CPUs) != 8 || l.Free(ltGPUs) != 2 {
		t.Errorf("not freed: live %d cpus %d gpus %d", l.Live(), l.Free(rv.CPUs), l.Free(ltGPUs))
	}
	if b := l.TakeBatch(); len(b.Changes) != 1 || !reflect.DeepEqual(*b.Changes[0].Rec, got[0]) {
		t.Errorf("batch %+v", b)
	}
	if again := l.Expire(end.Add(time.Minute)); len(again) != 0 || l.Pending() {
		t.Errorf("lapsed twice: %+v", again)
	}
	// A committed one does not lapse at its old hold end.
	r2 := ltMustReserve(t, l, created, rv.Request{RequestID: "b", Holder: ltAlice, Amounts: ltAm(rv.CPUs, 1), Hold: 7 * time.Second})
	ltMustApply(t, l, created.Add(time.Second), rv.Mutation{Op: rv.OpCommit, ID: r2.ID, By: ltAlice, Lease: time.Minute})
	if got := l.Expire(end.Add(time.Second)); len(got) != 0 {
		t.Errorf("committed lapsed at its hold end: %+v", got)
	}
}

func TestLedgerLeaseLapsesAndRenewExtends(t *testing.T) {
	l := ltNew(t)
	r := ltMustReserve(t, l, ltAt(0), ltReq("a", ltAlice, ltAm(rv.Mem, 3*ltGiB)))
	ltMustApply(t, l, ltAt(10*time.Second), rv.Mutation{Op: rv.OpCommit, ID: r.ID, By: ltAlice, Lease: time.Minute})
	leaseEnd := ltAt(70 * time.Second)
	// The hold end (30s) is not an expiry any more.
	if got := l.Expire(leaseEnd.Add(-time.Nanosecond)); len(got) != 0 {
		t.Fatalf("lapsed before the lease end: %+v", got)
	}
	// Renew at 40s: the lease now ends at 100s, not at 70s.
	ltMustApply(t, l, ltAt(40*time.Second), rv.Mutation{Op: rv.OpRenew, ID: r.ID, By: ltAlice})
	if got := l.Expire(leaseEnd); len(got) != 0 {
		t.Fatalf("lapsed at the old lease end after a renew: %+v", got)
	}
	if l.NextExpiry() != ltAt(100*time.Second) {
		t.Errorf("NextExpiry %v", l.NextExpiry())
	}
	if got := l.Expire(ltAt(100 * time.Second)); len(got) != 1 || got[0].State != rv.Expired || got[0].Reason != "lease ended without renewal" {
		t.Fatalf("lease end: %+v", got)
	}
	if l.Free(rv.Mem) != 16*ltGiB || l.Live() != 0 {
		t.Errorf("not freed")
	}
}

func TestLedgerForgetsAfterRetain(t *testing.T) {
	l := ltNew(t)
	a := ltMustReserve(t, l, ltAt(0), ltReq("a", ltAlice, ltAm(rv.CPUs, 1)))
	b := ltMustReserve(t, l, ltAt(0), rv.Request{RequestID: "b", Holder: ltBob, Amounts: ltAm(rv.CPUs, 1), Hold: time.Second})
	ltMustApply(t, l, ltAt(5*time.Second), rv.Mutation{Op: rv.OpRelease, ID: a.ID, By: ltAlice})
	l.Expire(ltAt(2 * time.Second)) // b lapses at 2s: forgotten at 2s+10m
	ltDrain(l)
	l.Expire(ltAt(2*time.Second + 10*time.Minute - time.Nanosecond))
	if _, ok := l.Get(b.ID); !ok || l.Pending() {
		t.Fatalf("forgotten before Retain")
	}
	l.Expire(ltAt(2*time.Second + 10*time.Minute))
	if _, ok := l.Get(b.ID); ok {
		t.Fatalf("expired record kept after Retain")
	}
	if _, ok := l.Get(a.ID); !ok {
		t.Fatalf("released record forgotten early")
	}
	if bt := l.TakeBatch(); len(bt.Changes) != 1 || bt.Changes[0] != (rv.Change{ID: b.ID}) {
		t.Fatalf("batch %+v, want a delete of %s", bt, b.ID)
	}
	l.Expire(ltAt(5*time.Second + 10*time.Minute))
	if bt := l.TakeBatch(); len(bt.Changes) != 1 || bt.Changes[0] != (rv.Change{ID: a.ID}) || bt.NextSeq != 3 {
		t.Fatalf("batch %+v, want a delete of %s", bt, a.ID)
	}
	if len(l.List(nil)) != 0 || l.NextExpiry() != (time.Time{}) {
		t.Errorf("left: %+v, next expiry %v", l.List(nil), l.NextExpiry())
	}
	// Forgotten: not found, and the request id may be reused.
	_, _, err := l.Apply(ltAt(time.Hour), rv.Mutation{Op: rv.OpRelease, ID: a.ID, By: ltAlice})
	ltWantErr(t, err, rv.CodeNotFound, a.ID, "unknown here")
	if r, dup, err := l.Reserve(ltAt(time.Hour), ltReq("a", ltAlice, ltAm(rv.CPUs, 1))); err != nil || dup || r.ID != rv.FormatID(ltName, 3, rv.Tag(ltPeer)) {
		t.Errorf("reserve after forgetting: %v dup %v err %v", r.ID, dup, err)
	}
}

func TestLedgerSetCapacityBelowUsed(t *testing.T) {
	l := ltNew(t)
	a := ltMustReserve(t, l, ltAt(0), ltReq("a", ltAlice, ltAm(rv.CPUs, 6)))
	l.SetCapacity(rv.CPUs, 4)
	if got := l.Usage()[0]; got != (rv.Usage{Kind: rv.CPUs, Capacity: 4, Used: 6}) || got.Free() != 0 || l.Free(rv.CPUs) != 0 {
		t.Fatalf("usage %+v free %d", got, l.Free(rv.CPUs))
	}
	if r, ok := l.Get(a.ID); !ok || r.State != rv.Held {
		t.Fatalf("reservation lost: %+v", r)
	}
	_, _, err := l.Reserve(ltAt(0), ltReq("b", ltAlice, ltAm(rv.CPUs, 1)))
	ltWantErr(t, err, rv.CodeRefused, "cpus: asked 1, free 0 of 4")
	ltMustApply(t, l, ltAt(0), rv.Mutation{Op: rv.OpRelease, ID: a.ID, By: ltAlice})
	if l.Free(rv.CPUs) != 4 {
		t.Errorf("free after release %d", l.Free(rv.CPUs))
	}
	l.SetCapacity(rv.CPUs, -5)
	if l.Usage()[0].Capacity != 0 {
		t.Errorf("negative capacity: %+v", l.Usage()[0])
	}
	l.SetCapacity("licenses.matlab", 3)
	if u := l.Usage(); len(u) != 4 || u[2].Kind != "licenses.matlab" || u[2].Capacity != 3 {
		t.Errorf("declared kind: %+v", u)
	}
}

func TestLedgerTakeBatch(t *testing.T) {
	l := ltNew(t)
	a := ltMustReserve(t, l, ltAt(0), ltReq("a", ltAlice, ltAm(rv.CPUs, 1)))
	b := ltMustReserve(t, l, ltAt(0), ltReq("b", ltAlice, ltAm(rv.CPUs, 1)))
	c := ltMustReserve(t, l, ltAt(0), ltReq("c", ltAlice, ltAm(rv.CPUs, 1)))
	ltMustApply(t, l, ltAt(1), rv.Mutation{Op: rv.OpCommit, ID: a.ID, By: ltAlice}) // a changed again: stays first
	if !l.Pending() {
		t.Fatal("nothing pending")
	}
	bt := l.TakeBatch()
	var ids []string
	for _, ch := range bt.Changes {
		ids = append(ids, ch.ID)
	}
	if !slices.Equal(ids, []string{a.ID, b.ID, c.ID}) || bt.NextSeq != 4 || bt.Empty() {
		t.Fatalf("batch ids %v next %d", ids, bt.NextSeq)
	}
	if bt.Changes[0].Rec.State != rv.Committed {
		t.Errorf("batch carries an old copy of %s: %+v", a.ID, bt.Changes[0].Rec)
	}
	if l.Pending() {
		t.Error("pending after TakeBatch")
	}
	if again := l.TakeBatch(); !again.Empty() || again.NextSeq != 4 {
		t.Errorf("second batch %+v", again)
	}
	// Order of first change, after the previous batch.
	ltMustApply(t, l, ltAt(2), rv.Mutation{Op: rv.OpRelease, ID: c.ID, By: ltAlice})
	d := ltMustReserve(t, l, ltAt(2), ltReq("d", ltAlice, ltAm(rv.CPUs, 1)))
	ltMustApply(t, l, ltAt(2), rv.Mutation{Op: rv.OpRelease, ID: a.ID, By: ltAlice})
	ltMustApply(t, l, ltAt(3), rv.Mutation{Op: rv.OpRelease, ID: c.ID, By: ltAlice}) // no-op
	bt = l.TakeBatch()
	ids = ids[:0]
	for _, ch := range bt.Changes {
		ids = append(ids, ch.ID)
	}
	if !slices.Equal(ids, []string{c.ID, d.ID, a.ID}) || bt.NextSeq != 5 {
		t.Fatalf("batch ids %v next %d", ids, bt.NextSeq)
	}
	// A batch is a copy: changing it does not change the ledger.
	bt.Changes[0].Rec.Amounts[0].N = 99
	if r, _ := l.Get(c.ID); r.Amounts[0].N != 1 {
		t.Error("batch shares memory with the ledger")
	}
}

func TestLedgerReturnsCopies(t *testing.T) {
	l := ltNew(t)
	r := ltMustReserve(t, l, ltAt(0), ltReq("a", ltAlice, ltAm(rv.CPUs, 1)))
	r.Amounts[0].N = 7
	r2 := ltMustApply(t, l, ltAt(0), rv.Mutation{Op: rv.OpCommit, ID: r.ID, By: ltAlice, RequestID: "c"})
	r2.Ops[0].RequestID = "x"
	r2.Amounts[0].N = 7
	l.List(nil)[0].Amounts[0].N = 7
	g, _ := l.Get(r.ID)
	g.Amounts[0].N = 7
	got, _ := l.Get(r.ID)
	if got.Amounts[0].N != 1 || got.Ops[0].RequestID != "c" || l.Free(rv.CPUs) != 7 {
		t.Errorf("ledger changed through a returned copy: %+v", got)
	}
	// Clone and Amount.
	cl := got.Clone()
	cl.Amounts[0].N, cl.Ops[0].RequestID = 5, "y"
	if got.Amounts[0].N != 1 || got.Ops[0].RequestID != "c" || got.Amount(rv.CPUs) != 1 || got.Amount(ltGPUs) != 0 {
		t.Errorf("Clone is shallow or Amount wrong: %+v", got)
	}
}

// List is in the order of making, even when the clock was set back in
// between (b is made before a, but a's creation time is earlier): a
// listing that goes on after the last one it listed must never find a
// newer reservation before it.
func TestLedgerList(t *testing.T) {
	l := ltNew(t)
	b := ltMustReserve(t, l, ltAt(time.Second), ltReq("b", ltAlice, ltAm(rv.CPUs, 1)))
	a := ltMustReserve(t, l, ltAt(0), ltReq("a", ltBob, ltAm(rv.CPUs, 1)))
	c := ltMustReserve(t, l, ltAt(time.Second), ltReq("c", ltBob, ltAm(rv.CPUs, 1)))
	var ids []string
	for _, r := range l.List(nil) {
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, []string{b.ID, a.ID, c.ID}) {
		t.Errorf("List order %v", ids)
	}
	bobs := l.List(func(r *rv.Reservation) bool { return r.Holder.Peer == ltBob.Peer })
	if len(bobs) != 2 || bobs[0].ID != a.ID || bobs[1].ID != c.ID {
		t.Errorf("filtered %+v", bobs)
	}
	seqB, _ := l.SeqOf(b.ID)
	if after, n := l.OldestAfter(seqB, nil, 10); n != 2 || after[0].ID != a.ID || after[1].ID != c.ID {
		t.Errorf("after %s: %d, %+v", b.ID, n, after)
	}
}

// ltStore is an in-memory store: the records the batches wrote.
type ltStore struct {
	recs map[string]rv.Reservation
	next uint64
}

func ltNewStore() *ltStore { return &ltStore{recs: map[string]rv.Reservation{}} }

func (s *ltStore) apply(b rv.Batch) {
	for _, c := range b.Changes {
		if c.Rec == nil {
			delete(s.recs, c.ID)
		} else {
			s.recs[c.ID] = c.Rec.Clone()
		}
	}
	s.next = b.NextSeq
}

func (s *ltStore) snapshot() rv.Snapshot {
	snap := rv.Snapshot{NextSeq: s.next}
	for _, r := range s.recs {
		snap.Records = append(snap.Records, r.Clone())
	}
	slices.SortFunc(snap.Records, func(a, b rv.Reservation) int { return strings.Compare(a.ID, b.ID) })
	return snap
}

// ltRestoreFixture makes a ledger with alice's r1 (held, 30s), bob's r2
// (committed, lease 10m), alice's r3 (released at 1s) and bob's r4 (held,
// 5s), and the store its batches were written to.
func ltRestoreFixture(t *testing.T) (*rv.Ledger, *ltStore, [4]rv.Reservation) {
	l := ltNew(t)
	s := ltNewStore()
	var rs [4]rv.Reservation
	rs[0] = ltMustReserve(t, l, ltAt(0), ltReq("r1", ltAlice, ltAm(rv.CPUs, 2)))
	s.apply(l.TakeBatch())
	r2 := ltReq("r2", ltBob, ltAm(ltGPUs, 1, rv.Mem, ltGiB))
	r2.Commit, r2.Lease = true, 10*time.Minute
	rs[1] = ltMustReserve(t, l, ltAt(0), r2)
	rs[2] = ltMustReserve(t, l, ltAt(0), ltReq("r3", ltAlice, ltAm(rv.CPUs, 1)))
	s.apply(l.TakeBatch())
	rs[2] = ltMustApply(t, l, ltAt(time.Second), rv.Mutation{Op: rv.OpRelease, ID: rs[2].ID, By: ltAlice, RequestID: "rel"})
	rs[3] = ltMustReserve(t, l, ltAt(time.Second), rv.Request{RequestID: "r4", Holder: ltBob, Amounts: ltAm(rv.CPUs, 1), Hold: 5 * time.Second})
	s.apply(l.TakeBatch())
	return l, s, rs
}

func TestLedgerRestoreRoundTrip(t *testing.T) {
	a, s, rs := ltRestoreFixture(t)
	now := ltAt(2 * time.Second)
	b := rv.NewLedger(ltName, ltPeer, ltLimits())
	b.SetCapacity(rv.CPUs, 8)
	b.SetCapacity(rv.Mem, 16*ltGiB)
	b.SetCapacity(ltGPUs, 2)
	if err := b.Restore(now, s.snapshot()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Usage(), b.Usage()) {
		t.Errorf("Usage\n got %+v\nwant %+v", b.Usage(), a.Usage())
	}
	if !reflect.DeepEqual(a.List(nil), b.List(nil)) {
		t.Errorf("List\n got %+v\nwant %+v", b.List(nil), a.List(nil))
	}
	if a.Live() != b.Live() || b.Live() != 3 || a.NextExpiry() != b.NextExpiry() {
		t.Errorf("Live %d/%d NextExpiry %v/%v", b.Live(), a.Live(), b.NextExpiry(), a.NextExpiry())
	}
	if b.Pending() {
		t.Errorf("a restore with nothing due left changes pending: %+v", b.TakeBatch())
	}
	// Retries are recognised after the restore.
	if r, dup, err := b.Reserve(now, ltReq("r1", ltAlice, ltAm(rv.CPUs, 2))); err != nil || !dup || r.ID != rs[0].ID {
		t.Errorf("reserve retry after restore: %v %v %v", r.ID, dup, err)
	}
	if _, dup, err := b.Apply(now, rv.Mutation{Op: rv.OpRelease, ID: rs[2].ID, By: ltAlice, RequestID: "rel"}); err != nil || !dup {
		t.Errorf("release retry after restore: %v %v", dup, err)
	}
	// Both continue with the same sequence number.
	ra := ltMustReserve(t, a, now, ltReq("r5", ltAlice, ltAm(rv.CPUs, 1)))
	rb := ltMustReserve(t, b, now, ltReq("r5", ltAlice, ltAm(rv.CPUs, 1)))
	if ra.ID != rb.ID || ra.ID != rv.FormatID(ltName, 5, rv.Tag(ltPeer)) {
		t.Errorf("next ids %s %s", ra.ID, rb.ID)
	}
	// Restore into a ledger that is not empty is refused.
	if err := b.Restore(now, s.snapshot()); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("restore into a non-empty ledger: %v", err)
	}
}

func TestLedgerRestoreLapses(t *testing.T) {
	_, s, rs := ltRestoreFixture(t)
	snap := s.snapshot()

	// At 40s: both holds are past their timeout, the lease is not.
	b := ltNew(t)
	if err := b.Restore(ltAt(40*time.Second), snap); err != nil {
		t.Fatal(err)
	}
	bt := b.TakeBatch()
	if len(bt.Changes) != 2 || bt.Changes[0].ID != rs[3].ID || bt.Changes[1].ID != rs[0].ID {
		t.Fatalf("restore batch %+v, want lapses of r4 then r1", bt)
	}
	for _, c := range bt.Changes {
		if c.Rec == nil || c.Rec.State != rv.Expired || c.Rec.Reason != "hold timed out" || c.Rec.Updated != ltAt(40*time.Second) {
			t.Errorf("lapsed at restore: %+v", c.Rec)
		}
	}
	if got, want := b.Usage(), []rv.Usage{{rv.CPUs, 8, 0}, {ltGPUs, 2, 1}, {rv.Mem, 16 * ltGiB, ltGiB}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Usage %+v, want %+v", got, want)
	}
	if r, _ := b.Get(rs[1].ID); r.State != rv.Committed || b.Live() != 1 {
		t.Errorf("committed one not kept: %+v", r)
	}
	if r, _ := b.Get(rs[2].ID); r.State != rv.Released {
		t.Errorf("released one: %+v", r)
	}

	// At 11m: the lease has ended and the released record is forgotten.
	c := ltNew(t)
	if err := c.Restore(ltAt(11*time.Minute), snap); err != nil {
		t.Fatal(err)
	}
	bt = c.TakeBatch()
	byID := map[string]*rv.Reservation{}
	for _, ch := range bt.Changes {
		byID[ch.ID] = ch.Rec
	}
	if len(byID) != 4 || byID[rs[2].ID] != nil || byID[rs[1].ID] == nil || byID[rs[1].ID].State != rv.Expired ||
		byID[rs[1].ID].Reason != "lease ended without renewal" {
		t.Fatalf("restore batch %+v", bt)
	}
	if _, ok := c.Get(rs[2].ID); ok || c.Live() != 0 || c.Free(ltGPUs) != 2 {
		t.Errorf("after restore at 11m: live %d", c.Live())
	}
}

func TestLedgerRestoreNeverReusesSeq(t *testing.T) {
	a := ltNew(t)
	s := ltNewStore()
	r1 := ltMustReserve(t, a, ltAt(0), ltReq("1", ltAlice, ltAm(rv.CPUs, 1)))
	r2 := ltMustReserve(t, a, ltAt(0), ltReq("2", ltAlice, ltAm(rv.CPUs, 1)))
	r3 := ltMustReserve(t, a, ltAt(0), ltReq("3", ltAlice, ltAm(rv.CPUs, 1)))
	ltMustApply(t, a, ltAt(0), rv.Mutation{Op: rv.OpRelease, ID: r2.ID, By: ltAlice})
	ltMustApply(t, a, ltAt(0), rv.Mutation{Op: rv.OpRelease, ID: r3.ID, By: ltAlice})
	s.apply(a.TakeBatch())
	a.Expire(ltAt(10 * time.Minute)) // r2, r3 forgotten; r1 lapsed
	s.apply(a.TakeBatch())
	if len(s.recs) != 1 || s.recs[r1.ID].State != rv.Expired || s.next != 4 {
		t.Fatalf("store %+v next %d", s.recs, s.next)
	}
	used := map[string]bool{r1.ID: true, r2.ID: true, r3.ID: true}
	b := ltNew(t)
	if err := b.Restore(ltAt(10*time.Minute), s.snapshot()); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		r := ltMustReserve(t, b, ltAt(10*time.Minute), ltReq("new"+strconv.Itoa(i), ltAlice, ltAm(rv.CPUs, 1)))
		if used[r.ID] {
			t.Errorf("id %s reused after restore", r.ID)
		}
		used[r.ID] = true
	}
	if b.TakeBatch().NextSeq != 7 {
		t.Error("NextSeq after restore and 3 reservations is not 7")
	}
	// Without the stored NextSeq only the records bound it: this is what
	// the stored number prevents (and shows the check above can fail).
	snap := s.snapshot()
	snap.NextSeq = 0
	c := ltNew(t)
	if err := c.Restore(ltAt(10*time.Minute), snap); err != nil {
		t.Fatal(err)
	}
	if r := ltMustReserve(t, c, ltAt(10*time.Minute), ltReq("x", ltAlice, ltAm(rv.CPUs, 1))); r.ID != r2.ID {
		t.Errorf("without NextSeq the next id is %s, want %s (seq after the highest record)", r.ID, r2.ID)
	}
}

func TestLedgerRestoreUnknownKind(t *testing.T) {
	tag := rv.Tag(ltPeer)
	snap := rv.Snapshot{NextSeq: 3, Records: []rv.Reservation{
		{ID: rv.FormatID(ltName, 1, tag), Holder: ltAlice, Amounts: ltAm("fpga", 2, rv.CPUs, 1), State: rv.Committed,
			Created: ltAt(0), Updated: ltAt(0), Expires: ltAt(time.Hour), Lease: time.Hour, RequestID: "a"},
		{ID: rv.FormatID(ltName, 2, tag), Holder: ltAlice, Amounts: ltAm(rv.CPUs, 1), State: rv.Released,
			Created: ltAt(0), Updated: ltAt(0), Expires: ltAt(time.Hour), RequestID: "b"},
	}}
	l := ltNew(t)
	if err := l.Restore(ltAt(time.Minute), snap); err != nil {
		t.Fatal(err)
	}
	want := []rv.Usage{{rv.CPUs, 8, 1}, {"fpga", 0, 2}, {ltGPUs, 2, 0}, {rv.Mem, 16 * ltGiB, 0}}
	if got := l.Usage(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Usage %+v, want %+v", got, want)
	}
	if l.Free("fpga") != 0 {
		t.Errorf("Free(fpga) = %d", l.Free("fpga"))
	}
	_, _, err := l.Reserve(ltAt(time.Minute), ltReq("c", ltAlice, ltAm("fpga", 1)))
	ltWantErr(t, err, rv.CodeRefused, "fpga: asked 1, free 0 of 0")
	ltMustApply(t, l, ltAt(time.Minute), rv.Mutation{Op: rv.OpRelease, ID: snap.Records[0].ID, By: ltAlice})
	if u := l.Usage(); u[1] != (rv.Usage{Kind: "fpga"}) || u[0].Used != 0 {
		t.Errorf("after release: %+v", u)
	}
}

func TestLedgerRestoreRejects(t *testing.T) {
	tag := rv.Tag(ltPeer)
	good := rv.Reservation{ID: rv.FormatID(ltName, 1, tag), Holder: ltAlice, Amounts: ltAm(rv.CPUs, 1), State: rv.Held,
		Created: ltAt(0), Updated: ltAt(0), Expires: ltAt(time.Hour), RequestID: "a"}
	with := func(f func(*rv.Reservation)) rv.Reservation {
		r := good.Clone()
		r.ID, r.RequestID = rv.FormatID(ltName, 2, tag), "b"
		f(&r)
		return r
	}
	cases := []struct {
		name string
		bad  rv.Reservation
		subs []string
	}{
		{"bad id", with(func(r *rv.Reservation) { r.ID = "gm1-x-" + tag }), []string{"malformed", `sequence "x"`}},
		{"empty id", with(func(r *rv.Reservation) { r.ID = "" }), []string{"malformed"}},
		{"other manager's tag", with(func(r *rv.Reservation) { r.ID = rv.FormatID(ltName, 2, rv.Tag("another")) }),
			[]string{"belongs to another manager", "tag " + rv.Tag("another"), "ours " + tag}},
		{"duplicate", good, []string{"stored twice"}},
		{"state zero", with(func(r *rv.Reservation) { r.State = 0 }), []string{"bad state 0"}},
		{"state too big", with(func(r *rv.Reservation) { r.State = rv.Expired + 1 }), []string{"bad state 5"}},
		{"zero amount", with(func(r *rv.Reservation) { r.Amounts = ltAm(rv.CPUs, 0) }), []string{"bad amount", "cpus"}},
		{"no kind", with(func(r *rv.Reservation) { r.Amounts = ltAm("", 1) }), []string{"bad amount"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := ltNew(t)
			err := l.Restore(ltAt(0), rv.Snapshot{Records: []rv.Reservation{good, c.bad}, NextSeq: 3})
			if err == nil {
				t.Fatal("restore of a malformed record succeeded")
			}
			for _, s := range append([]string{"stored record 1", strconv.Quote(c.bad.ID)}, c.subs...) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestLedgerIDs(t *testing.T) {
	tag := rv.Tag("12D3KooWExamplePeer")
	if len(tag) != 6 || strings.Trim(tag, "abcdefghijklmnopqrstuvwxyz234567") != "" || tag != rv.Tag("12D3KooWExamplePeer") {
		t.Fatalf("Tag = %q", tag)
	}
	if rv.Tag("a") == rv.Tag("b") {
		t.Errorf("Tag does not tell peers apart")
	}
	for _, c := range []struct {
		name string
		seq  uint64
	}{{"gm154", 17}, {"grid-mgr-7", 1}, {"x", math.MaxUint64}} {
		id := rv.FormatID(c.name, c.seq, tag)
		if want := c.name + "-" + strconv.FormatUint(c.seq, 10) + "-" + tag; id != want {
			t.Errorf("FormatID = %q, want %q", id, want)
		}
		name, seq, tg, err := rv.ParseID(id)
		if err != nil || name != c.name || seq != c.seq || tg != tag {
			t.Errorf("ParseID(%q) = %q %d %q %v", id, name, seq, tg, err)
		}
	}
	for _, c := range []struct{ id, why string }{
		{"", "no '-'"},
		{"nodash", "no '-'"},
		{"a-abcdef", "no name"},
		{"-1-abcdef", "no name"},
		{"gm-1-ABCDEF", `tag "ABCDEF"`},
		{"gm-1-abcde", `tag "abcde"`},
		{"gm-1-abcde1", `tag "abcde1"`},
		{"gm-1-", `tag ""`},
		{"gm-0-abcdef", `sequence "0"`},
		{"gm--abcdef", `sequence ""`},
		{"gm-x1-abcdef", `sequence "x1"`},
		{"gm-+1-abcdef", `sequence "+1"`},
		{"gm-18446744073709551616-abcdef", `sequence "18446744073709551616"`},
		{strings.Repeat("g", 121) + "-1-abcdef", "130 bytes, limit 128"},
	} {
		_, _, _, err := rv.ParseID(c.id)
		if err == nil {
			t.Errorf("ParseID(%q) accepted", c.id)
			continue
		}
		for _, s := range []string{strconv.Quote(c.id), c.why, "NAME-SEQ-TAG"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("ParseID(%q): %q does not contain %q", c.id, err, s)
			}
		}
	}
	// The longest accepted id.
	if _, _, _, err := rv.ParseID(strings.Repeat("g", 119) + "-1-abcdef"); err != nil {
		t.Errorf("128-byte id: %v", err)
	}
}

func TestLedgerAccess(t *testing.T) {
	for _, c := range []struct{ in, out, err string }{
		{"*", "*", ""},
		{"user:bob", "user:bob", ""},
		{"user:" + strings.Repeat("u", rv.MaxUserLen), "user:" + strings.Repeat("u", rv.MaxUserLen), ""},
		{"user:" + strings.Repeat("u", rv.MaxUserLen+1), "", "empty or longer than 64"},
		{"user:", "", "empty or longer than 64"},
		{"peer:12D3KooWX", "peer:12D3KooWX", ""},
		{"peer:", "", "peer id is empty"},
		{"12D3KooWX", "peer:12D3KooWX", ""},
		{"", "", `"" is not`},
		{"group:admins", "", `"group:admins" is not "*", "user:NAME", "peer:ID" or a peer id`},
	} {
		got, err := rv.ParseAccessEntry(c.in)
		if c.err == "" {
			if err != nil || got != c.out {
				t.Errorf("ParseAccessEntry(%q) = %q, %v; want %q", c.in, got, err, c.out)
			}
		} else if err == nil || !strings.Contains(err.Error(), c.err) || got != "" {
			t.Errorf("ParseAccessEntry(%q) = %q, %v; want error containing %q", c.in, got, err, c.err)
		}
	}

	acc := rv.Access{
		ltGPUs:            {"peer:" + ltAlice.Peer, "user:carol"},
		"licenses.matlab": {ltBob.Peer},
		"fpga":            {"*"},
		"tape":            {},
	}
	carol := rv.Holder{Peer: "12D3KooWCarolPeer", User: "carol"}
	anon := rv.Holder{Peer: "12D3KooWAnon"}
	for _, c := range []struct {
		h       rv.Holder
		admin   bool
		amounts []rv.Amount
		denied  []string // kinds named in the refusal, nil: allowed
	}{
		{ltAlice, false, ltAm(rv.CPUs, 1, ltGPUs, 1), nil},
		{carol, false, ltAm(ltGPUs, 1), nil},
		{ltBob, false, ltAm("licenses.matlab", 1, "fpga", 1), nil},
		{anon, false, ltAm("fpga", 1, rv.Mem, 1), nil},
		{ltBob, false, ltAm(ltGPUs, 1, rv.CPUs, 1), []string{"gpus (allowed: peer:" + ltAlice.Peer + ", user:carol)"}},
		{ltAlice, false, ltAm("licenses.matlab", 1), []string{"licenses.matlab (allowed: " + ltBob.Peer + ")"}},
		{rv.Holder{Peer: "x", User: "carol"}, false, ltAm(ltGPUs, 1), nil}, // user entries trust the stated user
		{rv.Holder{Peer: "x"}, false, ltAm(ltGPUs, 1), []string{"gpus"}},
		{ltAlice, false, ltAm("tape", 1), []string{"tape (allowed: )"}},
		{anon, false, ltAm("tape", 1, ltGPUs, 1, "licenses.matlab", 1), []string{"gpus (allowed", "licenses.matlab (allowed", "tape (allowed"}},
		{anon, true, ltAm("tape", 1, ltGPUs, 1, "licenses.matlab", 1), nil},
	} {
		err := acc.Check(c.h, c.admin, c.amounts)
		if c.denied == nil {
			if err != nil {
				t.Errorf("Check(%v, %v) = %v, want allowed", c.h, c.amounts, err)
			}
			continue
		}
		ltWantErr(t, err, rv.CodeRefused, append([]string{c.h.String() + " may not reserve", "refused by the access list"}, c.denied...)...)
		if len(c.denied) > 1 {
			msg, last := err.Error(), -1
			for _, d := range c.denied {
				i := strings.Index(msg, d)
				if i < last {
					t.Errorf("denied kinds not sorted in %q", msg)
				}
				last = i
			}
		}
	}
	if err := rv.Access(nil).Check(anon, false, ltAm("tape", 1)); err != nil {
		t.Errorf("empty access list refused: %v", err)
	}
}

func TestLedgerStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{rv.Held.String(), "held"}, {rv.Committed.String(), "committed"}, {rv.Released.String(), "released"},
		{rv.Expired.String(), "expired"}, {rv.State(0).String(), "state(0)"}, {rv.State(9).String(), "state(9)"},
		{rv.OpCommit.String(), "commit"}, {rv.OpRenew.String(), "renew"}, {rv.OpRelease.String(), "release"},
		{rv.Op(0).String(), "op(0)"}, {rv.CodeBadRequest.String(), "bad request"}, {rv.CodeConflict.String(), "conflict"},
		{rv.Code(0).String(), "code(0)"}, {rv.Code(42).String(), "code(42)"},
		{rv.Holder{Peer: "short"}.String(), "peer short"},
		{rv.Holder{Peer: "12D3KooWAbcdefghXYZ12345", User: "ann"}.String(), "user ann (peer 12D3…Z12345)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if rv.Held.Live() != true || rv.Committed.Live() != true || rv.Released.Live() || rv.Expired.Live() || rv.State(0).Live() {
		t.Error("State.Live")
	}
	if rv.CodeOf(errors.New("plain")) != 0 || rv.CodeOf(nil) != 0 {
		t.Error("CodeOf of a plain error")
	}
	wrapped := errors.Join(errors.New("ctx"), &rv.Error{Code: rv.CodeGone, Msg: "m"})
	if rv.CodeOf(wrapped) != rv.CodeGone {
		t.Error("CodeOf does not unwrap")
	}
	if (rv.Usage{Capacity: 3, Used: 5}).Free() != 0 || (rv.Usage{Capacity: 5, Used: 3}).Free() != 2 {
		t.Error("Usage.Free")
	}
	// Zero limits take the defaults.
	if got := rv.NewLedger("a", "p", rv.Limits{}).Limits(); got != rv.DefaultLimits {
		t.Errorf("zero limits = %+v", got)
	}
	part := rv.NewLedger("a", "p", rv.Limits{Retain: time.Minute}).Limits()
	if part.Retain != time.Minute || part.HoldTimeout != rv.DefaultLimits.HoldTimeout || part.MaxLive != rv.DefaultLimits.MaxLive {
		t.Errorf("partial limits = %+v", part)
	}
}
