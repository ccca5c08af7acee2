package main

// The multi-host failover test: eight real `gridmgr run` processes, each in
// its own Linux network namespace joined to a bridge (one "host" per
// manager), are killed with SIGKILL, restarted and cut off from the network
// at random, and the grid is watched through the CLI until it has healed.
//
// It needs root and iproute2, and skips itself otherwise:
//
//	sudo go test -race -run TestNetns -v ./cmd/gridmgr/
//
// Environment:
//
//	GRIDMGR_NETNS_EVENTS  number of random events (default 24)
//	GRIDMGR_NETNS_SEED    seed of the event plan (default: the clock; always logged)
//	GRIDMGR_NETNS_REPORT  file that the reconvergence summary is appended to
//	GRIDMGR_BURN          a duration: run TestNetnsCPUBurn for that long
//
// Only namespaces named gmt<pid>x<n>-… are created, and every address used
// lives inside them; the root namespace's network is never touched. A
// namespace left behind by a run that crashed is removed by the next run
// once its pid is gone.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

const (
	ntN               = 8           // managers m0..m7
	ntSubnet          = "10.213.0." // m<i> is 10.213.0.(i+1)/24 on its eth0
	ntPort            = 4001        // every manager listens on its own address, this port
	ntPoll            = 100 * time.Millisecond
	ntConvergeTimeout = 60 * time.Second
	ntCLITimeout      = 2 * time.Second // --timeout of every CLI call
	ntDefaultEvents   = 24              // with GRIDMGR_LONG=1
	ntQuickEvents     = ntMinEvents     // without: the shortest plan
	ntMinEvents       = 9               // the shortest plan meeting the minimum counts below
	ntMaxDown         = 2               // managers killed at once, at most
)

// ntParent is the configured tree: m0 the root; m1, m2 under m0; m3, m4
// under m1; m5 under m2; m6 under m3; m7 under m4. Depth 3, so that killing
// m1 or m3 leaves orphans whose grandparent is alive.
var ntParent = [ntN]int{-1, 0, 0, 1, 1, 2, 3, 4}

func ntName(i int) string { return "m" + strconv.Itoa(i) }

// Log messages counted by TestNetnsCPUBurn (slog text format).
var (
	ntMsgSuperiorFailed = []string{`msg="superior failed"`}
	ntMsgReparented     = []string{`msg=reparented`, `msg="reparented"`}
	ntMsgRelationDown   = []string{`msg="relation down"`}
)

// ---------------------------------------------------------------------------
// The convergence predicate (pure, unit-tested without root).

// ntWant is what a converged grid looks like.
type ntWant struct {
	root  string            // the one root of the main component (m0)
	live  map[string]bool   // L: managers that run and whose link is up
	names map[string]string // peer id → name, for every manager of the grid
}

// name resolves a tree node or relation, by its peer id, to a manager
// name: "" if the peer is not one of the grid's managers.
func (w ntWant) name(peer string) string { return w.names[peer] }

func (w ntWant) liveSorted() []string {
	var l []string
	for n, ok := range w.live {
		if ok {
			l = append(l, n)
		}
	}
	slices.Sort(l)
	return l
}

// ntTreeConverged checks the tree answered by the root: every manager of L
// exactly once as a relation that is up, with no subtree left out, and no
// manager outside L up. Entries that are not up are what a superior still
// remembers of an inferior it lost (the core forgets them after a while):
// they are not part of the live tree and are ignored, whoever they name —
// a dead or cut-off manager, or a manager of L that left that superior
// while it was cut off and is now up elsewhere (ntStaleEntries lists
// those). It returns "" when the tree is converged, else why not.
func ntTreeConverged(w ntWant, tree *wire.TreeNode) string {
	if tree == nil {
		return "no tree from " + w.root
	}
	if n := w.name(tree.Peer); n != w.root {
		return fmt.Sprintf("the tree was answered by %q (%s), not %s", tree.Name, tree.Peer, w.root)
	}
	if tree.Incomplete != "" {
		return fmt.Sprintf("the tree from %s is incomplete: %s", w.root, tree.Incomplete)
	}
	seen := map[string]int{w.root: 1}
	notUp := map[string]string{} // a manager of L → where it shows, not up
	why := ""
	var walk func(parent string, n *wire.TreeNode)
	walk = func(parent string, n *wire.TreeNode) {
		for _, ch := range n.Children {
			if why != "" {
				return
			}
			name := w.name(ch.Peer)
			switch {
			case name == "":
				why = fmt.Sprintf("unknown manager %q (%s) under %s", ch.Name, ch.Peer, parent)
			case ch.State != wire.RelationState_RELATION_STATE_UP:
				if w.live[name] && notUp[name] == "" {
					notUp[name] = fmt.Sprintf("%s is %s under %s", name, stateName(ch.State), parent)
				}
				continue // a remembered relation: not part of the live tree
			case !w.live[name]:
				why = fmt.Sprintf("%s is dead or cut off, but %s still has it up", name, parent)
			case ch.Incomplete != "":
				why = fmt.Sprintf("the subtree of %s (under %s) is incomplete: %s", name, parent, ch.Incomplete)
			default:
				seen[name]++
				if seen[name] > 1 {
					why = fmt.Sprintf("%s appears more than once in the tree (again under %s)", name, parent)
				}
			}
			if why == "" {
				walk(name, ch)
			}
		}
	}
	walk(w.root, tree)
	if why != "" {
		return why
	}
	for _, n := range w.liveSorted() {
		if seen[n] == 0 {
			if s := notUp[n]; s != "" {
				return s
			}
			return fmt.Sprintf("%s is missing from the tree", n)
		}
	}
	return ""
}

// ntStaleEntries lists the entries of managers of L that are not up, in a
// tree where they are also up elsewhere: "m5 down under m2".
func ntStaleEntries(w ntWant, tree *wire.TreeNode) []string {
	var out []string
	var walk func(parent string, n *wire.TreeNode)
	walk = func(parent string, n *wire.TreeNode) {
		for _, ch := range n.GetChildren() {
			name := w.name(ch.Peer)
			if ch.State != wire.RelationState_RELATION_STATE_UP {
				if w.live[name] {
					out = append(out, fmt.Sprintf("%s %s under %s", name, stateName(ch.State), parent))
				}
				continue
			}
			walk(name, ch)
		}
	}
	walk(w.root, tree)
	return out
}

