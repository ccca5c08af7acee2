package client

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

func TestSummarizeVerdicts(t *testing.T) {
	req := func(name, clause, detail string) *wire.Verdict {
		return &wire.Verdict{Peer: "P-" + name, Name: name, Why: "requirement", Clause: clause, Detail: detail}
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	vs := []*wire.Verdict{
		{Name: "gm5", Why: "drained", Detail: "gm5 is drained"},
		{Name: "gm3", Why: "policy", Clause: `request.user in ["bob"]`, Detail: `request.user in ["bob"] is false: request.user = "alice"`},
		req("gm2", "cpus >= 4", "cpus >= 4 is false: cpus = 2"),
		req("gm7", "cpus >= 4", "cpus >= 4 is false: cpus = 1"),
		req("gm9", "cpus >= 4", "cpus >= 4 is false: cpus = 2"),
		req("gm8", `attrs.gpu == "a100"`, `attrs.gpu == "a100" is undefined: attrs.gpu = missing`),
		{Name: "gm4", Why: "free", Clause: "cpus_free >= 2", Detail: "cpus_free >= 2 is false: cpus_free = 1", EarliestUnixMs: at + 60_000},
		{Name: "gm6", Why: "free", Clause: "cpus_free >= 2", Detail: "cpus_free >= 2 is false: cpus_free = 0", EarliestUnixMs: at},
		{Name: "gm1", Why: "free", Detail: "no window of 1h with cpus 9 free begins here before 2026-03-08T12:00:00Z"},
		{Peer: "P-x", Why: "weird", Detail: "from a newer manager"},
		nil,
	}
	want := []string{
		"3 managers: requirement clause `cpus >= 4` false (cpus = 2): gm2, gm7, gm9",
		"2 managers: not enough free: requirement clause `cpus_free >= 2` false (cpus_free = 1); the earliest window begins at 2026-03-01T12:00:00Z on gm6: gm4, gm6",
		"1 manager: drained by an admin (no new reservations): gm5",
		"1 manager: not enough free (no window of 1h with cpus 9 free begins here before 2026-03-08T12:00:00Z): gm1",
		"1 manager: owner's policy clause `request.user in [\"bob\"]` false (request.user = \"alice\"): gm3",
		"1 manager: requirement clause `attrs.gpu == \"a100\"` undefined (attrs.gpu = missing): gm8",
		"1 manager: weird (from a newer manager): P-x",
	}
	got := SummarizeVerdicts(vs)
	if !slices.Equal(got, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Many managers with one reason: five names, then a count.
	var many []*wire.Verdict
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		many = append(many, req(n, "os == \"plan9\"", "os == \"plan9\" is false: os = linux"))
	}
	if got := SummarizeVerdicts(many); len(got) != 1 || !strings.HasSuffix(got[0], ": a, b, c, d, e and 2 more") || !strings.HasPrefix(got[0], "7 managers:") {
		t.Errorf("many: %q", got)
	}
	if got := SummarizeVerdicts(nil); len(got) != 0 {
		t.Errorf("none: %q", got)
	}
}

func TestFindExplain(t *testing.T) {
	conn := newFakeConn(func(env *wire.Envelope) *wire.Envelope {
		rep := &wire.QueryReply{Visited: 2}
		if env.GetQueryRequest().Explain {
			rep.Verdicts = []*wire.Verdict{{Name: "gm2", Why: "drained"}}
			rep.VerdictsMore = 3
		}
		return &wire.Envelope{Body: &wire.Envelope_QueryReply{QueryReply: rep}}
	})
	c := New(conn, nil)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, err := c.Find(ctx, QuerySpec{Requirement: "true", Explain: true})
	if err != nil || len(f.Verdicts()) != 1 || f.VerdictsMore() != 3 {
		t.Fatalf("explain: %v, %v", f, err)
	}
	f, err = c.Find(ctx, QuerySpec{Requirement: "true"})
	if err != nil || len(f.Verdicts()) != 0 || f.VerdictsMore() != 0 {
		t.Fatalf("no explain: %v, %v", f, err)
	}
}
