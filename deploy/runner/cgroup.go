package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
)

// group is one instance's cgroup, v1 or v2.
type group interface {
	add(pid int) error
	pids() ([]int, error)
	freeze() error
	thaw() error
	frozen() bool
	usage() (cpuNs uint64, mem int64, err error)
	cpuNs() uint64 // the CPU time used, read cheaply (0 if unknown)
	oomKills() uint64
	delete() error
}

const v1Root = "/sys/fs/cgroup"

// cgroupVersion is 1 or 2 (0: none usable). A hybrid host with no
// controllers on its unified hierarchy is used as v1.
func cgroupVersion() int {
	switch cgroups.Mode() {
	case cgroups.Unified:
		return 2
	case cgroups.Legacy, cgroups.Hybrid:
		return 1
	}
	return 0
}

// v1Controllers are the v1 hierarchies an instance's cgroup is made in.
var v1Controllers = []cgroup1.Name{cgroup1.Cpu, cgroup1.Cpuacct, cgroup1.Memory, cgroup1.Freezer, cgroup1.Pids}

func v1Hierarchy() ([]cgroup1.Subsystem, error) {
	var out []cgroup1.Subsystem
	for _, n := range v1Controllers {
		if _, err := os.Stat(filepath.Join(v1Root, string(n))); err != nil {
			continue
		}
		switch n {
		case cgroup1.Cpu:
			out = append(out, cgroup1.NewCpu(v1Root))
		case cgroup1.Cpuacct:
			out = append(out, cgroup1.NewCpuacct(v1Root))
		case cgroup1.Memory:
			out = append(out, cgroup1.NewMemory(v1Root))
		case cgroup1.Freezer:
			out = append(out, cgroup1.NewFreezer(v1Root))
		case cgroup1.Pids:
			out = append(out, cgroup1.NewPids(v1Root))
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup v1 controller (cpu, memory, freezer) is mounted under " + v1Root)
	}
	return out, nil
}

// openGroup makes (or, with create false, loads) the cgroup at path
// ("/PARENT/ID") with lim.
func openGroup(version int, path string, lim Limits, create bool) (group, error) {
	switch version {
	case 1:
		if !create {
			cg, err := cgroup1.Load(cgroup1.StaticPath(path), cgroup1.WithHierarchy(v1Hierarchy))
			if err != nil {
				return nil, err
			}
			return &group1{cg: cg, path: path}, nil
		}
		if err := makeV1(path, lim); err != nil {
			return nil, fmt.Errorf("making the cgroup %s: %w", path, err)
		}
		return openGroup(version, path, lim, false)
	case 2:
		if !create {
			m, err := cgroup2.Load(path)
			if err != nil {
				return nil, err
			}
			return &group2{m: m, path: path}, nil
		}
		m, err := cgroup2.NewManager("/sys/fs/cgroup", path, v2Resources(lim))
		if err != nil {
			return nil, fmt.Errorf("making the cgroup %s: %w", path, err)
		}
		return &group2{m: m, path: path}, nil
	}
	return nil, errors.New("this host has no usable cgroups")
}

// openLeaf makes the cgroup at path, whose parent must exist (in every
// v1 hierarchy there is), and loads it. A parent gone is fs.ErrNotExist.
func openLeaf(version int, path string) (group, error) {
	var dirs []string
	switch version {
	case 1:
		for _, n := range v1Controllers {
			root := filepath.Join(v1Root, string(n))
			if _, err := os.Stat(root); err == nil {
				dirs = append(dirs, filepath.Join(root, path))
			}
		}
	case 2:
		dirs = []string{filepath.Join("/sys/fs/cgroup", path)}
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("making the cgroup %s: %w", path, err)
		}
	}
	return openGroup(version, path, Limits{}, false)
}

