package reservation

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gridmgr/gridmgr/internal/text"
)

// Limits bound what the ledger grants. Zero fields take the defaults of
// DefaultLimits.
type Limits struct {
	HoldTimeout  time.Duration // a held reservation lapses after this; also the longest hold a client may ask
	DefaultLease time.Duration // lease of a commit or renew that names none
	MinLease     time.Duration
	MaxLease     time.Duration
	Retain       time.Duration // how long released and expired records are kept
	MaxLive      int           // most held + committed reservations at once
	MaxWindow    time.Duration // longest window a client may book ahead
	Horizon      time.Duration // how far ahead a window may begin
}

// DefaultLimits are the limits used for zero fields.
var DefaultLimits = Limits{
	HoldTimeout:  30 * time.Second,
	DefaultLease: 5 * time.Minute,
	MinLease:     time.Second,
	MaxLease:     24 * time.Hour,
	Retain:       time.Hour,
	MaxLive:      100000,
	MaxWindow:    7 * 24 * time.Hour,
	Horizon:      90 * 24 * time.Hour,
}

// WithDefaults returns l with its zero fields set from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits
	if l.HoldTimeout > 0 {
		d.HoldTimeout = l.HoldTimeout
	}
	if l.DefaultLease > 0 {
		d.DefaultLease = l.DefaultLease
	}
	if l.MinLease > 0 {
		d.MinLease = l.MinLease
	}
	if l.MaxLease > 0 {
		d.MaxLease = l.MaxLease
	}
	if l.Retain > 0 {
		d.Retain = l.Retain
	}
	if l.MaxLive > 0 {
		d.MaxLive = l.MaxLive
	}
	if l.MaxWindow > 0 {
		d.MaxWindow = l.MaxWindow
	}
	if l.Horizon > 0 {
		d.Horizon = l.Horizon
	}
	return d
}

// Request asks for a new reservation.
type Request struct {
	RequestID string // chosen by the client; a retry carries the same one
	Holder    Holder
	Amounts   []Amount
	Hold      time.Duration // how long the hold lasts; 0: Limits.HoldTimeout, which is also the most
	Commit    bool          // commit at once: the reservation starts as a lease
	Lease     time.Duration // lease length (without a window); 0: Limits.DefaultLease
	Group     string        // co-reservation id, informational

	// A window: the reservation is for [Begin, Begin+Duration) rather
	// than from now for a lease. Begin zero with a Duration: from now.
	// Both zero: a lease from now, as before calendars.
	Begin    time.Time
	Duration time.Duration
}

// Usage is one resource kind's counting semaphore.
type Usage struct {
	Kind     string
	Capacity int64
	Used     int64 // by held and committed reservations
}

// Free is what is left, never negative (capacity may drop below use).
func (u Usage) Free() int64 { return max(0, u.Capacity-u.Used) }

// Ledger is the reservations of one manager: one counting semaphore per
// resource kind, the reservations that hold them, and what changed since
// the store last took a batch. Requests for several kinds are granted
// all-or-nothing, so requests never over-commit. Time is always passed in.
// A Ledger is not safe for concurrent use: one goroutine owns it (the
// Core's owner, which serialises every request), as for the Core itself.
type Ledger struct {
	name    string
	tag     string
	lim     Limits
	sems    kinds
	now     time.Time // of the latest call: Usage and Free report use then
	res     map[string]*Reservation
	byReq   map[string]string // holder peer + "\x00" + request id → reservation id
	live    int
	exp     expHeap
	nextSeq uint64
	dirty   []string // ids changed since TakeBatch, in order of first change
	isDirty map[string]bool
}

// NewLedger returns an empty ledger for the manager named name with peer
// id peer. Declare capacities with SetCapacity before reserving.
func NewLedger(name, peer string, lim Limits) *Ledger {
	return &Ledger{
		name:    name,
		tag:     Tag(peer),
		lim:     lim.WithDefaults(),
		nextSeq: 1,
		// res, byReq and isDirty are made at their first entry: most
		// managers of a large simulated grid never hold a reservation.
	}
}

