package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// demoResources override each demo manager's processors and memory (they
// all run on this one host) so that the example query has to search.
var demoResources = map[string]struct {
	cpus int
	mem  uint64
	zone string
}{
	"gm152": {8, 16 << 30, "core"},
	"gm154": {4, 8 << 30, "eu-1"},
	"gm156": {4, 8 << 30, "us-1"},
	"gm160": {16, 32 << 30, "eu-1"},
	"gm162": {16, 64 << 30, "eu-1"},
	"gm164": {32, 128 << 30, "us-1"},
}

// demoQuery is asked at demoQueryAt after the tree forms: only gm164
// qualifies, so the query climbs from the leaf gm160 to the root and down
// the other side.
const (
	demoQueryAt   = "gm160"
	demoQuery     = "cpus_free >= 32 && mem_free >= 64 * GiB"
	demoQueryRank = "mem_free / GiB"
)

// demoHold is the demo managers' hold timeout: short, so that the demo
// can show a hold lapsing.
const demoHold = 2 * time.Second

// demoTree is the example grid: each manager and its superior.
var demoTree = [][2]string{
	{"gm152", ""},
	{"gm154", "gm152"},
	{"gm156", "gm152"},
	{"gm160", "gm154"},
	{"gm162", "gm154"},
	{"gm164", "gm156"},
}

// demoGrid is the demo's six managers in one process.
type demoGrid struct {
	mgrs  map[string]*daemon.Manager
	order []string
	dir   string

	mu     sync.Mutex
	up     map[string]bool // "a>b": a sees its relation with b up
	formed chan struct{}
	once   sync.Once
}

// startDemoGrid starts the six managers on loopback with ephemeral ports and
// temporary data dirs, superiors first (an inferior needs its superior's
// port). It returns once all are listening; the tree forms on its own.
func startDemoGrid(heartbeat time.Duration, logLevel string, c *cli, progress func(name, addr string)) (*demoGrid, error) {
	return startDemoGridWeb(heartbeat, logLevel, "", c, progress)
}

// startDemoGridWeb is startDemoGrid with the root gm152 serving its web UI
// and /metrics on web (host:port; "" serves none), and archiving events.
func startDemoGridWeb(heartbeat time.Duration, logLevel, web string, c *cli, progress func(name, addr string)) (*demoGrid, error) {
	return startDemoGridAdmins(heartbeat, logLevel, web, nil, c, progress)
}

