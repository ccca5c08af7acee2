package deploy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gridmgr/gridmgr/internal/lazyre"
)

// Host is where a manager keeps its applications, under one directory
// (in its data dir):
//
//	instances/ID/        an instance's working directory: all of it is the instance's
//	                     (owned by its reservation's uid, mode 0700)
//	classes/CLASS/       a class's shared directory: all of it is the class's
//	                     (owned by the class's uid; read-only to instances)
//	state/ID.journal     the changes installing instance ID made, to undo
//	state/class-CLASS.journal, state/shares.json
//
// Every change an installation makes is inside those directories or
// recorded in a journal before it is made, so Remove gives the host back
// as it was before Install, even after a crash in between. (What the
// application's own processes do cannot reach anywhere else: the runner
// confines them.)
type Host struct {
	dir    string
	shares *Shares

	mu      sync.Mutex
	classes map[string]*sync.Mutex // one per class: its setup and undo take turns
}

// LockClass serialises what touches class's shared setup: an Install
// (with the class's commands the caller runs after it) and a Remove,
// which may be the class's first and last. Install must be called with
// it held; Remove takes it itself.
func (h *Host) LockClass(class string) (unlock func()) {
	h.mu.Lock()
	if h.classes == nil {
		h.classes = map[string]*sync.Mutex{}
	}
	l := h.classes[class]
	if l == nil {
		l = &sync.Mutex{}
		h.classes[class] = l
	}
	h.mu.Unlock()
	l.Lock()
	var once sync.Once
	return func() { once.Do(l.Unlock) }
}

var instanceRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// OpenHost opens (creating its directories if needed) the applications'
// directory dir.
func OpenHost(dir string) (*Host, error) {
	for _, d := range []string{dir, filepath.Join(dir, "instances"), filepath.Join(dir, "classes"), filepath.Join(dir, "state")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	shares, err := OpenShares(filepath.Join(dir, "state", "shares.json"))
	if err != nil {
		return nil, err
	}
	return &Host{dir: dir, shares: shares}, nil
}

// InstanceDir is the working directory of instance id.
func (h *Host) InstanceDir(id string) string { return filepath.Join(h.dir, "instances", id) }

// ClassDir is the shared directory of class.
func (h *Host) ClassDir(class string) string { return filepath.Join(h.dir, "classes", class) }

func (h *Host) journal(id string) string { return filepath.Join(h.dir, "state", id+".journal") }

func (h *Host) classJournal(class string) string {
	return filepath.Join(h.dir, "state", "class-"+class+".journal")
}

// Placed is what Install gave an instance.
type Placed struct {
	UID      uint32 // its reservation's uid (and gid)
	ClassUID uint32 // its class's
	// FirstOfClass: the class's shared setup was placed now; its
	// commands are still to run.
	FirstOfClass bool
}

// UIDAllocator gives a uid not in used.
type UIDAllocator func(used map[uint32]bool) (uint32, error)

// Install places bundle b as instance id of reservation: its working
// directory with the manifest's directories and files, handed to the
// reservation's uid (the first instance of a reservation takes one from
// alloc); and — for the first instance of its class — the class's shared
// directories and files, handed to a uid of the class's own. (The
// manifest's install commands, ports and the run itself belong to the
// executor.) On an error, what was done is undone. The caller holds
// LockClass(b.Manifest.Class).
func (h *Host) Install(b *Bundle, id, reservation string, alloc UIDAllocator) (p Placed, err error) {
	if !instanceRE.MatchString(id) {
		return p, fmt.Errorf("%q is not an instance id (letters, digits, '.', '_', '-')", id)
	}
	m := b.Manifest
	j, err := OpenJournal(h.journal(id))
	if err != nil {
		return p, err
	}
	defer j.Close()
	if len(j.Changes()) > 0 {
		return p, fmt.Errorf("instance %s exists (or its installation was interrupted): remove it first", id)
	}
	defer func() {
		if err != nil {
			_, uerr := h.remove(j, id, m.Class)
			err = errors.Join(err, uerr)
		}
	}()
	dir := h.InstanceDir(id)
	if _, err := os.Lstat(dir); err == nil {
		return p, fmt.Errorf("%s exists already: an installation's own directory must be new", dir)
	}
	// The instance's directory and each use (of its reservation's uid,
	// of its class) are recorded in its journal first, together (one
	// sync), so that undoing the instance removes and releases them,
	// whatever happens next.
	if err := j.record(Change{Op: "tree", Path: dir}, Change{Op: "other", Kind: "tenant", Value: reservation},
		Change{Op: "other", Kind: "class", Value: m.Class}); err != nil {
		return p, err
	}
	installStep("recorded")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return p, err
	}
	// The uids are taken (and their table synced) while the files are
	// placed: both are recorded above, and an undo releases what was
	// taken, so neither waits for the other.
	type acquired struct {
		uids  []uint32
		first []bool
		err   error
	}
	got := make(chan acquired, 1)
	go func() {
		var a acquired
		a.uids, a.first, a.err = h.shares.AcquireAll([]string{ReservationKey(reservation), ClassKey(m.Class)}, id, alloc)
		got <- a
	}()
	perr := place(b, dir, m.Install.Dirs, m.Install.Files)
	a := <-got // before any return: the undo must see what it took
	if perr != nil {
		return p, perr
	}
	installStep("placed")
	if a.err != nil {
		return p, a.err
	}
	p.UID, p.ClassUID, p.FirstOfClass = a.uids[0], a.uids[1], a.first[1]
	installStep("acquired")
	if err := chownTree(dir, p.UID); err != nil {
		return p, err
	}
	if p.FirstOfClass {
		cj, err := OpenJournal(h.classJournal(m.Class))
		if err != nil {
			return p, err
		}
		defer cj.Close()
		if err := cj.MkdirTree(h.ClassDir(m.Class), 0o755); err != nil {
			return p, err
		}
		if err := place(b, h.ClassDir(m.Class), m.Shared.Dirs, m.Shared.Files); err != nil {
			return p, err
		}
		if err := chownTree(h.ClassDir(m.Class), p.ClassUID); err != nil {
			return p, err
		}
		installStep("class placed")
	}
	return p, nil
}

