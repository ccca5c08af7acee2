package query

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cel.dev/cel-go/cel"
)

// sampleValues is an offer with every value known.
func sampleValues() *Values {
	return &Values{
		Name: "m1", Hostname: "m1.example", OS: "linux", Arch: "amd64",
		CPUs: 16, CPUsFree: 12, CPUUtil: 0.25,
		Mem: 64 * GiB, MemFree: 48 * GiB, NetMbps: 1000,
		Attrs: map[string]any{
			"zone":    "eu-1",
			"rack":    int64(7),
			"n":       3, // a Go int
			"weight":  2.5,
			"spot":    true,
			"tags":    []any{"gpu", "ssd"},
			"ports":   []any{int64(22), int64(80)},
			"rack-id": "r1",
		},
	}
}

// unknownValues is an offer whose utilisation and link speed are unknown.
func unknownValues() *Values {
	v := sampleValues()
	v.CPUUtil = -1
	v.NetMbps = 0
	return v
}

// forBoth runs f on v as given and on a prepared copy, so that both ways
// of reading Attrs are tested.
func forBoth(t *testing.T, v *Values, f func(t *testing.T, v *Values)) {
	t.Helper()
	t.Run("raw", func(t *testing.T) { f(t, v) })
	p := *v
	p.Prepare()
	t.Run("prepared", func(t *testing.T) { f(t, &p) })
}

func mustCompile(t testing.TB, kind Kind, src string) *Program {
	t.Helper()
	p, err := Compile(kind, src)
	if err != nil {
		t.Fatalf("Compile(%v, %q): %v", kind, src, err)
	}
	return p
}

func TestSchema(t *testing.T) {
	cases := []struct {
		src  string
		want bool
	}{
		// every variable
		{`name == "m1"`, true},
		{`hostname == "m1.example"`, true},
		{`os == "linux" && arch == "amd64"`, true},
		{`cpus == 16`, true},
		{`cpus_free == 12`, true},
		{`cpu_util == 0.25`, true},
		{`mem == 64 * GiB`, true},
		{`mem_free == 48 * GiB`, true},
		{`net_mbps == 1000.0`, true},
		{`size(attrs) == 8`, true},
		// unit constants
		{`KiB == 1024 && MiB == 1024 * KiB && GiB == 1024 * MiB && TiB == 1024 * GiB`, true},
		{`TiB == 1099511627776`, true},
		{`mem_free >= 8 * GiB && mem_free < 49 * GiB`, true},
		// cross-type numeric comparisons
		{`cpus > 2.5`, true},
		{`cpus < 15.5`, false},
		{`cpu_util < 1`, true},
		{`cpu_util > 0`, true},
		{`net_mbps >= 1000`, true},
		{`cpus_free <= 12u`, true},
		// attrs: both syntaxes, every value type
		{`attrs.zone == "eu-1"`, true},
		{`attrs["zone"] == "eu-1"`, true},
		{`attrs.zone == "us-1"`, false},
		{`attrs.rack > 3`, true},
		{`attrs["rack"] > 3`, true},
		{`attrs.rack > 6.5`, true},
		{`attrs.n == 3 && attrs.n + 1 == 4`, true},
		{`attrs.weight > 2 && attrs.weight < 3.0`, true},
		{`attrs.spot`, true},
		{`!attrs.spot`, false},
		{`attrs["rack-id"] == "r1"`, true},
		{`"zone" in attrs && !("gpu" in attrs)`, true},
		{`has(attrs.zone) && !has(attrs.gpu)`, true},
		{`attrs.?gpu.orValue("none") == "none"`, true},
		// lists in attrs
		{`"ssd" in attrs.tags`, true},
		{`"hdd" in attrs.tags`, false},
		{`size(attrs.tags) == 2 && attrs.tags[0] == "gpu"`, true},
		{`attrs.tags.exists(t, t.startsWith("ss"))`, true},
		{`80 in attrs.ports && attrs.ports.all(p, p < 1024)`, true},
		// functions
		{`hostname.endsWith(".example") && name.matches("^m[0-9]+$")`, true},
		{`double(cpus_free) / double(cpus) > 0.7`, true},
	}
	forBoth(t, sampleValues(), func(t *testing.T, v *Values) {
		for _, c := range cases {
			p := mustCompile(t, Requirement, c.src)
			if got := p.Match(v, nil); got != c.want {
				t.Errorf("Match(%s) = %v, want %v", c.src, got, c.want)
			}
		}
	})
}

