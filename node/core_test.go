package node_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// patent is the six-manager tree of the patent figure: child → superior.
var patent = [][2]string{
	{"gm152", ""},
	{"gm154", "gm152"},
	{"gm156", "gm152"},
	{"gm160", "gm154"},
	{"gm162", "gm154"},
	{"gm164", "gm156"},
}

func pid(name string) string { return memnet.PeerID(name) }

// oneManager validates cfg and runs it alone as peer on a new simulated
// network (seed), started and settled for 100 ms.
func oneManager(t testing.TB, peer string, cfg config.Config, seed uint64) *memnet.Net {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n := newNet(seed)
	n.Add(peer, cfg)
	n.Start(peer)
	n.RunFor(100 * time.Millisecond)
	return n
}

func testConfig(t testing.TB, name string, superiors ...string) config.Config {
	cfg := config.Default()
	cfg.Name = name
	for _, s := range superiors {
		cfg.Superiors = append(cfg.Superiors, memnet.PeerAddrs(s))
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func patentNet(t testing.TB, seed uint64) *memnet.Net {
	n := newNet(seed)
	for _, e := range patent {
		if e[1] == "" {
			n.Add(pid(e[0]), testConfig(t, e[0]))
		} else {
			n.Add(pid(e[0]), testConfig(t, e[0], e[1]))
		}
	}
	return n
}

// relState is how manager a sees its relation with b ("" if none).
func relState(n *memnet.Net, a, b string) string {
	nd := n.Node(pid(a))
	if nd.Core == nil {
		return ""
	}
	r := nd.Core.Relations().Get(pid(b))
	if r == nil {
		return ""
	}
	return r.Role.String() + ":" + r.State.String()
}

// formed reports whether every edge of the patent tree is up on both sides.
func formed(n *memnet.Net) bool {
	for _, e := range patent {
		if e[1] == "" {
			continue
		}
		if relState(n, e[0], e[1]) != "superior:up" || relState(n, e[1], e[0]) != "inferior:up" {
			return false
		}
	}
	return true
}

func TestTreeFormsInAnyStartOrder(t *testing.T) {
	for seed := uint64(1); seed <= 25; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			n := patentNet(t, seed)
			// Start the managers in a random order, a random 0–3 s apart.
			order := n.Rand().Perm(len(patent))
			var names []string
			for _, i := range order {
				name := patent[i][0]
				names = append(names, name)
				n.Start(pid(name))
				n.RunFor(time.Duration(n.Rand().Int64N(int64(3 * time.Second))))
			}
			if !n.RunUntil(func() bool { return formed(n) }, time.Minute) {
				t.Fatalf("start order %v: tree not formed after a minute:\n%s", names, dump(n))
			}
			// And it stays formed: no spurious suspicion over a minute.
			n.RunFor(time.Minute)
			if !formed(n) {
				t.Fatalf("start order %v: tree fell apart:\n%s", names, dump(n))
			}
			assertAncestors(t, n)
		})
	}
}

// assertAncestors checks that every manager learned its full chain.
func assertAncestors(t *testing.T, n *memnet.Net) {
	t.Helper()
	want := map[string]string{
		"gm152": "", "gm154": "gm152", "gm156": "gm152",
		"gm160": "gm154,gm152", "gm162": "gm154,gm152", "gm164": "gm156,gm152",
	}
	for name, w := range want {
		var got []string
		for _, a := range n.Node(pid(name)).Core.Relations().Ancestors() {
			got = append(got, a.Name)
		}
		if g := strings.Join(got, ","); g != w {
			t.Errorf("%s ancestors = %q, want %q", name, g, w)
		}
	}
}

