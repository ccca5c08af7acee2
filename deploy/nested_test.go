package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A nested executor (a glide-in's) runs as an ordinary user: as root,
// each test here runs itself again as nobody (asNobody) in a directory
// nobody owns, and passes if that run passes.

const nobody = 65534

// asNobody reports whether the test is to run here: as root it runs the
// test again as nobody and reports false once that run has passed (it
// fails the test otherwise); as any other user it reports true. What the
// run leaves running (a copy of the test binary) fails the test.
func asNobody(t *testing.T) bool {
	t.Helper()
	if os.Getenv("DEPLOY_TEST_NESTED_CHILD") != "" || os.Geteuid() != 0 {
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
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "deploy.test")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	left := func() []int {
		var pids []int
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && exe == bin {
				if stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(stat), ") Z ") {
					pids = append(pids, pid)
				}
			}
		}
		return pids
	}
	t.Cleanup(func() {
		for _, pid := range left() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	cmd := exec.Command(bin, "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1", "-test.timeout=3m")
	cmd.Env = append(os.Environ(), "DEPLOY_TEST_NESTED_CHILD=1", "TMPDIR="+filepath.Join(home, "tmp"), "HOME="+home)
	cmd.Dir = home
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	t.Logf("as nobody:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("as nobody: %v", err)
	}
	waitFor(t, "the end of every process of the run", func() bool { return len(left()) == 0 })
	return false
}

func newNestedExecEnv(t *testing.T, opts func(*ExecutorOptions)) *execEnv {
	t.Helper()
	env := &execEnv{dir: filepath.Join(t.TempDir(), "apps"), bundles: map[string]string{}}
	env.opts = func(o *ExecutorOptions) {
		o.Nested = true
		if opts != nil {
			opts(o)
		}
	}
	env.open(t)
	if env.ex.run == nil {
		t.Fatalf("a nested executor cannot run applications: %v", env.ex.runErr)
	}
	return env
}

// A glide-in's executor installs (files, class setup, install command,
// a port, environment), runs, answers status, values, health,
// operations, put, get and logs, pauses, resumes, stops and removes an
// instance as it does confined — as its own uid — and the removal gives
// the applications' directory back as it was.
func TestNestedExecutorRunsAnInstance(t *testing.T) {
	if !asNobody(t) {
		return
	}
	env := newNestedExecEnv(t, nil)
	sha := env.add(t, execManifest)
	before := env.digest(t)
	a, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice", CPUs: 1, Mem: 64 << 20}, sha)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.ex.Start(a.Id); err != nil {
		t.Fatal(err)
	}
	logSize := func() int64 {
		st, _ := os.Stat(filepath.Join(env.ex.logDir(a.Id), "stdout.log"))
		if st == nil {
			return 0
		}
		return st.Size()
	}
	waitFor(t, "output", func() bool { return logSize() > 20 })
	st, err := env.ex.Status(a.Id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != "running" || len(st.Pids) == 0 || st.Values["answer"] != "42" || st.Health != "healthy" {
		t.Fatalf("status %+v", st)
	}
	if uid := uint32(os.Geteuid()); st.Uid != uid || st.User != fmt.Sprintf("uid %d", uid) {
		t.Fatalf("runs as %q (%d), not the manager's own uid", st.User, st.Uid)
	}
	if _, err := env.ex.Pause(a.Id); err != nil {
		t.Fatal(err)
	}
	if st, _ := env.ex.Status(a.Id); st.State != "paused" {
		t.Fatalf("paused: %s", st.State)
	}
	for _, pid := range st.Pids {
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(stat), ") T ") {
			t.Fatalf("paused, process %d runs: %s", pid, stat)
		}
	}
	frozen := logSize()
	if _, err := env.ex.Resume(a.Id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "output after resume", func() bool { return logSize() > frozen })
	out, code, err := env.ex.Exec(a.Id, "echo", []string{"a", "b"})
	if err != nil || code != 0 || string(out) != "a b\n" {
		t.Fatalf("echo: %q %d %v", out, code, err)
	}
	if err := env.ex.Put(a.Id, "in/data.txt", []byte("payload")); err != nil {
		t.Fatal(err)
	}
	if data, size, err := env.ex.Get(a.Id, "out/install.txt", 0, 0); err != nil || string(data) != "installed\n" || size != 10 {
		t.Fatalf("get: %q %d %v", data, size, err)
	}
	data, _, err := env.ex.Logs(a.Id, false, 0, 0)
	if err != nil || !strings.HasPrefix(string(data), "hi gm1-1-aaaaaa.loop on ") {
		t.Fatalf("logs: %q %v", data, err)
	}
	if _, err := env.ex.Stop(a.Id); err != nil {
		t.Fatal(err)
	}
	if st, _ := env.ex.Status(a.Id); st.State != "stopped" || len(st.Pids) != 0 {
		t.Fatalf("stopped: %+v", st)
	}
	if _, err := env.ex.Start(a.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := env.ex.Remove(a.Id); err != nil { // stops it first
		t.Fatal(err)
	}
	if env.digest(t) != before {
		t.Fatal("the applications' directory was not restored")
	}
}

// The disk watcher stops a nested instance past its limit, as it does a
// confined one.
func TestNestedExecutorDiskLimit(t *testing.T) {
	if !asNobody(t) {
		return
	}
	changed := make(chan struct{}, 10)
	env := newNestedExecEnv(t, func(o *ExecutorOptions) {
		o.MaxInstanceBytes, o.DiskCheck = 8<<20, 50*time.Millisecond
		o.Changed = func() { changed <- struct{}{} }
	})
	app := t.TempDir()
	os.MkdirAll(filepath.Join(app, "bin"), 0o755)
	os.WriteFile(filepath.Join(app, ManifestName), []byte(`name = "filler"
version = "1"
[install]
dirs = ["out"]
[run]
command = ["/bin/sh", "-c", "dd if=/dev/zero of=out/fill bs=1M count=12 2>/dev/null; sleep 1000"]
`), 0o644)
	sha := env.addDir(t, app)
	before := env.digest(t)
	a, err := env.ex.Install(Grant{Reservation: "gm1-2-aaaaaa", Holder: "alice"}, sha)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.ex.Start(a.Id); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(20 * time.Second):
		t.Fatal("an instance past its disk limit was not stopped")
	}
	st, err := env.ex.Status(a.Id)
	if err != nil || st.State != "stopped" || !strings.Contains(st.LastExit, "more than the 8.0 MiB it may") || len(st.Pids) != 0 {
		t.Fatalf("after passing its limit: %+v %v", st, err)
	}
	if _, err := env.ex.Remove(a.Id); err != nil {
		t.Fatal(err)
	}
	if env.digest(t) != before {
		t.Fatal("the applications' directory differs after the removal")
	}
}
