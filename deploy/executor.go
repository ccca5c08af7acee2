package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
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

// Grant is what a reservation gives its instances: limits they share.
type Grant struct {
	Reservation string
	Holder      string
	CPUs        int64
	Mem         int64
	// Disk is bytes each instance may hold (0: ExecutorOptions.
	// MaxInstanceBytes; else the smaller of the two).
	Disk int64
}

// ExecutorOptions configure an Executor.
type ExecutorOptions struct {
	Dir     string // the applications' directory (in the data dir)
	Manager string // the manager's name, shown in instances
	// Hide are paths applications must not see at all (the manager's
	// data dir, its pre-shared key): each is replaced by an empty
	// directory (or file) in their sandbox. Dir always is.
	Hide []string
	// Bundle finds an uploaded bundle by its sha256.
	Bundle func(sha string) (path string, ok bool)
	// UIDFirst and UIDLast (apps.uid_range) are the uids given to
	// reservations and classes, one each; a uid /etc/passwd names is
	// skipped. Default 60600-61099.
	UIDFirst, UIDLast uint32
	// MaxInstanceBytes (apps.max_instance_bytes) bounds what an instance
	// holds on disk; default 10 GiB.
	MaxInstanceBytes int64
	// MaxPids (apps.max_pids) bounds a reservation's processes and
	// threads; default 4096.
	MaxPids int64
	// DiskCheck is how often running instances' disk use is measured
	// (default 2 s; negative: never, for tests that measure by hand).
	DiskCheck time.Duration
	// Limits bound the bundles opened.
	Limits Limits
	Log    *slog.Logger
	// CgroupParent names the runner's cgroup (default gridmgr-MANAGER).
	CgroupParent string
	// LogMax and LogKeep bound each instance's captured output.
	LogMax  int64
	LogKeep int
	// Changed, if set, is called when the executor changed an instance
	// by itself (stopped one past its disk limit).
	Changed func()
}

// Executor installs, runs, controls and removes a manager's application
// instances: Host places the files (journaled), the runner runs the
// processes confined (a sandbox, the reservation's uid, a cgroup inside
// the reservation's), and a record per instance (state/ID.json, written
// durably before anything is acknowledged) says what was installed for
// whom. All methods are safe for concurrent use; operations on one
// instance take turns.
type Executor struct {
	o      ExecutorOptions
	host   *Host
	run    *runner.Runner
	runErr error // why processes cannot run here (nil: they can)
	log    *slog.Logger
	stop   chan struct{}
	wg     sync.WaitGroup

	mu    sync.Mutex
	locks map[string]*sync.Mutex
	recs  map[string]*Record
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
	UID         uint32            `json:"uid,omitempty"`       // its reservation's
	ClassUID    uint32            `json:"class_uid,omitempty"` // its class's
	CPUs        int64             `json:"cpus"`
	Mem         int64             `json:"mem"`
	Disk        int64             `json:"disk"` // bytes it may hold
	Installed   time.Time         `json:"installed"`
	Changes     int               `json:"changes"`
	Started     bool              `json:"started"` // the holder asked it to run (and not to stop)
	// Held says why the manager stopped it (over its disk limit); it
	// may start again once under.
	Held string `json:"held,omitempty"`

	m        *Manifest
	diskUsed int64 // bytes, as last measured
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
	if o.UIDFirst == 0 && o.UIDLast == 0 {
		o.UIDFirst, o.UIDLast = 60600, 61099
	}
	if o.UIDFirst == 0 || o.UIDLast < o.UIDFirst {
		return nil, fmt.Errorf("apps.uid_range: %d-%d is not a range of uids above 0", o.UIDFirst, o.UIDLast)
	}
	if o.MaxInstanceBytes <= 0 {
		o.MaxInstanceBytes = 10 << 30
	}
	if o.MaxPids <= 0 {
		o.MaxPids = 4096
	}
	if o.DiskCheck == 0 {
		o.DiskCheck = 2 * time.Second
	}
	if !slices.Contains(o.Hide, o.Dir) {
		o.Hide = append(o.Hide, o.Dir)
	}
	h, err := OpenHost(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("applications' directory: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("applications' directory: %w", err)
	}
	e := &Executor{o: o, host: h, log: o.Log, locks: map[string]*sync.Mutex{}, recs: map[string]*Record{}, stop: make(chan struct{})}
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
	if e.run != nil && o.DiskCheck > 0 {
		e.wg.Add(1)
		go e.watchDisks(o.DiskCheck)
	}
	return e, nil
}

// Close stops the executor's own work (the disk watcher); the instances
// run on.
func (e *Executor) Close() {
	select {
	case <-e.stop:
	default:
		close(e.stop)
	}
	e.wg.Wait()
	if e.run != nil {
		e.run.Close()
	}
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
			n, err := e.undo(id, e.reservationOf(id))
			if err != nil {
				return fmt.Errorf("undoing the interrupted installation of %s: %w", id, err)
			}
			e.log.Info("undid an installation that did not complete", "instance", id, "changes", n)
			continue
		}
		if n, _, err := usage(e.host.InstanceDir(id)); err == nil {
			rec.diskUsed = n // shown until the watcher measures again
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
				_ = e.run.Remove(id, e.reservationOf(id))
				continue
			}
			e.log.Info("re-adopted a running application", "instance", id)
		}
	}
	return nil
}

