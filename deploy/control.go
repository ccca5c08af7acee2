package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/deploy/runner"
	"github.com/gridmgr/gridmgr/wire"
)

// Start starts instance id's processes with its run command alone
// (StartWith with no arguments and no environment).
func (e *Executor) Start(id string) (*wire.AppInstance, error) {
	return e.StartWith(id, nil, nil)
}

// StartWith starts instance id's processes: its run command with args
// appended and env added to its environment. Either is refused
// (CODE_BAD_REQUEST) unless its app.toml allows it ([run] args = true,
// env = true), and so is: more than MaxStartArgs words or MaxStartEnv
// variables, more than MaxStartBytes of them in all (before or after
// substitution), a NUL byte or invalid UTF-8, a name that is not
// [A-Z_][A-Z0-9_]*, a name the manager sets (PATH, HOME, TMPDIR,
// INSTANCE_DIR, INSTANCE, APP, CLASS_DIR, GRIDMGR_*, PORT_*) or LD_*,
// or one its [install.env] sets, and a ${NAME} run.command could not
// use. Args are words, never given to a shell; ${INSTANCE_DIR},
// ${INSTANCE}, ${APP}, ${CLASS_DIR} and ${PORT_NAME} in them and in
// env's values are substituted as in run.command. Only the run command
// gets env (not operations or probes).
//
// They replace the previous start's (none: the run command alone) and
// are kept in the instance's record, written before the processes
// start: a restart on failure, a re-adoption after the manager
// restarted and a restart after the host did (Reconcile) use the same.
func (e *Executor) StartWith(id string, args []string, env map[string]string) (*wire.AppInstance, error) {
	defer e.lock(id)()
	r, err := e.runnable(id)
	if err != nil {
		return nil, err
	}
	if err := e.checkStart(r, args, env); err != nil {
		return nil, err
	}
	if err := e.startable(r); err != nil {
		return nil, err
	}
	changed := !slices.Equal(args, r.Args) || !maps.Equal(env, r.Env)
	if changed {
		e.mu.Lock()
		r.Args, r.Env = nil, nil
		if len(args) > 0 {
			r.Args = slices.Clone(args)
		}
		if len(env) > 0 {
			r.Env = maps.Clone(env)
		}
		e.mu.Unlock()
	}
	return e.start(r, changed)
}

// restart starts instance id again as its last start did (Reconcile).
func (e *Executor) restart(id string) (*wire.AppInstance, error) {
	defer e.lock(id)()
	r, err := e.runnable(id)
	if err != nil {
		return nil, err
	}
	// The record is trusted no more than a request.
	if err := e.checkStart(r, r.Args, r.Env); err != nil {
		return nil, err
	}
	if err := e.startable(r); err != nil {
		return nil, err
	}
	return e.start(r, false)
}

// startable refuses to start r while it runs, or holds more than it may.
func (e *Executor) startable(r *Record) error {
	if st, err := e.run.Status(r.ID); err == nil && (st.State == runner.StateRunning || st.State == runner.StatePaused) {
		return errorf(wire.ErrorReply_CODE_CONFLICT, "%s is %s already", r.ID, st.State)
	}
	if n, _, err := usage(e.host.InstanceDir(r.ID)); err == nil && n > r.Disk {
		return errorf(wire.ErrorReply_CODE_CONFLICT, "%s holds %s, more than the %s it may: make room first (an operation, or app remove)", r.ID, sizeText(n), sizeText(r.Disk))
	}
	return nil
}

