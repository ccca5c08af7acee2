package main

// Stress tests of the job layer on real manager processes:
//
//	TestJobArray200Kill9: a 200-job array whose program fails one time in
//	five, while the submit manager and an execute manager are killed with
//	SIGKILL and restarted; every index must complete exactly once.
//	TestJobNetnsLostHost: a job whose executing host is cut off from the
//	network past lost_after runs again elsewhere; the copy left on the cut
//	host is stopped and removed when its link comes back.
//
// Both need root (running jobs are confined applications; namespaces) and
// skip themselves otherwise:
//
//	sudo go test -run 'TestJobArray200Kill9|TestJobNetnsLostHost' -v ./cmd/gridmgr/

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/wire"
)

// jsGrid is managers run as processes of the built binary on fixed
// loopback ports, so that one killed and restarted from its data dir is
// found at the same address by its peers.
type jsGrid struct {
	t     *testing.T
	bin   string
	dir   string
	port  map[string]int
	procs map[string]*exec.Cmd
	done  map[string]chan struct{}
	logs  map[string]*syncBuf
	order []string
}

func newJSGrid(t *testing.T, names []string) *jsGrid {
	g := &jsGrid{t: t, bin: buildBinary(t), dir: t.TempDir(), port: map[string]int{},
		procs: map[string]*exec.Cmd{}, done: map[string]chan struct{}{}, logs: map[string]*syncBuf{}}
	var ls []net.Listener
	for _, n := range names {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		g.port[n] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range ls {
		l.Close()
	}
	t.Cleanup(g.stop)
	return g
}

func (g *jsGrid) data(name string) string { return filepath.Join(g.dir, name, "data") }

// start writes name's properties file (first time only: a restart reuses
// it) and runs it; sup is its superior ("": a root), already running.
func (g *jsGrid) start(name, sup string) {
	g.t.Helper()
	d := filepath.Join(g.dir, name)
	conf := filepath.Join(d, "m.toml")
	if _, err := os.Stat(conf); err != nil {
		sups := ""
		if sup != "" {
			addr, err := os.ReadFile(filepath.Join(g.data(sup), daemon.AddrFile))
			if err != nil {
				g.t.Fatal(err)
			}
			first, _, _ := strings.Cut(strings.TrimSpace(string(addr)), "\n")
			sups = fmt.Sprintf("superiors = [%q]\n", first)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			g.t.Fatal(err)
		}
		writeFile(g.t, d, "m.toml", fmt.Sprintf("name = %q\ndata_dir = \"data\"\nlisten = [\"/ip4/127.0.0.1/tcp/%d\"]\n%s"+
			"[heartbeat]\ninterval = \"500ms\"\nmisses = 3\n[resources]\ncpus = 4\nmemory = \"4GiB\"\n[attributes]\nzone = \"stress\"\n",
			name, g.port[name], sups))
		g.order = append(g.order, name)
	}
	_ = os.Remove(filepath.Join(g.data(name), daemon.AddrFile)) // left by a kill -9
	cmd := exec.Command(g.bin, "run", "-c", conf, "--log-level", "warn")
	cmd.Dir = d
	if g.logs[name] == nil {
		g.logs[name] = &syncBuf{}
	}
	fmt.Fprintf(g.logs[name], "=== start at %s ===\n", time.Now().Format(time.RFC3339Nano))
	cmd.Stderr, cmd.Stdout = g.logs[name], g.logs[name]
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		g.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	g.procs[name], g.done[name] = cmd, done
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(g.data(name), daemon.AddrFile)); err == nil {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("%s did not start: %s", name, g.logs[name])
		}
		time.Sleep(20 * time.Millisecond) // polling a real process
	}
}

// kill9 sends SIGKILL to name and reaps it.
func (g *jsGrid) kill9(name string) {
	g.t.Helper()
	_ = g.procs[name].Process.Signal(syscall.SIGKILL)
	select {
	case <-g.done[name]:
	case <-time.After(10 * time.Second):
		g.t.Fatalf("%s did not die within 10s of SIGKILL", name)
	}
}

