package atomicfile

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Write replaces path with what r holds, with permission bits perm.
func Write(path string, r io.Reader, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	temp := f.Name()
	f.Close()
	return WriteVia(path, temp, r, perm)
}

// WriteVia is Write through the temporary file temp (a caller that must
// know its name to clean it up after a crash gives it); temp is removed
// on failure.
func WriteVia(path, temp string, r io.Reader, perm fs.FileMode) error {
	err := Replace(path, temp, r, perm)
	if err == nil {
		err = SyncDir(filepath.Dir(path)) // the rename itself must survive a crash
	}
	return err
}

// Replace is WriteVia but for the sync of path's directory: the caller
// makes the new name durable, e.g. with one SyncDir after several files.
func Replace(path, temp string, r io.Reader, perm fs.FileMode) error {
	f, err := os.OpenFile(temp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(temp, perm) // the umask may have cut it
	}
	if err == nil {
		err = os.Rename(temp, path)
	}
	if err != nil {
		os.Remove(temp)
	}
	return err
}

// SyncDir makes the names in dir durable (a new, renamed or removed
// file).
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