// startDemoGridAdmins is startDemoGridWeb with admins (peer ids) in every
// manager's admins list.
func startDemoGridAdmins(heartbeat time.Duration, logLevel, web string, admins []string, c *cli, progress func(name, addr string)) (*demoGrid, error) {
	dir, err := os.MkdirTemp("", "gridmgr-demo-")
	if err != nil {
		return nil, err
	}
	g := &demoGrid{mgrs: map[string]*daemon.Manager{}, dir: dir, up: map[string]bool{}, formed: make(chan struct{})}
	log := newLogger(c.stderr, logLevel, false)
	for _, e := range demoTree {
		name, sup := e[0], e[1]
		cfg := config.Default()
		cfg.Name = name
		cfg.DataDir = filepath.Join(dir, name)
		cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
		cfg.HeartbeatInterval = heartbeat
		cfg.LogLevel = logLevel
		r := demoResources[name]
		cfg.CPUs, cfg.Memory, cfg.MemoryFree = r.cpus, r.mem, r.mem
		cfg.Attributes = map[string]any{"zone": r.zone}
		cfg.Reservations.HoldTimeout = demoHold
		cfg.Admins = admins
		if name == "gm152" && web != "" {
			cfg.HTTPListen = web
			cfg.ArchiveEnabled = true
		}
		if sup != "" {
			s := g.mgrs[sup]
			cfg.Superiors = []peeraddr.PeerAddrs{{Peer: s.Host.PeerID(), Addrs: s.Host.Addrs()}}
		}
		if err := cfg.Validate(); err != nil {
			g.stop()
			return nil, err
		}
		m, err := daemon.Start(cfg, log, daemon.StartOptions{OnEvent: g.onEvent(name)})
		if err != nil {
			g.stop()
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		g.mgrs[name] = m
		g.order = append(g.order, name)
		if progress != nil {
			progress(name, m.Addr())
		}
	}
	return g, nil
}

// onEvent records relation states; the grid is formed when both ends of
// every edge see it up.
func (g *demoGrid) onEvent(name string) func(node.Event) {
	return func(e node.Event) {
		if e.State == 0 {
			return
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		g.up[name+">"+e.Name] = e.State == relations.Up
		for _, edge := range demoTree[1:] {
			if !g.up[edge[0]+">"+edge[1]] || !g.up[edge[1]+">"+edge[0]] {
				return
			}
		}
		g.once.Do(func() { close(g.formed) })
	}
}

func (g *demoGrid) tree(ctx context.Context) (*wire.TreeNode, error) {
	rep, err := g.mgrs["gm152"].Driver.Request(ctx, &wire.Envelope{Body: &wire.Envelope_TreeRequest{TreeRequest: &wire.TreeRequest{BudgetMs: 2000}}})
	if err != nil {
		return nil, err
	}
	return rep.GetTreeReply().GetRoot(), nil
}

// stop stops the managers, leaves first, and removes the data dirs.
func (g *demoGrid) stop() {
	for i := len(g.order) - 1; i >= 0; i-- {
		g.mgrs[g.order[i]].Stop()
	}
	os.RemoveAll(g.dir)
}

func cmdDemo(c *cli, args []string) error {
	fs := c.newFlags("demo", "[flags]",
		"Start a six-manager example grid in this process, on loopback with\n"+
			"ephemeral ports and temporary data dirs: gm152 is the root, gm154 and gm156\n"+
			"are under it, gm160 and gm162 under gm154, gm164 under gm156. It prints each\n"+
			"manager's address and the tree as it forms, then keeps running (try the\n"+
			"printed commands from another terminal) until Ctrl-C.")
	once := fs.Bool("once", false, "print the formed tree and exit")
	heartbeat := fs.duration("heartbeat", time.Second, positive, 0, "heartbeat interval of the demo managers")
	timeout := fs.duration("timeout", 30*time.Second, positive, 0, "give up if the tree has not formed by then")
	level := fs.String("log-level", "warn", "log level of the managers (logs go to stderr)")
	kill := fs.String("kill", "", "after the tour, crash this manager (like kill -9), show the tree heal, then restart it")
	webAddr := fs.String("web", "127.0.0.1:0", `where the root gm152 serves the web UI and /metrics (host:port; "" for none)`)
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if *kill != "" {
		known := false
		for _, e := range demoTree {
			known = known || e[0] == *kill
		}
		switch {
		case !known:
			return usageErr("--kill %q: not a demo manager (gm154, gm156, gm160, gm162 or gm164)", *kill)
		case *kill == "gm152":
			return usageErr("--kill gm152: the demo watches the tree from the root gm152; pick another manager")
		}
	}
	start := time.Now()
	fmt.Fprintf(c.stdout, "starting six managers on 127.0.0.1 …\n")
	if *webAddr != "" {
		if _, _, err := net.SplitHostPort(*webAddr); err != nil {
			return usageErr("--web %q: give host:port, e.g. 127.0.0.1:8150 (port 0 picks a free one)", *webAddr)
		}
	}
	// The grid runs on the user's own machine: the CLI's client key here
	// is its admin, so that the admin commands of the README can be tried.
	admin, keyPath, keyErr := localClientID()
	var admins []string
	if keyErr == nil {
		admins = []string{admin}
	}
	g, err := startDemoGridAdmins(*heartbeat, *level, *webAddr, admins, c, func(name, addr string) {
		fmt.Fprintf(c.stdout, "  %-6s %s\n", name, addr)
	})
	if err != nil {
		return err
	}
	defer g.stop()
	self := invocation(os.Args[0], executable(), exec.LookPath)
	if keyErr == nil {
		fmt.Fprintf(c.stdout, "admin: this machine's client key %s (peer %s) is in every demo manager's admins,\n"+
			"  so admin commands that change a manager work from this CLI here; other keys are refused\n", keyPath, admin)
	} else {
		fmt.Fprintf(c.stdout, "admin: none: no client key here (%s); set GRIDMGR_CLIENT_KEY=FILE to try admin commands\n", plainError(keyErr))
	}
	if a := g.mgrs["gm152"].HTTPAddr(); a != "" {
		fmt.Fprintf(c.stdout, "web UI: http://%s/  (grid browser, landscape, resources; metrics at /metrics)\n", a)
		fmt.Fprintf(c.stdout, "  admin token for changes: %s web-token -d %s\n", self, g.mgrs["gm152"].Cfg.DataDir)
	}

	// Print the tree each time it changes until it is complete.
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	last := ""
	show := func() {
		qctx, qcancel := context.WithTimeout(ctx, 3*time.Second)
		defer qcancel()
		root, err := g.tree(qctx)
		if err != nil {
			return
		}
		if s := renderTree(root); s != last {
			last = s
			fmt.Fprintf(c.stdout, "\n[%s]\n%s", fmtDur(time.Since(start)), s)
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-g.formed:
			break wait
		case <-tick.C:
			show()
		case <-ctx.Done():
			return fmt.Errorf("the tree did not form within %v", *timeout)
		}
	}
	formedIn := time.Since(start)
	show()
	fmt.Fprintf(c.stdout, "\ngrid formed: 6 managers, 5 relations up on both sides, %s after start\n", fmtDur(formedIn))

	fmt.Fprintf(c.stdout, "\nquery at %s (a leaf): %s, ranked by %s\n", demoQueryAt, demoQuery, demoQueryRank)
	qctx, qcancel := context.WithTimeout(context.Background(), 5*time.Second)
	qstart := time.Now()
	rep, err := g.mgrs[demoQueryAt].Driver.Request(qctx, &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{
		Requirement: demoQuery, Rank: demoQueryRank, User: "demo", Down: 255, Up: 255, Want: 1, Limit: 5, Trace: true, BudgetMs: 4000,
	}}})
	qcancel()
	if err != nil {
		return fmt.Errorf("demo query: %w", err)
	}
	if e := rep.GetError(); e != nil {
		return fmt.Errorf("demo query: %s", e.Message)
	}
	fmt.Fprint(c.stdout, renderQuery(rep.GetQueryReply(), true, true, time.Since(qstart)))
	if err := demoReservations(c, g); err != nil {
		return fmt.Errorf("demo reservations: %w", err)
	}
	if err := demoApps(c, g); err != nil {
		return fmt.Errorf("demo applications: %w", err)
	}
	if err := demoJobs(c, g); err != nil {
		return fmt.Errorf("demo jobs: %w", err)
	}
	if *kill != "" {
		if err := demoKill(c, g, *kill, *heartbeat); err != nil {
			return fmt.Errorf("demo --kill %s: %w", *kill, err)
		}
		last = ""
	}
	if *once {
		return nil
	}
	root := g.mgrs["gm152"].Addr()
	fmt.Fprintf(c.stdout, "\nThe grid keeps running until Ctrl-C. From another terminal try:\n")
	fmt.Fprintf(c.stdout, "  %s tree   -n %s\n", self, root)
	fmt.Fprintf(c.stdout, "  %s status -d %s\n", self, g.mgrs["gm154"].Cfg.DataDir)
	fmt.Fprintf(c.stdout, "  %s ping   -d %s gm160\n", self, g.mgrs["gm154"].Cfg.DataDir)
	fmt.Fprintf(c.stdout, "  %s query  -d %s --path 'cpus >= 16' --rank cpus --want 3\n", self, g.mgrs["gm160"].Cfg.DataDir)
	fmt.Fprintf(c.stdout, "  %s watch  -d %s\n", self, g.mgrs["gm152"].Cfg.DataDir)
	fmt.Fprintf(c.stdout, "  %s job q  -d %s --ended   (the demo's jobs; README, Jobs)\n", self, g.mgrs[demoJobsAt].Cfg.DataDir)
	fmt.Fprintf(c.stdout, "  %s reserve -d %s --cpus 1 --mem 256MiB --commit   (then app install: README, Applications)\n", self, g.mgrs["gm160"].Cfg.DataDir)
	if keyErr == nil {
		fmt.Fprintf(c.stdout, "  %s admin  -d %s --all 'set attribute rack r7'   (you are admin here: README, Admin command strings)\n", self, g.mgrs["gm152"].Cfg.DataDir)
	}
	if a := g.mgrs["gm152"].HTTPAddr(); a != "" {
		fmt.Fprintf(c.stdout, "  %s events -d %s --since 10m\n", self, g.mgrs["gm152"].Cfg.DataDir)
		fmt.Fprintf(c.stdout, "  open http://%s/ in a browser\n", a)
	}
	// Keep showing changes (heartbeat states, round trips are not shown to
	// keep the output calm: only the shape and the states).
	done := make(chan struct{})
	go func() { c.waitForSignal(); close(done) }()
	lastShape := shape(last)
	slow := time.NewTicker(time.Second)
	defer slow.Stop()
	for {
		select {
		case <-done:
			fmt.Fprintf(c.stdout, "\nstopping the demo grid\n")
			return nil
		case <-slow.C:
			qctx, qcancel := context.WithTimeout(context.Background(), 3*time.Second)
			root, err := g.tree(qctx)
			qcancel()
			if err != nil {
				continue
			}
			s := renderTree(root)
			if sh := shape(s); sh != lastShape {
				lastShape = sh
				fmt.Fprintf(c.stdout, "\n[%s]\n%s", fmtDur(time.Since(start)), s)
			}
		}
	}
}

