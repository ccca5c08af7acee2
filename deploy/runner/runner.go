package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gridmgr/gridmgr/internal/lazyre"
)

// Limits bound a group of instances (a reservation's): what the group
// was given, shared by its instances.
type Limits struct {
	CPUs float64 // 0: no CPU limit; else a CFS quota of CPUs × the period
	Mem  int64   // bytes; 0: none. The kernel kills past it (no swap)
	Pids int64   // processes and threads; 0: none
}

// Restart is the restart policy: never, or on failure up to Max times.
type Restart struct {
	OnFailure bool
	Max       int
}

// Spec is how to run an instance.
type Spec struct {
	ID string // [A-Za-z0-9][A-Za-z0-9._-]*: names its cgroup PARENT/GROUP/ID
	// Group is the instance's group (its reservation): the cgroup
	// PARENT/GROUP holds Limits, for all the group's instances together.
	Group   string
	Dir     string   // working directory (as the sandbox shows it)
	Command []string // argv; a relative Command[0] with a '/' is relative to Dir
	Env     []string // KEY=VALUE: the whole environment
	// UID and GID the processes run as (never 0), with no supplementary
	// groups.
	UID, GID   uint32
	Nice       int // 0-19
	Limits     Limits
	Sandbox    Sandbox
	StopSignal syscall.Signal // default SIGTERM
	StopGrace  time.Duration  // default 10s
	Restart    Restart
	LogDir     string // stdout.log and stderr.log (outside the sandbox)
	LogMax     int64  // rotate past this many bytes; default 10 MiB
	LogKeep    int    // rotated files kept; default 3
}

// State of an instance's processes.
type State string

// States.
const (
	StateStarting   State = "starting"
	StateRestarting State = "restarting" // ended by itself; to be started again (restart policy)
	StateRunning    State = "running"
	StatePaused     State = "paused"
	StateStopping   State = "stopping"
	StateStopped    State = "stopped"    // stopped on request
	StateExited     State = "exited"     // ended by itself with status 0
	StateFailed     State = "failed"     // ended by itself otherwise
	StateOOMKilled  State = "oom-killed" // killed by the kernel past its memory limit
)

// Status is an instance's process data.
type Status struct {
	State      State     `json:"state"`
	ShimPid    int       `json:"shim_pid,omitempty"`
	AppPid     int       `json:"app_pid,omitempty"` // as the host sees it
	Pids       []int     `json:"pids,omitempty"`    // every process in its cgroup
	CPUSeconds float64   `json:"cpu_seconds"`       // since its cgroup was made (install steps too)
	CPUUtil    float64   `json:"cpu_util"`          // CPUs in use lately
	MemBytes   int64     `json:"mem_bytes"`
	Limits     Limits    `json:"limits"` // its group's
	Started    time.Time `json:"started"`
	Restarts   int       `json:"restarts"`
	LastExit   string    `json:"last_exit,omitempty"` // "exit 1", "signal KILL", "oom-killed"
	Listening  []int     `json:"listening,omitempty"` // TCP ports its processes listen on
}

// Options configure a Runner.
type Options struct {
	StateDir     string // where each instance's spec and state live (hidden from every sandbox)
	CgroupParent string // the cgroup every group's cgroup is made under (not used when Nested)
	Log          *slog.Logger
	// Nested says that this manager itself runs inside a sandbox that
	// confines everything it starts (a glide-in: a manager deployed as
	// another manager's application), so that the enclosing sandbox is
	// the tenant boundary. Its instances then run as the manager's own
	// uid, with no namespaces and no cgroups of their own, each under a
	// shim that is a child subreaper (see doc.go). Only set it where an
	// enclosing sandbox confines the manager: New refuses it as root.
	Nested bool
}

