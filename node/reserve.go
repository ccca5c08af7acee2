package node

import (
	"fmt"
	"slices"
	"time"

	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// reservations is the module of this manager's own resources: the ledger
// (counting semaphores, numbers, holds and leases), whether the store
// failed, and whether an admin drained the manager.
type reservations struct {
	e        reservationsEnv
	ledger   *reservation.Ledger
	storeErr string // set when the store failed: no more reservation changes
	drained  bool   // refuse new reservations

	// Competing claims (config ClaimWindow, with an owner's rank): new
	// requests wait until claimDue, then are decided best owner rank
	// first. (deciding sits beside drained: a byte of padding, not
	// eight, in a struct at the edge of its size class, now 448 bytes.)
	deciding bool
	pending  []claim
	claimDue time.Time

	// What queries see of this host (values.go), net of what is reserved
	// (refreshFree) and over a window (calendar.go).
	// hostAt is when the runtime last sampled the host (SetHost), in
	// Unix nanoseconds (0: never). The host's values themselves go into
	// vals at once and are not kept: a copy cost every manager 200 bytes
	// (and a time.Time here 16 more, past the 448-byte size class).
	hostAt    int64
	vals      query.Values              // query attributes now, net of reservations
	memAvail  int64                     // memory available on the host, before reservations
	appCounts map[string]query.AppCount // the application instances here, as the runtime last told
}

// policy is the owner's policy, compiled (nil: none). The config holds
// it; a field of its own cost every manager 8 bytes, which took the
// module past its size class.
func (m *reservations) policy() *query.Program { return m.e.conf().PolicyProgram() }

// claim is a reservation request waiting for the owner to choose.
type claim struct {
	o   origin
	req *wire.ReserveRequest
}

// maxPendingClaims bounds the requests one claim window gathers: a full
// window is decided at once.
const maxPendingClaims = 1024

// newReservations makes the ledger with the kinds of the config; cpus and
// mem get their capacity from the host values (Core.values).
// reservationsEnv is what the reservations module sees of the Core
// besides env: who is an admin and what a client's user is, the listen
// addresses and the compiled expressions (for offers), and the two events
// the applications module hears from it.
type reservationsEnv interface {
	env
	isAdmin(peer string) bool
	userOf(client, declared string) string
	listenAddrs() []string
	expressions() *query.Cache
	// reservationsEnded: these reservations ended (released, expired):
	// what they ran here is to be removed.
	reservationsEnded(rs []reservation.Reservation)
	// reservationReleased: r was released at o's request; the answer to
	// o waits for its applications to be removed.
	reservationReleased(now time.Time, o origin, r reservation.Reservation)
}

func newReservations(e reservationsEnv) *reservations {
	cfg := e.conf()
	l := reservation.NewLedger(e.name(), e.me(), cfg.Reservations)
	for k, n := range cfg.Tokens {
		l.SetCapacity(k, n)
	}
	l.SetCapacity(reservation.CPUs, 0)
	l.SetCapacity(reservation.Mem, 0)
	return &reservations{e: e, ledger: l}
}

// handle takes reservation requests from clients (between managers there
// are none: a client reserves at the owner).
func (m *reservations) handle(now time.Time, o origin, env *wire.Envelope) (bool, error) {
	if o.peer != "" {
		return false, nil
	}
	switch b := env.Body.(type) {
	case *wire.Envelope_ReserveRequest:
		m.onReserve(now, o, b.ReserveRequest)
	case *wire.Envelope_ReservationOp:
		m.onReservationOp(now, o, b.ReservationOp)
	case *wire.Envelope_ReservationsRequest:
		m.onReservations(o, b.ReservationsRequest)
	case *wire.Envelope_CalendarRequest:
		m.onCalendar(now, o, b.CalendarRequest)
	default:
		return false, nil
	}
	return true, nil
}

// tick lapses holds and leases whose time is up.
func (m *reservations) tick(now time.Time) {
	m.expire(now)
	if len(m.pending) > 0 && !now.Before(m.claimDue) {
		m.decide(now)
	}
}

func (m *reservations) deadline(time.Time) time.Time {
	next := m.ledger.NextExpiry()
	if len(m.pending) > 0 && (next.IsZero() || m.claimDue.Before(next)) {
		next = m.claimDue
	}
	return next
}

// decide grants or refuses the claims gathered in the window, the owner's
// best ranked first (a rank undefined for a request counts lowest); equal
// ranks keep their order of arrival.
func (m *reservations) decide(now time.Time) {
	e := m.e
	pending := m.pending
	m.pending = nil
	or := e.conf().RankProgram()
	type scored struct {
		claim
		rank float64
		ok   bool
	}
	ss := make([]scored, len(pending))
	for i, p := range pending {
		ss[i].claim = p
		if or != nil {
			qr := m.queryRequest(p.o, p.req)
			ss[i].rank, ss[i].ok = or.Score(&m.vals, qr)
		}
	}
	slices.SortStableFunc(ss, func(a, b scored) int {
		switch {
		case a.ok != b.ok:
			if a.ok {
				return -1
			}
			return 1
		case a.rank > b.rank:
			return -1
		case a.rank < b.rank:
			return 1
		}
		return 0
	})
	m.deciding = true
	defer func() { m.deciding = false }()
	for _, s := range ss {
		m.onReserve(now, s.o, s.req)
	}
}

// queryRequest is what owners' expressions see of a reservation request.
func (m *reservations) queryRequest(o origin, req *wire.ReserveRequest) *query.Request {
	e := m.e
	qr := &query.Request{User: e.userOf(o.client, req.User), Attrs: req.Attrs}
	for _, a := range req.Amounts {
		if a == nil {
			continue
		}
		switch a.Kind {
		case reservation.CPUs:
			qr.CPUs = a.N
		case reservation.Mem:
			qr.Mem = a.N
		}
	}
	return qr
}

// relationEnded: reservations do not depend on relations (a client reserves
// at the owner; those at a failed manager come back with it).
func (m *reservations) relationEnded(time.Time, *relations.Relation, string) {}

// Restore loads the stored reservations before Start. Holds and leases
// that ended while the manager was down lapse now; the changes are in the
// next Ready's Persist.
func (c *Core) Restore(now time.Time, snap reservation.Snapshot) error {
	c.dl.ok = false // see NextDeadline
	c.now = now
	l := c.res.ledger
	if err := l.Restore(now, snap); err != nil {
		return err
	}
	if n := l.Live(); n > 0 || len(snap.Records) > 0 {
		c.log.Info("reservations restored", "records", len(snap.Records), "live", n)
	}
	c.res.refreshFree()
	return nil
}

// Ledger exposes the reservation ledger for inspection (tests, status).
// The caller must not change it.
func (c *Core) Ledger() *reservation.Ledger {
	c.dl.ok = false // the caller may change it: see NextDeadline
	return c.res.ledger
}

// LedgerToRead is Ledger for a caller that only reads it, and reads it
// often: NextDeadline's cached answer holds across it. (The simulator
// checks every manager's ledger once a virtual second; through Ledger,
// that made 11 % of the Cores' deadline computations at 20,000 managers,
// and more through the heartbeats that then found the cache cleared.)
func (c *Core) LedgerToRead() *reservation.Ledger { return c.res.ledger }

// StoreFailed tells the Core that writing a Persist batch failed: what it
// holds in memory is no longer what the disk holds, so it refuses every
// further change to reservations until the manager is restarted.
func (c *Core) StoreFailed(now time.Time, err error) {
	c.dl.ok = false // see NextDeadline
	c.now = now
	if c.res.storeErr == "" {
		c.res.storeErr = err.Error()
		c.log.Error("reservation store failed; refusing reservation changes until restart", "err", err)
	}
}

// refreshFree puts the free amounts, net of reservations, into the values
// queries see.
func (m *reservations) refreshFree() {
	l := m.ledger
	m.vals.CPUsFree = l.Free(reservation.CPUs)
	m.vals.MemFree = min(m.memAvail, l.Free(reservation.Mem))
	m.vals.SetTokens(m.tokenFree())
}

// get is reservation id as it stands at now: leases past their time
// lapse first.
func (m *reservations) get(now time.Time, id string) (reservation.Reservation, bool) {
	m.expire(now)
	return m.ledger.Get(id)
}

// liveIDs are the ids of the reservations live now, sorted, never nil.
func (m *reservations) liveIDs() []string {
	live := []string{}
	for _, r := range m.ledger.List(func(r *reservation.Reservation) bool { return r.State.Live() }) {
		live = append(live, r.ID)
	}
	slices.Sort(live)
	return live
}

// expire lapses holds and leases whose time is up.
func (m *reservations) expire(now time.Time) {
	e := m.e
	if next := m.ledger.NextExpiry(); next.IsZero() || next.After(now) {
		return
	}
	lapsed := m.ledger.Expire(now)
	for _, r := range lapsed {
		e.logger().Info("reservation lapsed", "id", r.ID, "holder", r.Holder.String(), "reason", r.Reason)
		publishReservation(e, now, "expired", "", &r, r.Holder, nil, r.Reason)
	}
	e.reservationsEnded(lapsed)
	m.refreshFree()
}

func codeToPB(code reservation.Code) wire.ErrorReply_Code {
	switch code {
	case reservation.CodeBadRequest:
		return wire.ErrorReply_CODE_BAD_REQUEST
	case reservation.CodeRefused:
		return wire.ErrorReply_CODE_REFUSED
	case reservation.CodeForbidden:
		return wire.ErrorReply_CODE_FORBIDDEN
	case reservation.CodeNotFound:
		return wire.ErrorReply_CODE_NOT_FOUND
	case reservation.CodeGone:
		return wire.ErrorReply_CODE_GONE
	case reservation.CodeConflict:
		return wire.ErrorReply_CODE_CONFLICT
	}
	return wire.ErrorReply_CODE_UNSPECIFIED
}

func (m *reservations) replyLedgerErr(o origin, err error) {
	e := m.e
	e.replyErr(o, codeToPB(reservation.CodeOf(err)), fmt.Sprintf("%s: %v", e.name(), err))
}

func (m *reservations) storeDown(o origin) bool {
	e := m.e
	if m.storeErr == "" {
		return false
	}
	e.replyErr(o, wire.ErrorReply_CODE_UNAVAILABLE, fmt.Sprintf("%s: reservation store failed (%s): no reservation changes until the manager restarts", e.name(), m.storeErr))
	return true
}

func amountsFromPB(in []*wire.Amount) []reservation.Amount {
	out := make([]reservation.Amount, len(in))
	for i, a := range in {
		out[i] = reservation.Amount{Kind: a.Kind, N: a.N}
	}
	return out
}

func amountsToPB(in []reservation.Amount) []*wire.Amount {
	out := make([]*wire.Amount, len(in))
	for i, a := range in {
		out[i] = &wire.Amount{Kind: a.Kind, N: a.N}
	}
	return out
}

var stateToPBMap = map[reservation.State]wire.ReservationState{
	reservation.Held:      wire.ReservationState_RESERVATION_STATE_HELD,
	reservation.Committed: wire.ReservationState_RESERVATION_STATE_COMMITTED,
	reservation.Released:  wire.ReservationState_RESERVATION_STATE_RELEASED,
	reservation.Expired:   wire.ReservationState_RESERVATION_STATE_EXPIRED,
}

func (m *reservations) reservationToPB(r *reservation.Reservation) *wire.Reservation {
	e := m.e
	return &wire.Reservation{
		Id:            r.ID,
		OwnerPeer:     e.me(),
		OwnerName:     e.name(),
		OwnerAddrs:    e.listenAddrs(),
		HolderPeer:    r.Holder.Peer,
		User:          r.Holder.User,
		Amounts:       amountsToPB(r.Amounts),
		State:         stateToPBMap[r.State],
		CreatedUnixMs: r.Created.UnixMilli(),
		UpdatedUnixMs: r.Updated.UnixMilli(),
		ExpiresUnixMs: r.Expires.UnixMilli(),
		LeaseMs:       uint64(r.Lease / time.Millisecond),
		Group:         r.Group,
		Reason:        r.Reason,
		StartUnixMs:   msOf(r.Start),
		EndUnixMs:     msOf(r.End),
		Window:        r.Window,
	}
}

func (m *reservations) replyReservation(o origin, r *reservation.Reservation, retry bool) {
	e := m.e
	e.reply(o, &wire.Envelope{Body: &wire.Envelope_ReservationReply{ReservationReply: &wire.ReservationReply{
		Reservation: m.reservationToPB(r), Retry: retry,
	}}})
}

// onReserve grants or refuses a reservation request from a client. The
// offer the client saw was only a hint: amounts, access list, the
// requirement (if the client sent it) and the owner's policy are checked
// again against the values now.
func (m *reservations) onReserve(now time.Time, o origin, req *wire.ReserveRequest) {
	e := m.e
	if m.storeDown(o) {
		return
	}
	if w := e.conf().ClaimWindow; w > 0 && !m.deciding && e.conf().RankProgram() != nil && !m.ledger.Seen(o.client, req.RequestId) {
		// Competing claims: gather what comes within the window, then
		// choose (decide). A retry of a granted request is answered at once.
		if len(m.pending) == 0 {
			m.claimDue = now.Add(w)
		}
		m.pending = append(m.pending, claim{o: o, req: req})
		if len(m.pending) >= maxPendingClaims {
			m.decide(now)
		}
		return
	}
	if m.drained && !m.ledger.Seen(o.client, req.RequestId) {
		e.replyErr(o, wire.ErrorReply_CODE_REFUSED, fmt.Sprintf("%s is drained: it takes no new reservations (existing ones are kept)", e.name()))
		return
	}
	m.expire(now) // what lapsed since the last tick is free again
	holder := reservation.Holder{Peer: o.client, User: e.userOf(o.client, req.User)}
	trace := traceOf(o.trace, o.client, req.RequestId)
	o.trace = trace
	refused := func(why string) {
		e.logger().Debug("reservation refused", "trace", trace, "holder", holder.String(), "why", why)
		publishReservation(e, now, "refused", trace, nil, holder, req.Amounts, why)
	}
	// A retry gets its original answer, whatever the values say now (its
	// own reservation may be what makes them fail).
	if m.ledger.Seen(holder.Peer, req.RequestId) {
		r, dup, err := m.ledger.Reserve(now, m.ledgerRequest(holder, req))
		if err != nil {
			m.replyLedgerErr(o, err) // same id, other request: a conflict
			return
		}
		m.replyReservation(o, &r, dup)
		return
	}
	amounts := amountsFromPB(req.Amounts)
	admin := e.isAdmin(holder.Peer)
	if err := e.conf().Access.Check(holder, admin, amounts); err != nil {
		refused(err.Error())
		m.replyLedgerErr(o, err)
		return
	}
	qr := m.queryRequest(o, req)
	vals, _, _ := m.forRequest(&m.vals, qr) // owner_rank for this request
	if req.Requirement != "" {
		need, err := e.expressions().Get(query.Requirement, req.Requirement)
		if err != nil {
			e.replyErr(o, wire.ErrorReply_CODE_BAD_REQUEST, fmt.Sprintf("%s: %v", e.name(), err))
			return
		}
		if !need.Match(vals, qr) {
			refused("the requirement no longer holds")
			e.replyErr(o, wire.ErrorReply_CODE_REFUSED, fmt.Sprintf("%s: the requirement no longer holds here (%s)", e.name(), matchedText(vals, need)))
			return
		}
	}
	if p := m.policy(); p != nil && !admin && !p.Match(vals, qr) {
		refused("the owner's policy")
		e.replyErr(o, wire.ErrorReply_CODE_REFUSED, fmt.Sprintf("%s: refused by the owner's policy", e.name()))
		return
	}
	r, dup, err := m.ledger.Reserve(now, m.ledgerRequest(holder, req))
	if err != nil {
		refused(err.Error())
		m.replyLedgerErr(o, err)
		return
	}
	if !dup {
		m.refreshFree()
		e.logger().Debug("reserved", "trace", trace, "id", r.ID, "holder", holder.String(), "state", r.State.String())
		typ := "held"
		if r.State == reservation.Committed {
			typ = "committed"
		}
		publishReservation(e, now, typ, trace, &r, r.Holder, nil, "")
	}
	m.replyReservation(o, &r, dup)
}

func (m *reservations) ledgerRequest(h reservation.Holder, req *wire.ReserveRequest) reservation.Request {
	return reservation.Request{
		RequestID: req.RequestId,
		Holder:    h,
		Amounts:   amountsFromPB(req.Amounts),
		Hold:      msDuration(req.HoldMs),
		Commit:    req.Commit,
		Lease:     msDuration(req.LeaseMs),
		Group:     req.Group,
		Begin:     unixMs(req.BeginUnixMs),
		Duration:  msDuration(req.DurationMs),
	}
}

// msDuration converts milliseconds from the wire, saturating instead of
// overflowing (an absurd value then fails the ledger's bounds check).
func msDuration(ms uint64) time.Duration {
	const most = uint64(1<<63-1) / uint64(time.Millisecond)
	if ms > most {
		ms = most
	}
	return time.Duration(ms) * time.Millisecond
}

// matchedText shows the values a requirement read, for a refusal.
func matchedText(v *query.Values, p *query.Program) string {
	s := ""
	for i, ref := range p.Refs() {
		if i > 0 {
			s += ", "
		}
		s += ref + " = " + v.Show(ref)
	}
	return s
}

var opFromPB = map[wire.ReservationOpRequest_Op]reservation.Op{
	wire.ReservationOpRequest_OP_COMMIT:  reservation.OpCommit,
	wire.ReservationOpRequest_OP_RENEW:   reservation.OpRenew,
	wire.ReservationOpRequest_OP_RELEASE: reservation.OpRelease,
}

// onReservationOp commits, renews or releases a reservation.
func (m *reservations) onReservationOp(now time.Time, o origin, req *wire.ReservationOpRequest) {
	e := m.e
	op, ok := opFromPB[req.Op]
	if !ok {
		e.replyErr(o, wire.ErrorReply_CODE_BAD_REQUEST, fmt.Sprintf("%s: unknown reservation operation %v", e.name(), req.Op))
		return
	}
	if m.storeDown(o) {
		return
	}
	m.expire(now) // a hold or lease past its time cannot be committed or renewed
	before, known := m.ledger.Get(req.Id)
	r, dup, err := m.ledger.Apply(now, reservation.Mutation{
		Op:        op,
		ID:        req.Id,
		By:        reservation.Holder{Peer: o.client},
		Admin:     e.isAdmin(o.client),
		RequestID: req.RequestId,
		Lease:     msDuration(req.LeaseMs),
	})
	if err != nil {
		m.replyLedgerErr(o, err)
		return
	}
	// A release of a committed reservation ends what it runs here: the
	// answer waits for the runtime to remove it, and says what it removed.
	ending := op == reservation.OpRelease && !dup && known && before.State == reservation.Committed
	if op == reservation.OpRelease {
		m.refreshFree()
		if !dup && !ending {
			e.reservationsEnded([]reservation.Reservation{r})
		}
	}
	if !dup && !(op == reservation.OpRelease && known && !before.State.Live()) {
		o.trace = traceOf(o.trace, o.client, req.Id, req.RequestId, req.Op.String())
		typ := op.Past()
		e.logger().Debug("reservation "+typ, "trace", o.trace, "id", r.ID)
		publishReservation(e, now, typ, o.trace, &r, r.Holder, nil, "")
	}
	if ending {
		e.reservationReleased(now, o, r)
		return
	}
	m.replyReservation(o, &r, dup)
}

// maxListed bounds one listing: about 300 bytes each, 1.5 MB in all.
const maxListed = 5000

// onReservations lists the ledger one page at a time, in the order the
// reservations were made: a page goes on after the number of the last one
// the previous page listed (its next), so that paging misses nothing that
// was there throughout and lists nothing twice, whatever was made, released
// or lapsed in between (a new reservation always comes after).
func (m *reservations) onReservations(o origin, req *wire.ReservationsRequest) {
	e := m.e
	var after uint64
	if req.After != "" {
		seq, err := m.ledger.SeqOf(req.After)
		if err != nil {
			e.replyErr(o, wire.ErrorReply_CODE_BAD_REQUEST, fmt.Sprintf("%s: reservations_request.after: %v", e.name(), err))
			return
		}
		after = seq
	}
	rep := &wire.ReservationsReply{Name: e.name(), Peer: e.me(), Live: uint32(m.ledger.Live())}
	limit := int(req.Limit)
	if limit == 0 || limit > maxListed {
		limit = maxListed // keeps the reply well under the frame limit
	}
	list, total := m.ledger.OldestAfter(after, func(r *reservation.Reservation) bool {
		return (req.All || r.State.Live()) && (!req.Mine || r.Holder.Peer == o.client)
	}, limit)
	rep.More = uint32(total - len(list))
	if rep.More > 0 {
		rep.Next = list[len(list)-1].ID
	}
	for _, r := range list {
		rep.Reservations = append(rep.Reservations, m.reservationToPB(&r))
	}
	rep.Usage = m.usagePB()
	e.reply(o, &wire.Envelope{Body: &wire.Envelope_ReservationsReply{ReservationsReply: rep}})
}

func (m *reservations) usagePB() []*wire.Usage {
	var out []*wire.Usage
	for _, u := range m.ledger.Usage() {
		out = append(out, &wire.Usage{Kind: u.Kind, Capacity: u.Capacity, Used: u.Used})
	}
	return out
}

// validateReservationMsg bounds the text of reservation requests.
func validateReservationMsg(env *wire.Envelope) error {
	switch b := env.Body.(type) {
	case *wire.Envelope_ReserveRequest:
		r := b.ReserveRequest
		if err := checkText("reserve_request.request_id", r.RequestId, reservation.MaxRequestIDLen); err != nil {
			return err
		}
		if err := checkText("reserve_request.user", r.User, reservation.MaxUserLen); err != nil {
			return err
		}
		if err := checkText("reserve_request.requirement", r.Requirement, query.MaxExprLen); err != nil {
			return err
		}
		if err := checkText("reserve_request.group", r.Group, reservation.MaxGroupLen); err != nil {
			return err
		}
		if err := checkAttrs("reserve_request.attrs", r.Attrs); err != nil {
			return err
		}
		if len(r.Amounts) > reservation.MaxKinds {
			return fmt.Errorf("%w: reserve_request.amounts has %d entries, limit %d", ErrBadMessage, len(r.Amounts), reservation.MaxKinds)
		}
		for i, a := range r.Amounts {
			if a == nil {
				return fmt.Errorf("%w: reserve_request.amounts[%d] is empty", ErrBadMessage, i)
			}
			if err := checkText(fmt.Sprintf("reserve_request.amounts[%d].kind", i), a.Kind, reservation.MaxKindLen); err != nil {
				return err
			}
		}
	case *wire.Envelope_ReservationOp:
		r := b.ReservationOp
		if err := checkText("reservation_op.request_id", r.RequestId, reservation.MaxRequestIDLen); err != nil {
			return err
		}
		return checkText("reservation_op.id", r.Id, reservation.MaxIDLen)
	case *wire.Envelope_ReservationsRequest:
		return checkText("reservations_request.after", b.ReservationsRequest.After, reservation.MaxIDLen)
	}
	return nil
}
