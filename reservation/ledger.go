package reservation

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
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
}

// DefaultLimits are the limits used for zero fields.
var DefaultLimits = Limits{
	HoldTimeout:  30 * time.Second,
	DefaultLease: 5 * time.Minute,
	MinLease:     time.Second,
	MaxLease:     24 * time.Hour,
	Retain:       time.Hour,
	MaxLive:      100000,
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
	return d
}

// Request asks for a new reservation.
type Request struct {
	RequestID string // chosen by the client; a retry carries the same one
	Holder    Holder
	Amounts   []Amount
	Hold      time.Duration // how long the hold lasts; 0: Limits.HoldTimeout, which is also the most
	Commit    bool          // commit at once: the reservation starts as a lease
	Lease     time.Duration // lease length with Commit; 0: Limits.DefaultLease
	Group     string        // co-reservation id, informational
}

// Usage is one resource kind's counting semaphore.
type Usage struct {
	Kind     string
	Capacity int64
	Used     int64 // by held and committed reservations
}

// Free is what is left, never negative (capacity may drop below use).
func (u Usage) Free() int64 { return max(0, u.Capacity-u.Used) }

type sem struct{ cap, used int64 }

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
	sems    map[string]*sem
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
		sems:    make(map[string]*sem),
		res:     make(map[string]*Reservation),
		byReq:   make(map[string]string),
		nextSeq: 1,
		isDirty: make(map[string]bool),
	}
}

// Limits returns the limits in force.
func (l *Ledger) Limits() Limits { return l.lim }

// SetCapacity declares kind with capacity n (n ≥ 0), or changes it. A
// capacity below what is reserved keeps the reservations; nothing more of
// that kind is granted until enough is released.
func (l *Ledger) SetCapacity(kind string, n int64) {
	s := l.sems[kind]
	if s == nil {
		s = &sem{}
		l.sems[kind] = s
	}
	s.cap = max(0, n)
}

// Usage returns every kind's semaphore, sorted by kind.
func (l *Ledger) Usage() []Usage {
	out := make([]Usage, 0, len(l.sems))
	for k, s := range l.sems {
		out = append(out, Usage{Kind: k, Capacity: s.cap, Used: s.used})
	}
	slices.SortFunc(out, func(a, b Usage) int { return strings.Compare(a.Kind, b.Kind) })
	return out
}

// Free returns the unreserved amount of kind (0 for an unknown kind).
func (l *Ledger) Free(kind string) int64 {
	if s := l.sems[kind]; s != nil {
		return max(0, s.cap-s.used)
	}
	return 0
}

// Live returns how many reservations are held or committed.
func (l *Ledger) Live() int {
	return l.live
}