func TestSuperiorStartedLast(t *testing.T) {
	n := patentNet(t, 7)
	for _, e := range patent[1:] {
		n.Start(pid(e[0]))
	}
	// gm152 stays away for 20 s: gm154 and gm156 keep retrying it with
	// backoff, while their own inferiors join them.
	n.RunFor(20 * time.Second)
	r := n.Node(pid("gm154")).Core.Relations().Get(pid("gm152"))
	if r.State.Live() || r.Attempts < 3 {
		t.Fatalf("gm154 → gm152 before gm152 started: state %s, attempts %d", r.State, r.Attempts)
	}
	if relState(n, "gm154", "gm160") != "inferior:up" {
		t.Fatalf("gm160 did not join gm154 while gm152 was away: %s", relState(n, "gm154", "gm160"))
	}
	// Backoff is capped (30 s default) and jittered ±20%, so the tree forms
	// within one capped delay of the root starting.
	n.Start(pid("gm152"))
	start := n.Now()
	if !n.RunUntil(func() bool { return formed(n) }, 40*time.Second) {
		t.Fatalf("tree not formed 40 s after the root started:\n%s", dump(n))
	}
	t.Logf("formed %v after the root started", n.Now().Sub(start))
	n.RunFor(5 * time.Second)
	assertAncestors(t, n)
}

func TestCycleRefused(t *testing.T) {
	n := patentNet(t, 3)
	for _, e := range patent {
		n.Start(pid(e[0]))
	}
	if !n.RunUntil(func() bool { return formed(n) }, time.Minute) {
		t.Fatalf("tree not formed:\n%s", dump(n))
	}
	n.RunFor(5 * time.Second)
	// The root takes gm160, its grandchild, as a superior: gm160 knows
	// gm152 is its ancestor and refuses, saying why.
	n.Do(pid("gm152"), func(c *node.Core, now time.Time) {
		if err := c.AddSuperior(now, memnet.PeerAddrs("gm160")); err != nil {
			t.Fatal(err)
		}
	})
	n.RunFor(30 * time.Second)
	r := n.Node(pid("gm152")).Core.Relations().Get(pid("gm160"))
	if r == nil || r.State.Live() {
		t.Fatalf("gm152 → gm160 should not be live: %+v", r)
	}
	if !strings.Contains(r.LastError, "refused (cycle)") || !strings.Contains(r.LastError, "ancestor") {
		t.Fatalf("gm152's last error should explain the cycle, got %q", r.LastError)
	}
	if got := relState(n, "gm160", "gm152"); got != "" {
		t.Fatalf("gm160 holds gm152 as %q", got)
	}
	if r.Attempts < 2 {
		t.Errorf("gm152 should keep retrying with backoff (the tree may change); attempts %d", r.Attempts)
	}
	if !formed(n) {
		t.Fatalf("tree disturbed:\n%s", dump(n))
	}
	t.Logf("gm152 → gm160: %s", r.LastError)
}

// hasCycle reports whether the live superior relations form a cycle.
func hasCycle(n *memnet.Net) []string {
	up := map[string][]string{}
	for _, nd := range n.Nodes() {
		if nd.Core == nil || !nd.Up() {
			continue
		}
		for _, r := range nd.Core.Relations().Superiors() {
			if r.State.Live() {
				up[nd.Peer] = append(up[nd.Peer], r.Peer)
			}
		}
	}
	var path []string
	onPath := map[string]bool{}
	done := map[string]bool{}
	var visit func(p string) bool
	visit = func(p string) bool {
		if onPath[p] {
			path = append(path, p)
			return true
		}
		if done[p] {
			return false
		}
		onPath[p] = true
		path = append(path, p)
		for _, q := range up[p] {
			if visit(q) {
				return true
			}
		}
		path = path[:len(path)-1]
		onPath[p] = false
		done[p] = true
		return false
	}
	for _, nd := range n.Nodes() {
		if visit(nd.Peer) {
			return path
		}
	}
	return nil
}

