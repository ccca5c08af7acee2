package client

import (
	"context"
	"errors"
	"os/user"
	"time"

	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/wire"
)

// LoginName is the name of the user running the program ("" if unknown):
// who reserves or asks, for owners' policies and access lists, when a
// request names no user.
func LoginName() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return ""
}

// ReserveSpec is a reservation as a program states it: what, where, for
// how long. Reserver.Make turns it into the query and the reservation
// requests.
type ReserveSpec struct {
	// What: at least one amount.
	CPUs   int64
	Mem    int64          // bytes
	Tokens []*wire.Amount // counted tokens, KIND=N

	// Where. By default: query the grid for offers that meet Requirement
	// (or, if it is "", that have the amounts free: query.Need), ranked
	// by Rank, reserve at the best offer's manager and fall back to the
	// next offer if that one was taken meanwhile. At: reserve at this
	// manager (name or peer id) instead, Requirement (if set) checked
	// there. All with Count: co-reserve on Count managers that meet All,
	// on all of them or on none (hold on each, then commit all).
	Requirement string
	Rank        string
	At          string
	All         string
	Count       int

	// How long. Commit makes a lease at once instead of a hold (a
	// co-reservation always commits); Lease is its length (0: the
	// manager's); Hold bounds the hold (0: the manager's hold timeout).
	// Duration > 0 books the window [Begin, Begin+Duration) ahead
	// instead of a lease from now (a zero Begin: now).
	Commit   bool
	Lease    time.Duration
	Hold     time.Duration
	Begin    time.Time
	Duration time.Duration

	// Who. User ("" is LoginName()) and Attrs are what owners' policies
	// and access lists see; a repeated RequestID returns the original
	// reservation.
	User      string
	RequestID string
	Attrs     map[string]string
}

// Reserved is what Make reserved: one reservation, or Count of a
// co-reservation (in the order of the offers), and the attempts made
// (offers that refused before one granted).
type Reserved struct {
	Reservations []*wire.Reservation
	Tries        []Attempt
}

// ErrNothingToReserve: a ReserveSpec with no amount.
var ErrNothingToReserve = errors.New("client: nothing to reserve (no cpus, mem or token amount)")

// Requests are the query and the reservation request of s: the query
// Make sends (unused with At) and the request each manager is asked to
// grant.
func (s ReserveSpec) Requests() (*wire.QueryRequest, *wire.ReserveRequest) {
	req := &wire.ReserveRequest{RequestId: s.RequestID, User: s.User, Commit: s.Commit,
		LeaseMs: uint64(s.Lease / time.Millisecond), HoldMs: uint64(s.Hold / time.Millisecond), Attrs: s.Attrs}
	if s.Duration > 0 {
		if !s.Begin.IsZero() {
			req.BeginUnixMs = s.Begin.UnixMilli()
		}
		req.DurationMs = uint64(s.Duration / time.Millisecond)
	}
	if req.User == "" {
		req.User = LoginName()
	}
	if s.CPUs > 0 {
		req.Amounts = append(req.Amounts, &wire.Amount{Kind: "cpus", N: s.CPUs})
	}
	if s.Mem > 0 {
		req.Amounts = append(req.Amounts, &wire.Amount{Kind: "mem", N: s.Mem})
	}
	req.Amounts = append(req.Amounts, s.Tokens...)
	requirement := s.Requirement
	if requirement == "" {
		requirement = query.Need{CPUs: max(s.CPUs, 0), Mem: max(s.Mem, 0), Tokens: s.Tokens}.Requirement()
	}
	q := &wire.QueryRequest{Requirement: requirement, Rank: s.Rank, User: req.User, Cpus: s.CPUs, Mem: s.Mem,
		Down: 255, Up: 255, Want: 3, Limit: 10, Attrs: s.Attrs, BeginUnixMs: req.BeginUnixMs, DurationMs: req.DurationMs}
	switch {
	case s.All != "":
		q.Requirement = s.All
		req.Requirement = s.All
		req.Commit = true
	case s.At != "":
		req.Requirement = s.Requirement
	default:
		req.Requirement = requirement
	}
	return q, req
}

// Make reserves what s says, where it says (see ReserveSpec). The
// errors are those of ReserveBest, ReserveAt and CoReserve, and
// ErrNothingToReserve.
func (r *Reserver) Make(ctx context.Context, s ReserveSpec) (*Reserved, error) {
	q, req := s.Requests()
	if len(req.Amounts) == 0 {
		return nil, ErrNothingToReserve
	}
	switch {
	case s.All != "":
		res, tries, err := r.CoReserve(ctx, q, req, s.Count)
		if err != nil {
			return nil, err
		}
		return &Reserved{Reservations: res, Tries: tries}, nil
	case s.At != "":
		res, err := r.ReserveAt(ctx, s.At, req)
		if err != nil {
			return nil, err
		}
		return &Reserved{Reservations: []*wire.Reservation{res}}, nil
	default:
		res, tries, err := r.ReserveBest(ctx, q, req)
		if err != nil {
			return nil, err
		}
		return &Reserved{Reservations: []*wire.Reservation{res}, Tries: tries}, nil
	}
}
