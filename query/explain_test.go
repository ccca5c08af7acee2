package query

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gridmgr/gridmgr/wire"
)

func TestSplitClauses(t *testing.T) {
	for _, c := range []struct {
		src  string
		want []string
	}{
		{``, nil},
		{"  \n", nil},
		{`cpus >= 4`, []string{`cpus >= 4`}},
		{`cpus >= 4 && mem_free > 1`, []string{`cpus >= 4`, `mem_free > 1`}},
		{" a &&\n b&&c ", []string{`a`, `b`, `c`}},
		{`(a && b) && c`, []string{`(a && b)`, `c`}},
		{`f(a && b, [x && y], {"k": p && q}) && z`, []string{`f(a && b, [x && y], {"k": p && q})`, `z`}},
		{`name == "a && b" && os == 'x && y'`, []string{`name == "a && b"`, `os == 'x && y'`}},
		{`name == "q\" && \"" && cpus > 1`, []string{`name == "q\" && \""`, `cpus > 1`}},
		{`name == r"\" && cpus > 1`, []string{`name == r"\"`, `cpus > 1`}},
		{`name == """a " && b""" && cpus > 1`, []string{`name == """a " && b"""`, `cpus > 1`}},
		{`name == b'&&' && cpus > 1`, []string{`name == b'&&'`, `cpus > 1`}},
		{"cpus > 1 // a && b\n && os == \"linux\"", []string{"cpus > 1 // a && b", `os == "linux"`}},
		// || and ?: at the top bind looser than &&: the whole is the clause.
		{`a && b || c`, []string{`a && b || c`}},
		{`a || b && c`, []string{`a || b && c`}},
		{`a && b ? c : d`, []string{`a && b ? c : d`}},
		{`(a || b) && c`, []string{`(a || b)`, `c`}},
		// .? is an optional field, not a ternary.
		{`attrs.?gpu.orValue(0) > 0 && cpus > 1`, []string{`attrs.?gpu.orValue(0) > 0`, `cpus > 1`}},
		{`attrs. ?gpu.hasValue() && cpus > 1`, []string{`attrs. ?gpu.hasValue()`, `cpus > 1`}},
		// Not well formed: never a blank clause.
		{`cpus_free >= 4 &&`, []string{`cpus_free >= 4 &&`}},
		{`&& a`, []string{`&& a`}},
		{`a )) && b`, []string{`a ))`, `b`}},
		{`"unterminated && x`, []string{`"unterminated && x`}},
	} {
		if got := SplitClauses(c.src); !slices.Equal(got, c.want) {
			t.Errorf("SplitClauses(%q) = %q, want %q", c.src, got, c.want)
		}
	}
}

