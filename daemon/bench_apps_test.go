package daemon_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/deploy"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/node/p2p/transfer"
	"github.com/gridmgr/gridmgr/wire"
)

// BenchmarkInstall10MB: upload, install and start a bundle holding 10 MB
// (random, so it does not compress) on a manager over libp2p, until the
// app runs; against a raw copy of the same number of bytes on a plain
// libp2p stream between the same hosts, in the same run. ratio is the
// first over the second (the goal is 1.5 or less); send-ratio is the
// upload alone (client.SendBundle, what client.Install does first) over
// the raw copy (the goal is 1.3 or less). The parts, per install:
// ms/sent (the upload), ms/installed (upload and install),
// ms/install-to-running (and start).
//
// "random" bundles 10 MB of random bytes (they do not compress: zip
// stores them); "program" 10 MB of an executable (this test's), which
// compresses to about 40 %, as an application's files do, so installing
// it also inflates them, deflated (gridmgr app pack --deflate, and what a
// manager of an older version is sent); "program-zstd" the same packed
// with Zstandard (gridmgr app pack's default); "program-zstd-to-older"
// that bundle sent to a manager of an older version (one without bundle
// protocol 1.2.0): the client deflates it first, and the manager installs
// the deflated copy.
//
//	go test -run '^$' -bench Install10MB -benchtime 5x ./daemon/
func BenchmarkInstall10MB(b *testing.B) {
	b.Run("random", func(b *testing.B) {
		install10MB(b, func(p []byte) { _, _ = rand.Read(p) }, false, false)
	})
	b.Run("program", func(b *testing.B) { installProgram(b, false, false) })
	b.Run("program-zstd", func(b *testing.B) { installProgram(b, true, false) })
	b.Run("program-zstd-to-older", func(b *testing.B) { installProgram(b, true, true) })
}

// installProgram is install10MB of 10 MB of this test's executable.
func installProgram(b *testing.B, zstd, older bool) {
	install10MB(b, programFill(b), zstd, older)
}

// programFill fills its argument with a different 10 MB of this test's
// executable each call (never "stored already").
func programFill(tb testing.TB) func([]byte) {
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	exe, err := os.ReadFile(self)
	if err != nil {
		tb.Fatal(err)
	}
	if len(exe) < 10<<20 {
		tb.Skipf("this test's executable holds %d bytes, not 10 MB", len(exe))
	}
	n := 0
	return func(p []byte) {
		off := (n * 4096) % (len(exe) - len(p) + 1)
		copy(p, exe[off:])
		n++
	}
}

// rawProtocol is the raw copy's protocol: the server reads everything,
// then writes one byte and closes.
const rawProtocol = "/bench/raw"

// serveRawCopy makes h the raw copy's server.
func serveRawCopy(h host.Host) {
	h.SetStreamHandler(rawProtocol, func(s network.Stream) {
		_, _ = io.Copy(io.Discard, s)
		_, _ = s.Write([]byte{1})
		_ = s.Close()
	})
}

// install10MB: older makes the manager one before bundle protocol 1.2.0.
func install10MB(b *testing.B, fill func([]byte), zstd, older bool) {
	if os.Geteuid() != 0 {
		b.Skip("running applications needs root")
	}
	m := installBenchManager(b, b.TempDir(), "127.0.0.1")
	defer m.Stop()
	if older {
		m.Host.LibP2P().RemoveStreamHandler(transfer.ProtocolZstd)
	}
	t := installRuns(b, m.Addr(), b.N, fill, zstd, older)
	t.report(b)
}

// installBenchManager starts the install benchmarks' manager, with
// its data in dir, listening on ip, serving the raw copy too.
func installBenchManager(tb testing.TB, dir, ip string) *daemon.Manager {
	cfg := config.Default()
	cfg.Name = "bench"
	cfg.DataDir = dir
	cfg.Listen = []string{"/ip4/" + ip + "/tcp/0"}
	cfg.CPUs, cfg.Memory = 64, 64<<30
	if err := cfg.Validate(); err != nil {
		tb.Fatal(err)
	}
	m, err := daemon.Start(cfg, nil)
	if err != nil {
		tb.Fatal(err)
	}
	serveRawCopy(m.Host.LibP2P())
	return m
}