// ntStatusConverged checks each manager of L but the root: at least one
// superior up, and every superior it holds up is in L.
func ntStatusConverged(w ntWant, status map[string]*wire.StatusReply) string {
	for _, n := range w.liveSorted() {
		if n == w.root {
			continue
		}
		st := status[n]
		if st == nil {
			return "no status from " + n
		}
		up := 0
		for _, r := range st.Relations {
			if r.Role != wire.Role_ROLE_SUPERIOR || r.State != wire.RelationState_RELATION_STATE_UP {
				continue
			}
			sup := w.name(r.Peer)
			if !w.live[sup] {
				if sup == "" {
					sup = fmt.Sprintf("%q (%s)", r.Name, r.Peer)
				}
				return fmt.Sprintf("%s holds superior %s up, but it is dead or cut off", n, sup)
			}
			up++
		}
		if up == 0 {
			return fmt.Sprintf("%s has no superior up", n)
		}
	}
	return ""
}

// ntConverged is the whole predicate: "" when converged, else why not.
func ntConverged(w ntWant, tree *wire.TreeNode, status map[string]*wire.StatusReply) string {
	if why := ntTreeConverged(w, tree); why != "" {
		return why
	}
	return ntStatusConverged(w, status)
}

// ---------------------------------------------------------------------------
// The event plan (pure, unit-tested without root).

type ntKind int

const (
	ntKill ntKind = iota
	ntRestart
	ntLinkDown
	ntLinkUp
)

// ntStat names the reconvergence time recorded for an event: kills and
// link cuts of a manager that had inferiors measure until its orphans have
// reattached; of a leaf, until its superior has dropped it.
func ntStat(k ntKind, orphans int) string {
	switch {
	case k == ntKill && orphans > 0:
		return "kill→reattach"
	case k == ntKill:
		return "kill leaf→dropped"
	case k == ntLinkDown && orphans > 0:
		return "link down→reattach"
	case k == ntLinkDown:
		return "link down leaf→dropped"
	case k == ntRestart:
		return "restart→rejoin"
	}
	return "link up→rejoin"
}

type ntEvent struct {
	kind   ntKind
	target int // manager index, never 0
}

