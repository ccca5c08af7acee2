package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/deploy"
)

// glideinGrid is a launcher "gl" with executing managers under it, each
// host's install digest taken before anything is launched.
type glideinGrid struct {
	*jobGrid
	hosts  []string
	before map[string]string
}

func newGlideinGrid(t *testing.T, hosts ...string) *glideinGrid {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("builds the binary, runs manager processes; glide-ins are confined applications, which needs root")
	}
	t.Setenv("GRIDMGR_CLIENT_KEY", filepath.Join(t.TempDir(), "client.key"))
	g := &glideinGrid{jobGrid: newJobGrid(t), hosts: hosts, before: map[string]string{}}
	// The launching client is the launcher's admin: it may open private
	// networks there (--private).
	code, id, errb := run(t, "id", "--client")
	if code != 0 {
		t.Fatalf("id --client: %s", errb)
	}
	g.startWith("gl", "", fmt.Sprintf("admins = [%q]\n", strings.TrimSpace(id)))
	for _, h := range hosts {
		g.start(h, "gl")
	}
	g.waitTree("gl", 30*time.Second, hosts...)
	for _, h := range hosts {
		if g.before[h] = g.digest(h); strings.HasPrefix(g.before[h], "error: ") {
			t.Fatalf("%s: %s", h, g.before[h])
		}
	}
	return g
}

// digest is the digest of host's install dirs (what removal restores);
// an error (a directory removed while it was read) is returned as such.
func (g *glideinGrid) digest(host string) string {
	d, err := deploy.Digest(daemon.InstallDirs(g.data(host))...)
	if err != nil {
		return "error: " + err.Error()
	}
	return d
}

