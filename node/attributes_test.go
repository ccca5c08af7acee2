package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/wire"
)

func attrsNet(t *testing.T) *memnet.Net {
	t.Helper()
	cfg := config.Default()
	cfg.Name = "gm1"
	cfg.CPUs = 4
	cfg.Admins = []string{"P-admin"}
	cfg.Attributes = map[string]any{"zone": "eu-1", "gpu": false}
	n := oneManager(t, "P-gm1", cfg, 9)
	return n
}

func adminAs(t *testing.T, n *memnet.Net, who, cmd string) *wire.AdminReply {
	t.Helper()
	sid := n.RequestFrom("P-gm1", who, &wire.Envelope{Id: 3, Body: &wire.Envelope_AdminRequest{AdminRequest: &wire.AdminRequest{Command: cmd}}})
	n.RunFor(100 * time.Millisecond)
	rep := n.Node("P-gm1").Replies[sid]
	if len(rep) != 1 || rep[0].GetAdminReply() == nil {
		t.Fatalf("%s: %v", cmd, rep)
	}
	return rep[0].GetAdminReply()
}

func matches(t *testing.T, n *memnet.Net, req string) bool {
	t.Helper()
	sid := n.RequestFrom("P-gm1", "P-user", &wire.Envelope{Id: 4, Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{Requirement: req}}})
	n.RunFor(100 * time.Millisecond)
	rep := n.Node("P-gm1").Replies[sid]
	if len(rep) != 1 || rep[0].GetQueryReply() == nil {
		t.Fatalf("query %s: %v", req, rep)
	}
	return len(rep[0].GetQueryReply().Offers) == 1
}

// set/unset attribute change what queries see at once, are saved before
// the answer, and survive a restart, over the properties file; only
// admins may; bad values are refused with the reason.
func TestSetAttributeAtRuntime(t *testing.T) {
	n := attrsNet(t)
	if rep := adminAs(t, n, "P-user", "set attribute zone eu-2"); rep.Ok || rep.Code != wire.ErrorReply_CODE_FORBIDDEN {
		t.Fatalf("a non-admin set an attribute: %v", rep)
	}
	for _, c := range []struct{ cmd, want string }{
		{"set attribute zone eu-2", `attribute zone: "eu-1" → "eu-2"`},
		{"set attribute rack 12", "attribute rack: unset → 12"},
		{`set attribute tags '["ssd", "10g"]'`, `→ ["ssd", "10g"]`},
		{"unset attribute gpu", "attribute gpu removed (was false)"},
	} {
		rep := adminAs(t, n, "P-admin", c.cmd)
		if !rep.Ok || !strings.Contains(rep.Output, c.want) {
			t.Fatalf("%s: %v; want %q", c.cmd, rep, c.want)
		}
	}
	check := func(when string) {
		t.Helper()
		for _, req := range []string{`attrs.zone == "eu-2"`, `attrs.rack == 12`, `"10g" in attrs.tags`, `!has(attrs.gpu)`} {
			if !matches(t, n, req) {
				t.Fatalf("%s: %s does not match", when, req)
			}
		}
	}
	check("at once")
	if d := n.Node("P-gm1").Disk.Attributes; d == nil || d.Set["zone"] != `"eu-2"` || d.Set["rack"] != "12" || len(d.Unset) != 1 {
		t.Fatalf("saved: %+v", d)
	}
	n.Kill("P-gm1")
	n.Start("P-gm1")
	n.RunFor(100 * time.Millisecond)
	check("after a restart")

	for _, c := range []struct{ cmd, want string }{
		{"set attribute", "set takes 2 to 3 arguments"},
		{"set attribute zone", "set attribute: give NAME and VALUE"},
		{`set attribute x '[1, [2]]'`, "arrays inside arrays"},
		{`set attribute x 2026-01-01T00:00:00Z`, "dates and times are not allowed"},
		{"unset zone", "usage: unset attribute|user NAME"},
		{"unset heartbeat.interval 1s", "unset: give attribute NAME or user NAME"},
		{"set a b c", "set: give KEY VALUE"},
	} {
		rep := adminAs(t, n, "P-admin", c.cmd)
		if rep.Ok || !strings.Contains(rep.Output, c.want) {
			t.Errorf("%s: %v; want a refusal with %q", c.cmd, rep, c.want)
		}
	}
	// Unset, then set again: the last word wins, after a restart too.
	adminAs(t, n, "P-admin", "unset attribute zone")
	if matches(t, n, `has(attrs.zone)`) {
		t.Fatal("zone still set after unset")
	}
	adminAs(t, n, "P-admin", "set attribute gpu true")
	n.Kill("P-gm1")
	n.Start("P-gm1")
	n.RunFor(100 * time.Millisecond)
	if matches(t, n, `has(attrs.zone)`) || !matches(t, n, `attrs.gpu`) {
		t.Fatal("after a restart: zone came back or gpu is not true")
	}
}

// A simulated manager's Core reads its properties file in place
// (NewCoreShared): what admin commands set goes in the Core's own copy,
// never in the file's, which a restart starts from.
func TestSetLeavesTheSharedConfig(t *testing.T) {
	n := attrsNet(t)
	nd := n.Node("P-gm1")
	for _, cmd := range []string{"set attribute zone eu-2", "set heartbeat.interval 2s"} {
		if rep := adminAs(t, n, "P-admin", cmd); !rep.Ok {
			t.Fatalf("%s: %v", cmd, rep)
		}
	}
	live := nd.Live()
	if live.Attributes["zone"] != "eu-2" || live.HeartbeatInterval != 2*time.Second {
		t.Fatalf("in force: zone %v, heartbeat %s; want eu-2, 2s", live.Attributes["zone"], live.HeartbeatInterval)
	}
	if nd.Config().Attributes["zone"] != "eu-1" || nd.Cfg.HeartbeatInterval == 2*time.Second {
		t.Fatalf("the properties file changed: zone %v, heartbeat %s", nd.Config().Attributes["zone"], nd.Cfg.HeartbeatInterval)
	}
}