func (g *jsGrid) stop() {
	for _, n := range g.order {
		c, done := g.procs[n], g.done[n]
		select {
		case <-done:
			continue
		default:
		}
		_ = c.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
	}
}

func (g *jsGrid) allLogs() string {
	var b strings.Builder
	for _, n := range g.order {
		fmt.Fprintf(&b, "--- %s ---\n%s\n", n, g.logs[n])
		// What the supervisors of its applications said (a panic lands
		// here), and the state of each that did not end cleanly.
		run := filepath.Join(g.data(n), "apps", "run")
		if log, err := os.ReadFile(filepath.Join(run, "standby", "log")); err == nil && len(log) > 0 {
			fmt.Fprintf(&b, "supervisors' log:\n%s\n", log)
		}
		states, _ := filepath.Glob(filepath.Join(run, "*", "state.json"))
		for _, f := range states {
			if st, err := os.ReadFile(f); err == nil && !strings.Contains(string(st), `"state":"exited"`) {
				fmt.Fprintf(&b, "%s: %s\n", filepath.Base(filepath.Dir(f)), st)
			}
		}
	}
	return b.String()
}

// newDemoJSGrid starts the demo's six-manager tree (gm152 root; gm154 and
// gm156 under it; gm160, gm162 under gm154; gm164 under gm156) as
// processes and waits until it has formed.
func newDemoJSGrid(t *testing.T) *jsGrid {
	t.Helper()
	g := newJSGrid(t, []string{"gm152", "gm154", "gm156", "gm160", "gm162", "gm164"})
	g.start("gm152", "")
	g.start("gm154", "gm152")
	g.start("gm156", "gm152")
	g.start("gm160", "gm154")
	g.start("gm162", "gm154")
	g.start("gm164", "gm156")
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, out, _ := run(t, "tree", "-d", g.data("gm152"))
		formed := true
		for _, n := range []string{"gm154", "gm156", "gm160", "gm162", "gm164"} {
			formed = formed && strings.Contains(out, n+"  up")
		}
		if formed {
			return g
		}
		if time.Now().After(deadline) {
			t.Fatalf("the grid did not form:\n%s\n%s", out, g.allLogs())
		}
		time.Sleep(100 * time.Millisecond) // polling real processes
	}
}

// jsJobs reads `gridmgr job q|log --json` output.
func jsJobs(out string) ([]*wire.JobInfo, error) {
	rep := &wire.JobReply{}
	if err := readPlainJSON([]byte(out), rep); err != nil {
		return nil, fmt.Errorf("%v: %.300s", err, out)
	}
	return rep.Jobs, nil
}

