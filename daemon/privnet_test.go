package daemon_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/wire"
)

// privateConfig is a manager on loopback that holds the pre-shared key
// psk (swarm.key bytes; nil: an open grid) and joins superior.
func privateConfig(t *testing.T, name string, psk []byte, superior string) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Name = name
	cfg.DataDir = filepath.Join(t.TempDir(), name)
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
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
	return cfg
}

func startPrivate(t *testing.T, cfg config.Config) *daemon.Manager {
	t.Helper()
	m, err := daemon.Start(cfg, testLogger(t).With("at", cfg.Name))
	if err != nil {
		t.Fatalf("start %s: %v", cfg.Name, err)
	}
	t.Cleanup(m.Stop)
	return m
}

// treeOf asks m in-process for its subtree, rendered as the grid tests do.
func treeOf(m *daemon.Manager) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rep, err := m.Driver.Request(ctx, &wire.Envelope{Body: &wire.Envelope_TreeRequest{TreeRequest: &wire.TreeRequest{BudgetMs: 1000}}})
	if err != nil {
		return "error: " + err.Error()
	}
	return renderTree(rep.GetTreeReply().GetRoot())
}

// waitTreeOf polls m's tree until it is one of want.
func waitTreeOf(t *testing.T, m *daemon.Manager, within time.Duration, want ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	var got string
	for time.Now().Before(deadline) {
		got = treeOf(m)
		for _, w := range want {
			if got == w {
				return
			}
		}
		time.Sleep(20 * time.Millisecond) // polling a real network, not timing
	}
	t.Fatalf("tree under %s = %s, want %s", m.Cfg.Name, got, strings.Join(want, " or "))
}

