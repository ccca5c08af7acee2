package client

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/relations"
)

func TestPlainWords(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: foo has no /p2p/", ErrAddr), "not a manager address: foo has no /p2p/"},
		{fmt.Errorf("x.toml:2: %w: policy: %w", config.ErrConfig, query.ErrExpr), "x.toml:2: bad properties: policy: bad expression"},
		{fmt.Errorf("requirement: %w: 1:1: no", query.ErrExpr), "requirement: bad expression: 1:1: no"},
		{fmt.Errorf("add: %w", relations.ErrCycle), "add: that would close a cycle"},
		{errors.New("query: bad expression, but not wrapped"), "query: bad expression, but not wrapped"},
	} {
		if got := PlainWords(c.err); got != c.want {
			t.Errorf("%v: %q, want %q", c.err, got, c.want)
		}
	}
}