func TestUndefined(t *testing.T) {
	cases := []struct {
		src  string
		want bool
	}{
		{`cpu_util < 0.5`, false},
		{`cpu_util >= 0.5`, false},
		{`!(cpu_util < 0.5)`, false},
		{`net_mbps > 0`, false},
		{`net_mbps <= 0`, false},
		{`attrs.missing == 1`, false},
		{`attrs["missing"] == 1`, false},
		{`!attrs.missing`, false},
		{`attrs.missing`, false},
		{`attrs.missing || true`, true},
		{`true || attrs.missing`, true},
		{`attrs.missing && false`, false},
		{`cpu_util < 0.5 || cpus >= 8`, true},
		{`cpus >= 64 && cpu_util < 0.5`, false},
		{`cpus >= 8 && cpu_util < 0.5`, false},
		{`!has(attrs.missing) || attrs.missing == "x"`, true},
		{`cpus / 0 == 1`, false},
		{`cpus % 0 == 0`, false},
		{`1 / 0 == 1`, false},
		{`9223372036854775807 + cpus > 0`, false},
		{`attrs.zone > 3`, false},
		{`attrs.tags[5] == "x"`, false},
		{`request.user == "alice"`, false}, // no Request given
		{`request.cpus > 0 || cpus > 0`, true},
	}
	forBoth(t, unknownValues(), func(t *testing.T, v *Values) {
		for _, c := range cases {
			p := mustCompile(t, Requirement, c.src)
			if got := p.Match(v, nil); got != c.want {
				t.Errorf("Match(%s) = %v, want %v", c.src, got, c.want)
			}
		}
	})
	// NaN is unknown too, and a nil Values has nothing at all.
	v := sampleValues()
	v.CPUUtil, v.NetMbps = math.NaN(), math.NaN()
	for _, src := range []string{`cpu_util >= 0.0 || cpu_util < 0.0`, `net_mbps >= 0.0 || net_mbps < 0.0`} {
		if mustCompile(t, Requirement, src).Match(v, nil) {
			t.Errorf("Match(%s) with NaN = true", src)
		}
	}
	if mustCompile(t, Requirement, `cpus >= 0`).Match(nil, nil) {
		t.Error("Match on nil Values = true")
	}
	// A nil Attrs is an empty map: presence tests work, reads are undefined.
	v = sampleValues()
	v.Attrs = nil
	if !mustCompile(t, Requirement, `!("zone" in attrs) && size(attrs) == 0`).Match(v, nil) {
		t.Error(`nil Attrs: !("zone" in attrs) is not true`)
	}
	if mustCompile(t, Requirement, `attrs.zone == "eu-1"`).Match(v, nil) {
		t.Error(`nil Attrs: attrs.zone matched`)
	}
	// Attribute values CEL cannot represent are undefined, not a panic.
	v = sampleValues()
	v.Attrs["odd"] = struct{ X int }{1}
	v.Attrs["odds"] = []any{struct{}{}}
	forBoth(t, v, func(t *testing.T, v *Values) {
		for _, src := range []string{`attrs.odd == 1`, `attrs.odds[0] == 1`, `1 in attrs.odds`} {
			if mustCompile(t, Requirement, src).Match(v, nil) {
				t.Errorf("Match(%s) = true", src)
			}
		}
	})
}

