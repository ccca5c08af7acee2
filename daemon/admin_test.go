package daemon_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/wire"
)

// adminGrid is the six-manager grid with one admin client identity listed
// in every manager's admins, and a plugins dir at gm154.
func adminGrid(t *testing.T) (g *grid, adminKey p2p.ClientHostOptions, plugins string) {
	g = newGrid(t)
	key, err := p2p.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	plugins = t.TempDir()
	for name, cfg := range g.cfgs {
		cfg.Admins = []string{p2p.PeerIDOf(key)}
		if name == "gm154" {
			cfg.PluginsDir = plugins
		}
		g.cfgs[name] = cfg
	}
	for _, e := range patent {
		g.start(e[0])
	}
	g.waitTree("gm152", wantTree, 30*time.Second)
	return g, p2p.ClientHostOptions{Key: key}, plugins
}

func dialAs(t *testing.T, g *grid, name string, opts p2p.ClientHostOptions) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dialClient(t, ctx, g.mgrs[name].Addr(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// --all through a leaf reaches all six managers; six answers come back,
// some as progress before the final reply.
func TestAdminAllReachesSix(t *testing.T) {
	g, admin, _ := adminGrid(t)
	c := dialAs(t, g, "gm160", admin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var mu sync.Mutex
	var progress []string
	rep, err := c.AdminAll(ctx, "set heartbeat.misses 4", func(p *wire.AdminReply) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range p.Replies {
			progress = append(progress, r.Name)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range rep.Replies {
		if !r.Ok || !strings.Contains(r.Output, "heartbeat.misses: 3 → 4") {
			t.Errorf("%s: ok=%v %q", r.Name, r.Ok, r.Output)
		}
		names = append(names, r.Name)
	}
	slices.Sort(names)
	if want := []string{"gm152", "gm154", "gm156", "gm160", "gm162", "gm164"}; !slices.Equal(names, want) || len(rep.Missing) > 0 {
		t.Fatalf("answers from %v, missing %v; want %v and none missing", names, rep.Missing, want)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(progress)
	if !slices.Equal(progress, names) {
		t.Fatalf("progress showed %v, want every answer once: %v", progress, names)
	}
}

// A non-admin's change is refused with the reason, audited as refused,
// and changes nothing; reading is open to anyone; an admin's change is
// accepted and audited.
func TestAdminAuthorisationAndAudit(t *testing.T) {
	g, admin, _ := adminGrid(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stranger := dialAs(t, g, "gm154", p2p.ClientHostOptions{})
	rep, err := stranger.Admin(ctx, "remove-inferior gm162")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Ok || rep.Code != wire.ErrorReply_CODE_FORBIDDEN || !strings.Contains(rep.Output, "only the peers in its admins list") {
		t.Fatalf("stranger's remove-inferior: ok=%v code=%v %q", rep.Ok, rep.Code, rep.Output)
	}
	if rep, err := stranger.Admin(ctx, "relations"); err != nil || !rep.Ok || !strings.Contains(rep.Output, "gm162") {
		t.Fatalf("stranger's relations: %v %v", rep, err)
	}
	g.waitTree("gm152", wantTree, 5*time.Second) // nothing changed

	ac := dialAs(t, g, "gm154", admin)
	if rep, err := ac.Admin(ctx, "drain"); err != nil || !rep.Ok {
		t.Fatalf("admin's drain: %v %v", rep, err)
	}
	var recs []node.AuditRecord
	deadline := time.Now().Add(5 * time.Second)
	for len(recs) < 2 && time.Now().Before(deadline) {
		recs = readAudit(t, filepath.Join(g.cfgs["gm154"].DataDir, daemon.AuditFile))
		time.Sleep(10 * time.Millisecond) // the driver appends after answering
	}
	if len(recs) != 2 {
		t.Fatalf("audit log has %d records, want 2: %+v", len(recs), recs)
	}
	if r := recs[0]; r.OK || r.Author != stranger.Self() || r.Command != "remove-inferior gm162" {
		t.Errorf("first record %+v, want the stranger's refused remove-inferior", r)
	}
	if r := recs[1]; !r.OK || r.Command != "drain" || r.Author != ac.Self() {
		t.Errorf("second record %+v, want the admin's accepted drain", r)
	}
}

func readAudit(t *testing.T, path string) []node.AuditRecord {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []node.AuditRecord
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r node.AuditRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// A plugin dropped into plugins_dir while the manager runs is callable at
// once, with its arguments and the manager's description on stdin; a
// non-admin may not run it; a name with no plugin is an unknown command.
func TestAdminPluginDroppedInWhileRunning(t *testing.T) {
	g, admin, dir := adminGrid(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ac := dialAs(t, g, "gm154", admin)
	rep, err := ac.Admin(ctx, "hello-world one 'two three'")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Ok || !strings.Contains(rep.Output, `unknown command "hello-world"`) || !strings.Contains(rep.Output, "no plugin gridmgr-cmd-hello-world") {
		t.Fatalf("before the plugin exists: ok=%v %q", rep.Ok, rep.Output)
	}
	script := "#!/bin/sh\necho \"args: $1|$2\"\ngrep -o '\"name\":\"gm154\"' | head -1\n"
	if err := os.WriteFile(filepath.Join(dir, "gridmgr-cmd-hello-world"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	rep, err = ac.Admin(ctx, "hello-world one 'two three'")
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Ok || rep.Output != "args: one|two three\n\"name\":\"gm154\"\n" {
		t.Fatalf("plugin: ok=%v %q", rep.Ok, rep.Output)
	}
	stranger := dialAs(t, g, "gm154", p2p.ClientHostOptions{})
	rep, err = stranger.Admin(ctx, "hello-world")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Ok || rep.Code != wire.ErrorReply_CODE_FORBIDDEN {
		t.Fatalf("stranger ran the plugin: ok=%v %q", rep.Ok, rep.Output)
	}
}
