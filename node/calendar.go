package node

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// Bounds of the calendar's questions.
const (
	maxCalendarSpan  = 90 * 24 * time.Hour       // a calendar listing, and an earliest search's horizon
	defaultHorizon   = 7 * 24 * time.Hour        // an earliest search that names none
	maxStarts        = 16                        // spans of feasible starts per offer
	maxCalendarSteps = 10000                     // per kind in one listing
	maxQueryTokens   = 32                        // query_request.tokens
	maxAhead         = 10 * 365 * 24 * time.Hour // farthest instant a calendar question may name
)

// unixMs is a wire time; 0 means none.
func unixMs(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

func msOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// queryWindow is the window a query names, from is zero if none: [begin
// or now, + duration); a begin without a duration is the instant.
func queryWindow(now time.Time, req *wire.QueryRequest) (from, to time.Time) {
	if req.BeginUnixMs == 0 && req.DurationMs == 0 && !req.Earliest {
		return time.Time{}, time.Time{}
	}
	from = now
	if b := unixMs(req.BeginUnixMs); b.After(now) {
		from = b
		if lim := now.Add(maxAhead); from.After(lim) {
			from = lim
		}
	}
	return from, from.Add(max(msDuration(req.DurationMs), time.Millisecond))
}

// valuesOver are the manager's values with the free amounts the least
// free over [from, to), as a window booked there would find them.
func (m *reservations) valuesOver(from, to time.Time) *query.Values {
	e := m.e
	l := m.ledger
	v := m.vals
	v.CPUsFree = l.FreeOver(reservation.CPUs, from, to)
	v.MemFree = min(m.memAvail, l.FreeOver(reservation.Mem, from, to))
	if len(e.conf().Tokens) > 0 {
		t := make(map[string]int64, len(e.conf().Tokens))
		for k := range e.conf().Tokens {
			t[k] = l.FreeOver(k, from, to)
		}
		v.SetTokens(t)
	}
	return &v
}

// queryAmounts are what a query means to claim, as ledger amounts.
func queryAmounts(req *wire.QueryRequest) []reservation.Amount {
	var out []reservation.Amount
	if req.Cpus > 0 {
		out = append(out, reservation.Amount{Kind: reservation.CPUs, N: req.Cpus})
	}
	if req.Mem > 0 {
		out = append(out, reservation.Amount{Kind: reservation.Mem, N: req.Mem})
	}
	for _, a := range req.Tokens {
		if a.N > 0 {
			out = append(out, reservation.Amount{Kind: a.Kind, N: a.N})
		}
	}
	return out
}

// earliestStarts are the spans in which a window of the query's duration
// could begin here with its amounts free, and the values over the first
// such window; nil if there is none before the horizon (or the query asks
// for a kind this manager does not have).
func (m *reservations) earliestStarts(now time.Time, req *wire.QueryRequest) ([]*wire.Span, *query.Values) {
	from, to := queryWindow(now, req)
	d := to.Sub(from)
	horizon := msDuration(req.HorizonMs)
	if horizon <= 0 {
		horizon = defaultHorizon
	}
	horizon = min(horizon, maxCalendarSpan)
	// A kind this manager does not have, or an amount beyond its
	// capacity, has no feasible start: no offer.
	spans := m.ledger.Earliest(queryAmounts(req), from, from.Add(horizon), d, maxStarts)
	if len(spans) == 0 {
		return nil, nil
	}
	out := make([]*wire.Span, len(spans))
	for i, s := range spans {
		// Milliseconds on the wire: a start rounds up into its span, an end down.
		f, t := s.From.Add(time.Millisecond-1).Truncate(time.Millisecond), s.To.Truncate(time.Millisecond)
		out[i] = &wire.Span{FromUnixMs: f.UnixMilli(), ToUnixMs: max(t.UnixMilli(), f.UnixMilli())}
	}
	first := spans[0].From
	return out, m.valuesOver(first, first.Add(d))
}

// earliestAnswer is the entry's answer to an earliest search: the first
// instant at which want offers can all begin their window, and the best
// ranked of them (offers are ranked best first).
func earliestAnswer(offers []*wire.Offer, want int) *wire.Earliest {
	want = max(want, 1)
	var cands []int64
	for _, o := range offers {
		for _, s := range o.Starts {
			cands = append(cands, s.FromUnixMs)
		}
	}
	slices.Sort(cands)
	cands = slices.Compact(cands)
	for _, t := range cands {
		var names []string
		for _, o := range offers {
			for _, s := range o.Starts {
				if s.FromUnixMs <= t && t <= s.ToUnixMs {
					names = append(names, o.Name)
					break
				}
			}
			if len(names) == want {
				return &wire.Earliest{Found: true, BeginUnixMs: t, Managers: names}
			}
		}
	}
	return &wire.Earliest{}
}

// onCalendar answers a client's calendar request: each kind's use over
// the window asked, and the live reservations that meet it.
func (m *reservations) onCalendar(now time.Time, o origin, req *wire.CalendarRequest) {
	e := m.e
	m.expire(now)
	from := unixMs(req.FromUnixMs)
	if from.IsZero() {
		from = now
	}
	to := unixMs(req.ToUnixMs)
	if to.IsZero() {
		to = from.Add(24 * time.Hour)
	}
	if from.After(now.Add(maxAhead)) || from.Before(now.Add(-maxAhead)) {
		e.replyErr(o, wire.ErrorReply_CODE_BAD_REQUEST, fmt.Sprintf("%s: the calendar's window begins %s, more than %v from now", e.name(), text.MessageTime(from), maxAhead))
		return
	}
	if !to.After(from) || to.Sub(from) > maxCalendarSpan {
		e.replyErr(o, wire.ErrorReply_CODE_BAD_REQUEST, fmt.Sprintf("%s: the calendar's window %s–%s must end after it begins and span at most %v",
			e.name(), text.MessageTime(from), text.MessageTime(to), maxCalendarSpan))
		return
	}
	l := m.ledger
	kinds := req.Kinds
	if len(kinds) == 0 {
		for _, u := range l.Usage() {
			kinds = append(kinds, u.Kind)
		}
	}
	rep := &wire.CalendarReply{Name: e.name(), Peer: e.me(), FromUnixMs: from.UnixMilli(), ToUnixMs: to.UnixMilli(), NowUnixMs: now.UnixMilli()}
	for _, k := range kinds {
		if err := l.CheckKind(k); err != nil {
			m.replyLedgerErr(o, err)
			return
		}
		steps := l.Steps(k, from, to, maxCalendarSteps+1)
		kc := &wire.KindCalendar{Kind: k, Capacity: l.Capacity(k), Truncated: len(steps) > maxCalendarSteps}
		for _, s := range steps[:min(len(steps), maxCalendarSteps)] {
			kc.Steps = append(kc.Steps, &wire.Step{AtUnixMs: s.At.UnixMilli(), Used: s.Used})
		}
		rep.Kinds = append(rep.Kinds, kc)
	}
	var meet []reservation.Reservation
	for _, r := range l.List(func(r *reservation.Reservation) bool {
		return r.State.Live() && r.Start.Before(to) && r.End.After(from)
	}) {
		meet = append(meet, r)
	}
	slices.SortFunc(meet, func(a, b reservation.Reservation) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.ID, b.ID))
	})
	if len(meet) > maxListed {
		rep.More = uint32(len(meet) - maxListed)
		meet = meet[:maxListed]
	}
	for i := range meet {
		rep.Bookings = append(rep.Bookings, m.reservationToPB(&meet[i]))
	}
	e.reply(o, &wire.Envelope{Body: &wire.Envelope_CalendarReply{CalendarReply: rep}})
}