func TestScore(t *testing.T) {
	cases := []struct {
		src    string
		v      *Values
		want   float64
		wantOK bool
	}{
		{`mem_free`, sampleValues(), float64(48 * GiB), true},
		{`cpus_free`, sampleValues(), 12, true},
		{`1u + 2u`, sampleValues(), 3, true},
		{`1.0 - cpu_util`, sampleValues(), 0.75, true},
		{`mem_free / GiB - 2 * cpus_free`, sampleValues(), 24, true},
		{`attrs.weight`, sampleValues(), 2.5, true},
		{`attrs.rack`, sampleValues(), 7, true},
		{`attrs.zone`, sampleValues(), 0, false},      // dyn, a string at run time
		{`attrs.missing`, sampleValues(), 0, false},   // no such key
		{`1.0 - cpu_util`, unknownValues(), 0, false}, // unknown
		{`net_mbps`, unknownValues(), 0, false},       // unknown
		{`0.0 / 0.0`, sampleValues(), 0, false},       // NaN
		{`double(cpus) / 0.0`, sampleValues(), math.Inf(1), true},
		{`cpus / 0`, sampleValues(), 0, false},
	}
	for _, c := range cases {
		p := mustCompile(t, Rank, c.src)
		got, ok := p.Score(c.v, nil)
		if ok != c.wantOK || ok && got != c.want {
			t.Errorf("Score(%s) = %v, %v; want %v, %v", c.src, got, ok, c.want, c.wantOK)
		}
	}
}

func TestPolicy(t *testing.T) {
	p := mustCompile(t, Policy, `request.user in ["alice", "bob"] && cpu_util < 0.3`)
	claim := mustCompile(t, Policy, `request.cpus <= cpus_free && request.mem <= mem_free / 2`)
	alice := &Request{User: "alice", CPUs: 4, Mem: 8 * GiB}
	carol := &Request{User: "carol", CPUs: 4, Mem: 8 * GiB}
	big := &Request{User: "bob", CPUs: 13, Mem: 8 * GiB}
	busy := sampleValues()
	busy.CPUUtil = 0.5
	cases := []struct {
		p    *Program
		v    *Values
		r    *Request
		want bool
	}{
		{p, sampleValues(), alice, true},
		{p, sampleValues(), carol, false},
		{p, busy, alice, false},
		{p, unknownValues(), alice, false},
		{p, sampleValues(), nil, false},
		{claim, sampleValues(), alice, true},
		{claim, sampleValues(), big, false},
		{claim, sampleValues(), &Request{User: "x", CPUs: 1, Mem: 25 * GiB}, false},
	}
	for i, c := range cases {
		if got := c.p.Match(c.v, c.r); got != c.want {
			t.Errorf("case %d: Match(%s) = %v, want %v", i, c.p.Source(), got, c.want)
		}
	}
	// Requirements and ranks may read request too.
	if !mustCompile(t, Requirement, `request.cpus <= cpus_free`).Match(sampleValues(), alice) {
		t.Error("requirement reading request.cpus did not match")
	}
	if s, ok := mustCompile(t, Rank, `cpus_free - request.cpus`).Score(sampleValues(), alice); !ok || s != 8 {
		t.Errorf("rank reading request.cpus = %v, %v; want 8, true", s, ok)
	}
}

