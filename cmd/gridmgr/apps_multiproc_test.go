package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/deploy"
	"github.com/gridmgr/gridmgr/deploy/deploytest"
)

// appsManager runs `gridmgr run` as a process of its own, to be killed
// with SIGKILL and started again on the same data dir.
type appsManager struct {
	t    *testing.T
	bin  string
	dir  string
	cmd  *exec.Cmd
	env  []string
	data string
}

func newAppsManager(t *testing.T, bin string) *appsManager {
	dir := t.TempDir()
	writeFile(t, dir, "m.toml", "name = \"mp\"\ndata_dir = \"data\"\nlisten = [\"/ip4/127.0.0.1/tcp/0\"]\n[resources]\ncpus = 4\nmemory = \"4GiB\"\n")
	m := &appsManager{t: t, bin: bin, dir: dir, data: filepath.Join(dir, "data"),
		env: append(os.Environ(), "GRIDMGR_CLIENT_KEY="+filepath.Join(dir, "client.key"))}
	t.Cleanup(func() {
		m.kill()
		// What a test left running: stop it through a last manager.
		m.start()
		out := m.cli("app", "list", "--json")
		var rep struct{ Instances []struct{ Id string } }
		_ = json.Unmarshal([]byte(out), &rep)
		for _, i := range rep.Instances {
			m.cli("app", "remove", i.Id)
		}
		m.kill()
	})
	return m
}

