package daemon_test

import (
	"archive/zip"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/deploy"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/node/p2p/transfer"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// bundleEnv is a manager with a committed reservation and its holder.
type bundleEnv struct {
	m      *daemon.Manager
	holder *client.Client
	res    string
	dir    string // the bundle store
}

func newBundleEnv(t *testing.T, set func(*config.Config)) *bundleEnv {
	t.Helper()
	cfg := config.Default()
	cfg.Name = "bundles1"
	cfg.DataDir = t.TempDir()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.CPUs, cfg.Memory = 4, 8<<30
	cfg.Reservations = reservation.Limits{MinLease: time.Second}
	if set != nil {
		set(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := daemon.Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	holder, err := dialClient(t, bctx(t), m.Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	res, _, err := holder.Reserve(bctx(t), &wire.ReserveRequest{RequestId: "r1", Commit: true, LeaseMs: 600_000,
		Amounts: []*wire.Amount{{Kind: "cpus", N: 1}, {Kind: "mem", N: 128 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	return &bundleEnv{m: m, holder: holder, res: res.Id, dir: filepath.Join(cfg.DataDir, daemon.AppsDir, "bundles")}
}

func bctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// bundles lists the store: its bundles' sha256s (first 12 hex digits)
// and "partial/NAME" for each partial upload.
func (e *bundleEnv) bundles(t *testing.T) []string {
	t.Helper()
	var out []string
	des, _ := os.ReadDir(e.dir)
	for _, de := range des {
		if sha, ok := strings.CutSuffix(de.Name(), ".gapp"); ok {
			out = append(out, sha[:12])
		}
	}
	des, _ = os.ReadDir(filepath.Join(e.dir, "partial"))
	for _, de := range des {
		out = append(out, "partial/"+de.Name())
	}
	slices.Sort(out)
	return out
}

func codeOf(err error) wire.ErrorReply_Code {
	var re *client.RemoteError
	if errors.As(err, &re) {
		return re.Code
	}
	return -1
}

// packApp packs an application name whose one file holds size random
// bytes (so each pack is another bundle).
func packApp(t *testing.T, name string, size int) string {
	t.Helper()
	dir := t.TempDir()
	manifest := "name = \"" + name + "\"\nversion = \"1\"\n[install]\nfiles = [{ from = \"blob\" }]\n[run]\ncommand = [\"/bin/true\"]\n"
	os.WriteFile(filepath.Join(dir, deploy.ManifestName), []byte(manifest), 0o644)
	blob := make([]byte, size)
	rand.Read(blob)
	os.WriteFile(filepath.Join(dir, "blob"), blob, 0o644)
	out := filepath.Join(t.TempDir(), name+".gapp")
	f, _ := os.Create(out)
	if _, err := deploy.Pack(dir, f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return out
}

func shaOf(t *testing.T, file string) string {
	t.Helper()
	sha, err := transfer.Hash(file)
	if err != nil {
		t.Fatal(err)
	}
	return sha[:12]
}

// A bundle whose install is refused because it is bad (deploy.Open
// refuses it) is deleted: it will never install. One refused for another
// reason, or that an instance uses, is kept.
func TestBadBundleRemovedAfterInstall(t *testing.T) {
	e := newBundleEnv(t, nil)
	ctx := bctx(t)

	// Not a zip at all.
	junk := filepath.Join(t.TempDir(), "junk.gapp")
	blob := make([]byte, 300<<10)
	rand.Read(blob)
	os.WriteFile(junk, blob, 0o644)
	_, err := e.holder.Install(ctx, junk, e.res, nil)
	if codeOf(err) != wire.ErrorReply_CODE_BAD_REQUEST || !strings.Contains(err.Error(), "not a zip archive") {
		t.Fatalf("install of a file that is no zip: %v", err)
	}
	if b := e.bundles(t); len(b) != 0 {
		t.Fatalf("the store holds %v after the install refused a bad bundle, want nothing", b)
	}

	// A zip without a manifest.
	nozip := filepath.Join(t.TempDir(), "nomanifest.gapp")
	f, _ := os.Create(nozip)
	zw := zip.NewWriter(f)
	w, _ := zw.Create("readme.txt")
	w.Write([]byte("no app.toml here"))
	zw.Close()
	f.Close()
	_, err = e.holder.Install(ctx, nozip, e.res, nil)
	if codeOf(err) != wire.ErrorReply_CODE_BAD_REQUEST || !strings.Contains(err.Error(), deploy.ManifestName) {
		t.Fatalf("install of a bundle without a manifest: %v", err)
	}
	if b := e.bundles(t); len(b) != 0 {
		t.Fatalf("the store holds %v after the install refused a bad bundle, want nothing", b)
	}

	// A good one, installed: kept.
	good := packApp(t, "blob", 10<<10)
	if _, err := e.holder.Install(ctx, good, e.res, nil); err != nil {
		t.Fatal(err)
	}
	// Another good one the reservation cannot take now (the app is
	// installed already): refused, but not bad, so kept for later.
	other := packApp(t, "blob", 10<<10)
	if _, err := e.holder.Install(ctx, other, e.res, nil); codeOf(err) != wire.ErrorReply_CODE_CONFLICT {
		t.Fatalf("second install of the app: %v", err)
	}
	want := []string{shaOf(t, good), shaOf(t, other)}
	slices.Sort(want)
	if b := e.bundles(t); !slices.Equal(b, want) {
		t.Fatalf("the store holds %v, want the two good bundles %v", b, want)
	}
}

// apps.max_store_bytes bounds the store: the bundles no instance uses go
// first, oldest first; one in use stays, and an upload that would still
// not fit is refused, naming the setting.
func TestStoreCapOverLibp2p(t *testing.T) {
	e := newBundleEnv(t, func(c *config.Config) { c.AppsMaxStore = 1 << 20 })
	ctx := bctx(t)
	used := packApp(t, "used", 500<<10)
	rep, err := e.holder.Install(ctx, used, e.res, nil)
	if err != nil {
		t.Fatal(err)
	}
	x, y := packApp(t, "x", 300<<10), packApp(t, "y", 300<<10)
	if _, err := e.holder.SendBundle(ctx, x, e.res, nil); err != nil {
		t.Fatal(err)
	}
	// 500 + 300 + 300 KiB: x, unused and the oldest, goes.
	if _, err := e.holder.SendBundle(ctx, y, e.res, nil); err != nil {
		t.Fatal(err)
	}
	want := []string{shaOf(t, used), shaOf(t, y)}
	slices.Sort(want)
	if b := e.bundles(t); !slices.Equal(b, want) {
		t.Fatalf("the store holds %v, want the bundle in use and the newest %v", b, want)
	}
	// 600 KiB does not fit beside the 500 in use.
	big := packApp(t, "big", 600<<10)
	_, err = e.holder.SendBundle(ctx, big, e.res, nil)
	if codeOf(err) != wire.ErrorReply_CODE_REFUSED || !strings.Contains(err.Error(), "apps.max_store_bytes") ||
		!strings.Contains(err.Error(), "bundles that instances use") {
		t.Fatalf("an upload past the cap: %v", err)
	}
	if b := e.bundles(t); !slices.Contains(b, shaOf(t, used)) {
		t.Fatalf("the store holds %v: the bundle in use was evicted", b)
	}
	// Removed, the instance frees its bundle: now it fits.
	if _, err := e.holder.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_REMOVE, Instance: rep.Instances[0].Id}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.holder.SendBundle(ctx, big, e.res, nil); err != nil {
		t.Fatal(err)
	}
}
