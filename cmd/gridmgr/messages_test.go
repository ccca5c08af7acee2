package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

// internals matches what a user should not read: package prefixes of
// sentinels and wrapped errors, Go type names, raw error codes.
var internals = regexp.MustCompile(`(^|[\s(:])(node|p2p|relations|reservation|client|daemon|query|wire|proto|boltstore): |\*wire\.|CODE_[A-Z]|%!`)

// Errors read in a user's words: no package prefixes, no Go types, each
// key once, the empty requirement caught by the CLI itself.
func TestMessagesSayNoInternals(t *testing.T) {
	dir := t.TempDir()
	badKey := writeFile(t, dir, "bad.key", "junk\n")
	idConf := writeFile(t, dir, "id.toml", "name = \"x\"\nidentity = \""+badKey+"\"\n")
	policy := writeFile(t, dir, "policy.toml", "name = \"a\"\npolicy = \"request.usr == 'x'\"\n")
	a, _ := startPair(t, "")
	at := a.Addr()
	closed := "/ip4/127.0.0.1/tcp/1/p2p/" + goodPeer
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"tree", "-n", "/ip4/127.0.0.1/tcp/1"}, 2, "-n: not a manager address"},
		{[]string{"tree", "-n", "foo"}, 2, "-n: not a manager address"},
		{[]string{"tree", "-n", closed, "--timeout", "3s"}, 1, "cannot reach the manager at " + closed + ": connection refused"},
		{[]string{"tree", "-n", at, "--psk", badKey}, 2, "--psk: not a usable key file"},
		{[]string{"id", "-c", idConf}, 1, "not a libp2p identity key"},
		{[]string{"run", "-c", policy}, 2, policy + ":2: policy: 1:8: undefined field 'usr'"},
		{[]string{"query", "-n", at, ""}, 2, "the REQUIREMENT is empty"},
		{[]string{"query", "-n", at, "  "}, 2, "the REQUIREMENT is empty"},
		{[]string{"query", "-n", at, "cpu >= 1"}, 2, "requirement: 1:1: undeclared reference to 'cpu'"},
		{[]string{"query", "-n", at, "true", "--rank", "cpu"}, 2, "rank: 1:1: undeclared reference to 'cpu'"},
		{[]string{"reserve", "-n", at, "--at", "b", "--cpus", "1", "--query", "cpu >= 1"}, 2, "requirement: 1:1: undeclared reference to 'cpu'"},
		{[]string{"reserve", "-n", at, "--at", "nosuch", "--cpus", "1"}, 1, "no manager named nosuch in the grid"},
		{[]string{"ping", "-n", at, "nobody"}, 1, `not found: a has no relation with "nobody"`},
		{[]string{"commit", "-n", at, "b-99-abcdef"}, 1, "manager b now has another peer id"},
		{[]string{"release", "-n", at, "nosuch-1-abcdef"}, 1, "no manager named nosuch in the grid"},
		{[]string{"status", "-n", at, "--events", "-1"}, 2, `--events "-1": out of range: want 0 to 1000`},
		{[]string{"query", "-n", at, "true", "--begin", "+1h"}, 2, "--begin needs --duration"},
		{[]string{"reserve", "-n", at, "--cpus", "1", "--begin", "-3h", "--duration", "1h"}, 2, "is already over"},
	}
	for _, tc := range cases {
		code, _, stderr := run(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, want %d and %q in\n%s", tc.args, code, tc.code, tc.want, stderr)
		}
		if m := internals.FindString(strings.TrimPrefix(stderr, "gridmgr "+tc.args[0]+": ")); m != "" {
			t.Errorf("%v: %q reaches the user:\n%s", tc.args, m, stderr)
		}
		for _, key := range []string{"requirement", "rank", "policy"} {
			if strings.Contains(stderr, key+": "+key+": ") {
				t.Errorf("%v: %s said twice:\n%s", tc.args, key, stderr)
			}
		}
	}
	// A client key that cannot be read: the warning is in plain words too.
	t.Setenv("GRIDMGR_CLIENT_KEY", badKey)
	code, _, stderr := run(t, "reserve", "-n", at, "--cpus", "1")
	if code != 0 || !strings.Contains(stderr, "warning: no lasting client identity") || internals.MatchString(stderr) {
		t.Errorf("reserve with a bad client key: exit %d\n%s", code, stderr)
	}
}

// Ranks that are whole numbers print in full, not as 1.34218e+08.
func TestQueryRankWholeNumber(t *testing.T) {
	rep := &wire.QueryReply{Offers: []*wire.Offer{
		{Name: "m1", Ranked: true, Rank: 134217728, CpuUtil: -1},
		{Name: "m2", Ranked: true, Rank: 0.5, CpuUtil: -1},
	}, Matched: 2}
	out := renderQuery(rep, true, false, time.Millisecond)
	if !strings.Contains(out, "134217728") || strings.Contains(out, "e+08") || !strings.Contains(out, "0.5") {
		t.Errorf("ranks:\n%s", out)
	}
}