// reservationOf is the reservation of instance RESERVATION.APP.
func (e *Executor) reservationOf(id string) string {
	if i := strings.LastIndexByte(id, '.'); i > 0 {
		return id[:i]
	}
	return id
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

// diskLimit is what an instance of g may hold.
func (e *Executor) diskLimit(g Grant) int64 {
	if g.Disk > 0 && g.Disk < e.o.MaxInstanceBytes {
		return g.Disk
	}
	return e.o.MaxInstanceBytes
}

// Install installs the bundle with sha256 sha on the reservation g as
// the instance RESERVATION.APP: its files (journaled, counted against
// its disk limit before any is written), its ports, its class's shared
// setup if it is the first of its class here, its install commands (run
// confined, as the reservation's uid, within its limits). A failure
// undoes everything it did.
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
	if !instanceRE.MatchString(id) {
		return nil, errorf(wire.ErrorReply_CODE_BAD_REQUEST, "%q is not an instance name", id)
	}
	defer e.lock(id)()
	if e.get(id) != nil {
		return nil, errorf(wire.ErrorReply_CODE_CONFLICT, "%s is installed already on reservation %s (remove it first to install another version)", m.Name, g.Reservation)
	}
	limit := e.diskLimit(g)
	if n := b.PlacedBy(m.Install.Files, m.Install.Dirs); n > limit {
		return nil, errorf(wire.ErrorReply_CODE_REFUSED, "installing %s would place %s, more than the %s an instance may hold here (%s); nothing was written",
			m.Name, sizeText(n), sizeText(limit), e.diskLimitName(g))
	}
	if n := b.PlacedBy(m.Shared.Files, m.Shared.Dirs); n > limit {
		return nil, errorf(wire.ErrorReply_CODE_REFUSED, "the shared setup of class %s would place %s, more than the %s allowed here (%s); nothing was written",
			m.Class, sizeText(n), sizeText(limit), e.diskLimitName(g))
	}
	if e.run == nil && (len(m.Install.Commands) > 0 || len(m.Shared.Commands) > 0) {
		return nil, errorf(wire.ErrorReply_CODE_UNAVAILABLE, "%s has install commands, and this manager cannot run them: %v", m.Name, e.runErr)
	}
	rec := &Record{ID: id, App: m.Name, Version: m.Version, Class: m.Class, Reservation: g.Reservation, Holder: g.Holder,
		Bundle: b.SHA256, CPUs: g.CPUs, Mem: g.Mem, Disk: limit, Installed: time.Now().UTC(), m: m}
	// The class's setup (placed by the first instance, then its commands)
	// and a removal that may be its last take turns.
	unlockClass := e.host.LockClass(m.Class)
	defer unlockClass()
	placed, err := e.host.Install(b, id, g.Reservation, e.allocUID)
	if err != nil {
		return nil, errorf(wire.ErrorReply_CODE_REFUSED, "installing %s: %v", m.Name, err)
	}
	rec.UID, rec.ClassUID = placed.UID, placed.ClassUID
	fail := func(err error) (*wire.AppInstance, error) {
		unlockClass() // the undo takes it
		n, uerr := e.undo(id, g.Reservation)
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
	if err := j.WriteFile(filepath.Join(e.o.Dir, "state", id+".app.toml"), bytes.NewReader(b.manifestText), 0o644); err != nil {
		return fail(err)
	}
	if err := j.MkdirTree(e.logDir(id), 0o755); err != nil {
		return fail(err)
	}
	for _, name := range []string{"stdout.log", "stderr.log"} { // made now, not at each start
		if err := os.WriteFile(filepath.Join(e.logDir(id), name), nil, 0o640); err != nil {
			return fail(err)
		}
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
	if placed.FirstOfClass {
		for _, cmd := range m.Shared.Commands {
			if err := e.installStep(rec, e.classSpec(rec), cmd, "shared command"); err != nil {
				return fail(err)
			}
		}
		if n, _, err := usage(e.host.ClassDir(m.Class)); err != nil || n > limit {
			return fail(errorf(wire.ErrorReply_CODE_REFUSED, "the shared setup of class %s holds %s, more than the %s allowed here (%v)", m.Class, sizeText(n), sizeText(limit), err))
		}
	}
	unlockClass()
	for _, cmd := range m.Install.Commands {
		if err := e.installStep(rec, e.spec(rec, nil), cmd, "install command"); err != nil {
			return fail(err)
		}
	}
	if n, _, err := usage(e.host.InstanceDir(id)); err != nil || n > limit {
		return fail(errorf(wire.ErrorReply_CODE_REFUSED, "after its install commands %s holds %s, more than the %s it may (%s)", m.Name, sizeText(n), sizeText(limit), e.diskLimitName(g)))
	} else {
		rec.diskUsed = n
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
	e.log.Info("installed", "instance", id, "app", m.Name, "version", m.Version, "changes", rec.Changes, "uid", rec.UID)
	return e.instance(rec, nil), nil
}

// installStep runs one install (or shared) command confined by spec.
func (e *Executor) installStep(rec *Record, spec runner.Spec, cmd []string, what string) error {
	out, code, err := e.run.Exec(context.Background(), spec, e.expand(rec, cmd), 2*time.Minute, 64<<10)
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d", code)
	}
	if err != nil {
		return errorf(wire.ErrorReply_CODE_REFUSED, "%s %q failed: %v\n%s", what, strings.Join(cmd, " "), err, tail(out, 2000))
	}
	return nil
}

func (e *Executor) diskLimitName(g Grant) string {
	if g.Disk > 0 && g.Disk < e.o.MaxInstanceBytes {
		return "its reservation's disk tokens"
	}
	return "apps.max_instance_bytes"
}

// allocUID gives the lowest uid of apps.uid_range that is not in used
// and that no account of the host names (Shares calls it under its lock).
func (e *Executor) allocUID(used map[uint32]bool) (uint32, error) {
	for uid := e.o.UIDFirst; uid <= e.o.UIDLast && uid != 0; uid++ {
		if used[uid] {
			continue
		}
		if _, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
			continue // an account of the host's: never give its files away
		}
		return uid, nil
	}
	return 0, errorf(wire.ErrorReply_CODE_UNAVAILABLE, "no free uid in apps.uid_range %d-%d (%d in use): remove applications, or widen the range",
		e.o.UIDFirst, e.o.UIDLast, len(used))
}

// undo removes what an instance's journal recorded, and its record.
func (e *Executor) undo(id, reservation string) (int, error) {
	if e.run != nil {
		if err := e.run.Remove(id, reservation); err != nil {
			return 0, err
		}
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
// environment, for Exec): as its reservation's uid, in its reservation's
// cgroup, in a sandbox where its own directory is writable, its class's
// readable, and the manager's data hidden.
func (e *Executor) spec(r *Record, cmd []string) runner.Spec {
	m := r.m
	dir := e.host.InstanceDir(r.ID)
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "TMPDIR=/tmp", "GRIDMGR_INSTANCE=" + r.ID, "GRIDMGR_RESERVATION=" + r.Reservation}
	for _, k := range slices.Sorted(maps.Keys(e.vars(r))) {
		env = append(env, k+"="+e.vars(r)[k])
	}
	for _, k := range slices.Sorted(maps.Keys(m.Install.Env)) {
		env = append(env, k+"="+e.expand(r, []string{m.Install.Env[k]})[0])
	}
	sb := runner.Sandbox{
		Writable: []string{dir},
		Hide:     slices.Clone(e.o.Hide),
		Network:  m.Network,
		Hostname: hostname(r.ID),
		TmpBytes: r.Mem,
	}
	if st, err := os.Stat(e.host.ClassDir(r.Class)); err == nil && st.IsDir() {
		sb.ReadOnly = []string{e.host.ClassDir(r.Class)}
	}
	return runner.Spec{
		ID:         r.ID,
		Group:      r.Reservation,
		Dir:        dir,
		Command:    cmd,
		Env:        env,
		UID:        r.UID,
		GID:        r.UID,
		Nice:       m.Run.Nice,
		Limits:     runner.Limits{CPUs: float64(r.CPUs), Mem: r.Mem, Pids: e.o.MaxPids},
		Sandbox:    sb,
		StopSignal: signalOf(m.Run.StopSignal),
		StopGrace:  time.Duration(m.Run.StopGrace),
		Restart:    runner.Restart{OnFailure: m.Run.Restart == "on-failure", Max: m.Run.MaxRestarts},
		LogDir:     e.logDir(r.ID),
		LogMax:     e.o.LogMax,
		LogKeep:    e.o.LogKeep,
	}
}

// classSpec is how the class's shared commands run: as the class's uid,
// in the class's directory (writable), with no instance directory.
func (e *Executor) classSpec(r *Record) runner.Spec {
	s := e.spec(r, nil)
	dir := e.host.ClassDir(r.Class)
	s.Dir, s.UID, s.GID = dir, r.ClassUID, r.ClassUID
	s.Sandbox.Writable, s.Sandbox.ReadOnly = []string{dir}, nil
	for i, kv := range s.Env {
		if strings.HasPrefix(kv, "HOME=") {
			s.Env[i] = "HOME=" + dir
		}
	}
	return s
}

// hostname is what an instance's processes see as the host's name: its
// id, cut to what a host name may be.
func hostname(id string) string {
	if len(id) > 64 {
		return id[:64]
	}
	return id
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
	if err := e.canRun(); err != nil {
		return nil, err
	}
	if r.UID == 0 {
		return nil, errorf(wire.ErrorReply_CODE_CONFLICT, "%s was installed by a gridmgr that did not confine applications: remove it and install it again", id)
	}
	return r, nil
}

func (e *Executor) canRun() error {
	if e.run == nil {
		return errorf(wire.ErrorReply_CODE_UNAVAILABLE, "this manager cannot run applications: %v", e.runErr)
	}
	return nil
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

// Remove stops instance id, undoes every change its installation and run
// recorded, and says how many.
func (e *Executor) Remove(id string) (int, error) {
	defer e.lock(id)()
	r := e.get(id)
	if r == nil {
		return 0, e.notFound(id)
	}
	n, err := e.undo(id, r.Reservation)
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

// Ended removes the instances of reservations that ended, and says what
// it did to each: what it was doing, and how many changes were undone
// (or why it could not be removed; it is tried again at the next start).
func (e *Executor) Ended(reservations []string) []*wire.AppRemoval {
	var out []*wire.AppRemoval
	for _, id := range e.ids(func(r *Record) bool { return slices.Contains(reservations, r.Reservation) }) {
		rm := &wire.AppRemoval{Id: id}
		if r := e.get(id); r != nil {
			ai := e.instance(r, nil)
			rm.App, rm.Version, rm.State = ai.App, ai.Version, ai.State
		}
		out = append(out, rm)
		n, err := e.Remove(id)
		rm.Undone = uint32(n)
		if err != nil {
			rm.Error = err.Error()
			e.log.Error("removing an application whose reservation ended", "instance", id, "err", err)
			continue
		}
		rm.Removed = true
		e.log.Info("reservation ended: application removed", "instance", id, "changes_undone", n)
	}
	return out
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