func (m *appsManager) start() {
	m.t.Helper()
	_ = os.Remove(filepath.Join(m.data, daemon.AddrFile))
	m.cmd = exec.Command(m.bin, "run", "-c", filepath.Join(m.dir, "m.toml"), "--log-level", "warn")
	m.cmd.Dir = m.dir
	m.cmd.Stderr = &syncBuf{}
	if err := m.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(m.data, daemon.AddrFile)); err == nil {
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("the manager did not start: %s", m.cmd.Stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill is kill -9.
func (m *appsManager) kill() {
	if m.cmd != nil && m.cmd.ProcessState == nil {
		_ = m.cmd.Process.Signal(syscall.SIGKILL)
		_ = m.cmd.Wait()
	}
}

// cli runs a gridmgr command against the manager and returns its stdout.
func (m *appsManager) cli(args ...string) string {
	m.t.Helper()
	out, _ := m.cliErr(args...)
	return out
}

func (m *appsManager) cliErr(args ...string) (string, error) {
	full := append(append([]string{}, args...), "-d", m.data)
	c := exec.Command(m.bin, full...)
	c.Dir, c.Env = m.dir, m.env
	var stderr syncBuf
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		m.t.Logf("gridmgr %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), err
}

func (m *appsManager) reserve() string {
	m.t.Helper()
	out, err := m.cliErr("reserve", "--cpus", "1", "--mem", "128MiB", "--commit", "--lease", "1h", "--json")
	if err != nil {
		m.t.Fatal(err)
	}
	var r struct{ Id string }
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		m.t.Fatalf("reserve: %v: %s", err, out)
	}
	return r.Id
}

func (m *appsManager) status(id string) (state string, pids []int32) {
	out, err := m.cliErr("app", "status", "--json", id)
	if err != nil {
		return "", nil
	}
	var rep struct {
		Instances []struct {
			State string
			Pids  []int32
		}
	}
	_ = json.Unmarshal([]byte(out), &rep)
	if len(rep.Instances) == 0 {
		return "", nil
	}
	return rep.Instances[0].State, rep.Instances[0].Pids
}

func packApp(t *testing.T, manifest, script string) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, deploy.ManifestName, manifest)
	writeFile(t, dir, "run.sh", script)
	out := filepath.Join(t.TempDir(), "app.gapp")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deploy.Pack(dir, f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return out
}

// The manager is killed with SIGKILL while an application runs, while one
// installs and while one is being removed. Started again, it re-adopts
// the running one (same process), has undone the interrupted install
// entirely, and the interrupted removal is either complete or undone by a
// second remove; in the end the applications' directory is as before.
func TestAppsSurviveKill9(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("builds the binary, runs a manager process; running applications needs root")
	}
	m := newAppsManager(t, buildBinary(t))
	m.start()
	appsDir := filepath.Join(m.data, daemon.AppsDir)
	// What installs change (the uploaded bundles are a cache, kept an hour
	// for a reinstall, and not counted).
	host := func() (string, error) {
		var dirs []string
		for _, d := range []string{"instances", "classes", "state", "logs", "run"} {
			dirs = append(dirs, filepath.Join(appsDir, d))
		}
		return deploy.Digest(dirs...)
	}
	before, err := host()
	if err != nil {
		t.Fatal(err)
	}

	// 1. Running: the app outlives the manager and is re-adopted.
	loop := packApp(t, "name = \"loop\"\nversion = \"1\"\n[install]\nfiles = [{ from = \"run.sh\", mode = \"0755\" }]\n[run]\ncommand = [\"/bin/sh\", \"run.sh\"]\nstop_grace = \"5s\"\n",
		"trap '' TERM\nwhile :; do echo tick; sleep 0.1; done\n")
	r1 := m.reserve()
	m.cli("app", "install", "--start", r1, loop)
	state, pids := m.status(r1 + ".loop")
	if state != "running" || len(pids) == 0 {
		t.Fatalf("before the kill: %s %v", state, pids)
	}
	m.kill()
	if err := syscall.Kill(int(pids[0]), 0); err != nil {
		t.Fatalf("the app died with its manager: %v", err)
	}
	m.start()
	if st, p := m.status(r1 + ".loop"); st != "running" || len(p) == 0 || p[0] != pids[0] {
		t.Fatalf("after the restart: %s %v, was %v", st, p, pids)
	}

	// 2. Installing: killed while its install command runs.
	slow := packApp(t, "name = \"slow\"\nversion = \"1\"\n[install]\nfiles = [{ from = \"run.sh\", mode = \"0755\" }]\ncommands = [[\"/bin/sh\", \"-c\", \"touch started; sleep 30\"]]\n[run]\ncommand = [\"/bin/sh\", \"run.sh\"]\n",
		"sleep 1000\n")
	r2 := m.reserve()
	go m.cliErr("app", "install", r2, slow)
	started := filepath.Join(appsDir, "instances", r2+".slow", "started")
	waitFile(t, started)
	m.kill()
	m.start()
	if st, _ := m.status(r2 + ".slow"); st != "" {
		t.Fatalf("the interrupted install is listed: %s", st)
	}
	if _, err := os.Stat(filepath.Join(appsDir, "instances", r2+".slow")); !os.IsNotExist(err) {
		t.Fatalf("the interrupted install left its directory: %v", err)
	}

	// 3. Removing: killed while the app (which ignores SIGTERM) has its
	// stop grace; a second remove finishes.
	go m.cliErr("app", "remove", r1+".loop")
	time.Sleep(time.Second)
	m.kill()
	m.start()
	if st, _ := m.status(r1 + ".loop"); st != "" {
		if _, err := m.cliErr("app", "remove", r1+".loop"); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(int(pids[0]), 0); err == nil {
		t.Fatalf("the removed app's process %d still runs", pids[0])
	}
	after, err := host()
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatal("the applications' directory differs from before")
	}
}

