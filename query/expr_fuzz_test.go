package query

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"cel.dev/cel-go/common/types"
)

// fuzzSeeds are expressions from the tests and the documentation.
var fuzzSeeds = []string{
	``,
	`true`,
	`attrs.tags.exists(t, t.size() > 300) || cpu_util < 0.5`,
	`!(attrs.tags.all(t, t.startsWith("t")) && false) && hostname.contains("h")`,
	`attrs.tags.map(x, attrs.tags.map(y, x + y)).size() > 0 || true`,
	`cpus_free >= 4 && mem_free >= 8 * GiB && cpu_util < 0.5`,
	`attrs.zone == "eu-1" && "ssd" in attrs.tags`,
	`attrs["rack"] > 3 || attrs.rack > 6.5`,
	`mem_free`,
	`mem_free - 2 * GiB * cpus_free`,
	`1.0 - cpu_util`,
	`attrs.weight`,
	`request.user in ["alice", "bob"] && cpu_util < 0.3`,
	`request.cpus <= cpus_free && request.mem <= mem_free / 2`,
	`attrs.missing || true`,
	`!attrs.missing`,
	`cpus / 0 == 1`,
	`9223372036854775807 + cpus > 0`,
	`net_mbps > 100.0 && os == "linux" && arch != "arm64"`,
	`hostname.endsWith(".example") && name.matches("^m[0-9]+$")`,
	`has(attrs.gpu) && attrs.?disk.orValue(0) > 1 && attrs[?"x"].hasValue()`,
	`attrs.tags.exists(t, t.startsWith("ss")) && attrs.ports.all(p, p < 1024)`,
	`[1, 2].exists(cpus, cpus > 1)`,
	`double(cpus_free) / double(cpus) > 0.7 ? 1 : 0`,
	`{"a": cpus}.a == 16 && size("héllo") == 5`,
	`cpus_free >= 4 &&`,
	`cpus $ 3`,
	"mem_free +\n  (cpus",
	`cpus_free >= 4 && cpu > 2`,
	`request.usr == "alice"`,
	`net_mbps == 1000`,
	"name == \"a\xffb\"",
	`[0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map(a, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map(b, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map(c, a))).size() > 0`,
	strings.Repeat("(", 100),
	strings.Repeat("1+", 100) + "1",
	strings.Repeat("!", 100) + "true",
	`"abc" + string(cpus) == "abc16" && bytes("x") == b"x" && timestamp("2024-01-01T00:00:00Z") < timestamp("2025-01-01T00:00:00Z")`,
	`duration("1h") > duration("1m") && int("12") == 12 && uint(3) == 3u && type(cpus) == int`,
	`cel.bind(x, cpus, x > 1)`,
	`[1,2,3].filter(x, x > 1).map(x, x * 2)[0] == 4 && {"k": [1]}.k[0] == 1`,
	`optional.of(1).value() == 1 && optional.none().orValue(2) == 2`,
	`dyn(cpus) == 16 && dyn(attrs.tags)[1] == "ssd"`,
	`attrs.tags.transformList(i, v, v + string(i))`,
	"'a' + 'b' == 'ab'\n// comment\n && true",
	`null == null && attrs.zone != null`,
	`-9223372036854775808 < cpus && 18446744073709551615u > 1u && 1e308 * 10.0 > 1.0`,
}

// fuzzValues are the offers every compiled program is evaluated on.
func fuzzValues() []*Values {
	known := sampleValues()
	prepared := sampleValues()
	prepared.Prepare()
	unknown := unknownValues()
	unknown.Attrs["nested"] = map[string]any{"a": []any{int64(1), "b", 2.5, true}}
	unknown.Attrs["empty"] = []any{}
	bare := &Values{Name: "bare", CPUUtil: -1}
	// big has long strings and lists, so that the cost of work on them
	// shows against the static estimate.
	big := sampleValues()
	big.Hostname = strings.Repeat("h", 20000)
	big.Attrs["zone"] = strings.Repeat("z", 20000)
	long := make([]any, 500)
	for i := range long {
		long[i] = strings.Repeat("t", i)
	}
	big.Attrs["tags"] = long
	big.Prepare()
	return []*Values{known, prepared, unknown, bare, big, nil}
}

func FuzzCompile(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	values := fuzzValues()
	requests := []*Request{{User: "alice", CPUs: 2, Mem: GiB}, {User: strings.Repeat("u", 20000)}, nil}
	f.Fuzz(func(t *testing.T, src string) {
		for _, kind := range []Kind{Requirement, Rank, Policy} {
			p, err := Compile(kind, src)
			if err != nil {
				var ee *ExprError
				if !errors.As(err, &ee) {
					t.Fatalf("%v %q: error %T %v, want *ExprError", kind, src, err, err)
				}
				if ee.Line < 1 || ee.Col < 1 || ee.Msg == "" || !errors.Is(err, ErrExpr) {
					t.Fatalf("%v %q: bad ExprError %d:%d %q", kind, src, ee.Line, ee.Col, ee.Msg)
				}
				if n := strings.Count(ee.Error(), "\n"); n != 0 && n != 2 {
					t.Fatalf("%v %q: Error() has %d lines:\n%s", kind, src, n+1, ee.Error())
				}
				continue
			}
			refs := p.Refs()
			if !slices.IsSorted(refs) || len(slices.Compact(slices.Clone(refs))) != len(refs) {
				t.Fatalf("%q: Refs %q not sorted and unique", src, refs)
			}
			for _, v := range values {
				for _, r := range requests {
					start := time.Now()
					p.Match(v, r)
					p.Score(v, r)
					if d := time.Since(start); d > 2*time.Second {
						t.Fatalf("%q: evaluation took %v", src, d)
					}
					// Operators evaluated over separate operands (logic.go)
					// agree with CEL wherever CEL's one evaluation stays
					// within MaxCost.
					if p.logic != nil {
						out, _, err := p.prg.Eval(&evalVars{v: v, r: r})
						if err == nil && (out == types.True || out == types.False) && p.Match(v, r) != (out == types.True) {
							t.Fatalf("%q: operators give %v, CEL gives %v", src, p.Match(v, r), out)
						}
					}
					// A program evaluated without cost tracking must stay
					// within its static estimate, which is within MaxCost.
					if !p.tracked && v != nil {
						if c := actualCost(t, p, v, r); c > p.estMax || p.estMax > MaxCost {
							t.Fatalf("%q: untracked cost %d > estimate %d (limit %d)", src, c, p.estMax, MaxCost)
						}
					}
				}
			}
		}
	})
}
