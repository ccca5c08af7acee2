package runner

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// In nested mode (Options.Nested) there are no cgroups and no PID
// namespace: an instance's processes are the descendants of its shim,
// which is a child subreaper (PR_SET_CHILD_SUBREAPER), so that a process
// whose parent ends — one that double-forked to leave — is given to the
// shim, not to whatever is above it, and stays in its tree. The shim is
// itself the child of a keeper (keeperMain), a subreaper too, which kills
// whatever is left in its tree when the shim ends, even by kill -9.

// proc is one process as /proc/PID/stat shows it.
type proc struct {
	pid, ppid int
	state     byte
	start     uint64 // start time in clock ticks, against pid reuse
	cpuTicks  uint64 // utime+stime+cutime+cstime
	childCPU  uint64 // cutime+cstime: the children it waited for
}

// readProc reads /proc/PID/stat (ok false: it is gone).
func readProc(pid int) (proc, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	// The name (field 2) is in parentheses and may hold anything.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return proc{}, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return proc{}, false
	}
	n := func(k int) uint64 { v, _ := strconv.ParseUint(f[k], 10, 64); return v }
	ppid, _ := strconv.Atoi(f[1])
	// Fields 3 (state) on: f[k] is field k+3; utime 14, stime 15,
	// cutime 16, cstime 17, starttime 22.
	p := proc{pid: pid, ppid: ppid, state: f[0][0], start: n(19), childCPU: n(13) + n(14)}
	p.cpuTicks = n(11) + n(12) + p.childCPU
	return p, true
}

// gone says whether p has ended (a zombie waits only to be reaped).
func (p proc) gone() bool { return p.state == 'Z' || p.state == 'X' || p.state == 'x' }

// descendants is every live process below root (not root itself).
func descendants(root int) []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if p, ok := readProc(pid); ok {
			children[p.ppid] = append(children[p.ppid], p)
		}
	}
	var out []proc
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if c.pid == root { // never: a pid is not its own ancestor
				continue
			}
			queue = append(queue, c.pid)
			if !c.gone() {
				out = append(out, c)
			}
		}
	}
	return out
}

// signalProc sends sig to p if it is still the process that was read
// (not another that got its pid since): the pidfd pins a process, and
// its start time, read after, says which one.
func signalProc(p proc, sig syscall.Signal) error {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		if procStart(p.pid) != p.start {
			return nil
		}
		return syscall.Kill(p.pid, sig)
	}
	if err != nil {
		return nil // gone
	}
	defer unix.Close(fd)
	if procStart(p.pid) != p.start {
		return nil
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0)
}

// signalTree sends sig to every live process below root.
func signalTree(root int, sig syscall.Signal) {
	for _, p := range descendants(root) {
		_ = signalProc(p, sig)
	}
}

// killTree SIGKILLs every process below root until none is left (root
// must reap them, or be a subreaper that does) or the deadline passes.
func killTree(root int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ps := descendants(root)
		if len(ps) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			pids := make([]int, len(ps))
			for i, p := range ps {
				pids[i] = p.pid
			}
			return fmt.Errorf("processes %v do not end", pids)
		}
		for _, p := range ps {
			_ = signalProc(p, syscall.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// clockTick is USER_HZ, the unit of /proc's times (100 on every Linux
// architecture Go runs on but alpha).
const clockTick = 100

// treeGroup is a nested instance's "cgroup": the processes below its
// shim (or, once the shim is gone, below its keeper), each read from
// /proc when asked. It bounds nothing (the enclosing sandbox's cgroup
// bounds the whole manager); its usage is summed over the processes;
// freezing is SIGSTOP to every one of them, and a marker file says the
// instance is paused.
type treeGroup struct {
	shim, keeper procRef
	marker       string // the paused marker ("": none)
}

// procRef names a process that may have ended: its pid and start time.
type procRef struct {
	Pid   int
	Start uint64
}

func (r procRef) alive() bool { return r.Pid > 0 && r.Start != 0 && procStart(r.Pid) == r.Start }

func selfRef() procRef {
	pid := os.Getpid()
	return procRef{Pid: pid, Start: procStart(pid)}
}

// procs is the instance's live processes, not its shim's.
func (g *treeGroup) procs() []proc {
	var ps []proc
	switch {
	case g.keeper.alive():
		ps = descendants(g.keeper.Pid)
	case g.shim.alive():
		ps = descendants(g.shim.Pid)
	}
	out := ps[:0]
	for _, p := range ps {
		if p.pid != g.shim.Pid {
			out = append(out, p)
		}
	}
	return out
}

func (g *treeGroup) add(int) error {
	return errors.New("a nested instance has no cgroup to add a process to")
}

func (g *treeGroup) pids() ([]int, error) {
	var out []int
	for _, p := range g.procs() {
		out = append(out, p.pid)
	}
	return out, nil
}

// freeze stops every process of the instance (SIGSTOP) and waits until
// each is stopped; a process forked meanwhile is stopped too.
func (g *treeGroup) freeze() error {
	if g.marker != "" {
		if err := os.WriteFile(g.marker, nil, 0o600); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		running := 0
		for _, p := range g.procs() {
			if p.state != 'T' && p.state != 't' {
				running++
				_ = signalProc(p, syscall.SIGSTOP)
			}
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes do not stop", running)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// thaw continues every process of the instance (SIGCONT).
func (g *treeGroup) thaw() error {
	if g.marker != "" {
		if err := os.Remove(g.marker); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	for _, p := range g.procs() {
		_ = signalProc(p, syscall.SIGCONT)
	}
	return nil
}

func (g *treeGroup) frozen() bool {
	if g.marker == "" {
		return false
	}
	_, err := os.Stat(g.marker)
	return err == nil
}

// usage is the CPU time of the instance's processes, live and ended
// (those its shim reaped: the shim's children's times), since the shim
// started, and the sum of their resident sets.
func (g *treeGroup) usage() (uint64, int64, error) {
	ps := g.procs()
	var ticks uint64
	if s, ok := readProc(g.shim.Pid); ok && g.shim.alive() {
		ticks += s.childCPU
	}
	var rss int64
	page := int64(os.Getpagesize())
	for _, p := range ps {
		ticks += p.cpuTicks
		if data, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/statm"); err == nil {
			if f := strings.Fields(string(data)); len(f) > 1 {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				rss += n * page
			}
		}
	}
	return ticks * (1e9 / clockTick), rss, nil
}

func (g *treeGroup) cpuNs() uint64 {
	ns, _, _ := g.usage()
	return ns
}

// oomKills is 0: without a cgroup of its own nothing counts them (a
// process the enclosing cgroup's OOM killer ends is reported "signal
// KILL").
func (g *treeGroup) oomKills() uint64 { return 0 }

func (g *treeGroup) delete() error { return nil }
