package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
)

// TestMain plays the test programs:
// "spin" busies 4 threads, "alloc" touches RUNNER_TEST_MIB MiB and
// waits, "report" prints what the sandbox lets it see and do (JSON),
// "exit" ends with status RUNNER_TEST_CODE, "daemon" leaves a daemon
// behind (nested_test.go).
func TestMain(m *testing.M) {
	switch os.Getenv("RUNNER_TEST_PROGRAM") {
	case "spin":
		runtime.GOMAXPROCS(4)
		for range 4 {
			go func() {
				for {
				}
			}()
		}
		select {}
	case "alloc":
		n, _ := strconv.Atoi(os.Getenv("RUNNER_TEST_MIB"))
		var keep [][]byte
		for range n {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = 1
			}
			keep = append(keep, b)
		}
		fmt.Println("allocated", len(keep))
		select {}
	case "report":
		report()
		os.Exit(0)
	case "idle": // started, and nothing else (TestShimGivesBackItsExecutable)
		select {}
	case "exit":
		n, _ := strconv.Atoi(os.Getenv("RUNNER_TEST_CODE"))
		fmt.Println("exiting with", n)
		os.Exit(n)
	case "daemon", "daemon1", "daemon2":
		daemon(os.Getenv("RUNNER_TEST_PROGRAM"))
	}
	os.Exit(m.Run())
}

// testUID is the uid (and gid) the runner's tests run programs as; a
// second one for a second tenant.
const testUID, otherUID = 61990, 61991

func newRunner(t *testing.T) *Runner {
	t.Helper()
	parent := fmt.Sprintf("gridmgr-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	r, err := New(Options{StateDir: t.TempDir(), CgroupParent: parent})
	if err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("applications need root: %v", err)
		}
		t.Fatal(err)
	}
	return r
}