func TestCompileErrors(t *testing.T) {
	cases := []struct {
		name      string
		kind      Kind
		src       string
		line, col int
		msg       string // the message must contain this
		full      string // if set, Error() must be exactly this
	}{
		{
			name: "syntax", kind: Requirement, src: `cpus_free >= 4 &&`, line: 1, col: 18,
			full: "requirement: 1:18: syntax error: unexpected end of expression\n" +
				"  cpus_free >= 4 &&\n" +
				"                   ^",
		},
		{
			name: "syntax token", kind: Requirement, src: `cpus $ 3`, line: 1, col: 6,
			full: "requirement: 1:6: syntax error: token recognition error at: '$'\n" +
				"  cpus $ 3\n" +
				"       ^",
		},
		{
			name: "syntax second line", kind: Rank, src: "mem_free +\n  (cpus", line: 2, col: 8,
			full: "rank: 2:8: syntax error: missing ')' at end of expression\n" +
				"    (cpus\n" +
				"         ^",
		},
		{
			name: "undeclared", kind: Requirement, src: `cpus_free >= 4 && cpu > 2`, line: 1, col: 19,
			full: "requirement: 1:19: undeclared reference to 'cpu' (did you mean 'cpus'?)\n" +
				"  cpus_free >= 4 && cpu > 2\n" +
				"                    ^",
		},
		{
			name: "undeclared case", kind: Policy, src: `MEM_FREE > 0`, line: 1, col: 1,
			msg: "undeclared reference to 'MEM_FREE' (did you mean 'mem_free'?)",
		},
		{
			name: "undeclared unit", kind: Requirement, src: `mem > 8 * Gib`, line: 1, col: 11,
			msg: "undeclared reference to 'Gib' (did you mean 'GiB'?)",
		},
		{
			name: "undeclared far", kind: Requirement, src: `bogomips > 9000`, line: 1, col: 1,
			msg: "undeclared reference to 'bogomips'",
		},
		{
			name: "request field", kind: Policy, src: `request.usr == "alice"`, line: 1, col: 8,
			msg: "undefined field 'usr' (did you mean 'user'?)",
		},
		{
			name: "mixed equality", kind: Requirement, src: `net_mbps == 1000`, line: 1, col: 10,
			msg: "== does not mix int and double",
		},
		{
			name: "requirement int", kind: Requirement, src: `cpus_free`, line: 1, col: 1,
			full: "requirement: 1:1: a requirement must be bool, got int\n  cpus_free\n  ^",
		},
		{
			name: "policy string", kind: Policy, src: "\n  name", line: 2, col: 3,
			msg: "a policy must be bool, got string",
		},
		{
			name: "rank bool", kind: Rank, src: `cpus > 2`, line: 1, col: 1,
			msg: "a rank must be a number (int, uint or double), got bool",
		},
		{
			name: "rank list", kind: Rank, src: `attrs.tags`, line: 1, col: 1, // dyn
			msg: "", // compiles: dyn is checked at run time
		},
		{
			name: "too long", kind: Requirement, src: strings.Repeat(" ", MaxExprLen) + "true", line: 1, col: 1,
			msg: "expression is 4100 bytes long; the limit is 4096",
		},
		{
			name: "not utf8", kind: Requirement, src: "name == \"a\xffb\"", line: 1, col: 11,
			msg: "not valid UTF-8",
		},
		{
			name: "unknown kind", kind: Kind(9), src: `true`, line: 1, col: 1,
			msg: "unknown expression kind 9",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Compile(c.kind, c.src)
			if c.msg == "" && c.full == "" {
				if err != nil {
					t.Fatalf("Compile: %v", err)
				}
				return
			}
			var ee *ExprError
			if !errors.As(err, &ee) {
				t.Fatalf("Compile error = %v (%T), want *ExprError", err, err)
			}
			if !errors.Is(err, ErrExpr) {
				t.Error("error does not wrap ErrExpr")
			}
			if ee.Line != c.line || ee.Col != c.col {
				t.Errorf("position = %d:%d, want %d:%d\n%v", ee.Line, ee.Col, c.line, c.col, err)
			}
			if ee.Kind != c.kind || ee.Src != c.src {
				t.Errorf("Kind, Src = %v, %q", ee.Kind, ee.Src)
			}
			if !strings.Contains(ee.Msg, c.msg) {
				t.Errorf("Msg = %q, want it to contain %q", ee.Msg, c.msg)
			}
			if c.full != "" && err.Error() != c.full {
				t.Errorf("Error() =\n%s\nwant\n%s", err.Error(), c.full)
			}
			if len(ee.Issues) == 0 || ee.Issues[0].Msg != ee.Msg {
				t.Errorf("Issues = %v, want the first to be Msg", ee.Issues)
			}
			if n := strings.Count(err.Error(), "\n"); n != 2 {
				t.Errorf("Error() has %d lines, want 3:\n%s", n+1, err)
			}
		})
	}
}

