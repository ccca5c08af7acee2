package query

import (
	"errors"
	"strings"
	"testing"

	"github.com/gridmgr/gridmgr/wire"
)

// FuzzEventFilter compiles arbitrary source as an event filter and runs
// it on fixed events: it must never panic, a compile error must be a
// well-formed *ExprError, and an evaluation must finish (cost limit).
func FuzzEventFilter(f *testing.F) {
	for _, s := range []string{
		``,
		`true`,
		`event.kind == "reservation" && event.manager == "gm160"`,
		`event.kind == "utilization" && event.utilization.cpu_util > 0.5`,
		`event.time > timestamp("2026-01-01T00:00:00Z")`,
		`has(event.app) && event.app.state == "running"`,
		`event.?app.state.orValue("") == ""`,
		`event.reservation.amounts.cpus >= 4`,
		`event["relation"]["to"] == "down"`,
		`event.reservation.amounts.all(k, event.reservation.amounts.all(j, k + j != ""))`,
		`event.knd == "x"`,
		`event.seq / 0 == 1`,
		`[1].exists(event, event == 1)`,
		`event.kind ==`,
		"event.type == \"a\xffb\"",
		strings.Repeat("(", 200),
		strings.Repeat("!", 200) + "true",
		`event.reservation.expires - event.time > duration("1m")`,
	} {
		f.Add(s)
	}
	evs := []*wire.Event{resEvent(), utilEvent(0.5), relEvent(), appEvent(), adminEvent(), nil}
	f.Fuzz(func(t *testing.T, src string) {
		p, err := CompileEventFilter(src)
		if err != nil {
			var ee *ExprError
			if !errors.As(err, &ee) || !errors.Is(err, ErrExpr) {
				t.Fatalf("%q: error %T %v, want *ExprError", src, err, err)
			}
			if ee.Line < 1 || ee.Col < 1 || ee.Msg == "" || ee.Kind != Filter {
				t.Fatalf("%q: bad ExprError %v %d:%d %q", src, ee.Kind, ee.Line, ee.Col, ee.Msg)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "filter: ") {
				t.Fatalf("%q: Error() = %q", src, msg)
			}
			if n := strings.Count(msg, "\n"); n != 0 && n != 2 {
				t.Fatalf("%q: Error() has %d lines:\n%s", src, n+1, msg)
			}
			return
		}
		for _, ev := range evs {
			ok, err := p.Match(ev)
			if ok && err != nil {
				t.Fatalf("%q: Match = true with error %v", src, err)
			}
		}
	})
}
