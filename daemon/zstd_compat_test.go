package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/deploy"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/node/p2p/transfer"
	"github.com/gridmgr/gridmgr/wire"
)

// asOlder makes m look like a manager before bundle protocol 1.2.0 to
// its peers (it stops serving that id; libp2p's identify push tells
// them), and waits until by sees it so.
func asOlder(t *testing.T, ctx context.Context, m, by *daemon.Manager) {
	t.Helper()
	m.Host.LibP2P().RemoveStreamHandler(transfer.ProtocolZstd)
	for {
		ps, err := by.Host.LibP2P().Peerstore().SupportsProtocols(m.Host.LibP2P().ID(), protocol.ID(transfer.ProtocolZstd))
		if err == nil && len(ps) == 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatal("the older manager's protocols did not reach its peer")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bundlesIn lists the bundles m's store holds.
func bundlesIn(t *testing.T, m *daemon.Manager) map[string]bool {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(m.Cfg.DataDir, "apps", "bundles"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, de := range des {
		if name := de.Name(); filepath.Ext(name) == ".gapp" {
			out[name[:len(name)-len(".gapp")]] = true
		}
	}
	return out
}

// A job whose program is packed with Zstandard, matched to a manager of
// an older version (one that reads no Zstandard): the submit manager's
// stager sends it the bundle deflated — the bundle a client of its
// version would have packed — and installs it by that copy's hash; the
// job completes there, and the older manager never holds the Zstandard
// bundle.
func TestJobStagedToAnOlderManager(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running jobs needs root (confined applications)")
	}
	top := jobManager(t, "js", nil)
	old := jobManager(t, "jold", top)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		untilNoApps(t, ctx, old)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := dialWhenFormed(t, ctx, top, 1)
	defer c.Close()
	asOlder(t, ctx, old, top)
	src := filepath.Join(t.TempDir(), "square")
	os.WriteFile(src, []byte(squareJob), 0o755)
	zb, err := deploy.PackProgram(deploy.ProgramBundle{Name: "square", Source: src, Zstd: true})
	if err != nil {
		t.Fatal(err)
	}
	db, err := deploy.PackProgram(deploy.ProgramBundle{Name: "square", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	sha := sendBlob(t, ctx, c, zb)
	rep, err := jobCall(ctx, c, &wire.JobRequest{Op: wire.JobRequest_OP_SUBMIT, RequestId: "z-1", User: "alice", Jobs: []*wire.JobSpec{{
		Name: "square", Count: 1, BundleSha256: sha, App: "square", Args: []string{"7"}, Cpus: 1, Mem: 64 << 20, RuntimeMs: 60000,
		Requirement: `name == "jold"`, Outputs: []string{"result.txt"}, InDir: "in", OutDir: "out"}}})
	if err != nil {
		t.Fatal(err)
	}
	untilJobs(t, ctx, top.Addr(), rep.Cluster, "the job to complete", allIn(wire.JobState_JOB_STATE_COMPLETED))
	got, err := jobCall(ctx, c, &wire.JobRequest{Op: wire.JobRequest_OP_GET, Ids: []string{rep.Cluster}, Path: "result.txt"})
	if err != nil || string(got.Data) != "49\n" {
		t.Fatalf("result %q, %v", got.GetData(), err)
	}
	held := bundlesIn(t, old)
	if !held[sha256hex(db)] || held[sha] {
		t.Fatalf("the older manager holds %v; want the deflated bundle %s, not the Zstandard one %s", held, sha256hex(db)[:12], sha[:12])
	}
}

// The client packs a job's program with Zstandard for a manager that
// reads it, and deflated for one of an older version; a job whose program
// is a Zstandard .gapp goes to such a manager deflated too.
func TestJobProgramPackedForItsManager(t *testing.T) {
	top := jobManager(t, "js", nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "square"), []byte(squareJob), 0o755)
	os.WriteFile(filepath.Join(dir, "job.toml"), []byte("name = \"sq\"\nprogram = \"square\"\nargs = [\"3\"]\nruntime = \"1m\"\nrequirement = 'name == \"nowhere\"'\n"), 0o644)
	zb, _ := deploy.PackProgram(deploy.ProgramBundle{Name: "sq", Source: filepath.Join(dir, "square"), InDir: client.JobInDir, OutDir: client.JobOutDir, Zstd: true})
	db, _ := deploy.PackProgram(deploy.ProgramBundle{Name: "sq", Source: filepath.Join(dir, "square"), InDir: client.JobInDir, OutDir: client.JobOutDir})
	os.WriteFile(filepath.Join(dir, "sq.gapp"), zb, 0o644)
	os.WriteFile(filepath.Join(dir, "gapp.toml"), []byte("name = \"sq\"\nprogram = \"sq.gapp\"\nargs = [\"3\"]\nruntime = \"1m\"\nrequirement = 'name == \"nowhere\"'\n"), 0o644)
	// The jobs match no manager: only what the submit sends is looked at.
	submitted := func(req, file string) string {
		t.Helper()
		c, err := dialClient(t, ctx, top.Addr(), p2p.ClientHostOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sub, err := c.SubmitJobFile(ctx, filepath.Join(dir, file), client.SubmitOptions{User: "alice", RequestID: req})
		if err != nil {
			t.Fatal(err)
		}
		if len(sub.IDs) != 1 {
			t.Fatalf("submitted %+v", sub)
		}
		return sub.Cluster
	}
	spooled := func(sha string) bool {
		_, err := os.Stat(filepath.Join(top.Cfg.DataDir, daemon.JobsDir, "spool", "blobs", sha))
		return err == nil
	}
	submitted("p-1", "job.toml")
	if !spooled(sha256hex(zb)) || spooled(sha256hex(db)) {
		t.Fatal("a manager that reads Zstandard was not sent the program packed with it")
	}
	top.Host.LibP2P().RemoveStreamHandler(transfer.ProtocolZstd)
	submitted("p-2", "gapp.toml")
	if !spooled(sha256hex(db)) {
		t.Fatal("an older manager was not sent the program's .gapp deflated")
	}
	os.WriteFile(filepath.Join(dir, "job2.toml"), []byte("name = \"sq2\"\nprogram = \"square\"\nargs = [\"3\"]\nruntime = \"1m\"\nrequirement = 'name == \"nowhere\"'\n"), 0o644)
	db2, _ := deploy.PackProgram(deploy.ProgramBundle{Name: "sq2", Source: filepath.Join(dir, "square"), InDir: client.JobInDir, OutDir: client.JobOutDir})
	submitted("p-3", "job2.toml")
	if !spooled(sha256hex(db2)) {
		t.Fatal("an older manager was not sent the program deflated")
	}
}
