package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

// execManifest is an application for the executor's tests: a shell loop
// with an install command, a port, an operation, values and data dirs.
const execManifest = `name = "loop"
version = "2"
class = "loops"
[install]
files = [{ from = "bin/run", to = "bin/run", mode = "0755" }]
dirs = ["in", "out"]
commands = [["/bin/sh", "-c", "echo installed > out/install.txt"]]
ports = ["http"]
[install.env]
GREETING = "hi ${INSTANCE} on ${PORT_HTTP}"
[shared]
dirs = ["cache"]
[run]
command = ["/bin/sh", "-c", "echo \"$GREETING\"; while :; do echo tick; sleep 0.1; done"]
stop_grace = "2s"
[health]
command = ["/bin/sh", "-c", "test -f out/install.txt"]
[[operation]]
name = "count"
command = ["/bin/sh", "-c", "ls out | wc -l"]
[[operation]]
name = "echo"
command = ["/bin/echo"]
args = true
[values]
command = ["/bin/sh", "-c", "echo 'answer 42'; echo 'undeclared 1'"]
[[values.value]]
name = "answer"
type = "int"
[data]
in = ["in"]
out = ["out"]
`

type execEnv struct {
	ex      *Executor
	dir     string
	bundles map[string]string
	opts    func(*ExecutorOptions)
}

func newExecEnv(t *testing.T) *execEnv {
	t.Helper()
	env := &execEnv{dir: filepath.Join(t.TempDir(), "apps"), bundles: map[string]string{}}
	env.open(t)
	return env
}

func (env *execEnv) open(t *testing.T) {
	t.Helper()
	o := ExecutorOptions{
		Dir: env.dir, Manager: "gm1", UIDFirst: 61800, UIDLast: 61849, DiskCheck: -1,
		CgroupParent: "gridmgr-test-" + filepath.Base(filepath.Dir(env.dir)),
		Bundle:       func(sha string) (string, bool) { p, ok := env.bundles[sha]; return p, ok },
	}
	if env.opts != nil {
		env.opts(&o)
	}
	ex, err := OpenExecutor(o)
	if err != nil {
		t.Fatal(err)
	}
	env.ex = ex
	t.Cleanup(func() {
		for _, id := range ex.ids(func(*Record) bool { return true }) {
			_, _ = ex.Remove(id)
		}
		ex.Close()
	})
}

// addDir packs the application in dir and makes it uploadable.
func (env *execEnv) addDir(t *testing.T, dir string) string {
	t.Helper()
	var buf bytes.Buffer
	if _, err := Pack(dir, &buf); err != nil {
		t.Fatal(err)
	}
	b, err := Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), b.SHA256+".gapp")
	os.WriteFile(p, buf.Bytes(), 0o644)
	env.bundles[b.SHA256] = p
	return b.SHA256
}

// add packs manifest (with the test files) and makes it uploadable.
func (env *execEnv) add(t *testing.T, manifest string) string {
	t.Helper()
	dir := appDir(t)
	os.WriteFile(filepath.Join(dir, ManifestName), []byte(manifest), 0o644)
	return env.addDir(t, dir)
}

