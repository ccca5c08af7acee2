package runner

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkSideBySide times the start of an installed application to its
// program's first instruction, confined, beside what one would compare
// it to, all in one run: the machines this runs on are noisy, so only
// the ratios of one run mean anything.
//
// Every candidate starts the same static program (testdata/ready.c,
// built with gcc -O2 -static; GRIDMGR_BENCH_READY names it), installed in
// a directory of the candidate's own, with 1 CPU of quota, 64 MiB of
// memory and 64 pids where the candidate can set them. The program's
// first act is to write a byte to a FIFO the benchmark holds open for
// reading: a launch is timed from the launching call to that byte's
// arrival, the same way for all. The candidates:
//
//   - exec: a plain fork/exec (the baseline);
//   - sh+cgroup: a shell script that makes a cpu, memory and pids cgroup,
//     writes its pid there and execs the program;
//   - gridmgr-warm, gridmgr-cold: Runner.Start, with a standby ready (a
//     manager in use) and without one;
//   - runc, crun: runc create + runc start (crun the same) of an OCI
//     bundle whose rootfs holds the program (runc spec's defaults, with no
//     terminal, the host's network, a read-only rootfs, the limits);
//   - bwrap: bubblewrap with a comparable sandbox (no cgroup limits: it
//     has none).
//
// Each round runs every candidate once, in an order that rotates from
// round to round, and cleans up after each. GRIDMGR_BENCH_ROUNDS rounds
// (default 30) are run once whatever b.N is: use -benchtime 1x. A
// candidate whose tool is missing is skipped, saying how to get it (this
// never installs anything; bench/confined-start.sh does, and runs this).
func BenchmarkSideBySide(b *testing.B) {
	skip := func(why string) {
		if !testing.Verbose() { // go test says nothing of a skipped benchmark without -v
			fmt.Println("BenchmarkSideBySide: skipped:", why)
		}
		b.Skip(why)
	}
	if os.Geteuid() != 0 {
		skip("confined starts need root (cgroups, namespaces): sudo bench/confined-start.sh")
	}
	ready := os.Getenv("GRIDMGR_BENCH_READY")
	if ready == "" {
		skip("GRIDMGR_BENCH_READY is not set: build the program with gcc -O2 -static -o /tmp/ready deploy/runner/testdata/ready.c " +
			"and set GRIDMGR_BENCH_READY=/tmp/ready, or run sudo bench/confined-start.sh (which does both)")
	}
	if err := sbsCheckStatic(ready); err != nil {
		skip(fmt.Sprintf("GRIDMGR_BENCH_READY=%s: %v (build it with gcc -O2 -static: a container's rootfs holds nothing else)", ready, err))
	}
	rounds := 30
	if v := os.Getenv("GRIDMGR_BENCH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("GRIDMGR_BENCH_ROUNDS=%q: a number of rounds, at least 1", v)
		}
		rounds = n
	}
	if b.N != 1 {
		b.Logf("b.N=%d: the %d rounds run once per call whatever b.N is; use -benchtime 1x", b.N, rounds)
	}

	s := &sbsRun{b: b, tag: fmt.Sprintf("gridmgr-sbs-%d", os.Getpid()), base: b.TempDir(), ready: ready}
	// What a launch leaves orphaned (a container's first process once
	// runc create has ended) becomes this process's to reap, not the
	// host init's: so that close can tell that nothing is left.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		b.Fatal(err)
	}
	defer s.close()
	s.add(s.execCandidate())
	s.add(s.shellCandidate())
	warm, cold := s.gridmgrCandidates()
	s.add(warm)
	s.add(cold)
	s.add(s.ociCandidate("runc", "runc"))
	s.add(s.ociCandidate("crun", "crun"))
	s.add(s.bwrapCandidate())
	for _, c := range s.cands {
		if c.skip != "" {
			b.Logf("%s: skipped: %s", c.name, c.skip)
		}
	}

	b.ResetTimer()
	for round := range rounds {
		for k := range s.cands {
			c := s.cands[(round+k)%len(s.cands)]
			if c.skip == "" {
				s.once(c, round)
			}
		}
	}
	b.StopTimer()
	s.report(rounds)
}

const (
	sbsCPUs = 1
	sbsMem  = 64 << 20
	sbsPids = 64
	// sbsWait bounds each wait: for the program's byte, for a tool's
	// command, for a process to end.
	sbsWait = 15 * time.Second
	// sbsMaxFails failed launches and a candidate is given up.
	sbsMaxFails = 3
)