// Three managers whose properties files name a cycle (a under b under c
// under a), started in random orders: a cycle never stands at the end of
// any step, and the grid settles with two of the three relations.
func TestConfiguredCycleNeverForms(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		n := newNet(seed)
		n.Add(pid("a"), testConfig(t, "a", "b"))
		n.Add(pid("b"), testConfig(t, "b", "c"))
		n.Add(pid("c"), testConfig(t, "c", "a"))
		for _, i := range n.Rand().Perm(3) {
			n.Start(pid(string(rune('a' + i))))
			n.RunFor(time.Duration(n.Rand().Int64N(int64(time.Second))))
		}
		var maxCycle time.Duration
		var cycleSince time.Time
		for i := 0; i < 1200; i++ {
			n.RunFor(100 * time.Millisecond)
			if c := hasCycle(n); c != nil {
				if cycleSince.IsZero() {
					cycleSince = n.Now()
				}
				maxCycle = max(maxCycle, n.Now().Sub(cycleSince))
			} else {
				cycleSince = time.Time{}
			}
		}
		// Managers that accept each other at the same instant can form a
		// cycle until the next heartbeat carries the chains; it must be
		// broken within one heartbeat interval plus a hop.
		if maxCycle > 1100*time.Millisecond {
			t.Fatalf("seed %d: a cycle stood for %v", seed, maxCycle)
		}
		if c := hasCycle(n); c != nil {
			t.Fatalf("seed %d: cycle at the end: %v", seed, c)
		}
		live := 0
		for _, x := range []string{"a", "b", "c"} {
			for _, r := range n.Node(pid(x)).Core.Relations().Superiors() {
				if r.State.Live() {
					live++
				}
			}
		}
		if live != 2 {
			t.Fatalf("seed %d: %d live superior relations at the end, want 2:\n%s", seed, live, dump(n))
		}
	}
}

// Two managers configured as each other's superior, started together: at
// most one relation between them survives, and never a cycle.
func TestTwoCycleRaceResolves(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		n := newNet(seed)
		n.Add(pid("a"), testConfig(t, "a", "b"))
		n.Add(pid("b"), testConfig(t, "b", "a"))
		n.Start(pid("a"))
		n.Start(pid("b"))
		for i := 0; i < 120; i++ {
			n.RunFor(time.Second)
			ab, ba := relState(n, "a", "b"), relState(n, "b", "a")
			if ab == "superior:up" && ba == "superior:up" {
				t.Fatalf("seed %d at %v: a and b are each other's superior", seed, n.Now().Sub(memnet.Epoch))
			}
		}
		ab, ba := relState(n, "a", "b"), relState(n, "b", "a")
		if !(ab == "superior:up" && ba == "inferior:up") && !(ba == "superior:up" && ab == "inferior:up") {
			t.Fatalf("seed %d: after two minutes a→b %q, b→a %q; want one stable relation", seed, ab, ba)
		}
	}
}

func TestHeartbeatStates(t *testing.T) {
	n := patentNet(t, 11)
	for _, e := range patent {
		n.Start(pid(e[0]))
	}
	if !n.RunUntil(func() bool { return formed(n) }, time.Minute) {
		t.Fatal("tree not formed")
	}
	n.RunFor(3 * time.Second)
	r := n.Node(pid("gm154")).Core.Relations().Get(pid("gm160"))
	if rtt := r.RTT; rtt < 2*time.Millisecond || rtt > 3*time.Millisecond {
		t.Errorf("gm154 → gm160 RTT %v, want about 2 × the 1ms latency", rtt)
	}

	// Drop everything gm160 sends to gm154.
	silent := true
	n.Drop = func(from, to string, env *wire.Envelope) bool {
		return silent && from == pid("gm160") && to == pid("gm154")
	}
	cut := r.LastHeard() // silence counts from the last message gm154 heard
	var seen []string
	var at []time.Duration
	for i := 0; i < 80; i++ { // 8 s in 100 ms steps
		n.RunFor(100 * time.Millisecond)
		s := relState(n, "gm154", "gm160")
		if len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
			at = append(at, n.Now().Sub(cut))
		}
	}
	// Interval 1 s, misses 3: suspect after 1.5 s of silence, down after
	// 3.5 s (one tick of slack); gm160 then redials (its hellos are
	// dropped too) and gm154 does not count it as up again.
	want := []string{"inferior:up", "inferior:suspect", "inferior:down"}
	if strings.Join(seen, " ") != strings.Join(want, " ") {
		t.Fatalf("gm154 saw gm160 go %v (at %v), want %v", seen, at, want)
	}
	if at[1] < 1500*time.Millisecond || at[1] > 1700*time.Millisecond {
		t.Errorf("suspect after %v of silence, want 1.5–1.7 s", at[1])
	}
	if at[2] < 3500*time.Millisecond || at[2] > 3700*time.Millisecond {
		t.Errorf("down after %v of silence, want 3.5–3.7 s", at[2])
	}
	// The other relations stayed up throughout.
	if relState(n, "gm154", "gm162") != "inferior:up" {
		t.Errorf("collateral: gm154→gm162 %s", relState(n, "gm154", "gm162"))
	}
	// gm160 never heard gm154 again either (its hellos were dropped), so
	// it declared gm154 failed and its grandparent gm152 took it.
	silent = false
	if !n.RunUntil(func() bool {
		return relState(n, "gm160", "gm152") == "superior:up" && relState(n, "gm152", "gm160") == "inferior:up" &&
			relState(n, "gm160", "gm154") == ""
	}, 40*time.Second) {
		t.Fatalf("not healed:\n%s", dump(n))
	}
}

