// The Executor: its type, options and Grant, the refusals it answers with
// (Error), opening and closing it, and finding and locking one instance.

package deploy

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/gridmgr/gridmgr/deploy/runner"
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
	// BundleChecked: the files Bundle names are known to hash to their
	// name (a content-addressed store that checked the bytes as they
	// arrived, such as node/p2p/transfer's), so Install does not hash
	// them again. Otherwise Install refuses a file whose bytes do not
	// hash to the sha256 asked for.
	BundleChecked bool
	// Early holds the files of bundles decoded as they arrived (the
	// manager's bundle store feeds it, EarlyCache.Begin): an installation
	// of one writes those instead of decoding them again. nil: none.
	Early *EarlyCache
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
	// Nested says this manager runs inside a sandbox that confines
	// everything it starts (a glide-in, deployed by another manager):
	// its applications then run as its own uid (UIDFirst and UIDLast
	// are not used), with no sandbox, cgroups or uid of their own
	// (runner.Options.Nested). Only for a manager so confined: it is
	// refused as root.
	Nested bool
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
	if o.Nested && os.Getegid() != os.Geteuid() {
		// Installed files are handed to the uid and the gid of the same
		// number (chownTree), which a manager not root can do only with
		// that gid.
		e.runErr = fmt.Errorf("a nested manager runs applications as its own uid %d, and needs the gid of the same number (it has gid %d)", os.Geteuid(), os.Getegid())
	} else {
		e.run, e.runErr = runner.New(runner.Options{StateDir: filepath.Join(o.Dir, "run"), CgroupParent: parent, Log: o.Log, Nested: o.Nested})
	}
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

func (e *Executor) logDir(id string) string { return filepath.Join(e.o.Dir, "logs", id) }

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
