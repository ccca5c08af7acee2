package daemon_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
)

// managerProcEnv names the data dir of the manager TestDurableManagerProcess
// runs, in a process of its own, for BenchmarkDurableReservationsProc.
const managerProcEnv = "GRIDMGR_BENCH_MANAGER_DIR"

// managerProfileEnv, if set when the benchmark runs, names a file the
// manager process writes its CPU profile to (go tool pprof FILE).
const managerProfileEnv = "GRIDMGR_BENCH_MANAGER_CPUPROFILE"

// TestDurableManagerProcess is not a test: run by
// BenchmarkDurableReservationsProc as a child process (managerProcEnv
// set), it starts the benchmark's manager, prints "addr ADDR", and when
// its stdin closes stops it and prints "stats WRITES CHANGES EVENTS
// MESSAGES" (store writes, reservation changes they carried, events
// published, signed event messages).
func TestDurableManagerProcess(t *testing.T) {
	dir := os.Getenv(managerProcEnv)
	if dir == "" {
		t.Skip("run by BenchmarkDurableReservationsProc")
	}
	if path := os.Getenv(managerProfileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	m, writes, changes := durableManager(t, dir)
	fmt.Printf("addr %s\n", m.Addr())
	io.Copy(io.Discard, os.Stdin)
	st := m.EventBusStats()
	m.Stop()
	fmt.Printf("stats %d %d %d %d\n", writes.Load(), changes.Load(), st.Published, st.Messages)
}

// procCPU is the CPU time (user + system) process pid has used so far,
// from /proc (clock ticks of 10 ms).
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name in parentheses: utime and stime are
	// the 14th and 15th of the line, the 12th and 13th after ")".
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// BenchmarkDurableReservationsProc is BenchmarkDurableReservations with
// the manager in a process of its own (this test binary, run as
// TestDurableManagerProcess), so that its CPU can be told from the 32
// clients': manager_cpu_us/grant is the manager process's CPU per grant,
// client_cpu_us/grant this process's (the clients'), cpu_us/grant both.
// The two processes share the machine's cores as before. With
// GRIDMGR_BENCH_MANAGER_CPUPROFILE=FILE the manager process writes its CPU
// profile there:
//
//	go test -run '^$' -bench 'DurableReservationsProc' -benchtime 20000x ./daemon/
func BenchmarkDurableReservationsProc(b *testing.B) {
	dir := b.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestDurableManagerProcess$")
	cmd.Env = append(os.Environ(), managerProcEnv+"="+dir)
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
	exited := false
	defer func() {
		if !exited {
			stdin.Close()
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	out := bufio.NewScanner(stdout)
	line := func(prefix string) []string {
		for out.Scan() {
			if f := strings.Fields(out.Text()); len(f) > 0 && f[0] == prefix {
				return f[1:]
			}
		}
		b.Fatalf("the manager process printed no %q line (%v)", prefix, out.Err())
		return nil
	}
	addr := line("addr")[0]
	cls := dialDurableClients(b, addr, durableClients)
	defer closeDurableClients(b, cls)
	fsync := startFsyncBaseline(b, dir)

	pid := cmd.Process.Pid
	cpu0, mcpu0 := cpuTime(b), procCPU(b, pid)
	elapsed := runDurableClients(b, cls, b.N, func(ctx context.Context, c *client.Client) error {
		_, err := reserveOneCPU(ctx, c)
		return err
	})
	cpu, mcpu := cpuTime(b)-cpu0, procCPU(b, pid)-mcpu0
	fsyncs := fsync.end()

	if live := liveReservations(b, addr); int(live) != b.N {
		b.Fatalf("the manager has %d live reservations after %d granted", live, b.N)
	}
	stdin.Close()
	st := line("stats")
	if err := cmd.Wait(); err != nil {
		b.Fatalf("the manager process: %v", err)
	}
	exited = true
	if n := storedLive(b, dir); n != b.N {
		b.Fatalf("the store has %d live reservations after %d granted", n, b.N)
	}
	var nw, nc, evs, msgs int64
	if _, err := fmt.Sscan(strings.Join(st, " "), &nw, &nc, &evs, &msgs); err != nil {
		b.Fatal(err)
	}
	// The counts cover the whole run of the manager (setup included): a
	// few status round trips and no events besides the grants.
	reportDurable(b, "reservations/s", b.N, 1, elapsed, cpu+mcpu, fsyncs, nw, nc)
	reportTransport(b, float64(b.N)/elapsed.Seconds(), fsyncs)
	b.ReportMetric(float64(mcpu.Microseconds())/float64(b.N), "manager_cpu_us/grant")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "client_cpu_us/grant")
	if msgs > 0 {
		b.ReportMetric(float64(evs)/float64(msgs), "events/msg")
	}
}