// validateCalendarMsg bounds the calendar's requests and the new fields of
// queries in time.
func validateCalendarMsg(env *wire.Envelope) error {
	switch b := env.Body.(type) {
	case *wire.Envelope_CalendarRequest:
		r := b.CalendarRequest
		if len(r.Kinds) > reservation.MaxKinds {
			return fmt.Errorf("%w: calendar_request.kinds has %d entries, limit %d", ErrBadMessage, len(r.Kinds), reservation.MaxKinds)
		}
		for i, k := range r.Kinds {
			if err := checkText(fmt.Sprintf("calendar_request.kinds[%d]", i), k, reservation.MaxKindLen); err != nil {
				return err
			}
		}
		if r.FromUnixMs < 0 || r.ToUnixMs < 0 {
			return fmt.Errorf("%w: calendar_request times must not be negative", ErrBadMessage)
		}
	case *wire.Envelope_QueryRequest:
		q := b.QueryRequest
		if q.BeginUnixMs < 0 {
			return fmt.Errorf("%w: query_request.begin_unix_ms is negative", ErrBadMessage)
		}
		if len(q.Tokens) > maxQueryTokens {
			return fmt.Errorf("%w: query_request.tokens has %d entries, limit %d", ErrBadMessage, len(q.Tokens), maxQueryTokens)
		}
		for i, a := range q.Tokens {
			if a == nil {
				return fmt.Errorf("%w: query_request.tokens[%d] is empty", ErrBadMessage, i)
			}
			if err := checkText(fmt.Sprintf("query_request.tokens[%d].kind", i), a.Kind, reservation.MaxKindLen); err != nil {
				return err
			}
		}
		if msDuration(q.DurationMs) > maxCalendarSpan {
			return fmt.Errorf("%w: query_request.duration_ms is longer than %v", ErrBadMessage, maxCalendarSpan)
		}
	case *wire.Envelope_ReserveRequest:
		if b.ReserveRequest.BeginUnixMs < 0 {
			return fmt.Errorf("%w: reserve_request.begin_unix_ms is negative", ErrBadMessage)
		}
	}
	return nil
}

// answerEarliest puts the answer of an earliest search into the entry's
// reply and cuts its offers to limit, the chosen managers first.
func answerEarliest(rep *wire.QueryReply, want, limit int) {
	rep.Earliest = earliestAnswer(rep.Offers, want)
	if len(rep.Offers) <= limit {
		return
	}
	chosen := map[string]bool{}
	for _, n := range rep.Earliest.Managers {
		chosen[n] = true
	}
	slices.SortStableFunc(rep.Offers, func(a, b *wire.Offer) int {
		switch {
		case chosen[a.Name] == chosen[b.Name]:
			return 0
		case chosen[a.Name]:
			return -1
		}
		return 1
	})
	rep.Offers = rep.Offers[:max(limit, len(chosen))]
}
