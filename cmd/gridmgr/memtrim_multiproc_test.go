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

	"github.com/gridmgr/gridmgr/daemon"
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
	start := func(name, extra string) *exec.Cmd {
		cfg := filepath.Join(dir, name+".toml")
		props := fmt.Sprintf("name = %q\nlisten = [\"/ip4/127.0.0.1/tcp/0\"]\ndata_dir = %q\nlog_level = \"warn\"\n%s", name, name, extra)
		if err := os.WriteFile(cfg, []byte(props), 0o644); err != nil {
			t.Fatal(err)
		}
		var stderr syncBuf
		cmd := exec.Command(bin, "run", "-c", cfg)
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, err := daemon.ReadAddrFile(filepath.Join(dir, name)); err == nil {
				return cmd
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not write its addr file: %s", name, stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	trimmed := start("trimmed", "memory_trim = \"10s\"\n")
	kept := start("kept", "memory_trim = \"0\"\n")
	exe := func(cmd *exec.Cmd) int {
		k := smapsKB(t, cmd.Process.Pid, bin)
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
	for _, cmd := range []*exec.Cmd{trimmed, kept} {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s: exit after SIGTERM: %v", cmd.Args, err)
		}
	}
}