func TestExplain(t *testing.T) {
	v := sampleValues() // cpus 16, cpus_free 12, cpu_util 0.25, zone eu-1
	v.Tokens = map[string]int64{"gpus": 0}
	alice := &Request{User: "alice", CPUs: 2, Attrs: map[string]string{"kind": "sim"}}
	for _, c := range []struct {
		kind   Kind
		src    string
		r      *Request
		clause string
		undef  bool
		detail string
		free   bool
	}{
		{Requirement, `cpus >= 32`, nil, `cpus >= 32`, false, `cpus >= 32 is false: cpus = 16`, false},
		{Requirement, `cpus >= 4 && mem_free > 100 * GiB && os == "linux"`, nil,
			`mem_free > 100 * GiB`, false, `mem_free > 100 * GiB is false: mem_free = 51539607552`, true},
		{Requirement, `cpus_free >= 13 && tokens.gpus >= 1`, nil, `cpus_free >= 13`, false, `cpus_free >= 13 is false: cpus_free = 12`, true},
		// A lasting reason before one about free amounts.
		{Requirement, `cpus_free >= 13 && cpus >= 32`, nil, `cpus >= 32`, false, `cpus >= 32 is false: cpus = 16`, false},
		{Requirement, `tokens["gpus"] >= 1`, nil, `tokens["gpus"] >= 1`, false, `tokens["gpus"] >= 1 is false: tokens.gpus = 0`, true},
		// A false clause is reported before an undefined one written first.
		{Requirement, `attrs.gpu == "a100" && cpus > 64`, nil, `cpus > 64`, false, `cpus > 64 is false: cpus = 16`, false},
		{Requirement, `attrs.gpu == "a100" && cpus > 1`, nil, `attrs.gpu == "a100"`, true, `attrs.gpu == "a100" is undefined: attrs.gpu = missing`, false},
		// || at the top: the whole expression.
		{Requirement, `cpus > 64 || attrs.zone == "us"`, nil, `cpus > 64 || attrs.zone == "us"`, false,
			`cpus > 64 || attrs.zone == "us" is false: attrs.zone = eu-1, cpus = 16`, false},
		{Requirement, `(cpus > 64 || cpus_free > 1) && name == "x && y"`, nil, `name == "x && y"`, false, `name == "x && y" is false: name = m1`, false},
		{Policy, `request.user in ["bob"] && cpu_util < 0.5`, alice, `request.user in ["bob"]`, false, `request.user in ["bob"] is false: request.user = "alice"`, false},
		{Policy, `request.attrs.kind == "batch"`, alice, `request.attrs.kind == "batch"`, false, `request.attrs.kind == "batch" is false: request.attrs.kind = "sim"`, false},
		{Policy, `request.cpus <= 1 && cpus_free > 0`, nil, `request.cpus <= 1`, true, `request.cpus <= 1 is undefined: request.cpus = unknown`, false},
		{Policy, `request.cpus <= cpus_free - 11`, alice, `request.cpus <= cpus_free - 11`, false, `request.cpus <= cpus_free - 11 is false: cpus_free = 12, request.cpus = 2`, false},
	} {
		p := mustCompile(t, c.kind, c.src)
		f, ok := Explain(p, v, c.r, Compile)
		if !ok || f.Clause != c.clause || f.Undefined != c.undef || f.Detail != c.detail || f.OnlyFree != c.free {
			t.Errorf("Explain(%q) = %+v, %v; want clause %q undefined %v free %v detail %q", c.src, f, ok, c.clause, c.undef, c.free, c.detail)
		}
	}
	if f, ok := Explain(mustCompile(t, Requirement, `cpus > 1 && os == "linux"`), v, nil, Compile); ok {
		t.Errorf("a true requirement explained: %+v", f)
	}
	// Without a compiler (or when a clause does not compile alone) the
	// whole expression is the clause.
	f, ok := Explain(mustCompile(t, Requirement, `cpus > 1 && os == "plan9"`), v, nil, nil)
	if !ok || f.Clause != `cpus > 1 && os == "plan9"` {
		t.Errorf("no compiler: %+v", f)
	}
	f, _ = Explain(mustCompile(t, Requirement, `cpus > 1 && os == "plan9"`), v, nil, func(Kind, string) (*Program, error) {
		return nil, fmt.Errorf("no")
	})
	if f.Clause != `cpus > 1 && os == "plan9"` {
		t.Errorf("clause not compiled: %+v", f)
	}
	// A cache compiles each clause once.
	cache := NewCache(16)
	p := mustCompile(t, Requirement, `cpus > 1 && os == "plan9"`)
	for range 3 {
		if f, _ := Explain(p, v, nil, cache.Get); f.Clause != `os == "plan9"` {
			t.Fatalf("with a cache: %+v", f)
		}
	}
	if cache.Len() != 2 {
		t.Errorf("cache holds %d, want the 2 clauses", cache.Len())
	}
	// Long clauses and details are clipped.
	long := `name == "` + strings.Repeat("x", 1000) + `" && cpus > 1`
	f, _ = Explain(mustCompile(t, Requirement, long), v, nil, Compile)
	if len(f.Clause) > MaxClauseLen+len("…") || len(f.Detail) > MaxDetailLen+len("…") || !strings.HasSuffix(f.Clause, "…") {
		t.Errorf("not clipped: %d, %d", len(f.Clause), len(f.Detail))
	}
}