// start runs r's run command with its args and env; the caller holds
// its lock and asked startable. changed: r's args or env are not yet in
// its record.
//
// The record is written while the processes start, not after: it says
// what it will say once they run (started, with these args and env),
// so a crash in between leaves a record that asks for them to run, and
// the manager's next start re-adopts them or starts them (Reconcile),
// as it would after the host restarted. A start that fails writes the
// record again as it was, with the new args and env. A start that
// changes nothing in the record (a restart) does not write it.
func (e *Executor) start(r *Record, changed bool) (*wire.AppInstance, error) {
	id := r.ID
	spec := e.spec(r, append(e.expand(r, r.m.Run.Command), e.expand(r, r.Args)...))
	spec.Env = append(spec.Env, e.startEnv(r)...)
	e.mu.Lock() // Started and Held are written under both locks
	running := *r
	e.mu.Unlock()
	running.Started, running.Held = true, ""
	writing := changed || !r.Started || r.Held != ""
	wrote := make(chan error, 1)
	if writing {
		go func() { wrote <- e.writeRecord(&running) }()
	} else {
		wrote <- nil
	}
	err := e.run.Start(spec)
	werr := <-wrote
	if err != nil {
		if writing { // the record says it runs: put back what it said
			if rerr := e.writeRecord(r); rerr != nil {
				e.log.Error("recording a start that failed", "instance", id, "err", rerr)
			}
		}
		return nil, errorf(wire.ErrorReply_CODE_REFUSED, "starting %s: %v", id, err)
	}
	e.mu.Lock()
	r.Started, r.Held = true, ""
	e.mu.Unlock()
	if werr != nil {
		return nil, werr
	}
	e.log.Info("started", "instance", id)
	return e.instance(r, nil), nil
}

// Stop stops instance id's processes (its stop signal, then SIGKILL
// after its grace).
func (e *Executor) Stop(id string) (*wire.AppInstance, error) {
	defer e.lock(id)()
	r, err := e.runnable(id)
	if err != nil {
		return nil, err
	}
	if err := e.run.Stop(id); err != nil {
		return nil, errorf(wire.ErrorReply_CODE_UNAVAILABLE, "stopping %s: %v", id, err)
	}
	e.mu.Lock()
	r.Started = false
	e.mu.Unlock()
	if err := e.writeRecord(r); err != nil {
		return nil, err
	}
	e.log.Info("stopped", "instance", id)
	return e.instance(r, nil), nil
}

// Pause freezes instance id's processes (cgroup freezer); Resume thaws
// them.
func (e *Executor) Pause(id string) (*wire.AppInstance, error) { return e.freeze(id, true) }

// Resume thaws what Pause froze.
func (e *Executor) Resume(id string) (*wire.AppInstance, error) { return e.freeze(id, false) }

func (e *Executor) freeze(id string, pause bool) (*wire.AppInstance, error) {
	defer e.lock(id)()
	r, err := e.runnable(id)
	if err != nil {
		return nil, err
	}
	st, err := e.run.Status(id)
	if err != nil || st.State != runner.StateRunning && st.State != runner.StatePaused {
		return nil, errorf(wire.ErrorReply_CODE_CONFLICT, "%s is not running (start it first)", id)
	}
	if pause {
		err = e.run.Pause(id)
	} else {
		err = e.run.Resume(id)
	}
	if err != nil {
		return nil, errorf(wire.ErrorReply_CODE_UNAVAILABLE, "%v", err)
	}
	return e.instance(r, nil), nil
}

// Status is instance id with its process data.
func (e *Executor) Status(id string) (*wire.AppInstance, error) {
	r := e.get(id)
	if r == nil {
		return nil, e.notFound(id)
	}
	ai := e.instance(r, e.values(r))
	if ai.State == string(runner.StateRunning) {
		ai.Health = e.health(r)
	}
	return ai, nil
}

// health asks a running instance its manifest's health question:
// "healthy", "unhealthy: why", or "" without one.
func (e *Executor) health(r *Record) string {
	ok, why, err := e.probe(r, r.m.Health)
	switch {
	case errors.Is(err, errNoProbe):
		return ""
	case err != nil:
		return "unhealthy: " + err.Error()
	case !ok:
		return "unhealthy: " + why
	}
	return "healthy"
}

// List is every instance here, with its process data.
func (e *Executor) List() []*wire.AppInstance {
	e.mu.Lock()
	recs := make([]*Record, 0, len(e.recs))
	for _, r := range e.recs {
		recs = append(recs, r)
	}
	e.mu.Unlock()
	slices.SortFunc(recs, func(a, b *Record) int { return strings.Compare(a.ID, b.ID) })
	out := make([]*wire.AppInstance, 0, len(recs))
	for _, r := range recs {
		out = append(out, e.instance(r, nil))
	}
	return out
}