// A launcher on an open grid (gm154, under gm152, above gm160) opens a
// private network; a manager holding its key joins it over the private
// address as an ordinary inferior, seen in the launcher's tree and its
// superior's; nobody without the key reaches that manager; after the
// launcher restarts, the private inferior comes back on its own, on the
// same key and port.
func TestPrivateNetworkGlideInJoinsLauncher(t *testing.T) {
	g := newGrid(t)
	for _, n := range []string{"gm152", "gm154", "gm160"} {
		g.start(n)
	}
	g.waitTree("gm152", "gm152(gm154(gm160))", 30*time.Second)
	launcher := g.mgrs["gm154"]

	pn, err := launcher.OpenPrivateNetwork("glide")
	if err != nil {
		t.Fatal(err)
	}
	if len(pn.Addrs) == 0 || !strings.HasPrefix(pn.Addrs[0], "/ip4/127.0.0.1/tcp/") || !strings.HasSuffix(pn.Addrs[0], "/p2p/"+launcher.Host.PeerID()) {
		t.Fatalf("private addresses %q", pn.Addrs)
	}
	if slicesContain(launcher.Host.FullAddrs(), pn.Addrs[0]) {
		t.Fatalf("private address %s is also a main address", pn.Addrs[0])
	}
	keyFile := filepath.Join(launcher.Cfg.DataDir, daemon.PrivnetDir, "glide.key")
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %s: %v, %v", keyFile, fi.Mode(), err)
	}
	again, err := launcher.OpenPrivateNetwork("glide")
	if err != nil || string(again.PSK) != string(pn.PSK) {
		t.Fatalf("opening glide again: %v, same key %v", err, string(again.PSK) == string(pn.PSK))
	}

	// The glide-in: private_network_key = the launcher's private key,
	// superiors = its private address.
	glide := startPrivate(t, privateConfig(t, "glide1", pn.PSK, pn.Addrs[0]))
	waitTreeOf(t, launcher, 30*time.Second, "gm154(glide1,gm160)", "gm154(gm160,glide1)")
	g.waitTree("gm152", "gm152(gm154(glide1,gm160))", 30*time.Second)

	// No key, or another key: neither a client nor a manager gets in.
	pa, err := peeraddr.ParsePeerMaddr(glide.Addr())
	if err != nil {
		t.Fatal(err)
	}
	other, err := p2p.GeneratePSK()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range [][]byte{nil, other} {
		opts := p2p.ClientHostOptions{}
		if key != nil {
			f := filepath.Join(t.TempDir(), "other.key")
			os.WriteFile(f, key, 0o600)
			if opts.PSK, err = p2p.ReadPSK(f); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		c, err := client.DialNew(ctx, glide.Addr(), opts)
		if err == nil {
			_, err = c.Status(ctx)
			c.Close()
		}
		cancel()
		if err == nil {
			t.Fatalf("a client with key %v reached the private manager %s", key != nil, pa)
		}
	}
	intruder := startPrivate(t, privateConfig(t, "intruder", other, glide.Addr()))
	waitStatus(t, intruder, "intruder to fail its dials to glide1", func(st *wire.StatusReply) bool {
		for _, r := range st.Relations {
			if r.Peer == glide.Host.PeerID() && r.DialAttempts >= 2 && r.LastError != "" {
				return true
			}
		}
		return false
	})
	if got := treeOf(glide); got != "glide1" {
		t.Fatalf("tree under glide1 = %s, want it alone", got)
	}
	// And a client of the launcher's open grid reaches the launcher, not
	// through it the glide-in's key.
	c := dialAs(t, g, "gm154", p2p.ClientHostOptions{})
	if _, err := c.OpenPrivateNetwork(context.Background(), "mine"); codeOf(err) != wire.ErrorReply_CODE_FORBIDDEN {
		t.Fatalf("a stranger opened a private network: %v", err)
	}

	// The launcher restarts on its data dir: the same key, the same
	// port, and the glide-in comes back by itself.
	g.stop("gm154")
	launcher = g.start("gm154")
	nets := launcher.PrivateNetworks()
	if len(nets) != 1 || nets[0].Name != "glide" || string(nets[0].PSK) != string(pn.PSK) || nets[0].Addrs[0] != pn.Addrs[0] {
		t.Fatalf("after a restart: %+v, want glide at %s with its key", nets, pn.Addrs[0])
	}
	// gm160 went to its grandparent meanwhile and stays there; the
	// glide-in, which reaches nobody else, waited for the launcher.
	waitTreeOf(t, launcher, 30*time.Second, "gm154(glide1)")
	waitTreeOf(t, g.mgrs["gm152"], 30*time.Second, "gm152(gm154(glide1),gm160)", "gm152(gm160,gm154(glide1))")

	// Closing it loses the glide-in and deletes the key.
	if err := launcher.ClosePrivateNetwork("glide"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(keyFile); !os.IsNotExist(err) {
		t.Fatalf("key file after close: %v", err)
	}
	waitTreeOf(t, launcher, 30*time.Second, "gm154", "gm154(glide1[down])")
}

func waitStatus(t *testing.T, m *daemon.Manager, what string, ok func(*wire.StatusReply) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		rep, err := m.Driver.Request(ctx, &wire.Envelope{Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}})
		cancel()
		if err == nil && ok(rep.GetStatusReply()) {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling a real network, not timing
	}
	t.Fatalf("timed out waiting for %s", what)
}

func slicesContain(s []string, x string) bool {
	for _, e := range s {
		if e == x {
			return true
		}
	}
	return false
}

