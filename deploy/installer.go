// Executor.Install and Executor.Remove: an instance installed on a
// reservation (disk limits checked first, files placed by Host.Install,
// ports, the class's shared commands, install commands) and undone again,
// on failure or on request; uids and ports are allocated here.

package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/deploy/runner"
	"github.com/gridmgr/gridmgr/internal/atomicfile"
	"github.com/gridmgr/gridmgr/wire"
)

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
	known := ""
	if e.o.BundleChecked {
		known = sha // checked as it arrived: not hashed again
	}
	b, err := openBundle(f, st.Size(), known, e.o.Limits)
	if err != nil {
		return nil, errorf(wire.ErrorReply_CODE_BAD_REQUEST, "%v", err)
	}
	if b.SHA256 != sha {
		return nil, errorf(wire.ErrorReply_CODE_BAD_REQUEST, "%v: the bundle stored as %s hashes to %s; nothing was written", ErrBadBundle, short(sha), short(b.SHA256))
	}
	// Decoded as they arrived: the same bytes, which hash to sha.
	b.early = e.o.Early.Take(sha)
	defer b.early.Release()
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
		code := wire.ErrorReply_CODE_REFUSED
		if errors.Is(err, ErrBadBundle) {
			// An entry's bytes are not what the archive says (damaged,
			// more than declared, a window too large): it will never
			// install, and the manager drops it.
			code = wire.ErrorReply_CODE_BAD_REQUEST
		}
		return nil, errorf(code, "installing %s: %v", m.Name, err)
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
	// The manifest is kept with the instance (for restarts and removal),
	// its logs have a directory of its own, its ports are its own: all
	// recorded at once (one sync), then made.
	manifest, logs := filepath.Join(e.o.Dir, "state", id+".app.toml"), e.logDir(id)
	if _, err := os.Lstat(logs); err == nil {
		return fail(fmt.Errorf("%s exists already: an installation's own directory must be new", logs))
	}
	changes := []Change{{Op: "tree", Path: logs}}
	_, err = os.Lstat(manifest)
	fresh := errors.Is(err, fs.ErrNotExist)
	if fresh {
		changes = append(changes, Change{Op: "create", Path: manifest, Temp: manifest + ".gridmgr-new"})
	} else if err := j.WriteFile(manifest, bytes.NewReader(b.manifestText), 0o644); err != nil {
		return fail(err) // left over (or unreadable): replaced, its content kept
	}
	if len(m.Install.Ports) > 0 {
		rec.Ports = map[string]uint32{}
	}
	for _, name := range m.Install.Ports {
		p, err := e.freePort()
		if err != nil {
			return fail(err)
		}
		changes = append(changes, Change{Op: "other", Kind: "port", Value: name + "=" + strconv.Itoa(int(p))})
		rec.Ports[name] = p
	}
	if err := j.record(changes...); err != nil {
		return fail(err)
	}
	installStep("instance recorded")
	// Synced, but its name only with the record's, in the same
	// directory (writeRecord): until then the journal undoes it.
	if fresh {
		if err := atomicfile.Replace(manifest, manifest+".gridmgr-new", bytes.NewReader(b.manifestText), 0o644); err != nil {
			return fail(err)
		}
	}
	installStep("manifest written")
	if err := os.Mkdir(logs, 0o755); err != nil {
		return fail(err)
	}
	for _, name := range []string{"stdout.log", "stderr.log"} { // made now, not at each start
		if err := os.WriteFile(filepath.Join(logs, name), nil, 0o640); err != nil {
			return fail(err)
		}
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
	installStep("before the record")
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
// and that no account of the host names (Shares calls it under its lock);
// nested, the manager's own uid, for every reservation and class.
func (e *Executor) allocUID(used map[uint32]bool) (uint32, error) {
	if e.o.Nested {
		return uint32(os.Geteuid()), nil
	}
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
