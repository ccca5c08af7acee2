package query

import (
	"testing"

	"github.com/gridmgr/gridmgr/wire"
)

func TestNeedRequirement(t *testing.T) {
	gpus := []*wire.Amount{{Kind: "gpus", N: 1}, {Kind: "licenses.matlab", N: 2}}
	for _, c := range []struct {
		need Need
		want string
	}{
		{Need{}, "true"},
		{Need{Zeros: true}, "cpus_free >= 0 && mem_free >= 0"},
		{Need{CPUs: 2}, "cpus_free >= 2"},
		{Need{Mem: 4 << 30}, "mem_free >= 4294967296"},
		{Need{CPUs: 1, Zeros: true}, "cpus_free >= 1 && mem_free >= 0"},
		{Need{CPUs: 2, Mem: 512, Tokens: gpus}, `cpus_free >= 2 && mem_free >= 512 && tokens["gpus"] >= 1 && tokens["licenses.matlab"] >= 2`},
		{Need{Tokens: gpus[:1]}, `tokens["gpus"] >= 1`},
	} {
		if got := c.need.Requirement(); got != c.want {
			t.Errorf("%+v: got %q, want %q", c.need, got, c.want)
		}
		if _, err := Compile(Requirement, c.want); err != nil {
			t.Errorf("%q does not compile: %v", c.want, err)
		}
	}
	if got, want := (Need{CPUs: 1, Zeros: true}).And(`attrs.zone == "a"`), `(attrs.zone == "a") && cpus_free >= 1 && mem_free >= 0`; got != want {
		t.Errorf("And: got %q, want %q", got, want)
	}
	if got := (Need{CPUs: 1}).And(""); got != "cpus_free >= 1" {
		t.Errorf("And(\"\"): got %q", got)
	}
}