// instance renders r with what the runner measures now.
func (e *Executor) instance(r *Record, values map[string]string) *wire.AppInstance {
	ai := &wire.AppInstance{
		Id: r.ID, App: r.App, Version: r.Version, Class: r.Class, Reservation: r.Reservation, Manager: e.o.Manager,
		State: "installed", CpuLimit: float64(r.CPUs), MemLimit: r.Mem, Ports: r.Ports, Changes: uint32(r.Changes),
		BundleSha256: r.Bundle, Values: values,
		DiskBytes: e.diskUsed(r), DiskLimit: r.Disk, Uid: r.UID, Network: r.m.Network, PidsLimit: e.o.MaxPids,
	}
	if r.UID != 0 {
		ai.User = "uid " + strconv.FormatUint(uint64(r.UID), 10)
	}
	for _, op := range r.m.Operations {
		ai.Operations = append(ai.Operations, op.Name)
	}
	if e.run == nil {
		return ai
	}
	st, err := e.run.Status(r.ID)
	if err != nil {
		return ai
	}
	if st.State != "" {
		ai.State = string(st.State)
	}
	for _, p := range st.Pids {
		ai.Pids = append(ai.Pids, int32(p))
	}
	ai.CpuSeconds, ai.CpuUtil, ai.MemBytes = st.CPUSeconds, st.CPUUtil, st.MemBytes
	for _, p := range st.Listening {
		ai.Listening = append(ai.Listening, uint32(p))
	}
	if !st.Started.IsZero() {
		ai.StartedUnixMs = st.Started.UnixMilli()
	}
	ai.Restarts = uint32(st.Restarts)
	ai.LastExit = st.LastExit
	if held := e.held(r); held != "" && st.State == runner.StateStopped {
		ai.LastExit = held
	}
	return ai
}

// values asks a running instance for its own values (its scheme's
// command prints "NAME VALUE" lines); only declared names are kept.
func (e *Executor) values(r *Record) map[string]string {
	vs := r.m.Values
	if len(vs.Command) == 0 || e.run == nil {
		return nil
	}
	if st, err := e.run.Status(r.ID); err != nil || st.State != runner.StateRunning {
		return nil // paused too: a command in its cgroup would freeze
	}
	out, code, err := e.run.Exec(context.Background(), e.spec(r, nil), e.expand(r, vs.Command), 5*time.Second, 64<<10)
	if err != nil || code != 0 {
		return map[string]string{"error": fmt.Sprintf("values command: %v (exit %d)", err, code)}
	}
	declared := map[string]bool{}
	for _, v := range vs.Values {
		declared[v.Name] = true
	}
	got := map[string]string{}
	for line := range strings.Lines(string(out)) {
		name, val, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && declared[name] && len(val) <= 256 {
			got[name] = strings.TrimSpace(val)
		}
	}
	return got
}

