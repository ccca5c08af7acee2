package deploy

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gridmgr/gridmgr/internal/text"
)

// maxFiles bounds what one measurement of an instance walks: past it the
// instance is over its limit whatever the bytes.
const maxFiles = 1_000_000

var errTooManyFiles = fmt.Errorf("more than %d files", maxFiles)

// usage is what dir holds on disk: the blocks of every file, directory
// and link under it, each inode once, and how many entries. It stops,
// with errTooManyFiles, past maxFiles.
func usage(dir string) (bytes int64, files int, err error) {
	seen := map[uint64]bool{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // gone while walking
			}
			return err
		}
		files++
		if files > maxFiles {
			return errTooManyFiles
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			if st.Nlink > 1 && !info.IsDir() {
				if seen[st.Ino] {
					return nil
				}
				seen[st.Ino] = true
			}
			bytes += st.Blocks * 512
		} else {
			bytes += info.Size()
		}
		return nil
	})
	return bytes, files, err
}

// PlacedBy is the bytes installing files and dirs from b would write:
// each placement counted (one entry placed twice is written twice), and
// a block for each directory.
func (b *Bundle) PlacedBy(files []Place, dirs []string) int64 {
	n := int64(len(dirs)) * 4096
	for _, p := range files {
		if f := b.file(p.From); f != nil {
			n += int64(f.UncompressedSize64)
		}
	}
	return n
}

func sizeText(n int64) string { return text.Size(n) }

func (e *Executor) diskUsed(r *Record) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return r.diskUsed
}

func (e *Executor) held(r *Record) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return r.Held
}

// watchDisks measures the instances that run, every interval, and stops
// one past its disk limit (as HTCondor holds a job past its disk
// request): what a running application writes is measured, not
// prevented, so it may pass its limit by what it writes in between.
func (e *Executor) watchDisks(interval time.Duration) {
	defer e.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		for _, id := range e.ids(func(r *Record) bool { return r.Started }) {
			e.checkDisk(id)
		}
	}
}

// checkDisk measures instance id and stops it if it holds more than it
// may; it reports whether it did.
func (e *Executor) checkDisk(id string) bool {
	r := e.get(id)
	if r == nil {
		return false
	}
	n, files, err := usage(e.host.InstanceDir(id))
	e.mu.Lock()
	r.diskUsed = n
	e.mu.Unlock()
	if err == nil && n <= r.Disk {
		return false
	}
	why := fmt.Sprintf("stopped by the manager: it holds %s, more than the %s it may", sizeText(n), sizeText(r.Disk))
	if errors.Is(err, errTooManyFiles) {
		why = fmt.Sprintf("stopped by the manager: it holds %s", err)
	} else if err != nil {
		e.log.Warn("measuring an application's disk use", "instance", id, "err", err)
		return false
	}
	defer e.lock(id)()
	if st, err := e.run.Status(id); err != nil || st.State.Ended() {
		return false
	}
	if err := e.run.Stop(id); err != nil {
		e.log.Error("stopping an application past its disk limit", "instance", id, "err", err)
		return false
	}
	e.mu.Lock()
	r.Started, r.Held = false, why
	e.mu.Unlock()
	if err := e.writeRecord(r); err != nil {
		e.log.Error("recording a stop", "instance", id, "err", err)
	}
	e.log.Warn("application past its disk limit: stopped", "instance", id, "bytes", n, "files", files, "limit", r.Disk)
	if e.o.Changed != nil {
		e.o.Changed()
	}
	return true
}
