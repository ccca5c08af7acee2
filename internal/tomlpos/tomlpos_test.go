package tomlpos

import (
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