func (l *Ledger) kindList() string {
	ks := make([]string, 0, len(l.sems))
	for k := range l.sems {
		ks = append(ks, k)
	}
	slices.Sort(ks)
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
		if _, ok := l.sems[a.Kind]; !ok {
			return nil, errorf(CodeBadRequest, "unknown resource kind %q: this manager offers %s", trunc(a.Kind), l.kindList())
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

func trunc(s string) string {
	if len(s) > MaxKindLen {
		return s[:MaxKindLen] + "…"
	}
	return s
}

// Reserve grants req at now, or refuses it and changes nothing. A request
// whose RequestID was already granted to the same holder gets that
// reservation back (dup is true), in whatever state it is now; the same id
// with different amounts is a conflict.
func (l *Ledger) Reserve(now time.Time, req Request) (r Reservation, dup bool, err error) {
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
	var lease time.Duration
	if req.Commit {
		if lease, err = l.checkLease(req.Lease); err != nil {
			return Reservation{}, false, err
		}
	}
	key := req.Holder.Peer + "\x00" + req.RequestID
	if id, ok := l.byReq[key]; ok {
		old := l.res[id]
		if !slices.Equal(old.Amounts, amounts) || old.Group != req.Group {
			return Reservation{}, false, errorf(CodeConflict, "request id %q was already used for reservation %s with other amounts", req.RequestID, id)
		}
		return old.Clone(), true, nil
	}
	if l.live >= l.lim.MaxLive {
		return Reservation{}, false, errorf(CodeRefused, "this manager already has %d live reservations, its limit", l.live)
	}
	var short []string
	for _, a := range amounts {
		s := l.sems[a.Kind]
		if free := max(0, s.cap-s.used); a.N > free {
			short = append(short, fmt.Sprintf("%s: asked %s, free %s of %s", a.Kind, fmtN(a.Kind, a.N), fmtN(a.Kind, free), fmtN(a.Kind, s.cap)))
		}
	}
	if len(short) > 0 {
		return Reservation{}, false, errorf(CodeRefused, "not enough free (%s)", strings.Join(short, "; "))
	}
	for _, a := range amounts {
		l.sems[a.Kind].used += a.N
	}
	nr := &Reservation{
		ID:        FormatID(l.name, l.nextSeq, l.tag),
		Holder:    req.Holder,
		Amounts:   amounts,
		State:     Held,
		Created:   now,
		Updated:   now,
		Expires:   now.Add(hold),
		RequestID: req.RequestID,
		Group:     req.Group,
	}
	if req.Commit {
		nr.State, nr.Lease, nr.Expires = Committed, lease, now.Add(lease)
	}
	l.nextSeq++
	l.live++
	l.res[nr.ID] = nr
	l.byReq[key] = nr.ID
	heap.Push(&l.exp, expEntry{at: nr.Expires, id: nr.ID})
	l.mark(nr.ID)
	return nr.Clone(), false, nil
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
			cur.State, cur.Lease, cur.Expires = Committed, lease, now.Add(lease)
		default:
			return Reservation{}, false, l.gone(cur, m.Op)
		}
	case OpRenew:
		switch cur.State {
		case Held:
			return Reservation{}, false, errorf(CodeConflict, "reservation %s is held, not committed: commit it first (the hold lapses at %s)", m.ID, cur.Expires.UTC().Format(time.RFC3339))
		case Committed:
			cur.Lease, cur.Expires = lease, now.Add(lease)
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
	return errorf(CodeGone, "reservation %s cannot be %s: it is %s (%s)", r.ID, map[Op]string{OpCommit: "committed", OpRenew: "renewed"}[op], r.State, r.Reason)
}

// end moves a live reservation to a terminal state and frees its amounts.
// The record stays Retain longer.
func (l *Ledger) end(now time.Time, r *Reservation, st State, reason string) {
	for _, a := range r.Amounts {
		if s := l.sems[a.Kind]; s != nil {
			s.used -= a.N
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
	var lapsed []Reservation
	for len(l.exp) > 0 && !l.exp[0].at.After(now) {
		e := heap.Pop(&l.exp).(expEntry)
		r := l.res[e.id]
		if r == nil || !r.Expires.Equal(e.at) {
			continue // stale entry: renewed, ended or forgotten since
		}
		if r.State.Live() {
			why := "hold timed out"
			if r.State == Committed {
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
// all), oldest first.
func (l *Ledger) List(keep func(*Reservation) bool) []Reservation {
	var out []Reservation
	for _, r := range l.res {
		if keep == nil || keep(r) {
			out = append(out, r.Clone())
		}
	}
	slices.SortFunc(out, func(a, b Reservation) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID))
	})
	return out
}

// Oldest returns the first limit reservations keep accepts, in the order
// List gives, and how many it accepts in all. It copies only those it
// returns, so a short listing of a large ledger costs a scan, not a copy
// and sort of everything.
func (l *Ledger) Oldest(keep func(*Reservation) bool, limit int) ([]Reservation, int) {
	older := func(a, b *Reservation) bool {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID)) < 0
	}
	var best []*Reservation // sorted, at most limit
	total := 0
	for _, r := range l.res {
		if keep != nil && !keep(r) {
			continue
		}
		total++
		if limit <= 0 || len(best) == limit && !older(r, best[len(best)-1]) {
			continue
		}
		i, _ := slices.BinarySearchFunc(best, r, func(a, b *Reservation) int {
			if older(a, b) {
				return -1
			}
			return 1
		})
		if len(best) < limit {
			best = append(best, nil)
		}
		copy(best[i+1:], best[i:len(best)-1])
		best[i] = r
	}
	out := make([]Reservation, len(best))
	for i, r := range best {
		out[i] = r.Clone()
	}
	return out, total
}

func (l *Ledger) mark(id string) {
	if !l.isDirty[id] {
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
	if r.State.Live() {
		for _, a := range r.Amounts {
			s := l.sems[a.Kind]
			if s == nil {
				s = &sem{}
				l.sems[a.Kind] = s
			}
			s.used += a.N
		}
		l.live++
	}
	l.nextSeq = max(l.nextSeq, seq+1)
	l.res[r.ID] = r
	l.byReq[r.Holder.Peer+"\x00"+r.RequestID] = r.ID
	heap.Push(&l.exp, expEntry{at: r.Expires, id: r.ID})
	return nil
}

type expEntry struct {
	at time.Time
	id string
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