// ntPlan draws n events: the first kills m1 (the patent's case: a middle
// manager with inferiors whose grandparent is alive); then kills (middle
// managers m1..m4 preferred, at most ntMaxDown down at once), restarts of
// killed managers, and link down/up of one live manager at a time. Plans
// without at least 3 kills, 2 restarts and 2 link down/up pairs are drawn
// again.
func ntPlan(rng *rand.Rand, n int) ([]ntEvent, error) {
	if n < ntMinEvents {
		return nil, fmt.Errorf("%d events are too few: the plan needs at least %d", n, ntMinEvents)
	}
	for range 10000 {
		p := ntDrawPlan(rng, n)
		if ntCheckPlan(p) == "" {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no plan of %d events met the minimum counts", n)
}

func ntDrawPlan(rng *rand.Rand, n int) []ntEvent {
	var killed [ntN]bool
	isolated := -1
	down := 1
	killed[1] = true
	plan := []ntEvent{{ntKill, 1}}
	for len(plan) < n {
		var cands, middle, dead []int
		for i := 1; i < ntN; i++ {
			switch {
			case killed[i]:
				dead = append(dead, i)
			case i != isolated:
				cands = append(cands, i)
				if i <= 4 {
					middle = append(middle, i)
				}
			}
		}
		var kinds []ntKind
		if down < ntMaxDown && len(cands) > 0 {
			kinds = append(kinds, ntKill)
		}
		if len(dead) > 0 {
			kinds = append(kinds, ntRestart)
		}
		if isolated < 0 && len(cands) > 0 {
			kinds = append(kinds, ntLinkDown)
		}
		if isolated >= 0 {
			kinds = append(kinds, ntLinkUp)
		}
		ev := ntEvent{kind: kinds[rng.IntN(len(kinds))]}
		switch ev.kind {
		case ntKill:
			from := cands
			if len(middle) > 0 && rng.IntN(4) != 0 {
				from = middle
			}
			ev.target = from[rng.IntN(len(from))]
			killed[ev.target] = true
			down++
		case ntRestart:
			ev.target = dead[rng.IntN(len(dead))]
			killed[ev.target] = false
			down--
		case ntLinkDown:
			ev.target = cands[rng.IntN(len(cands))]
			isolated = ev.target
		case ntLinkUp:
			ev.target = isolated
			isolated = -1
		}
		plan = append(plan, ev)
	}
	return plan
}

// ntCheckPlan replays a plan: "" if every event is possible when it comes
// and the minimum counts are met, else why not.
func ntCheckPlan(p []ntEvent) string {
	if len(p) == 0 || p[0] != (ntEvent{ntKill, 1}) {
		return "the first event must kill m1"
	}
	var killed [ntN]bool
	isolated, down := -1, 0
	var count [4]int
	for k, ev := range p {
		i := ev.target
		if i <= 0 || i >= ntN {
			return fmt.Sprintf("event %d: target %d is not a non-root manager", k+1, i)
		}
		switch ev.kind {
		case ntKill:
			if killed[i] || i == isolated || down >= ntMaxDown {
				return fmt.Sprintf("event %d: cannot kill %s", k+1, ntName(i))
			}
			killed[i] = true
			down++
		case ntRestart:
			if !killed[i] {
				return fmt.Sprintf("event %d: %s is not down", k+1, ntName(i))
			}
			killed[i] = false
			down--
		case ntLinkDown:
			if killed[i] || isolated >= 0 {
				return fmt.Sprintf("event %d: cannot cut %s off", k+1, ntName(i))
			}
			isolated = i
		case ntLinkUp:
			if isolated != i {
				return fmt.Sprintf("event %d: %s is not cut off", k+1, ntName(i))
			}
			isolated = -1
		}
		count[ev.kind]++
	}
	if count[ntKill] < 3 || count[ntRestart] < 2 || count[ntLinkDown] < 2 || count[ntLinkUp] < 2 {
		return fmt.Sprintf("too few events: %d kills, %d restarts, %d link downs, %d link ups",
			count[ntKill], count[ntRestart], count[ntLinkDown], count[ntLinkUp])
	}
	return ""
}

// ---------------------------------------------------------------------------
// Reconvergence statistics.

type ntStats struct {
	order []string
	d     map[string][]time.Duration
}

func (s *ntStats) add(kind string, d time.Duration) {
	if s.d == nil {
		s.d = map[string][]time.Duration{}
	}
	if _, ok := s.d[kind]; !ok {
		s.order = append(s.order, kind)
	}
	s.d[kind] = append(s.d[kind], d)
}

// ntPercentile is the nearest-rank percentile of sorted durations.
func ntPercentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ntSec(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// lines are the summary: `kill→reattach: n=7 p50=3.60s p99=4.40s max=4.40s`.
func (s *ntStats) lines() []string {
	var out []string
	for _, k := range s.order {
		d := slices.Clone(s.d[k])
		slices.Sort(d)
		out = append(out, fmt.Sprintf("%s: n=%d p50=%s p99=%s max=%s", k, len(d),
			ntSec(ntPercentile(d, 0.50)), ntSec(ntPercentile(d, 0.99)), ntSec(d[len(d)-1])))
	}
	return out
}

// ntReport appends lines to the file named by GRIDMGR_NETNS_REPORT, if set.
func ntReport(t *testing.T, lines []string) {
	path := os.Getenv("GRIDMGR_NETNS_REPORT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Errorf("GRIDMGR_NETNS_REPORT: %v", err)
		return
	}
	defer f.Close()
	for _, l := range lines {
		fmt.Fprintln(f, l)
	}
}

// ---------------------------------------------------------------------------
// The grid of namespaces and processes.

type ntMgr struct {
	i        int
	name     string
	ns       string // its network namespace
	veth     string // the hub end of its veth pair, in the hub namespace
	ip       string
	conf     string // properties file
	logPath  string
	peer     string
	maddr    string // full multiaddr with /p2p/
	cmd      *exec.Cmd
	done     chan struct{} // closed when cmd has exited
	starts   int
	killed   bool
	isolated bool
}

type ntGrid struct {
	t       *testing.T
	bin     string
	dir     string
	prefix  string
	hub     string
	env     []string
	m       [ntN]*ntMgr
	nsMade  []string // namespaces this grid created, in order
	burners []*exec.Cmd
	dumped  bool
	last    map[string]*wire.StatusReply // statuses of the last converged observation
	stale   []string                     // its stale entries (ntStaleEntries)
}

var ntSeq atomic.Int32

// ntRequire skips unless the test can build namespaces.
func ntRequire(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds eight network namespaces and runs eight managers")
	}
	if runtime.GOOS != "linux" {
		t.Skip("network namespaces are Linux only")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces: run as root (sudo go test -run TestNetns ./cmd/gridmgr/)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("iproute2's `ip` is not installed")
	}
}

// ntIP runs `ip args…`.
func ntIP(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

var ntNSRE = regexp.MustCompile(`^gmt(\d+)x\d+-(hub|m\d+)$`)

// ntOwnNamespaces lists namespaces with this test's naming scheme.
func ntOwnNamespaces() map[string]int {
	out, _ := ntIP("netns", "list")
	found := map[string]int{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if m := ntNSRE.FindStringSubmatch(f[0]); m != nil {
			pid, _ := strconv.Atoi(m[1])
			found[f[0]] = pid
		}
	}
	return found
}

func ntPidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// ntRemoveStale deletes namespaces left by earlier runs whose process is gone.
func ntRemoveStale(t *testing.T) {
	for ns, pid := range ntOwnNamespaces() {
		if pid == os.Getpid() || ntPidAlive(pid) {
			continue
		}
		if err := ntDeleteNS(ns); err != nil {
			t.Logf("stale namespace %s: %v", ns, err)
		} else {
			t.Logf("removed stale namespace %s (its test process %d is gone)", ns, pid)
		}
	}
}

// ntDeleteNS kills every process still in namespace ns, then deletes it.
func ntDeleteNS(ns string) error {
	for range 100 {
		out, _ := ntIP("netns", "pids", ns)
		pids := strings.Fields(out)
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond) // polling: until the processes are gone
	}
	_, err := ntIP("netns", "del", ns)
	return err
}

// ntNewGrid builds the hub namespace with a bridge and one namespace per
// manager joined to it by a veth pair, builds the binary, and writes an
// identity and a properties file per manager. Nothing is started yet.
func ntNewGrid(t *testing.T) *ntGrid {
	ntRequire(t)
	ntRemoveStale(t)
	g := &ntGrid{t: t, dir: t.TempDir()}
	g.prefix = fmt.Sprintf("gmt%dx%d", os.Getpid(), ntSeq.Add(1))
	g.hub = g.prefix + "-hub"
	t.Cleanup(g.cleanup)

	if _, err := ntIP("netns", "add", g.hub); err != nil {
		t.Skipf("the kernel refused a network namespace: %v", err)
	}
	g.nsMade = append(g.nsMade, g.hub)
	if _, err := ntIP("-n", g.hub, "link", "add", "br0", "type", "bridge"); err != nil {
		t.Skipf("the kernel refused a bridge: %v", err)
	}
	g.mustIP("-n", g.hub, "link", "set", "lo", "up")
	g.mustIP("-n", g.hub, "link", "set", "br0", "up")
	for i := range ntN {
		m := &ntMgr{i: i, name: ntName(i), ns: fmt.Sprintf("%s-m%d", g.prefix, i), veth: fmt.Sprintf("v%d", i),
			ip: ntSubnet + strconv.Itoa(i+1)}
		g.m[i] = m
		if _, err := ntIP("netns", "add", m.ns); err != nil {
			t.Skipf("the kernel refused a network namespace: %v", err)
		}
		g.nsMade = append(g.nsMade, m.ns)
		// Created in the hub namespace with its peer placed straight into
		// the manager's: nothing appears in the root namespace.
		if _, err := ntIP("-n", g.hub, "link", "add", m.veth, "type", "veth", "peer", "name", "eth0", "netns", m.ns); err != nil {
			t.Skipf("the kernel refused a veth pair: %v", err)
		}
		g.mustIP("-n", g.hub, "link", "set", m.veth, "master", "br0")
		g.mustIP("-n", g.hub, "link", "set", m.veth, "up")
		g.mustIP("-n", m.ns, "link", "set", "lo", "up")
		g.mustIP("-n", m.ns, "addr", "add", m.ip+"/24", "dev", "eth0")
		g.mustIP("-n", m.ns, "link", "set", "eth0", "up")
	}

	g.bin = buildBinary(t)
	clientKey := filepath.Join(g.dir, "client.key")
	g.env = append(os.Environ(), "GRIDMGR_CLIENT_KEY="+clientKey)
	g.local("keygen", "-o", clientKey)
	for i, m := range g.m { // superiors have smaller indexes: their addresses are known
		mdir := filepath.Join(g.dir, m.name)
		if err := os.MkdirAll(mdir, 0o700); err != nil {
			t.Fatal(err)
		}
		key := filepath.Join(mdir, "identity.key")
		kid := ntPeerLine(t, g.local("keygen", "-o", key))
		sup := ""
		if p := ntParent[i]; p >= 0 {
			sup = fmt.Sprintf("%q", g.m[p].maddr)
		}
		m.conf = filepath.Join(mdir, m.name+".toml")
		m.logPath = filepath.Join(mdir, m.name+".log")
		props := fmt.Sprintf(`# TestNetnsFailover: %s in namespace %s
name = %q
data_dir = %q
identity = %q
listen = ["/ip4/%s/tcp/%d"]
superiors = [%s]
log_level = "info"

[heartbeat]
interval = "1s"
misses = 3

[dial]
retry_initial = "200ms"
retry_max = "2s"
`, m.name, m.ns, m.name, filepath.Join(mdir, "data"), key, m.ip, ntPort, sup)
		if err := os.WriteFile(m.conf, []byte(props), 0o644); err != nil {
			t.Fatal(err)
		}
		out := g.local("id", "-c", m.conf)
		m.peer = ntPeerLine(t, out)
		if m.peer != kid {
			t.Fatalf("%s: `gridmgr id` says peer id %s, keygen said %s", m.name, m.peer, kid)
		}
		want := fmt.Sprintf("/ip4/%s/tcp/%d/p2p/%s", m.ip, ntPort, m.peer)
		for line := range strings.Lines(out) {
			if strings.TrimSpace(line) == want {
				m.maddr = want
			}
		}
		if m.maddr == "" {
			t.Fatalf("`gridmgr id -c %s` does not list %s:\n%s", m.conf, want, out)
		}
	}
	return g
}

// ntPeerLine finds "peer id  X" in keygen or id output.
func ntPeerLine(t *testing.T, out string) string {
	t.Helper()
	for line := range strings.Lines(out) {
		if rest, ok := strings.CutPrefix(line, "peer id"); ok {
			if id := strings.TrimSpace(rest); id != "" {
				return id
			}
		}
	}
	t.Fatalf("no peer id in:\n%s", out)
	return ""
}

func (g *ntGrid) mustIP(args ...string) {
	g.t.Helper()
	if _, err := ntIP(args...); err != nil {
		g.t.Fatal(err)
	}
}

// local runs the binary in the test's own namespace (no network).
func (g *ntGrid) local(args ...string) string {
	g.t.Helper()
	cmd := exec.Command(g.bin, args...)
	cmd.Env = g.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		g.t.Fatalf("gridmgr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// cli runs a client command inside m's namespace against m, with a short
// --timeout, and returns its stdout.
func (g *ntGrid) cli(m *ntMgr, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ntCLITimeout+3*time.Second)
	defer cancel()
	full := append([]string{"netns", "exec", m.ns, g.bin}, args...)
	full = append(full, "-n", m.maddr, "--timeout", ntCLITimeout.String())
	cmd := exec.CommandContext(ctx, "ip", full...)
	cmd.Env = g.env
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", m.name, args[0], err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.String(), nil
}

// start runs `gridmgr run -c CONF` in m's namespace, logging to its log file.
func (g *ntGrid) start(m *ntMgr) {
	g.t.Helper()
	f, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		g.t.Fatal(err)
	}
	defer f.Close() // the child has its own descriptor
	m.starts++
	fmt.Fprintf(f, "=== TestNetns: start %d of %s at %s ===\n", m.starts, m.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command("ip", "netns", "exec", m.ns, g.bin, "run", "-c", m.conf)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = g.env
	// ip netns exec execs gridmgr in place: the pid is the manager's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		g.t.Fatalf("start %s: %v", m.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	m.cmd, m.done, m.killed = cmd, done, false
}

// kill sends SIGKILL to m and reaps it.
func (g *ntGrid) kill(m *ntMgr) {
	g.t.Helper()
	select {
	case <-m.done:
		g.fail("%s had exited before it was killed", m.name)
	default:
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		g.fail("%s did not die within 10s of SIGKILL", m.name)
	}
	m.killed = true
}

// setLink brings the hub end of m's veth pair down or up.
func (g *ntGrid) setLink(m *ntMgr, up bool) {
	g.t.Helper()
	state := "down"
	if up {
		state = "up"
	}
	g.mustIP("-n", g.hub, "link", "set", m.veth, state)
	m.isolated = !up
}

// checkAlive fails if a manager that should be running has exited.
func (g *ntGrid) checkAlive() {
	g.t.Helper()
	for _, m := range g.m {
		if m.cmd == nil || m.killed {
			continue
		}
		select {
		case <-m.done:
			g.fail("%s exited by itself: %v", m.name, m.cmd.ProcessState)
		default:
		}
	}
}

func (g *ntGrid) want() ntWant {
	w := ntWant{root: g.m[0].name, live: map[string]bool{}, names: map[string]string{}}
	for _, m := range g.m {
		w.names[m.peer] = m.name
		if m.cmd != nil && !m.killed && !m.isolated {
			w.live[m.name] = true
		}
	}
	return w
}

// observe asks m0 for the tree and, only when the tree is converged, each
// other manager of L for its status, all at once.
func (g *ntGrid) observe(w ntWant) (why string, tree *wire.TreeNode, status map[string]*wire.StatusReply) {
	out, err := g.cli(g.m[0], "tree", "--json")
	if err != nil {
		return "tree: " + err.Error(), nil, nil
	}
	tree = &wire.TreeNode{}
	if err := readPlainJSON([]byte(out), tree); err != nil {
		return fmt.Sprintf("tree --json: %v: %s", err, out), nil, nil
	}
	if why := ntTreeConverged(w, tree); why != "" {
		return why, tree, nil
	}
	status = map[string]*wire.StatusReply{}
	errs := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range g.m {
		if m.i == 0 || !w.live[m.name] {
			continue
		}
		wg.Go(func() {
			out, err := g.cli(m, "status", "--json")
			st := &wire.StatusReply{}
			if err == nil {
				err = readPlainJSON([]byte(out), st)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[m.name] = err.Error()
				return
			}
			status[m.name] = st
		})
	}
	wg.Wait()
	why = ntStatusConverged(w, status)
	if why != "" && len(errs) > 0 {
		for _, n := range slices.Sorted(maps.Keys(errs)) {
			why += "; " + errs[n]
		}
	}
	return why, tree, status
}

// waitConverged polls until the predicate holds and returns the time since
// the event at `since` (to the end of the poll that saw it hold).
func (g *ntGrid) waitConverged(since time.Time, what string) time.Duration {
	g.t.Helper()
	w := g.want()
	for {
		pollStart := time.Now()
		g.checkAlive()
		why, tree, status := g.observe(w)
		if why == "" {
			g.last, g.stale = status, ntStaleEntries(w, tree)
			return time.Since(since)
		}
		if time.Since(since) > ntConvergeTimeout {
			g.fail("not converged %s after %s: %s", ntSec(time.Since(since)), what, why)
		}
		if d := ntPoll - time.Since(pollStart); d > 0 {
			time.Sleep(d) // polling real processes
		}
	}
}

// inferiors counts the inferiors m had up at the last convergence.
func (g *ntGrid) inferiors(m *ntMgr) int {
	n := 0
	for _, r := range g.last[m.name].GetRelations() {
		if r.Role == wire.Role_ROLE_INFERIOR && r.State == wire.RelationState_RELATION_STATE_UP {
			n++
		}
	}
	return n
}

func (g *ntGrid) role(m *ntMgr) string {
	switch n := g.inferiors(m); n {
	case 0:
		return "leaf"
	case 1:
		return "middle, 1 inferior"
	default:
		return fmt.Sprintf("middle, %d inferiors", n)
	}
}

// fail dumps every manager's status and log tail and stops the test.
func (g *ntGrid) fail(format string, args ...any) {
	g.t.Helper()
	g.t.Fatalf("%s\n%s", fmt.Sprintf(format, args...), g.dump())
}

func (g *ntGrid) dump() string {
	g.dumped = true
	var b strings.Builder
	if m0 := g.m[0]; m0 != nil && m0.cmd != nil && !m0.killed {
		out, err := g.cli(m0, "tree")
		fmt.Fprintf(&b, "=== tree from m0 ===\n%s", out)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
	}
	for _, m := range g.m {
		if m == nil {
			continue
		}
		state := "running"
		switch {
		case m.cmd == nil:
			state = "never started"
		case m.killed:
			state = "killed"
		case m.isolated:
			state = "running, link down"
		}
		fmt.Fprintf(&b, "=== %s (%s, %s) ===\n", m.name, m.ip, state)
		if m.cmd != nil && !m.killed {
			out, err := g.cli(m, "status")
			b.WriteString(out)
			if err != nil {
				fmt.Fprintf(&b, "(%v)\n", err)
			}
		}
		fmt.Fprintf(&b, "--- %s: last lines of %s ---\n%s", m.name, m.logPath, ntTail(m.logPath, 40))
	}
	return b.String()
}

// ntTail returns the last n lines of a file.
func ntTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)\n", err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// cleanup kills every process and deletes every namespace of the grid,
// whatever state the test left it in.
func (g *ntGrid) cleanup() {
	if g.t.Failed() && !g.dumped {
		var b strings.Builder
		for _, m := range g.m {
			if m != nil && m.logPath != "" {
				fmt.Fprintf(&b, "--- %s: last lines of %s ---\n%s", m.name, m.logPath, ntTail(m.logPath, 40))
			}
		}
		g.t.Log("logs:\n" + b.String())
	}
	g.stopBurners()
	for _, m := range g.m {
		if m == nil || m.cmd == nil {
			continue
		}
		_ = m.cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-m.done:
		case <-time.After(10 * time.Second):
			g.t.Errorf("cleanup: %s (pid %d) did not die", m.name, m.cmd.Process.Pid)
		}
	}
	for _, ns := range slices.Backward(g.nsMade) {
		if err := ntDeleteNS(ns); err != nil {
			g.t.Errorf("cleanup: %v", err)
		}
	}
	for ns := range ntOwnNamespaces() {
		if strings.HasPrefix(ns, g.prefix+"-") {
			g.t.Errorf("cleanup: namespace %s is still there", ns)
		}
	}
}

func (g *ntGrid) stopBurners() {
	for _, c := range g.burners {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		_ = c.Wait()
	}
	g.burners = nil
}

// startAll starts every manager, in the given order.
func (g *ntGrid) startAll(order []int) {
	for _, i := range order {
		g.start(g.m[i])
	}
}

// ntEnvInt reads an integer environment variable.
func ntEnvInt(t *testing.T, name string, def int64) int64 {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return v
}

// ---------------------------------------------------------------------------
// The tests.

// TestNetnsFailover: eight managers on eight "hosts" (network namespaces on
// one bridge) in a tree of depth 3 face a random sequence of kill -9,
// restarts and link cuts; after each event the grid must heal — orphans
// reattach to a live ancestor, restarted and reconnected managers rejoin —
// within a minute, and the time it took is reported per kind of event.
func TestNetnsFailover(t *testing.T) {
	ntRequire(t)
	seed := ntEnvInt(t, "GRIDMGR_NETNS_SEED", time.Now().UnixNano())
	events := ntQuickEvents // the README's test command: the mechanism, briefly
	if os.Getenv("GRIDMGR_LONG") != "" {
		events = ntDefaultEvents // CI: the full chaos run
	}
	n := int(ntEnvInt(t, "GRIDMGR_NETNS_EVENTS", int64(events)))
	t.Logf("seed %d (rerun with GRIDMGR_NETNS_SEED=%d), %d events", seed, seed, n)
	if n < 20 {
		t.Logf("note: %d events is below the 20 of a full run (GRIDMGR_LONG=1 runs %d)", n, ntDefaultEvents)
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6e65746e73))
	plan, err := ntPlan(rng, n)
	if err != nil {
		t.Fatal(err)
	}

	g := ntNewGrid(t)
	var stats ntStats
	done, outcome := 0, "failed"
	defer func() { // also after a failure: what was measured so far
		summary := stats.lines()
		head := fmt.Sprintf("TestNetnsFailover %s seed=%d events=%d/%d %s",
			time.Now().Format(time.RFC3339), seed, done, len(plan), outcome)
		t.Logf("summary (seed %d, %d of %d events, %s):\n  %s", seed, done, len(plan), outcome, strings.Join(summary, "\n  "))
		ntReport(t, append([]string{head}, summary...))
	}()
	order := rng.Perm(ntN)
	var names []string
	for _, i := range order {
		names = append(names, ntName(i))
	}
	at := time.Now()
	g.startAll(order)
	d := g.waitConverged(at, "formation")
	stats.add("formation", d)
	t.Logf("formation: started %s → converged in %s", strings.Join(names, " "), ntSec(d))

	for k, ev := range plan {
		if dl, ok := t.Deadline(); ok && time.Until(dl) < 2*ntConvergeTimeout+30*time.Second {
			t.Logf("stopping after %d of %d events: the test deadline is near", k, len(plan))
			break
		}
		m := g.m[ev.target]
		orphans := g.inferiors(m)
		var label string
		at := time.Now()
		switch ev.kind {
		case ntKill:
			label = fmt.Sprintf("kill -9 %s (%s)", m.name, g.role(m))
			at = time.Now()
			g.kill(m)
		case ntRestart:
			label = fmt.Sprintf("restart %s", m.name)
			at = time.Now()
			g.start(m)
		case ntLinkDown:
			label = fmt.Sprintf("link down %s (%s)", m.name, g.role(m))
			at = time.Now()
			g.setLink(m, false)
		case ntLinkUp:
			label = fmt.Sprintf("link up %s", m.name)
			at = time.Now()
			g.setLink(m, true)
		}
		d := g.waitConverged(at, fmt.Sprintf("event %d/%d (%s)", k+1, len(plan), label))
		stats.add(ntStat(ev.kind, orphans), d)
		note := ""
		if len(g.stale) > 0 {
			note = " (still listed as not up: " + strings.Join(g.stale, ", ") + ")"
		}
		t.Logf("event %d/%d: %s → reconverged in %s%s", k+1, len(plan), label, ntSec(d), note)
		done++
	}

	// Restore everything: restart the killed, reconnect the cut off.
	var restored []string
	at = time.Now()
	for _, m := range g.m {
		switch {
		case m.killed:
			g.start(m)
			restored = append(restored, "restart "+m.name)
		case m.isolated:
			g.setLink(m, true)
			restored = append(restored, "link up "+m.name)
		}
	}
	if len(restored) == 0 {
		restored = append(restored, "nothing to restore")
	}
	if live := len(g.want().live); live != ntN {
		t.Fatalf("after restoring, %d managers are live, want %d", live, ntN)
	}
	d = g.waitConverged(at, "the final restore ("+strings.Join(restored, ", ")+")")
	stats.add("restore→rejoin", d)
	t.Logf("final: %s → all %d managers converged in %s", strings.Join(restored, ", "), ntN, ntSec(d))
	outcome = "passed"
	if done < len(plan) {
		outcome = "passed, stopped early at the test deadline"
	}
}

