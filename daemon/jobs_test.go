package daemon_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	cfg := config.Default()
	cfg.Name = name
	cfg.DataDir = t.TempDir()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
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

// An array of jobs handed to one manager runs on the grid below it: each
// index once, retried where its program fails, held once its retries are
// spent, its results brought back to the submit manager.
func TestJobsRunOnTheGrid(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running jobs needs root (confined applications)")
	}
	top := jobManager(t, "js", nil)
	jobManager(t, "je1", top)
	jobManager(t, "je2", top)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := dialClient(t, ctx, top.Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// wait for the inferiors
	for {
		tr, err := c.Tree(ctx, 2)
		if err == nil && len(tr.Children) == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the grid did not form")
		}
		time.Sleep(50 * time.Millisecond)
	}
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
