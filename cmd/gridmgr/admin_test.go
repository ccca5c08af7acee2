package main

import (
	"strings"
	"testing"
)

// The admin command through the CLI on the demo grid: help, a read-only
// command with --all (six answers), a change refused to a non-admin
// (exit 1, the reason on stderr), and bad input (exit 2).
func TestCLIAdmin(t *testing.T) {
	g := formedDemoGrid(t)
	run := func(args ...string) (int, string, string) {
		var out, errOut strings.Builder
		code := Main(args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	leaf := g.mgrs["gm160"].Addr()
	if code, out, _ := run("admin", "-n", leaf, "help"); code != 0 || !strings.Contains(out, "remove-inferior PEER|NAME") {
		t.Fatalf("help: exit %d\n%s", code, out)
	}
	code, out, errOut := run("admin", "-n", leaf, "--all", "--timeout", "5s", "relations")
	if code != 0 || !strings.Contains(out, "6 manager(s) answered, 0 failed") || strings.Count(out, ": ok\n") != 6 {
		t.Fatalf("--all relations: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = run("admin", "-n", leaf, "drain")
	if code != 1 || !strings.Contains(errOut, "only the peers in its admins list") {
		t.Fatalf("non-admin drain: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	code, _, errOut = run("admin", "-n", leaf, "remove-inferior 'gm162")
	if code != 2 || !strings.Contains(errOut, "unterminated single quote") {
		t.Fatalf("bad syntax: exit %d\n%s", code, errOut)
	}
	code, _, errOut = run("admin", "-n", leaf, "reparnt", "x")
	if code != 2 || !strings.Contains(errOut, `did you mean "reparent"`) {
		t.Fatalf("unknown command: exit %d\n%s", code, errOut)
	}
}
