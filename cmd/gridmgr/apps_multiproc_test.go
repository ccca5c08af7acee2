package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/deploy"
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
