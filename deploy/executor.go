package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gridmgr/gridmgr/deploy/runner"
	"github.com/gridmgr/gridmgr/internal/atomicfile"
	"github.com/gridmgr/gridmgr/wire"
)

// Error is a refusal with the wire code it answers with.
type Error struct {
	Code wire.ErrorReply_Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// ReplyCode is the code a manager answers the refusal with.
func (e *Error) ReplyCode() wire.ErrorReply_Code { return e.Code }

func errorf(code wire.ErrorReply_Code, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Grant is what a reservation gives an instance: its limits.
type Grant struct {
	Reservation string
	Holder      string
	CPUs        int64
	Mem         int64
}

// ExecutorOptions configure an Executor.
type ExecutorOptions struct {
	Dir     string // the applications' directory (in the data dir)
	Manager string // the manager's name, shown in instances
	// Bundle finds an uploaded bundle by its sha256.
	Bundle func(sha string) (path string, ok bool)
	// User is the user applications run as when the manager is root.
	User string
	// Limits bound the bundles opened.
	Limits Limits
	Log    *slog.Logger
	// CgroupParent names the runner's cgroup (default gridmgr-MANAGER).
	CgroupParent string
	// LogMax and LogKeep bound each instance's captured output.
	LogMax  int64
	LogKeep int
}

// Executor installs, runs, controls and removes a manager's application
// instances: Host places the files (journaled), the runner runs the
// processes in cgroups bounded by the reservation, and a record per
// instance (state/ID.json, written durably before anything is
// acknowledged) says what was installed for whom. All methods are safe
// for concurrent use; operations on one instance take turns.
type Executor struct {
	o      ExecutorOptions
	host   *Host
	run    *runner.Runner
	runErr error // why processes cannot run here (nil: they can)
	log    *slog.Logger
	cred   *credential

	mu    sync.Mutex
	locks map[string]*sync.Mutex
	recs  map[string]*Record
}

type credential struct {
	name     string
	uid, gid uint32
}

// Record is what the executor keeps of one instance.
type Record struct {
	ID          string            `json:"id"`
	App         string            `json:"app"`
	Version     string            `json:"version"`
	Class       string            `json:"class"`
	Reservation string            `json:"reservation"`
	Holder      string            `json:"holder"`
	Bundle      string            `json:"bundle"`
	Ports       map[string]uint32 `json:"ports,omitempty"`
	User        string            `json:"user,omitempty"`
	CPUs        int64             `json:"cpus"`
	Mem         int64             `json:"mem"`
	Installed   time.Time         `json:"installed"`
	Changes     int               `json:"changes"`
	Started     bool              `json:"started"` // the holder asked it to run (and not to stop)

	m *Manifest
}

// OpenExecutor opens the applications' directory, finishes what a crash
// interrupted (an installation that did not complete is undone; a removal
// that did not complete is finished) and re-adopts the instances whose
// processes kept running while the manager was down.
func OpenExecutor(o ExecutorOptions) (*Executor, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.LogMax <= 0 {
		o.LogMax = 10 << 20
	}
	if o.LogKeep <= 0 {
		o.LogKeep = 3
	}
	h, err := OpenHost(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("applications' directory: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("applications' directory: %w", err)
	}
	e := &Executor{o: o, host: h, log: o.Log, locks: map[string]*sync.Mutex{}, recs: map[string]*Record{}}
	if os.Geteuid() == 0 && o.User != "" {
		u, err := user.Lookup(o.User)
		if err != nil {
			return nil, fmt.Errorf("apps.user: no user %q on this host: %w", o.User, err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		e.cred = &credential{name: o.User, uid: uint32(uid), gid: uint32(gid)}
	}
	parent := o.CgroupParent
	if parent == "" {
		parent = "gridmgr-" + o.Manager
	}
	e.run, e.runErr = runner.New(runner.Options{StateDir: filepath.Join(o.Dir, "run"), CgroupParent: parent, Log: o.Log})
	if e.runErr != nil {
		e.log.Warn("applications can be installed but not run here", "err", e.runErr)
	}
	if err := e.recover(); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Executor) recordPath(id string) string {
	return filepath.Join(e.o.Dir, "state", id+".json")
}

func (e *Executor) logDir(id string) string { return filepath.Join(e.o.Dir, "logs", id) }

// recover loads the records, undoes what has a journal and no record (an
// installation cut short, or a removal that deleted the record first),
// and re-adopts running instances.
func (e *Executor) recover() error {
	ids, err := e.host.Instances()
	if err != nil {
		return err
	}
	for _, id := range ids {
		rec, err := e.readRecord(id)
		if err != nil {
			e.log.Warn("instance record unreadable: removing the instance", "instance", id, "err", err)
		}
		if rec == nil {
			n, err := e.undo(id)
			if err != nil {
				return fmt.Errorf("undoing the interrupted installation of %s: %w", id, err)
			}
			e.log.Info("undid an installation that did not complete", "instance", id, "changes", n)
			continue
		}
		e.recs[id] = rec
	}
	if e.run != nil {
		adopted, err := e.run.Adopt()
		if err != nil {
			e.log.Warn("re-adopting running applications", "err", err)
		}
		for _, id := range adopted {
			if _, ok := e.recs[id]; !ok {
				// Processes of an instance that no longer exists: stop them.
				_ = e.run.Stop(id)
				_ = e.run.Remove(id)
				continue
			}
			e.log.Info("re-adopted a running application", "instance", id)
		}
	}
	return nil
}

func (e *Executor) readRecord(id string) (*Record, error) {
	data, err := os.ReadFile(e.recordPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	if r.ID != id {
		return nil, fmt.Errorf("record names %q", r.ID)
	}
	m, err := e.manifestOf(&r)
	if err != nil {
		return nil, err
	}
	r.m = m
	return &r, nil
}

// manifestOf reads the manifest the instance was installed from (kept in
// its state directory).
func (e *Executor) manifestOf(r *Record) (*Manifest, error) {
	p := filepath.Join(e.o.Dir, "state", r.ID+".app.toml")
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return Parse(p, data)
}

func (e *Executor) writeRecord(r *Record) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(e.recordPath(r.ID), bytes.NewReader(append(data, '\n')), 0o644)
}

// lock serialises the operations on instance id.
func (e *Executor) lock(id string) func() {
	e.mu.Lock()
	l := e.locks[id]
	if l == nil {
		l = &sync.Mutex{}
		e.locks[id] = l
	}
	e.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func (e *Executor) get(id string) *Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.recs[id]
}

func (e *Executor) notFound(id string) error {
	return errorf(wire.ErrorReply_CODE_NOT_FOUND, "no application instance %s here (gridmgr app list shows them)", id)
}

// Install installs the bundle with sha256 sha on the reservation g as
// the instance RESERVATION.APP: its files (journaled), its ports, its
// install commands (run with the reservation's limits, as the
// application's user). A failure undoes everything it did.
func (e *Executor) Install(g Grant, sha string) (*wire.AppInstance, error) {
	path, ok := e.o.Bundle(sha)
	if !ok {
		return nil, errorf(wire.ErrorReply_CODE_NOT_FOUND, "no bundle %s here: upload it first (gridmgr app install does)", short(sha))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b, err := Open(f, st.Size(), e.o.Limits)
	if err != nil {
		return nil, errorf(wire.ErrorReply_CODE_BAD_REQUEST, "%v", err)
	}
	m := b.Manifest
	id := g.Reservation + "." + m.Name
	defer e.lock(id)()
	if e.get(id) != nil {
		return nil, errorf(wire.ErrorReply_CODE_CONFLICT, "%s is installed already on reservation %s (remove it first to install another version)", m.Name, g.Reservation)
	}
	rec := &Record{ID: id, App: m.Name, Version: m.Version, Class: m.Class, Reservation: g.Reservation, Holder: g.Holder,
		Bundle: b.SHA256, CPUs: g.CPUs, Mem: g.Mem, Installed: time.Now().UTC(), m: m}
	if err := e.host.Install(b, id); err != nil {
		return nil, errorf(wire.ErrorReply_CODE_REFUSED, "installing %s: %v", m.Name, err)
	}
	fail := func(err error) (*wire.AppInstance, error) {
		n, uerr := e.undo(id)
		e.log.Info("installation failed and was undone", "instance", id, "changes", n, "err", err)
		if uerr != nil {
			err = errors.Join(err, fmt.Errorf("undoing it: %w", uerr))
		}
		return nil, err
	}
	j, err := OpenJournal(e.host.journal(id))
	if err != nil {
		return fail(err)
	}
	defer j.Close()
	// The manifest is kept with the instance (for restarts and removal).
	if err := j.WriteFile(filepath.Join(e.o.Dir, "state", id+".app.toml"), strings.NewReader(string(b.manifestText)), 0o644); err != nil {
		return fail(err)
	}
	if err := j.MkdirTree(e.logDir(id), 0o755); err != nil {
		return fail(err)
	}
	if len(m.Install.Ports) > 0 {
		rec.Ports = map[string]uint32{}
	}
	for _, name := range m.Install.Ports {
		p, err := e.freePort()
		if err != nil {
			return fail(err)
		}
		if err := j.Record("port", name+"="+strconv.Itoa(int(p))); err != nil {
			return fail(err)
		}
		rec.Ports[name] = p
	}
	if e.cred != nil {
		rec.User = e.cred.name
		// The instance's directory is wholly its own: hand it to its user.
		if err := chownTree(e.host.InstanceDir(id), e.cred.uid, e.cred.gid); err != nil {
			return fail(err)
		}
	}
	for _, cmd := range m.Install.Commands {
		if e.run == nil {
			return fail(errorf(wire.ErrorReply_CODE_UNAVAILABLE, "cannot run the install command %s: %v", cmd[0], e.runErr))
		}
		out, code, err := e.run.Exec(context.Background(), id, e.spec(rec, nil), e.expand(rec, cmd), 2*time.Minute, 64<<10)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit status %d", code)
		}
		if err != nil {
			return fail(errorf(wire.ErrorReply_CODE_REFUSED, "install command %q failed: %v\n%s", strings.Join(cmd, " "), err, tail(out, 2000)))
		}
	}
	rec.Changes = len(j.Changes())
	if cj, err := OpenJournal(e.host.classJournal(m.Class)); err == nil {
		rec.Changes += len(cj.Changes())
		cj.Close()
	}
	if err := e.writeRecord(rec); err != nil {
		return fail(err)
	}
	e.mu.Lock()
	e.recs[id] = rec
	e.mu.Unlock()
	e.log.Info("installed", "instance", id, "app", m.Name, "version", m.Version, "changes", rec.Changes)
	return e.instance(rec, nil), nil
}

// undo removes what an instance's journal recorded, and its record.
func (e *Executor) undo(id string) (int, error) {
	if e.run != nil {
		_ = e.run.Stop(id)
		_ = e.run.Remove(id)
	}
	if err := os.Remove(e.recordPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	return e.host.Remove(id)
}

// freePort finds a TCP port free on this host and not given to another
// instance.
func (e *Executor) freePort() (uint32, error) {
	used := map[uint32]bool{}
	e.mu.Lock()
	for _, r := range e.recs {
		for _, p := range r.Ports {
			used[p] = true
		}
	}
	e.mu.Unlock()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("allocating a port: %w", err)
		}
		p := uint32(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		if !used[p] {
			return p, nil
		}
	}
	return 0, errors.New("allocating a port: none free")
}

func chownTree(dir string, uid, gid uint32) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(uid), int(gid))
	})
}

// vars are the substitutions of the manifest's commands and environment.
func (e *Executor) vars(r *Record) map[string]string {
	v := map[string]string{
		"INSTANCE_DIR": e.host.InstanceDir(r.ID),
		"INSTANCE":     r.ID,
		"APP":          r.App,
		"CLASS_DIR":    e.host.ClassDir(r.Class),
	}
	for name, p := range r.Ports {
		v["PORT_"+strings.ToUpper(name)] = strconv.Itoa(int(p))
	}
	return v
}

func (e *Executor) expand(r *Record, words []string) []string {
	v := e.vars(r)
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = varRE.ReplaceAllStringFunc(w, func(s string) string { return v[s[2:len(s)-1]] })
	}
	return out
}

