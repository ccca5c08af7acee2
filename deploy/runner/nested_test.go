package runner

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The nested runner's tests run as an ordinary user, as a glide-in
// does: as root, each test runs itself again as nobody (asNobody) in a
// directory nobody owns, and passes if that run passes.

const nobody = 65534

// asNobody reports whether the test is to run here: as root it runs the
// test again as nobody and reports false once that run has passed (it
// fails the test otherwise); as any other user it reports true.
func asNobody(t *testing.T) bool {
	t.Helper()
	if os.Getenv("RUNNER_TEST_NESTED_CHILD") != "" || os.Geteuid() != 0 {
		return true
	}
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755) // t.TempDir makes its parent 0700
	os.Chmod(base, 0o755)
	home := filepath.Join(base, "home")
	for _, d := range []string{home, filepath.Join(home, "tmp")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(base, "runner.test")
	copyFile(t, self(t), bin)
	// Whatever is left of the run is killed (and the test fails: a
	// nested runner leaves nothing behind once its instances are
	// removed and it has gone).
	t.Cleanup(func() { killUnder(base) })
	cmd := exec.Command(bin, "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1", "-test.timeout=3m")
	cmd.Env = append(os.Environ(), "RUNNER_TEST_NESTED_CHILD=1", "TMPDIR="+filepath.Join(home, "tmp"), "HOME="+home)
	cmd.Dir = home
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	t.Logf("as nobody:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("as nobody: %v", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		left := under(base)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the run left behind: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// under is the processes whose program is a file under dir (the test
// binary's copies: runners, keepers, shims, standbys, programs).
func under(dir string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err == nil && strings.HasPrefix(exe, dir+"/") {
			if p, ok := readProc(pid); ok && !p.gone() {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func killUnder(dir string) {
	for _, pid := range under(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// newNestedRunner is a nested Runner as the user the test runs as; log gets
// what it logs.
func newNestedRunner(t *testing.T) (*Runner, *bytes.Buffer) {
	t.Helper()
	var log bytes.Buffer
	r, err := New(Options{StateDir: t.TempDir(), Nested: true, Log: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, &log
}

// nspec is a nested instance in a directory of its own holding the test
// binary (a Go ELF program) as bin/prog and a shell script, bin/x, with
// script as its body. No uid: the runner's own.
func nspec(t *testing.T, r *Runner, id, script string, argv ...string) Spec {
	t.Helper()
	dir := filepath.Join(t.TempDir(), id)
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	copyFile(t, self(t), filepath.Join(dir, "bin", "prog"))
	if err := os.WriteFile(filepath.Join(dir, "bin", "x"), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Remove(id, "g"); err != nil {
			t.Errorf("removing %s: %v", id, err)
		}
	})
	return Spec{ID: id, Group: "g", Dir: dir, Command: argv,
		Env:     []string{"PATH=/usr/bin:/bin", "HOME=" + dir},
		Sandbox: Sandbox{Writable: []string{dir}, Hostname: id},
		LogDir:  filepath.Join(t.TempDir(), "logs"), StopGrace: 300 * time.Millisecond}
}

// pidFile waits for the pid a program writes to path and returns that
// process (its start time too, against pid reuse).
func pidFile(t *testing.T, path string) procRef {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		data, err := os.ReadFile(path)
		if pid, _ := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 0 {
			return procRef{Pid: pid, Start: procStart(pid)}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitGone waits until none of ps runs (a zombie has ended).
func waitGone(t *testing.T, ps ...procRef) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var alive []int
		for _, p := range ps {
			if q, ok := readProc(p.Pid); ok && q.start == p.Start && !q.gone() {
				alive = append(alive, p.Pid)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v still run", alive)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func refs(pids []int) []procRef {
	var out []procRef
	for _, pid := range pids {
		out = append(out, procRef{Pid: pid, Start: procStart(pid)})
	}
	return out
}

// daemon is the test program "daemon" and its two stages: it starts
// daemon1 and waits for it; daemon1 starts daemon2 in a session of its
// own and ends at once (so daemon2 is an orphan: the double fork); daemon2
// ignores SIGTERM and SIGHUP, writes its pid to daemon.pid and waits.
// Then daemon says "ready" and waits.
func daemon(stage string) {
	self, _ := os.Executable()
	switch stage {
	case "daemon":
		c := exec.Command(self)
		c.Env = append(os.Environ(), "RUNNER_TEST_PROGRAM=daemon1")
		if err := c.Run(); err != nil {
			fmt.Println("daemon1:", err)
			os.Exit(1)
		}
		for {
			if _, err := os.Stat("daemon.pid"); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		fmt.Println("ready")
		select {}
	case "daemon1":
		c := exec.Command(self)
		c.Env = append(os.Environ(), "RUNNER_TEST_PROGRAM=daemon2", "RUNNER_TEST_DAEMON1="+strconv.Itoa(os.Getpid()))
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Start(); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	case "daemon2":
		signal.Ignore(syscall.SIGTERM, syscall.SIGHUP)
		// Only once daemon1 has gone (its parent is no longer daemon1:
		// it is an orphan). daemon1 may be gone before this runs.
		daemon1, _ := strconv.Atoi(os.Getenv("RUNNER_TEST_DAEMON1"))
		for os.Getppid() == daemon1 {
			time.Sleep(5 * time.Millisecond)
		}
		_ = os.WriteFile("daemon.pid.tmp", []byte(strconv.Itoa(os.Getpid())), 0o600)
		_ = os.Rename("daemon.pid.tmp", "daemon.pid")
		select {}
	}
}

// Nested, as an ordinary user: New says what it does; a script (bin/x,
// a #! line and its exec bit) and a Go program (bin/prog) run as the
// runner's own uid, their exit statuses recorded; their usage is read
// from /proc; what nested mode cannot do is refused, saying why.
func TestNestedStartsRealPrograms(t *testing.T) {
	if !asNobody(t) {
		return
	}
	r, log := newNestedRunner(t)
	if !strings.Contains(log.String(), "nested: applications run inside this manager's own sandbox, which confines them; they are not separated from each other by namespaces") {
		t.Fatalf("New logged %q", log)
	}
	uid := os.Geteuid()

	s := nspec(t, r, "script", `echo "script as $(id -u) in $(pwd)"; exit 5`, "bin/x")
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	if st := waitState(t, r, "script", StateFailed); st.LastExit != "exit 5" || st.Restarts != 0 {
		t.Fatalf("script: %+v", st)
	}
	if out, _ := os.ReadFile(filepath.Join(s.LogDir, "stdout.log")); string(out) != fmt.Sprintf("script as %d in %s\n", uid, s.Dir) {
		t.Fatalf("script printed %q", out)
	}

	for _, c := range []struct {
		code  int
		state State
	}{{7, StateFailed}, {0, StateExited}} {
		id := fmt.Sprintf("elf%d", c.code)
		e := nspec(t, r, id, "", "bin/prog")
		e.Env = append(e.Env, "RUNNER_TEST_PROGRAM=exit", fmt.Sprintf("RUNNER_TEST_CODE=%d", c.code))
		if err := r.Start(e); err != nil {
			t.Fatal(err)
		}
		if st := waitState(t, r, id, c.state); st.LastExit != fmt.Sprintf("exit %d", c.code) {
			t.Fatalf("%s: %+v", id, st)
		}
	}

	// A running Go program: its uid, and its memory and CPU from /proc.
	a := nspec(t, r, "alloc", "", "bin/prog")
	a.Env = append(a.Env, "RUNNER_TEST_PROGRAM=alloc", "RUNNER_TEST_MIB=48")
	if err := r.Start(a); err != nil {
		t.Fatal(err)
	}
	var st Status
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, _ = r.Status("alloc")
		out, _ := os.ReadFile(filepath.Join(a.LogDir, "stdout.log"))
		if strings.Contains(string(out), "allocated 48") {
			st, _ = r.Status("alloc")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alloc: %+v %q", st, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.State != StateRunning || st.AppPid == 0 || !slices.Contains(st.Pids, st.AppPid) || st.MemBytes < 48<<20 || st.CPUSeconds <= 0 {
		t.Fatalf("alloc: %+v", st)
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", st.AppPid))
	if !strings.Contains(string(status), fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", uid, uid, uid, uid)) {
		t.Fatalf("not running as %d:\n%s", uid, status)
	}
	if p, _ := readProc(st.AppPid); p.ppid != st.ShimPid {
		t.Fatalf("the program's parent is %d, not its shim %d", p.ppid, st.ShimPid)
	}

	// What nested mode cannot do, or must not be asked.
	other := nspec(t, r, "other", "", "/bin/true")
	other.UID, other.GID = uint32(uid)+1, uint32(uid)+1
	none := nspec(t, r, "none", "", "/bin/true")
	none.Sandbox.Network = "none"
	for _, c := range []struct {
		spec Spec
		want string
	}{{other, "its own uid"}, {none, "network namespace"}} {
		if err := r.Start(c.spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.spec.ID, err, c.want)
		}
		if _, _, err := r.Exec(context.Background(), c.spec, []string{"/bin/true"}, time.Second, 10); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("exec %s: %v, want %q", c.spec.ID, err, c.want)
		}
	}
}

// A failing script is restarted up to its limit, then stays failed with
// its exit status; one that ends well is not restarted.
func TestNestedRestartPolicy(t *testing.T) {
	if !asNobody(t) {
		return
	}
	r, _ := newNestedRunner(t)
	s := nspec(t, r, "fail", "echo run; exit 3", "bin/x")
	s.Restart = Restart{OnFailure: true, Max: 2}
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, r, "fail", StateFailed)
	if st.Restarts != 2 || st.LastExit != "exit 3" {
		t.Fatalf("restarts %d, last exit %q", st.Restarts, st.LastExit)
	}
	if data, _ := os.ReadFile(filepath.Join(s.LogDir, "stdout.log")); strings.Count(string(data), "run") != 3 {
		t.Fatalf("ran %d times:\n%s", strings.Count(string(data), "run"), data)
	}
	ok := nspec(t, r, "ok", "", "bin/prog")
	ok.Env = append(ok.Env, "RUNNER_TEST_PROGRAM=exit", "RUNNER_TEST_CODE=0")
	ok.Restart = Restart{OnFailure: true, Max: 2}
	if err := r.Start(ok); err != nil {
		t.Fatal(err)
	}
	if st := waitState(t, r, "ok", StateExited); st.Restarts != 0 {
		t.Fatalf("a program that ended well was restarted %d times", st.Restarts)
	}
}

// Stop ends every process of the instance, those that left its session
// and their parent (a double fork, setsid) and ignore the stop signal
// too: a Go program's daemon, and a script's.
func TestNestedStopKillsDaemons(t *testing.T) {
	if !asNobody(t) {
		return
	}
	r, _ := newNestedRunner(t)
	g := nspec(t, r, "godaemon", "", "bin/prog")
	g.Env = append(g.Env, "RUNNER_TEST_PROGRAM=daemon")
	sh := nspec(t, r, "shdaemon", `( setsid sh -c 'trap "" TERM HUP; echo $$ > daemon.pid; exec sleep 1000' & ); exec sleep 1001`, "bin/x")
	for _, s := range []Spec{g, sh} {
		if err := r.Start(s); err != nil {
			t.Fatal(err)
		}
		d := pidFile(t, filepath.Join(s.Dir, "daemon.pid"))
		st := waitState(t, r, s.ID, StateRunning)
		p, _ := readProc(d.Pid)
		if p.ppid != st.ShimPid {
			t.Fatalf("%s: the daemon's parent is %d, not the shim %d (a subreaper)", s.ID, p.ppid, st.ShimPid)
		}
		if sid, _ := unix.Getsid(d.Pid); sid != d.Pid {
			t.Fatalf("%s: the daemon is in session %d, not one of its own", s.ID, sid)
		}
		if !slices.Contains(st.Pids, d.Pid) {
			t.Fatalf("%s: the daemon %d is not among the instance's processes %v", s.ID, d.Pid, st.Pids)
		}
		all := append(refs(st.Pids), d)
		start := time.Now()
		if err := r.Stop(s.ID); err != nil {
			t.Fatal(err)
		}
		waitGone(t, all...)
		st, _ = r.Status(s.ID)
		if st.State != StateStopped || len(st.Pids) != 0 || time.Since(start) < s.StopGrace {
			t.Fatalf("%s after stop: %+v in %v", s.ID, st, time.Since(start))
		}
	}
}

// A shim killed with SIGKILL takes every process of its instance with
// it, its daemon too; the instance is then failed, and not adopted.
func TestNestedShimKilled(t *testing.T) {
	if !asNobody(t) {
		return
	}
	r, _ := newNestedRunner(t)
	s := nspec(t, r, "victim", "", "bin/prog")
	s.Env = append(s.Env, "RUNNER_TEST_PROGRAM=daemon")
	s.Restart = Restart{OnFailure: true, Max: 5}
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	d := pidFile(t, filepath.Join(s.Dir, "daemon.pid"))
	st := waitState(t, r, "victim", StateRunning)
	all := append(refs(st.Pids), d)
	if len(all) < 2 {
		t.Fatalf("processes %+v", st)
	}
	if err := syscall.Kill(st.ShimPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, all...)
	after, _ := r.Status("victim")
	if after.State != StateFailed || !strings.Contains(after.LastExit, "supervisor ended") {
		t.Fatalf("after the shim died: %+v", after)
	}
	if ids, _ := r.Adopt(); len(ids) != 0 {
		t.Fatalf("adopted %v with the shim dead", ids)
	}
}

// The manager goes (its Runner is dropped without a stop); a new Runner
// on the same state adopts the running instance, the same processes,
// and stops it.
func TestNestedAdopt(t *testing.T) {
	if !asNobody(t) {
		return
	}
	r, _ := newNestedRunner(t)
	s := nspec(t, r, "loop", "while :; do sleep 0.1; done", "bin/x")
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	before := waitState(t, r, "loop", StateRunning)
	r.Close()
	r2, err := New(r.o)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	ids, err := r2.Adopt()
	if err != nil || len(ids) != 1 || ids[0] != "loop" {
		t.Fatalf("adopted %v, %v", ids, err)
	}
	st, _ := r2.Status("loop")
	if st.AppPid != before.AppPid || st.ShimPid != before.ShimPid || st.State != StateRunning {
		t.Fatalf("after adoption %+v, before %+v", st, before)
	}
	procs := refs(append(st.Pids, st.ShimPid))
	if err := r2.Stop("loop"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, procs...)
	if st, _ := r2.Status("loop"); st.State != StateStopped {
		t.Fatalf("after stop: %+v", st)
	}
}

// Exec runs a command in a running instance, as its uid, in its
// directory, with its environment, and answers with its output and exit
// status; a command for an instance that does not run runs once under a
// shim of its own, and what it leaves behind (a daemon) is killed when
// it ends.
func TestNestedExec(t *testing.T) {
	if !asNobody(t) {
		return
	}
	r, _ := newNestedRunner(t)
	s := nspec(t, r, "ex", "exec sleep 1000", "bin/x")
	s.Env = append(s.Env, "NESTED_TEST=seen")
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, r, "ex", StateRunning)
	out, code, err := r.Exec(context.Background(), s, []string{"/bin/sh", "-c", "id -u; pwd; echo $NESTED_TEST; exit 4"}, 10*time.Second, 4096)
	if want := fmt.Sprintf("%d\n%s\nseen\n", os.Geteuid(), s.Dir); err != nil || code != 4 || string(out) != want {
		t.Fatalf("exec: %q %d %v, want %q", out, code, err, want)
	}
	// The Go program, through its shim's control socket (the running
	// instance's environment, which env adds to).
	if out, code, err := r.Exec(context.Background(), s, []string{"/usr/bin/env", "RUNNER_TEST_PROGRAM=exit", "RUNNER_TEST_CODE=9", "bin/prog"}, 10*time.Second, 4096); err != nil || code != 9 || string(out) != "exiting with 9\n" {
		t.Fatalf("exec of a Go program: %q %d %v", out, code, err)
	}
	if now, _ := r.Status("ex"); now.AppPid != st.AppPid || now.State != StateRunning {
		t.Fatalf("the instance after exec: %+v", now)
	}
	start := time.Now()
	if _, _, err := r.Exec(context.Background(), s, []string{"/bin/sleep", "10"}, 200*time.Millisecond, 4096); err == nil || !strings.Contains(err.Error(), "did not finish within") || time.Since(start) > 5*time.Second {
		t.Fatalf("timeout: %v after %v", err, time.Since(start))
	}

	// Not running: a one-shot, whose daemon goes with it.
	one := nspec(t, r, "oneshot", "", "bin/prog")
	one.Env = append(one.Env, "RUNNER_TEST_PROGRAM=daemon")
	done := make(chan struct{})
	var oout []byte
	var oerr error
	go func() {
		defer close(done)
		oout, _, oerr = r.Exec(context.Background(), one, []string{"/bin/sh", "-c", "bin/prog & echo $! > bg.pid; while [ ! -s daemon.pid ]; do sleep 0.01; done; echo left"}, 10*time.Second, 4096)
	}()
	d := pidFile(t, filepath.Join(one.Dir, "daemon.pid"))
	bg := pidFile(t, filepath.Join(one.Dir, "bg.pid"))
	<-done
	if oerr != nil || !strings.Contains(string(oout), "left\n") {
		t.Fatalf("one-shot: %q %v", oout, oerr)
	}
	waitGone(t, d, bg)
}

// Pause stops every process of the instance (SIGSTOP), its daemon too,
// and says paused; Resume continues them; a paused instance stops.
func TestNestedPauseResume(t *testing.T) {
	if !asNobody(t) {
		return
	}
	r, _ := newNestedRunner(t)
	s := nspec(t, r, "p", "", "bin/prog")
	s.Env = append(s.Env, "RUNNER_TEST_PROGRAM=daemon")
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	d := pidFile(t, filepath.Join(s.Dir, "daemon.pid"))
	waitState(t, r, "p", StateRunning)
	states := func() map[int]byte {
		st, _ := r.Status("p")
		m := map[int]byte{}
		for _, pid := range st.Pids {
			p, _ := readProc(pid)
			m[pid] = p.state
		}
		return m
	}
	if err := r.Pause("p"); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Status("p"); st.State != StatePaused {
		t.Fatalf("state %s", st.State)
	}
	m := states()
	if _, ok := m[d.Pid]; !ok {
		t.Fatalf("the daemon %d is not among %v", d.Pid, m)
	}
	for pid, state := range m {
		if state != 'T' {
			t.Fatalf("paused, process %d is in state %c", pid, state)
		}
	}
	if err := r.Resume("p"); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Status("p"); st.State != StateRunning {
		t.Fatalf("state %s", st.State)
	}
	for pid, state := range states() {
		if state == 'T' {
			t.Fatalf("resumed, process %d is still stopped", pid)
		}
	}
	if err := r.Pause("p"); err != nil {
		t.Fatal(err)
	}
	st, _ := r.Status("p")
	all := append(refs(st.Pids), d)
	if err := r.Stop("p"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, all...)
	if st, _ := r.Status("p"); st.State != StateStopped {
		t.Fatalf("after stop: %+v", st)
	}
}

// Nested mode is for a manager that is not root (a glide-in inside
// another manager's sandbox): a root manager asking for it would run
// applications as root, unconfined, and is refused.
func TestNestedRefusedAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	_, err := New(Options{StateDir: t.TempDir(), Nested: true})
	if err == nil || !strings.Contains(err.Error(), "as root") {
		t.Fatalf("nested as root: %v", err)
	}
}