// localClientID is the peer id of the client key the CLI uses by default
// on this machine (client.DefaultKeyPath), created if missing as every client
// command would, and its path.
func localClientID() (id, path string, err error) {
	path = client.DefaultKeyPath()
	id, err = client.SelfID(path)
	var oe *client.OptionError
	switch {
	case errors.Is(err, client.ErrNoKeyPath):
		return "", "", fmt.Errorf("no home directory to keep it in")
	case errors.As(err, &oe):
		return "", path, fmt.Errorf("%s: %w", path, oe.Err)
	}
	return id, path, err
}

// executable is this program's path, "" if unknown.
func executable() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return exe
}

// invocation is how to run this program from another terminal, the way it
// was started: `go run ./cmd/gridmgr` if `go run` built it (its binary is
// DIR/go-build…/b001/exe/NAME), the bare name if it was found on $PATH
// (arg0 has no slash and lookPath finds it), else its absolute path,
// quoted for a shell if need be.
func invocation(arg0, exe string, lookPath func(string) (string, error)) string {
	if exe != "" {
		dir := filepath.Dir(exe)
		if filepath.Base(dir) == "exe" && strings.HasPrefix(filepath.Base(filepath.Dir(filepath.Dir(dir))), "go-build") {
			return "go run ./cmd/gridmgr"
		}
	}
	if arg0 != "" && !strings.ContainsRune(arg0, filepath.Separator) {
		if _, err := lookPath(arg0); err == nil {
			return shellQuote(arg0)
		}
	}
	path := exe
	if arg0 != "" && strings.ContainsRune(arg0, filepath.Separator) {
		if abs, err := filepath.Abs(arg0); err == nil {
			path = abs // as the user named it, links not resolved
		}
	}
	if path == "" {
		return "gridmgr"
	}
	return shellQuote(path)
}