// TestNetnsCPUBurn (only with GRIDMGR_BURN=DURATION): the same grid,
// converged, while every core is saturated by busy loops for that long.
// Heartbeats must not be missed so badly that a manager declares a live
// superior failed: any reparent fails the test; relations that went down
// are reported as false downs.
func TestNetnsCPUBurn(t *testing.T) {
	spec := os.Getenv("GRIDMGR_BURN")
	if spec == "" {
		t.Skip("set GRIDMGR_BURN to a duration (e.g. 10m) to saturate the CPUs under a converged grid")
	}
	burn, err := time.ParseDuration(spec)
	if err != nil || burn <= 0 {
		t.Fatalf("GRIDMGR_BURN=%q is not a positive duration", spec)
	}
	ntRequire(t)
	if dl, ok := t.Deadline(); ok && time.Until(dl) < burn+3*time.Minute {
		t.Fatalf("GRIDMGR_BURN=%s needs a longer test timeout: use -timeout %s", burn, (burn + 5*time.Minute).Round(time.Minute))
	}
	g := ntNewGrid(t)
	order := make([]int, ntN)
	for i := range order {
		order[i] = i
	}
	at := time.Now()
	g.startAll(order)
	t.Logf("formation: converged in %s", ntSec(g.waitConverged(at, "formation")))

	offsets := map[string]int64{}
	for _, m := range g.m {
		if fi, err := os.Stat(m.logPath); err == nil {
			offsets[m.name] = fi.Size()
		}
	}
	nb := runtime.NumCPU() * 2
	for range nb {
		c := exec.Command("sh", "-c", "while :; do :; done")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			t.Fatalf("burner: %v", err)
		}
		g.burners = append(g.burners, c)
	}
	t.Logf("burning: %d busy loops on %d cpus for %s", nb, runtime.NumCPU(), burn)
	start := time.Now()
	end := time.NewTimer(burn)
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
wait:
	for {
		select {
		case <-end.C:
			break wait
		case <-tick.C:
			c := ntCount(g, offsets)
			t.Logf("burn %s of %s: superior failed=%d reparented=%d relation down=%d",
				time.Since(start).Round(time.Second), burn, c.failed, c.reparented, c.down)
			g.checkAlive()
		}
	}
	g.stopBurners()
	t.Logf("burn over; reconverged %s after it", ntSec(g.waitConverged(time.Now(), "the CPU burn")))
	// Stay converged for a few heartbeats: a miss during the burn shows by then.
	last := ""
	for stable := time.Now(); time.Since(stable) < 4*time.Second; {
		pollStart := time.Now()
		g.checkAlive()
		if why, _, _ := g.observe(g.want()); why != "" && why != last {
			t.Logf("after the burn, not converged: %s", why)
			last = why
		}
		if d := ntPoll - time.Since(pollStart); d > 0 {
			time.Sleep(d) // polling real processes
		}
	}

	c := ntCount(g, offsets)
	line := fmt.Sprintf("cpu burn %s (%d busy loops on %d cpus): reparents=%d (superior failed=%d, reparented=%d) false downs=%d",
		burn, nb, runtime.NumCPU(), c.failed+c.reparented, c.failed, c.reparented, c.down)
	if len(c.per) > 0 {
		line += " [" + strings.Join(c.per, " ") + "]"
	}
	t.Log(line)
	ntReport(t, []string{fmt.Sprintf("TestNetnsCPUBurn %s", time.Now().Format(time.RFC3339)), line})
	if c.failed+c.reparented > 0 {
		t.Errorf("false reparents under CPU load:\n%s", strings.Join(c.lines, "\n"))
	}
}