func TestMergeVerdicts(t *testing.T) {
	mk := func(why, clause string, from, n int) []*wire.Verdict {
		var out []*wire.Verdict
		for i := from; i < from+n; i++ {
			out = append(out, &wire.Verdict{Peer: fmt.Sprintf("p%03d", i), Name: fmt.Sprintf("m%03d", i), Why: why, Clause: clause})
		}
		return out
	}
	// Under the bound: everything, sorted, identical ones once.
	a := mk("requirement", "cpus >= 4", 0, 2)
	b := mk("policy", "x", 2, 1)
	got, cut := MergeVerdicts(a, 0, append(b, a[0]), 3, 0)
	if len(got) != 3 || cut != 3 || got[0].Why != "policy" || got[1].Name != "m000" {
		t.Fatalf("small merge: %v, %d", got, cut)
	}
	// Over it: a common reason does not crowd out rare ones.
	many := mk("requirement", "cpus >= 4", 0, 100)
	rare := append(mk("drained", "", 100, 1), mk("free", "cpus_free >= 2", 101, 1)...)
	got, cut = MergeVerdicts(many, 5, rare, 0, 0)
	if len(got) != MaxVerdicts || cut != 100+2-MaxVerdicts+5 {
		t.Fatalf("kept %d, cut %d", len(got), cut)
	}
	whys := map[string]int{}
	for _, v := range got {
		whys[v.Why]++
	}
	if whys["drained"] != 1 || whys["free"] != 1 || whys["requirement"] != MaxVerdicts-2 {
		t.Errorf("kept %v", whys)
	}
	if !slices.IsSortedFunc(got, compareVerdicts) {
		t.Error("not sorted")
	}
	// The order replies arrive in does not matter.
	again, cut2 := MergeVerdicts(rare, 0, many, 5, 0)
	if cut2 != cut || !slices.EqualFunc(got, again, func(x, y *wire.Verdict) bool { return x == y }) {
		t.Error("merge depends on order")
	}
	if _, cut := MergeVerdicts(nil, ^uint32(0), nil, 7, 0); cut != ^uint32(0) {
		t.Errorf("cut overflows: %d", cut)
	}
}

func FuzzClauses(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	for _, s := range []string{`a && "&&" && (b && c)`, `r"\" && x`, `'''a'' && b''' && c`, `x.?y && z ? 1 : 2`, "a // &&\n&& b"} {
		f.Add(s)
	}
	values := fuzzValues()
	requests := []*Request{{User: "alice", CPUs: 2, Mem: GiB, Attrs: map[string]string{"k": "v"}}, nil}
	f.Fuzz(func(t *testing.T, src string) {
		clauses := SplitClauses(src)
		for _, c := range clauses {
			if c == "" || c != strings.TrimSpace(c) || !strings.Contains(src, c) {
				t.Fatalf("SplitClauses(%q): bad clause %q in %q", src, c, clauses)
			}
		}
		if strings.TrimSpace(src) != "" && len(clauses) == 0 {
			t.Fatalf("SplitClauses(%q): none", src)
		}
		cache := NewCache(64)
		for _, kind := range []Kind{Requirement, Policy} {
			p, err := Compile(kind, src)
			if err != nil {
				continue
			}
			for _, v := range values {
				for _, r := range requests {
					f, ok := Explain(p, v, r, cache.Get)
					if ok == p.Match(v, r) {
						t.Fatalf("%q: explained %v, matches %v", src, ok, p.Match(v, r))
					}
					if ok && (f.Clause == "" || f.Detail == "" || len(f.Clause) > MaxClauseLen+len("…") || len(f.Detail) > MaxDetailLen+len("…")) {
						t.Fatalf("%q: %+v", src, f)
					}
				}
			}
		}
	})
}
