package daemon

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/deploy"
	"github.com/gridmgr/gridmgr/node/p2p/transfer"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

func internalManager(t *testing.T, name string, psk []byte, superior string) *Manager {
	t.Helper()
	cfg := config.Default()
	cfg.Name = name
	cfg.DataDir = t.TempDir()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.CPUs, cfg.Memory = 2, 4<<30
	cfg.Reservations = reservation.Limits{MinLease: time.Second}
	cfg.HeartbeatInterval = 100 * time.Millisecond
	cfg.RetryInitial = 50 * time.Millisecond
	cfg.RetryMax = 500 * time.Millisecond
	if psk != nil {
		cfg.PrivateNetworkKey = filepath.Join(t.TempDir(), "swarm.key")
		if err := os.WriteFile(cfg.PrivateNetworkKey, psk, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if superior != "" {
		pa, err := peeraddr.ParsePeerMaddr(superior)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Superiors = []peeraddr.PeerAddrs{pa}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

// The launcher's job dialer reaches an inferior that is on its private
// network only: a client session (status, a reservation) and a bundle
// upload go out from the private network's host, as the main one cannot
// reach that inferior at all.
func TestJobDialerReachesPrivateInferior(t *testing.T) {
	launcher := internalManager(t, "launcher", nil, "")
	pn, err := launcher.OpenPrivateNetwork("glide")
	if err != nil {
		t.Fatal(err)
	}
	glide := internalManager(t, "glide1", pn.PSK, pn.Addrs[0])
	deadline := time.Now().Add(30 * time.Second)
	for !launcher.Host.IsManager(glide.Host.PeerID()) {
		if time.Now().After(deadline) {
			t.Fatal("glide1 did not join the launcher")
		}
		time.Sleep(10 * time.Millisecond) // polling a real network, not timing
	}
	if launcher.Host.For(glide.Host.PeerID()) == launcher.Host.LibP2P() {
		t.Fatal("the launcher would reach glide1 from its main host")
	}
	// glide1's utilisation samples reach the launcher over the private
	// network's event bus.
	for {
		launcher.mon.mu.Lock()
		ev := launcher.mon.latest[glide.Host.PeerID()]
		launcher.mon.mu.Unlock()
		if ev != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no utilisation sample of glide1 reached the launcher")
		}
		time.Sleep(10 * time.Millisecond) // polling a real network, not timing
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := jobDialer{m: launcher}
	pa := peeraddr.PeerAddrs{Peer: glide.Host.PeerID(), Addrs: glide.Host.Addrs()}
	conn, err := d.Open(ctx, pa)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(conn, d)
	defer c.Close()
	st, err := c.Status(ctx)
	if err != nil || st.Name != "glide1" {
		t.Fatalf("status of glide1 through the job dialer: %v, %v", st, err)
	}
	res, _, err := c.Reserve(ctx, &wire.ReserveRequest{RequestId: "r1", Commit: true, LeaseMs: 600_000,
		Amounts: []*wire.Amount{{Kind: "cpus", N: 1}, {Kind: "mem", N: 64 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	bundle := packBundle(t)
	sha, err := d.SendBundle(ctx, glide.Host.PeerID(), bundle, res.Id, nil)
	if err != nil {
		t.Fatalf("bundle to glide1 through the job dialer: %v", err)
	}
	want, err := transfer.Hash(bundle)
	if err != nil || sha != want {
		t.Fatalf("glide1 stored %s, want %s (%v)", sha, want, err)
	}
	if _, ok := glide.apps.store.Path(sha); !ok {
		t.Fatal("the bundle is not in glide1's store")
	}

	// The main host alone cannot reach glide1, even knowing its address.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	main := launcher.Host.LibP2P()
	for _, a := range glide.Host.LibP2P().Addrs() {
		main.Peerstore().AddAddr(glide.Host.LibP2P().ID(), a, time.Minute)
	}
	if _, err := transfer.Send(ctx2, main, glide.Host.LibP2P().ID(), bundle, res.Id, nil); err == nil {
		t.Fatal("the launcher's main host reached glide1 without its key")
	}
	if launcher.Host.For(glide.Host.PeerID()) == main {
		t.Fatal("with glide1's address in the main peerstore, For names the main host though glide1 is connected on the private one")
	}
}

func packBundle(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	manifest := "name = \"hello\"\nversion = \"1\"\n[install]\nfiles = [{ from = \"blob\" }]\n[run]\ncommand = [\"/bin/true\"]\n"
	if err := os.WriteFile(filepath.Join(dir, deploy.ManifestName), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	blob := make([]byte, 64<<10)
	rand.Read(blob)
	if err := os.WriteFile(filepath.Join(dir, "blob"), blob, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "hello.gapp")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := deploy.Pack(dir, f); err != nil {
		t.Fatal(err)
	}
	return out
}