func waitFile(t *testing.T, p string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(p); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A hostile application (deploy/deploytest: every hook tries to write,
// overwrite, chmod and hard-link outside its instance and to read the
// manager's key) under a real manager process that is killed with -9
// while the application installs, and again while it runs: after the
// restarts and the removal, every place outside the instance is as it
// was, and the application's own reports show it never got out.
func TestHostileAppAndKill9(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("builds the binary, runs a manager process; running applications needs root")
	}
	m := newAppsManager(t, buildBinary(t))
	m.start()
	appsDir := filepath.Join(m.data, daemon.AppsDir)
	targets, watch := deploytest.Host(t, m.data)
	for _, d := range []string{"instances", "classes", "state", "logs"} {
		watch = append(watch, filepath.Join(appsDir, d))
	}
	digest := func() string {
		d, err := deploy.Digest(watch...)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	pack := func(sleep int) string {
		out := filepath.Join(t.TempDir(), "evil.gapp")
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := deploy.Pack(deploytest.App(t, targets, m.data, sleep), f); err != nil {
			t.Fatal(err)
		}
		f.Close()
		return out
	}
	before := digest()

	// Killed while its install command runs (it has tried everything and
	// sleeps): the restart undoes the installation.
	r1 := m.reserve()
	go m.cliErr("app", "install", r1, pack(30))
	waitFor(t, func() bool {
		data, _ := os.ReadFile(filepath.Join(appsDir, "instances", r1+".evil", "out", "report-install"))
		return strings.Contains(string(data), "done install")
	})
	m.kill()
	m.start()
	if st, _ := m.status(r1 + ".evil"); st != "" {
		t.Fatalf("the interrupted install is listed: %s", st)
	}
	if d := digest(); d != before {
		t.Fatal("after an install killed half-way, a place outside the instance differs")
	}

	// Installed and running, its operation and values asked; killed;
	// re-adopted; removed.
	r2 := m.reserve()
	m.cli("app", "install", "--start", r2, pack(0))
	id := r2 + ".evil"
	if out, err := m.cliErr("app", "exec-op", id, "again"); err != nil {
		t.Fatalf("operation: %v %s", err, out)
	}
	if out := m.cli("app", "status", id); !strings.Contains(out, "value      answer = 42") {
		t.Fatalf("values:\n%s", out)
	}
	waitFor(t, func() bool {
		out, _ := m.cliErr("app", "get", id, "-", "out/report-run")
		return strings.Contains(out, "done run")
	})
	state, pids := m.status(id)
	m.kill()
	m.start()
	if st, p := m.status(id); st != state || len(p) == 0 || p[0] != pids[0] {
		t.Fatalf("after the restart: %s %v, was %s %v", st, p, state, pids)
	}
	for _, step := range []string{"install", "run", "op", "values"} {
		report, err := m.cliErr("app", "get", id, "-", "out/report-"+step)
		if err != nil || !strings.Contains(report, "done "+step) {
			t.Fatalf("the %s step did not run: %q %v", step, report, err)
		}
		for _, b := range deploytest.Breaches(report) {
			t.Errorf("%s step: %s", step, b)
		}
	}
	if _, err := m.cliErr("app", "remove", id); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(int(pids[0]), 0); err == nil {
		t.Fatalf("the removed app's process %d still runs", pids[0])
	}
	if d := digest(); d != before {
		t.Fatal("after the removal, a place outside the instance differs")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The documented example, as the README's Applications section has a
// stranger do it, with a manager whose data dir only root may enter
// (0700, as it makes it): build bin/hello, pack, check, reserve,
// install, start, greet, serve a greeting, put names in and get the
// greetings out, remove.
func TestHelloAsDocumented(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("builds the binaries, runs a manager process; running applications needs root")
	}
	m := newAppsManager(t, buildBinary(t))
	m.start()
	if st, err := os.Stat(m.data); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the data dir: %v %v", st, err)
	}
	app := filepath.Join(t.TempDir(), "hello")
	if err := os.CopyFS(app, os.DirFS("../../deploy/examples/hello")); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(app, "bin", "hello"), "../../deploy/examples/hello")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	bundle := filepath.Join(t.TempDir(), "hello.gapp")
	if out, err := exec.Command(m.bin, "app", "pack", app, "-o", bundle).CombinedOutput(); err != nil {
		t.Fatalf("pack: %v %s", err, out)
	}
	if out, err := exec.Command(m.bin, "app", "check", bundle).CombinedOutput(); err != nil || !strings.Contains(string(out), "hello 1.0.0 (class web): ok") {
		t.Fatalf("check: %v %s", err, out)
	}
	res := m.reserve()
	id := res + ".hello"
	if out, err := m.cliErr("app", "install", res, bundle); err != nil || !strings.Contains(out, "installed hello 1.0.0 as "+id) {
		t.Fatalf("install: %v %s", err, out)
	}
	if _, err := m.cliErr("app", "start", id); err != nil {
		t.Fatal(err)
	}
	if out := m.cli("app", "exec-op", id, "greet", "Ada"); out != "Hello, Ada!\n" {
		t.Fatalf("greet: %q", out)
	}
	var st struct {
		Instances []struct {
			State string
			Ports map[string]uint32
			Uid   uint32
		}
	}
	if err := json.Unmarshal([]byte(m.cli("app", "status", "--json", id)), &st); err != nil || len(st.Instances) != 1 {
		t.Fatalf("status: %v", err)
	}
	in := st.Instances[0]
	if in.State != "running" || in.Uid < 60600 || in.Uid > 61099 {
		t.Fatalf("status: %+v", in)
	}
	var body []byte
	waitFor(t, func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/?name=stranger", in.Ports["http"]))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		return resp.StatusCode == 200
	})
	if string(body) != "Hello, stranger!\n" {
		t.Fatalf("served %q", body)
	}
	names := filepath.Join(t.TempDir(), "names.txt")
	os.WriteFile(names, []byte("Ada\nLinus\n"), 0o644)
	if _, err := m.cliErr("app", "put", id, names, "input/names.txt"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		out, _ := m.cliErr("app", "get", id, "-", "output/names.txt")
		return out == "Hello, Ada!\nHello, Linus!\n"
	})
	if out, err := m.cliErr("app", "remove", id); err != nil || !strings.Contains(out, "host restored") {
		t.Fatalf("remove: %v %s", err, out)
	}
}