// Limits returns the limits in force.
func (l *Ledger) Limits() Limits { return l.lim }

// SetCapacity declares kind with capacity n (n ≥ 0), or changes it. A
// capacity below what is reserved keeps the reservations; nothing more of
// that kind is granted until enough is released.
func (l *Ledger) SetCapacity(kind string, n int64) {
	s := l.sems.get(kind)
	if s == nil {
		s = newCalendar()
		l.sems.put(kind, s)
	}
	s.cap = max(0, n)
}

// Usage returns every kind's semaphore at the time of the latest call
// (Reserve, Apply, Expire, Restore), sorted by kind. Use changes only at
// those calls and at the starts of windows, which Expire is due for
// (NextExpiry), so a caller that keeps to NextExpiry sees the use of now.
func (l *Ledger) Usage() []Usage {
	out := make([]Usage, 0, len(l.sems))
	t := l.now.UnixNano()
	for _, k := range l.sems {
		out = append(out, Usage{Kind: k.kind, Capacity: k.cal.cap, Used: k.cal.inUse(t)})
	}
	return out // sorted: kinds are
}

// Free returns the unreserved amount of kind at the time of the latest
// call, as Usage (0 for an unknown kind).
func (l *Ledger) Free(kind string) int64 {
	if s := l.sems.get(kind); s != nil {
		return max(0, s.cap-s.inUse(l.now.UnixNano()))
	}
	return 0
}

// Live returns how many reservations are held or committed.
func (l *Ledger) Live() int {
	return l.live
}

// CheckKind says (CodeBadRequest) that kind is not one of this ledger's,
// naming those it has; nil if it is.
func (l *Ledger) CheckKind(kind string) error {
	if l.sems.get(kind) == nil {
		return errorf(CodeBadRequest, "unknown resource kind %q: this manager offers %s", text.Clip(kind, MaxKindLen), l.kindList())
	}
	return nil
}

func (l *Ledger) kindList() string {
	ks := make([]string, 0, len(l.sems))
	for _, k := range l.sems {
		ks = append(ks, k.kind)
	}
	return strings.Join(ks, ", ")
}

// checkAmounts validates amounts against the declared kinds and returns
// them sorted.
func (l *Ledger) checkAmounts(in []Amount) ([]Amount, error) {
	if len(in) == 0 {
		return nil, errorf(CodeBadRequest, "the request names no amounts: ask for at least one of %s", l.kindList())
	}
	if len(in) > MaxKinds {
		return nil, errorf(CodeBadRequest, "the request names %d kinds, limit %d", len(in), MaxKinds)
	}
	out := slices.Clone(in)
	slices.SortFunc(out, func(a, b Amount) int { return strings.Compare(a.Kind, b.Kind) })
	for i, a := range out {
		if i > 0 && out[i-1].Kind == a.Kind {
			return nil, errorf(CodeBadRequest, "kind %q is named twice", a.Kind)
		}
		if err := l.CheckKind(a.Kind); err != nil {
			return nil, err
		}
		if a.N <= 0 {
			return nil, errorf(CodeBadRequest, "amount of %s is %d: amounts must be positive", a.Kind, a.N)
		}
	}
	return out, nil
}

func (l *Ledger) checkLease(d time.Duration) (time.Duration, error) {
	if d == 0 {
		return l.lim.DefaultLease, nil
	}
	if d < l.lim.MinLease || d > l.lim.MaxLease {
		return 0, errorf(CodeBadRequest, "lease %v is out of bounds [%v, %v]", d, l.lim.MinLease, l.lim.MaxLease)
	}
	return d, nil
}

func checkRequestID(id string, required bool) error {
	if id == "" && required {
		return errorf(CodeBadRequest, "the request has no request id (a retry must be recognisable)")
	}
	if len(id) > MaxRequestIDLen || !utf8.ValidString(id) {
		return errorf(CodeBadRequest, "request id is longer than %d bytes or not UTF-8", MaxRequestIDLen)
	}
	return nil
}