func (env *execEnv) digest(t *testing.T) string {
	t.Helper()
	d, err := Digest(env.dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func canRun(t *testing.T, ex *Executor) {
	t.Helper()
	if ex.run == nil {
		t.Skipf("processes cannot run here: %v", ex.runErr)
	}
}

// Install and remove, with two instances of one class: the install
// command ran, ports were allocated, the class's shared directory lives
// while either instance does, and after both are removed the digest of
// the applications' directory is the one before.
func TestExecutorInstallRemove(t *testing.T) {
	env := newExecEnv(t)
	canRun(t, env.ex) // its install command needs the runner
	sha := env.add(t, execManifest)
	before := env.digest(t)
	a, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice", CPUs: 1, Mem: 64 << 20}, sha)
	if err != nil {
		t.Fatal(err)
	}
	if a.Id != "gm1-1-aaaaaa.loop" || a.Ports["http"] == 0 || a.Changes == 0 || a.State != "installed" {
		t.Fatalf("installed %+v", a)
	}
	if data, err := os.ReadFile(filepath.Join(env.ex.host.InstanceDir(a.Id), "out", "install.txt")); err != nil || string(data) != "installed\n" {
		if env.ex.run != nil {
			t.Fatalf("the install command did not run: %q %v", data, err)
		}
	}
	if _, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice"}, sha); err == nil || !strings.Contains(err.Error(), "installed already") {
		t.Fatalf("second install on one reservation: %v", err)
	}
	b, err := env.ex.Install(Grant{Reservation: "gm1-2-aaaaaa", Holder: "bob"}, sha)
	if err != nil {
		t.Fatal(err)
	}
	if b.Ports["http"] == a.Ports["http"] {
		t.Fatalf("both instances got port %d", a.Ports["http"])
	}
	shared := env.ex.host.ClassDir("loops")
	n, err := env.ex.Remove(a.Id)
	if err != nil || n == 0 {
		t.Fatalf("remove: %d, %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(shared, "cache")); err != nil {
		t.Fatalf("the class's shared directory went with the first of two instances: %v", err)
	}
	if _, err := env.ex.Remove(b.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(shared); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the class's shared directory outlived its last instance: %v", err)
	}
	if after := env.digest(t); after != before {
		t.Fatal("the applications' directory differs after install and remove")
	}
	if _, err := env.ex.Remove(b.Id); err == nil {
		t.Fatal("removing twice worked")
	}
}

// An installation cut short (a journal and no record, as a crash leaves
// it) is undone when the executor opens again; a complete one is kept.
func TestExecutorRecoversFromACrash(t *testing.T) {
	env := newExecEnv(t)
	canRun(t, env.ex) // its install command needs the runner
	sha := env.add(t, execManifest)
	before := env.digest(t)
	a, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice"}, sha)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := env.ex.Install(Grant{Reservation: "gm1-2-aaaaaa", Holder: "alice"}, sha)
	if err != nil {
		t.Fatal(err)
	}
	// The crash: the first one's record is not written yet.
	os.Remove(env.ex.recordPath(a.Id))
	env.open(t)
	if env.ex.get(a.Id) != nil {
		t.Fatal("the interrupted installation is still listed")
	}
	if env.ex.get(kept.Id) == nil {
		t.Fatal("the complete installation was lost")
	}
	if _, err := env.ex.Remove(kept.Id); err != nil {
		t.Fatal(err)
	}
	if env.digest(t) != before {
		t.Fatal("the host was not restored")
	}
}

// Bad bundles and unknown ones change nothing.
func TestExecutorRefusals(t *testing.T) {
	env := newExecEnv(t)
	before := env.digest(t)
	_, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa"}, strings.Repeat("0", 64))
	var de *Error
	if !errors.As(err, &de) || de.Code != wire.ErrorReply_CODE_NOT_FOUND {
		t.Fatalf("unknown bundle: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.gapp")
	os.WriteFile(bad, []byte("not a zip"), 0o644)
	env.bundles["bad"] = bad
	if _, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa"}, "bad"); !errors.As(err, &de) || de.Code != wire.ErrorReply_CODE_BAD_REQUEST {
		t.Fatalf("bad bundle: %v", err)
	}
	failing := strings.Replace(execManifest, `"echo installed > out/install.txt"`, `"echo no >&2; exit 3"`, 1)
	sha := env.add(t, failing)
	if _, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa"}, sha); err == nil {
		if env.ex.run != nil {
			t.Fatal("a failing install command was accepted")
		}
	} else if !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("failing install command: %v", err)
	}
	if env.ex.run != nil && env.digest(t) != before {
		t.Fatal("a refused install left changes")
	}
}