func TestLateLoopDoesNotBlamePeers(t *testing.T) {
	n := patentNet(t, 5)
	for _, e := range patent {
		n.Start(pid(e[0]))
	}
	if !n.RunUntil(func() bool { return formed(n) }, time.Minute) {
		t.Fatal("tree not formed")
	}
	// gm154's own loop stalls for 10 s (CPU starvation): it ticks nothing
	// and reads nothing. Model it by calling its Core directly: one Tick
	// 10 s after the last, preceded by the messages that queued up.
	c := n.Node(pid("gm154")).Core
	now := n.Now()
	c.Tick(now)
	c.Ready()
	c.Tick(now.Add(10 * time.Second))
	for _, r := range c.Relations().All() {
		if r.State != relations.Up {
			t.Errorf("after its own 10 s stall gm154 marks %s %s", r.DisplayName(), r.State)
		}
	}
}

func TestTreeRequest(t *testing.T) {
	n := patentNet(t, 9)
	for _, e := range patent {
		n.Start(pid(e[0]))
	}
	if !n.RunUntil(func() bool { return formed(n) }, time.Minute) {
		t.Fatal("tree not formed")
	}
	n.RunFor(3 * time.Second)
	rep := n.Ask(pid("gm152"), &wire.Envelope{Body: &wire.Envelope_TreeRequest{TreeRequest: &wire.TreeRequest{BudgetMs: 1000}}}, 2*time.Second)
	if rep.GetTreeReply() == nil {
		t.Fatalf("no tree reply: %v", rep)
	}
	got := renderTree(rep.GetTreeReply().Root)
	want := "gm152(gm154(gm160,gm162),gm156(gm164))"
	if got != want {
		t.Fatalf("tree = %s, want %s", got, want)
	}
	// gm162 goes silent: the tree comes back in time, marking it.
	n.Kill(pid("gm162"))
	n.Drop = nil
	rep = n.Ask(pid("gm152"), &wire.Envelope{Body: &wire.Envelope_TreeRequest{TreeRequest: &wire.TreeRequest{BudgetMs: 1000}}}, 2*time.Second)
	if got := renderTree(rep.GetTreeReply().Root); got != "gm152(gm154(gm160,gm162[down]),gm156(gm164))" {
		t.Fatalf("tree with gm162 killed = %s", got)
	}
	// A partitioned gm164 (silent, not reset) times out within the budget.
	n.Drop = func(from, to string, env *wire.Envelope) bool { return from == pid("gm164") }
	start := n.Now()
	rep = n.Ask(pid("gm152"), &wire.Envelope{Body: &wire.Envelope_TreeRequest{TreeRequest: &wire.TreeRequest{BudgetMs: 1000}}}, 2*time.Second)
	if rep == nil || n.Now().Sub(start) > time.Second {
		t.Fatalf("tree answer took %v", n.Now().Sub(start))
	}
	if got := renderTree(rep.GetTreeReply().Root); got != "gm152(gm154(gm160,gm162[down]),gm156(gm164[timeout]))" {
		t.Fatalf("tree with gm164 silent = %s", got)
	}
	// Depth limit.
	rep = n.Ask(pid("gm152"), &wire.Envelope{Body: &wire.Envelope_TreeRequest{TreeRequest: &wire.TreeRequest{BudgetMs: 1000, MaxDepth: 1}}}, 2*time.Second)
	if got := renderTree(rep.GetTreeReply().Root); got != "gm152(gm154[depth limit],gm156[depth limit])" {
		t.Fatalf("depth-1 tree = %s", got)
	}
}

