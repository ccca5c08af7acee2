// Explain: which top-level clause of a requirement or policy is not true
// for one manager and one request, and why in words (SplitClauses,
// Explain); and the bounded merge of the verdicts a query collects
// (MergeVerdicts).

package query

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"cel.dev/cel-go/common/types"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/wire"
)

// Bounds of what Explain and MergeVerdicts return.
const (
	// MaxClauseLen bounds Failing.Clause (and Verdict.clause), in bytes.
	MaxClauseLen = 256
	// MaxDetailLen bounds Failing.Detail (and Verdict.detail), in bytes.
	MaxDetailLen = 512
	// MaxVerdicts is the most verdicts a query reply carries; the rest
	// are counted (QueryReply.verdicts_more).
	MaxVerdicts = 64
)

// SplitClauses returns the top-level && clauses of src, as written (each
// trimmed of spaces), in order. && inside parentheses, brackets, braces,
// string literals (quoted, triple-quoted, raw, bytes) and comments does
// not split. An expression with a top-level || or ?: is one clause (&&
// binds tighter than both, so its && are not top-level clauses), and so
// is one without a top-level &&. Blank input has none. It does not parse
// CEL: on text that does not compile, the clauses may be nonsense, but it
// never fails.
func SplitClauses(src string) []string {
	var out []string
	depth, start := 0, 0
	lastSig := byte(0) // the last byte outside spaces, strings and comments
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '"' || c == '\'':
			i = skipString(src, i)
			lastSig = c
			continue
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
			continue
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ')' || c == ']' || c == '}':
			depth = max(depth-1, 0)
		case depth > 0:
		case c == '&' && i+1 < len(src) && src[i+1] == '&':
			out = append(out, src[start:i])
			i += 2
			start = i
			lastSig = '&'
			continue
		case c == '|' && i+1 < len(src) && src[i+1] == '|':
			return oneClause(src)
		case c == '?' && lastSig != '.':
			// A ternary; .? is an optional field, not one.
			return oneClause(src)
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			lastSig = c
		}
		i++
	}
	out = append(out, src[start:])
	for i, c := range out {
		out[i] = strings.TrimSpace(c)
	}
	if slices.Contains(out, "") {
		// Not a well-formed conjunction (a && at an end): the whole.
		return oneClause(src)
	}
	return out
}

func oneClause(src string) []string {
	if s := strings.TrimSpace(src); s != "" {
		return []string{s}
	}
	return nil
}

// skipString returns the index just past the string literal that starts
// with the quote at src[i], or len(src) if it does not end. A raw string
// (r"..." or R'...', possibly with a b prefix) has no escapes.
func skipString(src string, i int) int {
	q := src[i]
	raw := false
	for j := i - 1; j >= 0 && j >= i-2; j-- {
		if p := src[j]; p == 'r' || p == 'R' {
			raw = true
		} else if p != 'b' && p != 'B' {
			break
		}
	}
	triple := strings.HasPrefix(src[i:], string([]byte{q, q, q}))
	j := i + 1
	if triple {
		j = i + 3
	}
	for j < len(src) {
		switch {
		case src[j] == '\\' && !raw:
			j += 2
			continue
		case triple && strings.HasPrefix(src[j:], string([]byte{q, q, q})):
			return j + 3
		case !triple && src[j] == q:
			return j + 1
		case !triple && src[j] == '\n':
			return j // an unterminated string ends at its line
		}
		j++
	}
	return len(src)
}

// Failing is why a requirement or policy is not true for one manager and
// one request: the clause that is not, and the values it read.
type Failing struct {
	// Clause is the top-level && clause that is not true, as written
	// (clipped to MaxClauseLen); the whole expression when it has no
	// top-level && (or has a top-level || or ?:).
	Clause string
	// Undefined says the clause is undefined (an error: a missing
	// attribute, the cost limit), not false.
	Undefined bool
	// Detail says it in words with the values of the variables the clause
	// reads, clipped to MaxDetailLen: "cpus >= 4 is false: cpus = 2",
	// `attrs.gpu == "a100" is undefined: attrs.gpu = missing`.
	Detail string
	// Refs are the variables the clause reads (Program.Refs, then the
	// fields of request), in the order Detail names them.
	Refs []string
	// OnlyFree says every variable the clause reads is a free amount
	// (cpus_free, mem_free, tokens or one of its keys), and it reads one:
	// the manager has what is asked for, but not free.
	OnlyFree bool
}

// Explain says why p, a requirement or policy, is not true on v and r; ok
// is false when it is true (nothing to explain). It splits p's source
// into its top-level clauses (SplitClauses), compiles each as p's kind
// with compile (Compile, or a Cache's Get, so that repeated queries
// compile once), and evaluates them in the order written: the first false
// clause is the one reported (false decides an &&, whatever the others),
// one that reads only free amounts (OnlyFree) only if no other is false
// (those come and go with reservations; cpus >= 4 does not); if none is
// false, the first undefined one. If every clause is true
// alone (the whole went over MaxTotalCost), or a clause does not compile,
// the whole expression is the clause. It is pure, and costs an
// evaluation of each clause.
func Explain(p *Program, v *Values, r *Request, compile func(Kind, string) (*Program, error)) (f Failing, ok bool) {
	if p.Match(v, r) {
		return Failing{}, false
	}
	if p.kind == Rank {
		return failing(p.src, p, triUndef, v, r), true
	}
	clauses := SplitClauses(p.src)
	if len(clauses) > 1 && compile != nil {
		progs := make([]*Program, 0, len(clauses))
		for _, c := range clauses {
			cp, err := compile(p.kind, c)
			if err != nil || cp == nil {
				progs = nil
				break
			}
			progs = append(progs, cp)
		}
		var free *Failing
		undef := -1
		for i, cp := range progs {
			switch truth(cp, v, r) {
			case triFalse:
				f := failing(clauses[i], cp, triFalse, v, r)
				if !f.OnlyFree {
					return f, true
				}
				if free == nil {
					free = &f
				}
			case triUndef:
				if undef < 0 {
					undef = i
				}
			}
		}
		if free != nil {
			return *free, true
		}
		if undef >= 0 {
			return failing(clauses[undef], progs[undef], triUndef, v, r), true
		}
	}
	return failing(strings.TrimSpace(p.src), p, truth(p, v, r), v, r), true
}

