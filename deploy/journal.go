package deploy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/gridmgr/gridmgr/internal/atomicfile"
)

// Journal is the write-ahead log of the changes an installation makes to
// the host: each change is recorded, and the record synced to disk, before
// it is made, so that after a crash at any point Undo can take the host
// back to what it was. Undo reverts the changes newest first and copes
// with a change that was recorded but not made, or half made.
//
// A Journal is used by one goroutine at a time. Its file holds one JSON
// record per line; a torn last line (a crash while writing it) is
// ignored, as the change it announced was not begun.
type Journal struct {
	path    string
	f       *os.File
	changes []Change
	backups string // directory of the old contents of replaced files
}

// Change is one recorded change.
type Change struct {
	Op     string `json:"op"`               // mkdir, tree, create, replace, other
	Path   string `json:"path,omitempty"`   // absolute
	Temp   string `json:"temp,omitempty"`   // create, replace: the file written before the rename
	Backup string `json:"backup,omitempty"` // replace: the old content
	Mode   uint32 `json:"mode,omitempty"`   // replace: the old permission bits
	// Other changes (a port allocated, a class reference taken) are
	// undone by the caller's function, given Kind and Value.
	Kind  string `json:"kind,omitempty"`
	Value string `json:"value,omitempty"`
}

// OpenJournal opens (creating it if needed) the journal at path, reading
// the changes already recorded. Backups of replaced files go in path +
// ".backups".
func OpenJournal(path string) (*Journal, error) {
	j := &Journal{path: path, backups: path + ".backups"}
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	good := 0
	for sc.Scan() {
		line := sc.Bytes()
		var c Change
		if err := json.Unmarshal(line, &c); err != nil {
			break // a torn tail: the change it announced was not begun
		}
		j.changes = append(j.changes, c)
		good += len(line) + 1
	}
	if good > len(data) {
		good = len(data) // the last line had no newline
	}
	// Drop a torn tail so that new records follow whole ones.
	j.f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if len(data) == 0 { // perhaps new: its name must survive a crash too
		if err := atomicfile.SyncDir(filepath.Dir(path)); err != nil {
			j.f.Close()
			return nil, err
		}
	}
	if err := j.f.Truncate(int64(good)); err != nil {
		j.f.Close()
		return nil, err
	}
	if _, err := j.f.Seek(int64(good), io.SeekStart); err != nil {
		j.f.Close()
		return nil, err
	}
	return j, nil
}

// Changes are the changes recorded, oldest first.
func (j *Journal) Changes() []Change { return slices.Clone(j.changes) }

// Close closes the journal's file (the record stays).
func (j *Journal) Close() error { return j.f.Close() }

// record appends cs and syncs them, once, before returning: changes
// that follow one another are announced together, and then made (Undo
// copes with one announced but not made).
func (j *Journal) record(cs ...Change) error {
	var buf []byte
	for _, c := range cs {
		line, err := json.Marshal(c)
		if err != nil {
			return err
		}
		buf = append(append(buf, line...), '\n')
	}
	if _, err := j.f.Write(buf); err != nil {
		return err
	}
	if err := j.f.Sync(); err != nil {
		return err
	}
	j.changes = append(j.changes, cs...)
	return nil
}

// Record records a change the caller makes itself (Kind and Value say
// what, for Undo's callback), before the caller makes it.
func (j *Journal) Record(kind, value string) error {
	return j.record(Change{Op: "other", Kind: kind, Value: value})
}

// Mkdir creates the directory path (its parent must exist). A directory
// that is there already is left alone and not recorded: it is not ours.
func (j *Journal) Mkdir(path string, perm fs.FileMode) error {
	if st, err := os.Lstat(path); err == nil {
		if st.IsDir() {
			return nil
		}
		return fmt.Errorf("%s exists and is not a directory", path)
	}
	if err := j.record(Change{Op: "mkdir", Path: path}); err != nil {
		return err
	}
	return os.Mkdir(path, perm)
}

// MkdirTree creates the directory path, whose whole content will be the
// installation's (an instance's working directory, where the application
// writes what it likes): Undo removes it with everything in it. It must
// not exist yet.
func (j *Journal) MkdirTree(path string, perm fs.FileMode) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s exists already: an installation's own directory must be new", path)
	}
	if err := j.record(Change{Op: "tree", Path: path}); err != nil {
		return err
	}
	return os.Mkdir(path, perm)
}