// Runner runs instances, each confined (Sandbox) under a supervisor
// process of its own (the shim: this executable again, see MaybeShim)
// that outlives the manager; a new Runner on the same StateDir re-adopts
// them (Adopt).
type Runner struct {
	o       Options
	version int
	log     *slog.Logger
	self    string

	mu      sync.Mutex
	samples map[string]sample // for CPU utilisation
	spare   *standby          // a standby ready to be used (nil: none)
	filling bool              // one is being started
	closed  bool              // no more spares

	testCgroupPause time.Duration // shimSpec.TestPause
}

type sample struct {
	at time.Time
	ns uint64
}

var idRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._-]{0,190}$`)

// New returns a Runner. It fails, saying why, where processes cannot be
// bounded and confined: not root, no usable cgroups, no namespaces. It
// tries a sandbox once to be sure.
func New(o Options) (*Runner, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Nested {
		return newNested(o)
	}
	if o.StateDir == "" || o.CgroupParent == "" || !idRE.MatchString(o.CgroupParent) {
		return nil, errors.New("runner: a state directory and a cgroup parent name are needed")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("applications are confined with namespaces, cgroups and a uid of their own, which takes root: run the manager as root to run them")
	}
	v := cgroupVersion()
	if v == 0 {
		return nil, errors.New("this host has no usable cgroups (neither v2 nor v1 is mounted under /sys/fs/cgroup)")
	}
	probe := "/sys/fs/cgroup"
	if v == 1 {
		probe = filepath.Join(v1Root, "memory")
	}
	if err := syscall.Access(probe, 2 /* W_OK */); err != nil {
		return nil, fmt.Errorf("cannot make cgroups under %s (%v)", probe, err)
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r := &Runner{o: o, version: v, log: o.Log, self: self, samples: map[string]sample{}}
	if err := r.probe(); err != nil {
		return nil, fmt.Errorf("applications cannot be confined on this host: %w", err)
	}
	return r, nil
}

// newNested is New in nested mode: nothing to confine with is needed,
// only what a shim without namespaces or cgroups uses — a state
// directory this manager can write, a standby it can start (fork and
// exec), and a child subreaper (the probe).
func newNested(o Options) (*Runner, error) {
	if o.StateDir == "" {
		return nil, errors.New("runner: a state directory is needed")
	}
	if os.Geteuid() == 0 {
		return nil, errors.New("nested mode runs applications as this manager's own uid, unconfined but by the sandbox around the manager; as root that would be no confinement at all: run a root manager without it")
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(o.StateDir, "probe-*")
	if err != nil {
		return nil, fmt.Errorf("the state directory %s is not writable: %w", o.StateDir, err)
	}
	f.Close()
	_ = os.Remove(f.Name())
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r := &Runner{o: o, log: o.Log, self: self, samples: map[string]sample{}}
	if err := r.probe(); err != nil {
		return nil, fmt.Errorf("applications cannot be run here, even nested: %w", err)
	}
	r.log.Info("nested: applications run inside this manager's own sandbox, which confines them; they are not separated from each other by namespaces",
		"uid", os.Geteuid(), "per_instance", "supervision, restarts, stop of every descendant, output rotation",
		"not_per_instance", "cpu, memory and pids limits (the enclosing sandbox's bound the whole manager), sandbox paths, host name, network none")
	return r, nil
}

// Nested says whether the Runner runs in nested mode (Options.Nested).
func (r *Runner) Nested() bool { return r.o.Nested }

// CgroupVersion is 1 or 2 (0 in nested mode: no cgroups are used).
func (r *Runner) CgroupVersion() int { return r.version }

func (r *Runner) dir(id string) string { return filepath.Join(r.o.StateDir, id) }

func (r *Runner) groupPath(group string) string { return "/" + r.o.CgroupParent + "/" + group }

// shimSpec is what a shim is given (spec.json).
type shimSpec struct {
	Spec
	Version int    `json:"version"`
	Cgroup  string `json:"cgroup"` // /PARENT/GROUP/ID
	// Nested: run by a nested Runner (no namespaces, no cgroups).
	Nested bool `json:"nested,omitempty"`
	// TestPause (tests only) is a pause between making the group's
	// cgroup and the instance's, to widen a race a test provokes.
	TestPause time.Duration `json:"test_pause,omitempty"`
}

// shimState is state.json, written by the shim (and by the runner when
// the shim is gone).
type shimState struct {
	State      State     `json:"state"`
	ShimPid    int       `json:"shim_pid"`   // as the host sees it
	ShimStart  uint64    `json:"shim_start"` // its start time (/proc/PID/stat), against pid reuse
	AppPid     int       `json:"app_pid"`    // in the instance's PID namespace
	Started    time.Time `json:"started"`
	CPUAtStart uint64    `json:"cpu_at_start"` // the cgroup's CPU ns when the program started
	Restarts   int       `json:"restarts"`
	LastExit   string    `json:"last_exit,omitempty"`
	// Control is the shim's control socket: the runner asks it to run
	// commands inside the instance.
	Control string `json:"control,omitempty"`
	// KeeperPid and KeeperStart (nested mode) are the shim's parent,
	// which kills what the shim leaves when it ends.
	KeeperPid   int    `json:"keeper_pid,omitempty"`
	KeeperStart uint64 `json:"keeper_start,omitempty"`
}

func checkID(what, id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("%q is not an instance %s (letters, digits, '.', '_', '-')", id, what)
	}
	return nil
}

// prepare checks spec and fills its defaults.
func (r *Runner) prepare(spec Spec) (*shimSpec, error) {
	if err := checkID("id", spec.ID); err != nil {
		return nil, err
	}
	if err := checkID("group", spec.Group); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(spec.Dir) {
		return nil, fmt.Errorf("the working directory %q is not an absolute path", spec.Dir)
	}
	if st, err := os.Stat(spec.Dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("the working directory %s does not exist", spec.Dir)
	}
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return nil, errors.New("no command to run")
	}
	if r.o.Nested {
		// The manager's own uid and gid: it cannot change them.
		uid, gid := uint32(os.Geteuid()), uint32(os.Getegid())
		if spec.UID != 0 && spec.UID != uid {
			return nil, fmt.Errorf("a nested manager runs applications as its own uid %d, not %d", uid, spec.UID)
		}
		if spec.GID != 0 && spec.GID != gid && spec.GID != spec.UID {
			return nil, fmt.Errorf("a nested manager runs applications as its own gid %d, not %d", gid, spec.GID)
		}
		spec.UID, spec.GID = uid, gid
		if spec.Sandbox.Network == "none" {
			return nil, errors.New(`network = "none" needs a network namespace of the application's own, which a nested manager (a glide-in) does not make: use the host's network, or run the application on a manager that is not nested`)
		}
	} else if spec.UID == 0 || spec.GID == 0 {
		return nil, errors.New("applications never run as root: give the instance a uid and gid of its own")
	}
	if err := spec.Sandbox.check(); err != nil {
		return nil, err
	}
	spec.Sandbox.Hide = append(spec.Sandbox.Hide, r.o.StateDir)
	if spec.StopSignal == 0 {
		spec.StopSignal = syscall.SIGTERM
	}
	if spec.StopGrace <= 0 {
		spec.StopGrace = 10 * time.Second
	}
	if spec.LogMax <= 0 {
		spec.LogMax = 10 << 20
	}
	if spec.LogKeep <= 0 {
		spec.LogKeep = 3
	}
	if r.o.Nested {
		return &shimSpec{Spec: spec, Nested: true}, nil
	}
	return &shimSpec{Spec: spec, Version: r.version, Cgroup: r.groupPath(spec.Group) + "/" + spec.ID, TestPause: r.testCgroupPause}, nil
}

// Start starts instance spec.ID, confined, under a shim of its own, in a
// new cgroup inside its group's (which has spec.Limits). It returns once
// the program runs, or with why it could not.
func (r *Runner) Start(spec Spec) error {
	ss, err := r.prepare(spec)
	if err != nil {
		return err
	}
	id := spec.ID
	if st, _ := r.readState(id); st != nil && alive(st) {
		return fmt.Errorf("%s is running already", id)
	}
	if spec.LogDir == "" {
		return errors.New("no directory for the logs")
	}
	if err := os.MkdirAll(spec.LogDir, 0o755); err != nil {
		return err
	}
	dir := r.dir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, "state.json"))
	_ = os.Remove(filepath.Join(dir, pausedMarker))
	// Before the standby is told, the instance is recorded as starting
	// under it (the supervisor to be): a manager killed from here on finds
	// it alive when it comes back (Adopt, Start, Status) and leaves it be,
	// rather than taking it for the remains of a dead one while it makes
	// its sandbox. The supervisor writes its own state once the program
	// runs (or it could not start it). The supervisor makes the cgroups
	// and the sandbox while this writes the spec (for Status, Stop and
	// Adopt).
	before := func(pid int) error {
		return writeJSON(filepath.Join(dir, "state.json"), &shimState{ShimPid: pid, ShimStart: procStart(pid), State: StateStarting})
	}
	var rep startReply
	err = r.activateCtx(context.Background(), activation{Op: "shim", Dir: dir, Spec: ss}, &rep, 30*time.Second, before, func() error {
		return writeJSON(filepath.Join(dir, "spec.json"), ss)
	})
	if err != nil {
		return fmt.Errorf("the supervisor did not report: %w", err)
	}
	if rep.Error != "" {
		return errors.New(rep.Error)
	}
	return nil
}

// writeJSON writes a state file by rename, not synced: what it describes
// (running processes) does not outlive a crash of the host either.
func writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (r *Runner) readState(id string) (*shimState, error) {
	var st shimState
	return &st, readJSON(filepath.Join(r.dir(id), "state.json"), &st)
}

// stateRead, when set (by tests), runs between reading an instance's
// state and looking at its shim: the moment a shim that ends normally
// can end unseen.
var stateRead func(id string)

// settledState is id's state.json and whether its shim still runs. A
// shim writes its last state before it exits, so a state that was read
// while the shim ran and says it still runs, with the shim gone by the
// time it is looked at, is read again: the shim may have ended normally
// in between, and its last word is in the file now.
func (r *Runner) settledState(id string) (*shimState, bool, error) {
	st, err := r.readState(id)
	if err != nil {
		return st, false, err
	}
	if stateRead != nil {
		stateRead(id)
	}
	if alive(st) {
		return st, true, nil
	}
	if !st.State.ended() {
		if again, err := r.readState(id); err == nil {
			st = again
		}
	}
	return st, alive(st), nil
}

func (r *Runner) readSpec(id string) (*shimSpec, error) {
	var ss shimSpec
	return &ss, readJSON(filepath.Join(r.dir(id), "spec.json"), &ss)
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// SupervisorEnded is the LastExit of an instance whose supervisor (its
// shim) ended while the program ran or started: killed, or the host's OOM
// killer. The program's own exit is unknown; the kernel ended it with the
// supervisor.
const SupervisorEnded = "its supervisor ended unexpectedly"

// alive reports whether the shim st names still runs: the same pid with
// the same start time.
func alive(st *shimState) bool {
	return st != nil && st.ShimPid > 0 && procStart(st.ShimPid) == st.ShimStart && st.ShimStart != 0
}

// procStart is pid's start time (field 22 of /proc/PID/stat), 0 if it
// does not run.
func procStart(pid int) uint64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The name (field 2) is in parentheses and may hold anything.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

func (r *Runner) group(id string) (group, error) {
	ss, err := r.readSpec(id)
	if err != nil {
		return nil, err
	}
	return r.openGroup(id, ss)
}

// pausedMarker, in a nested instance's state directory, says it is
// paused (there is no freezer to ask).
const pausedMarker = "paused"

// openGroup is what holds instance id's processes: its cgroup, or in
// nested mode the tree below its shim and keeper (from its state).
func (r *Runner) openGroup(id string, ss *shimSpec) (group, error) {
	if !ss.Nested {
		return openGroup(r.version, ss.Cgroup, Limits{}, false)
	}
	if !r.o.Nested {
		return nil, fmt.Errorf("%s was started by a nested manager", id)
	}
	g := &treeGroup{marker: filepath.Join(r.dir(id), pausedMarker)}
	if st, err := r.readState(id); err == nil {
		g.shim = procRef{Pid: st.ShimPid, Start: st.ShimStart}
		g.keeper = procRef{Pid: st.KeeperPid, Start: st.KeeperStart}
	}
	return g, nil
}

// Stop stops instance id: its stop signal to every one of its processes,
// then SIGKILL after its grace. It waits for the shim to end. Stopping an
// instance that is not running does nothing.
func (r *Runner) Stop(id string) error {
	if err := checkID("id", id); err != nil {
		return err
	}
	st, _ := r.readState(id)
	g, _ := r.group(id)
	if g != nil && g.frozen() {
		_ = g.thaw() // a frozen process cannot take its stop signal
	}
	if alive(st) {
		grace := 10 * time.Second
		if ss, err := r.readSpec(id); err == nil {
			grace = ss.StopGrace
		}
		_ = syscall.Kill(st.ShimPid, syscall.SIGTERM)
		deadline := time.Now().Add(grace + 10*time.Second)
		for alive(st) {
			if time.Now().After(deadline) {
				_ = syscall.Kill(st.ShimPid, syscall.SIGKILL)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if g != nil {
		if err := killAll(g); err != nil {
			return err
		}
	}
	if st, err := r.readState(id); err == nil && !st.State.ended() {
		st.State = StateStopped
		_ = writeJSON(filepath.Join(r.dir(id), "state.json"), st)
	}
	return nil
}

// Ended says whether the processes are gone (stopped, exited, failed,
// killed).
func (s State) Ended() bool { return s.ended() }

func (s State) ended() bool {
	return s == StateStopped || s == StateExited || s == StateFailed || s == StateOOMKilled
}

// killAll SIGKILLs every process in g until it is empty.
func killAll(g group) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := g.pids()
		if err != nil || len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v do not end", pids)
		}
		if tg, ok := g.(*treeGroup); ok {
			for _, p := range tg.procs() { // each checked against pid reuse
				_ = signalProc(p, syscall.SIGKILL)
			}
		} else {
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Pause freezes instance id's processes.
func (r *Runner) Pause(id string) error {
	g, err := r.running(id)
	if err != nil {
		return err
	}
	return g.freeze()
}

// Resume thaws them.
func (r *Runner) Resume(id string) error {
	g, err := r.running(id)
	if err != nil {
		return err
	}
	return g.thaw()
}

func (r *Runner) running(id string) (group, error) {
	if err := checkID("id", id); err != nil {
		return nil, err
	}
	st, _ := r.readState(id)
	if !alive(st) {
		return nil, fmt.Errorf("%s is not running", id)
	}
	return r.group(id)
}

// Status is instance id's process data. The State of an instance never
// started here is "".
func (r *Runner) Status(id string) (Status, error) {
	if err := checkID("id", id); err != nil {
		return Status{}, err
	}
	var out Status
	st, running, err := r.settledState(id)
	if err == nil {
		out.State, out.ShimPid, out.Started, out.Restarts, out.LastExit =
			st.State, st.ShimPid, st.Started, st.Restarts, st.LastExit
		if !st.State.ended() && !running {
			out.State, out.LastExit = StateFailed, SupervisorEnded
		}
	}
	ss, err := r.readSpec(id)
	if err != nil {
		return out, nil
	}
	out.Limits = ss.Limits
	g, err := r.openGroup(id, ss)
	if err != nil {
		return out, nil
	}
	out.Pids, _ = g.pids()
	if st != nil && st.AppPid > 0 {
		if ss.Nested { // no PID namespace: the host's pid
			if slices.Contains(out.Pids, st.AppPid) {
				out.AppPid = st.AppPid
			}
		} else {
			out.AppPid = hostPidOf(out.Pids, st.AppPid)
		}
	}
	if out.State == StateRunning && g.frozen() {
		out.State = StatePaused
	}
	ns, mem, err := g.usage()
	if err == nil {
		out.CPUSeconds, out.MemBytes = float64(ns)/1e9, mem
		if out.State == StateRunning || out.State == StatePaused {
			out.CPUUtil = r.util(id, out.Started, st.CPUAtStart, ns)
		}
	}
	out.Listening = listening(out.Pids)
	return out, nil
}

// hostPidOf finds, among pids (as the host sees them), the process that
// is nsPid in its own PID namespace.
func hostPidOf(pids []int, nsPid int) int {
	for _, p := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(data)) {
			if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(rest)
				if len(f) > 1 && f[len(f)-1] == strconv.Itoa(nsPid) {
					return p
				}
				break
			}
		}
	}
	return 0
}

// util is the CPUs used since the previous Status within the last 30 s,
// else the average since the program started (from the cgroup's use at
// that moment: install steps ran in the same cgroup before).
func (r *Runner) util(id string, started time.Time, atStart, ns uint64) float64 {
	now := time.Now()
	r.mu.Lock()
	prev, ok := r.samples[id]
	r.samples[id] = sample{at: now, ns: ns}
	r.mu.Unlock()
	if !ok || now.Sub(prev.at) > 30*time.Second || now.Sub(prev.at) < 100*time.Millisecond || ns < prev.ns || prev.at.Before(started) {
		elapsed := now.Sub(started)
		if started.IsZero() || elapsed < 10*time.Millisecond || ns < atStart {
			return 0
		}
		return float64(ns-atStart) / float64(elapsed.Nanoseconds())
	}
	return float64(ns-prev.ns) / float64(now.Sub(prev.at).Nanoseconds())
}

// Adopt finds the instances whose shims kept running while no Runner
// watched them and returns their ids. An instance whose shim is gone has
// what is left in its cgroup killed and is marked failed.
func (r *Runner) Adopt() ([]string, error) {
	entries, err := os.ReadDir(r.o.StateDir)
	if err != nil {
		return nil, err
	}
	var adopted []string
	for _, e := range entries {
		id := e.Name()
		if !e.IsDir() || checkID("id", id) != nil {
			continue
		}
		st, running, _ := r.settledState(id)
		if running {
			adopted = append(adopted, id)
			continue
		}
		if g, err := r.group(id); err == nil {
			if pids, _ := g.pids(); len(pids) > 0 {
				r.log.Warn("killing what an application left after its supervisor died", "instance", id, "pids", pids)
				_ = killAll(g)
			}
		}
		if st != nil && st.State != "" && !st.State.ended() {
			st.State, st.LastExit = StateFailed, SupervisorEnded
			_ = writeJSON(filepath.Join(r.dir(id), "state.json"), st)
		}
	}
	return adopted, nil
}

// Exec runs argv once as instance spec.ID (an install step, an
// operation, a probe): confined by spec.Sandbox, in its cgroup and
// limits, as its uid, in its directory, with its environment. If the
// instance runs, the command joins it (its namespaces: it sees the
// program's processes and files); else it gets a sandbox of its own. It
// returns what the command printed (at most maxOutput bytes, stdout and
// stderr together) and its exit status (128+N for signal N); it is
// killed at timeout, and whatever it leaves running when it ends.
func (r *Runner) Exec(ctx context.Context, spec Spec, argv []string, timeout time.Duration, maxOutput int) ([]byte, int, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, 0, errors.New("no command to run")
	}
	req := &execReq{Argv: argv, TimeoutMs: max(timeout.Milliseconds(), 1), MaxOutput: maxOutput}
	var rep execReply
	wait := timeout + 15*time.Second
	if st, _ := r.readState(spec.ID); st != nil && alive(st) && st.State != StateStopping {
		if err := r.control(ctx, st.Control, req, &rep, wait); err != nil {
			return nil, 0, fmt.Errorf("asking %s's supervisor: %w", spec.ID, err)
		}
	} else {
		spec.Command = argv
		ss, err := r.prepare(spec)
		if err != nil {
			return nil, 0, err
		}
		if err := r.activateCtx(ctx, activation{Op: "exec", Spec: ss, Exec: req}, &rep, wait, nil, nil); err != nil {
			return nil, 0, fmt.Errorf("running %s: %w", argv[0], err)
		}
	}
	if rep.Error != "" {
		return rep.Output, rep.Code, errors.New(rep.Error)
	}
	return rep.Output, rep.Code, nil
}

// control sends req to a running shim's control socket and reads its
// answer.
func (r *Runner) control(ctx context.Context, sock string, req *execReq, rep *execReply, wait time.Duration) error {
	if !strings.HasPrefix(sock, controlPrefix) {
		return fmt.Errorf("its control socket %q is not a supervisor's", sock)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return err
	}
	return json.NewDecoder(c).Decode(rep)
}

// Remove stops instance id of group and deletes its cgroup (and the
// group's, once it holds no instance) and its state. It also cleans up
// after an instance that never ran, whose cgroup only one-shot commands
// used (an installation undone).
func (r *Runner) Remove(id, group string) error {
	if err := checkID("id", id); err != nil {
		return err
	}
	if err := checkID("group", group); err != nil {
		return err
	}
	if err := r.Stop(id); err != nil {
		return err
	}
	if r.o.Nested {
		r.mu.Lock()
		delete(r.samples, id)
		r.mu.Unlock()
		if err := os.RemoveAll(r.dir(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if g, err := openGroup(r.version, r.groupPath(group)+"/"+id, Limits{}, false); err == nil {
		if err := killAll(g); err != nil {
			return err
		}
		if err := g.delete(); err != nil {
			return fmt.Errorf("deleting the cgroup of %s: %w", id, err)
		}
	}
	r.removeEmpty(r.groupPath(group))
	r.removeEmpty("/" + r.o.CgroupParent)
	r.mu.Lock()
	delete(r.samples, id)
	r.mu.Unlock()
	if err := os.RemoveAll(r.dir(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// removeEmpty deletes the cgroup at path if nothing is in it (rmdir
// fails on a cgroup with children or processes).
func (r *Runner) removeEmpty(path string) {
	if r.version == 2 {
		_ = os.Remove(filepath.Join("/sys/fs/cgroup", path))
		return
	}
	for _, n := range v1Controllers {
		_ = os.Remove(filepath.Join(v1Root, string(n), path))
	}
}

// A standby is this executable started ahead of need and waiting on a
// socket to be told what to become: starting the runtime of a large
// binary takes longer than everything else a confined start does, so
// the runner keeps one ready once applications are in use.
type standby struct {
	cmd  *exec.Cmd
	conn *net.UnixConn
	done chan struct{} // closed when it has ended
}

// Close lets the spare standby go (it ends); instances run on.
func (r *Runner) Close() {
	r.mu.Lock()
	sb := r.spare
	r.spare = nil
	r.closed = true
	r.mu.Unlock()
	if sb != nil {
		sb.conn.Close()
	}
}

// spawn starts a standby.
func (r *Runner) spawn() (*standby, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "standby"), os.NewFile(uintptr(fds[1]), "runner")
	defer theirs.Close()
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(r.self)
	cmd.Env = []string{standbyEnv + "=" + r.o.StateDir}
	cmd.ExtraFiles = []*os.File{theirs}
	// The first process of PID, IPC and UTS namespaces of its own, in a
	// session of its own (it outlives the manager once it is a shim).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true,
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS}
	if r.o.Nested {
		// A keeper, in a session of its own, that starts the standby
		// as its child and outlives it (keeperMain).
		cmd.Env = append(cmd.Env, nestedEnv+"="+nestedKeeper)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	if err := os.MkdirAll(filepath.Join(r.o.StateDir, "standby"), 0o700); err == nil {
		if f, err := os.OpenFile(filepath.Join(r.o.StateDir, "standby", "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
			cmd.Stdout, cmd.Stderr = f, f
			defer f.Close()
		}
	}
	if err := cmd.Start(); err != nil {
		c.Close()
		return nil, fmt.Errorf("starting a supervisor: %w", err)
	}
	sb := &standby{cmd: cmd, conn: c.(*net.UnixConn), done: make(chan struct{})}
	go func() { // reap it when it ends (the manager may end first)
		_ = cmd.Wait()
		close(sb.done)
	}()
	return sb, nil
}

// take is the standby to use now: the spare if there is one, else a new
// one.
func (r *Runner) take() (*standby, error) {
	r.mu.Lock()
	sb := r.spare
	r.spare = nil
	r.mu.Unlock()
	if sb != nil {
		select {
		case <-sb.done: // it waited too long and went
			sb.conn.Close()
		default:
			return sb, nil
		}
	}
	return r.spawn()
}

// refill starts a spare in the background unless one is there.
func (r *Runner) refill() {
	r.mu.Lock()
	if r.spare != nil || r.filling || r.closed {
		r.mu.Unlock()
		return
	}
	r.filling = true
	r.mu.Unlock()
	go func() {
		sb, err := r.spawn()
		r.mu.Lock()
		r.filling = false
		if err == nil && r.spare == nil && !r.closed {
			r.spare = sb
			sb = nil
		}
		r.mu.Unlock()
		if sb != nil {
			sb.conn.Close()
		}
	}()
}

// activateCtx tells a standby what to become, does meanwhile (if any)
// while it does, and reads its answer; before (if any) is called with
// the standby's pid before it is told. A new spare is started once the
// answer is in, not to take the CPU from this one.
func (r *Runner) activateCtx(ctx context.Context, act activation, rep any, wait time.Duration, before func(pid int) error, meanwhile func() error) error {
	sb, err := r.take()
	if err != nil {
		return err
	}
	defer r.refill()
	defer sb.conn.Close()
	if before != nil {
		if err := before(sb.cmd.Process.Pid); err != nil {
			return err
		}
	}
	_ = sb.conn.SetDeadline(time.Now().Add(wait))
	stop := context.AfterFunc(ctx, func() { _ = sb.conn.SetDeadline(time.Now()) })
	defer stop()
	data, err := json.Marshal(act)
	if err != nil {
		return err
	}
	if _, err := sb.conn.Write(append(data, '\n')); err != nil {
		return err
	}
	if meanwhile != nil {
		if err := meanwhile(); err != nil {
			return err
		}
	}
	line, err := bufio.NewReaderSize(sb.conn, 64<<10).ReadBytes('\n')
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return json.Unmarshal(line, rep)
}

// probe makes a sandbox once, with a network of its own, to learn
// whether this host can confine applications at all.
func (r *Runner) probe() error {
	sb, err := r.spawn()
	if err != nil {
		return err
	}
	defer sb.conn.Close()
	_ = sb.conn.SetDeadline(time.Now().Add(30 * time.Second))
	act := activation{Op: "probe", Spec: &shimSpec{Spec: Spec{Sandbox: Sandbox{Hide: []string{r.o.StateDir}, Network: "none", Hostname: "probe"}}}}
	if r.o.Nested {
		act.Spec = &shimSpec{Nested: true}
	}
	data, _ := json.Marshal(act)
	if _, err := sb.conn.Write(append(data, '\n')); err != nil {
		return err
	}
	line, err := bufio.NewReader(sb.conn).ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("the probe did not answer: %w", err)
	}
	var rep startReply
	if err := json.Unmarshal(line, &rep); err != nil {
		return err
	}
	if rep.Error != "" {
		return errors.New(rep.Error)
	}
	return nil
}
