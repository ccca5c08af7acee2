package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Two `gridmgr run` processes, one trimming every 10 s and one with
// memory_trim = "0": soon after starting, the first holds far less of
// its executable resident than the second (memory_trim's promise), still
// answers every kind of request, reservation included, lets go again of
// what those requests used at its next trim, and exits cleanly. It fails
// if the manager does not trim at start or afterwards, or trims what it
// must keep.
func TestMemoryTrimMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs two processes")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	start := func(name, extra string) *durProc {
		cfg := filepath.Join(dir, name+".toml")
		props := fmt.Sprintf("name = %q\nlisten = [\"/ip4/127.0.0.1/tcp/0\"]\ndata_dir = %q\nlog_level = \"warn\"\n%s", name, name, extra)
		if err := os.WriteFile(cfg, []byte(props), 0o644); err != nil {
			t.Fatal(err)
		}
		p, _ := startManager(t, bin, cfg, filepath.Join(dir, name)) // durability_test.go
		return p
	}
	trimmed := start("trimmed", "memory_trim = \"10s\"\n")
	kept := start("kept", "memory_trim = \"0\"\n")
	exe := func(p *durProc) int {
		k := smapsKB(t, p.cmd.Process.Pid, bin)
		return k["text"] + k["rodata"]
	}
	// Trimming is done once the manager is up; give it a moment.
	var a, b int
	for i := 0; i < 50; i++ {
		a, b = exe(trimmed), exe(kept)
		if a < b*2/3 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("executable resident: %d KiB trimmed, %d KiB with memory_trim = \"0\"", a, b)
	if a >= b*2/3 {
		t.Fatalf("the trimmed manager holds %d KiB of its executable, the other %d KiB: want under two thirds", a, b)
	}
	// Everything it let go of comes back when used.
	data := filepath.Join(dir, "trimmed")
	for _, args := range [][]string{
		{"status", "-d", data},
		{"resources", "-d", data},
		{"query", "-d", data, "cpus >= 1", "--timeout", "5s"},
		{"reserve", "-d", data, "--cpus", "1", "--commit"},
		{"reservations", "-d", data},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("gridmgr %s after the trim: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "reservations" && !strings.Contains(string(out), "cpus") {
			t.Errorf("gridmgr reservations after the trim shows no reservation:\n%s", out)
		}
	}
	// What the requests faulted back in goes again at the next trim
	// (memory_trim = "10s" here; the default is a minute).
	used := exe(trimmed)
	var again int
	for i := 0; i < 150; i++ {
		if again = exe(trimmed); again < used*2/3 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("executable resident after the requests: %d KiB; after the next trim: %d KiB", used, again)
	if again >= used*2/3 {
		t.Errorf("the requests left %d KiB of the executable resident, and %d KiB 15 s later: the periodic trim did not run", used, again)
	}
	for _, p := range []*durProc{trimmed, kept} {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		<-p.done
		if p.err != nil {
			t.Errorf("%s: exit after SIGTERM: %v\n%s", p.cmd.Args, p.err, p.log.String())
		}
	}
}