// Run and control an instance: start, status with its process data and
// values, pause (nothing is written while frozen), resume, an operation,
// put and get within the data directories, logs, stop, remove.
func TestExecutorRunsAnInstance(t *testing.T) {
	env := newExecEnv(t)
	canRun(t, env.ex)
	sha := env.add(t, execManifest)
	before := env.digest(t)
	a, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice", CPUs: 1, Mem: 64 << 20}, sha)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.ex.Start(a.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := env.ex.Start(a.Id); err == nil {
		t.Fatal("started twice")
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
	if st.State != "running" || len(st.Pids) == 0 || st.CpuLimit != 1 || st.MemLimit != 64<<20 || st.Values["answer"] != "42" || st.Values["undeclared"] != "" || st.Health != "healthy" {
		t.Fatalf("status %+v", st)
	}
	if st.User != fmt.Sprintf("uid %d", st.Uid) || st.Uid < 61800 || st.Uid > 61849 {
		t.Fatalf("runs as %q (%d)", st.User, st.Uid)
	}
	if _, err := env.ex.Pause(a.Id); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // let a write in flight land
	frozen := logSize()
	time.Sleep(500 * time.Millisecond)
	if logSize() != frozen {
		t.Fatal("a paused instance kept writing")
	}
	if st, _ := env.ex.Status(a.Id); st.State != "paused" {
		t.Fatalf("paused: %s", st.State)
	}
	if _, err := env.ex.Resume(a.Id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "output after resume", func() bool { return logSize() > frozen })
	out, code, err := env.ex.Exec(a.Id, "echo", []string{"a", "b"})
	if err != nil || code != 0 || string(out) != "a b\n" {
		t.Fatalf("echo: %q %d %v", out, code, err)
	}
	if _, _, err := env.ex.Exec(a.Id, "nope", nil); err == nil || !strings.Contains(err.Error(), "count, echo") {
		t.Fatalf("unknown operation: %v", err)
	}
	if err := env.ex.Put(a.Id, "in/data.txt", []byte("payload")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../x", "/etc/passwd", "bin/run", "out/x"} {
		if err := env.ex.Put(a.Id, p, []byte("x")); err == nil {
			t.Fatalf("put %s worked", p)
		}
	}
	if data, size, err := env.ex.Get(a.Id, "out/install.txt", 0, 0); err != nil || string(data) != "installed\n" || size != 10 {
		t.Fatalf("get: %q %d %v", data, size, err)
	}
	if _, _, err := env.ex.Get(a.Id, "in/data.txt", 0, 0); err == nil {
		t.Fatal("get outside data.out worked")
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
		t.Fatal("the host was not restored")
	}
}

// The end of a reservation removes its instances; a restart's reconcile
// removes those of reservations that ended meanwhile and re-adopts the
// running ones.
func TestExecutorReservationEnds(t *testing.T) {
	env := newExecEnv(t)
	canRun(t, env.ex)
	sha := env.add(t, execManifest)
	a, _ := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice"}, sha)
	b, _ := env.ex.Install(Grant{Reservation: "gm1-2-aaaaaa", Holder: "alice"}, sha)
	c, _ := env.ex.Install(Grant{Reservation: "gm1-3-aaaaaa", Holder: "alice"}, sha)
	if _, err := env.ex.Start(b.Id); err != nil {
		t.Fatal(err)
	}
	st, _ := env.ex.Status(b.Id)
	removed := env.ex.Ended([]string{"gm1-1-aaaaaa"})
	if env.ex.get(a.Id) != nil {
		t.Fatal("an ended reservation's instance stayed")
	}
	// It says what it removed, for the answer to the release (the
	// class's setup stays for the other instances: not every change is
	// undone).
	if len(removed) != 1 || removed[0].Id != a.Id || removed[0].App != a.App || removed[0].State != "installed" ||
		!removed[0].Removed || removed[0].Undone == 0 || removed[0].Error != "" {
		t.Fatalf("Ended said %v; installed %s", removed, a.Id)
	}
	env.open(t) // the manager restarts; b keeps running
	if got, _ := env.ex.Status(b.Id); got == nil || got.State != "running" || len(got.Pids) == 0 || got.Pids[0] != st.Pids[0] {
		t.Fatalf("after a restart: %+v (was %v)", got, st.Pids)
	}
	env.ex.Reconcile([]string{"gm1-2-aaaaaa"})
	if env.ex.get(c.Id) != nil {
		t.Fatal("reconcile kept an instance whose reservation ended")
	}
	if got, _ := env.ex.Status(b.Id); got.State != "running" {
		t.Fatalf("reconcile touched a live one: %s", got.State)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