func jsCount(j *wire.JobInfo, typ string) int {
	n := 0
	for _, e := range j.Log {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// jsStartedTwice lists the tries that have more than one "started" line.
func jsStartedTwice(j *wire.JobInfo) []uint32 {
	seen := map[uint32]int{}
	var twice []uint32
	for _, e := range j.Log {
		if e.Type == "started" {
			seen[e.Try]++
			if seen[e.Try] == 2 {
				twice = append(twice, e.Try)
			}
		}
	}
	return twice
}

// The program of TestJobArray200Kill9: fails about one time in five,
// otherwise writes 7*INDEX+3 into out/result-INDEX.txt.
const jsRandomFailer = `#!/bin/sh
i=$1
echo "index $i at $INSTANCE"
sleep 1
r=$(od -An -N1 -tu1 /dev/urandom | tr -d ' ')
if [ $(( r % 5 )) -eq 0 ]; then echo "index $i fails (r=$r)" >&2; exit 1; fi
echo $(( i * 7 + 3 )) > out/result-$i.txt
`

// A 200-job array, submitted at a leaf (gm160, the user's host) of the
// demo's six-manager tree of real processes, whose program fails one time
// in five (max_retries = 10: an index fails all 11 tries with chance
// 0.2^11), while the submit manager is killed with SIGKILL and restarted
// from its data dir once jobs run, and an execute manager (gm162) is
// killed with SIGKILL and restarted within lost_after once jobs run there.
// Every index completes exactly once: one "completed" line, no try started
// twice, its program run once per try (its stdout), its one output with
// the right content brought back by `job wait`. A stall (idle jobs, nothing
// started or ended for 20s) is logged with every manager's reservations
// and what the grid offers then, and summed up at the end; it is not a
// failure (no timing is asserted).
//
// It found a try's program run twice when a start's answer was lost across
// the submit manager's kill -9 (a start is now sent only to an instance
// still installed).
func TestJobArray200Kill9(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("builds the binary, runs six manager processes; running jobs (confined applications) needs root")
	}
	const count = 200
	began := time.Now()
	t.Setenv("GRIDMGR_CLIENT_KEY", filepath.Join(t.TempDir(), "client.key"))
	g := newDemoJSGrid(t)
	formed := time.Since(began)

	job := t.TempDir()
	if err := os.MkdirAll(filepath.Join(job, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, job, "job.toml", fmt.Sprintf(`name = "rnd"
program = "bin/rnd"
count = %d
args = ["${INDEX}"]
outputs = ["result-${INDEX}.txt"]
memory = "32MiB"
runtime = "30s"
max_retries = 10
`, count))
	writeFile(t, job, "bin/rnd", jsRandomFailer)
	if err := os.Chmod(filepath.Join(job, "bin/rnd"), 0o755); err != nil {
		t.Fatal(err)
	}
	submitAt := g.data("gm160")
	t0 := time.Now()
	code, out, errb := run(t, "job", "submit", "-d", submitAt, filepath.Join(job, "job.toml"))
	if code != 0 {
		t.Fatalf("job submit: exit %d\n%s\n%s", code, out, errb)
	}
	cluster := strings.Fields(out)[3]
	t.Logf("job submit: %s", strings.TrimSpace(out))

	// q is the cluster's jobs now, every one (ended or not).
	q := func() []*wire.JobInfo {
		code, out, errb := run(t, "job", "q", "-d", submitAt, "--json", "--ended", "--timeout", "20s", cluster)
		if code != 0 {
			t.Logf("job q: exit %d: %s", code, strings.TrimSpace(errb))
			return nil
		}
		js, err := jsJobs(out)
		if err != nil {
			t.Logf("job q: %v", err)
		}
		return js
	}
	dumpJobs := func() string {
		_, out, errb := run(t, "job", "log", "-d", submitAt, "--timeout", "30s", cluster)
		_, qout, _ := run(t, "job", "q", "-d", submitAt, "--ended", "--limit", "5000", cluster)
		return fmt.Sprintf("=== job q ===\n%s\n=== job log ===\n%s%s\n%s", qout, out, errb, g.allLogs())
	}
	// until polls q until ok holds of the jobs.
	until := func(what string, ok func([]*wire.JobInfo) bool) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			if js := q(); len(js) == count && ok(js) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("not %s within 3m\n%s", what, dumpJobs())
			}
			time.Sleep(300 * time.Millisecond) // polling real processes
		}
	}
	tally := func(js []*wire.JobInfo, state wire.JobState, at string) int {
		n := 0
		for _, j := range js {
			if j.State == state && (at == "" || j.Manager == at) {
				n++
			}
		}
		return n
	}

	// 1. The submit manager dies while jobs run, and comes back.
	until("5 running", func(js []*wire.JobInfo) bool { return tally(js, wire.JobState_JOB_STATE_RUNNING, "") >= 5 })
	before := q()
	t.Logf("kill -9 gm160 (the submit manager) at %s: %d running, %d completed", time.Since(t0).Round(time.Millisecond),
		tally(before, wire.JobState_JOB_STATE_RUNNING, ""), tally(before, wire.JobState_JOB_STATE_COMPLETED, ""))
	g.kill9("gm160")
	time.Sleep(time.Second)
	g.start("gm160", "gm154")
	t.Logf("gm160 restarted at %s", time.Since(t0).Round(time.Millisecond))

	// 2. An execute manager dies while jobs run there, and comes back
	// within lost_after (the default, 5m).
	until("running at gm162", func(js []*wire.JobInfo) bool { return tally(js, wire.JobState_JOB_STATE_RUNNING, "gm162") >= 1 })
	before = q()
	t.Logf("kill -9 gm162 (an execute manager) at %s: %d running there, %d completed", time.Since(t0).Round(time.Millisecond),
		tally(before, wire.JobState_JOB_STATE_RUNNING, "gm162"), tally(before, wire.JobState_JOB_STATE_COMPLETED, ""))
	g.kill9("gm162")
	time.Sleep(2 * time.Second)
	g.start("gm162", "gm154")
	t.Logf("gm162 restarted at %s", time.Since(t0).Round(time.Millisecond))

	// Until every index has ended, watching for a stall: idle jobs and no
	// job started or ended for 20s. Then what each manager has reserved
	// and runs is logged (the lease of a reservation nobody uses ends
	// runtime + 2m after it was made; the deadline outlasts it).
	var stalls []string
	progress, lastKey := time.Now(), ""
	deadline := time.Now().Add(6 * time.Minute)
	for dumped := false; ; time.Sleep(time.Second) { // polling real processes
		js := q()
		if len(js) != count {
			continue
		}
		ended, idle, started := 0, 0, 0
		for _, j := range js {
			if client.JobEnded(j.State) {
				ended++
			}
			if j.State == wire.JobState_JOB_STATE_IDLE {
				idle++
			}
			started += int(j.Tries)
		}
		if ended == count {
			break
		}
		if key := fmt.Sprint(ended, started); key != lastKey {
			if since := time.Since(progress); since > 20*time.Second {
				stalls = append(stalls, fmt.Sprintf("%s with nothing started or ended, from %s", since.Round(time.Second), progress.Sub(t0).Round(time.Second)))
			}
			progress, lastKey, dumped = time.Now(), key, false
		}
		if idle > 0 && !dumped && time.Since(progress) > 20*time.Second {
			dumped = true
			var b strings.Builder
			for _, n := range g.order {
				_, ro, re := run(t, "reservations", "-d", g.data(n), "--timeout", "10s")
				_, ao, ae := run(t, "app", "list", "-d", g.data(n), "--timeout", "10s")
				fmt.Fprintf(&b, "=== %s: reservations ===\n%s%s=== %s: app list ===\n%s%s", n, ro, re, n, ao, ae)
			}
			_, qo, _ := run(t, "job", "q", "-d", submitAt, "--limit", "5000", cluster)
			_, qr, qe := run(t, "query", "-d", submitAt, "--want", "100", "--timeout", "10s", "cpus_free >= 1 && mem_free >= 32*MiB")
			qo += fmt.Sprintf("=== gridmgr query at gm160, now: cpus_free >= 1 && mem_free >= 32*MiB ===\n%s%s", qr, qe)
			for _, j := range js {
				if j.State == wire.JobState_JOB_STATE_IDLE {
					_, lo, _ := run(t, "job", "log", "-d", submitAt, j.Id)
					qo += fmt.Sprintf("=== an idle job: %s, reason: %s ===\n%s", j.Id, j.Reason, lo)
					break
				}
			}
			t.Logf("STALL at %s: %d idle, %d ended, nothing started or ended for 20s:\n%s=== job q ===\n%s", time.Since(t0).Round(time.Second), idle, ended, b.String(), qo)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d ended after 6m\n%s", ended, count, dumpJobs())
		}
	}
	code, out, errb = run(t, "job", "wait", "-d", submitAt, "--timeout", "2m", cluster)
	elapsed := time.Since(t0)
	if code != 0 {
		t.Fatalf("job wait: exit %d\n%s\n%s\n%s", code, out, errb, dumpJobs())
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != count {
		t.Errorf("job wait printed %d lines, want %d", len(lines), count)
	}

	// job log answers at most 100 jobs at a time: asked 50 indexes at a time.
	var logs []*wire.JobInfo
	for from := 0; from < count; from += 50 {
		args := []string{"job", "log", "-d", submitAt, "--json", "--timeout", "30s"}
		for i := from; i < min(from+50, count); i++ {
			args = append(args, fmt.Sprintf("%s[%d]", cluster, i))
		}
		code, out, errb := run(t, args...)
		if code != 0 {
			t.Fatalf("job log --json: exit %d: %s", code, errb)
		}
		js, err := jsJobs(out)
		if err != nil {
			t.Fatalf("job log --json: %v", err)
		}
		logs = append(logs, js...)
	}
	if len(logs) != count {
		t.Fatalf("job log --json: %d jobs, want %d", len(logs), count)
	}
	final := q()
	if len(final) != count {
		t.Fatalf("job q: %d jobs, want %d", len(final), count)
	}
	tries := map[uint32]int{}
	where := map[string]int{}
	moves, lost, failedTries := 0, 0, 0
	for i := range count {
		j, l := final[i], logs[i]
		id := fmt.Sprintf("%s[%d]", cluster, i)
		if j.Id != id || l.Id != id {
			t.Fatalf("job %d is %s (q) / %s (log), want %s", i, j.Id, l.Id, id)
		}
		tries[j.Tries]++
		where[j.Manager]++
		moves += int(j.Moves)
		lost += jsCount(l, "lost")
		failedTries += jsCount(l, "retried")
		bad := []string{}
		if j.State != wire.JobState_JOB_STATE_COMPLETED {
			bad = append(bad, "state "+jobStateWord(j.State)+": "+j.Reason)
		}
		if n := jsCount(l, "completed"); n != 1 {
			bad = append(bad, fmt.Sprintf("%d completed lines", n))
		}
		if tw := jsStartedTwice(l); len(tw) > 0 {
			bad = append(bad, fmt.Sprintf("tries %v started twice", tw))
		}
		if n := jsCount(l, "started"); n != int(j.Tries) {
			bad = append(bad, fmt.Sprintf("%d started lines for %d tries", n, j.Tries))
		}
		if n := jsCount(l, "retried"); n != int(j.Tries)-1 {
			bad = append(bad, fmt.Sprintf("%d retried lines for %d tries", n, j.Tries))
		}
		if n := jsCount(l, "lost"); n != 0 {
			bad = append(bad, fmt.Sprintf("%d lost lines (gm162 came back within lost_after)", n))
		}
		dir := filepath.Join(job, "results-rnd", strconv.Itoa(i))
		got, err := os.ReadFile(filepath.Join(dir, "out", fmt.Sprintf("result-%d.txt", i)))
		if want := fmt.Sprintf("%d\n", i*7+3); err != nil || string(got) != want {
			bad = append(bad, fmt.Sprintf("result %q (%v), want %q", got, err, want))
		}
		if ents, _ := os.ReadDir(filepath.Join(dir, "out")); len(ents) != 1 {
			bad = append(bad, fmt.Sprintf("%d files in out/", len(ents)))
		}
		if st, _ := os.ReadFile(filepath.Join(dir, "exit_status")); string(st) != "exit 0\n" {
			bad = append(bad, fmt.Sprintf("exit_status %q", st))
		}
		if so, _ := os.ReadFile(filepath.Join(dir, "stdout")); strings.Count(string(so), "index ") != 1 {
			bad = append(bad, fmt.Sprintf("stdout %q", so))
		}
		if len(bad) > 0 {
			_, lo, _ := run(t, "job", "log", "-d", submitAt, id)
			t.Errorf("%s: %s\n%s", id, strings.Join(bad, "; "), lo)
		}
	}
	var hist []string
	for _, n := range slices.Sorted(func(yield func(uint32) bool) {
		for k := range tries {
			if !yield(k) {
				return
			}
		}
	}) {
		hist = append(hist, fmt.Sprintf("%d tries: %d", n, tries[n]))
	}
	t.Logf("summary: %d indexes completed in %s from submit (grid formed in %s); %d failed tries retried; tries histogram {%s}; ran at %v; moves %d, lost %d; stalls %q",
		count, elapsed.Round(time.Millisecond), formed.Round(time.Millisecond), failedTries, strings.Join(hist, ", "), where, moves, lost, stalls)
	if t.Failed() {
		t.Logf("manager logs:\n%s", g.allLogs())
	}
}

