package deploy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gridmgr/gridmgr/wire"
)

// dataPath resolves rel inside one of dirs of instance r, or says why
// not.
func (e *Executor) dataPath(r *Record, rel string, dirs []string, what string) (string, error) {
	clean := filepath.ToSlash(filepath.Clean(rel))
	if rel == "" || filepath.IsAbs(rel) || clean == ".." || strings.HasPrefix(clean, "../") || strings.ContainsRune(rel, 0) {
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

// The instance's directory belongs to its application, which may have
// put links anywhere in it. The manager (root) reaches into it only
// through openat2 beneath the directory, following no link of any kind
// and crossing no mount: what it writes and reads is in the instance,
// whatever the application did.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

func openBeneath(dirfd int, rel string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW), Mode: uint64(mode), Resolve: beneath})
		if err != unix.EINTR && err != unix.EAGAIN {
			return fd, err
		}
	}
}

// pathError says in words what stopped a data transfer at rel.
func pathError(rel string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return errorf(wire.ErrorReply_CODE_REFUSED, "%s: a link (or a mount) is on the way; data goes only to and from the instance's own files", rel)
	case errors.Is(err, unix.ENOENT):
		return errorf(wire.ErrorReply_CODE_NOT_FOUND, "%s: no such file", rel)
	case errors.Is(err, unix.ENOTDIR):
		return errorf(wire.ErrorReply_CODE_REFUSED, "%s: a file is where a directory should be", rel)
	}
	return errorf(wire.ErrorReply_CODE_REFUSED, "%s: %v", rel, err)
}

// Put writes data to rel, inside one of instance id's data.in
// directories: as a new file handed to the instance's uid, renamed over
// whatever was there (a link there is replaced, not followed), the
// directories on its way made as needed. It counts against the
// instance's disk limit.
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
	if used, _, err := usage(e.host.InstanceDir(id)); err == nil && used+int64(len(data)) > r.Disk {
		return errorf(wire.ErrorReply_CODE_REFUSED, "%s holds %s; %s more would pass the %s it may", id, sizeText(used), sizeText(int64(len(data))), sizeText(r.Disk))
	}
	root, err := unix.Open(e.host.InstanceDir(id), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	dir := root
	defer func() {
		if dir != root {
			unix.Close(dir)
		}
		unix.Close(root)
	}()
	if d := path.Dir(p); d != "." {
		for _, comp := range strings.Split(d, "/") {
			if err := unix.Mkdirat(dir, comp, 0o755); err == nil {
				if err := unix.Fchownat(dir, comp, int(r.UID), int(r.UID), unix.AT_SYMLINK_NOFOLLOW); err != nil {
					return err
				}
			} else if !errors.Is(err, unix.EEXIST) {
				return pathError(rel, err)
			}
			next, err := openBeneath(dir, comp, unix.O_DIRECTORY|unix.O_RDONLY, 0)
			if err != nil {
				var st unix.Stat_t
				if unix.Fstatat(dir, comp, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
					err = unix.ELOOP // O_NOFOLLOW with O_DIRECTORY says ENOTDIR for a link
				}
				return pathError(rel, err)
			}
			if dir != root {
				unix.Close(dir)
			}
			dir = next
		}
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".gridmgr-put-" + hex.EncodeToString(rnd[:])
	fd, err := openBeneath(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
	if err != nil {
		return pathError(rel, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(data)
	if err == nil && r.UID != 0 {
		err = f.Chown(int(r.UID), int(r.UID))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dir, tmp, dir, path.Base(p))
	}
	if err != nil {
		_ = unix.Unlinkat(dir, tmp, 0)
		return pathError(rel, err)
	}
	return nil
}

// Get reads rel, inside one of instance id's data.out directories: at
// most limit bytes from offset, and the file's size. A file with other
// names (hard links) is refused: the manager hands out only what is the
// instance's alone.
func (e *Executor) Get(id, rel string, offset int64, limit int) ([]byte, int64, error) {
	r := e.get(id)
	if r == nil {
		return nil, 0, e.notFound(id)
	}
	p, err := e.dataPath(r, rel, r.m.Data.Out, "out")
	if err != nil {
		return nil, 0, err
	}
	root, err := unix.Open(e.host.InstanceDir(id), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, 0, err
	}
	defer unix.Close(root)
	fd, err := openBeneath(root, p, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, pathError(rel, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, 0, errorf(wire.ErrorReply_CODE_BAD_REQUEST, "%s is not a file", rel)
	}
	if st.Nlink > 1 {
		return nil, 0, errorf(wire.ErrorReply_CODE_REFUSED, "%s has %d names (hard links): refused, the manager hands out only files that are the instance's alone", rel, st.Nlink)
	}
	if limit <= 0 || limit > 3<<20 {
		limit = 3 << 20
	}
	if offset < 0 {
		offset = 0
	}
	buf := make([]byte, max(0, min(int64(limit), st.Size-offset)))
	n, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, err
	}
	return buf[:n], st.Size, nil
}