type sbsRun struct {
	b     *testing.B
	tag   string // names every cgroup this makes; marks every program it starts (an argument)
	base  string
	ready string
	cands []*sbsCandidate
	// warm's runner, whose spare is awaited before every launch (of any
	// candidate: its start would compete with the launch for the CPUs).
	warm *Runner
	// at the end
	closers []func()
	vers    []string
}

type sbsCandidate struct {
	key, name, note string
	skip            string // why it does not run ("": it does)
	fifo            *sbsFifo
	errlog          *os.File // its tools' stderr
	prepare         func(round int) error
	launch          func(round int) sbsLaunch
	times           []time.Duration
	fails           []string
	leaks           []string // cleanups that failed
}

// sbsLaunch is what a launch left: how to undo it, and what went wrong.
type sbsLaunch struct {
	err   error
	stop  func() error    // cleans up after it (nil: nothing to)
	ended <-chan struct{} // closed if its process ends (nil: not watched)
	why   func() string   // why it ended
}

func (s *sbsRun) add(c *sbsCandidate) {
	if c.skip == "" && c.errlog == nil {
		f, err := os.Create(filepath.Join(s.base, c.key+".stderr"))
		if err != nil {
			s.b.Fatal(err)
		}
		c.errlog = f
		s.closers = append(s.closers, func() { f.Close() })
	}
	s.cands = append(s.cands, c)
}