// shellQuote quotes s for a POSIX shell unless it needs none.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./+:@%,=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shape drops round trips and last-heard times from a rendered tree so that only changes of
// structure or state are reprinted.
func shape(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, cut := range []string{"  rtt ", "  last heard "} {
			if i := strings.Index(line, cut); i >= 0 {
				line = line[:i]
			}
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// demoReservations shows query → reserve → lapse and release, and one
// co-reservation, from a client connected to the leaf gm160.
func demoReservations(c *cli, g *demoGrid) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := client.Connect(ctx, client.Options{Addr: g.mgrs[demoQueryAt].Addr(), OneOff: true})
	if err != nil {
		return err
	}
	defer cl.Close()
	r := client.NewReserver(cl)
	defer r.Close()
	out := c.stdout
	q := func(req string) *wire.QueryRequest {
		return &wire.QueryRequest{Requirement: req, Rank: "cpus_free", User: "demo", Down: 255, Up: 255, Want: 3, Limit: 10}
	}
	amounts := func(cpus int64, mem uint64) []*wire.Amount {
		return []*wire.Amount{{Kind: "cpus", N: cpus}, {Kind: "mem", N: int64(mem)}}
	}

	// Client B queries; before it reserves, client A takes the best offer.
	cl2, err := client.Connect(ctx, client.Options{Addr: g.mgrs[demoQueryAt].Addr(), OneOff: true})
	if err != nil {
		return err
	}
	defer cl2.Close()
	r2 := client.NewReserver(cl2)
	defer r2.Close()
	const need = "cpus_free >= 16 && mem_free >= 16 * GiB"
	fmt.Fprintf(out, "\nclient B queries from %s: %s, ranked by cpus_free\n", demoQueryAt, need)
	offers, err := cl2.Query(ctx, q(need))
	if err != nil {
		return err
	}
	for i, o := range offers.Offers {
		fmt.Fprintf(out, "  %d. %s  %d cpus free\n", i+1, o.Name, o.CpusFree)
	}
	fmt.Fprintf(out, "client A reserves all 32 cpus of %s first\n", offers.Offers[0].Name)
	held, err := r.ReserveAt(ctx, offers.Offers[0].Name, &wire.ReserveRequest{User: "a", Amounts: []*wire.Amount{{Kind: "cpus", N: 32}}})
	if err != nil {
		return err
	}
	fmt.Fprint(out, indent(renderReserved(held)))
	fmt.Fprintf(out, "client B reserves (and commits) 16 cpus and 16 GiB, trying its offers in order\n")
	other, tries, err := r2.ReserveFrom(ctx, offers.Offers, &wire.ReserveRequest{User: "b", Amounts: amounts(16, 16<<30), Requirement: need, Commit: true})
	if err != nil {
		return err
	}
	for _, a := range tries[:len(tries)-1] {
		fmt.Fprintf(out, "  %s\n", a)
	}
	fmt.Fprint(out, indent(renderReserved(other)))

	fmt.Fprintf(out, "\nclient A does not commit: its hold lapses after the %v hold timeout …\n", demoHold)
	time.Sleep(demoHold + 300*time.Millisecond)
	owner, err := r.OwnerOf(ctx, held.Id)
	if err != nil {
		return err
	}
	list, err := owner.Reservations(ctx, true, false)
	if err != nil {
		return err
	}
	for _, x := range list.Reservations {
		if x.Id == held.Id {
			fmt.Fprintf(out, "  %s at %s: %s (%s)\n", x.Id, x.OwnerName, stateText(x.State), x.Reason)
		}
	}
	rel, err := r2.Op(ctx, wire.ReservationOpRequest_OP_RELEASE, other.Id, 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "client B releases %s: %s\n", rel.Id, stateText(rel.State))

	const all = "cpus_free >= 8"
	fmt.Fprintf(out, "\nco-reserve 8 cpus on 3 managers at once, or on none: %s\n", all)
	co, _, err := r.CoReserve(ctx, q(all), &wire.ReserveRequest{User: "demo", Amounts: []*wire.Amount{{Kind: "cpus", N: 8}}, Requirement: all}, 3)
	if err != nil {
		return err
	}
	fmt.Fprint(out, indent(renderReservations(co)))
	for _, x := range co {
		if _, err := r.Op(ctx, wire.ReservationOpRequest_OP_RELEASE, x.Id, 0); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "released all %d\n", len(co))
	return nil
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return "  " + strings.Join(lines, "\n  ") + "\n"
}

// demoKill crashes one manager, prints the tree from the root each time it
// changes until every running manager is in it again (the failed manager's
// inferiors adopted by its superior), then restarts the manager and shows
// it rejoin.
func demoKill(c *cli, g *demoGrid, name string, heartbeat time.Duration) error {
	m := g.mgrs[name]
	fmt.Fprintf(c.stdout, "\ncrashing %s (no goodbye, like kill -9); its inferiors see its connections drop,\n"+
		"ask its superior whether it still reaches it, and move there about one heartbeat (%s) later;\n"+
		"a manager that only falls silent is given up after %d misses …\n", name, fmtDur(heartbeat), m.Cfg.HeartbeatMisses)
	live := map[string]bool{}
	for _, n := range g.order {
		live[n] = n != name
	}
	killedAt := time.Now()
	m.Crash()
	took, err := g.watchUntil(c, killedAt, live, 30*time.Second)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "\nhealed: every running manager is back in the tree %s after the crash\n", fmtDur(took))

	fmt.Fprintf(c.stdout, "\nrestarting %s from its data dir: it rejoins its superior; its former inferiors stay\n"+
		"where they moved (prefer_configured_superior = false) …\n", name)
	restartAt := time.Now()
	nm, err := daemon.Start(m.Cfg, newLogger(c.stderr, m.Cfg.LogLevel, false), daemon.StartOptions{OnEvent: g.onEvent(name)})
	if err != nil {
		return err
	}
	g.mgrs[name] = nm
	live[name] = true
	took, err = g.watchUntil(c, restartAt, live, 30*time.Second)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "\n%s rejoined %s after its restart\n", name, fmtDur(took))
	return nil
}

