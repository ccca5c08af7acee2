package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/relations"
)

// startPair starts manager a and, under it, manager b with policy
// bPolicy, on loopback, and returns once the relation is up on both
// sides. The CLI's client key lives in a temporary dir.
func startPair(t *testing.T, bPolicy string) (a, b *daemon.Manager) {
	t.Helper()
	t.Setenv("GRIDMGR_CLIENT_KEY", filepath.Join(t.TempDir(), "client.key"))
	dir := t.TempDir()
	var mu sync.Mutex
	up := map[string]bool{}
	formed := make(chan struct{})
	var once sync.Once
	onEvent := func(name string) func(node.Event) {
		return func(e node.Event) {
			if e.State == 0 {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			up[name+">"+e.Name] = e.State == relations.Up
			if up["a>b"] && up["b>a"] {
				once.Do(func() { close(formed) })
			}
		}
	}
	start := func(name, policy string, sup *daemon.Manager) *daemon.Manager {
		cfg := config.Default()
		cfg.Name = name
		cfg.DataDir = filepath.Join(dir, name)
		cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
		cfg.LogLevel = "error"
		cfg.CPUs, cfg.Memory, cfg.MemoryFree = 4, 8<<30, 8<<30
		cfg.Policy = policy
		if sup != nil {
			cfg.Superiors = []peeraddr.PeerAddrs{{Peer: sup.Host.PeerID(), Addrs: sup.Host.Addrs()}}
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		m, err := daemon.Start(cfg, newLogger(&strings.Builder{}, "error", false), daemon.StartOptions{OnEvent: onEvent(name)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Stop)
		return m
	}
	a = start("a", "", nil)
	b = start("b", bPolicy, a)
	select {
	case <-formed:
	case <-time.After(30 * time.Second):
		t.Fatal("a and b did not connect")
	}
	return a, b
}

// A manager whose owner policy admits only alice can be found by name,
// through another manager, for reserve --at and for commit, renew and
// release: finding a reservation's manager must not depend on passing its
// policy (the client's owner lookup asks with QueryRequest.locate).
func TestCLIOwnerLookupUnderPolicy(t *testing.T) {
	a, _ := startPair(t, `request.user in ["alice"]`)
	at := a.Addr()
	code, out, stderr := run(t, "reserve", "-n", at, "--at", "b", "--cpus", "1", "--user", "alice", "--json")
	if code != 0 {
		t.Fatalf("reserve --at b as alice through a: exit %d\n%s\n%s", code, out, stderr)
	}
	var res struct {
		ID        string `json:"id"`
		OwnerName string `json:"owner_name"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.OwnerName != "b" {
		t.Fatalf("reserve --json: %v\n%s", err, out)
	}
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"commit", "-n", at, res.ID}, "committed " + res.ID + " at b"},
		{[]string{"renew", "-n", at, res.ID}, "renewed " + res.ID + " at b"},
		{[]string{"release", "-n", at, res.ID}, "released " + res.ID + " at b"},
	} {
		code, out, stderr := run(t, step.args...)
		// What happened comes first, not a "reserved ..." line.
		if code != 0 || !strings.HasPrefix(out, step.want) {
			t.Fatalf("%v through a: exit %d, want %q\n%s\n%s", step.args, code, step.want, out, stderr)
		}
	}
	// The policy still decides who may reserve there and who sees it.
	code, _, stderr = run(t, "reserve", "-n", at, "--at", "b", "--cpus", "1", "--user", "bob")
	if code != 1 || !strings.Contains(stderr, "policy") {
		t.Fatalf("reserve at b as bob: exit %d, want a refusal naming the policy\n%s", code, stderr)
	}
	for _, tc := range []struct {
		flag, user string
		want       string
	}{{"--user", "alice", "1  b"}, {"--as", "alice", "1  b"}, {"--user", "bob", "no offers"}} {
		code, out, stderr := run(t, "query", "-n", at, `name == "b"`, tc.flag, tc.user)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("query %s %s: exit %d, want %q\n%s\n%s", tc.flag, tc.user, code, tc.want, out, stderr)
		}
	}
}