// install puts the program and its FIFO in dir (made with perm, owned
// by uid): the candidate's installed application.
func (s *sbsRun) install(c *sbsCandidate, dir string, perm os.FileMode, uid int) (prog, fifo string) {
	b := s.b
	if err := os.MkdirAll(dir, perm); err != nil {
		b.Fatal(err)
	}
	prog, fifo = filepath.Join(dir, "ready"), filepath.Join(dir, "ready.fifo")
	data, err := os.ReadFile(s.ready)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(prog, data, 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := sbsOpenFifo(fifo)
	if err != nil {
		b.Fatal(err)
	}
	c.fifo = f
	s.closers = append(s.closers, f.close)
	for _, p := range []string{dir, prog, fifo} {
		if err := os.Chown(p, uid, uid); err != nil {
			b.Fatal(err)
		}
	}
	return prog, fifo
}

// once launches c and cleans up after it.
func (s *sbsRun) once(c *sbsCandidate, round int) {
	fail := func(err error) {
		msg := fmt.Sprintf("round %d: %v", round, err)
		if c.errlog != nil {
			if data, _ := os.ReadFile(c.errlog.Name()); len(data) > 0 {
				msg += ": " + strings.TrimSpace(sbsTail(string(data), 400))
			}
		}
		c.fails = append(c.fails, msg)
		s.b.Logf("%s: %s", c.name, msg)
		if len(c.fails) >= sbsMaxFails {
			c.skip = fmt.Sprintf("given up after %d failed launches", len(c.fails))
			s.b.Logf("%s: %s", c.name, c.skip)
		}
	}
	if c.prepare != nil {
		if err := c.prepare(round); err != nil {
			fail(err)
			return
		}
	}
	if c.errlog != nil {
		_ = c.errlog.Truncate(0)
		_, _ = c.errlog.Seek(0, io.SeekStart)
	}
	s.settle()
	c.fifo.drain()
	got := c.fifo.await(sbsWait)
	t0 := time.Now()
	l := c.launch(round)
	err := l.err
	var a sbsArrival
	answered := false
	if err == nil {
		select {
		case a = <-got:
			answered, err = true, a.err
		case <-l.ended:
			err = fmt.Errorf("it ended before its program reported: %s", l.why())
		}
	}
	if !answered { // end the wait
		c.fifo.poke()
		<-got
	}
	if err == nil && a.b != sbsReadyByte {
		err = fmt.Errorf("read %q from the FIFO, not the program's %q", a.b, sbsReadyByte)
	}
	if err == nil {
		c.times = append(c.times, a.at.Sub(t0))
	}
	if l.stop != nil {
		if e := l.stop(); e != nil {
			c.leaks = append(c.leaks, fmt.Sprintf("round %d: %v", round, e))
			s.b.Logf("%s: cleaning up: round %d: %v", c.name, round, e)
		}
	}
	if err != nil {
		fail(err)
	}
}

// settle readies the next launch: a fresh heap, and warm's spare
// standby started and idle (a manager in use has one; and starting one
// must not take the CPUs from another candidate's launch).
func (s *sbsRun) settle() {
	runtime.GC()
	if s.warm == nil {
		return
	}
	r := s.warm
	r.refill()
	deadline := time.Now().Add(sbsWait)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		sb := r.spare
		r.mu.Unlock()
		if sb != nil && sbsIdle(sb.cmd.Process.Pid) {
			time.Sleep(2 * time.Millisecond)
			if sbsIdle(sb.cmd.Process.Pid) {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	s.b.Logf("gridmgr-warm: no idle standby after %v", sbsWait)
}

// sbsIdle says whether every thread of pid sleeps.
func sbsIdle(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, t := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			return false
		}
		i := strings.LastIndexByte(string(data), ')')
		if i < 0 || i+2 >= len(data) || data[i+2] != 'S' {
			return false
		}
	}
	return true
}

// The candidates.

func (s *sbsRun) execCandidate() *sbsCandidate {
	c := &sbsCandidate{key: "exec", name: "exec", note: "plain fork/exec: no limits, no confinement (baseline)"}
	prog, fifo := s.install(c, filepath.Join(s.base, "exec"), 0o755, 0)
	c.launch = func(int) sbsLaunch {
		return s.spawn(c, exec.Command(prog, fifo, s.tag))
	}
	return c
}

// sbsCgexecScript is what one writes by hand to start a program in a cgroup
// of its own with limits.
const sbsCgexecScript = `#!/bin/sh
# cgexec.sh CGROUP PROGRAM [ARG...]: PROGRAM in a new cgroup CGROUP with
# 1 CPU, 64 MiB of memory and 64 pids.
set -e
cg=$1
shift
if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
	d=/sys/fs/cgroup/$cg
	mkdir "$d"
	echo "100000 100000" >"$d/cpu.max"
	echo 67108864 >"$d/memory.max"
	echo 64 >"$d/pids.max"
	echo $$ >"$d/cgroup.procs"
else
	for c in cpu memory pids; do mkdir "/sys/fs/cgroup/$c/$cg"; done
	echo 100000 >"/sys/fs/cgroup/cpu/$cg/cpu.cfs_period_us"
	echo 100000 >"/sys/fs/cgroup/cpu/$cg/cpu.cfs_quota_us"
	echo 67108864 >"/sys/fs/cgroup/memory/$cg/memory.limit_in_bytes"
	echo 64 >"/sys/fs/cgroup/pids/$cg/pids.max"
	for c in cpu memory pids; do echo $$ >"/sys/fs/cgroup/$c/$cg/cgroup.procs"; done
fi
exec "$@"
`

func (s *sbsRun) shellCandidate() *sbsCandidate {
	c := &sbsCandidate{key: "sh", name: "sh+cgroup", note: "shell script: mkdir cpu, memory, pids cgroups, limits, exec; no namespaces"}
	if _, err := os.Stat("/bin/sh"); err != nil {
		c.skip = "no /bin/sh"
		return c
	}
	dir := filepath.Join(s.base, "sh")
	prog, fifo := s.install(c, dir, 0o755, 0)
	script := filepath.Join(dir, "cgexec.sh")
	if err := os.WriteFile(script, []byte(sbsCgexecScript), 0o755); err != nil {
		s.b.Fatal(err)
	}
	v2 := sbsExists("/sys/fs/cgroup/cgroup.controllers")
	c.launch = func(round int) sbsLaunch {
		cg := fmt.Sprintf("%s-sh%d", s.tag, round)
		l := s.spawn(c, exec.Command("/bin/sh", script, cg, prog, fifo, s.tag))
		dirs := []string{filepath.Join("/sys/fs/cgroup", cg)}
		if !v2 {
			dirs = []string{filepath.Join("/sys/fs/cgroup/cpu", cg), filepath.Join("/sys/fs/cgroup/memory", cg), filepath.Join("/sys/fs/cgroup/pids", cg)}
		}
		stop := l.stop
		l.stop = func() error {
			var errs []error
			if stop != nil {
				errs = append(errs, stop())
			}
			for _, d := range dirs {
				errs = append(errs, sbsRmdir(d))
			}
			return errors.Join(errs...)
		}
		return l
	}
	return c
}

func (s *sbsRun) gridmgrCandidates() (warm, cold *sbsCandidate) {
	warm = &sbsCandidate{key: "warm", name: "gridmgr-warm", note: "Runner.Start, a standby ready (a manager in use): the real sandbox, cgroups, its uid"}
	cold = &sbsCandidate{key: "cold", name: "gridmgr-cold", note: "Runner.Start, no standby: also starts this binary's runtime"}
	for _, c := range []*sbsCandidate{warm, cold} {
		r, err := New(Options{StateDir: filepath.Join(s.base, c.key+"-state"), CgroupParent: s.tag + "-" + c.key})
		if err != nil {
			c.skip = err.Error()
			continue
		}
		s.closers = append(s.closers, func() { sbsCloseRunner(r) })
		if c == warm {
			s.warm = r
		} else {
			r.mu.Lock()
			r.closed = true // no spares: every start starts a standby
			r.mu.Unlock()
		}
		// Installed as the executor installs: a directory of its own,
		// owned by its uid, mode 0700.
		dir := filepath.Join(s.base, c.key)
		prog, fifo := s.install(c, dir, 0o700, testUID)
		spec := func(round int) Spec {
			id := fmt.Sprintf("%s%d", c.key[:1], round)
			return Spec{ID: id, Group: "g", Dir: dir, Command: []string{prog, fifo, s.tag},
				Env: []string{"PATH=/usr/bin:/bin"}, UID: testUID, GID: testUID,
				LogDir: filepath.Join(s.base, c.key+"-logs", id),
				Limits: Limits{CPUs: sbsCPUs, Mem: sbsMem, Pids: sbsPids}, Sandbox: Sandbox{Writable: []string{dir}}}
		}
		c.prepare = func(round int) error {
			// Installed: its log files are there.
			sp := spec(round)
			if err := os.MkdirAll(sp.LogDir, 0o755); err != nil {
				return err
			}
			for _, f := range []string{"stdout.log", "stderr.log"} {
				if err := os.WriteFile(filepath.Join(sp.LogDir, f), nil, 0o640); err != nil {
					return err
				}
			}
			return nil
		}
		c.launch = func(round int) sbsLaunch {
			sp := spec(round)
			return sbsLaunch{err: r.Start(sp), stop: func() error { return r.Remove(sp.ID, sp.Group) }}
		}
	}
	return warm, cold
}

// sbsCloseRunner lets r's spare standby go and waits for it to end.
func sbsCloseRunner(r *Runner) {
	r.mu.Lock()
	sb := r.spare
	r.mu.Unlock()
	r.Close()
	if sb != nil {
		select {
		case <-sb.done:
		case <-time.After(sbsWait):
		}
	}
}

func (s *sbsRun) ociCandidate(tool, pkg string) *sbsCandidate {
	c := &sbsCandidate{key: tool, name: tool,
		note: tool + " create + start: runc spec's defaults, no terminal, host network, read-only rootfs, limits, its uid"}
	path, err := exec.LookPath(tool)
	if err != nil {
		c.skip = fmt.Sprintf("%s is not on PATH: install it (Debian: apt-get install %s), or run sudo bench/confined-start.sh", tool, pkg)
		return c
	}
	if out, err := exec.Command(path, "--version").Output(); err == nil {
		v, _, _ := strings.Cut(string(out), "\n")
		s.vers = append(s.vers, strings.TrimSpace(v))
	}
	bundle := filepath.Join(s.base, tool)
	rootfs := filepath.Join(bundle, "rootfs")
	s.install(c, rootfs, 0o755, 0)
	for _, d := range []string{"proc", "dev", "sys", "tmp"} {
		if err := os.Mkdir(filepath.Join(rootfs, d), 0o755); err != nil {
			s.b.Fatal(err)
		}
	}
	global := []string{"--root", filepath.Join(s.base, tool+"-state")}
	within := func(f func()) { f() }
	if tool == "crun" {
		global = append(global, "--cgroup-manager=cgroupfs")
		if sbsHybridWithV2Controllers() {
			// crun 1.8 refuses a hybrid host whose v2 hierarchy has a
			// controller ("cgroups in hybrid mode not supported, drop all
			// controllers from cgroupv2"). It is run from a thread that
			// does not see that hierarchy: it then sees cgroup v1 alone,
			// which it manages (the limits are the same v1 ones).
			t, err := sbsNewHiddenUnified()
			if err != nil {
				c.skip = fmt.Sprintf("crun refuses this hybrid host (a controller on the v2 hierarchy), and hiding that hierarchy from it failed: %v", err)
				return c
			}
			s.closers = append(s.closers, t.close)
			within = t.do
			c.note += "; run without /sys/fs/cgroup/unified in sight (crun 1.8 refuses a hybrid host with a controller on v2)"
		}
	}
	run := func(args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), sbsWait)
		defer cancel()
		cmd := exec.CommandContext(ctx, path, append(slices.Clone(global), args...)...)
		// Its stdio are the container's: no pipes to wait on.
		cmd.Stderr = c.errlog
		cmd.WaitDelay = time.Second
		var err error
		within(func() { err = cmd.Run() })
		if err != nil {
			return fmt.Errorf("%s %s: %w", tool, args[0], err)
		}
		return nil
	}
	id := func(round int) string { return fmt.Sprintf("%s-%s%d", s.tag, tool, round) }
	c.prepare = func(round int) error {
		cfg := sbsOCIConfig([]string{"/ready", "/ready.fifo", s.tag}, testUID, "/"+s.tag+"-"+tool+"/"+id(round))
		data, err := json.MarshalIndent(cfg, "", "\t")
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644)
	}
	c.launch = func(round int) sbsLaunch {
		l := sbsLaunch{stop: func() error {
			// Its processes, orphaned when create ended: this process's
			// children (a subreaper), to reap once delete killed them.
			procs := sbsCgroupProcs("/" + s.tag + "-" + tool + "/" + id(round))
			return errors.Join(run("delete", "-f", id(round)), sbsReap(procs))
		}}
		if l.err = run("create", "--bundle", bundle, id(round)); l.err == nil {
			l.err = run("start", id(round))
		}
		return l
	}
	return c
}

