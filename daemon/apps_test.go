package daemon_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/deploy"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

const loopApp = `name = "loop"
version = "1"
[install]
files = [{ from = "run.sh", mode = "0755" }]
[run]
command = ["/bin/sh", "run.sh"]
stop_grace = "1s"
`

func packLoop(t *testing.T, extra string) string {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, deploy.ManifestName), []byte(loopApp), 0o644)
	os.WriteFile(filepath.Join(dir, "run.sh"), []byte("while :; do echo tick; sleep 0.1; done\n"+extra), 0o755)
	out := filepath.Join(t.TempDir(), "loop.gapp")
	f, _ := os.Create(out)
	if _, err := deploy.Pack(dir, f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return out
}

// Over libp2p: the holder uploads and installs on its committed
// reservation and starts the app; another client may look but not act;
// the lease runs out and the manager removes the app, leaving its
// applications' directory as it was.
func TestAppsOverLibp2p(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running applications needs root (cgroups)")
	}
	cfg := config.Default()
	cfg.Name = "apps1"
	cfg.DataDir = t.TempDir()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.CPUs, cfg.Memory = 4, 8<<30
	cfg.Reservations = reservation.Limits{MinLease: time.Second}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := daemon.Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	appsDir := filepath.Join(cfg.DataDir, daemon.AppsDir)
	before, _ := deploy.Digest(daemon.InstallDirs(cfg.DataDir)...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	holder, err := dialClient(t, ctx, m.Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	other, err := dialClient(t, ctx, m.Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	res, _, err := holder.Reserve(ctx, &wire.ReserveRequest{RequestId: "r1", Commit: true, LeaseMs: 3000,
		Amounts: []*wire.Amount{{Kind: "cpus", N: 1}, {Kind: "mem", N: 128 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	bundle := packLoop(t, "")
	code := func(err error) wire.ErrorReply_Code {
		var re *client.RemoteError
		if errors.As(err, &re) {
			return re.Code
		}
		return -1
	}
	if _, err := other.Install(ctx, bundle, res.Id, nil); code(err) != wire.ErrorReply_CODE_FORBIDDEN {
		t.Fatalf("a non-holder's upload: %v", err)
	}
	rep, err := holder.Install(ctx, bundle, res.Id, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := rep.Instances[0].Id
	if id != res.Id+".loop" {
		t.Fatalf("instance %s", id)
	}
	if _, err := holder.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_START, Instance: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_STOP, Instance: id}); code(err) != wire.ErrorReply_CODE_FORBIDDEN {
		t.Fatalf("a non-holder's stop: %v", err)
	}
	st, err := other.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_STATUS, Instance: id})
	if err != nil || st.Instances[0].State != "running" || st.Instances[0].MemLimit != 128<<20 {
		t.Fatalf("status: %v %v", st, err)
	}
	// Queries see it.
	for start := time.Now(); ; {
		q, err := other.Query(ctx, &wire.QueryRequest{Requirement: `apps.loop.running == 1 && apps.loop.instances == 1 && !("other" in apps)`, Want: 1, Limit: 1})
		if err == nil && len(q.Offers) == 1 {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("a query for the running app: %v %v", q, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The lease (3 s) runs out: the manager removes the app by itself.
	deadline := time.Now().Add(20 * time.Second)
	for {
		list, err := other.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_LIST})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Instances) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the app outlived its lease: %v", list.Instances)
		}
		time.Sleep(100 * time.Millisecond)
	}
	after, _ := deploy.Digest(daemon.InstallDirs(cfg.DataDir)...)
	if after != before {
		entries, _ := filepath.Glob(filepath.Join(appsDir, "*", "*"))
		t.Fatalf("the applications' directory differs after the lease ended: %s", strings.Join(entries, " "))
	}
	if _, err := holder.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_START, Instance: id}); code(err) != wire.ErrorReply_CODE_GONE {
		t.Fatalf("start after the lease: %v", err)
	}
}