// The wire request: a peer that is neither an admin nor a user is
// refused, saying so; a user gets a key that lets a manager join, the
// same key again for the same name, and at most 4 networks; another user
// neither sees nor takes them; an admin lists them all with their keys.
func TestPrivateNetworkRequest(t *testing.T) {
	keys := map[string]p2p.ClientHostOptions{}
	for _, who := range []string{"alice", "bob", "admin", "stranger"} {
		k, err := p2p.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		keys[who] = p2p.ClientHostOptions{Key: k}
	}
	cfg := privateConfig(t, "launcher", nil, "")
	cfg.Admins = []string{p2p.PeerIDOf(keys["admin"].Key)}
	cfg.Users = map[string][]string{"alice": {p2p.PeerIDOf(keys["alice"].Key)}, "bob": {p2p.PeerIDOf(keys["bob"].Key)}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m := startPrivate(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dial := func(who string) *client.Client {
		c, err := dialClient(t, ctx, m.Addr(), keys[who])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	stranger := dial("stranger")
	_, err := stranger.OpenPrivateNetwork(ctx, "x")
	if codeOf(err) != wire.ErrorReply_CODE_FORBIDDEN || !strings.Contains(err.Error(), "[users]") || !strings.Contains(err.Error(), "admin") {
		t.Fatalf("a stranger's open: %v", err)
	}
	if _, err := stranger.PrivateNetworks(ctx); codeOf(err) != wire.ErrorReply_CODE_FORBIDDEN {
		t.Fatalf("a stranger's list: %v", err)
	}

	alice := dial("alice")
	first, err := alice.OpenPrivateNetwork(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Psk) == 0 || len(first.Addrs) == 0 || first.Owner != alice.Self() {
		t.Fatalf("alice's network: %v", first)
	}
	if again, err := alice.OpenPrivateNetwork(ctx, "a1"); err != nil || string(again.Psk) != string(first.Psk) {
		t.Fatalf("alice's a1 again: %v", err)
	}
	for i := 2; i <= daemon.MaxPrivateNetworksPerPeer; i++ {
		if _, err := alice.OpenPrivateNetwork(ctx, fmt.Sprintf("a%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	_, err = alice.OpenPrivateNetwork(ctx, "a5")
	if codeOf(err) != wire.ErrorReply_CODE_REFUSED || !strings.Contains(err.Error(), fmt.Sprintf("(%d)", daemon.MaxPrivateNetworksPerPeer)) {
		t.Fatalf("alice's 5th network: %v", err)
	}
	if _, err := alice.OpenPrivateNetwork(ctx, "../etc"); codeOf(err) != wire.ErrorReply_CODE_BAD_REQUEST {
		t.Fatalf("a bad name: %v", err)
	}

	// bob neither gets alice's key nor sees her networks, nor closes them.
	bob := dial("bob")
	if _, err := bob.OpenPrivateNetwork(ctx, "a1"); codeOf(err) != wire.ErrorReply_CODE_CONFLICT {
		t.Fatalf("bob opening alice's a1: %v", err)
	}
	if err := bob.ClosePrivateNetwork(ctx, "a1"); codeOf(err) != wire.ErrorReply_CODE_FORBIDDEN {
		t.Fatalf("bob closing alice's a1: %v", err)
	}
	if ns, err := bob.PrivateNetworks(ctx); err != nil || len(ns) != 0 {
		t.Fatalf("bob's list: %v, %v", ns, err)
	}
	admin := dial("admin")
	ns, err := admin.PrivateNetworks(ctx)
	if err != nil || len(ns) != daemon.MaxPrivateNetworksPerPeer || string(ns[0].Psk) != string(first.Psk) {
		t.Fatalf("the admin's list: %d networks, %v", len(ns), err)
	}

	// The key alice got lets a manager join m as its inferior.
	glide := startPrivate(t, privateConfig(t, "glide1", first.Psk, first.Addrs[0]))
	waitTreeOf(t, m, 30*time.Second, "launcher(glide1)")
	_ = glide

	// alice closes a1: gone from the list, the key file deleted, and she
	// may open another.
	if err := alice.ClosePrivateNetwork(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, daemon.PrivnetDir, "a1.key")); !os.IsNotExist(err) {
		t.Fatalf("a1's key after close: %v", err)
	}
	waitTreeOf(t, m, 30*time.Second, "launcher", "launcher(glide1[down])")
	if _, err := alice.OpenPrivateNetwork(ctx, "a5"); err != nil {
		t.Fatal(err)
	}
	if ns, err := alice.PrivateNetworks(ctx); err != nil || len(ns) != daemon.MaxPrivateNetworksPerPeer || ns[0].Name != "a2" {
		t.Fatalf("alice's list: %v, %v", ns, err)
	}
}