// Reserve grants req at now, or refuses it and changes nothing. A request
// whose RequestID was already granted to the same holder gets that
// reservation back (dup is true), in whatever state it is now; the same id
// with different amounts is a conflict.
func (l *Ledger) Reserve(now time.Time, req Request) (r Reservation, dup bool, err error) {
	l.now = now
	if err := checkRequestID(req.RequestID, true); err != nil {
		return Reservation{}, false, err
	}
	if req.Holder.Peer == "" {
		return Reservation{}, false, errorf(CodeBadRequest, "the request has no holder")
	}
	if len(req.Holder.User) > MaxUserLen || len(req.Group) > MaxGroupLen {
		return Reservation{}, false, errorf(CodeBadRequest, "user longer than %d bytes or group longer than %d", MaxUserLen, MaxGroupLen)
	}
	amounts, err := l.checkAmounts(req.Amounts)
	if err != nil {
		return Reservation{}, false, err
	}
	hold := req.Hold
	switch {
	case hold == 0:
		hold = l.lim.HoldTimeout
	case hold < 0 || hold > l.lim.HoldTimeout:
		return Reservation{}, false, errorf(CodeBadRequest, "hold %v is out of bounds (0, %v]", hold, l.lim.HoldTimeout)
	}
	win, err := l.window(now, req, hold)
	if err != nil {
		return Reservation{}, false, err
	}
	key := req.Holder.Peer + "\x00" + req.RequestID
	if id, ok := l.byReq[key]; ok {
		old := l.res[id]
		if !slices.Equal(old.Amounts, amounts) || old.Group != req.Group || old.Window != win.fixed {
			return Reservation{}, false, errorf(CodeConflict, "request id %q was already used for reservation %s with other amounts", req.RequestID, id)
		}
		return old.Clone(), true, nil
	}
	if l.live >= l.lim.MaxLive {
		return Reservation{}, false, errorf(CodeRefused, "this manager already has %d live reservations, its limit", l.live)
	}
	if err := l.fits(amounts, win.start, win.end, win.fixed, "not enough free"); err != nil {
		return Reservation{}, false, err
	}
	for _, a := range amounts {
		l.sems.get(a.Kind).book(win.start.UnixNano(), win.end.UnixNano(), a.N)
	}
	nr := &Reservation{
		ID:        FormatID(l.name, l.nextSeq, l.tag),
		Holder:    req.Holder,
		Amounts:   amounts,
		State:     Held,
		Created:   now,
		Updated:   now,
		Expires:   minTime(now.Add(hold), win.end),
		RequestID: req.RequestID,
		Group:     req.Group,
		Start:     win.start,
		End:       win.end,
		Window:    win.fixed,
	}
	if req.Commit {
		nr.State, nr.Lease, nr.Expires = Committed, win.lease, win.end
	}
	l.nextSeq++
	l.live++
	l.index(nr, key)
	heap.Push(&l.exp, expEntry{at: nr.Expires, id: nr.ID})
	if nr.Start.After(now) {
		heap.Push(&l.exp, expEntry{at: nr.Start, id: nr.ID, start: true})
	}
	l.mark(nr.ID)
	return nr.Clone(), false, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// span is the window a request books.
type span struct {
	start, end time.Time
	lease      time.Duration // what a commit at once makes the lease
	fixed      bool          // the client named the window
}

// window is the span req books at now: its window, or for a lease from
// now, the hold or the lease it means to commit with, whichever is longer
// (so that committing within the hold rarely needs more of the calendar).
func (l *Ledger) window(now time.Time, req Request, hold time.Duration) (span, error) {
	if req.Begin.IsZero() && req.Duration == 0 {
		lease, err := l.checkLease(req.Lease)
		if err != nil {
			return span{}, err
		}
		if req.Commit {
			return span{start: now, end: now.Add(lease), lease: lease}, nil
		}
		return span{start: now, end: now.Add(max(hold, lease)), lease: lease}, nil
	}
	if req.Lease != 0 {
		return span{}, errorf(CodeBadRequest, "a window (begin, duration) and a lease are exclusive: a window's end is its begin plus its duration")
	}
	d := req.Duration
	if d < l.lim.MinLease || d > l.lim.MaxWindow {
		return span{}, errorf(CodeBadRequest, "duration %v is out of bounds [%v, %v]", d, l.lim.MinLease, l.lim.MaxWindow)
	}
	begin := req.Begin
	if begin.IsZero() {
		begin = now
	}
	if begin.After(now.Add(l.lim.Horizon)) {
		return span{}, errorf(CodeBadRequest, "the window begins at %s, more than %v ahead (the horizon of this manager's calendar)", fmtTime(begin), l.lim.Horizon)
	}
	end := begin.Add(d)
	if !end.After(now) {
		return span{}, errorf(CodeBadRequest, "the window %s–%s is already over", fmtTime(begin), fmtTime(end))
	}
	start := begin
	if start.Before(now) {
		start = now
	}
	return span{start: start, end: end, lease: end.Sub(start), fixed: true}, nil
}

// fmtTime names a time in a message as every message of the core does
// (text.MessageTime: RFC 3339 in UTC), which the CLI shows in its reader's
// zone and form.
func fmtTime(t time.Time) string { return text.MessageTime(t) }

// fits checks that amounts are free over [s, e) on the calendar, or says
// which are short and how much is free at the fullest instant.
func (l *Ledger) fits(amounts []Amount, s, e time.Time, window bool, what string) error {
	var short []string
	ahead := false // free now, not over the whole span: a window ahead takes it
	for _, a := range amounts {
		c := l.sems.get(a.Kind)
		if c == nil {
			continue
		}
		over := c.over(l.now.UnixNano())
		if free := max(0, c.cap-c.peak(s.UnixNano(), e.UnixNano())-over); a.N > free {
			short = append(short, fmt.Sprintf("%s: asked %s, free %s of %s", a.Kind, fmtN(a.Kind, a.N), fmtN(a.Kind, free), fmtN(a.Kind, c.cap)))
			ahead = ahead || a.N <= c.cap-c.at(s.UnixNano())-over
		}
	}
	if len(short) == 0 {
		return nil
	}
	when, hint := "", ""
	switch {
	case window:
		when = fmt.Sprintf(" from %s to %s", fmtTime(s), fmtTime(e))
	case ahead:
		when = fmt.Sprintf(" until %s", fmtTime(e))
		hint = ": a window booked ahead begins before then (gridmgr calendar shows it); ask for a shorter lease or fewer"
	}
	return errorf(CodeRefused, "%s%s (%s)%s", what, when, strings.Join(short, "; "), hint)
}

// resize moves the end of live reservation r to end, if the calendar has
// room for a longer window.
func (l *Ledger) resize(r *Reservation, end time.Time, op Op) error {
	switch {
	case end.After(r.End):
		if err := l.fits(r.Amounts, r.End, end, true, fmt.Sprintf("reservation %s cannot be %s to end at %s: the calendar is booked", r.ID, op.Past(), fmtTime(end))); err != nil {
			return err
		}
		for _, a := range r.Amounts {
			l.sems.get(a.Kind).extend(r.End.UnixNano(), end.UnixNano(), a.N)
		}
	case end.Before(r.End):
		for _, a := range r.Amounts {
			l.sems.get(a.Kind).extend(end.UnixNano(), r.End.UnixNano(), -a.N)
		}
	}
	r.End = end
	return nil
}

// lateResize is resize for a commit or renew at now: a reservation whose
// time is up (the ledger was not yet asked to Expire it) may still be
// extended if the calendar has room, but if its amounts were booked since
// it ended, it is gone, as if Expire had come first.
func (l *Ledger) lateResize(now time.Time, r *Reservation, end time.Time, op Op) error {
	err := l.resize(r, end, op)
	if err != nil && !r.Expires.After(now) {
		what := "hold"
		if r.State == Committed {
			what = "lease"
		}
		return errorf(CodeGone, "reservation %s cannot be %s: its %s ended at %s and what it held has been booked since", r.ID, op.Past(), what, fmtTime(r.Expires))
	}
	return err
}

// fmtN shows an amount: memory in binary units, others as numbers.
func fmtN(kind string, n int64) string {
	if kind != Mem {
		return fmt.Sprint(n)
	}
	const k = 1024
	switch {
	case n >= k*k*k && n%(k*k*k/2) == 0: // whole or half GiB (a tenth is not a whole number of bytes)
		return fmt.Sprintf("%gGiB", float64(n)/(k*k*k))
	case n >= k*k && n%(k*k/2) == 0:
		return fmt.Sprintf("%gMiB", float64(n)/(k*k))
	}
	return fmt.Sprintf("%dB", n)
}

// Mutation names an operation on an existing reservation.
type Mutation struct {
	Op        Op
	ID        string
	By        Holder
	Admin     bool          // By is an admin: may act on anyone's reservation
	RequestID string        // "" disables retry detection
	Lease     time.Duration // commit, renew: 0 means the default (renew: the current lease)
}

// Apply performs m at now. Commit turns a held reservation into a lease
// (committing a committed one returns it unchanged). Renew restarts a
// lease. Release frees a live reservation; releasing a released or expired
// one returns it unchanged. Only the holder (same peer) or an admin may act.
// A retry of an applied request (same RequestID) returns the reservation
// with dup true and changes nothing.
func (l *Ledger) Apply(now time.Time, m Mutation) (r Reservation, dup bool, err error) {
	l.now = now
	if m.Op < OpCommit || m.Op > OpRelease {
		return Reservation{}, false, errorf(CodeBadRequest, "unknown operation %v", m.Op)
	}
	if err := checkRequestID(m.RequestID, false); err != nil {
		return Reservation{}, false, err
	}
	cur := l.res[m.ID]
	if cur == nil {
		if _, _, _, perr := ParseID(m.ID); perr != nil {
			return Reservation{}, false, errorf(CodeNotFound, "%v", perr)
		}
		if !strings.HasSuffix(m.ID, "-"+l.tag) {
			return Reservation{}, false, errorf(CodeNotFound, "reservation %s is not this manager's (%s, tag %s)", m.ID, l.name, l.tag)
		}
		return Reservation{}, false, errorf(CodeNotFound, "reservation %s is unknown here (never made, or forgotten %v after it ended)", m.ID, l.lim.Retain)
	}
	if cur.Holder.Peer != m.By.Peer && !m.Admin {
		return Reservation{}, false, errorf(CodeForbidden, "reservation %s is held by %s; only its holder or an admin may %s it", m.ID, cur.Holder, m.Op)
	}
	if m.RequestID != "" {
		for _, o := range cur.Ops {
			if o.RequestID == m.RequestID {
				if o.Op != m.Op {
					return Reservation{}, false, errorf(CodeConflict, "request id %q was already used to %s reservation %s", m.RequestID, o.Op, m.ID)
				}
				return cur.Clone(), true, nil
			}
		}
	}
	var lease time.Duration
	if m.Op != OpRelease {
		d := m.Lease
		if d == 0 && m.Op == OpRenew && cur.Lease > 0 {
			d = cur.Lease
		}
		if lease, err = l.checkLease(d); err != nil {
			return Reservation{}, false, err
		}
	}
	switch m.Op {
	case OpCommit:
		switch cur.State {
		case Committed:
			return cur.Clone(), false, nil
		case Held:
			if !cur.Window {
				if err := l.lateResize(now, cur, now.Add(lease), m.Op); err != nil {
					return Reservation{}, false, err
				}
				cur.Lease = lease
			} else {
				cur.Lease = cur.End.Sub(cur.Start)
			}
			cur.State, cur.Expires = Committed, cur.End
		default:
			return Reservation{}, false, l.gone(cur, m.Op)
		}
	case OpRenew:
		switch cur.State {
		case Held:
			return Reservation{}, false, errorf(CodeConflict, "reservation %s is held, not committed: commit it first (the hold lapses at %s)", m.ID, fmtTime(cur.Expires))
		case Committed:
			from := now
			if cur.Start.After(now) {
				from = cur.Start
			}
			if err := l.lateResize(now, cur, from.Add(lease), m.Op); err != nil {
				return Reservation{}, false, err
			}
			cur.Lease, cur.Expires = lease, cur.End
		default:
			return Reservation{}, false, l.gone(cur, m.Op)
		}
	case OpRelease:
		if !cur.State.Live() {
			return cur.Clone(), false, nil
		}
		who := "its holder"
		if cur.Holder.Peer != m.By.Peer {
			who = "admin " + m.By.String()
		}
		l.end(now, cur, Released, "released by "+who)
	}
	cur.Updated = now
	if m.RequestID != "" {
		if len(cur.Ops) == maxOpRecords {
			cur.Ops = slices.Delete(cur.Ops, 0, 1)
		}
		cur.Ops = append(cur.Ops, OpRecord{RequestID: m.RequestID, Op: m.Op, State: cur.State, Expires: cur.Expires})
	}
	if cur.State == Committed {
		heap.Push(&l.exp, expEntry{at: cur.Expires, id: cur.ID})
	}
	l.mark(cur.ID)
	return cur.Clone(), false, nil
}

func (l *Ledger) gone(r *Reservation, op Op) error {
	return errorf(CodeGone, "reservation %s cannot be %s: it is %s (%s)", r.ID, op.Past(), r.State, r.Reason)
}

// end moves a live reservation to a terminal state and frees its amounts.
// The record stays Retain longer.
func (l *Ledger) end(now time.Time, r *Reservation, st State, reason string) {
	for _, a := range r.Amounts {
		if s := l.sems.get(a.Kind); s != nil {
			s.book(r.Start.UnixNano(), r.End.UnixNano(), -a.N)
		}
	}
	l.live--
	r.State, r.Reason, r.Updated = st, reason, now
	r.Expires = now.Add(l.lim.Retain)
	heap.Push(&l.exp, expEntry{at: r.Expires, id: r.ID})
}

// Expire lapses every live reservation whose time is up at now (holds past
// their timeout, leases not renewed) and forgets terminal records older
// than Limits.Retain. It returns the reservations that lapsed.
func (l *Ledger) Expire(now time.Time) []Reservation {
	l.now = now
	var lapsed []Reservation
	for len(l.exp) > 0 && !l.exp[0].at.After(now) {
		e := heap.Pop(&l.exp).(expEntry)
		r := l.res[e.id]
		if e.start {
			continue // a window began: use at now changed, nothing else did
		}
		if r == nil || !r.Expires.Equal(e.at) {
			continue // stale entry: renewed, ended or forgotten since
		}
		if r.State.Live() {
			why := "hold timed out"
			switch {
			case r.State == Committed && r.Window:
				why = "its window ended"
			case r.State == Committed:
				why = "lease ended without renewal"
			}
			l.end(now, r, Expired, why)
			l.mark(r.ID)
			lapsed = append(lapsed, r.Clone())
			continue
		}
		delete(l.res, r.ID)
		if l.byReq[r.Holder.Peer+"\x00"+r.RequestID] == r.ID {
			delete(l.byReq, r.Holder.Peer+"\x00"+r.RequestID)
		}
		l.mark(r.ID)
	}
	return lapsed
}

// NextExpiry is the earliest time Expire has work, zero if none.
func (l *Ledger) NextExpiry() time.Time {
	if len(l.exp) == 0 {
		return time.Time{}
	}
	return l.exp[0].at
}

// Get returns reservation id.
func (l *Ledger) Get(id string) (Reservation, bool) {
	r := l.res[id]
	if r == nil {
		return Reservation{}, false
	}
	return r.Clone(), true
}

// List returns the reservations for which keep returns true (nil keeps
// all), oldest first: in the order they were made, which is the order of
// the sequence numbers in their ids (never reused, and unlike creation
// times never tied or set back by the clock).
func (l *Ledger) List(keep func(*Reservation) bool) []Reservation {
	var sel []seqRes
	for _, r := range l.res {
		if keep == nil || keep(r) {
			sel = append(sel, seqRes{idSeq(r.ID), r})
		}
	}
	slices.SortFunc(sel, func(a, b seqRes) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]Reservation, len(sel))
	for i, s := range sel {
		out[i] = s.r.Clone()
	}
	return out
}