func TestPingOverRelation(t *testing.T) {
	n := patentNet(t, 2)
	for _, e := range patent {
		n.Start(pid(e[0]))
	}
	if !n.RunUntil(func() bool { return formed(n) }, time.Minute) {
		t.Fatal("tree not formed")
	}
	rep := n.Ask(pid("gm154"), &wire.Envelope{Body: &wire.Envelope_PingRequest{PingRequest: &wire.PingRequest{Peer: "gm160"}}}, time.Second)
	pr := rep.GetPingReply()
	if pr == nil || pr.Name != "gm160" || pr.RttUs != 2000 {
		t.Fatalf("ping gm160 via gm154: %v", rep)
	}
	rep = n.Ask(pid("gm154"), &wire.Envelope{Body: &wire.Envelope_PingRequest{PingRequest: &wire.PingRequest{Peer: "gm164"}}}, time.Second)
	if rep.GetError().GetCode() != wire.ErrorReply_CODE_NOT_FOUND {
		t.Fatalf("ping of a non-relation: %v", rep)
	}
}

// Malformed or out-of-place messages from a relation are refused, the
// channel is reset, and the relation heals; the others never notice.
func TestBadMessagesDropped(t *testing.T) {
	n := patentNet(t, 4)
	for _, e := range patent {
		n.Start(pid(e[0]))
	}
	if !n.RunUntil(func() bool { return formed(n) }, time.Minute) {
		t.Fatal("tree not formed")
	}
	bad := []*wire.Envelope{
		{},
		{Body: &wire.Envelope_Hello{Hello: &wire.Hello{ProtocolVersion: 1, Name: strings.Repeat("x", 100), Role: wire.Role_ROLE_INFERIOR}}},
		{Body: &wire.Envelope_Heartbeat{Heartbeat: &wire.Heartbeat{Ancestors: []*wire.Ancestor{{Peer: "", Depth: 1}}}}},
		{Body: &wire.Envelope_Welcome{Welcome: &wire.Welcome{Name: "late"}}},
		{Body: &wire.Envelope_Hello{Hello: &wire.Hello{ProtocolVersion: 1, Name: "again", Role: wire.Role_ROLE_INFERIOR}}},
	}
	for i, env := range bad {
		n.RunFor(2 * time.Second)
		if err := n.Inject(pid("gm160"), pid("gm154"), env); err == nil {
			t.Errorf("bad message %d accepted", i)
		}
		if s := relState(n, "gm154", "gm160"); s != "inferior:down" {
			t.Errorf("after bad message %d gm154 sees gm160 %s, want down (channel reset)", i, s)
		}
		if relState(n, "gm154", "gm162") != "inferior:up" || relState(n, "gm154", "gm152") != "superior:up" {
			t.Fatalf("bad message %d disturbed other relations:\n%s", i, dump(n))
		}
		if !n.RunUntil(func() bool { return formed(n) }, 10*time.Second) {
			t.Fatalf("not healed after bad message %d:\n%s", i, dump(n))
		}
	}
	if err := n.Inject("P-stranger", pid("gm154"), &wire.Envelope{Body: &wire.Envelope_Heartbeat{Heartbeat: &wire.Heartbeat{}}}); err == nil {
		t.Error("heartbeat from a stranger accepted")
	}
	// A client may not send mesh messages; it gets an error reply.
	rep := n.Ask(pid("gm154"), &wire.Envelope{Id: 7, Body: &wire.Envelope_Heartbeat{Heartbeat: &wire.Heartbeat{}}}, time.Second)
	if rep.GetError().GetCode() != wire.ErrorReply_CODE_BAD_REQUEST || rep.ReplyTo != 7 {
		t.Errorf("client heartbeat: %v", rep)
	}
	rep = n.Ask(pid("gm154"), &wire.Envelope{Id: 8}, time.Second)
	if rep.GetError().GetCode() != wire.ErrorReply_CODE_BAD_REQUEST {
		t.Errorf("client empty envelope: %v", rep)
	}
}

func renderTree(n *wire.TreeNode) string {
	s := n.Name
	if n.Incomplete != "" {
		s += "[" + n.Incomplete + "]"
	}
	if len(n.Children) > 0 {
		var cs []string
		for _, c := range n.Children {
			cs = append(cs, renderTree(c))
		}
		s += "(" + strings.Join(cs, ",") + ")"
	}
	return s
}