type ntCounts struct {
	failed, reparented, down int
	per                      []string // "m3:down=2" for managers with any
	lines                    []string // the reparent lines
}

// ntCount counts the burn's log messages after the given offsets.
func ntCount(g *ntGrid, offsets map[string]int64) ntCounts {
	var c ntCounts
	has := func(line string, pats []string) bool {
		return slices.ContainsFunc(pats, func(p string) bool { return strings.Contains(line, p) })
	}
	for _, m := range g.m {
		f, err := os.Open(m.logPath)
		if err != nil {
			continue
		}
		if _, err := f.Seek(offsets[m.name], io.SeekStart); err != nil {
			f.Close()
			continue
		}
		var failed, rep, down int
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case has(line, ntMsgSuperiorFailed):
				failed++
				c.lines = append(c.lines, m.name+": "+line)
			case has(line, ntMsgReparented):
				rep++
				c.lines = append(c.lines, m.name+": "+line)
			case has(line, ntMsgRelationDown):
				down++
			}
		}
		f.Close()
		c.failed += failed
		c.reparented += rep
		c.down += down
		if failed+rep+down > 0 {
			c.per = append(c.per, fmt.Sprintf("%s:failed=%d,reparented=%d,down=%d", m.name, failed, rep, down))
		}
	}
	return c
}

