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
	if !strings.Contains(out, "wrote figures.csv, messages.svg, managers-up.svg to ") {
		t.Errorf("output does not list what it wrote:\n%s", out)
	}
	// --quiet: no progress, but a last line that says the run is over.
	if lines := strings.Split(strings.TrimSpace(errOut), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "sim: done: ") {
		t.Errorf("--quiet printed %q; want one last line", errOut)
	}
	// Without it: the memory needed and available, then the last line.
	code, _, errOut = run(t, "sim", "--managers", "100", "--rest", "0s")
	if code != exitOK || !strings.Contains(errOut, "sim: needs at least ") || !strings.Contains(errOut, "sim: done: ") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}

	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[grid]\nmanagers = 10\n[[action]]\ndo = \"kil\"\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--managers", "0"}, `--managers "0": out of range: want 1 to 1M`},
		{[]string{"sim", "--managers", "2000000"}, `--managers "2000000": out of range: want 1 to 1M`},
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

// TestSimRefusesWhatCannotFit: a run the memory available cannot hold is
// refused before it starts, saying how much it needs and how much there
// is (MemAvailable, here from a fake /proc/meminfo).
func TestSimRefusesWhatCannotFit(t *testing.T) {
	dir := t.TempDir()
	meminfo := writeFile(t, dir, "meminfo", "MemTotal:       24684092 kB\nMemFree:         1978052 kB\nMemAvailable:    2097152 kB\nBuffers:           30108 kB\n")
	defer func(p string) { meminfoPath = p }(meminfoPath)
	meminfoPath = meminfo
	code, out, errOut := run(t, "sim", "--managers", "1000000", "--quiet")
	want := "not enough memory: 1000000 managers need about 7.8 GiB (a live heap of about 6.2 GiB: 6.5 KiB per manager, " +
		"and a quarter more for the collector (sim/memory.go)), and 2.0 GiB is available (MemAvailable in " + meminfo + "); run fewer managers, or free memory"
	if code != exitFailure || !strings.Contains(errOut, want) || out != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 and %q", code, out, errOut, want)
	}
	// A sweep is refused for its largest run, before the first.
	code, out, errOut = run(t, "sim", "--sweep", "managers=1k,1M", "--quiet")
	if code != exitFailure || !strings.Contains(errOut, "not enough memory: 1000000 managers") || out != "" {
		t.Errorf("sweep: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// What fits runs.
	if code, out, errOut := run(t, "sim", "--managers", "200", "--quiet"); code != exitOK {
		t.Errorf("200 managers in 2 GiB: exit %d: %s%s", code, out, errOut)
	}
	// No MemAvailable line: not refused (and said without --quiet).
	meminfoPath = writeFile(t, dir, "bad", "MemTotal: 1 kB\n")
	if code, _, errOut := run(t, "sim", "--managers", "200"); code != exitOK || !strings.Contains(errOut, "memory available unknown") {
		t.Errorf("no MemAvailable: exit %d: %s", code, errOut)
	}
}

func TestMemAvailable(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		body string
		want uint64
		ok   bool
	}{
		{"MemTotal: 100 kB\nMemAvailable:   23662380 kB\n", 23662380 * 1024, true},
		{"MemAvailable: 12 MB\n", 0, false},
		{"MemFree: 12 kB\n", 0, false},
		{"MemAvailable: x kB\n", 0, false},
	} {
		got, err := memAvailable(writeFile(t, dir, "m", tc.body))
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("%q: %d, %v", tc.body, got, err)
		}
	}
}
