package client

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/wire"
)

// AllLevels, as QuerySpec.Down or Up, searches the whole grid that way.
const AllLevels = 255

// Errors of a QuerySpec that cannot be sent.
var (
	// ErrNoRequirement: the requirement is blank.
	ErrNoRequirement = errors.New("client: the query has no requirement")
	// ErrEarliestNoDuration: an earliest search without the length of
	// the window to find.
	ErrEarliestNoDuration = errors.New("client: an earliest search needs the window's duration")
	// ErrEarliestNoAmount: an earliest search without an amount the
	// window must hold.
	ErrEarliestNoAmount = errors.New("client: an earliest search needs cpus, mem or a token amount")
)

// QuerySpec is a query as a program states it: what to find, how far to
// look, who asks. Client.Find turns it into the request.
type QuerySpec struct {
	// What: a CEL requirement (required) and rank (higher first; "" all
	// equal), the language of package query (QueryVariables lists what
	// they read).
	Requirement string
	Rank        string

	// How far: levels below each searching manager (Down) and above the
	// first (Up), taken as given (AllLevels: everywhere); climb while
	// fewer than Want offers were found; answer at most Limit (0: the
	// manager's defaults, DefaultQueryWant and DefaultQueryLimit). Trace
	// asks for the managers visited and who asked them.
	Down, Up    uint32
	Want, Limit uint32
	Trace       bool
	// Explain asks each manager reached that does not offer to say why
	// (Found.Verdicts; SummarizeVerdicts groups them): "why is my job
	// idle?".
	Explain bool

	// Who and how much, for owners' policies: User ("" is LoginName()),
	// the amounts the asker means to claim and the job's attributes.
	User   string
	CPUs   int64
	Mem    int64 // bytes
	Tokens []*wire.Amount
	Attrs  map[string]string

	// When. Duration > 0 looks at the window [Begin, Begin+Duration)
	// (a zero Begin: now): free amounts are the least free over it.
	// Earliest instead finds the earliest window of Duration, beginning
	// from Begin and at most Horizon ahead (0: the manager's), in which
	// Want managers have the amounts free; it needs Duration and an
	// amount.
	Begin    time.Time
	Duration time.Duration
	Earliest bool
	Horizon  time.Duration
}

// Request is the query request of s, or why s cannot be sent
// (ErrNoRequirement, ErrEarliestNoDuration, ErrEarliestNoAmount).
func (s QuerySpec) Request() (*wire.QueryRequest, error) {
	if strings.TrimSpace(s.Requirement) == "" {
		return nil, ErrNoRequirement
	}
	req := &wire.QueryRequest{
		Requirement: s.Requirement, Rank: s.Rank, User: s.User, Cpus: s.CPUs, Mem: s.Mem,
		Down: s.Down, Up: s.Up, Want: s.Want, Limit: s.Limit, Trace: s.Trace,
		Attrs: s.Attrs, Tokens: s.Tokens, Explain: s.Explain,
	}
	if req.User == "" {
		req.User = LoginName()
	}
	if s.Earliest {
		if s.Duration == 0 {
			return nil, ErrEarliestNoDuration
		}
		if s.CPUs == 0 && s.Mem == 0 && len(s.Tokens) == 0 {
			return nil, ErrEarliestNoAmount
		}
		req.Earliest, req.HorizonMs = true, uint64(s.Horizon/time.Millisecond)
	}
	if s.Duration > 0 {
		if !s.Begin.IsZero() {
			req.BeginUnixMs = s.Begin.UnixMilli()
		}
		req.DurationMs = uint64(s.Duration / time.Millisecond)
	}
	return req, nil
}

// Found is what a query found: the manager's reply and how long it took
// to come.
type Found struct {
	Reply *wire.QueryReply
	Took  time.Duration
}

// Verdicts are why managers the query reached did not offer (with
// QuerySpec.Explain; at most 64, sorted by why, clause, name), and
// VerdictsMore how many more were cut by that bound.
func (f *Found) Verdicts() []*wire.Verdict { return f.Reply.GetVerdicts() }

// VerdictsMore counts the verdicts cut by the bound (see Verdicts).
func (f *Found) VerdictsMore() uint32 { return f.Reply.GetVerdictsMore() }

// Window is the window an Earliest search found, or nil if it found none.
func (f *Found) Window() *wire.Earliest {
	if e := f.Reply.GetEarliest(); e != nil && e.Found {
		return e
	}
	return nil
}

// Find sends the query s states (see QuerySpec) and returns the offers.
// Errors are those of Request and of Query.
func (c *Client) Find(ctx context.Context, s QuerySpec) (*Found, error) {
	req, err := s.Request()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	rep, err := c.Query(ctx, req)
	if err != nil {
		return nil, err
	}
	return &Found{Reply: rep, Took: time.Since(start)}, nil
}

// QueryVariable is one variable expressions read (query.Var).
type QueryVariable = query.Var

// QueryVariables lists what requirements, ranks and owners' policies
// read, in the order help shows them.
func QueryVariables() []QueryVariable { return query.Variables() }

// QueryUnits names the unit constants expressions may use (KiB, MiB…),
// smallest first.
func QueryUnits() []string {
	names, _ := query.Units()
	return names
}
