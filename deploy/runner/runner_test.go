package runner

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain plays the shim and the exec helper when started as one, and
// the test programs: "spin" busies 4 threads, "alloc" touches 256 MiB.
func TestMain(m *testing.M) {
	MaybeShim()
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
		var keep [][]byte
		for range 256 {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = 1
			}
			keep = append(keep, b)
		}
		fmt.Println(len(keep))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func newRunner(t *testing.T) *Runner {
	t.Helper()
	parent := fmt.Sprintf("gridmgr-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	r, err := New(Options{StateDir: t.TempDir(), CgroupParent: parent})
	if err != nil {
		t.Skipf("no cgroups here: %v", err)
	}
	return r
}

func spec(t *testing.T, r *Runner, id string, argv ...string) Spec {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() { _ = r.Remove(id) })
	return Spec{ID: id, Dir: dir, Command: argv, Env: []string{"PATH=/usr/bin:/bin"}, LogDir: filepath.Join(dir, "logs"), StopGrace: 2 * time.Second}
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

// 4 busy threads under a 1-cpu quota get at most 1.1 cpus.
func TestCPULimit(t *testing.T) {
	r := newRunner(t)
	s := spec(t, r, "spin", self(t))
	s.Env = append(s.Env, "RUNNER_TEST_PROGRAM=spin")
	s.Limits.CPUs = 1
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	waitState(t, r, "spin", StateRunning)
	time.Sleep(300 * time.Millisecond)
	a, _ := r.Status("spin")
	start := time.Now()
	time.Sleep(2 * time.Second)
	b, _ := r.Status("spin")
	used := (b.CPUSeconds - a.CPUSeconds) / time.Since(start).Seconds()
	t.Logf("4 spinning threads with 1 cpu reserved used %.2f cpus", used)
	if used > 1.1 || used < 0.2 {
		t.Fatalf("used %.2f cpus with a 1-cpu limit", used)
	}
}

// A program that allocates past its memory limit is killed by the kernel
// and reported oom-killed; with the restart policy it is not restarted
// past its limit of restarts.
func TestMemoryLimitKills(t *testing.T) {
	r := newRunner(t)
	s := spec(t, r, "alloc", self(t))
	s.Env = append(s.Env, "RUNNER_TEST_PROGRAM=alloc")
	s.Limits.Mem = 64 << 20
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, r, "alloc", StateOOMKilled)
	if st.LastExit != "oom-killed" {
		t.Fatalf("last exit %q", st.LastExit)
	}
}

// A failing program is restarted up to its limit, then stays failed with
// its exit status; one that ends well is not restarted.
func TestRestartPolicy(t *testing.T) {
	r := newRunner(t)
	s := spec(t, r, "fail", "/bin/sh", "-c", "echo run; exit 3")
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
	ok := spec(t, r, "ok", "/bin/true")
	ok.Restart = Restart{OnFailure: true, Max: 2}
	if err := r.Start(ok); err != nil {
		t.Fatal(err)
	}
	if st := waitState(t, r, "ok", StateExited); st.Restarts != 0 {
		t.Fatalf("a program that ended well was restarted %d times", st.Restarts)
	}
}

// The manager goes (its Runner is dropped without a stop); a new Runner
// on the same state adopts the instance, still the same process, and
// stops it. A shim killed with SIGKILL leaves nothing running after Adopt.
func TestAdopt(t *testing.T) {
	r := newRunner(t)
	s := spec(t, r, "loop", "/bin/sh", "-c", "while :; do sleep 0.1; done")
	s.SetUser, s.UID, s.GID = os.Geteuid() == 0, 65534, 65534
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	before := waitState(t, r, "loop", StateRunning)
	if s.SetUser {
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", before.AppPid))
		if !strings.Contains(string(status), "Uid:\t65534") {
			t.Fatalf("not running as nobody:\n%s", status)
		}
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
	// The shim dies; its program is left alone in the cgroup.
	_ = syscall.Kill(before.ShimPid, syscall.SIGKILL)
	time.Sleep(100 * time.Millisecond)
	if ids, _ := r2.Adopt(); len(ids) != 0 {
		t.Fatalf("adopted %v with the shim dead", ids)
	}
	st, _ := r2.Status("loop")
	if st.State != StateFailed || len(st.Pids) != 0 {
		t.Fatalf("after the shim died: %+v", st)
	}
}

// Pause freezes, resume thaws; stop ends everything in the cgroup, the
// grace past a program that ignores its stop signal.
func TestPauseStop(t *testing.T) {
	r := newRunner(t)
	s := spec(t, r, "stubborn", "/bin/sh", "-c", "trap '' TERM; while :; do echo x; sleep 0.05; done")
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

// Exec runs inside the limits and as the user, returns output and exit
// status, and ends at its timeout; bad input is refused, naming it.
func TestExecAndBadInput(t *testing.T) {
	r := newRunner(t)
	s := spec(t, r, "ex", "/bin/true")
	out, code, err := r.Exec(context.Background(), "ex", s, []string{"/bin/sh", "-c", "cat /proc/self/cgroup | grep memory; exit 4"}, 10*time.Second, 4096)
	if err != nil || code != 4 || !strings.Contains(string(out), r.cgroupPath("ex")) {
		t.Fatalf("exec: %q %d %v", out, code, err)
	}
	start := time.Now()
	if _, _, err := r.Exec(context.Background(), "ex", s, []string{"/bin/sleep", "10"}, 200*time.Millisecond, 4096); err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("timeout: %v after %v", err, time.Since(start))
	}
	for _, c := range []struct {
		spec Spec
		want string
	}{
		{Spec{ID: "../x", Dir: s.Dir, Command: []string{"/bin/true"}}, "not an instance id"},
		{Spec{ID: "y", Dir: "/nonexistent", Command: []string{"/bin/true"}}, "working directory"},
		{Spec{ID: "z", Dir: s.Dir, Command: []string{"bin/nothing"}, LogDir: s.LogDir}, "does not exist"},
		{Spec{ID: "w", Dir: s.Dir, Command: []string{"no-such-program-here"}, LogDir: s.LogDir}, "PATH"},
	} {
		if err := r.Start(c.spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.spec, err, c.want)
		}
	}
}

// BenchmarkStart: Start of a short program until it runs, against
// exec.Command(...).Start() of the same program in the same run.
func BenchmarkStart(b *testing.B) {
	r, err := New(Options{StateDir: b.TempDir(), CgroupParent: fmt.Sprintf("gridmgr-bench-%d", os.Getpid())})
	if err != nil {
		b.Skip(err)
	}
	dir := b.TempDir()
	var raw, ours time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		c := exec.Command("/bin/sleep", "5")
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		raw += time.Since(t0)
		_ = c.Process.Kill()
		_ = c.Wait()
		id := fmt.Sprintf("b%d", i)
		t0 = time.Now()
		if err := r.Start(Spec{ID: id, Dir: dir, Command: []string{"/bin/sleep", "5"}, LogDir: filepath.Join(dir, id)}); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(t0)
		_ = r.Remove(id)
	}
	b.ReportMetric(float64(ours)/float64(b.N)/1e6, "ms/start")
	b.ReportMetric(float64(raw)/float64(b.N)/1e6, "ms/exec")
	b.ReportMetric(float64(ours-raw)/float64(b.N)/1e6, "ms-overhead")
}
