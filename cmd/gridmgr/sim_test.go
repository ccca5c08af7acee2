package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimCommand runs the simulator as a user would: the common case with
// its plots, then the mistakes a user makes, each with exit code 2 and a
// message that names what was wrong.
func TestSimCommand(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := run(t, "sim", "--managers", "300", "--fanout", "4", "--quiet", "--out", dir)
	if code != exitOK {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	for _, want := range []string{"query latency (ms)", "reconverge time (s)", "heartbeats per manager per second", "peak RSS"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"figures.csv", "messages.svg", "managers-up.svg"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	if errOut != "" {
		t.Errorf("--quiet printed progress: %s", errOut)
	}

	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[grid]\nmanagers = 10\n[[action]]\ndo = \"kil\"\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--managers", "0"}, `--managers "0": out of range: want 1 to 2M`},
		{[]string{"sim", bad}, `bad.toml:4: action[1].do: unknown action "kil" (did you mean "kill"?)`},
		{[]string{"sim", bad, "--fanout", "3"}, "--fanout shapes the scenario run without a file"},
		{[]string{"sim", filepath.Join(dir, "none.toml")}, "cannot read the scenario"},
		{[]string{"sim", "--sweep", "nodes=1k"}, `cannot sweep "nodes"`},
		{[]string{"sim", "--kill", "200"}, "--kill must be a percent"},
		{[]string{"sim", "--managers", "50", "--sweep", "managers=100,200"}, "both set the grid's size"},
	} {
		code, _, errOut := run(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}