// Logs is a slice of instance id's captured stdout (or stderr) from
// offset (negative: that many bytes before the end), at most limit
// bytes; it returns the offset after the slice.
func (e *Executor) Logs(id string, stderr bool, offset int64, limit int) ([]byte, int64, error) {
	if e.get(id) == nil {
		return nil, 0, e.notFound(id)
	}
	name := "stdout.log"
	if stderr {
		name = "stderr.log"
	}
	f, err := os.Open(filepath.Join(e.logDir(id), name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	size := st.Size()
	if offset < 0 {
		offset = max(0, size+offset)
	}
	if offset > size {
		offset = 0 // the log was rotated: start again from its beginning
	}
	if limit <= 0 || limit > 1<<20 {
		limit = 64 << 10
	}
	buf := make([]byte, min(int64(limit), size-offset))
	n, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, err
	}
	return buf[:n], offset + int64(n), nil
}

// Idle asks instance id whether it is idle, as its manifest says: a
// command (exit 0: idle), an HTTP probe (200: idle), or its CPU use, as a
// share of the cpus reserved, below a threshold over idle.for.
func (e *Executor) Idle(id string) (bool, string, error) {
	r, err := e.runnable(id)
	if err != nil {
		return false, "", err
	}
	st, err := e.run.Status(id)
	if err != nil || st.State != runner.StateRunning && st.State != runner.StatePaused {
		return true, "not running", nil
	}
	p := r.m.Idle
	switch {
	case p.CPUBelow > 0:
		// Averaged over idle.for, at most 10 s: the question must be
		// answered within a client's patience.
		window := min(max(time.Duration(p.For), time.Second), 10*time.Second)
		time.Sleep(window)
		st2, err := e.run.Status(id)
		if err != nil {
			return false, "", err
		}
		used := (st2.CPUSeconds - st.CPUSeconds) / window.Seconds()
		share := used / float64(max(r.CPUs, 1))
		return share < p.CPUBelow, fmt.Sprintf("used %.3f cpus over %s, %.1f%% of its %d (idle below %g%%)",
			used, window, 100*share, max(r.CPUs, 1), 100*p.CPUBelow), nil
	case st.State == runner.StatePaused:
		return true, "paused", nil
	}
	ok, why, err := e.probe(r, p)
	if errors.Is(err, errNoProbe) {
		return false, "", errorf(wire.ErrorReply_CODE_UNSUPPORTED, "%s says nothing about being idle (no [idle] in its app.toml)", r.App)
	}
	if err != nil {
		return false, "", errorf(wire.ErrorReply_CODE_UNAVAILABLE, "idle probe: %v", err)
	}
	return ok, why, nil
}

var errNoProbe = errors.New("no probe")

// probe asks a running instance the question p describes: its command
// (yes: exit 0), an HTTP GET of its path on its port (yes: 200) or,
// without a path, a TCP connect. why says what was seen; err is for a
// question that could not be asked (errNoProbe: p asks nothing).
func (e *Executor) probe(r *Record, p Probe) (ok bool, why string, err error) {
	switch {
	case len(p.Command) > 0:
		out, code, err := e.run.Exec(context.Background(), e.spec(r, nil), e.expand(r, p.Command), 10*time.Second, 4096)
		if err != nil {
			return false, "", err
		}
		why := strings.TrimSpace(string(out))
		if code != 0 {
			why = strings.TrimSpace(fmt.Sprintf("exit %d %s", code, why))
		}
		return code == 0, why, nil
	case p.Port != "":
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(r.Ports[p.Port])))
		if p.Path == "" {
			c, err := net.DialTimeout("tcp", addr, 3*time.Second)
			if err != nil {
				return false, "nothing listens on " + addr, nil
			}
			c.Close()
			return true, "listening on " + addr, nil
		}
		cl := http.Client{Timeout: 5 * time.Second}
		resp, err := cl.Get("http://" + addr + p.Path)
		if err != nil {
			return false, "", err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, strings.TrimSpace(resp.Status + " " + string(body)), nil
	}
	return false, "", errNoProbe
}

// Exec runs one of instance id's operations with args.
func (e *Executor) Exec(id, op string, args []string) ([]byte, int, error) {
	defer e.lock(id)()
	r, err := e.runnable(id)
	if err != nil {
		return nil, 0, err
	}
	i := slices.IndexFunc(r.m.Operations, func(o Operation) bool { return o.Name == op })
	if i < 0 {
		var names []string
		for _, o := range r.m.Operations {
			names = append(names, o.Name)
		}
		if len(names) == 0 {
			return nil, 0, errorf(wire.ErrorReply_CODE_NOT_FOUND, "%s has no operations", r.App)
		}
		return nil, 0, errorf(wire.ErrorReply_CODE_NOT_FOUND, "%s has no operation %q; it has %s", r.App, op, strings.Join(names, ", "))
	}
	o := r.m.Operations[i]
	if err := e.notPaused(id); err != nil {
		return nil, 0, err
	}
	if len(args) > 0 && !o.Args {
		return nil, 0, errorf(wire.ErrorReply_CODE_BAD_REQUEST, "operation %s takes no arguments", op)
	}
	cmd := append(e.expand(r, o.Command), args...)
	out, code, err := e.run.Exec(context.Background(), e.spec(r, nil), cmd, time.Minute, 1<<20)
	if n, _, uerr := usage(e.host.InstanceDir(id)); uerr == nil {
		e.mu.Lock()
		r.diskUsed = n
		e.mu.Unlock()
	}
	if err != nil {
		return out, code, errorf(wire.ErrorReply_CODE_UNAVAILABLE, "operation %s: %v", op, err)
	}
	return out, code, nil
}

// notPaused refuses to run a command in a frozen cgroup (it would
// freeze too).
func (e *Executor) notPaused(id string) error {
	if st, err := e.run.Status(id); err == nil && st.State == runner.StatePaused {
		return errorf(wire.ErrorReply_CODE_CONFLICT, "%s is paused: resume it first (its commands would be frozen too)", id)
	}
	return nil
}