// TestNetnsConvergedPredicate checks the convergence predicate on small
// hand-made observations (no root needed).
func TestNetnsConvergedPredicate(t *testing.T) {
	const (
		up      = wire.RelationState_RELATION_STATE_UP
		suspect = wire.RelationState_RELATION_STATE_SUSPECT
		down    = wire.RelationState_RELATION_STATE_DOWN
	)
	node := func(name string, st wire.RelationState, children ...*wire.TreeNode) *wire.TreeNode {
		return &wire.TreeNode{Peer: "P" + name, Name: name, State: st, Children: children}
	}
	sup := func(name string, st wire.RelationState) *wire.RelationInfo {
		return &wire.RelationInfo{Peer: "P" + name, Name: name, Role: wire.Role_ROLE_SUPERIOR, State: st}
	}
	inf := func(name string, st wire.RelationState) *wire.RelationInfo {
		return &wire.RelationInfo{Peer: "P" + name, Name: name, Role: wire.Role_ROLE_INFERIOR, State: st}
	}
	stat := func(rels ...*wire.RelationInfo) *wire.StatusReply { return &wire.StatusReply{Relations: rels} }
	want := func(live ...string) ntWant {
		w := ntWant{root: "m0", live: map[string]bool{}, names: map[string]string{}}
		for _, n := range []string{"m0", "m1", "m2", "m3"} {
			w.names["P"+n] = n
		}
		for _, n := range live {
			w.live[n] = true
		}
		return w
	}
	// The full grid m0 → m1 → m3, m0 → m2.
	full := func() *wire.TreeNode { return node("m0", 0, node("m1", up, node("m3", up)), node("m2", up)) }
	fullStatus := func() map[string]*wire.StatusReply {
		return map[string]*wire.StatusReply{
			"m1": stat(sup("m0", up), inf("m3", up)),
			"m2": stat(sup("m0", up)),
			"m3": stat(sup("m1", up)),
		}
	}
	// m1 killed; m3 adopted by m0; m0 still remembers m1 as down.
	adopted := func() *wire.TreeNode { return node("m0", 0, node("m1", down), node("m2", up), node("m3", up)) }
	adoptedStatus := func() map[string]*wire.StatusReply {
		return map[string]*wire.StatusReply{"m2": stat(sup("m0", up)), "m3": stat(sup("m1", down), sup("m0", up))}
	}
	cases := []struct {
		name   string
		w      ntWant
		tree   *wire.TreeNode
		status map[string]*wire.StatusReply
		want   string // substring of the reason; "" = converged
	}{
		{"formed", want("m0", "m1", "m2", "m3"), full(), fullStatus(), ""},
		{"no tree", want("m0", "m1", "m2", "m3"), nil, fullStatus(), "no tree"},
		{"wrong root", want("m0", "m1", "m2", "m3"), node("m1", 0), fullStatus(), "not m0"},
		{"missing", want("m0", "m1", "m2", "m3"), node("m0", 0, node("m1", up), node("m2", up)), fullStatus(), "m3 is missing"},
		{"suspect", want("m0", "m1", "m2", "m3"), node("m0", 0, node("m1", up, node("m3", suspect)), node("m2", up)), fullStatus(), "m3 is suspect"},
		{"twice", want("m0", "m1", "m2", "m3"), node("m0", 0, node("m1", up, node("m3", up)), node("m2", up), node("m3", up)), fullStatus(), "more than once"},
		{"unknown", want("m0", "m1", "m2", "m3"), node("m0", 0, node("m1", up, node("m3", up)), node("m2", up), node("m9", down)), fullStatus(), "unknown"},
		{"incomplete", want("m0", "m1", "m2", "m3"), func() *wire.TreeNode {
			tr := full()
			tr.Children[0].Incomplete = "timeout"
			return tr
		}(), fullStatus(), "incomplete"},
		{"killed still up", want("m0", "m2", "m3"), full(), nil, "m1 is dead or cut off, but m0 still has it up"},
		{"orphan not adopted", want("m0", "m2", "m3"), node("m0", 0, node("m1", down), node("m2", up)), nil, "m3 is missing"},
		{"adopted, ghost down", want("m0", "m2", "m3"), adopted(), adoptedStatus(), ""},
		{"no status", want("m0", "m2", "m3"), adopted(), map[string]*wire.StatusReply{"m2": stat(sup("m0", up))}, "no status from m3"},
		{"no superior up", want("m0", "m2", "m3"), adopted(),
			map[string]*wire.StatusReply{"m2": stat(sup("m0", up)), "m3": stat(sup("m1", down), sup("m0", suspect))}, "m3 has no superior up"},
		{"dead superior up", want("m0", "m2", "m3"), adopted(),
			map[string]*wire.StatusReply{"m2": stat(sup("m0", up)), "m3": stat(sup("m1", up), sup("m0", up))}, "m3 holds superior m1 up"},
		{"stale entry of a live manager", want("m0", "m2", "m3"),
			node("m0", 0, node("m1", down), node("m2", up, node("m3", down)), node("m3", up)), adoptedStatus(), ""},
		{"only a stale entry", want("m0", "m2", "m3"),
			node("m0", 0, node("m1", down), node("m2", up, node("m3", down))), adoptedStatus(), "m3 is down under m2"},
		{"isolated leaf ignored", want("m0", "m1", "m3"), node("m0", 0, node("m1", up, node("m3", up)), node("m2", down)),
			map[string]*wire.StatusReply{"m1": stat(sup("m0", up)), "m3": stat(sup("m1", up))}, ""},
	}
	stale := ntStaleEntries(want("m0", "m2", "m3"), node("m0", 0, node("m1", down), node("m2", up, node("m3", down)), node("m3", up)))
	if !slices.Equal(stale, []string{"m3 down under m2"}) {
		t.Errorf("stale entries: %q", stale)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := ntConverged(c.w, c.tree, c.status)
			switch {
			case c.want == "" && got != "":
				t.Errorf("not converged: %s", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Errorf("got %q, want a reason containing %q", got, c.want)
			}
		})
	}
}