func dump(n *memnet.Net) string {
	var b strings.Builder
	for _, nd := range n.Nodes() {
		fmt.Fprintf(&b, "%s up=%v:", nd.Name, nd.Up())
		if nd.Core != nil {
			for _, r := range nd.Core.Relations().All() {
				fmt.Fprintf(&b, " %s:%s:%s(%s)", r.Role, r.DisplayName(), r.State, r.LastError)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// The same seed gives the same run, event for event.
func TestDeterministic(t *testing.T) {
	run := func() string {
		n := patentNet(t, 42)
		var b strings.Builder
		n.Trace = func(at time.Time, from string, dst *memnet.Node, env *wire.Envelope) {
			to := dst.Peer
			fmt.Fprintf(&b, "%v %s>%s %T\n", at.Sub(memnet.Epoch), from, to, env.Body)
		}
		for _, i := range n.Rand().Perm(len(patent)) {
			n.Start(pid(patent[i][0]))
			n.RunFor(time.Duration(n.Rand().Int64N(int64(time.Second))))
		}
		n.RunFor(30 * time.Second)
		return b.String()
	}
	a, b := run(), run()
	if a != b {
		t.Fatal("two runs with seed 42 differ")
	}
	if strings.Count(a, "\n") < 100 {
		t.Fatalf("suspiciously short trace:\n%s", a)
	}
}

// Each kind of bad expression is refused with a clear message, and the
// manager keeps serving queries afterwards.
func TestBadQueriesLeaveManagerServing(t *testing.T) {
	n := patentNet(t, 6)
	for _, e := range patent {
		n.Start(pid(e[0]))
	}
	if !n.RunUntil(func() bool { return formed(n) }, time.Minute) {
		t.Fatal("tree not formed")
	}
	list := "[" + strings.Repeat("1,", 300) + "1]"
	bad := []struct{ req, rank, want string }{
		{"cpus >= ", "", "syntax error"},
		{"cpus + 1", "", "a requirement must be bool"},
		{"cpus >= 1", "name", "a rank must be"},
		{list + ".map(x, " + list + ".map(y, x + y)).size() > 0", "", "costs at least"},
		{"cpus >= 1 || " + strings.Repeat("cpus >= 1 || ", 400) + "true", "", "limit 4096"},
		{"", "", "has no requirement"},
	}
	for _, b := range bad {
		rep := n.Ask(pid("gm154"), &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{
			Requirement: b.req, Rank: b.rank, Down: 255, Up: 255, Want: 1, BudgetMs: 1000}}}, 2*time.Second)
		e := rep.GetError()
		if e.GetCode() != wire.ErrorReply_CODE_BAD_REQUEST || !strings.Contains(e.GetMessage(), b.want) {
			t.Errorf("requirement %.40q rank %q: got %v, want BAD_REQUEST mentioning %q", b.req, b.rank, rep, b.want)
		}
	}
	rep := n.Ask(pid("gm154"), &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{
		Requirement: "cpus >= 0", Down: 255, Up: 255, Want: 100, BudgetMs: 1000}}}, 2*time.Second)
	if got := len(rep.GetQueryReply().GetOffers()); got != 6 {
		t.Fatalf("after bad queries gm154 answered %d offers, want 6: %v", got, rep)
	}
}

// unknownEnvelope is an envelope whose body is oneof field 999, which this
// version does not know: what a newer peer sends after adding a message.
func unknownEnvelope(t *testing.T, id uint64) *wire.Envelope {
	t.Helper()
	var b []byte
	if id != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, id)
	}
	b = protowire.AppendTag(b, 999, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte{0x08, 0x01}) // a body with one varint field
	env := new(wire.Envelope)
	if err := proto.Unmarshal(b, env); err != nil {
		t.Fatal(err)
	}
	if env.Body != nil || env.Id != id {
		t.Fatalf("decoded %v", env)
	}
	return env
}