// `gridmgr app start` gives the run command the words after the instance
// (after --, words that start with -) and the variables of --env, where
// the app.toml allows them; a start without them runs the command alone;
// one the app.toml does not allow is refused, saying why.
func TestAppStartArgsFromCLI(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("builds the binary, runs a manager process; running applications needs root")
	}
	m := newAppsManager(t, buildBinary(t))
	m.start()
	manifest := "name = \"words\"\nversion = \"1\"\n[install]\nfiles = [{ from = \"run.sh\", mode = \"0755\" }]\n[run]\ncommand = [\"/bin/sh\", \"run.sh\"]\nargs = true\nenv = true\n"
	app := packApp(t, manifest, "printf '[%s]' \"$@\"; echo \" MODE=$MODE\"\nexec sleep 1000\n")
	res := m.reserve()
	id := res + ".words"
	m.cli("app", "install", res, app)
	// The last line the program wrote, once it has.
	said := func(want string) {
		t.Helper()
		var out string
		waitFor(t, func() bool {
			out, _ = m.cliErr("app", "logs", id)
			return strings.HasSuffix(out, want)
		})
	}
	// -d after --, as a user would not, would be a word: spelt out here.
	start := exec.Command(m.bin, "app", "start", "-d", m.data, "--env", "MODE=fast", id, "--", "-x", "two words")
	start.Dir, start.Env = m.dir, m.env
	if out, err := start.CombinedOutput(); err != nil || !strings.Contains(string(out), "running") {
		t.Fatalf("start: %v %s", err, out)
	}
	said("[-x][two words] MODE=fast\n")
	m.cli("app", "stop", id)
	m.cli("app", "start", id)
	said("MODE=fast\n[] MODE=\n")
	m.cli("app", "stop", id)

	plain := packApp(t, "name = \"plain\"\nversion = \"1\"\n[install]\nfiles = [{ from = \"run.sh\", mode = \"0755\" }]\n[run]\ncommand = [\"/bin/sh\", \"run.sh\"]\n", "exec sleep 1000\n")
	m.cli("app", "install", res, plain)
	refused := exec.Command(m.bin, "app", "start", "-d", m.data, res+".plain", "word")
	refused.Dir, refused.Env = m.dir, m.env
	if out, err := refused.CombinedOutput(); err == nil || !strings.Contains(string(out), "args = true") {
		t.Fatalf("a start with words the app.toml does not allow: %v %s", err, out)
	}
}
