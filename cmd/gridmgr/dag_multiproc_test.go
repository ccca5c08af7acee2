package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

// The program of the workflow tests: sleeps a little, writes its name to
// out/NAME.txt, and fails while the time is before $FAIL_UNTIL (unix
// seconds; 0 never).
const dagStep = `#!/bin/sh
echo "step $1 at $INSTANCE"
sleep 0.3
if [ "$(date +%s)" -lt "${FAIL_UNTIL:-0}" ]; then echo "step $1 fails until $FAIL_UNTIL" >&2; exit 3; fi
echo "$1" > "out/$1.txt"
`

// dagFlows are the two workflows of TestDagKill9: a diamond whose right
// node has a post command, and a 3-level fan-out and fan-in with a 50-job
// array in the middle.
const dagDiamond = `name = "diamond"
[nodes.prepare]
job = "step.toml"
[nodes.left]
after = ["prepare"]
program = "bin/step"
args = ["left"]
outputs = ["left.txt"]
memory = "32MiB"
[nodes.right]
after = ["prepare"]
program = "bin/step"
args = ["right"]
outputs = ["right.txt"]
memory = "32MiB"
post = ["bin/check"]
[nodes.join]
after = ["left", "right"]
program = "bin/step"
args = ["join"]
outputs = ["join.txt"]
memory = "32MiB"
`

const dagFan = `name = "fan"
[nodes.split]
program = "bin/step"
args = ["split"]
outputs = ["split.txt"]
memory = "32MiB"
[nodes.work]
after = ["split"]
program = "bin/step"
count = 50
args = ["work-${INDEX}"]
outputs = ["work-${INDEX}.txt"]
memory = "32MiB"
[nodes.gather]
after = ["work"]
program = "bin/step"
args = ["gather"]
outputs = ["gather.txt"]
memory = "32MiB"
`

