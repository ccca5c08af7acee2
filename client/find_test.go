package client

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

func TestQuerySpecRequest(t *testing.T) {
	begin := time.UnixMilli(1_800_000_000_000)
	for _, c := range []struct {
		name  string
		s     QuerySpec
		err   error
		check func(*wire.QueryRequest) bool
	}{
		{"blank", QuerySpec{Requirement: " \t"}, ErrNoRequirement, nil},
		{"plain", QuerySpec{Requirement: "true", Rank: "mem_free", Down: AllLevels, Up: 2, Want: 3, Limit: 7, Trace: true, User: "ann", CPUs: 2, Attrs: map[string]string{"k": "v"}},
			nil, func(r *wire.QueryRequest) bool {
				return r.Requirement == "true" && r.Rank == "mem_free" && r.Down == 255 && r.Up == 2 && r.Want == 3 && r.Limit == 7 &&
					r.Trace && r.User == "ann" && r.Cpus == 2 && r.Attrs["k"] == "v" && !r.Earliest && r.DurationMs == 0 && r.BeginUnixMs == 0
			}},
		{"default user", QuerySpec{Requirement: "true"}, nil, func(r *wire.QueryRequest) bool { return r.User == LoginName() }},
		{"window from now", QuerySpec{Requirement: "true", Duration: time.Hour}, nil, func(r *wire.QueryRequest) bool {
			return r.BeginUnixMs == 0 && r.DurationMs == 3_600_000
		}},
		{"window ahead", QuerySpec{Requirement: "true", Begin: begin, Duration: time.Minute}, nil, func(r *wire.QueryRequest) bool {
			return r.BeginUnixMs == 1_800_000_000_000 && r.DurationMs == 60_000
		}},
		{"earliest without duration", QuerySpec{Requirement: "true", Earliest: true, CPUs: 1}, ErrEarliestNoDuration, nil},
		{"earliest without amount", QuerySpec{Requirement: "true", Earliest: true, Duration: time.Hour}, ErrEarliestNoAmount, nil},
		{"earliest", QuerySpec{Requirement: "true", Earliest: true, Duration: time.Hour, Horizon: 48 * time.Hour,
			Tokens: []*wire.Amount{{Kind: "gpus", N: 1}}}, nil, func(r *wire.QueryRequest) bool {
			return r.Earliest && r.HorizonMs == 48*3_600_000 && r.DurationMs == 3_600_000 && len(r.Tokens) == 1
		}},
	} {
		req, err := c.s.Request()
		if !errors.Is(err, c.err) || (err == nil && !c.check(req)) {
			t.Errorf("%s: %v, %v", c.name, req, err)
		}
	}
}

func TestFind(t *testing.T) {
	conn := newFakeConn(func(env *wire.Envelope) *wire.Envelope {
		q := env.GetQueryRequest()
		rep := &wire.QueryReply{Offers: []*wire.Offer{{Name: "gm1"}}, Visited: 1}
		if q.Earliest {
			rep.Earliest = &wire.Earliest{Found: q.Requirement == "true", Managers: []string{"gm1"}}
		}
		return &wire.Envelope{Body: &wire.Envelope_QueryReply{QueryReply: rep}}
	})
	c := New(conn, nil)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Find(ctx, QuerySpec{}); !errors.Is(err, ErrNoRequirement) {
		t.Fatalf("blank: %v", err)
	}
	f, err := c.Find(ctx, QuerySpec{Requirement: "cpus_free > 0"})
	if err != nil || len(f.Reply.Offers) != 1 || f.Window() != nil || f.Took < 0 {
		t.Fatalf("%v, %v", f, err)
	}
	f, err = c.Find(ctx, QuerySpec{Requirement: "true", Earliest: true, Duration: time.Hour, CPUs: 1})
	if err != nil || f.Window() == nil || !slices.Equal(f.Window().Managers, []string{"gm1"}) {
		t.Fatalf("earliest: %v, %v", f, err)
	}
	f, err = c.Find(ctx, QuerySpec{Requirement: "false", Earliest: true, Duration: time.Hour, CPUs: 1})
	if err != nil || f.Window() != nil {
		t.Fatalf("no window: %v, %v", f, err)
	}
}

func TestQueryVariables(t *testing.T) {
	vs := QueryVariables()
	if !slices.ContainsFunc(vs, func(v QueryVariable) bool { return v.Name == "cpus_free" }) {
		t.Errorf("no cpus_free among %d variables", len(vs))
	}
	if u := QueryUnits(); !slices.Contains(u, "GiB") {
		t.Errorf("units %v", u)
	}
}
