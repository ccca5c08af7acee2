package node_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/wire"
)

// failoverScenario adds failure commands to the reservation scenarios
// (so a file can kill, partition and flap while it queries and reserves):
//
//	kill NAME...          like kill -9; marks the time
//	start NAME...         (re)start managers; marks the time
//	silence / heal        as in the query scenarios; mark the time
//	link A B down|up      drop (or stop dropping) all traffic between A and B
//	flap A B down=D up=U for=T   the link goes down for D, up for U, … for T, then stays up
//	shape                 the hierarchy the running managers form now
//	settle [max=60s]      run until the shape is settled and stays the same for
//	                      twice the failure timeout; print when it settled,
//	                      counted from the last mark, and the shape
//	events NAME           the manager's relation events since the last mark
//	reparents             how many times managers reparented since the grid formed
type failoverScenario struct {
	*reserveScenario
	mark   time.Time
	formed time.Time
}

func (s *failoverScenario) names(d *datadriven.TestData) []string {
	var out []string
	for _, a := range d.CmdArgs {
		out = append(out, a.Key)
	}
	return out
}

func (s *failoverScenario) cmd(d *datadriven.TestData) (string, bool) {
	switch d.Cmd {
	case "grid":
		out, _ := s.common(d)
		s.mark, s.formed = s.n.Now(), s.n.Now()
		return out, true
	case "kill", "silence", "heal":
		out, _ := s.common(d)
		s.mark = s.n.Now()
		return out, true
	case "start":
		for _, name := range s.names(d) {
			s.n.Start(pid(name))
		}
		s.mark = s.n.Now()
		return "ok", true
	case "link":
		if len(d.CmdArgs) != 3 {
			d.Fatalf(s.t, "link A B down|up")
		}
		a, b, how := pid(d.CmdArgs[0].Key), pid(d.CmdArgs[1].Key), d.CmdArgs[2].Key
		s.cut[[2]string{a, b}] = how == "down"
		s.mark = s.n.Now()
		return "ok", true
	case "flap":
		a, b := pid(d.CmdArgs[0].Key), pid(d.CmdArgs[1].Key)
		var down, up, total string
		d.ScanArgs(s.t, "down", &down)
		d.ScanArgs(s.t, "up", &up)
		d.ScanArgs(s.t, "for", &total)
		dd, du, dt := mustDur(s.t, down), mustDur(s.t, up), mustDur(s.t, total)
		s.mark = s.n.Now()
		end := s.n.Now().Add(dt)
		flaps := 0
		for s.n.Now().Before(end) {
			s.cut[[2]string{a, b}] = true
			flaps++
			s.n.RunFor(min(dd, end.Sub(s.n.Now())))
			s.cut[[2]string{a, b}] = false
			if s.n.Now().Before(end) {
				s.n.RunFor(min(du, end.Sub(s.n.Now())))
			}
		}
		return fmt.Sprintf("link went down %d times in %s", flaps, dt), true
	case "shape":
		return s.n.Shape().String(), true
	case "settle":
		limit := time.Minute
		if d.HasArg("max") {
			var m string
			d.ScanArgs(s.t, "max", &m)
			limit = mustDur(s.t, m)
		}
		return s.settle(limit), true
	case "events":
		nd := s.n.Node(pid(d.CmdArgs[0].Key))
		var b strings.Builder
		for _, e := range nd.Events {
			if e.At.Before(s.mark) {
				continue
			}
			fmt.Fprintf(&b, "+%s %s: %s\n", e.At.Sub(s.mark).Round(time.Millisecond), e.Name, e.What)
		}
		return b.String(), true
	case "admin":
		return s.admin(d), true
	case "audit":
		nd := s.n.Node(pid(d.CmdArgs[0].Key))
		var b strings.Builder
		for _, r := range nd.Disk.Audit {
			via := ""
			if r.Via != "" {
				via = " via " + r.Via
			}
			fmt.Fprintf(&b, "%s%s %q ok=%v: %s\n", r.Author, via, r.Command, r.OK, r.Result)
		}
		return b.String(), true
	case "reparents":
		n := 0
		for _, nd := range s.n.Nodes() {
			for _, e := range nd.Events {
				if !e.At.Before(s.formed) && strings.HasPrefix(e.What, "reparented:") {
					n++
				}
			}
		}
		return fmt.Sprintf("%d reparent(s) since the grid formed", n), true
	}
	return "", false
}

// addresses writes a manager's name given to a command that takes an
// address (add-superior, add-inferior, reparent) as its full multiaddr, so
// that scenario files can say "reparent gm156".
func (s *failoverScenario) addresses(cmd string) string {
	words := strings.Fields(cmd)
	if len(words) == 2 && slices.Contains([]string{"add-superior", "add-inferior", "reparent"}, words[0]) && s.n.Node(pid(words[1])) != nil {
		return words[0] + " " + memnet.PeerAddrs(words[1]).String()
	}
	return cmd
}

