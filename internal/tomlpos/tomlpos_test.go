package tomlpos

import (
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestLines(t *testing.T) {
	d := New(`name = "x"
[grid]
managers = 3
[[action]]
do = "a"
[[action]]
"do" = "b"
[grid.config]
'k' = 1
`)
	for _, tc := range []struct {
		got, want int
	}{
		{d.Of(toml.Key{"name"}), 1},
		{d.Table("grid"), 2},
		{d.Of(toml.Key{"grid", "managers"}), 3},
		{len(d.Array("action")), 2},
		{d.Array("action")[1], 6},
		{d.Key(d.Array("action")[1], "do"), 7},
		{d.Of(toml.Key{"grid", "config", "k"}), 9},
		{d.Of(toml.Key{"grid", "missing"}), 2}, // not written: its table's line
		{d.Table("none"), 0},
	} {
		if tc.got != tc.want {
			t.Errorf("got line %d, want %d", tc.got, tc.want)
		}
	}
}

// DecodeAll reports every value of the wrong type and every unknown key,
// with the line of each (in a list of tables, the line in its own
// table), decodes the rest, and says which keys failed.
func TestDecodeAll(t *testing.T) {
	type op struct {
		Name string   `toml:"name"`
		Cmd  []string `toml:"cmd"`
	}
	var v struct {
		Name  string            `toml:"name"`
		Count int               `toml:"count"`
		Wait  Duration          `toml:"wait"`
		Env   map[string]string `toml:"env"`
		Run   struct {
			Nice int `toml:"nice"`
		} `toml:"run"`
		Ops []op `toml:"op"`
	}
	src := `name = "x"
count = "three"
wiat = "1s"
env = { A = 1 }
[run]
nice = 1.5
[[op]]
name = "a"
cmd = "a b"
[[op]]
name = 2
cmd = ["b"]
`
	doc, errs, failed := DecodeAll("f.toml", []byte(src), 1<<20, &v)
	want := `f.toml:2: count: want a whole number, not a string
f.toml:3: wiat: unknown key (did you mean "wait"?)
f.toml:4: env: want a table of strings; an entry is a whole number
f.toml:6: run.nice: want a whole number, not a number
f.toml:9: op[1].cmd: want a list of strings, e.g. ["a", "b"], not a string
f.toml:11: op[2].name: want a string (in quotes), not a whole number`
	if doc == nil || errs.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", errs, want)
	}
	if v.Name != "x" || len(v.Ops) != 2 || v.Ops[0].Name != "a" || v.Ops[1].Cmd[0] != "b" {
		t.Errorf("the rest was not decoded: %+v", v)
	}
	for _, k := range []string{"count", "wait", "env", "run.nice", "op[1].cmd", "op[2].name"} {
		if !failed[k] {
			t.Errorf("%s is not among the failed keys %v", k, failed)
		}
	}
	if _, errs, _ := DecodeAll("f.toml", []byte("a = 1\n[b\nc = 2\n"), 1<<20, &v); len(errs) != 1 || errs[0].Line != 2 ||
		!strings.Contains(errs[0].Msg, "nothing else was checked") {
		t.Errorf("a syntax error: %v", errs)
	}
}