// makeV1 makes the v1 cgroup at path in every hierarchy of
// v1Controllers there is, and writes lim's limits: a CFS quota of CPUs ×
// 100 ms per 100 ms, a memory limit (and the same memory+swap limit
// where the kernel accounts swap, so that swapping does not escape it),
// a pids limit. It writes the files itself: containerd's cgroup1.New
// took a millisecond, most of a confined start's budget.
func makeV1(path string, lim Limits) error {
	write := func(ctrl, file, value string) error {
		return os.WriteFile(filepath.Join(v1Root, ctrl, path, file), []byte(value), 0)
	}
	made := false
	for _, n := range v1Controllers {
		root := filepath.Join(v1Root, string(n))
		if _, err := os.Stat(root); err != nil {
			continue
		}
		made = true
		if err := os.MkdirAll(filepath.Join(root, path), 0o755); err != nil {
			return err
		}
		var err error
		switch n {
		case cgroup1.Cpu:
			if lim.CPUs > 0 {
				if err = write("cpu", "cpu.cfs_period_us", "100000"); err == nil {
					err = write("cpu", "cpu.cfs_quota_us", strconv.FormatInt(int64(lim.CPUs*100000), 10))
				}
			}
		case cgroup1.Memory:
			if lim.Mem > 0 {
				v := strconv.FormatInt(lim.Mem, 10)
				// memsw must stay ≥ the limit: raise it first if it is below.
				_, swErr := os.Stat(filepath.Join(root, path, "memory.memsw.limit_in_bytes"))
				if swErr == nil {
					_ = write("memory", "memory.memsw.limit_in_bytes", v)
				}
				if err = write("memory", "memory.limit_in_bytes", v); err == nil && swErr == nil {
					err = write("memory", "memory.memsw.limit_in_bytes", v)
				}
			}
		case cgroup1.Pids:
			if lim.Pids > 0 {
				err = write("pids", "pids.max", strconv.FormatInt(lim.Pids, 10))
			}
		}
		if err != nil {
			return fmt.Errorf("%s limit: %w", n, err)
		}
	}
	if !made {
		return errors.New("no cgroup v1 controller (cpu, memory, freezer) is mounted under " + v1Root)
	}
	return nil
}

// v2Resources maps limits to cgroup v2: cpu.max, memory.max with no
// swap, pids.max.
func v2Resources(lim Limits) *cgroup2.Resources {
	r := &cgroup2.Resources{}
	if lim.CPUs > 0 {
		quota, period := int64(lim.CPUs*100000), uint64(100000)
		r.CPU = &cgroup2.CPU{Max: cgroup2.NewCPUMax(&quota, &period)}
	}
	if lim.Mem > 0 {
		m, zero := lim.Mem, int64(0)
		r.Memory = &cgroup2.Memory{Max: &m, Swap: &zero}
	}
	if lim.Pids > 0 {
		r.Pids = &cgroup2.Pids{Max: lim.Pids}
	}
	return r
}

type group1 struct {
	cg   cgroup1.Cgroup
	path string
}

func (g *group1) add(pid int) error { return g.cg.Add(cgroup1.Process{Pid: pid}) }

func (g *group1) pids() ([]int, error) {
	ps, err := g.cg.Processes(cgroup1.Freezer, true)
	if err != nil {
		ps, err = g.cg.Processes(cgroup1.Memory, true)
	}
	var out []int
	for _, p := range ps {
		out = append(out, p.Pid)
	}
	return out, err
}

func (g *group1) freeze() error { return g.cg.Freeze() }
func (g *group1) thaw() error   { return g.cg.Thaw() }
func (g *group1) frozen() bool  { return g.cg.State() == cgroup1.Frozen }

// usage reads the two numbers an instance's status shows from the three
// files that hold them, as containerd's Stat does (Stat reads every file
// of every controller, about 0.4 ms a call: every status and every
// `app list` asked it once per instance). Without the memory controller
// it is an error, as Stat's would be; without cpuacct the CPU time is 0.
func (g *group1) usage() (uint64, int64, error) {
	dir := filepath.Join(v1Root, "memory", g.path)
	data, err := os.ReadFile(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		return 0, 0, err
	}
	used, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("memory.usage_in_bytes of %s: %w", g.path, err)
	}
	stat, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return 0, 0, err
	}
	// What cannot be reclaimed: not the clean file cache, but the
	// anonymous memory and what is in its tmpfs (shmem).
	mem := int64(used) - int64(fieldOf(string(stat), "total_inactive_file"))
	return g.cpuNs(), max(mem, 0), nil
}

// oomKills reads memory.oom_control's oom_kill count (kernels ≥ 4.13).
func (g *group1) oomKills() uint64 {
	data, err := os.ReadFile(filepath.Join(v1Root, "memory", g.path, "memory.oom_control"))
	if err != nil {
		return 0
	}
	return fieldOf(string(data), "oom_kill")
}

func (g *group1) cpuNs() uint64 {
	data, err := os.ReadFile(filepath.Join(v1Root, "cpuacct", g.path, "cpuacct.usage"))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return n
}

func (g *group1) delete() error { return g.cg.Delete() }

type group2 struct {
	m    *cgroup2.Manager
	path string
}

func (g *group2) add(pid int) error { return g.m.AddProc(uint64(pid)) }