// spec is how the runner runs the instance's command (nil: only its
// environment, for Exec).
func (e *Executor) spec(r *Record, cmd []string) runner.Spec {
	m := r.m
	dir := e.host.InstanceDir(r.ID)
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "GRIDMGR_INSTANCE=" + r.ID, "GRIDMGR_RESERVATION=" + r.Reservation}
	for k, v := range e.vars(r) {
		env = append(env, k+"="+v)
	}
	for _, k := range slices.Sorted(maps.Keys(m.Install.Env)) {
		env = append(env, k+"="+e.expand(r, []string{m.Install.Env[k]})[0])
	}
	s := runner.Spec{
		ID:         r.ID,
		Dir:        dir,
		Command:    cmd,
		Env:        env,
		Nice:       m.Run.Nice,
		Limits:     runner.Limits{CPUs: float64(r.CPUs), Mem: r.Mem},
		StopSignal: signalOf(m.Run.StopSignal),
		StopGrace:  time.Duration(m.Run.StopGrace),
		Restart:    runner.Restart{OnFailure: m.Run.Restart == "on-failure", Max: m.Run.MaxRestarts},
		LogDir:     e.logDir(r.ID),
		LogMax:     e.o.LogMax,
		LogKeep:    e.o.LogKeep,
	}
	if e.cred != nil {
		s.UID, s.GID, s.SetUser = e.cred.uid, e.cred.gid, true
	}
	return s
}

