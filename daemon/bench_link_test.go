package daemon_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The install benchmark between two hosts: BenchmarkInstall10MB measures
// on loopback, where the client and the manager share this machine's
// cores and a link that is as fast as they can copy. Here each runs in a
// network namespace of its own (a process of its own: this test binary,
// run as TestLinkManagerProcess and TestLinkClientProcess), joined by a
// veth pair that tc (a token bucket) limits to a rate each way, as a
// network between two hosts of a grid would. The raw copy crosses the
// same link, in the same run. (No delay is added: this machine's kernel
// has no netem. A LAN's 0.2 ms would add about 0.6 ms to an install, its
// three round trips more than the raw copy's.)
//
// It needs root, iproute2 (ip, tc) and nsenter, and skips itself
// otherwise. (nsenter joins the namespace and nothing else; ip netns exec
// would mount the namespace's own sysfs over /sys, hiding the cgroup
// hierarchies the manager runs applications in.)
// GRIDMGR_BENCH_LINK_RATE is the link's rate each way, in tc's words
// (default 1gbit).
//
// Only namespaces named gml<pid>a and gml<pid>b are made, and removed at
// the end (or by the next run, once the process <pid> is gone); the root
// namespace's network is never touched.
const (
	linkManagerEnv = "GRIDMGR_BENCH_LINK_MANAGER" // the manager's data dir (child A)
	linkListenEnv  = "GRIDMGR_BENCH_LINK_LISTEN"  // its address (child A)
	linkClientEnv  = "GRIDMGR_BENCH_LINK_CLIENT"  // the manager's multiaddr (child B)
	linkRunsEnv    = "GRIDMGR_BENCH_LINK_RUNS"    // installs to time (child B)
	linkKindEnv    = "GRIDMGR_BENCH_LINK_KIND"    // random, program or program-zstd (child B)
	linkRateEnv    = "GRIDMGR_BENCH_LINK_RATE"
	linkManagerIP  = "10.215.0.1"
	linkClientIP   = "10.215.0.2"
)

// BenchmarkInstall10MBLink is BenchmarkInstall10MB's random, program and
// program-zstd between two network namespaces over a link of
// GRIDMGR_BENCH_LINK_RATE (1 Gb/s unless set) each way. It reports the
// same figures.
//
//	go test -run '^$' -bench Install10MBLink -benchtime 10x ./daemon/
func BenchmarkInstall10MBLink(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("network namespaces and running applications need root")
	}
	for _, tool := range []string{"ip", "tc", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("no %s: %v", tool, err)
		}
	}
	rate := envOr(linkRateEnv, "1gbit")
	nsA, nsB := fmt.Sprintf("gml%da", os.Getpid()), fmt.Sprintf("gml%db", os.Getpid())
	linkNamespaces(b, nsA, nsB, rate)
	addr := linkManager(b, nsA)
	for _, kind := range []string{"random", "program", "program-zstd"} {
		b.Run(kind, func(b *testing.B) {
			t := linkClient(b, nsB, addr, kind, b.N)
			t.report(b)
		})
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// ipCmd runs ip (or tc, when args start with "tc") and fails b with its
// output.
func ipCmd(b *testing.B, args ...string) {
	b.Helper()
	tool := "ip"
	if args[0] == "tc" {
		tool, args = "tc", args[1:]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, tool, args...).CombinedOutput(); err != nil {
		b.Fatalf("%s %s: %v: %s", tool, strings.Join(args, " "), err, out)
	}
}

// linkNamespaces makes nsA and nsB, joined by a veth pair (eth0 in each,
// linkManagerIP in nsA, linkClientIP in nsB) whose both ends a token
// bucket limits to rate, and removes them when b ends.
func linkNamespaces(b *testing.B, nsA, nsB, rate string) {
	linkRemoveStale(b)
	for _, ns := range []string{nsA, nsB} {
		_ = exec.Command("ip", "netns", "del", ns).Run() // left by a crashed run of this pid
		ipCmd(b, "netns", "add", ns)
		b.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		ipCmd(b, "-n", ns, "link", "set", "lo", "up")
	}
	ipCmd(b, "-n", nsA, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", nsB)
	for ns, ip := range map[string]string{nsA: linkManagerIP, nsB: linkClientIP} {
		ipCmd(b, "-n", ns, "addr", "add", ip+"/24", "dev", "eth0")
		ipCmd(b, "-n", ns, "link", "set", "eth0", "up")
		// burst: above the largest (GSO) packet, 64 KiB; latency: how
		// long a packet may wait in the bucket's queue before it is
		// dropped, as a switch's buffer would.
		ipCmd(b, "tc", "-n", ns, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "256kb", "latency", "5ms")
	}
}

var linkNSRE = regexp.MustCompile(`^gml(\d+)[ab]$`)

// linkRemoveStale deletes the namespaces a run killed before its cleanup
// left (their process gone), with whatever still runs in them.
func linkRemoveStale(b *testing.B) {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		m := linkNSRE.FindStringSubmatch(f[0])
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if err := syscall.Kill(pid, 0); pid == os.Getpid() || err == nil || errors.Is(err, syscall.EPERM) {
			continue // ours, or its run still goes on
		}
		pids, _ := exec.Command("ip", "netns", "pids", f[0]).Output()
		for _, p := range strings.Fields(string(pids)) {
			if n, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(n, syscall.SIGKILL)
			}
		}
		if err := exec.Command("ip", "netns", "del", f[0]).Run(); err != nil {
			b.Logf("stale namespace %s: %v", f[0], err)
		}
	}
}

