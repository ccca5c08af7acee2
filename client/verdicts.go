package client

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

// SummarizeVerdicts says in plain lines why managers did not offer
// (Found.Verdicts), a line per reason: verdicts with the same why and
// clause are grouped, most managers first (then by why and clause), with
// the values of the group's first verdict and the names of up to five
// managers:
//
//	3 managers: requirement clause `cpus >= 4` false (cpus = 2): gm2, gm7, gm9
//	1 manager: owner's policy clause `request.user in ["bob"]` false (request.user = "alice"): gm3
//	1 manager: drained by an admin (no new reservations): gm5
//
// A verdict of a kind this program does not know is shown by its why and
// detail.
func SummarizeVerdicts(vs []*wire.Verdict) []string {
	type group struct {
		first *wire.Verdict
		soon  *wire.Verdict // the earliest window any of them gives
		names []string
		n     int
	}
	var groups []*group
	byKey := map[[2]string]*group{}
	for _, v := range vs {
		if v == nil {
			continue
		}
		k := [2]string{v.Why, v.Clause}
		g := byKey[k]
		if g == nil {
			g = &group{first: v}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.n++
		if v.EarliestUnixMs != 0 && (g.soon == nil || v.EarliestUnixMs < g.soon.EarliestUnixMs) {
			g.soon = v
		}
		g.names = append(g.names, cmp.Or(v.Name, v.Peer))
	}
	slices.SortStableFunc(groups, func(a, b *group) int {
		return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.first.Why, b.first.Why), strings.Compare(a.first.Clause, b.first.Clause))
	})
	out := make([]string, 0, len(groups))
	for _, g := range groups {
		who := "managers"
		if g.n == 1 {
			who = "manager"
		}
		names := g.names
		more := ""
		if len(names) > 5 {
			more = fmt.Sprintf(" and %d more", len(names)-5)
			names = names[:5]
		}
		out = append(out, fmt.Sprintf("%d %s: %s: %s%s", g.n, who, verdictWords(g.first, g.soon), strings.Join(names, ", "), more))
	}
	return out
}

// verdictWords says one verdict's reason: what was not true, and the
// values it read; soon, if not nil, is the verdict of the group with the
// earliest window.
func verdictWords(v, soon *wire.Verdict) string {
	clause := func(of string) string {
		word, values := "false", ""
		// The detail is "CLAUSE is false: VALUES" (or undefined).
		if rest, ok := strings.CutPrefix(v.Detail, v.Clause+" is "); ok && v.Clause != "" {
			w, vals, _ := strings.Cut(rest, ": ")
			word, values = w, vals
		} else if v.Detail != "" {
			values = v.Detail
		}
		s := fmt.Sprintf("%s clause `%s` %s", of, v.Clause, word)
		if values != "" {
			s += " (" + values + ")"
		}
		return s
	}
	switch v.Why {
	case "requirement":
		return clause("requirement")
	case "policy":
		return clause("owner's policy")
	case "free":
		s := "not enough free"
		if v.Clause != "" {
			s = clause("not enough free: requirement")
		} else if v.Detail != "" {
			s += " (" + v.Detail + ")"
		}
		if soon != nil {
			s += fmt.Sprintf("; the earliest window begins at %s on %s",
				time.UnixMilli(soon.EarliestUnixMs).UTC().Format(time.RFC3339), cmp.Or(soon.Name, soon.Peer))
		}
		return s
	case "drained":
		return "drained by an admin (no new reservations)"
	case "matched":
		return "matched"
	}
	s := v.Why
	if s == "" {
		s = "no reason given"
	}
	if v.Detail != "" {
		s += " (" + v.Detail + ")"
	}
	return s
}