// A rolling upgrade adds a message to the oneof: managers of this version
// must neither drop the relation (a failover across the grid) nor crash.
// One-way messages are ignored and counted; requests are answered
// UNSUPPORTED. Clients get UNSUPPORTED too, as the .proto promises.
func TestUnknownBodies(t *testing.T) {
	n := patentNet(t, 11)
	for _, e := range patent {
		n.Start(pid(e[0]))
	}
	if !n.RunUntil(func() bool { return formed(n) }, time.Minute) {
		t.Fatal("tree not formed")
	}
	var toGm160 []*wire.Envelope
	n.Trace = func(_ time.Time, from string, dst *memnet.Node, env *wire.Envelope) {
		to := dst.Peer
		if from == pid("gm154") && to == pid("gm160") && env.GetError() != nil {
			toGm160 = append(toGm160, env)
		}
	}
	if err := n.Inject(pid("gm160"), pid("gm154"), unknownEnvelope(t, 0)); err != nil {
		t.Fatalf("one-way unknown message: %v", err)
	}
	if err := n.Inject(pid("gm160"), pid("gm154"), unknownEnvelope(t, 42)); err != nil {
		t.Fatalf("unknown request: %v", err)
	}
	n.RunFor(5 * time.Second)
	if s := relState(n, "gm154", "gm160"); s != "inferior:up" {
		t.Fatalf("after unknown messages gm154 sees gm160 %s, want up:\n%s", s, dump(n))
	}
	if len(toGm160) != 1 || toGm160[0].ReplyTo != 42 || toGm160[0].GetError().GetCode() != wire.ErrorReply_CODE_UNSUPPORTED {
		t.Fatalf("answers to gm160: %v, want one UNSUPPORTED reply to 42", toGm160)
	}
	st := n.Ask(pid("gm154"), &wire.Envelope{Id: 3, Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}}, time.Second)
	if got := st.GetStatusReply().GetUnknownMessages(); got != 2 {
		t.Errorf("status counts %d unknown messages, want 2", got)
	}

	rep := n.Ask(pid("gm154"), unknownEnvelope(t, 9), time.Second)
	if rep.GetError().GetCode() != wire.ErrorReply_CODE_UNSUPPORTED || rep.ReplyTo != 9 {
		t.Errorf("client's unknown request: %v, want UNSUPPORTED to 9", rep)
	}
	// A request with id 0 cannot be matched to its reply: it gets an
	// error with reply_to 0 rather than silence.
	sid := n.Send(pid("gm154"), memnet.Client, &wire.Envelope{Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}})
	n.RunFor(time.Second)
	got := n.Node(pid("gm154")).Replies[sid]
	if len(got) != 1 || got[0].GetError().GetCode() != wire.ErrorReply_CODE_BAD_REQUEST || !strings.Contains(got[0].GetError().GetMessage(), "id 0") {
		t.Errorf("request with id 0: %v, want one BAD_REQUEST", got)
	}
}

// A body that is not a request where it arrives is answered UNSUPPORTED in
// words: a reply sent by a client as a request is called a reply, and the
// client is told what it may send (the message read "status_reply is not
// a request from clients serves"); a client's request sent by a manager is
// called a client's request.
func TestNotARequestWorded(t *testing.T) {
	n := patentNet(t, 14)
	for _, e := range patent {
		n.Start(pid(e[0]))
	}
	if !n.RunUntil(func() bool { return formed(n) }, time.Minute) {
		t.Fatal("tree not formed")
	}
	const mayAsk = ": a client may send tree_request, ping_request, query_request, status_request, resources_request, " +
		"reserve_request, reservation_op, reservations_request, admin_request, app_request, events_request, calendar_request, job_request or private_network_request"
	for _, tc := range []struct {
		env  *wire.Envelope
		want string
	}{
		{&wire.Envelope{Id: 5, Body: &wire.Envelope_StatusReply{StatusReply: &wire.StatusReply{}}},
			"gm154: status_reply is a reply, not a request" + mayAsk},
		{&wire.Envelope{Id: 6, Body: &wire.Envelope_CalendarReply{CalendarReply: &wire.CalendarReply{}}},
			"gm154: calendar_reply is a reply, not a request" + mayAsk},
	} {
		rep := n.Ask(pid("gm154"), tc.env, time.Second)
		if e := rep.GetError(); e.GetCode() != wire.ErrorReply_CODE_UNSUPPORTED || e.GetMessage() != tc.want || rep.ReplyTo != tc.env.Id {
			t.Errorf("client sent %T:\n got %v\nwant UNSUPPORTED to %d: %q", tc.env.Body, rep, tc.env.Id, tc.want)
		}
	}

	var toGm160 []*wire.Envelope
	n.Trace = func(_ time.Time, from string, dst *memnet.Node, env *wire.Envelope) {
		to := dst.Peer
		if from == pid("gm154") && to == pid("gm160") && env.GetError() != nil {
			toGm160 = append(toGm160, env)
		}
	}
	if err := n.Inject(pid("gm160"), pid("gm154"), &wire.Envelope{Id: 7, Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{RequestId: "r"}}}); err == nil {
		t.Error("a reserve_request from a manager was taken")
	}
	if err := n.Inject(pid("gm160"), pid("gm154"), &wire.Envelope{Id: 8, Body: &wire.Envelope_ResourcesReply{ResourcesReply: &wire.ResourcesReply{}}}); err == nil {
		t.Error("a resources_reply with an id from a manager was taken")
	}
	n.RunFor(time.Second)
	want := map[uint64]string{
		7: "gm154: reserve_request is a client's request, not one managers send each other",
		8: "gm154: resources_reply is a reply, not a request",
	}
	if len(toGm160) != len(want) {
		t.Fatalf("answers to gm160: %v, want %d", toGm160, len(want))
	}
	for _, env := range toGm160 {
		if e := env.GetError(); e.GetCode() != wire.ErrorReply_CODE_UNSUPPORTED || e.GetMessage() != want[env.ReplyTo] {
			t.Errorf("answer to gm160's %d: %v, want UNSUPPORTED %q", env.ReplyTo, env, want[env.ReplyTo])
		}
	}
	if s := relState(n, "gm154", "gm160"); s != "inferior:up" {
		t.Errorf("after those gm154 sees gm160 %s, want up", s)
	}
}