// spec is an instance of group "g" in a new directory of its own (owned
// by uid, mode 0700, as the executor makes them) holding the test binary
// as bin/prog.
func spec(t *testing.T, r *Runner, id string, uid uint32, argv ...string) Spec {
	t.Helper()
	dir := filepath.Join(t.TempDir(), id)
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	copyFile(t, self(t), filepath.Join(dir, "bin", "prog"))
	chownTree(t, dir, uid)
	t.Cleanup(func() { _ = r.Remove(id, "g") })
	return Spec{ID: id, Group: "g", Dir: dir, Command: argv, UID: uid, GID: uid,
		Env:     []string{"PATH=/usr/bin:/bin", "HOME=" + dir},
		Sandbox: Sandbox{Writable: []string{dir}, Hostname: id},
		LogDir:  filepath.Join(t.TempDir(), "logs"), StopGrace: 2 * time.Second}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

func chownTree(t *testing.T, dir string, uid uint32) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(uid), int(uid))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func self(t *testing.T) string {
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func waitState(t *testing.T, r *Runner, id string, want State) Status {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := r.Status(id)
		if err == nil && st.State == want {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: state %q, want %q (%v)", id, st.State, want, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Two instances of one group, 4 busy threads each, under the group's
// 1-cpu quota get at most 1.1 cpus together.
func TestCPULimitIsTheGroups(t *testing.T) {
	r := newRunner(t)
	var ids []string
	for _, id := range []string{"spin1", "spin2"} {
		s := spec(t, r, id, testUID, "bin/prog")
		s.Env = append(s.Env, "RUNNER_TEST_PROGRAM=spin")
		s.Limits.CPUs = 1
		if err := r.Start(s); err != nil {
			t.Fatal(err)
		}
		waitState(t, r, id, StateRunning)
		ids = append(ids, id)
	}
	time.Sleep(300 * time.Millisecond)
	cpu := func() float64 {
		var sum float64
		for _, id := range ids {
			st, _ := r.Status(id)
			sum += st.CPUSeconds
		}
		return sum
	}
	a, start := cpu(), time.Now()
	time.Sleep(2 * time.Second)
	used := (cpu() - a) / time.Since(start).Seconds()
	t.Logf("two instances of 4 spinning threads with 1 cpu reserved used %.2f cpus", used)
	if used > 1.1 || used < 0.2 {
		t.Fatalf("used %.2f cpus with a 1-cpu limit", used)
	}
}

// Two instances of one group with 128 MiB: each takes 100 MiB, so
// together they pass the group's limit, and the kernel kills one; it is
// reported oom-killed.
func TestMemoryLimitIsTheGroups(t *testing.T) {
	r := newRunner(t)
	for _, id := range []string{"alloc1", "alloc2"} {
		s := spec(t, r, id, testUID, "bin/prog")
		s.Env = append(s.Env, "RUNNER_TEST_PROGRAM=alloc", "RUNNER_TEST_MIB=100")
		s.Limits.Mem = 128 << 20
		if err := r.Start(s); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		a, _ := r.Status("alloc1")
		b, _ := r.Status("alloc2")
		if a.State == StateOOMKilled || b.State == StateOOMKilled {
			if a.MemBytes+b.MemBytes > 128<<20 {
				t.Fatalf("together %d bytes past the limit", a.MemBytes+b.MemBytes)
			}
			killed := a
			if b.State == StateOOMKilled {
				killed = b
			}
			if killed.LastExit != "oom-killed" {
				t.Fatalf("last exit %q", killed.LastExit)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no instance killed: %+v\n%+v", a, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A failing program is restarted up to its limit, then stays failed with
// its exit status; one that ends well is not restarted.
func TestRestartPolicy(t *testing.T) {
	r := newRunner(t)
	s := spec(t, r, "fail", testUID, "/bin/sh", "-c", "echo run; exit 3")
	s.Restart = Restart{OnFailure: true, Max: 2}
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, r, "fail", StateFailed)
	if st.Restarts != 2 || st.LastExit != "exit 3" {
		t.Fatalf("restarts %d, last exit %q", st.Restarts, st.LastExit)
	}
	data, _ := os.ReadFile(filepath.Join(s.LogDir, "stdout.log"))
	if strings.Count(string(data), "run") != 3 {
		t.Fatalf("ran %d times:\n%s", strings.Count(string(data), "run"), data)
	}
	ok := spec(t, r, "ok", testUID, "/bin/true")
	ok.Restart = Restart{OnFailure: true, Max: 2}
	if err := r.Start(ok); err != nil {
		t.Fatal(err)
	}
	if st := waitState(t, r, "ok", StateExited); st.Restarts != 0 {
		t.Fatalf("a program that ended well was restarted %d times", st.Restarts)
	}
}

// The manager goes (its Runner is dropped without a stop); a new Runner
// on the same state adopts the instance, still the same process, as its
// uid. A shim killed with SIGKILL takes its program with it.
func TestAdopt(t *testing.T) {
	r := newRunner(t)
	s := spec(t, r, "loop", testUID, "/bin/sh", "-c", "while :; do sleep 0.1; done")
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	before := waitState(t, r, "loop", StateRunning)
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", before.AppPid))
	if !strings.Contains(string(status), fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", testUID, testUID, testUID, testUID)) ||
		!strings.Contains(string(status), "NoNewPrivs:\t1") || !strings.Contains(string(status), "CapEff:\t0000000000000000") {
		t.Fatalf("not running as %d without privileges:\n%s", testUID, status)
	}
	r2, err := New(r.o)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := r2.Adopt()
	if err != nil || len(ids) != 1 || ids[0] != "loop" {
		t.Fatalf("adopted %v, %v", ids, err)
	}
	if st, _ := r2.Status("loop"); st.AppPid != before.AppPid || st.State != StateRunning {
		t.Fatalf("after adoption %+v, before %+v", st, before)
	}
	_ = syscall.Kill(before.ShimPid, syscall.SIGKILL)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ := r2.Status("loop")
		if st.State == StateFailed && len(st.Pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the shim died: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ids, _ := r2.Adopt(); len(ids) != 0 {
		t.Fatalf("adopted %v with the shim dead", ids)
	}
}

// Pause freezes, resume thaws; stop ends everything in the instance, the
// grace past a program that ignores its stop signal.
func TestPauseStop(t *testing.T) {
	r := newRunner(t)
	s := spec(t, r, "stubborn", testUID, "/bin/sh", "-c", "trap '' TERM; (trap '' TERM; sleep 1000) & while :; do echo x; sleep 0.05; done")
	s.StopGrace = 300 * time.Millisecond
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	waitState(t, r, "stubborn", StateRunning)
	if err := r.Pause("stubborn"); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Status("stubborn"); st.State != StatePaused {
		t.Fatalf("state %s", st.State)
	}
	size := func() int64 { fi, _ := os.Stat(filepath.Join(s.LogDir, "stdout.log")); return fi.Size() }
	time.Sleep(100 * time.Millisecond)
	n := size()
	time.Sleep(300 * time.Millisecond)
	if size() != n {
		t.Fatal("a frozen program wrote")
	}
	if err := r.Resume("stubborn"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := r.Stop("stubborn"); err != nil {
		t.Fatal(err)
	}
	st, _ := r.Status("stubborn")
	if st.State != StateStopped || len(st.Pids) != 0 || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("after stop %+v in %v", st, time.Since(start))
	}
}

// A program that handles its stop signal ends at once, though it is the
// first process the shim started in its namespace.
func TestStopSignalReachesTheProgram(t *testing.T) {
	r := newRunner(t)
	s := spec(t, r, "polite", testUID, "/bin/sh", "-c", "trap 'echo bye; exit 0' TERM; echo ready; while :; do sleep 0.05; done")
	s.StopGrace = 10 * time.Second
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	waitState(t, r, "polite", StateRunning)
	// Stopped only once it has set its trap (a signal before that is
	// not handled, rightly; on a loaded machine the shell may not have
	// got that far when Start returns).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if data, _ := os.ReadFile(filepath.Join(s.LogDir, "stdout.log")); strings.Contains(string(data), "ready") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the program never said it was ready")
		}
		time.Sleep(5 * time.Millisecond) // polling a real process
	}
	start := time.Now()
	if err := r.Stop("polite"); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("stop took %v: the signal did not reach the program", time.Since(start))
	}
	if data, _ := os.ReadFile(filepath.Join(s.LogDir, "stdout.log")); !strings.Contains(string(data), "bye") {
		t.Fatalf("the program did not see its signal: %q", data)
	}
}

// What a program leaves behind has the whole grace to end, even when the
// program itself ends at once on the stop signal: a child that cleans up
// on SIGTERM (half a second here) finishes its cleanup, and the stop
// does not wait the rest of the grace once it has.
func TestStopGivesLeftoversTheirGrace(t *testing.T) {
	r := newRunner(t)
	s := spec(t, r, "leaves", testUID, "/bin/sh", "-c",
		"(trap 'sleep 0.5; echo done > cleaned; exit 0' TERM; echo ready; while :; do sleep 0.05; done) & wait")
	s.StopGrace = 10 * time.Second
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	waitState(t, r, "leaves", StateRunning)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if data, _ := os.ReadFile(filepath.Join(s.LogDir, "stdout.log")); strings.Contains(string(data), "ready") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child never said it was ready")
		}
		time.Sleep(5 * time.Millisecond) // polling a real process
	}
	start := time.Now()
	if err := r.Stop("leaves"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if data, err := os.ReadFile(filepath.Join(s.Dir, "cleaned")); err != nil || string(data) != "done\n" {
		t.Fatalf("the child's cleanup did not finish (%q, %v): it was killed before its grace, after %v", data, err, took)
	}
	if took < 500*time.Millisecond || took > 5*time.Second {
		t.Fatalf("stop took %v: want the child's half second, not the 10 s grace", took)
	}
	if st, _ := r.Status("leaves"); st.State != StateStopped || len(st.Pids) != 0 {
		t.Fatalf("after stop %+v", st)
	}
}

// Exec runs inside the limits and as the user, returns output and exit
// status, and ends at its timeout; in a running instance it joins its
// namespaces and sees its processes; bad input is refused, naming it.
func TestExecAndBadInput(t *testing.T) {
	r := newRunner(t)
	s := spec(t, r, "ex", testUID, "/bin/sh", "-c", "sleep 1000")
	out, code, err := r.Exec(context.Background(), s, []string{"/bin/sh", "-c", "id -u; cat /proc/self/cgroup | grep memory; exit 4"}, 10*time.Second, 4096)
	if err != nil || code != 4 || !strings.Contains(string(out), "/g/ex") || !strings.HasPrefix(string(out), strconv.Itoa(testUID)+"\n") {
		t.Fatalf("exec: %q %d %v", out, code, err)
	}
	start := time.Now()
	if _, _, err := r.Exec(context.Background(), s, []string{"/bin/sleep", "10"}, 200*time.Millisecond, 4096); err == nil || !strings.Contains(err.Error(), "did not finish within") || time.Since(start) > 5*time.Second {
		t.Fatalf("timeout: %v after %v", err, time.Since(start))
	}
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	waitState(t, r, "ex", StateRunning)
	// Running means the program (sh) was started; its sleep may not be
	// yet: pgrep fails (exit 1) until it is.
	for deadline := time.Now().Add(10 * time.Second); ; {
		out, code, err = r.Exec(context.Background(), s, []string{"/bin/sh", "-c", "ls /proc | grep -c '^[0-9]'; cat /proc/1/cmdline | tr '\\0' ' '; pgrep -x sleep"}, 10*time.Second, 4096)
		if err == nil && code == 0 {
			break
		}
		if err != nil || code != 1 || time.Now().After(deadline) {
			t.Fatalf("exec in the running instance: %q %d %v", out, code, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	lines := strings.Fields(string(out))
	// The shim (1), the program (sh), its sleep, and this exec's shell,
	// ls, grep...: few, and sleep among them.
	if n, _ := strconv.Atoi(lines[0]); n < 3 || n > 10 {
		t.Fatalf("the exec sees %d processes: %q", n, out)
	}
	for _, c := range []struct {
		spec Spec
		want string
	}{
		{Spec{ID: "../x", Group: "g", Dir: s.Dir, Command: []string{"/bin/true"}, UID: testUID, GID: testUID}, "not an instance id"},
		{Spec{ID: "x", Group: "a/b", Dir: s.Dir, Command: []string{"/bin/true"}, UID: testUID, GID: testUID}, "not an instance group"},
		{Spec{ID: "y", Group: "g", Dir: "/nonexistent", Command: []string{"/bin/true"}, UID: testUID, GID: testUID}, "working directory"},
		{Spec{ID: "r", Group: "g", Dir: s.Dir, Command: []string{"/bin/true"}, LogDir: s.LogDir}, "never run as root"},
		{Spec{ID: "z", Group: "g", Dir: s.Dir, Command: []string{"bin/nothing"}, LogDir: s.LogDir, UID: testUID, GID: testUID, Sandbox: s.Sandbox}, "does not exist"},
		{Spec{ID: "w", Group: "g", Dir: s.Dir, Command: []string{"no-such-program-here"}, LogDir: s.LogDir, UID: testUID, GID: testUID, Sandbox: s.Sandbox}, "PATH"},
		{Spec{ID: "v", Group: "g", Dir: s.Dir, Command: []string{"/bin/true"}, LogDir: s.LogDir, UID: testUID, GID: testUID, Sandbox: Sandbox{Network: "wifi"}}, "host or none"},
	} {
		if err := r.Start(c.spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.spec, err, c.want)
		}
		_ = r.Remove(c.spec.ID, "g")
	}
}

// sandboxReport is what the "report" program saw.
type sandboxReport map[string]string

func report() {
	out := sandboxReport{}
	try := func(name string, err error) {
		if err == nil {
			out[name] = "ok"
		} else {
			out[name] = err.Error()
		}
	}
	target := os.Getenv("RUNNER_TEST_TARGET") // a world-writable host directory
	hidden := os.Getenv("RUNNER_TEST_HIDDEN") // a hidden one
	try("write /etc", os.WriteFile("/etc/gridmgr-sandbox-test", nil, 0o644))
	try("write target", os.WriteFile(filepath.Join(target, "new"), []byte("x"), 0o644))
	try("overwrite target", os.WriteFile(filepath.Join(target, "victim"), []byte("x"), 0o644))
	try("chmod target", os.Chmod(filepath.Join(target, "victim"), 0o777))
	try("link target", os.Link(filepath.Join(target, "victim"), "linked"))
	try("write /tmp", os.WriteFile("/tmp/gridmgr-sandbox-test", []byte("x"), 0o644))
	try("write /dev/shm", os.WriteFile("/dev/shm/gridmgr-sandbox-test", []byte("x"), 0o644))
	try("write own dir", os.WriteFile("own", []byte("x"), 0o644))
	try("write /dev/null", os.WriteFile("/dev/null", []byte("x"), 0))
	_, err := os.Stat("/dev/sda")
	try("see /dev/sda", err)
	entries, err := os.ReadDir(hidden)
	if err == nil && len(entries) > 0 {
		err = fmt.Errorf("%d entries", len(entries))
	}
	try("hidden is empty", err)
	psk, err := os.ReadFile(os.Getenv("RUNNER_TEST_PSK"))
	if err == nil && len(psk) > 0 {
		err = fmt.Errorf("read %q", psk)
	}
	try("hidden file is empty", err)
	procs, _ := filepath.Glob("/proc/[0-9]*")
	out["processes"] = strconv.Itoa(len(procs))
	h, _ := os.Hostname()
	out["hostname"] = h
	ifs, _ := net.Interfaces()
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	slices.Sort(names)
	out["interfaces"] = strings.Join(names, ",")
	status, _ := os.ReadFile("/proc/self/status")
	for line := range strings.Lines(string(status)) {
		for _, k := range []string{"CapEff", "CapBnd", "NoNewPrivs", "Uid", "Groups"} {
			if v, ok := strings.CutPrefix(line, k+":"); ok {
				out[k] = strings.Join(strings.Fields(v), " ")
			}
		}
	}
	// Every supervisor's control socket it can see (the host's network:
	// abstract sockets are visible): ask each to run a command.
	// All at once: other managers on the host (tests running beside
	// this one) have standbys whose sockets never answer, and one by one
	// their deadlines would add up past the test's.
	var answered, tried atomic.Int32
	var wg sync.WaitGroup
	if data, err := os.ReadFile("/proc/net/unix"); err == nil {
		for line := range strings.Lines(string(data)) {
			f := strings.Fields(line)
			if len(f) < 8 || !strings.HasPrefix(f[7], "@gridmgr-runner-") {
				continue
			}
			tried.Add(1)
			wg.Add(1)
			go func(name string) {
				defer wg.Done()
				c, err := net.Dial("unix", name)
				if err != nil {
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(2 * time.Second))
				fmt.Fprintf(c, `{"argv":["/bin/sh","-c","echo pwned"],"timeout_ms":1000,"max_output":100}`+"\n")
				if b, _ := io.ReadAll(c); len(b) > 0 {
					answered.Add(1)
				}
			}(f[7])
		}
	}
	wg.Wait()
	out["control sockets"] = fmt.Sprintf("%d answered of %d", answered.Load(), tried.Load())
	err = syscall.Kill(1, syscall.SIGKILL)
	try("kill the shim", err)
	err = syscall.Kill(-1, 0)
	try("signal everyone", err)
	data, _ := json.Marshal(out)
	os.Stdout.Write(data)
}

// What a program sees and may do in its sandbox: the host read-only, a
// private /tmp and /dev/shm, a /dev without disks, the data dir hidden,
// its own directory writable, its own processes only, no privileges, and
// with network "none" only a loopback interface.
func TestSandbox(t *testing.T) {
	r := newRunner(t)
	base := fmt.Sprintf("/var/lib/gridmgr-sandbox-test-%d", os.Getpid())
	target := filepath.Join(base, "world-writable")
	hidden := filepath.Join(base, "data")
	for _, d := range []string{target, hidden} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(target, 0o1777)
	os.WriteFile(filepath.Join(target, "victim"), []byte("ours"), 0o666)
	os.Chmod(filepath.Join(target, "victim"), 0o666)
	os.WriteFile(filepath.Join(hidden, "identity.key"), []byte("secret"), 0o600)
	psk := filepath.Join(base, "swarm.key")
	os.WriteFile(psk, []byte("the grid's key"), 0o644)
	// A running instance whose supervisor's control socket the report
	// program will find.
	victim := spec(t, r, "victim", otherUID, "/bin/sh", "-c", "sleep 1000")
	if err := r.Start(victim); err != nil {
		t.Fatal(err)
	}
	for _, network := range []string{"host", "none"} {
		t.Run(network, func(t *testing.T) {
			s := spec(t, r, "rep-"+network, testUID, "bin/prog")
			s.Sandbox.Hide = []string{hidden, psk}
			s.Sandbox.Network = network
			s.Env = append(s.Env, "RUNNER_TEST_PROGRAM=report", "RUNNER_TEST_TARGET="+target, "RUNNER_TEST_HIDDEN="+hidden, "RUNNER_TEST_PSK="+psk)
			out, code, err := r.Exec(context.Background(), s, []string{"bin/prog"}, 30*time.Second, 1<<20)
			if err != nil || code != 0 {
				t.Fatalf("%q %d %v", out, code, err)
			}
			var rep sandboxReport
			if err := json.Unmarshal(out, &rep); err != nil {
				t.Fatalf("%q: %v", out, err)
			}
			t.Logf("%v", rep)
			want := map[string]string{
				"write /etc": "read-only file system", "write target": "read-only file system",
				"overwrite target": "read-only file system", "chmod target": "read-only file system",
				"link target": "cross-device link", "write /tmp": "ok", "write /dev/shm": "ok", "write own dir": "ok",
				"write /dev/null": "ok", "see /dev/sda": "no such file", "hidden is empty": "ok", "hidden file is empty": "ok",
				"hostname": "rep-" + network, "CapEff": "0000000000000000", "CapBnd": "0000000000000000", "NoNewPrivs": "1",
				"Uid": fmt.Sprintf("%d %d %d %d", testUID, testUID, testUID, testUID), "Groups": "",
				"kill the shim": "operation not permitted", "signal everyone": "no such process",
			}
			if network == "none" {
				want["interfaces"] = "lo"
				want["control sockets"] = "0 answered of 0"
			} else {
				want["control sockets"] = "0 answered of "
				if rep["control sockets"] == "0 answered of 0" {
					t.Errorf("saw no supervisor's control socket: the test proves nothing")
				}
			}
			for k, v := range want {
				if !strings.Contains(rep[k], v) {
					t.Errorf("%s: %q, want %q", k, rep[k], v)
				}
			}
			if n, _ := strconv.Atoi(rep["processes"]); n > 3 {
				t.Errorf("the program sees %s processes", rep["processes"])
			}
			if network == "host" && !strings.Contains(rep["interfaces"], "lo") {
				t.Errorf("interfaces %q", rep["interfaces"])
			}
		})
	}
	for _, p := range []string{"/etc/gridmgr-sandbox-test", filepath.Join(target, "new"), "/tmp/gridmgr-sandbox-test", "/dev/shm/gridmgr-sandbox-test"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was written on the host", p)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(target, "victim")); string(data) != "ours" {
		t.Errorf("the victim holds %q", data)
	}
	if st, _ := os.Stat(filepath.Join(target, "victim")); st.Mode().Perm() != 0o666 {
		t.Errorf("the victim's mode is %v", st.Mode())
	}
}

// Two tenants (two groups, two uids): neither sees, reads or signals the
// other's processes or files.
func TestTenantsApart(t *testing.T) {
	r := newRunner(t)
	a := spec(t, r, "tenant-a", testUID, "/bin/sh", "-c", "echo mine > secret; chmod 600 secret; sleep 1001")
	b := spec(t, r, "tenant-b", otherUID, "/bin/sh", "-c", "sleep 1002")
	b.Group = "h"
	t.Cleanup(func() { _ = r.Remove("tenant-b", "h") })
	for _, s := range []Spec{a, b} {
		if err := r.Start(s); err != nil {
			t.Fatal(err)
		}
		waitState(t, r, s.ID, StateRunning)
	}
	// Running is the shell; under load it may not have started its sleep
	// yet, and ps in b would show b's shell twice (its child between fork
	// and exec). Polling real processes, not timing.
	deadline := time.Now().Add(15 * time.Second)
	for {
		a1, _ := exec.Command("pgrep", "-f", "^sleep 1001$").Output()
		b1, _ := exec.Command("pgrep", "-f", "^sleep 1002$").Output()
		if len(a1) > 0 && len(b1) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the tenants' programs did not start their sleeps")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ast, _ := r.Status("tenant-a")
	probe := fmt.Sprintf("kill -9 %d 2>&1; ls %s 2>&1; cat %s/secret 2>&1; pkill -9 -f 'sleep 100[1]' || echo 'found none to kill'; ps -e -o args=", ast.AppPid, a.Dir, a.Dir)
	out, _, err := r.Exec(context.Background(), b, []string{"/bin/sh", "-c", probe}, 10*time.Second, 4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tenant b tried: %s", out)
	if st, _ := r.Status("tenant-a"); st.State != StateRunning || st.AppPid != ast.AppPid {
		t.Fatalf("tenant a after b's attempt: %+v", st)
	}
	if strings.Contains(string(out), "mine") || !strings.Contains(string(out), "No such file") {
		t.Fatalf("tenant b saw tenant a's files: %s", out)
	}
	// ps in b's instance lists b's own processes and none of a's (nor the
	// host's): b's supervisor, its program and this command.
	if strings.Contains(string(out), "\nsleep 1001") || !strings.Contains(string(out), "\nsleep 1002") || !strings.Contains(string(out), "found none to kill") {
		t.Fatalf("tenant b's ps:\n%s", out)
	}
	if host, _ := exec.Command("pgrep", "-f", "sleep 1001").Output(); len(host) == 0 {
		t.Fatal("the test proves nothing: the host sees no sleep 1001 either")
	}
	// Even given the path (a shared parent), a's directory is a's.
	if err := os.Chmod(filepath.Dir(a.Dir), 0o755); err != nil {
		t.Fatal(err)
	}
	b.ID = "tenant-b2" // not running: a sandbox of its own, as b's
	b.Sandbox.ReadOnly = []string{filepath.Dir(a.Dir)}
	t.Cleanup(func() { _ = r.Remove("tenant-b2", "h") })
	out, _, _ = r.Exec(context.Background(), b, []string{"/bin/sh", "-c", "ls " + a.Dir + " 2>&1; cat " + a.Dir + "/secret 2>&1"}, 10*time.Second, 4096)
	if strings.Contains(string(out), "mine") || !strings.Contains(string(out), "Permission denied") {
		t.Fatalf("tenant b read tenant a's directory: %s", out)
	}
}

// A host where applications cannot be confined says why, and New fails:
// here, a manager that is not root.
func TestNotRootRefuses(t *testing.T) {
	if os.Getenv("RUNNER_TEST_NOT_ROOT") != "" {
		_, err := New(Options{StateDir: t.TempDir(), CgroupParent: "gridmgr-test-notroot"})
		fmt.Print(err)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to become another user")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755) // t.TempDir makes its parent 0700
	copyFile(t, self(t), filepath.Join(dir, "runner.test"))
	cmd := exec.Command(filepath.Join(dir, "runner.test"), "-test.run", "^TestNotRootRefuses$")
	cmd.Env = append(os.Environ(), "RUNNER_TEST_NOT_ROOT=1", "TMPDIR="+os.TempDir())
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), "run the manager as root to run them") {
		t.Fatalf("as nobody: %s (%v)", out, err)
	}
}

// The standby: the runner keeps one ready once it was used, and a
// standby whose runner went away ends.
func TestStandby(t *testing.T) {
	r := newRunner(t)
	s := spec(t, r, "one", testUID, "/bin/true")
	if _, _, err := r.Exec(context.Background(), s, []string{"/bin/true"}, 10*time.Second, 10); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		sb := r.spare
		r.mu.Unlock()
		if sb != nil {
			sb.conn.Close() // as when the manager dies
			select {
			case <-sb.done:
				return
			case <-time.After(10 * time.Second):
				t.Fatal("a standby outlived its runner")
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no spare standby after a use")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An instance starts in a group while the group's last other instance is
// removed (a job's next one on the same reservation): the start never
// fails for a cgroup removed under it, and the group keeps its limits.
func TestStartWhileTheGroupIsRemoved(t *testing.T) {
	r := newRunner(t)
	// the group's cgroup is made, then the instance's 200 ms later:
	// long enough for the removal beside it to delete the group's
	r.testCgroupPause = 200 * time.Millisecond
	limit := func() string {
		p := filepath.Join(v1Root, "memory", r.groupPath("g"), "memory.limit_in_bytes")
		if r.version == 2 {
			p = filepath.Join("/sys/fs/cgroup", r.groupPath("g"), "memory.max")
		}
		b, _ := os.ReadFile(p)
		return strings.TrimSpace(string(b))
	}
	start := func(id string) Spec {
		s := spec(t, r, id, testUID, "/bin/sh", "-c", "sleep 30")
		s.Limits.Mem = 256 << 20
		return s
	}
	prev := start("grp0")
	if err := r.Start(prev); err != nil {
		t.Fatal(err)
	}
	waitState(t, r, "grp0", StateRunning)
	for i := 1; i <= 8; i++ {
		next := start(fmt.Sprintf("grp%d", i))
		var wg sync.WaitGroup
		var removeErr, startErr error
		wg.Add(2)
		go func() { defer wg.Done(); removeErr = r.Remove(prev.ID, "g") }()
		go func() { defer wg.Done(); startErr = r.Start(next) }()
		wg.Wait()
		if removeErr != nil || startErr != nil {
			t.Fatalf("round %d: remove %v, start %v", i, removeErr, startErr)
		}
		waitState(t, r, next.ID, StateRunning)
		if got := limit(); got != strconv.Itoa(256<<20) {
			t.Fatalf("round %d: the group's memory limit is %q while %s runs in it", i, got, next.ID)
		}
		prev = next
	}
}

// The manager goes while a supervisor makes an instance's sandbox (before
// the program runs, before the supervisor has written anything), and comes
// back at once: its new Runner must take the instance for a live one — adopt
// it, refuse to start it a second time — not for the remains of a dead one.
// The instance then runs, once.
func TestManagerGoesWhileStarting(t *testing.T) {
	r := newRunner(t)
	r.testCgroupPause = 2 * time.Second // the supervisor waits inside its preparation
	s := spec(t, r, "slow", testUID, "/bin/sh", "-c", "sleep 30")
	started := make(chan error, 1)
	go func() { started <- r.Start(s) }()
	deadline := time.Now().Add(10 * time.Second)
	for { // polling real processes: the spec is written while the supervisor prepares
		if _, err := os.Stat(filepath.Join(r.dir("slow"), "spec.json")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no spec written")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r2, err := New(r.o) // the manager, restarted
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := r2.Adopt(); err != nil || len(ids) != 1 || ids[0] != "slow" {
		t.Fatalf("while its supervisor prepares, the restarted runner adopted %v (%v)", ids, err)
	}
	if err := r2.Start(s); err == nil || !strings.Contains(err.Error(), "running already") {
		t.Fatalf("a second start while the first prepares: %v", err)
	}
	if st, _ := r2.Status("slow"); st.State != StateStarting {
		t.Fatalf("while its supervisor prepares: %+v", st)
	}
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	waitState(t, r2, "slow", StateRunning)
}

// A program that ends well while its state is being looked at is seen
// to have ended well: its supervisor writes the last state and exits
// between the moment the state is read and the moment the supervisor is
// looked for. Status and a restarted manager's Adopt both see "exited",
// not a supervisor that ended unexpectedly (which the job layer would
// take for a lost host), and Adopt does not overwrite what the
// supervisor wrote.
func TestProgramEndsWhileLookedAt(t *testing.T) {
	for _, how := range []string{"status", "adopt"} {
		t.Run(how, func(t *testing.T) {
			r := newRunner(t)
			s := spec(t, r, "brief", testUID, "/bin/sh", "-c", "while [ ! -e go ]; do sleep 0.02; done; exit 0")
			if err := r.Start(s); err != nil {
				t.Fatal(err)
			}
			running := waitState(t, r, "brief", StateRunning)
			hooked := false
			stateRead = func(id string) {
				if hooked || id != "brief" {
					return
				}
				hooked = true
				if err := os.WriteFile(filepath.Join(s.Dir, "go"), nil, 0o644); err != nil {
					t.Error(err)
				}
				deadline := time.Now().Add(15 * time.Second)
				for procStart(running.ShimPid) != 0 { // polling a real process's end
					if time.Now().After(deadline) {
						t.Error("the supervisor did not end")
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			defer func() { stateRead = nil }()
			if how == "adopt" {
				r2, err := New(r.o)
				if err != nil {
					t.Fatal(err)
				}
				if ids, err := r2.Adopt(); err != nil || len(ids) != 0 {
					t.Fatalf("adopted %v (%v)", ids, err)
				}
				r = r2
			}
			st, err := r.Status("brief")
			if !hooked || err != nil || st.State != StateExited || st.LastExit != "exit 0" {
				t.Fatalf("a program that ended well while looked at: %+v (%v; hook ran: %v)", st, err, hooked)
			}
		})
	}
}

// Status reads an instance's CPU time and memory from the files that
// hold them (group1.usage): the same figures containerd's Stat gives,
// for a program holding 48 MiB it wrote and then idle.
func TestUsageIsStats(t *testing.T) {
	r := newRunner(t)
	if r.version != 1 {
		t.Skip("cgroup v1 only: v2 reads them through containerd")
	}
	s := spec(t, r, "holds", testUID, "bin/prog")
	s.Env = append(s.Env, "RUNNER_TEST_PROGRAM=alloc", "RUNNER_TEST_MIB=48")
	s.Limits.Mem = 256 << 20
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	var st Status
	waitFor := time.Now().Add(15 * time.Second)
	for {
		st, _ = r.Status("holds")
		if st.MemBytes >= 48<<20 {
			break
		}
		if time.Now().After(waitFor) {
			t.Fatalf("it never held 48 MiB: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // it idles from here on
	ss, err := r.readSpec("holds")
	if err != nil {
		t.Fatal(err)
	}
	g, err := r.openGroup("holds", ss)
	if err != nil {
		t.Fatal(err)
	}
	cpu, mem, err := g.usage()
	if err != nil {
		t.Fatal(err)
	}
	full, err := g.(*group1).cg.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		t.Fatal(err)
	}
	wantMem := int64(full.Memory.Usage.Usage) - int64(full.Memory.TotalInactiveFile)
	if d := mem - wantMem; d > 1<<20 || d < -(1<<20) {
		t.Errorf("memory %d bytes, Stat says %d", mem, wantMem)
	}
	if d := int64(full.CPU.Usage.Total) - int64(cpu); cpu == 0 || d < 0 || d > int64(50*time.Millisecond) {
		t.Errorf("CPU %d ns, Stat says %d just after", cpu, full.CPU.Usage.Total)
	}
	if _, err := r.Status("holds"); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove("holds", s.Group); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.usage(); err == nil {
		t.Error("the usage of a cgroup removed was read")
	}
}
