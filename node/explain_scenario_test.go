package node_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/wire"
)

// explainScenario adds explained queries (query_request.explain) and
// drain to the reservation scenario harness; files in testdata/explain/.
type explainScenario struct {
	*reserveScenario
}

func TestExplainScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/explain", func(t *testing.T, path string) {
		s := &explainScenario{&reserveScenario{scenario: &scenario{t: t}, labels: map[string]string{}}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			s.t = t
			switch d.Cmd {
			case "explain":
				return s.explain(d)
			case "drain":
				// drain NAME: an admin drains the manager.
				rep := s.n.Ask(pid(d.CmdArgs[0].Key), &wire.Envelope{Body: &wire.Envelope_AdminRequest{AdminRequest: &wire.AdminRequest{Command: "drain"}}}, 5*time.Second)
				if ar := rep.GetAdminReply(); ar != nil && ar.Ok {
					return "ok"
				}
				return fmt.Sprintf("drain failed: %v", rep)
			}
			if out, ok := s.common(d); ok {
				return out
			}
			if out, ok := s.reserveCmd(d); ok {
				return out
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

// explain runs one explained query from a client at a manager and prints
// the offers and the verdicts:
//
//	explain at=NAME [as=USER] [cpus=N] [duration=D] [begin=...] [earliest]
//	REQUIREMENT
func (s *explainScenario) explain(d *datadriven.TestData) string {
	var at string
	d.ScanArgs(s.t, "at", &at)
	req := &wire.QueryRequest{Requirement: strings.TrimSpace(d.Input), Down: 255, Up: 255, Want: 1, Limit: 10, BudgetMs: 5000, Explain: true}
	if d.HasArg("as") {
		d.ScanArgs(s.t, "as", &req.User)
	}
	if d.HasArg("cpus") {
		d.ScanArgs(s.t, "cpus", &req.Cpus)
	}
	req.BeginUnixMs = beginArg(s.scenario, d)
	req.DurationMs = s.dur(d, "duration")
	req.Earliest = d.HasArg("earliest")
	start := s.n.Now()
	rep := s.n.Ask(pid(at), &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: req}}, 10*time.Second)
	if rep == nil {
		return "no answer within 10s"
	}
	if e := rep.GetError(); e != nil {
		return fmt.Sprintf("error %s:\n%s", e.Code, e.Message)
	}
	return describeVerdicts(rep.GetQueryReply(), start)
}

// describeVerdicts prints a reply's offers (names), then its verdicts,
// one a line: NAME WHY `CLAUSE`: DETAIL [earliest +D].
func describeVerdicts(qr *wire.QueryReply, start time.Time) string {
	var b strings.Builder
	var names []string
	for _, o := range qr.Offers {
		names = append(names, o.Name)
	}
	if len(names) == 0 {
		names = []string{"none"}
	}
	fmt.Fprintf(&b, "offers: %s\n", strings.Join(names, ", "))
	fmt.Fprintf(&b, "verdicts: %d, %d more\n", len(qr.Verdicts), qr.VerdictsMore)
	for _, v := range qr.Verdicts {
		if v.Peer != pid(v.Name) {
			fmt.Fprintf(&b, "(peer %s) ", v.Peer)
		}
		fmt.Fprintf(&b, "%s %s", v.Name, v.Why)
		if v.Clause != "" {
			fmt.Fprintf(&b, " `%s`", v.Clause)
		}
		fmt.Fprintf(&b, ": %s", v.Detail)
		if v.EarliestUnixMs != 0 {
			fmt.Fprintf(&b, " [earliest +%v]", time.UnixMilli(v.EarliestUnixMs).Sub(start).Round(time.Second))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// A grid larger than the bound: the entry's answer carries MaxVerdicts
// verdicts and counts the rest, and a reason only one manager gives is
// among those kept.
func TestExplainBound(t *testing.T) {
	s := &scenario{t: t}
	var lines []string
	lines = append(lines, "root cpus=1")
	total := 1
	for i := range 7 {
		mid := fmt.Sprintf("mid%d", i)
		lines = append(lines, mid+" sup=root cpus=1")
		total++
		for j := range 10 {
			line := fmt.Sprintf("leaf%d%d sup=%s cpus=1", i, j, mid)
			if i == 6 && j == 9 {
				line = fmt.Sprintf("leaf%d%d sup=%s cpus=4 | policy request.user == \"nobody\"", i, j, mid)
			}
			lines = append(lines, line)
			total++
		}
	}
	s.grid(&datadriven.TestData{Pos: "bound", Cmd: "grid", Input: strings.Join(lines, "\n")})
	req := &wire.QueryRequest{Requirement: "cpus >= 2", User: "alice", Down: 255, Up: 255, Want: 1, Limit: 10, BudgetMs: 5000, Explain: true}
	rep := s.n.Ask(pid("root"), &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: req}}, 10*time.Second)
	qr := rep.GetQueryReply()
	if qr == nil {
		t.Fatalf("no query reply: %v", rep)
	}
	if qr.Visited != uint32(total) || len(qr.Offers) != 0 {
		t.Fatalf("visited %d of %d, %d offers", qr.Visited, total, len(qr.Offers))
	}
	if len(qr.Verdicts) != query.MaxVerdicts || int(qr.VerdictsMore) != total-query.MaxVerdicts {
		t.Fatalf("%d verdicts, %d more; want %d and %d", len(qr.Verdicts), qr.VerdictsMore, query.MaxVerdicts, total-query.MaxVerdicts)
	}
	policy := 0
	for _, v := range qr.Verdicts {
		if v.Why == "policy" {
			policy++
			if v.Name != "leaf69" || v.Clause != `request.user == "nobody"` {
				t.Errorf("policy verdict %v", v)
			}
		}
	}
	if policy != 1 {
		t.Errorf("%d policy verdicts kept, want leaf69's", policy)
	}
	// Without explain, none.
	req.Explain = false
	rep = s.n.Ask(pid("root"), &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: req}}, 10*time.Second)
	if qr := rep.GetQueryReply(); qr == nil || len(qr.Verdicts) != 0 || qr.VerdictsMore != 0 {
		t.Errorf("verdicts without explain: %v", rep)
	}
}