// seqRes is a reservation with the sequence number of its id.
type seqRes struct {
	seq uint64
	r   *Reservation
}

// idSeq is the sequence number of a ledger's own id, which is well formed
// (FormatID, or checked by Restore): the digits between the last two '-'.
// Listings call it for every record, so it does not check the rest.
func idSeq(id string) uint64 {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return 0
	}
	j := strings.LastIndexByte(id[:i], '-')
	seq, _ := strconv.ParseUint(id[j+1:i], 10, 64)
	return seq
}

// Oldest returns the first limit reservations keep accepts, in the order
// List gives, and how many it accepts in all.
func (l *Ledger) Oldest(keep func(*Reservation) bool, limit int) ([]Reservation, int) {
	return l.OldestAfter(0, keep, limit)
}

// OldestAfter is Oldest of the reservations made after the one with
// sequence number after (SeqOf; 0: all): the first limit keep accepts, in
// the order List gives, and how many it accepts after after in all. As
// later reservations always have higher numbers, a listing that goes on
// from the last one it listed misses none that was there throughout, and
// lists none twice, whatever was made or ended in between. It copies only
// those it returns, so a short listing of a large ledger costs a scan, not
// a copy and sort of everything.
func (l *Ledger) OldestAfter(after uint64, keep func(*Reservation) bool, limit int) ([]Reservation, int) {
	var best []seqRes // sorted by seq, at most limit
	total := 0
	for _, r := range l.res {
		seq := idSeq(r.ID)
		if seq <= after || keep != nil && !keep(r) {
			continue
		}
		total++
		if limit <= 0 || len(best) == limit && seq > best[len(best)-1].seq {
			continue
		}
		i, _ := slices.BinarySearchFunc(best, seq, func(a seqRes, s uint64) int { return cmp.Compare(a.seq, s) })
		if len(best) < limit {
			best = append(best, seqRes{})
		}
		copy(best[i+1:], best[i:len(best)-1])
		best[i] = seqRes{seq, r}
	}
	out := make([]Reservation, len(best))
	for i, s := range best {
		out[i] = s.r.Clone()
	}
	return out, total
}

