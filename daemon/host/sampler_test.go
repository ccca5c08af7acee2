package host

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shirou/gopsutil/v4/cpu"
)

func TestSmoother(t *testing.T) {
	s := Smoother{Tau: 10 * time.Second}
	if v := s.Observe(0, 1); v != 1 {
		t.Fatalf("first reading %v", v)
	}
	// One time constant later a step to 0 moves the average by 1-1/e.
	v := s.Observe(10*time.Second, 0)
	if math.Abs(v-math.Exp(-1)) > 1e-9 {
		t.Fatalf("after one tau: %v, want %v", v, math.Exp(-1))
	}
	// Many short readings of 0.5 converge to 0.5.
	for i := 0; i < 1000; i++ {
		v = s.Observe(time.Second, 0.5)
	}
	if math.Abs(v-0.5) > 1e-6 {
		t.Fatalf("did not converge: %v", v)
	}
}

func TestBusyFraction(t *testing.T) {
	a := cpu.TimesStat{User: 10, System: 5, Idle: 85}
	b := cpu.TimesStat{User: 40, System: 15, Idle: 145}
	// 100 s elapsed in all, 60 idle: 40% busy.
	if u, ok := busyFraction(a, b); !ok || math.Abs(u-0.4) > 1e-9 {
		t.Fatalf("busy %v %v", u, ok)
	}
	if _, ok := busyFraction(b, b); ok {
		t.Fatal("no elapsed time should give no reading")
	}
}

func TestLinkSpeed(t *testing.T) {
	dir := t.TempDir()
	mk := func(name, state, speed string) {
		os.MkdirAll(filepath.Join(dir, name), 0o755)
		os.WriteFile(filepath.Join(dir, name, "operstate"), []byte(state+"\n"), 0o644)
		if speed != "" {
			os.WriteFile(filepath.Join(dir, name, "speed"), []byte(speed+"\n"), 0o644)
		}
	}
	mk("lo", "unknown", "")
	mk("eth0", "up", "1000")
	mk("eth1", "down", "10000")
	mk("eth2", "up", "-1")
	if got := LinkSpeed(dir); got != 1000 {
		t.Fatalf("link speed %v, want 1000 (eth1 is down, eth2 unknown)", got)
	}
	if got := LinkSpeed(filepath.Join(dir, "nope")); got != 0 {
		t.Fatalf("missing sysfs: %v", got)
	}
}

func TestSampleLive(t *testing.T) {
	s := NewSampler()
	first := s.Sample()
	if first.CPUs < 1 || first.Memory == 0 || first.MemAvail == 0 || first.MemAvail > first.Memory {
		t.Fatalf("implausible sample %+v", first)
	}
	if first.CPUUtil != -1 {
		t.Fatalf("utilisation needs two readings, got %v", first.CPUUtil)
	}
	busy := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(busy) { // make the counters move
	}
	second := s.Sample()
	if second.CPUUtil < 0 || second.CPUUtil > 1 {
		t.Fatalf("utilisation %v", second.CPUUtil)
	}
}

// The live values a sampler reads on Linux: load, uptime, the data dir's
// free disk; console idle from the access times of terminal devices.
func TestLiveValues(t *testing.T) {
	s := NewSampler()
	s.DiskPath = t.TempDir()
	s.Disks = map[string]string{"scratch": t.TempDir(), "gone": "/nonexistent/gridmgr-test"}
	out := s.Sample()
	if !out.HaveLoad || out.Load1 < 0 || !out.HaveUptime || out.Uptime <= 0 || !out.HaveDisk || out.DiskFree == 0 {
		t.Fatalf("live values not read: %+v", out)
	}
	// A configured disk is read; one that cannot be is missing, and said.
	if _, gone := out.Disks["gone"]; out.Disks["scratch"] == 0 || gone || !strings.Contains(strings.Join(out.Errors, ";"), "disk gone") {
		t.Fatalf("disks %v, errors %v", out.Disks, out.Errors)
	}
	dir := t.TempDir()
	tty := filepath.Join(dir, "tty1")
	if err := os.WriteFile(tty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-20 * time.Minute)
	if err := os.Chtimes(tty, at, at); err != nil {
		t.Fatal(err)
	}
	idle, ok := TerminalIdle([]string{filepath.Join(dir, "tty*")}, at.Add(20*time.Minute))
	if !ok || idle != 20*time.Minute {
		t.Fatalf("idle %v, %v; want 20m", idle, ok)
	}
	if _, ok := TerminalIdle([]string{filepath.Join(dir, "none*")}, time.Now()); ok {
		t.Fatal("idle known with no terminal")
	}
}
