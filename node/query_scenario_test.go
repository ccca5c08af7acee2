package node_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/wire"
)

// scenario is a grid on the simulated network, driven by datadriven files
// in testdata/query/.
type scenario struct {
	t      *testing.T
	n      *memnet.Net
	names  map[string]string  // peer → name
	edges  [][2]string        // child, superior
	silent map[string]bool    // managers whose messages are all dropped
	cut    map[[2]string]bool // links (peer pairs) whose messages are dropped
	trace  []string
}

func (s *scenario) name(peer string) string {
	if n, ok := s.names[peer]; ok {
		return n
	}
	return peer
}

// grid builds and starts managers from lines of the form
//
//	NAME [sup=NAME] [cpus=N] [mem=SIZE] [free=SIZE] [util=F] [net=MBPS] [attr.K=V]... [| policy EXPR]
func (s *scenario) grid(d *datadriven.TestData) string {
	s.n = newNet(1)
	s.names = map[string]string{}
	s.edges = nil
	s.silent = map[string]bool{}
	s.cut = map[[2]string]bool{}
	s.n.Drop = func(from, to string, env *wire.Envelope) bool {
		return s.silent[from] || s.silent[to] || s.cut[[2]string{from, to}] || s.cut[[2]string{to, from}]
	}
	s.n.Trace = func(at time.Time, from string, dst *memnet.Node, env *wire.Envelope) {
		to := dst.Peer
		if line := traceLine(env); line != "" {
			s.trace = append(s.trace, fmt.Sprintf("%s → %s  %s", s.name(from), s.name(to), line))
		}
	}
	var order []string
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		line, policy, _ := strings.Cut(line, "| policy ")
		f := strings.Fields(line)
		name := f[0]
		cfg := config.Default()
		cfg.Name = name
		cfg.Policy = strings.TrimSpace(policy)
		cfg.Attributes = map[string]any{}
		hv := node.HostValues{CPUs: 1, Mem: 1 << 30, MemAvail: 1 << 30, CPUUtil: 0.1, Hostname: name + ".example", OS: "linux", Arch: "amd64"}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			switch {
			case k == "sup":
				cfg.Superiors = append(cfg.Superiors, peerAddrs(v))
				s.edges = append(s.edges, [2]string{name, v})
			case k == "fallback":
				for _, f := range strings.Split(v, ",") {
					cfg.FallbackSuperiors = append(cfg.FallbackSuperiors, peerAddrs(f))
				}
			case k == "admins":
				cfg.Admins = strings.Split(v, ",")
			case k == "plugins":
				cfg.PluginsDir = v
			case k == "prefer":
				cfg.PreferConfiguredSuperior = true
			case k == "settle":
				cfg.FailoverSettle, _ = time.ParseDuration(v)
			case k == "cpus":
				hv.CPUs, _ = strconv.Atoi(v)
			case k == "mem":
				hv.Mem = size(s.t, v)
				hv.MemAvail = hv.Mem
			case k == "free":
				hv.MemAvail = size(s.t, v)
			case k == "util":
				hv.CPUUtil, _ = strconv.ParseFloat(v, 64)
			case k == "net":
				hv.NetMbps, _ = strconv.ParseFloat(v, 64)
			case k == "hold":
				cfg.Reservations.HoldTimeout, _ = time.ParseDuration(v)
			case k == "lease":
				cfg.Reservations.DefaultLease, _ = time.ParseDuration(v)
			case strings.HasPrefix(k, "token."):
				if cfg.Tokens == nil {
					cfg.Tokens = map[string]int64{}
				}
				cfg.Tokens[k[6:]], _ = strconv.ParseInt(v, 10, 64)
			case strings.HasPrefix(k, "access."):
				if cfg.Access == nil {
					cfg.Access = map[string][]string{}
				}
				cfg.Access[k[7:]] = strings.Split(v, ",")
			case strings.HasPrefix(k, "attr."):
				if i, err := strconv.ParseInt(v, 10, 64); err == nil {
					cfg.Attributes[k[5:]] = i
				} else {
					cfg.Attributes[k[5:]] = v
				}
			default:
				d.Fatalf(s.t, "unknown grid key %q", k)
			}
		}
		if err := cfg.Validate(); err != nil {
			d.Fatalf(s.t, "%s: %v", name, err)
		}
		nd := s.n.Add(pid(name), cfg)
		nd.Host = &hv
		s.names[pid(name)] = name
		order = append(order, name)
	}
	for _, name := range order {
		s.n.Start(pid(name))
	}
	up := func() bool {
		for _, e := range s.edges {
			if relState(s.n, e[0], e[1]) != "superior:up" || relState(s.n, e[1], e[0]) != "inferior:up" {
				return false
			}
		}
		return true
	}
	if !s.n.RunUntil(up, time.Minute) {
		d.Fatalf(s.t, "grid did not form:\n%s", dump(s.n))
	}
	s.n.RunFor(3 * time.Second) // round trips settle
	return fmt.Sprintf("%d managers, %d relations up", len(order), len(s.edges))
}