func signalOf(name string) syscall.Signal {
	switch name {
	case "SIGINT":
		return syscall.SIGINT
	case "SIGHUP":
		return syscall.SIGHUP
	case "SIGQUIT":
		return syscall.SIGQUIT
	case "SIGUSR1":
		return syscall.SIGUSR1
	case "SIGUSR2":
		return syscall.SIGUSR2
	case "SIGKILL":
		return syscall.SIGKILL
	}
	return syscall.SIGTERM
}

// runnable is instance id's record, if the manager can run it.
func (e *Executor) runnable(id string) (*Record, error) {
	r := e.get(id)
	if r == nil {
		return nil, e.notFound(id)
	}
	return r, e.canRun()
}

func (e *Executor) canRun() error {
	if e.run == nil {
		return errorf(wire.ErrorReply_CODE_UNAVAILABLE, "this manager cannot run applications: %v", e.runErr)
	}
	return nil
}

// Start starts instance id's processes.
func (e *Executor) Start(id string) (*wire.AppInstance, error) {
	defer e.lock(id)()
	r, err := e.runnable(id)
	if err != nil {
		return nil, err
	}
	if st, err := e.run.Status(id); err == nil && (st.State == runner.StateRunning || st.State == runner.StatePaused) {
		return nil, errorf(wire.ErrorReply_CODE_CONFLICT, "%s is %s already", id, st.State)
	}
	if err := e.run.Start(e.spec(r, e.expand(r, r.m.Run.Command))); err != nil {
		return nil, errorf(wire.ErrorReply_CODE_REFUSED, "starting %s: %v", id, err)
	}
	r.Started = true
	if err := e.writeRecord(r); err != nil {
		return nil, err
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
	r.Started = false
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
		User: r.User, BundleSha256: r.Bundle, Values: values,
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
	out, code, err := e.run.Exec(context.Background(), r.ID, e.spec(r, nil), e.expand(r, vs.Command), 5*time.Second, 64<<10)
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
		out, code, err := e.run.Exec(context.Background(), r.ID, e.spec(r, nil), e.expand(r, p.Command), 10*time.Second, 4096)
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
	out, code, err := e.run.Exec(context.Background(), id, e.spec(r, nil), cmd, time.Minute, 1<<20)
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

// dataPath resolves rel inside one of dirs of instance r, or says why
// not.
func (e *Executor) dataPath(r *Record, rel string, dirs []string, what string) (string, error) {
	clean := filepath.ToSlash(filepath.Clean(rel))
	if rel == "" || filepath.IsAbs(rel) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", errorf(wire.ErrorReply_CODE_BAD_REQUEST, "%q is not a path inside the application", rel)
	}
	for _, d := range dirs {
		if clean == d || strings.HasPrefix(clean, d+"/") {
			return clean, nil
		}
	}
	if len(dirs) == 0 {
		return "", errorf(wire.ErrorReply_CODE_FORBIDDEN, "%s declares no data %s directories (data.%s in its app.toml)", r.App, what, what)
	}
	return "", errorf(wire.ErrorReply_CODE_FORBIDDEN, "%s is not in a data.%s directory of %s (%s)", rel, what, r.App, strings.Join(dirs, ", "))
}

// Put writes data to rel, inside one of instance id's data.in
// directories, as the application's user.
func (e *Executor) Put(id, rel string, data []byte) error {
	defer e.lock(id)()
	r := e.get(id)
	if r == nil {
		return e.notFound(id)
	}
	p, err := e.dataPath(r, rel, r.m.Data.In, "in")
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(e.host.InstanceDir(id))
	if err != nil {
		return err
	}
	defer root.Close()
	if d := filepath.Dir(p); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return errorf(wire.ErrorReply_CODE_REFUSED, "%v", err)
		}
	}
	if err := root.WriteFile(p, data, 0o644); err != nil {
		return errorf(wire.ErrorReply_CODE_REFUSED, "%v", err)
	}
	if e.cred != nil {
		_ = root.Lchown(p, int(e.cred.uid), int(e.cred.gid))
	}
	return nil
}

