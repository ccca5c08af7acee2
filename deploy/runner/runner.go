package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gridmgr/gridmgr/internal/atomicfile"
)

// Limits bound an instance: what its reservation gives it.
type Limits struct {
	CPUs float64 // 0: no CPU limit; else a CFS quota of CPUs × the period
	Mem  int64   // bytes; 0: none. The kernel kills past it (no swap)
	Pids int64   // 0: none
}

// Restart is the restart policy: never, or on failure up to Max times.
type Restart struct {
	OnFailure bool
	Max       int
}

// Spec is how to run an instance.
type Spec struct {
	ID         string   // [A-Za-z0-9][A-Za-z0-9._-]*: names its cgroup PARENT/ID
	Dir        string   // working directory
	Command    []string // argv; a relative Command[0] with a '/' is relative to Dir
	Env        []string // KEY=VALUE: the whole environment
	UID, GID   uint32
	SetUser    bool // run as UID/GID (the manager must be root)
	Nice       int  // 0-19
	Limits     Limits
	StopSignal syscall.Signal // default SIGTERM
	StopGrace  time.Duration  // default 10s
	Restart    Restart
	LogDir     string // stdout.log and stderr.log
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
	AppPid     int       `json:"app_pid,omitempty"`
	Pids       []int     `json:"pids,omitempty"` // every process in its cgroup
	CPUSeconds float64   `json:"cpu_seconds"`
	CPUUtil    float64   `json:"cpu_util"` // CPUs in use lately
	MemBytes   int64     `json:"mem_bytes"`
	Limits     Limits    `json:"limits"`
	Started    time.Time `json:"started"`
	Restarts   int       `json:"restarts"`
	LastExit   string    `json:"last_exit,omitempty"` // "exit 1", "signal KILL", "oom-killed"
	Listening  []int     `json:"listening,omitempty"` // TCP ports its processes listen on
}

// Options configure a Runner.
type Options struct {
	StateDir     string // where each instance's spec and state live
	CgroupParent string // the cgroup every instance's cgroup is made under
	Log          *slog.Logger
}

// Runner runs instances, each under a supervisor process of its own (the
// shim: this executable again, see MaybeShim), so that they outlive the
// manager; a new Runner on the same StateDir re-adopts them (Adopt).
type Runner struct {
	o       Options
	version int
	log     *slog.Logger

	mu      sync.Mutex
	samples map[string]sample // for CPU utilisation
}