// installStep is called at each step of Host.Install: the tests stop an
// installation there, as a kill -9 would.
var installStep = func(string) {}

// chownTree hands dir and everything in it to uid (and the gid of the
// same number); 0 leaves it as it is.
func chownTree(dir string, uid uint32) error {
	if uid == 0 {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(uid), int(uid))
	})
}

// Shares are the host's shared setups and the uids given out.
func (h *Host) Shares() *Shares { return h.shares }

// place makes dirs and copies files from the bundle under root.
func place(b *Bundle, root string, dirs []string, files []Place) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, d := range dirs {
		if err := r.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, p := range files {
		f := b.file(p.From)
		if f == nil {
			return fmt.Errorf("%w: %s is not in the bundle", ErrBadBundle, p.From)
		}
		if d := path.Dir(p.To); d != "." {
			if err := r.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		mode, _ := parseMode(p.Mode)
		if err := writeEntry(r, f, p.To, mode, b.early); err != nil {
			return fmt.Errorf("placing %s: %w", p.To, err)
		}
	}
	return nil
}

// Remove undoes instance id: its working directory, the class reference
// it held, and — with the last instance of its class — the class's shared
// setup. It returns how many changes it undid. Removing an instance that
// is not there is not an error (and undoes nothing).
func (h *Host) Remove(id string) (int, error) {
	if !instanceRE.MatchString(id) {
		return 0, fmt.Errorf("%q is not an instance id", id)
	}
	j, err := OpenJournal(h.journal(id))
	if err != nil {
		return 0, err
	}
	defer j.Close()
	class := ""
	for _, c := range j.Changes() {
		if c.Op == "other" && c.Kind == "class" {
			class = c.Value
		}
	}
	defer h.LockClass(class)()
	return h.remove(j, id, class)
}

func (h *Host) remove(j *Journal, id, class string) (int, error) {
	lastOfClass := false
	n, err := j.Undo(func(kind, value string) error {
		switch kind {
		case "port":
			return nil // allocated from the journals: forgetting it frees it
		case "tenant":
			_, err := h.shares.Release(ReservationKey(value), id) // the last gives its uid back
			return err
		case "class":
			last, err := h.shares.Release(ClassKey(value), id)
			lastOfClass = last
			return err
		}
		return fmt.Errorf("no way to undo %s %s", kind, value)
	})
	if err != nil {
		return n, err
	}
	if lastOfClass || class != "" && len(h.shares.Users(ClassKey(class))) == 0 {
		cj, err := OpenJournal(h.classJournal(class))
		if err != nil {
			return n, err
		}
		m, err := cj.Undo(nil)
		cj.Close()
		n += m
		if err != nil {
			return n, err
		}
		if err := os.Remove(h.classJournal(class)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, err
		}
	}
	if err := os.Remove(h.journal(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return n, err
	}
	return n, nil
}

// Instances lists the instances installed (or whose removal is pending).
func (h *Host) Instances() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(h.dir, "state"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".journal"); ok && !strings.HasPrefix(id, "class-") {
			out = append(out, id)
		}
	}
	return out, nil
}