// launch runs gridmgr glidein at gl (the built binary is the program
// sent) and returns what --json printed.
func (g *glideinGrid) launch(name string, count int, extra ...string) []client.GlideinInfo {
	g.t.Helper()
	args := append([]string{"glidein", "-d", g.data("gl"), "--name", name, "--count", fmt.Sprint(count), "--cpus", "1", "--mem", "512MiB",
		"--duration", "10m", "--requirement", `name != "gl"`, "--program", g.bin, "--heartbeat", "500ms", "--timeout", "2m", "--json"}, extra...)
	start := time.Now()
	code, out, errb := run(g.t, args...)
	if code != 0 {
		g.t.Fatalf("glidein: exit %d\n%s\n%s\n%s", code, out, errb, g.allLogs())
	}
	g.t.Logf("glidein %s: %d ready in %s\n%s", name, count, time.Since(start).Round(time.Millisecond), errb)
	var got struct {
		Glideins []client.GlideinInfo `json:"glideins"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		g.t.Fatalf("glidein --json: %v\n%s", err, out)
	}
	return got.Glideins
}

// waitRestored polls until every host's digest is what it was before.
func (g *glideinGrid) waitRestored(timeout time.Duration) {
	g.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var differ []string
		for _, h := range g.hosts {
			if g.digest(h) != g.before[h] {
				differ = append(differ, h)
			}
		}
		if len(differ) == 0 {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("hosts %v not restored within %s\n%s", differ, timeout, g.allLogs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Three glide-ins launched on a grid of a launcher and three executing
// managers, one per host, join under the launcher; a 9-job array whose
// requirement names them runs only on them and completes; removing them
// (glidein rm) restores each host exactly.
func TestGlideinsRunJobsOnlyThere(t *testing.T) {
	g := newGlideinGrid(t, "e1", "e2", "e3")
	list := g.launch("gx", 3)
	hosts := map[string]string{}
	for _, gi := range list {
		if !gi.Joined {
			t.Errorf("%s not joined: %+v", gi.Name, gi)
		}
		hosts[gi.Host] = gi.Name
	}
	if len(list) != 3 || len(hosts) != 3 || hosts["gl"] != "" {
		t.Fatalf("want 3 glide-ins on e1, e2 and e3, one each: %+v", list)
	}
	tree := g.waitTree("gl", 10*time.Second, "gx-0", "gx-1", "gx-2")
	t.Logf("tree:\n%s", tree)

	job := t.TempDir()
	writeFile(t, job, "job.toml", `name = "onglide"
program = "work.sh"
count = 9
args = ["${INDEX}"]
outputs = ["r.txt"]
memory = "64MiB"
runtime = "2m"
requirement = 'attrs.glidein == "gx"'
`)
	writeFile(t, job, "work.sh", "#!/bin/sh\necho $(( $1 * 3 )) > out/r.txt\n")
	if err := os.Chmod(filepath.Join(job, "work.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, errb := run(t, "job", "submit", "-d", g.data("gl"), filepath.Join(job, "job.toml"))
	if code != 0 {
		t.Fatalf("job submit: exit %d\n%s%s", code, out, errb)
	}
	cluster := strings.Fields(out)[3]
	code, out, errb = run(t, "job", "wait", "-d", g.data("gl"), "--timeout", "3m", cluster)
	if code != 0 {
		t.Fatalf("job wait: exit %d\n%s%s\n%s", code, out, errb, g.allLogs())
	}
	code, out, _ = run(t, "job", "q", "-d", g.data("gl"), "--json", cluster)
	var q struct {
		Jobs []struct {
			ID, State, Manager string
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(out), &q); code != 0 || err != nil || len(q.Jobs) != 9 {
		t.Fatalf("job q: exit %d %v\n%s", code, err, out)
	}
	where := map[string]int{}
	for _, j := range q.Jobs {
		where[j.Manager]++
		if j.State != "completed" || !slices.Contains([]string{"gx-0", "gx-1", "gx-2"}, j.Manager) {
			t.Errorf("%s %s at %s: want completed on a glide-in", j.ID, j.State, j.Manager)
		}
	}
	t.Logf("ran at %v", where)
	for i := 0; i < 9; i++ {
		b, err := os.ReadFile(filepath.Join(job, "results-onglide", fmt.Sprint(i), "out", "r.txt"))
		if want := fmt.Sprintf("%d\n", 3*i); err != nil || string(b) != want {
			t.Errorf("index %d: %q %v, want %q", i, b, err, want)
		}
	}

	code, out, errb = run(t, "glidein", "rm", "-d", g.data("gl"), "gx")
	if code != 0 || !strings.Contains(out, "gx removed (3 job(s)") {
		t.Fatalf("glidein rm: exit %d\n%s%s", code, out, errb)
	}
	g.waitRestored(60 * time.Second)
	code, out, _ = run(t, "glidein", "list", "-d", g.data("gl"))
	if code != 0 || out != "no glide-ins\n" {
		t.Errorf("glidein list after rm: exit %d\n%s", code, out)
	}
}

// A glide-in with --idle 3s that is given no job leaves by itself: its
// process exits 0, its job completes at the launcher, and its host is
// restored.
func TestGlideinIdleLeaves(t *testing.T) {
	g := newGlideinGrid(t, "e1")
	list := g.launch("idler", 1, "--idle", "3s")
	if len(list) != 1 || !list[0].Joined || list[0].Host != "e1" {
		t.Fatalf("want one glide-in joined on e1: %+v", list)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, out, _ := run(t, "glidein", "list", "-d", g.data("gl"), "--ended", "--json", "idler")
		var got struct {
			Glideins []client.GlideinInfo `json:"glideins"`
		}
		if err := json.Unmarshal([]byte(out), &got); code == 0 && err == nil && len(got.Glideins) == 1 && got.Glideins[0].State == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle glide-in did not leave: %s\n%s", out, g.allLogs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	g.waitRestored(30 * time.Second)
	code, out, _ := run(t, "job", "get", "-d", g.data("gl"), list[0].Job, "-o", filepath.Join(t.TempDir(), "res"))
	if code != 0 || !strings.Contains(out, "completed exit 0") {
		t.Errorf("job get of the glide-in: exit %d %s", code, out)
	}
	code, out, _ = run(t, "job", "log", "-d", g.data("gl"), list[0].Job)
	t.Logf("job log:\n%s", out)
}

// With --private, a glide-in is reached only with its private network's
// key: the launcher (which holds it) has it in its tree, while a client
// or a manager with no key, or another key, cannot connect to it at all.
func TestGlideinPrivate(t *testing.T) {
	g := newGlideinGrid(t, "e1")
	list := g.launch("px", 1, "--private")
	if len(list) != 1 || !list[0].Joined {
		t.Fatalf("want one glide-in joined: %+v", list)
	}
	g.waitTree("gl", 10*time.Second, "px-0")
	// Its address, as the launcher's tree lists it.
	_, out, _ := run(t, "tree", "-d", g.data("gl"), "--json")
	var tree struct {
		Children []struct {
			Peer, Name string
			Addrs      []string
		}
	}
	if err := json.Unmarshal([]byte(out), &tree); err != nil {
		t.Fatal(err)
	}
	addr := ""
	for _, c := range tree.Children {
		if c.Name == "px-0" && len(c.Addrs) > 0 {
			addr = c.Addrs[0] + "/p2p/" + c.Peer
		}
	}
	if addr == "" {
		t.Fatalf("px-0 not in the tree with an address:\n%s", out)
	}
	// The key the launcher holds, and another.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.Connect(ctx, client.Options{DataDir: g.data("gl")})
	if err != nil {
		t.Fatal(err)
	}
	nets, err := cl.PrivateNetworks(ctx)
	cl.Close()
	if err != nil || len(nets) != 1 || nets[0].Name != client.GlideinNetwork("px") {
		t.Fatalf("the launcher's private networks: %v %+v", err, nets)
	}
	keys := t.TempDir()
	right := writeFile(t, keys, "right.key", string(nets[0].Psk))
	other := filepath.Join(keys, "other.key")
	if code, _, errb := run(t, "keygen", "--psk", "-o", other); code != 0 {
		t.Fatalf("keygen --psk: %s", errb)
	}
	if code, out, errb := run(t, "status", "-n", addr, "--psk", right, "--timeout", "10s"); code != 0 || !strings.Contains(out, "px-0") {
		t.Fatalf("with the key, status of the glide-in: exit %d\n%s%s", code, out, errb)
	}
	for _, psk := range []string{"", other} {
		args := []string{"status", "-n", addr, "--timeout", "3s"}
		if psk != "" {
			args = append(args, "--psk", psk)
		}
		if code, out, errb := run(t, args...); code == 0 {
			t.Errorf("%v: a client without the key reached the glide-in:\n%s", args, out)
		} else {
			t.Logf("%v: exit %d: %s", args, code, strings.TrimSpace(errb))
		}
	}
	// A manager with another key, told to join under the glide-in,
	// cannot: its dials fail and the glide-in never has it below.
	g.startWith("outsider", "", fmt.Sprintf("superiors = [%q]\nprivate_network_key = %q\n", addr, other))
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, out, _ := run(t, "status", "-d", g.data("outsider"), "--json", "--psk", other)
		var st struct {
			Relations []struct {
				Name, State  string
				DialAttempts uint32 `json:"dial_attempts"`
				LastError    string `json:"last_error"`
			}
		}
		_ = json.Unmarshal([]byte(out), &st)
		if len(st.Relations) == 1 && st.Relations[0].State == "up" {
			t.Fatalf("the outsider joined the private glide-in:\n%s", out)
		}
		if len(st.Relations) == 1 && st.Relations[0].DialAttempts >= 2 {
			t.Logf("the outsider's dials fail: %d, %s", st.Relations[0].DialAttempts, st.Relations[0].LastError)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the outsider's status shows no failed dials:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, out, _ := run(t, "tree", "-d", g.data("gl")); strings.Contains(out, "outsider") || !strings.Contains(out, "px-0  up") {
		t.Errorf("the launcher's tree:\n%s", out)
	}
	code, out, errb := run(t, "glidein", "rm", "-d", g.data("gl"), "px")
	if code != 0 || !strings.Contains(out, "px: its private network closed") {
		t.Errorf("glidein rm: exit %d\n%s%s", code, out, errb)
	}
	g.waitRestored(60 * time.Second)
}

// A glide-in past its retire time takes no new reservation and, with
// nothing to do, leaves at once (long before its --idle): its log says
// so, its job completes, its host is restored.
func TestGlideinRetires(t *testing.T) {
	g := newGlideinGrid(t, "e1")
	code, out, errb := run(t, "glidein", "-d", g.data("gl"), "--name", "old", "--count", "1", "--mem", "256MiB",
		"--duration", "1m", "--retire", "55s", "--idle", "1h", "--requirement", `name != "gl"`, "--program", g.bin, "--no-wait")
	if code != 0 {
		t.Fatalf("glidein: exit %d\n%s%s", code, out, errb)
	}
	cluster := strings.Fields(out)[1]
	code, out, errb = run(t, "job", "wait", "-d", g.data("gl"), "--no-fetch", "--timeout", "50s", cluster)
	if code != 0 || !strings.Contains(out, cluster+" completed exit 0") {
		t.Fatalf("job wait: exit %d\n%s%s\n%s", code, out, errb, g.allLogs())
	}
	res := t.TempDir()
	if code, out, errb := run(t, "job", "get", "-d", g.data("gl"), cluster, "-o", res); code != 0 {
		t.Fatalf("job get: exit %d %s%s", code, out, errb)
	}
	log, _ := os.ReadFile(filepath.Join(res, "stderr"))
	if !strings.Contains(string(log), "glide-in retired") || !strings.Contains(string(log), `why="retired (glidein.retire_at passed) and nothing left to do"`) {
		t.Errorf("the glide-in's log does not say it retired and left for it:\n%s", log)
	}
	g.waitRestored(30 * time.Second)
}

// A glide-in whose --idle (2s) passes while it runs a job of 6s does not
// leave under it: the job completes there, once, and only then does the
// glide-in leave and its host come back as it was.
func TestGlideinStaysWhileItRunsAJob(t *testing.T) {
	g := newGlideinGrid(t, "e1")
	list := g.launch("busy", 1, "--idle", "2s")
	if len(list) != 1 || !list[0].Joined {
		t.Fatalf("want one glide-in joined: %+v", list)
	}
	job := t.TempDir()
	writeFile(t, job, "job.toml", `name = "long"
program = "long.sh"
memory = "64MiB"
runtime = "2m"
requirement = 'attrs.glidein == "busy"'
`)
	writeFile(t, job, "long.sh", "#!/bin/sh\nsleep 6\necho done\n")
	if err := os.Chmod(filepath.Join(job, "long.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, errb := run(t, "job", "submit", "-d", g.data("gl"), filepath.Join(job, "job.toml"))
	if code != 0 {
		t.Fatalf("job submit: exit %d\n%s%s", code, out, errb)
	}
	cluster := strings.Fields(out)[3]
	code, out, errb = run(t, "job", "wait", "-d", g.data("gl"), "--timeout", "2m", cluster)
	if code != 0 || !strings.Contains(out, cluster+" completed exit 0") {
		t.Fatalf("job wait: exit %d\n%s%s\n%s", code, out, errb, g.allLogs())
	}
	code, out, _ = run(t, "job", "log", "-d", g.data("gl"), "--json", cluster)
	js, err := jsJobs(out)
	if code != 0 || err != nil || len(js) != 1 {
		t.Fatalf("job log: exit %d %v", code, err)
	}
	if j := js[0]; j.Manager != "busy-0" || j.Tries != 1 || jsCount(j, "lost") != 0 || jsCount(j, "started") != 1 {
		t.Fatalf("the job ran at %s, %d tries, %d lost, %d started: the glide-in left under it?", j.Manager, j.Tries, jsCount(j, "lost"), jsCount(j, "started"))
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, out, _ := run(t, "glidein", "list", "-d", g.data("gl"), "--ended", "--json", "busy")
		var got struct {
			Glideins []client.GlideinInfo `json:"glideins"`
		}
		if err := json.Unmarshal([]byte(out), &got); code == 0 && err == nil && len(got.Glideins) == 1 && got.Glideins[0].State == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the glide-in did not leave once idle: %s", out)
		}
		time.Sleep(200 * time.Millisecond) // polling real processes
	}
	g.waitRestored(30 * time.Second)
}