// An --all command waiting on an inferior that says goodbye lists it as
// down at once; it used to wait for the deadline and say "timeout",
// because the goodbye path cleaned up queries but not admin floods.
func TestAdminAllInferiorLeaves(t *testing.T) {
	n := patentNet(t, 12)
	for _, e := range patent {
		n.Start(pid(e[0]))
	}
	if !n.RunUntil(func() bool { return formed(n) }, time.Minute) {
		t.Fatal("tree not formed")
	}
	// gm160 never sees the command, so gm154 waits on it.
	n.Drop = func(from, to string, env *wire.Envelope) bool {
		return to == pid("gm160") && env.GetAdminRequest() != nil
	}
	start := n.Now()
	sid := n.Request(pid("gm152"), &wire.Envelope{Body: &wire.Envelope_AdminRequest{AdminRequest: &wire.AdminRequest{
		Command: "relations", All: true, BudgetMs: 5000,
	}}})
	n.RunFor(50 * time.Millisecond)
	n.Stop(pid("gm160"), "maintenance")
	var final *wire.AdminReply
	n.RunUntil(func() bool {
		for _, r := range n.Node(pid("gm152")).Replies[sid] {
			if ar := r.GetAdminReply(); ar != nil && !ar.Partial {
				final = ar
				return true
			}
		}
		return false
	}, 10*time.Second)
	if final == nil {
		t.Fatal("no final answer")
	}
	var missing []string
	for _, m := range final.Missing {
		missing = append(missing, m.Name+":"+m.Why)
	}
	if len(missing) != 1 || missing[0] != "gm160:down" {
		t.Errorf("missing %v, want [gm160:down]", missing)
	}
	if took := n.Now().Sub(start); took > time.Second {
		t.Errorf("answered after %v: it waited for the deadline", took)
	}
}

// Answered operations must not count against the limit of requests in
// flight: a Core ticked only when something is due saw 4,096 quick pings
// (answered, waiting for a tick to be cleared) as an overload.
func TestManyQuickPingsNotOverloaded(t *testing.T) {
	n := patentNet(t, 13)
	for _, e := range patent {
		n.Start(pid(e[0]))
	}
	if !n.RunUntil(func() bool { return formed(n) }, time.Minute) {
		t.Fatal("tree not formed")
	}
	n.Latency = time.Microsecond // thousands of pings between two ticks
	for i := range 5000 {
		rep := n.Ask(pid("gm154"), &wire.Envelope{Body: &wire.Envelope_PingRequest{PingRequest: &wire.PingRequest{Peer: "gm160"}}}, time.Second)
		if rep.GetPingReply() == nil {
			t.Fatalf("ping %d: %v", i, rep)
		}
	}
}