// WriteFile writes r to path with perm. A file already there is replaced
// and its content kept, to be put back by Undo.
func (j *Journal) WriteFile(path string, r io.Reader, perm fs.FileMode) error {
	temp := path + ".gridmgr-new"
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := j.record(Change{Op: "create", Path: path, Temp: temp}); err != nil {
			return err
		}
	case err != nil:
		return err
	case !st.Mode().IsRegular():
		return fmt.Errorf("%s exists and is not a regular file: not replacing it", path)
	default:
		// Keep the old content first, durably, then say so.
		if err := os.MkdirAll(j.backups, 0o700); err != nil {
			return err
		}
		backup := filepath.Join(j.backups, strconv.Itoa(len(j.changes)))
		if err := copyFile(path, backup); err != nil {
			return fmt.Errorf("keeping the old content of %s: %w", path, err)
		}
		if err := j.record(Change{Op: "replace", Path: path, Temp: temp, Backup: backup, Mode: uint32(st.Mode().Perm())}); err != nil {
			return err
		}
	}
	return atomicfile.WriteVia(path, temp, r, perm)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	return atomicfile.WriteVia(to, to+".tmp", in, 0o600)
}

// Undo reverts every recorded change, newest first, whether or not it was
// completely made, and then empties the journal. other undoes the
// changes recorded with Record (nil: they cannot be undone, an error). It
// returns how many changes it undid; on an error it stops, and the
// changes not yet undone stay recorded, so Undo may be called again.
func (j *Journal) Undo(other func(kind, value string) error) (int, error) {
	undone := 0
	for i := len(j.changes) - 1; i >= 0; i-- {
		c := j.changes[i]
		var err error
		switch c.Op {
		case "mkdir":
			err = os.Remove(c.Path)
			if errors.Is(err, fs.ErrNotExist) {
				err = nil
			} else if err != nil {
				err = fmt.Errorf("removing the directory %s: %w (something not recorded is in it)", c.Path, err)
			}
		case "tree":
			err = os.RemoveAll(c.Path)
		case "create":
			err = removeIfThere(c.Temp, c.Path)
		case "replace":
			err = removeIfThere(c.Temp)
			if err == nil {
				err = restore(c)
			}
		case "other":
			if other == nil {
				err = fmt.Errorf("no way to undo %s %s", c.Kind, c.Value)
			} else {
				err = other(c.Kind, c.Value)
			}
		default:
			err = fmt.Errorf("unknown change %q in the journal", c.Op)
		}
		if err != nil {
			j.changes = j.changes[:i+1]
			return undone, j.rewrite(err)
		}
		undone++
	}
	j.changes = nil
	if err := os.RemoveAll(j.backups); err != nil {
		return undone, err
	}
	return undone, j.rewrite(nil)
}

// restore puts a replaced file's old content back.
func restore(c Change) error {
	in, err := os.Open(c.Backup)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the old content of %s is lost (%s is missing)", c.Path, c.Backup)
	}
	if err != nil {
		return err
	}
	defer in.Close()
	return atomicfile.WriteVia(c.Path, c.Temp, in, fs.FileMode(c.Mode))
}

func removeIfThere(paths ...string) error {
	for _, p := range paths {
		if p == "" {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// rewrite makes the file hold exactly the changes still recorded.
func (j *Journal) rewrite(cause error) error {
	var buf bytes.Buffer
	for _, c := range j.changes {
		line, _ := json.Marshal(c)
		buf.Write(append(line, '\n'))
	}
	if err := atomicfile.WriteVia(j.path, j.path+".tmp", &buf, 0o600); err != nil {
		return errors.Join(cause, err)
	}
	f, err := os.OpenFile(j.path, os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return errors.Join(cause, err)
	}
	j.f.Close()
	j.f = f
	return cause
}

// Digest is a hash of what is at each path: for a directory, every entry
// under it (names, kinds, permission bits, file contents, link targets);
// a path that does not exist hashes as absent. Two digests are equal
// when the paths hold the same things — the test that a removal gave the
// host back as it was.
func Digest(paths ...string) (string, error) {
	h := sha256.New()
	for _, root := range paths {
		fmt.Fprintf(h, "root %q\n", root)
		if _, err := os.Lstat(root); errors.Is(err, fs.ErrNotExist) {
			h.Write([]byte("absent\n"))
			continue
		}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			info, err := d.Info()
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%q %v\n", rel, info.Mode())
			switch {
			case info.Mode()&fs.ModeSymlink != 0:
				t, err := os.Readlink(p)
				if err != nil {
					return err
				}
				fmt.Fprintf(h, "-> %q\n", t)
			case info.Mode().IsRegular():
				f, err := os.Open(p)
				if err != nil {
					return err
				}
				fmt.Fprintf(h, "%d bytes\n", info.Size())
				_, err = io.Copy(h, f)
				f.Close()
				return err
			}
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