// SeqOf is the sequence number of reservation number id, which need not
// be known (it may have been forgotten, or not made yet) but must be well
// formed and this manager's: CodeBadRequest otherwise. OldestAfter goes on
// after it.
func (l *Ledger) SeqOf(id string) (uint64, error) {
	_, seq, tag, err := ParseID(id)
	if err != nil {
		return 0, errorf(CodeBadRequest, "%v", err)
	}
	if tag != l.tag {
		return 0, errorf(CodeBadRequest, "reservation number %s is not this manager's (%s, tag %s)", id, l.name, l.tag)
	}
	return seq, nil
}

func (l *Ledger) mark(id string) {
	if !l.isDirty[id] {
		if l.isDirty == nil {
			l.isDirty = make(map[string]bool)
		}
		l.isDirty[id] = true
		l.dirty = append(l.dirty, id)
	}
}

// Pending reports whether changes await TakeBatch.
func (l *Ledger) Pending() bool {
	return len(l.dirty) > 0
}

// TakeBatch returns the changes since the last call, in order of first
// change, and forgets them. The caller must write them before it tells
// anyone about them.
func (l *Ledger) TakeBatch() Batch {
	b := Batch{NextSeq: l.nextSeq}
	if len(l.dirty) == 0 {
		return b
	}
	b.Changes = make([]Change, len(l.dirty))
	for i, id := range l.dirty {
		b.Changes[i].ID = id
		if r := l.res[id]; r != nil {
			c := r.Clone()
			b.Changes[i].Rec = &c
		}
		delete(l.isDirty, id)
	}
	l.dirty = l.dirty[:0]
	return b
}

