package daemon_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/deploy"
	"github.com/gridmgr/gridmgr/jobs"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// squareJob is a program that writes the square of its first argument to
// out/result.txt, and fails (exit 3) for the indexes its env names.
const squareJob = `#!/bin/sh
n=$1
for f in $FAIL; do [ "$f" = "$n" ] && { echo "failing $n" >&2; exit 3; }; done
echo "square of $n"
mkdir -p out
echo $((n * n)) > out/result.txt
`

func jobManager(t *testing.T, name string, superior *daemon.Manager) *daemon.Manager {
	t.Helper()
	return startJobManager(t, jobConfig(t, name, superior, 0))
}

// jobConfig is a manager's config: port 0 takes any.
func jobConfig(t *testing.T, name string, superior *daemon.Manager, port int) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Name = name
	cfg.DataDir = t.TempDir()
	cfg.Listen = []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port)}
	cfg.CPUs, cfg.Memory = 2, 4<<30
	cfg.Reservations = reservation.Limits{MinLease: time.Second}
	cfg.HeartbeatInterval = 200 * time.Millisecond
	if superior != nil {
		pa, err := peeraddr.ParsePeerMaddr(superior.Addr())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Superiors = []peeraddr.PeerAddrs{pa}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func startJobManager(t *testing.T, cfg config.Config) *daemon.Manager {
	t.Helper()
	m, err := daemon.Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

func jobCall(ctx context.Context, c *client.Client, req *wire.JobRequest) (*wire.JobReply, error) {
	rep, err := c.Call(ctx, &wire.Envelope{Body: &wire.Envelope_JobRequest{JobRequest: req}})
	if err != nil {
		return nil, err
	}
	if e := rep.GetError(); e != nil {
		return nil, &client.RemoteError{Code: e.Code, Message: e.Message}
	}
	return rep.GetJobReply(), nil
}

func sha256hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func sendBlob(t *testing.T, ctx context.Context, c *client.Client, data []byte) string {
	t.Helper()
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	for off := 0; ; {
		end := min(off+1<<20, len(data))
		rep, err := jobCall(ctx, c, &wire.JobRequest{Op: wire.JobRequest_OP_BLOB, Sha256: sha, Size: int64(len(data)), Offset: int64(off), Data: data[off:end]})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Offset >= int64(len(data)) {
			return sha
		}
		off = int(rep.Offset)
	}
}

// dialWhenFormed dials top once it has n inferiors.
func dialWhenFormed(t *testing.T, ctx context.Context, top *daemon.Manager, n int) *client.Client {
	t.Helper()
	c, err := dialClient(t, ctx, top.Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		tr, err := c.Tree(ctx, 2)
		if err == nil && len(tr.Children) == n {
			return c
		}
		if ctx.Err() != nil {
			c.Close()
			t.Fatal("the grid did not form")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// An array of jobs handed to one manager runs on the grid below it: each
// index once, retried where its program fails, held once its retries are
// spent, its results brought back to the submit manager.
func TestJobsRunOnTheGrid(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running jobs needs root (confined applications)")
	}
	top := jobManager(t, "js", nil)
	je1 := jobManager(t, "je1", top)
	je2 := jobManager(t, "je2", top)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		untilNoApps(t, ctx, je1, je2)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := dialWhenFormed(t, ctx, top, 2)
	defer c.Close()
	src := filepath.Join(t.TempDir(), "square")
	if err := os.WriteFile(src, []byte(squareJob), 0o755); err != nil {
		t.Fatal(err)
	}
	bundle, err := deploy.PackProgram(deploy.ProgramBundle{Name: "square", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	sha := sendBlob(t, ctx, c, bundle)
	const n = 8
	var specs []*wire.JobSpec
	for i := range n {
		specs = append(specs, &wire.JobSpec{Name: "square", Index: uint32(i), Count: n, BundleSha256: sha, App: "square",
			Args: []string{fmt.Sprint(i)}, Env: map[string]string{"FAIL": "5"}, Cpus: 1, Mem: 64 << 20, RuntimeMs: 60000,
			Requirement: `name != "js"`, Outputs: []string{"result.txt"}, MaxRetries: 1, HoldOnFailure: true, InDir: "in", OutDir: "out"})
	}
	sub := &wire.JobRequest{Op: wire.JobRequest_OP_SUBMIT, RequestId: "t-1", User: "alice", Jobs: specs}
	rep, err := jobCall(ctx, c, sub)
	if err != nil {
		t.Fatal(err)
	}
	again, err := jobCall(ctx, c, sub)
	if err != nil || !again.Duplicate || again.Cluster != rep.Cluster {
		t.Fatalf("a retried submit: %v %v", again, err)
	}
	cluster := rep.Cluster
	var list *wire.JobReply
	for {
		list, err = jobCall(ctx, c, &wire.JobRequest{Op: wire.JobRequest_OP_LIST, Ids: []string{cluster}})
		if err != nil {
			t.Fatal(err)
		}
		done := 0
		for _, j := range list.Jobs {
			if jobs.Ended(j.State) || j.State == wire.JobState_JOB_STATE_HELD {
				done++
			}
		}
		if done == n {
			break
		}
		if ctx.Err() != nil {
			for _, j := range list.Jobs {
				t.Logf("%s %s %s", j.Id, jobs.StateName(j.State), j.Reason)
			}
			t.Fatal("the jobs did not end")
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, j := range list.Jobs {
		if j.Index == 5 {
			if j.State != wire.JobState_JOB_STATE_HELD || j.Tries != 2 || !strings.Contains(j.Reason, "exit 3") {
				t.Errorf("%s: %s after %d tries: %s", j.Id, jobs.StateName(j.State), j.Tries, j.Reason)
			}
			continue
		}
		if j.State != wire.JobState_JOB_STATE_COMPLETED || j.Manager == "js" {
			t.Errorf("%s: %s at %s: %s", j.Id, jobs.StateName(j.State), j.Manager, j.Reason)
			continue
		}
		got, err := jobCall(ctx, c, &wire.JobRequest{Op: wire.JobRequest_OP_GET, Ids: []string{j.Id}, Path: "result.txt"})
		if err != nil {
			t.Fatalf("%s: %v", j.Id, err)
		}
		if want := fmt.Sprintf("%d\n", j.Index*j.Index); string(got.Data) != want {
			t.Errorf("%s: result %q, want %q", j.Id, got.Data, want)
		}
		out, err := jobCall(ctx, c, &wire.JobRequest{Op: wire.JobRequest_OP_GET, Ids: []string{j.Id}, Path: "stdout"})
		if err != nil || !strings.Contains(string(out.Data), "square of") {
			t.Errorf("%s: stdout %q %v", j.Id, out.GetData(), err)
		}
	}
	logs, err := jobCall(ctx, c, &wire.JobRequest{Op: wire.JobRequest_OP_LOG, Ids: []string{cluster + "[5]"}})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range logs.Jobs[0].Log {
		types = append(types, e.Type)
	}
	if s := strings.Join(types, " "); !strings.Contains(s, "retried") || !strings.Contains(s, "held") {
		t.Errorf("log of the failing index: %s", s)
	}
}

// sleeper sleeps its first argument's seconds, then writes out/done.
const sleeper = `#!/bin/sh
sleep $1
mkdir -p out
echo slept $1 > out/done
`

// untilJobs polls the jobs of cluster at the manager of c until ok says
// they are as wanted.
func untilJobs(t *testing.T, ctx context.Context, addr, cluster string, what string, ok func([]*wire.JobInfo) bool) []*wire.JobInfo {
	t.Helper()
	var last []*wire.JobInfo
	for {
		c, err := dialClient(t, ctx, addr, p2p.ClientHostOptions{})
		if err == nil {
			rep, err := jobCall(ctx, c, &wire.JobRequest{Op: wire.JobRequest_OP_LOG, Ids: []string{cluster}})
			c.Close()
			if err == nil {
				last = rep.Jobs
				if ok(rep.Jobs) {
					return rep.Jobs
				}
			}
		}
		if ctx.Err() != nil {
			for _, j := range last {
				t.Logf("%s %s at %s: %s", j.Id, jobs.StateName(j.State), j.Manager, j.Reason)
				for _, e := range j.Log {
					t.Logf("   %s %s %s", e.Type, e.Manager, e.Detail)
				}
			}
			t.Fatalf("waiting for %s: gave up", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func allIn(state wire.JobState) func([]*wire.JobInfo) bool {
	return func(js []*wire.JobInfo) bool {
		for _, j := range js {
			if j.State != state {
				return false
			}
		}
		return len(js) > 0
	}
}

func logCount(j *wire.JobInfo, typ string) int {
	n := 0
	for _, e := range j.Log {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func submitSleepers(t *testing.T, ctx context.Context, addr string, n int, secs int, req, requirement, rank string, lostAfter time.Duration) string {
	t.Helper()
	c, err := dialClient(t, ctx, addr, p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	src := filepath.Join(t.TempDir(), "sleeper")
	os.WriteFile(src, []byte(sleeper), 0o755)
	bundle, err := deploy.PackProgram(deploy.ProgramBundle{Name: "sleeper", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	sha := sendBlob(t, ctx, c, bundle)
	var specs []*wire.JobSpec
	for i := range n {
		specs = append(specs, &wire.JobSpec{Name: "sleeper", Index: uint32(i), Count: uint32(n), BundleSha256: sha, App: "sleeper",
			Args: []string{fmt.Sprint(secs)}, Cpus: 1, Mem: 32 << 20, RuntimeMs: 60000, Requirement: requirement, Rank: rank,
			Outputs: []string{"done"}, LostAfterMs: uint64(lostAfter / time.Millisecond), InDir: "in", OutDir: "out"})
	}
	rep, err := jobCall(ctx, c, &wire.JobRequest{Op: wire.JobRequest_OP_SUBMIT, RequestId: req, User: "alice", Jobs: specs})
	if err != nil {
		t.Fatal(err)
	}
	return rep.Cluster
}

// Condor-G's failures, each on a real grid: the submit manager killed
// mid-run (its queue reloaded, its jobs found running, none run again);
// an execute manager killed and back soon (its apps re-adopted, the jobs
// go on); an execute manager gone past lost_after (the job runs
// elsewhere; the copy left there is stopped when it returns, its results
// never taken).
func TestJobsSurviveCrashes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running jobs needs root (confined applications)")
	}
	ports := freePorts(t, 3)
	e1 := startJobManager(t, jobConfig(t, "je1", nil, ports[0]))
	e2cfg := jobConfig(t, "je2", e1, ports[1])
	e2 := startJobManager(t, e2cfg)
	scfg := jobConfig(t, "js", e1, ports[2])
	scfg.CPUs = 1
	s := startJobManager(t, scfg)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	addr := s.Addr()
	notJS := `name != "js"`

	// 1. The submit manager dies (kill -9) while its jobs run.
	cl := submitSleepers(t, ctx, addr, 3, 3, "crash-submit", notJS, "", 0)
	untilJobs(t, ctx, addr, cl, "3 running", allIn(wire.JobState_JOB_STATE_RUNNING))
	s.Crash()
	s = startJobManager(t, scfg)
	got := untilJobs(t, ctx, addr, cl, "3 completed", allIn(wire.JobState_JOB_STATE_COMPLETED))
	for _, j := range got {
		if n := logCount(j, "started"); n != 1 || j.Tries != 1 {
			t.Errorf("%s started %d times (%d tries) across the submit manager's restart", j.Id, n, j.Tries)
		}
	}

	// 2. An execute manager dies and comes back within lost_after.
	untilFree(t, ctx, e2)
	cl = submitSleepers(t, ctx, addr, 2, 6, "crash-exec", `name == "je2"`, "", 0)
	untilJobs(t, ctx, addr, cl, "one running", func(js []*wire.JobInfo) bool {
		return slices.ContainsFunc(js, func(j *wire.JobInfo) bool { return j.State == wire.JobState_JOB_STATE_RUNNING })
	})
	e2.Crash()
	time.Sleep(time.Second)
	e2 = startJobManager(t, e2cfg)
	got = untilJobs(t, ctx, addr, cl, "2 completed", allIn(wire.JobState_JOB_STATE_COMPLETED))
	for _, j := range got {
		if logCount(j, "started") != 1 || logCount(j, "lost") != 0 || j.Manager != "je2" {
			t.Errorf("%s: started %d, lost %d, at %s", j.Id, logCount(j, "started"), logCount(j, "lost"), j.Manager)
		}
	}

	// 3. An execute manager is gone past lost_after: the job moves.
	untilFree(t, ctx, e2)
	cl = submitSleepers(t, ctx, addr, 1, 8, "lost-exec", notJS, `name == "je2" ? 1 : 0`, 10*time.Second)
	untilJobs(t, ctx, addr, cl, "running at je2", func(js []*wire.JobInfo) bool {
		return js[0].State == wire.JobState_JOB_STATE_RUNNING && js[0].Manager == "je2"
	})
	e2.Crash()
	untilJobs(t, ctx, addr, cl, "running again at je1", func(js []*wire.JobInfo) bool {
		return js[0].State == wire.JobState_JOB_STATE_RUNNING && js[0].Manager == "je1"
	})
	e2 = startJobManager(t, e2cfg)
	got = untilJobs(t, ctx, addr, cl, "completed at je1, the copy at je2 discarded", func(js []*wire.JobInfo) bool {
		return js[0].State == wire.JobState_JOB_STATE_COMPLETED && logCount(js[0], "discarded") == 1
	})
	if j := got[0]; j.Manager != "je1" || logCount(j, "lost") != 1 || j.Moves != 1 {
		t.Errorf("%s at %s: lost %d, moves %d", j.Id, j.Manager, logCount(j, "lost"), j.Moves)
	}
	// nothing of the job is left at je2
	c2, err := dialClient(t, ctx, e2.Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	for {
		list, err := c2.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_LIST})
		if err == nil && len(list.Instances) == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the lost copy is still at je2: %v %v", list, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// 4. The supervisor of a running job is killed at its executor (not
	// the manager, not the program): the program did not fail, so the
	// job is matched again as from a lost host, and completes; it is
	// never failed for it.
	untilFree(t, ctx, e2)
	cl = submitSleepers(t, ctx, addr, 1, 8, "shim-killed", `name == "je2"`, "", 0)
	untilJobs(t, ctx, addr, cl, "running at je2", func(js []*wire.JobInfo) bool {
		return js[0].State == wire.JobState_JOB_STATE_RUNNING && js[0].Manager == "je2"
	})
	states, _ := filepath.Glob(filepath.Join(e2cfg.DataDir, "apps", "run", "*", "state.json"))
	killed := 0
	for _, f := range states {
		var st struct {
			State   string `json:"state"`
			ShimPid int    `json:"shim_pid"`
		}
		if data, err := os.ReadFile(f); err == nil && json.Unmarshal(data, &st) == nil && st.State == "running" && st.ShimPid > 0 {
			if err := syscall.Kill(st.ShimPid, syscall.SIGKILL); err == nil {
				killed++
			}
		}
	}
	if killed != 1 {
		t.Fatalf("killed %d supervisors at je2 (of %d instances)", killed, len(states))
	}
	got = untilJobs(t, ctx, addr, cl, "completed after its supervisor was killed", allIn(wire.JobState_JOB_STATE_COMPLETED))
	if j := got[0]; logCount(j, "lost") != 1 || logCount(j, "failed") != 0 || logCount(j, "retried") != 0 {
		t.Errorf("%s: lost %d, failed %d, retried %d", j.Id, logCount(j, "lost"), logCount(j, "failed"), logCount(j, "retried"))
	}
	untilNoApps(t, ctx, e1)
}

// untilFree waits until m has no live reservation (the claims of jobs
// before are let go).
func untilFree(t *testing.T, ctx context.Context, m *daemon.Manager) {
	t.Helper()
	c, err := dialClient(t, ctx, m.Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for {
		rs, err := c.Reservations(ctx, false, false)
		if err == nil && rs.Live == 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s's reservations were not released: %v %v", m.Cfg.Name, rs, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A job whose begin is ahead books a window on an executor's calendar
// at once, and is staged and started when the window begins, not before.
func TestJobBeginBooksAWindow(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running jobs needs root (confined applications)")
	}
	top := jobManager(t, "wb-e", nil)
	s := jobManager(t, "wb-s", top)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := dialClient(t, ctx, s.Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	src := filepath.Join(t.TempDir(), "square")
	os.WriteFile(src, []byte(squareJob), 0o755)
	bundle, err := deploy.PackProgram(deploy.ProgramBundle{Name: "square", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	sha := sendBlob(t, ctx, c, bundle)
	begin := time.Now().Add(8 * time.Second)
	spec := &wire.JobSpec{Name: "square", Count: 1, BundleSha256: sha, App: "square", Args: []string{"3"}, Cpus: 1, Mem: 64 << 20,
		RuntimeMs: 60000, Requirement: `name == "wb-e"`, Outputs: []string{"result.txt"}, BeginUnixMs: begin.UnixMilli(), InDir: "in", OutDir: "out"}
	rep, err := jobCall(ctx, c, &wire.JobRequest{Op: wire.JobRequest_OP_SUBMIT, RequestId: "wb", User: "alice", Jobs: []*wire.JobSpec{spec}})
	if err != nil {
		t.Fatal(err)
	}
	got := untilJobs(t, ctx, s.Addr(), rep.Cluster, "a window booked", allIn(wire.JobState_JOB_STATE_RESERVED))
	if time.Now().After(begin) {
		t.Skip("the machine is too slow to see the booking before the window begins")
	}
	if !strings.Contains(got[0].Log[len(got[0].Log)-1].Detail, "window booked ahead") {
		t.Fatalf("reserved: %v", got[0].Log[len(got[0].Log)-1])
	}
	e, err := dialClient(t, ctx, top.Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rs, err := e.Reservations(ctx, true, false)
	if err != nil || len(rs.Reservations) != 1 || !rs.Reservations[0].Window || rs.Reservations[0].StartUnixMs != begin.UnixMilli() {
		t.Fatalf("the executor's calendar: %v %v", rs, err)
	}
	got = untilJobs(t, ctx, s.Addr(), rep.Cluster, "completed", allIn(wire.JobState_JOB_STATE_COMPLETED))
	if got[0].StartedUnixMs < begin.UnixMilli() {
		t.Fatalf("started %v, before its begin %v", time.UnixMilli(got[0].StartedUnixMs), begin)
	}
	untilNoApps(t, ctx, top)
}

// untilNoApps waits until the managers run no application (the jobs'
// instances are removed once they end): a test must not end, and its
// data dirs be deleted, under a removal going on.
func untilNoApps(t *testing.T, ctx context.Context, ms ...*daemon.Manager) {
	t.Helper()
	for _, m := range ms {
		c, err := dialClient(t, ctx, m.Addr(), p2p.ClientHostOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for {
			list, err := c.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_LIST})
			if err == nil && len(list.Instances) == 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s still runs applications: %v %v", m.Cfg.Name, list, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.Close()
	}
}