type sample struct {
	at time.Time
	ns uint64
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,190}$`)

// New returns a Runner. It fails, saying why, where processes cannot be
// bounded: no usable cgroups, or no right to make them (not root).
func New(o Options) (*Runner, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.StateDir == "" || o.CgroupParent == "" || !idRE.MatchString(o.CgroupParent) {
		return nil, errors.New("runner: a state directory and a cgroup parent name are needed")
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
		return nil, fmt.Errorf("cannot make cgroups under %s (%v): run the manager as root to run applications", probe, err)
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return nil, err
	}
	return &Runner{o: o, version: v, log: o.Log, samples: map[string]sample{}}, nil
}

// CgroupVersion is 1 or 2.
func (r *Runner) CgroupVersion() int { return r.version }

func (r *Runner) dir(id string) string        { return filepath.Join(r.o.StateDir, id) }
func (r *Runner) cgroupPath(id string) string { return "/" + r.o.CgroupParent + "/" + id }

// shimSpec is what the shim and the exec helper are given (spec.json).
type shimSpec struct {
	Spec
	Path    string `json:"path"` // Command[0] resolved
	Version int    `json:"version"`
	Cgroup  string `json:"cgroup"`
}

// shimState is state.json, written by the shim (and by the runner when
// the shim is gone).
type shimState struct {
	State    State     `json:"state"`
	ShimPid  int       `json:"shim_pid"`
	AppPid   int       `json:"app_pid"`
	Started  time.Time `json:"started"`
	Restarts int       `json:"restarts"`
	LastExit string    `json:"last_exit,omitempty"`
}

func checkID(id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("%q is not an instance id (letters, digits, '.', '_', '-')", id)
	}
	return nil
}

// resolve finds the program of argv: relative to dir when it has a '/',
// else on the PATH.
func resolve(dir string, argv []string) (string, error) {
	if len(argv) == 0 || argv[0] == "" {
		return "", errors.New("no command to run")
	}
	p := argv[0]
	if !strings.Contains(p, "/") {
		lp, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("the program %q is not on this host's PATH", p)
		}
		return lp, nil
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return "", fmt.Errorf("the program %s does not exist", argv[0])
	case st.IsDir() || st.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("the program %s is not executable", argv[0])
	}
	return p, nil
}

func (r *Runner) prepare(spec Spec, argv []string) (*shimSpec, error) {
	if err := checkID(spec.ID); err != nil {
		return nil, err
	}
	if st, err := os.Stat(spec.Dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("the working directory %s does not exist", spec.Dir)
	}
	path, err := resolve(spec.Dir, argv)
	if err != nil {
		return nil, err
	}
	if spec.SetUser && os.Geteuid() != 0 {
		return nil, errors.New("only a manager running as root can run applications as another user")
	}
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
	spec.Command = argv
	return &shimSpec{Spec: spec, Path: path, Version: r.version, Cgroup: r.cgroupPath(spec.ID)}, nil
}

// Start starts instance spec.ID under a new shim, in a new cgroup with
// spec.Limits. It returns once the application's process started, or with
// why it could not.
func (r *Runner) Start(spec Spec) error {
	ss, err := r.prepare(spec, spec.Command)
	if err != nil {
		return err
	}
	id := spec.ID
	if st, _ := r.readState(id); st != nil && shimAlive(st.ShimPid, r.dir(id)) {
		return fmt.Errorf("%s is running already", id)
	}
	if spec.LogDir == "" {
		return errors.New("no directory for the logs")
	}
	if err := os.MkdirAll(spec.LogDir, 0o755); err != nil {
		return err
	}
	if _, err := openGroup(r.version, ss.Cgroup, spec.Limits, true); err != nil {
		return err
	}
	dir := r.dir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "spec.json"), ss); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, "state.json"))
	self, err := os.Executable()
	if err != nil {
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	shimLog, err := os.OpenFile(filepath.Join(dir, "shim.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		pw.Close()
		return err
	}
	defer shimLog.Close()
	cmd := exec.Command(self)
	cmd.Env = []string{shimEnv + "=" + dir}
	cmd.Stdout, cmd.Stderr = shimLog, shimLog
	cmd.ExtraFiles = []*os.File{pw}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return fmt.Errorf("starting the supervisor: %w", err)
	}
	pw.Close()
	go func() { _ = cmd.Wait() }() // reap it when it ends (the manager may end first)
	line, err := readLine(pr, 30*time.Second)
	if err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("the supervisor did not report: %v", err)
	}
	if msg, ok := strings.CutPrefix(line, "error: "); ok {
		return errors.New(msg)
	}
	return nil
}

func readLine(f *os.File, timeout time.Duration) (string, error) {
	_ = f.SetReadDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" {
		return "", err
	}
	return strings.TrimSpace(line), nil
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, bytes.NewReader(data), 0o600)
}

func (r *Runner) readState(id string) (*shimState, error) {
	data, err := os.ReadFile(filepath.Join(r.dir(id), "state.json"))
	if err != nil {
		return nil, err
	}
	var st shimState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

func (r *Runner) readSpec(id string) (*shimSpec, error) {
	data, err := os.ReadFile(filepath.Join(r.dir(id), "spec.json"))
	if err != nil {
		return nil, err
	}
	var ss shimSpec
	if err := json.Unmarshal(data, &ss); err != nil {
		return nil, err
	}
	return &ss, nil
}

// shimAlive reports whether pid is the shim of the instance state dir.
func shimAlive(pid int, dir string) bool {
	if pid <= 0 {
		return false
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return false
	}
	return slices.ContainsFunc(bytes.Split(env, []byte{0}), func(b []byte) bool { return string(b) == shimEnv+"="+dir })
}

func (r *Runner) group(id string) (group, error) {
	return openGroup(r.version, r.cgroupPath(id), Limits{}, false)
}

// Stop stops instance id: its stop signal to its process group, then
// SIGKILL to every process in its cgroup after its grace. It waits for
// the shim to end. Stopping an instance that is not running does nothing.
func (r *Runner) Stop(id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	st, _ := r.readState(id)
	g, _ := r.group(id)
	if g != nil && g.frozen() {
		_ = g.thaw() // a frozen process cannot take its stop signal
	}
	if st != nil && shimAlive(st.ShimPid, r.dir(id)) {
		grace := 10 * time.Second
		if ss, err := r.readSpec(id); err == nil {
			grace = ss.StopGrace
		}
		_ = syscall.Kill(st.ShimPid, syscall.SIGTERM)
		deadline := time.Now().Add(grace + 10*time.Second)
		for shimAlive(st.ShimPid, r.dir(id)) {
			if time.Now().After(deadline) {
				_ = syscall.Kill(st.ShimPid, syscall.SIGKILL)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if g != nil {
		if err := killAll(g); err != nil {
			return err
		}
	}
	if st, _ := r.readState(id); st != nil && !st.State.ended() {
		st.State = StateStopped
		_ = writeJSON(filepath.Join(r.dir(id), "state.json"), st)
	}
	return nil
}

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
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
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
	if err := checkID(id); err != nil {
		return nil, err
	}
	st, _ := r.readState(id)
	if st == nil || !shimAlive(st.ShimPid, r.dir(id)) {
		return nil, fmt.Errorf("%s is not running", id)
	}
	return r.group(id)
}

// Status is instance id's process data. The State of an instance never
// started here is "".
func (r *Runner) Status(id string) (Status, error) {
	if err := checkID(id); err != nil {
		return Status{}, err
	}
	var out Status
	st, _ := r.readState(id)
	if st != nil {
		out.State, out.ShimPid, out.AppPid, out.Started, out.Restarts, out.LastExit =
			st.State, st.ShimPid, st.AppPid, st.Started, st.Restarts, st.LastExit
		if !st.State.ended() && !shimAlive(st.ShimPid, r.dir(id)) {
			out.State, out.LastExit = StateFailed, "its supervisor ended unexpectedly"
		}
	}
	if ss, err := r.readSpec(id); err == nil {
		out.Limits = ss.Limits
	}
	g, err := r.group(id)
	if err != nil {
		return out, nil
	}
	out.Pids, _ = g.pids()
	if out.State == StateRunning && g.frozen() {
		out.State = StatePaused
	}
	ns, mem, err := g.usage()
	if err == nil {
		out.CPUSeconds, out.MemBytes = float64(ns)/1e9, mem
		out.CPUUtil = r.util(id, out.Started, ns)
	}
	out.Listening = listening(out.Pids)
	return out, nil
}

// util is the CPUs used since the previous Status within the last 30 s,
// else the average since the program started.
func (r *Runner) util(id string, started time.Time, ns uint64) float64 {
	now := time.Now()
	r.mu.Lock()
	prev, ok := r.samples[id]
	r.samples[id] = sample{at: now, ns: ns}
	r.mu.Unlock()
	if !ok || now.Sub(prev.at) > 30*time.Second || now.Sub(prev.at) < 100*time.Millisecond || ns < prev.ns {
		if started.IsZero() || now.Sub(started) <= 0 {
			return 0
		}
		return float64(ns) / float64(now.Sub(started).Nanoseconds())
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
		if !e.IsDir() || checkID(id) != nil {
			continue
		}
		st, _ := r.readState(id)
		if st != nil && shimAlive(st.ShimPid, r.dir(id)) {
			adopted = append(adopted, id)
			continue
		}
		if g, err := r.group(id); err == nil {
			if pids, _ := g.pids(); len(pids) > 0 {
				r.log.Warn("killing what an application left after its supervisor died", "instance", id, "pids", pids)
				_ = killAll(g)
			}
		}
		if st != nil && !st.State.ended() {
			st.State, st.LastExit = StateFailed, "its supervisor ended unexpectedly"
			_ = writeJSON(filepath.Join(r.dir(id), "state.json"), st)
		}
	}
	return adopted, nil
}

// Exec runs argv once for instance id (an install step, an operation, a
// probe), in its cgroup and limits, as its user, in its directory, with
// its environment; it returns what it printed (at most maxOutput bytes,
// stdout and stderr together) and its exit status. It is killed at
// timeout.
func (r *Runner) Exec(ctx context.Context, id string, spec Spec, argv []string, timeout time.Duration, maxOutput int) ([]byte, int, error) {
	spec.ID = id
	ss, err := r.prepare(spec, argv)
	if err != nil {
		return nil, 0, err
	}
	if _, err := r.group(id); err != nil {
		if _, err := openGroup(r.version, ss.Cgroup, spec.Limits, true); err != nil {
			return nil, 0, err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return nil, 0, err
	}
	data, err := json.Marshal(ss)
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = []string{execEnv + "=" + string(data)}
	out := &capped{max: maxOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if ctx.Err() != nil {
		return out.Bytes(), -1, fmt.Errorf("%s did not finish within %s", argv[0], timeout)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if msg, ok := strings.CutPrefix(strings.TrimSpace(out.String()), execFailed); ok && ee.ExitCode() == execFailedCode {
			return nil, 0, errors.New(msg)
		}
		return out.Bytes(), ee.ExitCode(), nil
	}
	return out.Bytes(), 0, err
}

// capped keeps the first max bytes written to it.
type capped struct {
	bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Remove stops instance id and deletes its cgroup and its state.
func (r *Runner) Remove(id string) error {
	if err := r.Stop(id); err != nil {
		return err
	}
	if g, err := r.group(id); err == nil {
		if err := g.delete(); err != nil {
			return fmt.Errorf("deleting the cgroup of %s: %w", id, err)
		}
	}
	r.mu.Lock()
	delete(r.samples, id)
	r.mu.Unlock()
	r.removeParent()
	if err := os.RemoveAll(r.dir(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// removeParent deletes the parent cgroup once no instance is in it.
func (r *Runner) removeParent() {
	if r.version == 2 {
		_ = os.Remove(filepath.Join("/sys/fs/cgroup", r.o.CgroupParent))
		return
	}
	for _, n := range v1Controllers {
		_ = os.Remove(filepath.Join(v1Root, string(n), r.o.CgroupParent))
	}
}
