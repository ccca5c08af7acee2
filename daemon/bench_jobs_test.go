package daemon_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/wire"
)

// Durable job submissions: a submit is answered only once its jobs are
// on disk (the job runtime writes what queued meanwhile in one
// transaction). 32 clients submit one-job clusters as fast as they can;
// the jobs wait for a begin a day ahead, so nothing else runs. Reported
// against the disk's own single-fsync commit rate measured in the same
// run: x_fsync = submits/s ÷ fsync_commits/s. (Goal: ≥ 5,000 submits/s;
// Slurm documents about 1,000/s.)
//
//	go test -run '^$' -bench 'DurableJobSubmit' -benchtime 20000x ./daemon/
func BenchmarkDurableJobSubmit(b *testing.B) {
	dir := b.TempDir()
	cfg := durableConfig(b, dir)
	cfg.JobsMaxQueued, cfg.JobsMaxQueuedPerUser = 10_000_000, 10_000_000
	m, err := daemon.Start(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Stop()
	cls := dialDurableClients(b, m.Addr(), durableClients)
	defer closeDurableClients(b, cls)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// the program, sent once
	bundle := []byte("not a real bundle: these jobs never start")
	sha := benchBlob(b, ctx, cls[0], bundle)
	fsyncs := durableFsyncRate(b, dir, durableFsyncOps)
	begin := time.Now().Add(24 * time.Hour).UnixMilli()
	var seq atomic.Int64
	elapsed := runDurableClients(b, cls, b.N, func(ctx context.Context, c *client.Client) error {
		n := seq.Add(1)
		spec := &wire.JobSpec{Name: "bench", Count: 1, BundleSha256: sha, App: "bench", Args: []string{fmt.Sprint(n)},
			Cpus: 1, Mem: 1 << 20, RuntimeMs: 1000, BeginUnixMs: begin, InDir: "in", OutDir: "out"}
		ctx, cancel := context.WithTimeout(ctx, durableOpTimeout)
		defer cancel()
		rep, err := c.Call(ctx, &wire.Envelope{Body: &wire.Envelope_JobRequest{JobRequest: &wire.JobRequest{
			Op: wire.JobRequest_OP_SUBMIT, RequestId: fmt.Sprintf("bench-%d", n), User: "bench", Jobs: []*wire.JobSpec{spec}}}})
		if err != nil {
			return err
		}
		if e := rep.GetError(); e != nil {
			return fmt.Errorf("submit: %s", e.Message)
		}
		if !strings.HasPrefix(rep.GetJobReply().GetCluster(), "bench.") {
			return fmt.Errorf("submit answered %v", rep)
		}
		return nil
	})
	perSec := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(perSec, "submits/s")
	b.ReportMetric(fsyncs, "fsync_commits/s")
	b.ReportMetric(perSec/fsyncs, "x_fsync")
}

func benchBlob(b *testing.B, ctx context.Context, c *client.Client, data []byte) string {
	rep, err := c.Call(ctx, &wire.Envelope{Body: &wire.Envelope_JobRequest{JobRequest: &wire.JobRequest{
		Op: wire.JobRequest_OP_BLOB, Sha256: sha256hex(data), Size: int64(len(data)), Data: data}}})
	if err != nil || rep.GetError() != nil {
		b.Fatalf("blob: %v %v", rep, err)
	}
	return sha256hex(data)
}