func peerAddrs(name string) peeraddr.PeerAddrs {
	return memnet.PeerAddrs(name)
}

func size(t *testing.T, v string) uint64 {
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			f, err := strconv.ParseFloat(n, 64)
			if err != nil {
				t.Fatal(err)
			}
			return uint64(f * float64(u.mult))
		}
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// traceLine describes a query message for the trace ("" for others).
func traceLine(env *wire.Envelope) string {
	switch b := env.Body.(type) {
	case *wire.Envelope_QueryRequest:
		q := b.QueryRequest
		dir := strings.ToLower(strings.TrimPrefix(q.Direction.String(), "DIRECTION_"))
		if dir == "up" {
			return fmt.Sprintf("query up (want %d, up %d)", q.Want, q.Up)
		}
		return fmt.Sprintf("query %s (down %d)", dir, q.Down)
	case *wire.Envelope_QueryReply:
		return replyLine(b.QueryReply)
	}
	return ""
}

func replyLine(r *wire.QueryReply) string {
	s := fmt.Sprintf("reply (offers %d, matched %d, visited %d", len(r.Offers), r.Matched, r.Visited)
	if len(r.Missing) > 0 {
		s += fmt.Sprintf(", missing %d", len(r.Missing))
	}
	return s + ")"
}

// query runs one query from a client at a manager and prints the message
// trace, the answer and how long it took.
func (s *scenario) query(d *datadriven.TestData) string {
	var at string
	d.ScanArgs(s.t, "at", &at)
	req := &wire.QueryRequest{Requirement: strings.TrimSpace(d.Input), Down: 255, Up: 255, Want: 1, Limit: 10, BudgetMs: 5000}
	scanU32 := func(key string, dst *uint32) {
		if d.HasArg(key) {
			var v int
			d.ScanArgs(s.t, key, &v)
			*dst = uint32(v)
		}
	}
	scanU32("down", &req.Down)
	scanU32("up", &req.Up)
	scanU32("want", &req.Want)
	scanU32("limit", &req.Limit)
	scanU32("budget", &req.BudgetMs)
	if d.HasArg("rank") {
		d.ScanArgs(s.t, "rank", &req.Rank)
	}
	if d.HasArg("as") {
		d.ScanArgs(s.t, "as", &req.User)
	}
	if d.HasArg("cpus") {
		d.ScanArgs(s.t, "cpus", &req.Cpus)
	}
	req.Trace = d.HasArg("path")
	req.Locate = d.HasArg("locate")
	req.BeginUnixMs = beginArg(s, d)
	if d.HasArg("duration") {
		var v string
		d.ScanArgs(s.t, "duration", &v)
		dd, err := time.ParseDuration(v)
		if err != nil {
			d.Fatalf(s.t, "duration: %v", err)
		}
		req.DurationMs = uint64(dd / time.Millisecond)
	}
	req.Earliest = d.HasArg("earliest")
	s.trace = nil
	start := s.n.Now()
	rep := s.n.Ask(pid(at), &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: req}}, 10*time.Second)
	took := s.n.Now().Sub(start)
	var b strings.Builder
	if rep == nil {
		return "no answer within 10s"
	}
	if e := rep.GetError(); e != nil {
		return fmt.Sprintf("error %s:\n%s", e.Code, e.Message)
	}
	qr := rep.GetQueryReply()
	if !d.HasArg("quiet") {
		fmt.Fprintf(&b, "client → %s  query\n", at)
		for _, l := range s.trace {
			b.WriteString(l + "\n")
		}
		fmt.Fprintf(&b, "%s → client  %s\n", at, replyLine(qr))
	}
	fmt.Fprintf(&b, "answered after %v\n", took.Round(time.Millisecond))
	for i, o := range qr.Offers {
		fmt.Fprintf(&b, "%d. %s cpus=%d/%d mem_free=%d", i+1, o.Name, o.CpusFree, o.Cpus, o.MemFree)
		if req.Rank != "" {
			if o.Ranked {
				fmt.Fprintf(&b, " rank=%g", o.Rank)
			} else {
				b.WriteString(" rank=undefined")
			}
		}
		for _, a := range o.Matched { // sorted by key (Program.Refs)
			fmt.Fprintf(&b, " %s=%s", a.Key, a.Value)
		}
		if o.Peer != pid(o.Name) || len(o.Addrs) == 0 {
			fmt.Fprintf(&b, " (peer %s addrs %v)", o.Peer, o.Addrs)
		}
		for _, sp := range o.Starts {
			fmt.Fprintf(&b, " starts [+%v, +%v]", time.UnixMilli(sp.FromUnixMs).Sub(start).Round(time.Second), time.UnixMilli(sp.ToUnixMs).Sub(start).Round(time.Second))
		}
		b.WriteString("\n")
	}
	if e := qr.Earliest; e != nil {
		if e.Found {
			fmt.Fprintf(&b, "earliest: +%v on %s\n", time.UnixMilli(e.BeginUnixMs).Sub(start).Round(time.Second), strings.Join(e.Managers, ", "))
		} else {
			b.WriteString("earliest: none\n")
		}
	}
	if len(qr.Offers) == 0 {
		b.WriteString("no offers\n")
	}
	for _, m := range qr.Missing {
		fmt.Fprintf(&b, "missing: %s (%s)\n", m.Name, m.Why)
	}
	if req.Trace {
		var path []string
		for _, v := range qr.Visits {
			dir := strings.ToLower(strings.TrimPrefix(v.Direction.String(), "DIRECTION_"))
			p := v.Name
			if v.AskedBy != "" {
				p += fmt.Sprintf(" (%s from %s)", dir, v.AskedBy)
			}
			path = append(path, p)
		}
		fmt.Fprintf(&b, "path: %s\n", strings.Join(path, ", "))
	}
	return b.String()
}

// common runs the commands both scenario kinds share: grid, query,
// silence, heal, kill, run. ok is false for any other command.
func (s *scenario) common(d *datadriven.TestData) (out string, ok bool) {
	switch d.Cmd {
	case "grid":
		return s.grid(d), true
	case "query":
		return s.query(d), true
	case "silence":
		for _, a := range d.CmdArgs {
			s.silent[pid(a.Key)] = true
		}
		return "ok", true
	case "heal":
		s.silent = map[string]bool{}
		return "ok", true
	case "kill":
		for _, a := range d.CmdArgs {
			s.n.Kill(pid(a.Key))
		}
		return "ok", true
	case "run":
		var dur string
		d.ScanArgs(s.t, "for", &dur)
		dd, err := time.ParseDuration(dur)
		if err != nil {
			d.Fatalf(s.t, "%v", err)
		}
		s.n.RunFor(dd)
		return "ok", true
	}
	return "", false
}

func TestQueryScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/query", func(t *testing.T, path string) {
		s := &scenario{t: t}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			s.t = t
			if out, ok := s.common(d); ok {
				return out
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}