// installTimes are the totals of n runs of installRuns.
type installTimes struct {
	n                             int
	raw, sent, installed, install time.Duration
}

func (t installTimes) report(b *testing.B) {
	n := float64(t.n)
	b.ReportMetric(float64(t.install)/n/1e6, "ms/install-to-running")
	b.ReportMetric(float64(t.raw)/n/1e6, "ms/raw-copy")
	b.ReportMetric(float64(t.installed)/n/1e6, "ms/installed")
	b.ReportMetric(float64(t.sent)/n/1e6, "ms/sent")
	b.ReportMetric(float64(t.install)/float64(t.raw), "ratio")
	b.ReportMetric(float64(t.sent)/float64(t.raw), "send-ratio")
}

// installRuns dials the manager at addr (which serves the raw copy too)
// from a client host of its own and, n times, makes a bundle of 10 MB
// that fill gives, copies the 10 MB raw, then uploads, installs and
// starts the bundle under a reservation of its own, and removes the
// instance. It returns the totals of each part.
func installRuns(tb testing.TB, addr string, n int, fill func([]byte), zstd, older bool) installTimes {
	ctx := context.Background()
	h, err := client.NewHost(p2p.ClientHostOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	defer h.Close()
	cl, err := client.Dial(ctx, h, addr)
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ai, err := peer.AddrInfoFromString(addr)
	if err != nil {
		tb.Fatal(err)
	}
	pid := ai.ID
	const size = 10 << 20
	payload := make([]byte, size)
	var raw, install, installed, sent time.Duration
	for i := 0; i < n; i++ {
		fill(payload)
		dir := tb.TempDir()
		os.WriteFile(filepath.Join(dir, "data.bin"), payload, 0o644)
		os.WriteFile(filepath.Join(dir, "run.sh"), []byte("sleep 1000\n"), 0o755)
		os.WriteFile(filepath.Join(dir, deploy.ManifestName), []byte("name = \"big\"\nversion = \"1\"\n[install]\nfiles = [{ from = \"data.bin\" }, { from = \"run.sh\", mode = \"0755\" }]\n[run]\ncommand = [\"/bin/sh\", \"run.sh\"]\n"), 0o644)
		bundle := filepath.Join(dir, "big.gapp")
		f, _ := os.Create(bundle)
		if _, err := deploy.PackWith(dir, f, deploy.PackOptions{Zstd: zstd}); err != nil {
			tb.Fatal(err)
		}
		f.Close()

		t0 := time.Now()
		s, err := h.LibP2P().NewStream(ctx, pid, rawProtocol)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := s.Write(payload); err != nil {
			tb.Fatal(err)
		}
		_ = s.CloseWrite()
		if _, err := io.ReadFull(s, make([]byte, 1)); err != nil {
			tb.Fatal(err)
		}
		_ = s.Close()
		raw += time.Since(t0)

		res, _, err := cl.Reserve(ctx, &wire.ReserveRequest{RequestId: fmt.Sprint("b", i), Commit: true, Amounts: []*wire.Amount{{Kind: "cpus", N: 1}}})
		if err != nil {
			tb.Fatal(err)
		}
		t0 = time.Now()
		// client.Install, in its two steps.
		sha, err := cl.SendBundle(ctx, bundle, res.Id, nil)
		if err != nil {
			tb.Fatal(err)
		}
		sent += time.Since(t0)
		rep, err := cl.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_INSTALL, Reservation: res.Id, BundleSha256: sha})
		if err != nil {
			tb.Fatal(err)
		}
		id := rep.Instances[0].Id
		installed += time.Since(t0)
		if _, err := cl.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_START, Instance: id}); err != nil {
			tb.Fatal(err)
		}
		install += time.Since(t0)
		if data, _ := os.ReadFile(bundle); older != (sha != sha256hex(data)) {
			tb.Fatalf("installed bundle %.12s of %.12s: older manager %v", sha, sha256hex(data), older)
		}
		if _, err := cl.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_REMOVE, Instance: id}); err != nil {
			tb.Fatal(err)
		}
		if err := releaseReservation(ctx, cl, res.Id); err != nil {
			tb.Fatal(err)
		}
	}
	return installTimes{n: n, raw: raw, sent: sent, installed: installed, install: install}
}
