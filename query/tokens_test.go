package query

import (
	"slices"
	"testing"
)

// tokenValues is sampleValues with two tokens declared, set with SetTokens.
func tokenValues() *Values {
	v := sampleValues()
	v.SetTokens(map[string]int64{"gpus": 2, "licenses.matlab": 5, "none": 0})
	return v
}

// forTokenForms runs f on v with Tokens converted by SetTokens, by
// Prepare, and not at all (assigned to the field).
func forTokenForms(t *testing.T, v *Values, f func(t *testing.T, v *Values)) {
	t.Helper()
	t.Run("set", func(t *testing.T) { f(t, v) })
	p := *v
	p.Prepare()
	t.Run("prepared", func(t *testing.T) { f(t, &p) })
	raw := Values{Name: v.Name, Attrs: v.Attrs, Tokens: v.Tokens}
	t.Run("raw", func(t *testing.T) { f(t, &raw) })
}

func TestTokens(t *testing.T) {
	cases := []struct {
		src  string
		want bool
	}{
		{`tokens.gpus >= 1`, true},
		{`tokens.gpus >= 3`, false},
		{`tokens.gpus == 2`, true},
		{`tokens["gpus"] == 2`, true},
		{`tokens["licenses.matlab"] >= 2`, true},
		{`tokens["licenses.matlab"] >= 6`, false},
		{`tokens.none >= 1`, false},
		{`tokens.none == 0`, true},
		{`tokens.gpus * 2 == 4 && tokens.gpus > 1.5`, true},
		{`size(tokens) == 3 && "gpus" in tokens`, true},
		{`tokens.exists(k, tokens[k] >= 5)`, true},
		// a token not declared is missing: undefined, so false
		{`tokens.fpgas >= 1`, false},
		{`tokens.fpgas >= 0`, false},
		{`tokens["fpgas"] >= 0`, false},
		{`!(tokens.fpgas >= 1)`, false},
		{`tokens.fpgas >= 1 || tokens.gpus >= 1`, true},
		{`!has(tokens.fpgas) && !("fpgas" in tokens)`, true},
		{`tokens.?fpgas.orValue(0) == 0`, true},
		{`has(tokens.gpus)`, true},
	}
	forTokenForms(t, tokenValues(), func(t *testing.T, v *Values) {
		for _, c := range cases {
			p := mustCompile(t, Requirement, c.src)
			if got := p.Match(v, nil); got != c.want {
				t.Errorf("Match(%s) = %v, want %v", c.src, got, c.want)
			}
		}
	})
	// A rank may read tokens.
	if s, ok := mustCompile(t, Rank, `tokens.gpus * 10`).Score(tokenValues(), nil); !ok || s != 20 {
		t.Errorf("Score(tokens.gpus * 10) = %v, %v; want 20", s, ok)
	}
	// A token value of the wrong type does not compile.
	if _, err := Compile(Requirement, `tokens.gpus == "2"`); err == nil {
		t.Error(`tokens.gpus == "2" compiled`)
	}
}

func TestTokensNone(t *testing.T) {
	// No tokens at all (nil, whether set or not) is an empty map.
	for _, v := range []*Values{sampleValues(), func() *Values { v := sampleValues(); v.SetTokens(nil); return v }()} {
		if !mustCompile(t, Requirement, `size(tokens) == 0 && !has(tokens.gpus)`).Match(v, nil) {
			t.Error("nil Tokens: not an empty map")
		}
		if mustCompile(t, Requirement, `tokens.gpus >= 0`).Match(v, nil) {
			t.Error("nil Tokens: tokens.gpus >= 0 matched")
		}
	}
	if mustCompile(t, Requirement, `size(tokens) == 0`).Match(nil, nil) {
		t.Error("nil Values: tokens defined")
	}
}

func TestSetTokens(t *testing.T) {
	p := mustCompile(t, Requirement, `tokens.gpus >= 1`)
	v := sampleValues()
	v.Prepare()
	prepAttrs := v.prep
	v.SetTokens(map[string]int64{"gpus": 1})
	if !p.Match(v, nil) {
		t.Fatal("no match after SetTokens")
	}
	if !sameMap(v.prep.vals, prepAttrs.vals) {
		t.Error("SetTokens dropped the prepared Attrs")
	}
	v.SetTokens(map[string]int64{"gpus": 0})
	if p.Match(v, nil) {
		t.Error("new counts not seen")
	}
	// Replacing the field without SetTokens is seen at once; so is a
	// change in the number of keys.
	v.Tokens = map[string]int64{"gpus": 3}
	if !p.Match(v, nil) {
		t.Error("replaced Tokens not seen")
	}
	m := map[string]int64{"gpus": 0}
	v.SetTokens(m)
	m["gpus"], m["x"] = 1, 1
	if !p.Match(v, nil) {
		t.Error("added key not seen")
	}
	v.Tokens = nil
	if p.Match(v, nil) {
		t.Error("nil Tokens not seen")
	}
	// Prepare converts Tokens set by assignment.
	v.Tokens = map[string]int64{"gpus": 4}
	v.Prepare()
	if v.tok.val == nil || !sameMap(v.tok.of, v.Tokens) || !p.Match(v, nil) {
		t.Error("Prepare did not convert Tokens")
	}
}

func TestTokensNoAllocs(t *testing.T) {
	p := mustCompile(t, Requirement, `tokens.gpus >= 1 && tokens["licenses.matlab"] >= 2`)
	v := tokenValues()
	v.Prepare()
	if !p.Match(v, nil) {
		t.Fatal("no match")
	}
	q := mustCompile(t, Requirement, `cpus >= 1 && cpus_free >= 2`)
	plain := testing.AllocsPerRun(100, func() { q.Match(v, nil) })
	got := testing.AllocsPerRun(100, func() { p.Match(v, nil) })
	// Reading prepared tokens costs no more than reading plain ints.
	if got > plain {
		t.Errorf("tokens requirement allocates %v per evaluation, plain ints %v", got, plain)
	}
	t.Logf("allocs per evaluation: tokens %v, plain ints %v", got, plain)
}

func TestTokenRefs(t *testing.T) {
	cases := []struct {
		src  string
		want []string
	}{
		{`tokens.gpus >= 1`, []string{"tokens.gpus"}},
		{`tokens["gpus"] >= 1`, []string{"tokens.gpus"}},
		{`tokens["licenses.matlab"] >= 2 && cpus > 1`, []string{"cpus", `tokens["licenses.matlab"]`}},
		{`has(tokens.gpus) && tokens.?fpgas.orValue(0) > 1 && tokens[?"x"].hasValue()`, []string{"tokens.fpgas", "tokens.gpus", "tokens.x"}},
		{`tokens[name] == 1 || "gpus" in tokens`, []string{"name", "tokens"}},
		{`size(tokens) > 0 && attrs.zone == "eu-1"`, []string{"attrs.zone", "tokens"}},
		{`[1].exists(tokens, tokens > 0)`, []string{}},
	}
	for _, c := range cases {
		got := mustCompile(t, Requirement, c.src).Refs()
		if !slices.Equal(got, c.want) {
			t.Errorf("Refs(%s) = %q, want %q", c.src, got, c.want)
		}
	}
	if !slices.Contains(Identifiers(), "tokens") {
		t.Errorf("Identifiers() = %q, no tokens", Identifiers())
	}
}
