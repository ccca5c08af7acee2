package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/daemon"
)

// jobGrid is managers run as processes of the built binary: a root and
// inferiors below it, each with a data dir of its own.
type jobGrid struct {
	t     *testing.T
	bin   string
	dir   string
	names []string
	procs map[string]*exec.Cmd
	logs  map[string]*syncBuf
}

// newJobGrid is an empty grid of manager processes of a freshly built
// binary, stopped when the test ends.
func newJobGrid(t *testing.T) *jobGrid {
	g := &jobGrid{t: t, bin: buildBinary(t), dir: t.TempDir(), procs: map[string]*exec.Cmd{}, logs: map[string]*syncBuf{}}
	t.Cleanup(g.stop)
	return g
}

// waitTree polls root's tree until each of names is up in it (within
// timeout), and returns the tree as the CLI printed it.
func (g *jobGrid) waitTree(root string, timeout time.Duration, names ...string) string {
	g.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, out, _ := run(g.t, "tree", "-d", g.data(root))
		ok := true
		for _, n := range names {
			ok = ok && strings.Contains(out, n+"  up")
		}
		if ok {
			return out
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("the tree under %s did not show %v up:\n%s\n%s", root, names, out, g.allLogs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (g *jobGrid) data(name string) string { return filepath.Join(g.dir, name, "data") }

// start runs manager name with superior sup's address ("": a root) and
// waits for its address file.
func (g *jobGrid) start(name, sup string) { g.t.Helper(); g.startWith(name, sup, "") }

// startWith is start with top-level properties lines of its own (top).
func (g *jobGrid) startWith(name, sup, top string) {
	g.t.Helper()
	d := filepath.Join(g.dir, name)
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
	writeFile(g.t, d, "m.toml", fmt.Sprintf("name = %q\ndata_dir = \"data\"\nlisten = [\"/ip4/127.0.0.1/tcp/0\"]\n%s%s"+
		"[heartbeat]\ninterval = \"500ms\"\nmisses = 3\n[resources]\ncpus = 2\nmemory = \"2GiB\"\n[attributes]\nzone = \"jobs\"\n", name, sups, top))
	cmd := exec.Command(g.bin, "run", "-c", filepath.Join(d, "m.toml"), "--log-level", "warn")
	cmd.Dir = d
	g.logs[name] = &syncBuf{}
	cmd.Stderr, cmd.Stdout = g.logs[name], g.logs[name]
	if err := cmd.Start(); err != nil {
		g.t.Fatal(err)
	}
	g.procs[name] = cmd
	g.names = append(g.names, name)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(g.data(name), daemon.AddrFile)); err == nil {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("%s did not start: %s", name, g.logs[name])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (g *jobGrid) stop() {
	for _, n := range g.names {
		if c := g.procs[n]; c.ProcessState == nil {
			_ = c.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = c.Process.Kill()
				<-done
			}
		}
	}
}

func (g *jobGrid) allLogs() string {
	var b strings.Builder
	for _, n := range g.names {
		fmt.Fprintf(&b, "--- %s ---\n%s\n", n, g.logs[n])
	}
	return b.String()
}

// A 20-job array submitted with the CLI to a three-manager grid of real
// manager processes: its program, a #!/bin/sh script run as the program
// itself, writes the square of its index (and the input it was given)
// into out/; index 7 always fails, and with max_retries = 1 and
// on_failure = "hold" is held after two tries. `job wait` brings every
// index's results into output_dir/INDEX/; `job q --json`, `job log` and
// `job why` (of a job nothing can run) say what happened.
func TestJobArrayEndToEnd(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("builds the binary, runs manager processes; running jobs (confined applications) needs root")
	}
	t.Setenv("GRIDMGR_CLIENT_KEY", filepath.Join(t.TempDir(), "client.key"))
	g := newJobGrid(t)
	g.start("jr", "")
	g.start("ja", "jr")
	g.start("jb", "jr")
	root := g.data("jr")
	g.waitTree("jr", 30*time.Second, "ja", "jb")

	job := t.TempDir()
	files := map[string]string{
		"job.toml": `name = "squares"
program = "bin/square"
count = 20
args = ["${INDEX}"]
inputs = ["data/n-${INDEX}.txt"]
outputs = ["result-${INDEX}.txt"]
memory = "64MiB"
runtime = "5m"
max_retries = 1
on_failure = "hold"
[env]
FAIL_INDEX = "7"
`,
		"bin/square": "#!/bin/sh\n" +
			"echo \"index $1 try\"\n" +
			"if [ \"$1\" = \"$FAIL_INDEX\" ]; then echo \"index $1 fails\" >&2; exit 1; fi\n" +
			"echo $(( $1 * $1 )) > out/result-$1.txt\n" +
			"cat in/data/n-$1.txt >> out/result-$1.txt\n",
	}
	for i := 0; i < 20; i++ {
		files[fmt.Sprintf("data/n-%d.txt", i)] = fmt.Sprintf("input %d\n", i)
	}
	for p, body := range files {
		if err := os.MkdirAll(filepath.Join(job, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, job, p, body)
	}
	if err := os.Chmod(filepath.Join(job, "bin/square"), 0o755); err != nil {
		t.Fatal(err)
	}

	code, out, errb := run(t, "job", "submit", "-d", root, filepath.Join(job, "job.toml"))
	if code != 0 {
		t.Fatalf("job submit: exit %d\n%s\n%s", code, out, errb)
	}
	t.Logf("job submit: %s", out)
	cluster, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(out), "submitted "+filepath.Join(job, "job.toml")+" as "), " ")
	if !strings.Contains(out, "(20 jobs: "+cluster+"[0] … "+cluster+"[19])") {
		t.Fatalf("job submit said %q", out)
	}

	code, out, errb = run(t, "job", "wait", "-d", root, "--timeout", "4m", cluster)
	t.Logf("job wait: exit %d\n%s\n%s", code, out, errb)
	if code != 1 {
		t.Errorf("job wait: exit %d, want 1 (index 7 is held)\n%s", code, g.allLogs())
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 20 {
		t.Fatalf("job wait printed %d lines", len(lines))
	}
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("%s[%d]", cluster, i)
		dir := filepath.Join(job, "results-squares", strconv.Itoa(i))
		if i == 7 {
			if !strings.HasPrefix(lines[i], id+" held") {
				t.Errorf("index 7: %q", lines[i])
			}
			continue
		}
		if want := fmt.Sprintf("%s completed exit 0 → %s (3 files)", id, dir); lines[i] != want {
			t.Errorf("job wait line %d: %q, want %q", i, lines[i], want)
			continue
		}
		got, err := os.ReadFile(filepath.Join(dir, "out", fmt.Sprintf("result-%d.txt", i)))
		if want := fmt.Sprintf("%d\ninput %d\n", i*i, i); err != nil || string(got) != want {
			t.Errorf("index %d: result %q (%v), want %q", i, got, err, want)
		}
		if ents, _ := os.ReadDir(filepath.Join(dir, "out")); len(ents) != 1 {
			t.Errorf("index %d: %d files in out/", i, len(ents))
		}
		if st, _ := os.ReadFile(filepath.Join(dir, "exit_status")); string(st) != "exit 0\n" {
			t.Errorf("index %d: exit_status %q", i, st)
		}
		if so, _ := os.ReadFile(filepath.Join(dir, "stdout")); string(so) != fmt.Sprintf("index %d try\n", i) {
			t.Errorf("index %d: stdout %q", i, so)
		}
	}

	code, out, errb = run(t, "job", "q", "-d", root, "--json", cluster)
	if code != 0 {
		t.Fatalf("job q --json: exit %d\n%s", code, errb)
	}
	var q struct {
		Jobs []struct {
			ID      string `json:"id"`
			State   string `json:"state"`
			Tries   uint32 `json:"tries"`
			Manager string `json:"manager"`
			Results []struct {
				Path string `json:"path"`
			} `json:"results"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(out), &q); err != nil || len(q.Jobs) != 20 {
		t.Fatalf("job q --json: %v, %d jobs\n%s", err, len(q.Jobs), out)
	}
	where := map[string]int{}
	for i, j := range q.Jobs {
		want, tries := "completed", uint32(1)
		if i == 7 {
			want, tries = "held", 2
		}
		if j.State != want || j.Tries != tries {
			t.Errorf("job q: %s %s after %d tries, want %s after %d", j.ID, j.State, j.Tries, want, tries)
		}
		where[j.Manager]++
	}
	t.Logf("ran at %v", where)

	code, out, _ = run(t, "job", "log", "-d", root, cluster+"[3]")
	t.Logf("job log %s[3]:\n%s", cluster, out)
	for _, w := range []string{"submitted", "started", "exited", "completed"} {
		if code != 0 || !strings.Contains(out, "  "+w+"  ") {
			t.Errorf("job log: exit %d, no %s line", code, w)
		}
	}
	code, out, _ = run(t, "job", "log", "-d", root, cluster+"[7]")
	t.Logf("job log %s[7]:\n%s", cluster, out)
	if code != 0 || !strings.Contains(out, "  held  ") || !strings.Contains(out, "  retried  ") {
		t.Errorf("job log of the held index: exit %d", code)
	}
	code, out, _ = run(t, "job", "q", "-d", root, cluster+"[7]")
	t.Logf("job q %s[7]:\n%s", cluster, out)

	// A job no manager can run: why names the clause.
	writeFile(t, job, "never.toml", "program = \"bin/square\"\nrequirement = 'arch == \"sparc\"'\n")
	code, out, errb = run(t, "job", "submit", "-d", root, filepath.Join(job, "never.toml"))
	if code != 0 {
		t.Fatalf("job submit never.toml: exit %d\n%s", code, errb)
	}
	never := strings.Fields(out)[3]
	code, out, errb = run(t, "job", "why", "-d", root, never)
	t.Logf("job why %s: exit %d\n%s%s", never, code, out, errb)
	if code != 0 || !strings.Contains(out, `arch == "sparc"`) || !strings.Contains(out, "(3 managers looked)") ||
		!strings.Contains(out, "now no manager offers") {
		t.Errorf("job why does not name the false clause")
	}
	for _, id := range []string{never, cluster + "[7]"} {
		if code, out, errb := run(t, "job", "rm", "-d", root, id); code != 0 || !strings.Contains(out, "removed") {
			t.Errorf("job rm %s: exit %d %s %s", id, code, out, errb)
		}
	}
}