// admin sends the input line as an admin command:
//
//	admin at=NAME [as=CLIENT] [all] [budget=DUR]
//
// and prints the answer: one manager's text, or (all) each manager's
// answer sorted by name and those that did not answer.
func (s *failoverScenario) admin(d *datadriven.TestData) string {
	at, from := s.arg(d, "at", ""), s.arg(d, "as", memnet.Client)
	req := &wire.AdminRequest{Command: s.addresses(strings.TrimSpace(d.Input)), All: d.HasArg("all")}
	if d.HasArg("budget") {
		req.BudgetMs = uint32(mustDur(s.t, s.arg(d, "budget", "")) / time.Millisecond)
	}
	nd := s.n.Node(pid(at))
	start := s.n.Now()
	s.mark = start
	sid := s.n.RequestFrom(pid(at), from, &wire.Envelope{Body: &wire.Envelope_AdminRequest{AdminRequest: req}})
	final := func() *wire.AdminReply {
		for _, e := range nd.Replies[sid] {
			if ar := e.GetAdminReply(); ar != nil && !ar.Partial {
				return ar
			}
		}
		return nil
	}
	var qs []uint64 // queries sent while the command runs (with-queries=NAME)
	var answeredAt time.Time
	qat := s.arg(d, "with-queries", "")
	if qat == "" {
		s.n.RunUntil(func() bool { return final() != nil }, 20*time.Second)
	} else {
		ask := func() {
			qs = append(qs, s.n.Request(pid(qat), &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{
				Requirement: "cpus >= 1", Down: 255, Up: 255, Want: 100, Limit: 100, BudgetMs: 2000,
			}}}))
		}
		for end := s.n.Now().Add(20 * time.Second); final() == nil && s.n.Now().Before(end); {
			ask()
			s.n.RunFor(time.Millisecond)
		}
		answeredAt = s.n.Now()
		for range 50 { // and for 50ms after
			ask()
			s.n.RunFor(time.Millisecond)
		}
	}
	rep := final()
	if rep == nil {
		return "no answer within 20s"
	}
	if answeredAt.IsZero() {
		answeredAt = s.n.Now()
	}
	took := answeredAt.Sub(start).Round(time.Millisecond)
	queries := ""
	if qat != "" {
		qn := s.n.Node(pid(qat))
		s.n.RunUntil(func() bool {
			for _, sid := range qs {
				if len(qn.Replies[sid]) == 0 {
					return false
				}
			}
			return true
		}, 10*time.Second)
		answered, complete := 0, 0
		missing := map[string]int{}
		for _, sid := range qs {
			if len(qn.Replies[sid]) == 0 {
				continue
			}
			answered++
			qr := qn.Replies[sid][0].GetQueryReply()
			if qr != nil && len(qr.Missing) == 0 && len(qr.Offers) == len(s.scenario.names) {
				complete++
			}
			if qr != nil {
				for _, m := range qr.Missing {
					missing[m.Name+" ("+m.Why+")"]++
				}
			}
		}
		queries = fmt.Sprintf("queries at %s every 1ms meanwhile: %d sent, %d answered, %d complete (all %d managers)", qat, len(qs), answered, complete, len(s.scenario.names))
		for _, k := range slices.Sorted(maps.Keys(missing)) {
			queries += fmt.Sprintf(", %d partial missing %s", missing[k], k)
		}
		queries += "\n"
	}
	if !req.All {
		status := "ok"
		if !rep.Ok {
			status = "failed: " + rep.Code.String()
		}
		return fmt.Sprintf("%s (%s, after %s)\n%s", rep.Name, status, took, strings.TrimRight(rep.Output, "\n")+"\n") + queries
	}
	partials := 0
	for _, e := range nd.Replies[sid] {
		if ar := e.GetAdminReply(); ar != nil && ar.Partial {
			partials++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d answer(s) after %s, %d progress message(s)\n", len(rep.Replies), took, partials)
	rs := slices.Clone(rep.Replies)
	slices.SortFunc(rs, func(a, b *wire.AdminReply) int { return strings.Compare(a.Name, b.Name) })
	for _, r := range rs {
		status := "ok"
		if !r.Ok {
			status = "failed: " + r.Code.String()
		}
		fmt.Fprintf(&b, "%s (%s): %s\n", r.Name, status, strings.TrimSpace(strings.SplitN(r.Output, "\n", 2)[0]))
	}
	for _, m := range rep.Missing {
		fmt.Fprintf(&b, "missing: %s (%s)\n", m.Name, m.Why)
	}
	return b.String()
}

// settle runs in 10 ms steps until the shape is settled and unchanged for
// quiet (twice the default failure timeout), within limit.
func (s *failoverScenario) settle(limit time.Duration) string {
	const step, quiet = 10 * time.Millisecond, 7 * time.Second
	start := s.n.Now()
	var last string
	var since time.Time
	for s.n.Now().Sub(start) < limit+quiet {
		sh := s.n.Shape()
		str := sh.String()
		if str != last || !sh.Settled() {
			last, since = str, s.n.Now()
		}
		if sh.Settled() && s.n.Now().Sub(since) >= quiet {
			return fmt.Sprintf("settled %s after the last event\n%s", since.Sub(s.mark), str)
		}
		s.n.RunFor(step)
	}
	return fmt.Sprintf("not settled within %s\n%s", limit, s.n.Shape())
}

func mustDur(t *testing.T, v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestFailoverScenarios(t *testing.T) { runFailoverScenarios(t, "testdata/failover") }

func TestAdminScenarios(t *testing.T) { runFailoverScenarios(t, "testdata/admin") }

// runFailoverScenarios runs the datadriven files in dir with every command
// of the failover, reservation and query scenarios.
func runFailoverScenarios(t *testing.T, dir string) {
	datadriven.Walk(t, dir, func(t *testing.T, path string) {
		s := &failoverScenario{reserveScenario: &reserveScenario{scenario: &scenario{t: t}, labels: map[string]string{}}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			s.t = t
			if out, ok := s.cmd(d); ok {
				return out
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