// TestNetnsPlan checks that event plans are possible and meet the minimum
// counts, and that the percentiles of the summary are nearest-rank.
func TestNetnsPlan(t *testing.T) {
	for _, n := range []int{ntMinEvents, 20, 24, 60} {
		for seed := range uint64(200) {
			p, err := ntPlan(rand.New(rand.NewPCG(seed, 1)), n)
			if err != nil {
				t.Fatalf("n=%d seed=%d: %v", n, seed, err)
			}
			if len(p) != n {
				t.Fatalf("n=%d seed=%d: %d events", n, seed, len(p))
			}
			if why := ntCheckPlan(p); why != "" {
				t.Fatalf("n=%d seed=%d: %s", n, seed, why)
			}
		}
	}
	if _, err := ntPlan(rand.New(rand.NewPCG(1, 1)), ntMinEvents-1); err == nil {
		t.Errorf("a plan of %d events was accepted", ntMinEvents-1)
	}
	a, b := ntPlan(rand.New(rand.NewPCG(7, 1)), 24)
	c, _ := ntPlan(rand.New(rand.NewPCG(7, 1)), 24)
	if b != nil || !slices.Equal(a, c) {
		t.Errorf("the same seed gave different plans")
	}
	var s ntStats
	for i := 1; i <= 10; i++ {
		s.add("kill→reattach", time.Duration(i)*time.Second)
	}
	s.add("link up→rejoin", 1500*time.Millisecond)
	got := strings.Join(s.lines(), "\n")
	want := "kill→reattach: n=10 p50=5.00s p99=10.00s max=10.00s\nlink up→rejoin: n=1 p50=1.50s p99=1.50s max=1.50s"
	if got != want {
		t.Errorf("summary:\n%s\nwant:\n%s", got, want)
	}
}