// truth is p's value on v and r in three values.
func truth(p *Program, v *Values, r *Request) tri {
	out, err := p.eval(v, r)
	switch {
	case err != nil:
		return triUndef
	case out == types.True:
		return triTrue
	case out == types.False:
		return triFalse
	}
	return triUndef
}

// failing describes clause (compiled as p), whose value is t.
func failing(clause string, p *Program, t tri, v *Values, r *Request) Failing {
	f := Failing{Clause: text.Clip(clause, MaxClauseLen), Undefined: t != triFalse}
	f.Refs = append(slices.Clone(p.refs), p.reqRefs...)
	word := "false"
	if f.Undefined {
		word = "undefined"
	}
	var vals []string
	for _, ref := range f.Refs {
		var x string
		if strings.HasPrefix(ref, "request.") {
			x = r.show(ref)
		} else if v != nil {
			x = v.Show(ref)
		} else {
			x = "unknown"
		}
		vals = append(vals, ref+" = "+x)
	}
	d := clause + " is " + word
	if len(vals) > 0 {
		d += ": " + strings.Join(vals, ", ")
	}
	f.Detail = text.Clip(d, MaxDetailLen)
	f.OnlyFree = len(p.refs) > 0 && len(p.reqRefs) == 0
	for _, ref := range p.refs {
		if ref != "cpus_free" && ref != "mem_free" && ref != "tokens" && !strings.HasPrefix(ref, "tokens.") && !strings.HasPrefix(ref, "tokens[") {
			f.OnlyFree = false
		}
	}
	return f
}

// show renders a field of request named as Refs names them
// ("request.user", "request.attrs.kind") for a person: "unknown" where
// there is no request, "missing" for an attribute it does not give.
func (r *Request) show(ref string) string {
	if r == nil {
		return "unknown"
	}
	switch ref {
	case "request.user":
		return strconv.Quote(r.User)
	case "request.cpus":
		return strconv.FormatInt(r.CPUs, 10)
	case "request.mem":
		return strconv.FormatInt(r.Mem, 10)
	case "request.attrs":
		return fmt.Sprint(r.Attrs)
	}
	key, ok := strings.CutPrefix(ref, "request.attrs.")
	if !ok {
		if q, found := strings.CutPrefix(ref, "request.attrs["); found {
			if q, found = strings.CutSuffix(q, "]"); found {
				key, _ = strconv.Unquote(q)
				ok = key != ""
			}
		}
	}
	if !ok {
		return "unknown"
	}
	if x, in := r.Attrs[key]; in {
		return strconv.Quote(x)
	}
	return "missing"
}

// MergeVerdicts adds more verdicts (and moreCut, those its sender cut) to
// have (and haveCut), keeping at most limit (limit <= 0: MaxVerdicts) and
// counting the rest in the returned cut. What is kept is spread over the
// reasons: the first verdict of each (why, clause) group, then the second
// of each, and so on, so that a reason shared by thousands of managers
// does not hide a rarer one. A verdict given twice is kept once. The result is
// sorted by why, clause, name, then peer: the same whatever order the
// replies came in.
func MergeVerdicts(have []*wire.Verdict, haveCut uint32, more []*wire.Verdict, moreCut uint32, limit int) ([]*wire.Verdict, uint32) {
	if limit <= 0 {
		limit = MaxVerdicts
	}
	cut := satAdd32(haveCut, moreCut)
	all := make([]*wire.Verdict, 0, len(have)+len(more))
	all = append(append(all, have...), more...)
	slices.SortFunc(all, compareVerdicts)
	all = slices.CompactFunc(all, func(a, b *wire.Verdict) bool { return a.Peer != "" && a.Peer == b.Peer && compareVerdicts(a, b) == 0 })
	if len(all) <= limit {
		return all, cut
	}
	// Round-robin over the groups: the n-th of a group has turn n.
	turn := make([]int, len(all))
	for i := 1; i < len(all); i++ {
		if all[i].Why == all[i-1].Why && all[i].Clause == all[i-1].Clause {
			turn[i] = turn[i-1] + 1
		}
	}
	idx := make([]int, len(all))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(turn[a], turn[b]) })
	keep := idx[:limit]
	slices.Sort(keep)
	out := make([]*wire.Verdict, limit)
	for i, j := range keep {
		out[i] = all[j]
	}
	return out, satAdd32(cut, uint32(min(uint64(len(all)-limit), math.MaxUint32)))
}

// compareVerdicts orders verdicts by why, clause, name, peer, detail.
func compareVerdicts(a, b *wire.Verdict) int {
	return cmp.Or(strings.Compare(a.Why, b.Why), strings.Compare(a.Clause, b.Clause),
		strings.Compare(a.Name, b.Name), strings.Compare(a.Peer, b.Peer), strings.Compare(a.Detail, b.Detail),
		cmp.Compare(a.EarliestUnixMs, b.EarliestUnixMs))
}

func satAdd32(a, b uint32) uint32 {
	if a+b < a {
		return ^uint32(0)
	}
	return a + b
}