// sbsHybridWithV2Controllers says whether this host mounts cgroup v1 and
// v2 side by side (/sys/fs/cgroup/unified) with a controller on v2.
func sbsHybridWithV2Controllers() bool {
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup/unified", &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		return false
	}
	data, err := os.ReadFile("/sys/fs/cgroup/unified/cgroup.controllers")
	return err == nil && strings.TrimSpace(string(data)) != ""
}

// sbsHiddenUnified runs functions on a thread of its own whose mount
// namespace lacks /sys/fs/cgroup/unified: what they start does not see
// it either (a child is forked from the calling thread).
type sbsHiddenUnified struct{ reqs chan func() }

func sbsNewHiddenUnified() (*sbsHiddenUnified, error) {
	t := &sbsHiddenUnified{reqs: make(chan func())}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine, namespace
		// and all.
		runtime.LockOSThread()
		err := unix.Unshare(unix.CLONE_NEWNS)
		if err == nil {
			err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
		}
		if err == nil {
			err = unix.Unmount("/sys/fs/cgroup/unified", unix.MNT_DETACH)
		}
		errc <- err
		if err != nil {
			return
		}
		for f := range t.reqs {
			f()
		}
	}()
	if err := <-errc; err != nil {
		return nil, err
	}
	return t, nil
}