// TestHostileInput checks that input built to exhaust the parser or the
// checker is a clean, quick *ExprError.
func TestHostileInput(t *testing.T) {
	cases := []struct{ name, src string }{
		{"10k parens", strings.Repeat("(", 10000)},
		{"4k parens", strings.Repeat("(", 4000)},
		{"balanced parens", strings.Repeat("(", 2000) + "true" + strings.Repeat(")", 2000)},
		{"brackets", strings.Repeat("[", 4000)},
		{"braces", strings.Repeat("{1:", 1300)},
		{"sum", strings.Repeat("1+", 2000) + "1 > 0"},
		{"select chain", strings.Repeat("a.", 2000) + "b"},
		{"calls", strings.Repeat("size(", 800)},
		{"ternaries", strings.Repeat("true ? ", 1000) + "true"},
		{"long line", "cpus > " + strings.Repeat("9", 4000)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			_, err := Compile(Requirement, c.src)
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("Compile took %v", d)
			}
			var ee *ExprError
			if !errors.As(err, &ee) {
				t.Fatalf("Compile error = %v, want *ExprError", err)
			}
			if ee.Line < 1 || ee.Col < 1 || ee.Msg == "" {
				t.Errorf("ExprError %d:%d %q", ee.Line, ee.Col, ee.Msg)
			}
			// The rendered source line is cut to a window.
			if lines := strings.Split(err.Error(), "\n"); len(lines) != 3 || len(lines[1]) > snippetWidth+10 {
				t.Errorf("Error() not 3 short lines: %.300q", err.Error())
			}
		})
	}
	// Nesting within the limit is fine.
	src := strings.Repeat("(", 30) + "cpus > 1" + strings.Repeat(")", 30)
	if !mustCompile(t, Requirement, src).Match(sampleValues(), nil) {
		t.Errorf("%s did not match", src)
	}
	sum := "cpus" + strings.Repeat(" + cpus", 40) + " > 0"
	if !mustCompile(t, Requirement, sum).Match(sampleValues(), nil) {
		t.Errorf("%s did not match", sum)
	}
}

// nested builds depth comprehensions, each over a list of width elements.
func nested(depth, width int) string {
	var list []string
	for i := range width {
		list = append(list, string(rune('0'+i%10)))
	}
	l := "[" + strings.Join(list, ", ") + "]"
	src := "x0"
	for i := depth - 1; i >= 0; i-- {
		src = l + ".map(x" + string(rune('0'+i)) + ", " + src + ")"
	}
	return src + ".size() > 0"
}

