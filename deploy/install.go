package deploy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// Host is where a manager keeps its applications, under one directory
// (in its data dir):
//
//	instances/ID/        an instance's working directory: all of it is the instance's
//	classes/CLASS/       a class's shared directory: all of it is the class's
//	state/ID.journal     the changes installing instance ID made, to undo
//	state/class-CLASS.journal, state/classes.json
//
// Every change an installation makes is inside those directories or
// recorded in a journal before it is made, so Remove gives the host back
// as it was before Install, even after a crash in between.
type Host struct {
	dir     string
	classes *Classes
}

var instanceRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// OpenHost opens (creating its directories if needed) the applications'
// directory dir.
func OpenHost(dir string) (*Host, error) {
	for _, d := range []string{dir, filepath.Join(dir, "instances"), filepath.Join(dir, "classes"), filepath.Join(dir, "state")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	classes, err := OpenClasses(filepath.Join(dir, "state", "classes.json"))
	if err != nil {
		return nil, err
	}
	return &Host{dir: dir, classes: classes}, nil
}

// InstanceDir is the working directory of instance id.
func (h *Host) InstanceDir(id string) string { return filepath.Join(h.dir, "instances", id) }

// ClassDir is the shared directory of class.
func (h *Host) ClassDir(class string) string { return filepath.Join(h.dir, "classes", class) }

func (h *Host) journal(id string) string { return filepath.Join(h.dir, "state", id+".journal") }

func (h *Host) classJournal(class string) string {
	return filepath.Join(h.dir, "state", "class-"+class+".journal")
}

// Install places bundle b as instance id: its working directory with the
// manifest's directories and files, and — for the first instance of its
// class — the class's shared directories and files. (The manifest's
// install commands, ports and the run itself belong to the runner.) On an
// error, what was done is undone.
func (h *Host) Install(b *Bundle, id string) (err error) {
	if !instanceRE.MatchString(id) {
		return fmt.Errorf("%q is not an instance id (letters, digits, '.', '_', '-')", id)
	}
	m := b.Manifest
	j, err := OpenJournal(h.journal(id))
	if err != nil {
		return err
	}
	defer j.Close()
	if len(j.Changes()) > 0 {
		return fmt.Errorf("instance %s exists (or its installation was interrupted): remove it first", id)
	}
	defer func() {
		if err != nil {
			_, uerr := h.remove(j, id, m.Class)
			err = errors.Join(err, uerr)
		}
	}()
	dir := h.InstanceDir(id)
	if err := j.MkdirTree(dir, 0o755); err != nil {
		return err
	}
	if err := place(b, dir, m.Install.Dirs, m.Install.Files); err != nil {
		return err
	}
	// The class reference is recorded in the instance's journal first, so
	// that undoing the instance releases it, whatever happens next.
	if err := j.Record("class", m.Class); err != nil {
		return err
	}
	first, err := h.classes.Acquire(m.Class, id)
	if err != nil {
		return err
	}
	if first {
		cj, err := OpenJournal(h.classJournal(m.Class))
		if err != nil {
			return err
		}
		defer cj.Close()
		if err := cj.MkdirTree(h.ClassDir(m.Class), 0o755); err != nil {
			return err
		}
		if err := place(b, h.ClassDir(m.Class), m.Shared.Dirs, m.Shared.Files); err != nil {
			return err
		}
	}
	return nil
}

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
		if err := writeEntry(r, f, p.To, mode); err != nil {
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
	return h.remove(j, id, class)
}

func (h *Host) remove(j *Journal, id, class string) (int, error) {
	lastOfClass := false
	n, err := j.Undo(func(kind, value string) error {
		switch kind {
		case "port":
			return nil // allocated from the journals: forgetting it frees it
		case "class":
		default:
			return fmt.Errorf("no way to undo %s %s", kind, value)
		}
		last, err := h.classes.Release(value, id)
		lastOfClass = last
		return err
	})
	if err != nil {
		return n, err
	}
	if lastOfClass || class != "" && len(h.classes.Users(class)) == 0 {
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