func (g *group2) pids() ([]int, error) {
	ps, err := g.m.Procs(true)
	var out []int
	for _, p := range ps {
		out = append(out, int(p))
	}
	return out, err
}

func (g *group2) freeze() error { return g.m.Freeze() }
func (g *group2) thaw() error   { return g.m.Thaw() }
func (g *group2) frozen() bool {
	data, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup", g.path, "cgroup.freeze"))
	return strings.TrimSpace(string(data)) == "1"
}

func (g *group2) usage() (uint64, int64, error) {
	st, err := g.m.Stat()
	if err != nil {
		return 0, 0, err
	}
	var cpu uint64
	var mem int64
	if st.CPU != nil {
		cpu = st.CPU.UsageUsec * 1000
	}
	if st.Memory != nil {
		mem = int64(st.Memory.Usage) - int64(st.Memory.InactiveFile)
	}
	return cpu, max(mem, 0), nil
}

func (g *group2) oomKills() uint64 {
	data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", g.path, "memory.events"))
	if err != nil {
		return 0
	}
	return fieldOf(string(data), "oom_kill")
}

func (g *group2) cpuNs() uint64 {
	data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", g.path, "cpu.stat"))
	if err != nil {
		return 0
	}
	return fieldOf(string(data), "usage_usec") * 1000
}

func (g *group2) delete() error { return g.m.Delete() }

// fieldOf reads "NAME VALUE" from a cgroup key-value file.
func fieldOf(data, name string) uint64 {
	for line := range strings.Lines(data) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == name {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// cgroupJoin lets a thread fork children straight into an instance's
// cgroup, so that a program starts inside its limits before its first
// instruction. On cgroup v2 the kernel places the child (clone3 with
// CLONE_INTO_CGROUP); on v1 the forking thread (only it, through the
// tasks files) enters the instance's cgroups, forks, and returns to its
// own: the child inherits the thread's cgroups, while the process that
// forks is never counted against the instance. The files are opened
// before the thread is confined (the sandbox sees /sys read-only).
type cgroupJoin struct {
	enter1, leave1 []*os.File // v1: tasks files, per hierarchy
	dir2           *os.File   // v2: the cgroup's directory
}

// openJoin opens what joining the cgroup at path ("/PARENT/GROUP/ID")
// takes.
func openJoin(version int, path string) (*cgroupJoin, error) {
	j := &cgroupJoin{}
	if version == 2 {
		f, err := os.Open(filepath.Join("/sys/fs/cgroup", path))
		if err != nil {
			return nil, fmt.Errorf("the instance's cgroup: %w", err)
		}
		j.dir2 = f
		return j, nil
	}
	own, err := ownCgroups()
	if err != nil {
		return nil, err
	}
	for _, n := range v1Controllers {
		root := filepath.Join(v1Root, string(n))
		if _, err := os.Stat(root); err != nil {
			continue
		}
		in, err := os.OpenFile(filepath.Join(root, path, "tasks"), os.O_WRONLY, 0)
		if err != nil {
			j.close()
			return nil, fmt.Errorf("the instance's cgroup (%s): %w", n, err)
		}
		j.enter1 = append(j.enter1, in)
		out, err := os.OpenFile(filepath.Join(root, own[string(n)], "tasks"), os.O_WRONLY, 0)
		if err != nil {
			j.close()
			return nil, fmt.Errorf("this process's own cgroup (%s): %w", n, err)
		}
		j.leave1 = append(j.leave1, out)
	}
	return j, nil
}

// ownCgroups maps each v1 controller to this process's cgroup in it.
func ownCgroups() (map[string]string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for line := range strings.Lines(string(data)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}

// enter prepares the calling thread's next fork for the cgroup (sys is
// the fork's attributes) and returns how to undo it after the fork.
func (j *cgroupJoin) enter(sys *syscall.SysProcAttr) (leave func() error, err error) {
	if j.dir2 != nil {
		sys.UseCgroupFD, sys.CgroupFD = true, int(j.dir2.Fd())
		return func() error { return nil }, nil
	}
	move := func(files []*os.File) error {
		var errs []error
		for _, f := range files {
			if _, err := f.Write([]byte("0")); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	if err := move(j.enter1); err != nil {
		_ = move(j.leave1)
		return nil, fmt.Errorf("entering the instance's cgroup: %w", err)
	}
	return func() error { return move(j.leave1) }, nil
}

func (j *cgroupJoin) close() {
	for _, f := range append(j.enter1, j.leave1...) {
		f.Close()
	}
	if j.dir2 != nil {
		j.dir2.Close()
	}
}