// jsCLI runs a client command in m's namespace against m, with its own
// --timeout, and returns its stdout.
func jsCLI(g *ntGrid, m *ntMgr, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second)
	defer cancel()
	full := append([]string{"netns", "exec", m.ns, g.bin}, args...)
	full = append(full, "-n", m.maddr, "--timeout", timeout.String())
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

// jsStart is ntGrid.start without `ip netns exec`, which mounts a sysfs of
// the namespace's own over /sys and so hides the cgroup hierarchy the
// manager confines applications in: nsenter joins only the network
// namespace (and execs gridmgr in place: the pid is the manager's).
func jsStart(g *ntGrid, m *ntMgr) {
	g.t.Helper()
	f, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		g.t.Fatal(err)
	}
	defer f.Close() // the child has its own descriptor
	m.starts++
	fmt.Fprintf(f, "=== TestJobNetns: start %d of %s at %s ===\n", m.starts, m.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command("nsenter", "--net=/run/netns/"+m.ns, g.bin, "run", "-c", m.conf)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = g.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		g.t.Fatalf("start %s: %v", m.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	m.cmd, m.done, m.killed = cmd, done, false
}

// The program of TestJobNetnsLostHost: says which instance (reservation)
// it is, runs a while, and writes the same into its output.
const jsWhereAmI = `#!/bin/sh
echo "instance $INSTANCE"
sleep 12
echo "$INSTANCE" > out/where.txt
`

// A job (lost_after = 10s) placed by its rank on m5, a host of its own
// network namespace; once it runs there, m5's link is cut. Past lost_after
// the job is matched again elsewhere and completes there, m5 still cut
// off; then the link comes back, and the copy left at m5 is stopped and
// removed (m5's `app list` empties). The log shows one "lost", one
// "discarded", one "completed"; the result is the second placement's.
func TestJobNetnsLostHost(t *testing.T) {
	g := ntNewGrid(t)
	m := g.m
	// m0 root; m1, m2 under m0; m3 under m1 (the submit manager); m5 under m2.
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("util-linux's nsenter is not installed")
	}
	for _, i := range []int{0, 1, 2, 3, 5} {
		jsStart(g, m[i])
	}
	sub, exec5 := m[3], m[5]
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := g.cli(m[0], "tree")
		formed := err == nil
		for _, i := range []int{1, 2, 3, 5} {
			formed = formed && strings.Contains(out, m[i].name+"  up")
		}
		if formed {
			break
		}
		if time.Now().After(deadline) {
			g.fail("the grid did not form: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond) // polling real processes
	}

	job := filepath.Join(g.dir, "job")
	if err := os.MkdirAll(filepath.Join(job, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, job, "job.toml", `name = "lost"
program = "bin/where"
outputs = ["where.txt"]
memory = "32MiB"
runtime = "2m"
lost_after = "10s"
requirement = 'name != "m3"'
rank = 'name == "m5" ? 1 : 0'
`)
	writeFile(t, job, "bin/where", jsWhereAmI)
	if err := os.Chmod(filepath.Join(job, "bin/where"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := jsCLI(g, sub, 30*time.Second, "job", "submit", filepath.Join(job, "job.toml"))
	if err != nil {
		g.fail("job submit: %v\n%s", err, out)
	}
	id := strings.Fields(out)[3]
	t.Logf("job submit: %s", strings.TrimSpace(out))

	get := func() *wire.JobInfo {
		out, err := jsCLI(g, sub, 10*time.Second, "job", "log", "--json", id)
		if err != nil {
			t.Logf("job log: %v", err)
			return nil
		}
		js, err := jsJobs(out)
		if err != nil || len(js) != 1 {
			t.Logf("job log --json: %v, %d jobs", err, len(js))
			return nil
		}
		return js[0]
	}
	dump := func() string {
		lo, err := jsCLI(g, sub, 10*time.Second, "job", "log", id)
		qo, _ := jsCLI(g, sub, 10*time.Second, "job", "q", "--ended", id)
		return fmt.Sprintf("=== job q ===\n%s=== job log ===\n%s(%v)\n", qo, lo, err)
	}
	until := func(what string, ok func(j *wire.JobInfo) bool) *wire.JobInfo {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			if j := get(); j != nil && ok(j) {
				return j
			}
			if time.Now().After(deadline) {
				g.fail("not %s within 3m\n%s", what, dump())
			}
			time.Sleep(300 * time.Millisecond) // polling real processes
		}
	}
	running := func(at string) func(j *wire.JobInfo) bool {
		return func(j *wire.JobInfo) bool {
			return j.State == wire.JobState_JOB_STATE_RUNNING && j.Manager == at
		}
	}

	until("running at m5", running(exec5.name))
	cut := time.Now()
	g.setLink(exec5, false)
	t.Logf("m5's link cut")
	j := until("running elsewhere", func(j *wire.JobInfo) bool {
		return j.State == wire.JobState_JOB_STATE_RUNNING && j.Manager != exec5.name
	})
	second := j.Manager
	t.Logf("running again at %s, %s after the cut", second, time.Since(cut).Round(time.Millisecond))
	until("completed", func(j *wire.JobInfo) bool { return j.State == wire.JobState_JOB_STATE_COMPLETED })
	if lst, _ := jsCLI(g, exec5, 10*time.Second, "app", "list"); true {
		t.Logf("m5's app list while cut off (from inside its namespace):\n%s", lst)
	}
	g.setLink(exec5, true)
	t.Logf("m5's link back, %s after the cut", time.Since(cut).Round(time.Millisecond))

	j = until("the copy at m5 discarded", func(j *wire.JobInfo) bool { return jsCount(j, "discarded") >= 1 })
	deadline = time.Now().Add(3 * time.Minute)
	for {
		out, err := jsCLI(g, exec5, 10*time.Second, "app", "list")
		if err == nil && strings.HasPrefix(out, "no applications") {
			break
		}
		if time.Now().After(deadline) {
			g.fail("the copy at m5 is still there 3m after its link came back: %v\n%s\n%s", err, out, dump())
		}
		time.Sleep(300 * time.Millisecond) // polling real processes
	}
	j = get()
	if j == nil {
		g.fail("no job log")
	}
	lo, _ := jsCLI(g, sub, 10*time.Second, "job", "log", id)
	t.Logf("job log:\n%s", lo)
	for typ, want := range map[string]int{"lost": 1, "discarded": 1, "completed": 1} {
		if n := jsCount(j, typ); n != want {
			t.Errorf("%d %q lines, want %d", n, typ, want)
		}
	}
	if tw := jsStartedTwice(j); len(tw) > 0 {
		t.Errorf("tries %v started twice", tw)
	}
	if j.Manager != second || j.Moves != 1 || j.State != wire.JobState_JOB_STATE_COMPLETED {
		t.Errorf("%s %s at %s after %d moves; want completed at %s after 1", id, jobStateWord(j.State), j.Manager, j.Moves, second)
	}
	// The instances of the two placements, from their "staged" lines.
	var staged []string
	for _, e := range j.Log {
		if e.Type == "staged" {
			f := strings.Fields(e.Detail)
			staged = append(staged, f[len(f)-1])
		}
		if e.Type == "discarded" && !strings.Contains(e.Detail, "stopped and removed") {
			t.Errorf("discarded: %q, want its copy stopped and removed", e.Detail)
		}
	}
	if len(staged) != 2 || staged[0] == staged[1] {
		t.Fatalf("staged as %v: want two placements", staged)
	}

	res := filepath.Join(g.dir, "results")
	out, err = jsCLI(g, sub, time.Minute, "job", "get", "-o", res, id)
	if err != nil {
		g.fail("job get: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(res, "out", "where.txt"))
	if err != nil || strings.TrimSpace(string(got)) != staged[1] {
		t.Errorf("where.txt %q (%v): want the second placement's instance %s (the first was %s)", got, err, staged[1], staged[0])
	}
	if so, _ := os.ReadFile(filepath.Join(res, "stdout")); string(so) != "instance "+staged[1]+"\n" {
		t.Errorf("stdout %q: want the second placement's", so)
	}
	if ents, _ := os.ReadDir(filepath.Join(res, "out")); len(ents) != 1 {
		t.Errorf("%d files in out/", len(ents))
	}
}