func TestCostLimit(t *testing.T) {
	cheap := mustCompile(t, Requirement, nested(2, 10))
	if !cheap.Match(sampleValues(), nil) {
		t.Fatalf("%s did not match", cheap.Source())
	}
	// Statically over the limit: a compile error (TestOverCost). Over the
	// limit only for some attributes: compiled, cut off at run time there.
	if _, err := Compile(Requirement, nested(5, 10)); err == nil {
		t.Error("an expression that always exceeds MaxCost compiled")
	}
	big := sampleValues()
	var items []any
	for i := range 1000 {
		items = append(items, int64(i))
	}
	big.Attrs = map[string]any{"big": items}
	big.Prepare()
	dear := mustCompile(t, Requirement, `attrs.big.map(x, attrs.big.map(y, x + y)).size() > 0`) // 10^6 steps here
	start := time.Now()
	if dear.Match(big, nil) {
		t.Errorf("%s matched despite exceeding MaxCost", dear.Source())
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("cancelled evaluation took %v", d)
	}
	if !dear.tracked {
		t.Error("expensive program is not cost-tracked")
	}
	small := sampleValues()
	small.Attrs = map[string]any{"big": []any{int64(1), int64(2)}}
	small.Prepare()
	if !dear.Match(small, nil) {
		t.Error("the same expression should match where attrs.big is small")
	}
	if _, ok := mustCompile(t, Rank, `attrs.big.map(x, attrs.big.map(y, x + y)).size()`).Score(big, nil); ok {
		t.Error("Score ok despite exceeding MaxCost")
	}
	// Without comprehensions CEL bounds the cost statically, and evaluation
	// skips tracking.
	if p := mustCompile(t, Requirement, `cpus_free >= 4 && mem_free >= 8 * GiB && cpu_util < 0.5`); p.tracked {
		t.Errorf("simple program is cost-tracked (estimate %d)", p.estMax)
	}
	// Work on attrs of unbounded size is tracked.
	if p := mustCompile(t, Requirement, `attrs.tags.exists(t, t == "ssd")`); !p.tracked {
		t.Error("comprehension over attrs is not cost-tracked")
	}
}

// actualCost evaluates p's source again with cost tracking on and returns
// the cost CEL measured.
func actualCost(t testing.TB, p *Program, v *Values, r *Request) uint64 {
	t.Helper()
	env, err := celEnv()
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(p.src)
	if iss.Err() != nil {
		t.Fatal(iss.Err())
	}
	prg, err := env.Program(ast, cel.EvalOptions(cel.OptTrackCost, cel.OptOptimize), cel.CustomDecoratorV2(foldConstCalls))
	if err != nil {
		t.Fatal(err)
	}
	_, det, _ := prg.Eval(&evalVars{v: v, r: r})
	if det == nil || det.ActualCost() == nil {
		t.Fatal("no cost details")
	}
	return *det.ActualCost()
}

func TestUntrackedCostWithinEstimate(t *testing.T) {
	for _, src := range []string{
		`cpus_free >= 4 && mem_free >= 8 * GiB && cpu_util < 0.5`,
		`hostname == "m1.example" || name != "x"`,
		`request.user in ["alice", "bob", "carol"] && request.cpus <= cpus_free`,
		`attrs.zone == "eu-1" && attrs.rack > 3`,
	} {
		p := mustCompile(t, Policy, src)
		if p.tracked {
			continue
		}
		r := &Request{User: strings.Repeat("u", 1000), CPUs: 1}
		if c := actualCost(t, p, sampleValues(), r); c > p.estMax || p.estMax > MaxCost {
			t.Errorf("%s: actual cost %d, estimate %d, limit %d", src, c, p.estMax, MaxCost)
		}
	}
}

func TestRefs(t *testing.T) {
	cases := []struct {
		src  string
		want []string
	}{
		{`cpus_free >= 4 && mem_free >= 8 * GiB && cpu_util < 0.5`, []string{"cpu_util", "cpus_free", "mem_free"}},
		{`attrs.zone == "eu-1" && attrs["rack"] > 3 && "ssd" in attrs.tags`, []string{"attrs.rack", "attrs.tags", "attrs.zone"}},
		{`cpus > 1 && cpus < 9 || cpus == 100`, []string{"cpus"}},
		{`request.user == "a" && cpus > request.cpus`, []string{"cpus"}},
		{`has(attrs.gpu) && attrs.?disk.orValue(0) > 1 && attrs[?"x"].hasValue()`, []string{"attrs.disk", "attrs.gpu", "attrs.x"}},
		{`attrs["rack-id"] == "r1"`, []string{`attrs["rack-id"]`}},
		{`attrs[name] == 1 || "zone" in attrs`, []string{"attrs", "name"}},
		{`[1, 2].exists(cpus, cpus > 1) && os == "linux"`, []string{"os"}},
		{`attrs.tags.exists(t, t == hostname)`, []string{"attrs.tags", "hostname"}},
		{`KiB < 2 * MiB`, []string{}},
		{`name + hostname + arch == "" || net_mbps > 1.0 || mem > 0`, []string{"arch", "hostname", "mem", "name", "net_mbps"}},
	}
	for _, c := range cases {
		got := mustCompile(t, Requirement, c.src).Refs()
		if !slices.Equal(got, c.want) {
			t.Errorf("Refs(%s) = %q, want %q", c.src, got, c.want)
		}
	}
}