func (t *sbsHiddenUnified) do(f func()) {
	done := make(chan struct{})
	t.reqs <- func() { f(); close(done) }
	<-done
}

func (t *sbsHiddenUnified) close() { close(t.reqs) }

// sbsOCIConfig is what runc spec (1.1.5) writes, with no terminal, the
// host's network (no network namespace), args, uid, and the limits in
// cgroup cgroupsPath.
func sbsOCIConfig(args []string, uid int, cgroupsPath string) map[string]any {
	caps := []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"}
	ns := func(types ...string) (out []map[string]any) {
		for _, t := range types {
			out = append(out, map[string]any{"type": t})
		}
		return out
	}
	return map[string]any{
		"ociVersion": "1.0.2-dev",
		"process": map[string]any{
			"terminal": false,
			"user":     map[string]any{"uid": uid, "gid": uid},
			"args":     args,
			"env":      []string{"PATH=/usr/bin:/bin"},
			"cwd":      "/",
			"capabilities": map[string]any{
				"bounding": caps, "effective": caps, "permitted": caps, "ambient": caps,
			},
			"rlimits":         []map[string]any{{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}},
			"noNewPrivileges": true,
		},
		"root":     map[string]any{"path": "rootfs", "readonly": true},
		"hostname": "sbs",
		"mounts": []map[string]any{
			{"destination": "/proc", "type": "proc", "source": "proc"},
			{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			{"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": []string{"nosuid", "noexec", "nodev"}},
			{"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": []string{"nosuid", "noexec", "nodev", "ro"}},
			{"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		},
		"linux": map[string]any{
			"cgroupsPath": cgroupsPath,
			"resources": map[string]any{
				"devices": []map[string]any{{"allow": false, "access": "rwm"}},
				"cpu":     map[string]any{"quota": sbsCPUs * 100000, "period": 100000},
				"memory":  map[string]any{"limit": sbsMem},
				"pids":    map[string]any{"limit": sbsPids},
			},
			"namespaces": ns("pid", "ipc", "uts", "mount"),
			"maskedPaths": []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
			"readonlyPaths": []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
}

func (s *sbsRun) bwrapCandidate() *sbsCandidate {
	c := &sbsCandidate{key: "bwrap", name: "bwrap",
		note: "bubblewrap: ro /, tmpfs /tmp, /dev, /proc, pid+ipc+uts namespaces, the dir bound; NO cgroup limits (bwrap has none)"}
	path, err := exec.LookPath("bwrap")
	if err != nil {
		c.skip = "bwrap is not on PATH: install it (Debian: apt-get install bubblewrap), or run sudo bench/confined-start.sh"
		return c
	}
	if out, err := exec.Command(path, "--version").Output(); err == nil {
		s.vers = append(s.vers, strings.TrimSpace(string(out)))
	}
	dir := filepath.Join(s.base, "bwrap")
	prog, fifo := s.install(c, dir, 0o755, 0)
	c.launch = func(int) sbsLaunch {
		cmd := exec.Command(path, "--ro-bind", "/", "/", "--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc",
			"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--bind", dir, dir,
			"--", prog, fifo, s.tag)
		l := s.spawn(c, cmd)
		if l.err != nil {
			return l
		}
		kill := l.stop
		l.stop = func() error {
			// The sandbox's processes first (its init, the program):
			// bwrap then reaps its own and ends. Killed first, it would
			// leave them orphans.
			procs := sbsDescendants(cmd.Process.Pid)
			for _, p := range procs {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			select {
			case <-l.ended:
			case <-time.After(2 * time.Second):
			}
			return errors.Join(kill(), sbsReap(procs))
		}
		return l
	}
	return c
}

// spawn starts cmd (the program, or what starts it) directly: its stderr
// to c's log, a small environment; stopping it is SIGKILL.
func (s *sbsRun) spawn(c *sbsCandidate, cmd *exec.Cmd) sbsLaunch {
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stderr = c.errlog
	if err := cmd.Start(); err != nil {
		return sbsLaunch{err: err}
	}
	done := make(chan struct{})
	var werr error
	go func() {
		werr = cmd.Wait()
		close(done)
	}()
	return sbsLaunch{
		ended: done,
		why:   func() string { return fmt.Sprint(werr) },
		stop: func() error {
			_ = cmd.Process.Kill()
			select {
			case <-done:
				return nil
			case <-time.After(sbsWait):
				return fmt.Errorf("pid %d does not end", cmd.Process.Pid)
			}
		},
	}
}

// The FIFO a program reports on.

const sbsReadyByte = 'r' // what ready.c writes

type sbsFifo struct {
	path string
	fd   int
}

// sbsOpenFifo makes the FIFO at path (anyone may write) and opens it
// for reading, read-write so that it never reads end-of-file.
func sbsOpenFifo(path string) (*sbsFifo, error) {
	if err := unix.Mkfifo(path, 0o666); err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o666); err != nil { // past the umask
		return nil, err
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &sbsFifo{path: path, fd: fd}, nil
}

func (f *sbsFifo) close() { unix.Close(f.fd) }

// drain reads away what is there.
func (f *sbsFifo) drain() {
	var buf [64]byte
	for {
		if n, err := unix.Read(f.fd, buf[:]); n <= 0 || err != nil {
			return
		}
	}
}

// poke ends an await.
func (f *sbsFifo) poke() { _, _ = unix.Write(f.fd, []byte{'x'}) }

type sbsArrival struct {
	at  time.Time
	b   byte
	err error
}

// await waits, in a goroutine of its own (blocked in poll before the
// launch: the byte may come before the launching call returns), for a
// byte, and notes when it came.
func (f *sbsFifo) await(timeout time.Duration) <-chan sbsArrival {
	ch := make(chan sbsArrival, 1)
	go func() {
		deadline := time.Now().Add(timeout)
		pfd := []unix.PollFd{{Fd: int32(f.fd), Events: unix.POLLIN}}
		for {
			ms := time.Until(deadline).Milliseconds()
			if ms <= 0 {
				ch <- sbsArrival{err: fmt.Errorf("its program did not report within %v", timeout)}
				return
			}
			n, err := unix.Poll(pfd, int(ms))
			if errors.Is(err, unix.EINTR) || n == 0 {
				continue
			}
			if err != nil {
				ch <- sbsArrival{err: fmt.Errorf("poll: %w", err)}
				return
			}
			at := time.Now()
			var buf [1]byte
			m, err := unix.Read(f.fd, buf[:])
			if errors.Is(err, unix.EAGAIN) {
				continue
			}
			if err != nil || m != 1 {
				ch <- sbsArrival{err: fmt.Errorf("reading the FIFO: %d, %v", m, err)}
				return
			}
			ch <- sbsArrival{at: at, b: buf[0]}
			return
		}
	}()
	return ch
}

// Cleaning up, and checking that nothing is left.

func (s *sbsRun) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	// Children left (every one this started directly was waited for;
	// orphans it took in were reaped): kill them, reap them.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	for _, p := range sbsChildren(os.Getpid()) {
		if st, _ := sbsProcStat(p); st != 'Z' {
			s.b.Errorf("process %d (%s) is still there: killed", p, sbsCmdline(p))
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		if err := sbsReap([]int{p}); err != nil {
			s.b.Error(err)
		}
	}
	for _, c := range s.cands {
		for _, l := range c.leaks {
			s.b.Errorf("%s left something behind: %s", c.name, l)
		}
	}
	// Processes: every program got s.tag as an argument (and so did
	// what started it).
	var procs []int
	for range 100 {
		if procs = sbsTagged(s.tag); len(procs) == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range procs {
		s.b.Errorf("process %d (%s) is still there: killed", p, sbsCmdline(p))
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	// Cgroups: every one is named s.tag-something, at the top of a
	// hierarchy. What runc and crun made their containers' cgroups in is
	// expected; anything else (or under it) was left behind.
	expected := map[string]bool{s.tag + "-runc": true, s.tag + "-crun": true}
	for _, root := range sbsCgroupMounts() {
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), s.tag) {
				continue
			}
			top := filepath.Join(root, e.Name())
			var dirs []string
			_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- { // children first
				if dirs[i] != top || !expected[e.Name()] {
					s.b.Errorf("cgroup %s was left behind: removed", dirs[i])
				}
				if err := sbsRmdir(dirs[i]); err != nil {
					s.b.Errorf("cgroup %s: %v", dirs[i], err)
				}
			}
		}
	}
}

// sbsRmdir removes the cgroup at dir, killing what is in it.
func sbsRmdir(dir string) error {
	deadline := time.Now().Add(sbsWait)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		if data, rerr := os.ReadFile(filepath.Join(dir, "cgroup.procs")); rerr == nil {
			for _, f := range strings.Fields(string(data)) {
				if p, _ := strconv.Atoi(f); p > 0 {
					_ = syscall.Kill(p, syscall.SIGKILL)
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sbsCgroupProcs are the processes in the cgroup at path (as the pids
// controller sees it on v1).
func sbsCgroupProcs(path string) []int {
	dir := filepath.Join("/sys/fs/cgroup", path)
	if !sbsExists("/sys/fs/cgroup/cgroup.controllers") {
		dir = filepath.Join("/sys/fs/cgroup/pids", path)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if p, err := strconv.Atoi(f); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// sbsProcStat is pid's state and parent (0, 0 if it is gone).
func sbsProcStat(pid int) (state byte, ppid int) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 2 {
		return 0, 0
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0][0], ppid
}

// sbsChildren are pid's children.
func sbsChildren(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, pp := sbsProcStat(p); pp == pid {
			out = append(out, p)
		}
	}
	return out
}

// sbsDescendants are pid's descendants, the deepest first.
func sbsDescendants(pid int) []int {
	var out []int
	for _, c := range sbsChildren(pid) {
		out = append(append(out, sbsDescendants(c)...), c)
	}
	return out
}

// sbsReap waits for those of pids that are this process's children to end,
// and reaps them.
func sbsReap(pids []int) error {
	deadline := time.Now().Add(sbsWait)
	for _, p := range pids {
		for {
			if _, pp := sbsProcStat(p); pp != os.Getpid() {
				break // not this process's, or gone
			}
			var ws unix.WaitStatus
			if got, err := unix.Wait4(p, &ws, unix.WNOHANG, nil); got == p || err != nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("process %d (%s) does not end", p, sbsCmdline(p))
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	return nil
}

// sbsCgroupMounts are the mount points of the cgroup hierarchies (v1 and
// v2) as the calling thread sees them (the host's, on every thread but
// crun's: /proc/self would be the main thread's view, and that thread
// may be crun's).
func sbsCgroupMounts() []string {
	data, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		i := slices.Index(f, "-")
		if len(f) < 5 || i < 0 || i+1 >= len(f) {
			continue
		}
		if t := f[i+1]; (t == "cgroup" || t == "cgroup2") && !slices.Contains(out, f[4]) {
			out = append(out, f[4])
		}
	}
	return out
}

// sbsTagged are the processes with tag as an argument.
func sbsTagged(tag string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == os.Getpid() {
			continue
		}
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if slices.Contains(strings.Split(string(data), "\x00"), tag) {
			out = append(out, p)
		}
	}
	return out
}

func sbsCmdline(pid int) string {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(strings.ReplaceAll(string(data), "\x00", " "))
}

// The table.

func (s *sbsRun) report(rounds int) {
	b := s.b
	type row struct {
		c        *sbsCandidate
		med, p90 float64
	}
	var rows []row
	med := map[string]float64{}
	for _, c := range s.cands {
		r := row{c: c}
		if len(c.times) > 0 {
			r.med, r.p90 = sbsStats(c.times)
			med[c.key] = r.med
		}
		rows = append(rows, r)
	}
	var t strings.Builder
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	cgv := "v1"
	if sbsExists("/sys/fs/cgroup/cgroup.controllers") {
		cgv = "v2"
	}
	fmt.Fprintf(&t, "\nlaunch -> the program's first instruction (a byte on a FIFO), %d rounds, candidates alternating\n", rounds)
	fmt.Fprintf(&t, "Linux %s, %d CPUs, cgroup %s, %s", strings.TrimSpace(string(kernel)), runtime.NumCPU(), cgv, runtime.Version())
	if len(s.vers) > 0 {
		fmt.Fprintf(&t, ", %s", strings.Join(s.vers, ", "))
	}
	fmt.Fprintf(&t, "\nlimits where the candidate has them: %d CPU quota, %d MiB memory, %d pids\n\n", sbsCPUs, sbsMem>>20, sbsPids)
	fmt.Fprintf(&t, "%-13s %9s %9s %8s %5s  %s\n", "candidate", "median ms", "p90 ms", "÷ exec", "n", "what")
	for _, r := range rows {
		if len(r.c.times) == 0 {
			why := "skipped: " + r.c.skip
			if len(r.c.fails) > 0 {
				why = "failed (below)"
			}
			fmt.Fprintf(&t, "%-13s %9s %9s %8s %5d  %s\n", r.c.name, "-", "-", "-", 0, why)
			continue
		}
		ratio := "-"
		if base := med["exec"]; base > 0 {
			ratio = fmt.Sprintf("%.1f", r.med/base)
		}
		n := strconv.Itoa(len(r.c.times))
		if f := len(r.c.fails); f > 0 {
			n += fmt.Sprintf(" (%d failed)", f)
		}
		fmt.Fprintf(&t, "%-13s %9.2f %9.2f %8s %5s  %s\n", r.c.name, r.med, r.p90, ratio, n, r.c.note)
		if r.c.skip != "" {
			fmt.Fprintf(&t, "%13s then %s\n", "", r.c.skip)
		}
	}
	t.WriteString("\n")
	if w := med["warm"]; w > 0 {
		for _, o := range []string{"runc", "crun"} {
			if m := med[o]; m > 0 {
				fmt.Fprintf(&t, "gridmgr-warm median ÷ %s median: %.2f\n", o, w/m)
				b.ReportMetric(w/m, "warm/"+o)
			} else {
				fmt.Fprintf(&t, "gridmgr-warm median ÷ %s median: - (%s did not run)\n", o, o)
			}
		}
	}
	for _, c := range s.cands {
		if len(c.fails) > 0 {
			fmt.Fprintf(&t, "%s failures:\n", c.name)
			for _, f := range c.fails {
				fmt.Fprintf(&t, "  %s\n", f)
			}
			// The baseline's and gridmgr's are errors; another tool's
			// failing on this host is a fact about the host.
			switch c.key {
			case "exec", "sh", "warm", "cold":
				b.Errorf("%s failed %d times", c.name, len(c.fails))
			}
		}
	}
	if testing.Verbose() {
		b.Log(t.String())
	} else {
		// Without -v, go test keeps 10 lines of a benchmark's log.
		fmt.Print(t.String())
		b.Log("the table is above (go test -v shows it here)")
	}
	b.ReportMetric(0, "ns/op") // meaningless here: the rounds ran once
	for _, c := range s.cands {
		if m := med[c.key]; m > 0 {
			b.ReportMetric(m, c.key+"-ms")
			if base := med["exec"]; base > 0 && c.key != "exec" {
				b.ReportMetric(m/base, c.key+"/exec")
			}
		}
	}
}

// sbsStats are the median and the 90th percentile (nearest rank), in ms.
func sbsStats(d []time.Duration) (med, p90 float64) {
	s := slices.Clone(d)
	slices.Sort(s)
	ms := func(x time.Duration) float64 { return float64(x) / 1e6 }
	n := len(s)
	med = ms(s[n/2])
	if n%2 == 0 {
		med = (ms(s[n/2-1]) + ms(s[n/2])) / 2
	}
	return med, ms(s[int(math.Ceil(0.9*float64(n)))-1])
}

// sbsCheckStatic says why the program at path is no static executable.
func sbsCheckStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("it is linked dynamically")
		}
	}
	return nil
}

func sbsExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func sbsTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
