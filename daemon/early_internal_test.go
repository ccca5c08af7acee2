package daemon

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/deploy"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/wire"
)

// TestEarlyUnpackingThroughTheManager: a Zstandard bundle uploaded to a
// manager is unpacked while it arrives, and its installation writes the
// files from that (the cache counts them) with the bytes the bundle
// holds; a second installation of the same bundle, with nothing decoded
// early left for it, decodes them itself and writes the same. A
// deflated bundle is never unpacked early.
func TestEarlyUnpackingThroughTheManager(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("installing applications needs root")
	}
	m := internalManager(t, "early", nil, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.DialNew(ctx, m.Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// 3 MiB that compress (three frames and a part) and a script.
	data := make([]byte, 3<<20+12345)
	for i := 0; i < len(data); i += 64 {
		_, _ = rand.Read(data[i : i+16])
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "run.sh"), []byte("sleep 1000\n"), 0o755)
	os.WriteFile(filepath.Join(dir, deploy.ManifestName), []byte("name = \"early\"\nversion = \"1\"\n[install]\n"+
		"files = [{ from = \"data.bin\" }, { from = \"data.bin\", to = \"copy/data.bin\" }, { from = \"run.sh\", mode = \"0755\" }]\n"+
		"[run]\ncommand = [\"/bin/sh\", \"run.sh\"]\n"), 0o644)
	pack := func(zstd bool) string {
		f, err := os.Create(filepath.Join(t.TempDir(), "b.gapp"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := deploy.PackWith(dir, f, deploy.PackOptions{Zstd: zstd}); err != nil {
			t.Fatal(err)
		}
		f.Close()
		return f.Name()
	}
	n := 0
	install := func(bundle string, send bool) {
		t.Helper()
		n++
		res, _, err := cl.Reserve(ctx, &wire.ReserveRequest{RequestId: fmt.Sprint("early", n), Commit: true, Amounts: []*wire.Amount{{Kind: "cpus", N: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(bundle)
		sum := sha256.Sum256(raw)
		sha := hex.EncodeToString(sum[:])
		if send {
			if got, err := cl.SendBundle(ctx, bundle, res.Id, nil); err != nil || got != sha {
				t.Fatalf("upload: %v (stored as %s, want %s)", err, got, sha)
			}
		}
		rep, err := cl.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_INSTALL, Reservation: res.Id, BundleSha256: sha})
		if err != nil {
			t.Fatal(err)
		}
		id := rep.Instances[0].Id
		// Both placements of data.bin hold its bytes, whichever way they
		// were written.
		found := 0
		filepath.WalkDir(filepath.Join(m.Cfg.DataDir, AppsDir, "instances"), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Name() != "data.bin" || !strings.Contains(p, id) {
				return nil
			}
			if b, _ := os.ReadFile(p); !bytes.Equal(b, data) {
				t.Errorf("%s: %d bytes, not the %d packed", p, len(b), len(data))
			}
			found++
			return nil
		})
		if found != 2 {
			t.Fatalf("instance %s: %d copies of data.bin found, want 2", id, found)
		}
		if _, err := cl.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_REMOVE, Instance: id}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := cl.ReservationOp(ctx, wire.ReservationOpRequest_OP_RELEASE, res.Id, 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	zst := pack(true)
	install(zst, true)
	if h := m.apps.early.Hits(); h != 2 {
		t.Fatalf("the installation wrote %d files from early unpacking, want 2 (both placements of data.bin)", h)
	}
	install(zst, false) // stored already: nothing arrives, nothing decoded early
	if h := m.apps.early.Hits(); h != 2 {
		t.Fatalf("a second installation took %d files from early unpacking", h-2)
	}
	install(pack(false), true)
	if h := m.apps.early.Hits(); h != 2 {
		t.Fatalf("a deflated bundle had %d files unpacked early", h-2)
	}
	if held := m.apps.early.Held(); held != 0 {
		t.Fatalf("early unpacking still holds %d bytes after every installation took or dropped it", held)
	}
}