// Restore loads a snapshot into an empty ledger at now. Kinds the
// snapshot uses that are not declared are declared with capacity 0, so a
// reservation is never lost because the properties file changed. Records
// that are past their time are then lapsed or forgotten as Expire does;
// those changes are in the next batch. A malformed record is an error that
// names it.
func (l *Ledger) Restore(now time.Time, snap Snapshot) error {
	if len(l.res) > 0 {
		return fmt.Errorf("reservation: restore into a ledger that is not empty")
	}
	for i := range snap.Records {
		r := snap.Records[i].Clone()
		if err := l.restoreOne(&r); err != nil {
			return fmt.Errorf("reservation: stored record %d (%q): %w", i, r.ID, err)
		}
	}
	l.nextSeq = max(l.nextSeq, snap.NextSeq)
	l.Expire(now)
	l.now = now
	return nil
}

func (l *Ledger) restoreOne(r *Reservation) error {
	_, seq, tag, err := ParseID(r.ID)
	if err != nil {
		return err
	}
	if tag != l.tag {
		return fmt.Errorf("belongs to another manager (tag %s, ours %s)", tag, l.tag)
	}
	if _, dup := l.res[r.ID]; dup {
		return fmt.Errorf("stored twice")
	}
	if r.State < Held || r.State > Expired {
		return fmt.Errorf("bad state %d", r.State)
	}
	for _, a := range r.Amounts {
		if a.N <= 0 || a.Kind == "" {
			return fmt.Errorf("bad amount %+v", a)
		}
	}
	if r.Start.IsZero() { // stored before calendars: a lease from its creation
		r.Start, r.End = r.Created, r.Expires
	}
	if r.State.Live() {
		if !r.End.After(r.Start) || r.Expires.After(r.End) {
			return fmt.Errorf("bad window [%s, %s) (expires %s)", fmtTime(r.Start), fmtTime(r.End), fmtTime(r.Expires))
		}
		for _, a := range r.Amounts {
			s := l.sems.get(a.Kind)
			if s == nil {
				s = newCalendar()
				l.sems.put(a.Kind, s)
			}
			s.book(r.Start.UnixNano(), r.End.UnixNano(), a.N)
		}
		l.live++
		heap.Push(&l.exp, expEntry{at: r.Start, id: r.ID, start: true})
	}
	l.nextSeq = max(l.nextSeq, seq+1)
	l.index(r, r.Holder.Peer+"\x00"+r.RequestID)
	heap.Push(&l.exp, expEntry{at: r.Expires, id: r.ID})
	return nil
}

// index files r under its id and under key, its holder's request.
func (l *Ledger) index(r *Reservation, key string) {
	if l.res == nil {
		l.res, l.byReq = make(map[string]*Reservation), make(map[string]string)
	}
	l.res[r.ID] = r
	l.byReq[key] = r.ID
}

type expEntry struct {
	at    time.Time
	id    string
	start bool // the start of r's window (use changes), not its expiry
}

type expHeap []expEntry

func (h expHeap) Len() int { return len(h) }
func (h expHeap) Less(i, j int) bool {
	if c := h[i].at.Compare(h[j].at); c != 0 {
		return c < 0
	}
	return h[i].id < h[j].id
}
func (h expHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *expHeap) Push(x any)   { *h = append(*h, x.(expEntry)) }
func (h *expHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