// Two workflows — a diamond and a fan-out/fan-in around a 50-job array —
// submitted with the CLI at a leaf (gm160) of the demo's six-manager tree
// of real processes; gm160 is killed with SIGKILL while the array runs and
// restarted from its data dir. Both complete, every job once (one try, one
// "completed", no try started twice), in order (no node's job starts
// before the nodes it comes after completed), the post command saw its
// node's result, and `dag wait` brings every result back. Then a
// workflow whose node fails for good (its program fails until a time
// passes): the branch that does not need it still completes, the
// workflow ends failed naming the node; after that time `dag rerun` runs
// the failed node and the one after it, and nothing that had completed
// runs again.
func TestDagKill9(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("builds the binary, runs six manager processes; running jobs (confined applications) needs root")
	}
	t.Setenv("GRIDMGR_CLIENT_KEY", filepath.Join(t.TempDir(), "client.key"))
	g := newDemoJSGrid(t)
	dir := t.TempDir()
	for p, body := range map[string]string{
		"bin/step":     dagStep,
		"bin/check":    "#!/bin/sh\necho \"node result: $DAG_NODE_RESULT\"\n[ \"$DAG_NODE_RESULT\" = completed ]\n",
		"step.toml":    "name = \"prepare\"\nprogram = \"bin/step\"\nargs = [\"prepare\"]\noutputs = [\"prepare.txt\"]\nmemory = \"32MiB\"\n",
		"diamond.toml": dagDiamond,
		"fan.toml":     dagFan,
	} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, p, body)
	}
	for _, p := range []string{"bin/step", "bin/check"} {
		if err := os.Chmod(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	at := g.data("gm160")
	submit := func(file string) string {
		t.Helper()
		code, out, errb := run(t, "dag", "submit", "-d", at, filepath.Join(dir, file))
		if code != 0 {
			t.Fatalf("dag submit %s: exit %d\n%s\n%s", file, code, out, errb)
		}
		t.Logf("dag submit: %s", strings.TrimSpace(out))
		return strings.Fields(out)[4]
	}
	diamond, fan := submit("diamond.toml"), submit("fan.toml")
	jobsOf := func(id string) []*wire.JobInfo {
		code, out, errb := run(t, "job", "log", "-d", at, "--json", "--timeout", "30s", id)
		if code != 0 {
			t.Logf("job log: exit %d: %s", code, strings.TrimSpace(errb))
			return nil
		}
		js, err := jsJobs(out)
		if err != nil {
			t.Logf("job log: %v", err)
		}
		return js
	}
	// job log answers 100 jobs at most: fan has 52, diamond 5.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		running := 0
		for _, j := range jobsOf(fan) {
			if j.State == wire.JobState_JOB_STATE_RUNNING && j.Node == "work" {
				running++
			}
		}
		if running >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the array never ran\n%s", g.allLogs())
		}
		time.Sleep(100 * time.Millisecond) // polling real processes
	}
	t.Log("kill -9 gm160, the submit manager, while the array runs")
	g.kill9("gm160")
	time.Sleep(time.Second)
	g.start("gm160", "gm154")

	code, out, errb := run(t, "dag", "wait", "-d", at, "--timeout", "5m", diamond, fan)
	t.Logf("dag wait: exit %d\n%s%s", code, out, errb)
	if code != 0 {
		_, st, _ := run(t, "dag", "status", "-d", at, diamond, fan)
		t.Fatalf("dag wait: exit %d\n%s\n%s", code, st, g.allLogs())
	}
	for _, id := range []string{diamond, fan} {
		if !strings.Contains(out, id) || !strings.Contains(out, "completed; ") {
			t.Errorf("dag wait said %q for %s", out, id)
		}
		checkDagJobs(t, jobsOf(id))
	}
	for _, f := range []string{"results-prepare/out/prepare.txt", "results-join/out/join.txt", "results-work/49/out/work-49.txt", "results-gather/out/gather.txt"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || len(b) == 0 {
			t.Errorf("%s: %q %v", f, b, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "results-diamond/right-post/stdout")); string(b) != "node result: completed\n" {
		t.Errorf("the post command printed %q", b)
	}

	// A node that fails for good (for 15s); then a rerun.
	failUntil := time.Now().Add(15 * time.Second).Unix()
	writeFile(t, dir, "broken.toml", strings.ReplaceAll(strings.ReplaceAll(dagDiamond, `"diamond"`, `"broken"`),
		`args = ["right"]`, fmt.Sprintf("args = [\"right\"]\nenv = { FAIL_UNTIL = \"%d\" }", failUntil)))
	broken := submit("broken.toml")
	code, out, _ = run(t, "dag", "wait", "-d", at, "--timeout", "3m", broken)
	if code != 1 || !strings.Contains(out, "failed") || !strings.Contains(out, "node right failed") || !strings.Contains(out, "dag rerun "+broken) {
		t.Fatalf("dag wait of the broken workflow: exit %d\n%s", code, out)
	}
	before := map[string]*wire.JobInfo{}
	for _, j := range jobsOf(broken) {
		before[j.Id] = j
		switch j.Node {
		case "prepare", "left":
			if j.State != wire.JobState_JOB_STATE_COMPLETED {
				t.Errorf("%s (%s) is %s: what does not need the failed node must still run", j.Id, j.Node, jobStateWord(j.State))
			}
		case "join":
			if j.State != wire.JobState_JOB_STATE_WAITING || !strings.Contains(j.Reason, "right failed") {
				t.Errorf("%s (join) is %s: %q", j.Id, jobStateWord(j.State), j.Reason)
			}
		}
	}
	for time.Now().Unix() <= failUntil {
		time.Sleep(200 * time.Millisecond) // until the program stops failing
	}
	if code, out, errb := run(t, "dag", "rerun", "-d", at, broken); code != 0 {
		t.Fatalf("dag rerun: exit %d\n%s%s", code, out, errb)
	}
	if code, out, errb := run(t, "dag", "wait", "-d", at, "--timeout", "3m", broken); code != 0 {
		t.Fatalf("dag wait after the rerun: exit %d\n%s%s", code, out, errb)
	}
	for _, j := range jobsOf(broken) {
		b := before[j.Id]
		if b.State == wire.JobState_JOB_STATE_COMPLETED && jsCount(j, "started") != jsCount(b, "started") {
			t.Errorf("%s (%s) had completed and ran again: %d started lines, were %d", j.Id, j.Node, jsCount(j, "started"), jsCount(b, "started"))
		}
		if j.State != wire.JobState_JOB_STATE_COMPLETED {
			t.Errorf("%s (%s) is %s after the rerun", j.Id, j.Node, jobStateWord(j.State))
		}
		if (j.Node == "right" || j.Node == "join") && jsCount(j, "rerun")+jsCount(j, "released") == 0 {
			t.Errorf("%s (%s): no rerun or release in its log", j.Id, j.Node)
		}
	}
}

// checkDagJobs: every job completed once, and no job was released before
// the jobs of the nodes it comes after completed.
func checkDagJobs(t *testing.T, js []*wire.JobInfo) {
	t.Helper()
	done := map[string]int64{} // node → when its last job completed
	for _, j := range js {
		if j.State != wire.JobState_JOB_STATE_COMPLETED || j.Tries != 1 || jsCount(j, "completed") != 1 || len(jsStartedTwice(j)) > 0 {
			t.Errorf("%s (%s): %s after %d tries, %d completed lines, tries started twice %v", j.Id, j.Node, jobStateWord(j.State), j.Tries, jsCount(j, "completed"), jsStartedTwice(j))
		}
		for _, e := range j.Log {
			if e.Type == "completed" && j.Role == "" && e.TimeUnixMs > done[j.Node] {
				done[j.Node] = e.TimeUnixMs
			}
		}
	}
	for _, j := range js {
		for _, e := range j.Log {
			if e.Type != "released" || j.Role == "post" {
				continue
			}
			for _, a := range j.After {
				if e.TimeUnixMs < done[a] {
					t.Errorf("%s (%s) released at %d, before %s completed at %d", j.Id, j.Node, e.TimeUnixMs, a, done[a])
				}
			}
		}
	}
}