// watchUntil prints the tree from gm152 whenever its shape changes, until
// exactly the managers in live appear in it, each once and up.
func (g *demoGrid) watchUntil(c *cli, since time.Time, live map[string]bool, limit time.Duration) (time.Duration, error) {
	last := ""
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		root, err := g.tree(ctx)
		cancel()
		if err == nil {
			s := renderTree(root)
			if sh := shape(s); sh != last {
				last = sh
				fmt.Fprintf(c.stdout, "\n[+%s]\n%s", fmtDur(time.Since(since)), s)
			}
			if treeHas(root, live) {
				return time.Since(since), nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, fmt.Errorf("the tree did not heal within %s", limit)
}

// treeHas reports whether the managers shown up in the tree (the root and
// children in state up) are exactly those live, each once.
func treeHas(root *wire.TreeNode, live map[string]bool) bool {
	seen := map[string]int{root.Name: 1}
	var walk func(n *wire.TreeNode)
	walk = func(n *wire.TreeNode) {
		for _, ch := range n.Children {
			if ch.State != wire.RelationState_RELATION_STATE_UP {
				continue
			}
			seen[ch.Name]++
			walk(ch)
		}
	}
	walk(root)
	for n, up := range live {
		if up && seen[n] != 1 {
			return false
		}
		if !up && seen[n] > 0 {
			return false
		}
	}
	return true
}