// Get reads rel, inside one of instance id's data.out directories: at
// most limit bytes from offset, and the file's size.
func (e *Executor) Get(id, rel string, offset int64, limit int) ([]byte, int64, error) {
	r := e.get(id)
	if r == nil {
		return nil, 0, e.notFound(id)
	}
	p, err := e.dataPath(r, rel, r.m.Data.Out, "out")
	if err != nil {
		return nil, 0, err
	}
	root, err := os.OpenRoot(e.host.InstanceDir(id))
	if err != nil {
		return nil, 0, err
	}
	defer root.Close()
	f, err := root.Open(p)
	if err != nil {
		return nil, 0, errorf(wire.ErrorReply_CODE_NOT_FOUND, "%s: %v", rel, errors.Unwrap(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil, 0, errorf(wire.ErrorReply_CODE_BAD_REQUEST, "%s is not a file", rel)
	}
	if limit <= 0 || limit > 3<<20 {
		limit = 3 << 20
	}
	buf := make([]byte, max(0, min(int64(limit), st.Size()-offset)))
	n, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, err
	}
	return buf[:n], st.Size(), nil
}

// Remove stops instance id, undoes every change its installation and run
// recorded, and says how many.
func (e *Executor) Remove(id string) (int, error) {
	defer e.lock(id)()
	r := e.get(id)
	if r == nil {
		return 0, e.notFound(id)
	}
	n, err := e.undo(id)
	if err != nil {
		return n, errorf(wire.ErrorReply_CODE_UNAVAILABLE, "removing %s: %v (%d changes undone; remove again to finish)", id, err, n)
	}
	e.mu.Lock()
	delete(e.recs, id)
	e.mu.Unlock()
	e.log.Info("removed", "instance", id, "changes_undone", n)
	return n, nil
}

// Bundles lists the bundles the instances use (the caller may delete
// any other).
func (e *Executor) Bundles() map[string]bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]bool{}
	for _, r := range e.recs {
		out[r.Bundle] = true
	}
	return out
}