func TestCache(t *testing.T) {
	c := NewCache(2)
	a1, err := c.Get(Requirement, "cpus > 1")
	if err != nil {
		t.Fatal(err)
	}
	if a2, _ := c.Get(Requirement, "cpus > 1"); a2 != a1 {
		t.Error("second Get compiled again")
	}
	r1, _ := c.Get(Rank, "cpus")
	if r1 == nil || r1.Kind() != Rank || r1.Source() != "cpus" {
		t.Fatalf("Get(Rank) = %v", r1)
	}
	// Same source, other kind: another entry (and here an error).
	_, errReq := c.Get(Requirement, "cpus")
	if errReq == nil {
		t.Fatal("requirement cpus compiled")
	}
	if c.Len() != 2 {
		t.Errorf("Len = %d, want 2", c.Len())
	}
	// The least recently used ("cpus > 1") was evicted; the rank stays.
	if r2, _ := c.Get(Rank, "cpus"); r2 != r1 {
		t.Error("rank was evicted, want the oldest entry evicted")
	}
	if a3, _ := c.Get(Requirement, "cpus > 1"); a3 == a1 {
		t.Error("evicted entry still cached")
	}
	// Errors are cached: the same error value comes back.
	_, errBad1 := c.Get(Policy, "cpus >")
	_, errBad2 := c.Get(Policy, "cpus >")
	if errBad1 == nil || errBad1 != errBad2 {
		t.Errorf("errors not cached: %p %p", errBad1, errBad2)
	}
	if c.Len() != 2 {
		t.Errorf("Len = %d, want 2", c.Len())
	}
	if NewCache(0).n != 1 {
		t.Error("NewCache(0) does not hold one entry")
	}
}

func TestPrepare(t *testing.T) {
	v := sampleValues()
	v.Prepare()
	p := mustCompile(t, Requirement, `attrs.zone == "eu-1"`)
	if !p.Match(v, nil) {
		t.Fatal("no match")
	}
	// Replacing Attrs is seen at once; so is a change in the number of keys.
	v.Attrs = map[string]any{"zone": "us-1"}
	if p.Match(v, nil) {
		t.Error("replaced Attrs not seen")
	}
	v.Prepare()
	v.Attrs["rack"] = int64(1)
	v.Attrs["zone"] = "eu-1"
	if !p.Match(v, nil) {
		t.Error("added key not seen")
	}
	v.Prepare()
	v.Attrs = nil
	if p.Match(v, nil) {
		t.Error("nil Attrs not seen")
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Requirement: "requirement", Rank: "rank", Policy: "policy", 0: "kind(0)"} {
		if k.String() != want {
			t.Errorf("%d.String() = %q, want %q", k, k.String(), want)
		}
	}
}

func TestConcurrentEval(t *testing.T) {
	p := mustCompile(t, Policy, `request.user == "alice" && "ssd" in attrs.tags && cpu_util < 0.5`)
	v := sampleValues()
	v.Prepare()
	r := &Request{User: "alice"}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				if !p.Match(v, r) {
					t.Error("no match")
					return
				}
			}
		})
	}
	wg.Wait()
}