// linkManager starts this test binary in nsA as TestLinkManagerProcess
// and returns the manager's multiaddr; the process is stopped when b ends.
func linkManager(b *testing.B, nsA string) string {
	cmd := exec.Command("nsenter", "--net=/run/netns/"+nsA, "--", os.Args[0], "-test.run", "^TestLinkManagerProcess$")
	cmd.Env = append(os.Environ(), linkManagerEnv+"="+b.TempDir(), linkListenEnv+"="+linkManagerIP)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				b.Errorf("the manager process: %v", err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			b.Errorf("the manager process did not stop within 30 s")
		}
	})
	out := bufio.NewScanner(stdout)
	for out.Scan() {
		if f := strings.Fields(out.Text()); len(f) == 2 && f[0] == "addr" {
			go io.Copy(io.Discard, stdout)
			return f[1]
		}
	}
	b.Fatalf("the manager process printed no address (%v)", out.Err())
	return ""
}

// linkClient runs this test binary in nsB as TestLinkClientProcess, n
// installs of kind to the manager at addr, and returns their times.
func linkClient(b *testing.B, nsB, addr, kind string, n int) installTimes {
	cmd := exec.Command("nsenter", "--net=/run/netns/"+nsB, "--", os.Args[0], "-test.run", "^TestLinkClientProcess$")
	cmd.Env = append(os.Environ(), linkClientEnv+"="+addr, linkRunsEnv+"="+strconv.Itoa(n), linkKindEnv+"="+kind)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("the client process: %v; it printed:\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		var t installTimes
		if _, err := fmt.Sscanf(line, "times %d %d %d %d %d", &t.n, &t.raw, &t.sent, &t.installed, &t.install); err == nil {
			if t.n != n {
				b.Fatalf("the client process timed %d installs, not %d", t.n, n)
			}
			return t
		}
	}
	b.Fatalf("the client process printed no times:\n%s", out)
	return installTimes{}
}

// TestLinkManagerProcess is not a test: run by BenchmarkInstall10MBLink in
// its manager's namespace (linkManagerEnv set), it starts a manager on
// linkListenEnv that also serves the raw copy, prints "addr MULTIADDR",
// and stops when its stdin closes.
func TestLinkManagerProcess(t *testing.T) {
	dir := os.Getenv(linkManagerEnv)
	if dir == "" {
		t.Skip("run by BenchmarkInstall10MBLink")
	}
	m := installBenchManager(t, dir, os.Getenv(linkListenEnv))
	defer m.Stop()
	fmt.Printf("addr %s\n", m.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// TestLinkClientProcess is not a test: run by BenchmarkInstall10MBLink in
// the client's namespace (linkClientEnv set), it times linkRunsEnv
// installs of linkKindEnv and prints "times N RAW SENT INSTALLED
// INSTALL" (totals, in nanoseconds).
func TestLinkClientProcess(t *testing.T) {
	addr := os.Getenv(linkClientEnv)
	if addr == "" {
		t.Skip("run by BenchmarkInstall10MBLink")
	}
	n, err := strconv.Atoi(os.Getenv(linkRunsEnv))
	if err != nil {
		t.Fatal(err)
	}
	var fill func([]byte)
	zstd := false
	switch kind := os.Getenv(linkKindEnv); kind {
	case "random":
		fill = func(p []byte) { _, _ = rand.Read(p) }
	case "program", "program-zstd":
		fill, zstd = programFill(t), kind == "program-zstd"
	default:
		t.Fatalf("unknown kind %q", kind)
	}
	tm := installRuns(t, addr, n, fill, zstd, false)
	fmt.Printf("times %d %d %d %d %d\n", tm.n, int64(tm.raw), int64(tm.sent), int64(tm.installed), int64(tm.install))
}