// TestNetnsCount checks the log lines counted by TestNetnsCPUBurn (no root
// needed): only lines after the offsets count.
func TestNetnsCount(t *testing.T) {
	dir := t.TempDir()
	g := &ntGrid{}
	offsets := map[string]int64{}
	logs := []string{
		"time=1 level=WARN msg=\"relation down\" manager=m0 role=inferior peer=m1\n" + // before the offset
			"time=2 level=INFO msg=\"relation up\" manager=m0 role=inferior peer=m1\n",
		"time=3 level=WARN msg=\"relation down\" manager=m1 role=superior peer=m0\n" +
			"time=4 level=WARN msg=\"superior failed\" manager=m1 peer=m0 cause=\"silent for 3.5s\"\n" +
			"time=5 level=INFO msg=reparented manager=m1 superior=m2 as=grandparent in_place_of=m0\n",
	}
	for i := range ntN {
		m := &ntMgr{i: i, name: ntName(i), logPath: filepath.Join(dir, ntName(i)+".log")}
		g.m[i] = m
		text := ""
		if i < len(logs) {
			text = logs[i]
		}
		if err := os.WriteFile(m.logPath, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	offsets["m0"] = int64(strings.Index(logs[0], "\n") + 1)
	c := ntCount(g, offsets)
	if c.failed != 1 || c.reparented != 1 || c.down != 1 || len(c.lines) != 2 || !slices.Equal(c.per, []string{"m1:failed=1,reparented=1,down=1"}) {
		t.Errorf("counts: %+v", c)
	}
}