// An expression that always costs more than MaxCost is a compile error
// (one that only may, depending on the attributes, is cut off at run time
// and is false: see the cost tests above).
func TestOverCost(t *testing.T) {
	list := "[" + strings.Repeat("1,", 300) + "1]"
	src := list + ".map(x, " + list + ".map(y, x + y)).size() > 0"
	_, err := Compile(Requirement, src)
	var ee *ExprError
	if !errors.As(err, &ee) || !strings.Contains(ee.Msg, "costs at least") || !strings.Contains(ee.Msg, strconv.Itoa(MaxCost)) {
		t.Fatalf("over-cost expression: %v", err)
	}
}

// && and || give the same answer in either order when one side exceeds
// MaxCost, as the package documentation promises: the side that decides
// wins, and the one over budget is undefined wherever it is written.
func TestLogicCommutesUnderCostLimit(t *testing.T) {
	big := sampleValues()
	var items []any
	for i := range 1000 {
		items = append(items, int64(i))
	}
	big.Attrs = map[string]any{"big": items, "half": items[:63]}
	big.Prepare()
	const dear = `attrs.big.map(x, attrs.big.map(y, x + y)).size() > 0` // 10^6 steps: over MaxCost
	// Each of these costs about 60% of MaxCost: each fits its own budget.
	const half1 = `attrs.half.map(x, attrs.half.map(y, x + y)).size() == 1` // false
	const half2 = `attrs.half.map(x, attrs.half.map(y, x * y)).size() > 0`  // true
	if c := actualCost(t, mustCompile(t, Requirement, half2), big, nil); c < MaxCost/2 || c > MaxCost {
		t.Fatalf("%s costs %d; the test wants between half of MaxCost and MaxCost", half2, c)
	}
	cases := []struct {
		a, op, b string
		want     bool
	}{
		{dear, "||", "true", true},
		{dear, "||", "cpus >= 1", true},
		{dear, "||", "cpus > 100", false},
		{dear, "&&", "false", false},
		{dear, "&&", "cpus >= 1", false},
		{dear, "||", "(cpus >= 1 && true)", true},
		{"(" + dear + " || true)", "&&", "cpus >= 1", true},
		{"!(" + dear + " && false)", "&&", "true", true},
		{half1, "||", half2, true}, // each operand has a budget of its own
		{half2, "&&", "true", true},
	}
	for _, kind := range []Kind{Requirement, Policy} {
		for _, tc := range cases {
			ab := tc.a + " " + tc.op + " " + tc.b
			ba := tc.b + " " + tc.op + " " + tc.a
			got1 := mustCompile(t, kind, ab).Match(big, &Request{User: "u"})
			got2 := mustCompile(t, kind, ba).Match(big, &Request{User: "u"})
			if got1 != got2 {
				t.Errorf("%v: %q → %v but %q → %v", kind, ab, got1, ba, got2)
			}
			if got1 != tc.want {
				t.Errorf("%v: %q → %v, want %v", kind, ab, got1, tc.want)
			}
		}
	}
	// Many operands over budget: the evaluation stops once they have spent
	// MaxTotalCost, and what is left is undefined.
	var many []string
	for i := range 20 {
		many = append(many, fmt.Sprintf("attrs.big.map(x, attrs.big.map(y, x + y + %d)).size() > 0", i))
	}
	p := mustCompile(t, Requirement, strings.Join(many, " || ")+" || cpus > 100")
	var spent uint64
	if got := p.logic.eval(&evalVars{v: big}, &spent); got != triUndef || spent < MaxTotalCost || spent >= MaxTotalCost+MaxCost {
		t.Errorf("20 operands over budget: %v after spending %d (total limit %d)", got, spent, MaxTotalCost)
	}
	// Where the attribute is small, the dear side is evaluated as usual.
	small := sampleValues()
	small.Attrs = map[string]any{"big": []any{int64(1)}}
	small.Prepare()
	if !mustCompile(t, Requirement, dear+" && cpus >= 1").Match(small, nil) {
		t.Error("a cheap evaluation of the tracked side should match")
	}
}