// BundleOf is the sha256 of the bundle instance id was installed from
// ("" if there is no such instance).
func (e *Executor) BundleOf(id string) string {
	if r := e.get(id); r != nil {
		return r.Bundle
	}
	return ""
}

// Ended removes the instances of reservations that ended.
func (e *Executor) Ended(reservations []string) {
	for _, id := range e.ids(func(r *Record) bool { return slices.Contains(reservations, r.Reservation) }) {
		n, err := e.Remove(id)
		if err != nil {
			e.log.Error("removing an application whose reservation ended", "instance", id, "err", err)
			continue
		}
		e.log.Info("reservation ended: application removed", "instance", id, "changes_undone", n)
	}
}

// Reconcile removes the instances of reservations not in live (they
// ended while the manager was down) and restarts those that should run
// and do not (the host rebooted).
func (e *Executor) Reconcile(live []string) {
	e.Ended(e.reservationsNotIn(live))
	if e.run == nil {
		return
	}
	for _, id := range e.ids(func(r *Record) bool { return r.Started }) {
		if st, err := e.run.Status(id); err == nil && (st.State == runner.StateRunning || st.State == runner.StatePaused) {
			continue
		}
		if st, err := e.run.Status(id); err == nil && st.State != "" && st.State != runner.StateStopped {
			continue // it ended by itself (failed, oom-killed): that stays shown
		}
		if _, err := e.Start(id); err != nil {
			e.log.Warn("restarting an application after the host restarted", "instance", id, "err", err)
		}
	}
}

func (e *Executor) reservationsNotIn(live []string) []string {
	var out []string
	for _, id := range e.ids(func(r *Record) bool { return !slices.Contains(live, r.Reservation) }) {
		out = append(out, e.get(id).Reservation)
	}
	return out
}

func (e *Executor) ids(keep func(*Record) bool) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for id, r := range e.recs {
		if keep(r) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
