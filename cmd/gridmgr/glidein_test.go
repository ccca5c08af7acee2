package main

import (
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/config"
)

// Usage errors of glidein exit 2 and say what to give, before any
// manager is asked.
func TestGlideinUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"glidein"}, "say how many glide-ins: --count N"},
		{[]string{"glidein", "--count", "0"}, `--count "0": out of range: want 1 to 1000`},
		{[]string{"glidein", "--count", "2", "--mem", "1MiB"}, "--mem \"1MiB\": want a size of at least 64MiB"},
		{[]string{"glidein", "--count", "2", "--mem", "lots"}, "--mem \"lots\""},
		{[]string{"glidein", "--count", "2", "--name", "Bad_name"}, `"Bad_name" is not a glide-in name`},
		{[]string{"glidein", "--count", "2", "--duration", "10s"}, `--duration "10s": at least 1m`},
		{[]string{"glidein", "--count", "2", "--duration", "1h", "--retire", "2h"}, "--retire 2h: must be shorter than --duration 1h"},
		{[]string{"glidein", "--count", "2", "--idle", "0s"}, `--idle "0s": at least 1s`},
		{[]string{"glidein", "--count", "2", "--begin", "yesterday"}, "--begin"},
		{[]string{"glidein", "--count", "2", "extra"}, `unexpected argument "extra"`},
		{[]string{"glidein", "--count", "2", "-d", "/nonexistent"}, "-d: no manager running with data dir /nonexistent"},
		{[]string{"glidein", "rm"}, "name the glide-ins to remove"},
		{[]string{"glidein", "rm", "Nope"}, `"Nope" is not a glide-in name`},
		{[]string{"glidein", "list", "-d", "/nonexistent"}, "-d: no manager running with data dir /nonexistent"},
	} {
		code, out, errb := run(t, tc.args...)
		if code != exitUsage || !strings.Contains(errb, tc.want) {
			t.Errorf("%v: exit %d\n%s%s\nwant %q", tc.args, code, out, errb, tc.want)
		}
	}
	if _, _, errb := run(t, "glidein", "rm"); !strings.HasPrefix(errb, "gridmgr glidein rm: ") {
		t.Errorf("glidein rm: %q", errb)
	}
	if c, o, _ := run(t, "glidein", "-h"); c != 0 || !strings.Contains(o, "gridmgr glidein list|rm") {
		t.Errorf("glidein -h: exit %d\n%s", c, o)
	}
	if _, out, _ := run(t, "help"); !strings.Contains(out, "  glidein ") {
		t.Errorf("help does not list glidein:\n%s", out)
	}
}

// The properties file of a glide-in parses as the glide-in reads it and
// says what docs/glidein.md promises: its name, its launcher above it,
// exactly the amounts it reserved, the owner's requests only, only the
// launcher may reserve, jobs off, the attributes jobs match on.
func TestGlideinProperties(t *testing.T) {
	const launcher = "12D3KooWGzxzKZYveHXtpG6AsrUJBcWxHBFS2HsEoGTxrMLvKXtf"
	const cl = "12D3KooWRBy97UB99e3J6hiPesre1MZeuNQvfan4gBziswrRJsNK"
	retire := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	p := client.GlideinProperties(client.GlideinProps{Name: "mine", Index: 2, Launcher: launcher, Owner: "peer:" + cl, Client: cl,
		Superiors: []string{"/ip4/10.0.0.1/tcp/4001/p2p/" + launcher}, Listen: "/ip4/0.0.0.0/tcp/0", CPUs: 3, Mem: 1 << 30,
		Idle: 3 * time.Second, RetireAt: retire, Heartbeat: 500 * time.Millisecond, Private: true})
	c, err := config.Parse("/inst/in/glidein-2/glidein.toml", []byte(p), "h")
	if err != nil {
		t.Fatalf("%v\n%s", err, p)
	}
	switch {
	case c.Name != "mine-2", c.DataDir != "/inst/state", len(c.Superiors) != 1 || c.Superiors[0].Peer != launcher,
		c.CPUs != 3, c.Memory != 1<<30, c.JobsEnabled, c.HTTPListen != "", c.HeartbeatInterval != 500*time.Millisecond,
		c.PrivateNetworkKey != "/inst/in/glidein-2/swarm.key", c.Attributes["glidein"] != "mine", c.Attributes["glidein_owner"] != "peer:"+cl,
		!c.IsGlidein(), c.Glidein.Launcher != launcher, c.Glidein.Owner != "peer:"+cl, c.Glidein.Idle != 3*time.Second,
		!c.Glidein.RetireAt.Equal(retire), c.Policy != `request.user == "peer:`+cl+`"`, len(c.Admins) != 2:
		t.Errorf("the properties say otherwise than promised:\n%s\n%+v", p, c)
	}
	if got := c.Access["cpus"]; len(got) != 1 || got[0] != "peer:"+launcher {
		t.Errorf("access.cpus = %v", got)
	}
	// Retiring: a tenth of a long lease before its end, 5 minutes of a
	// short one, never in its first half.
	start := time.Unix(0, 0)
	for _, tc := range []struct{ d, before time.Duration }{{10 * time.Hour, time.Hour}, {30 * time.Minute, 5 * time.Minute}, {4 * time.Minute, 2 * time.Minute}} {
		if got := client.GlideinRetireAt(start, tc.d); !got.Equal(start.Add(tc.d - tc.before)) {
			t.Errorf("retire of %s: %s before its end, want %s", tc.d, start.Add(tc.d).Sub(got), tc.before)
		}
	}
}
