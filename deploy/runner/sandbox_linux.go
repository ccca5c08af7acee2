package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Sandbox says what an instance's processes see of the host. Every one of
// them runs in a mount namespace of its own where:
//
//   - the host's whole filesystem is read-only (recursively, nosuid,
//     nodev);
//   - /tmp, /var/tmp and /dev/shm are private, empty tmpfs that go with the
//     instance;
//   - /dev holds only null, zero, full, random, urandom and tty;
//   - /proc is the instance's own (its PID namespace);
//   - each directory of Hide is replaced by an empty read-only one (the
//     manager's data dir: its keys, stores, journals, other instances);
//   - each directory of Writable, and of ReadOnly, appears at its own
//     path, read-write or read-only, even inside a hidden one.
//
// With Network "none" it also has a network namespace of its own with
// only a loopback interface; otherwise it shares the host's network.
type Sandbox struct {
	Writable []string `json:"writable,omitempty"`
	ReadOnly []string `json:"read_only,omitempty"`
	Hide     []string `json:"hide,omitempty"`
	Network  string   `json:"network,omitempty"` // "host" (default) or "none"
	Hostname string   `json:"hostname,omitempty"`
	// TmpBytes bounds each private tmpfs (0: the kernel's default, half
	// the RAM; what is written there is charged to the instance's memory
	// limit either way).
	TmpBytes int64 `json:"tmp_bytes,omitempty"`
}

func (sb *Sandbox) check() error {
	for _, list := range [][]string{sb.Writable, sb.ReadOnly, sb.Hide} {
		for _, p := range list {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
				return fmt.Errorf("sandbox path %q: must be absolute, clean and not /", p)
			}
		}
	}
	switch sb.Network {
	case "", "host", "none":
	default:
		return fmt.Errorf("sandbox network %q: host or none", sb.Network)
	}
	return nil
}

// devices are the host's device nodes an instance's /dev holds.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// confine makes the calling thread's view of the host the sandbox's. It
// must run on a thread locked for good (runtime.LockOSThread, never
// unlocked): it gives that thread a mount namespace of its own (and,
// with Network "none", a network namespace), sets no_new_privs and
// empties its capability bounding set. Processes forked from that thread
// inherit all of it; the process's other threads keep the host's view.
// The process must be root, and the first of a new PID namespace for
// /proc to be the instance's own.
func confine(sb *Sandbox) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("a mount namespace of its own (unshare): %w", err)
	}
	// Nothing mounted here may reach the host, nor the host's new mounts
	// reach in.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mounts private: %w", err)
	}
	// Copies of what is shown at its own path, taken before anything
	// covers it (the instance's directory may be under /tmp or the data
	// dir, both covered below).
	type bind struct {
		path string
		fd   int
		rw   bool
	}
	var binds []bind
	defer func() {
		for _, b := range binds {
			unix.Close(b.fd)
		}
	}()
	clone := func(path string, rw bool) error {
		fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("taking %s into the sandbox (open_tree): %w", path, err)
		}
		binds = append(binds, bind{path: path, fd: fd, rw: rw})
		return nil
	}
	for _, p := range sb.Writable {
		if err := clone(p, true); err != nil {
			return err
		}
	}
	for _, p := range sb.ReadOnly {
		if err := clone(p, false); err != nil {
			return err
		}
	}
	devs := map[string]int{}
	for _, d := range devices {
		fd, err := unix.OpenTree(unix.AT_FDCWD, "/dev/"+d, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fmt.Errorf("taking /dev/%s into the sandbox: %w", d, err)
		}
		devs[d] = fd
	}
	defer func() {
		for _, fd := range devs {
			unix.Close(fd)
		}
	}()

	// The host, read-only.
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", unix.AT_RECURSIVE, &unix.MountAttr{
		Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}); err != nil {
		return fmt.Errorf("making the host read-only (mount_setattr): %w", err)
	}
	tmpfs := func(path, opts string, flags uintptr) error {
		if sb.TmpBytes > 0 && !strings.Contains(opts, "size=") {
			opts += ",size=" + strconv.FormatInt(sb.TmpBytes, 10)
		}
		if err := unix.Mount("tmpfs", path, "tmpfs", flags, opts); err != nil {
			return fmt.Errorf("a private %s (tmpfs): %w", path, err)
		}
		return nil
	}
	const private = unix.MS_NOSUID | unix.MS_NODEV
	if err := tmpfs("/tmp", "mode=1777", private); err != nil {
		return err
	}
	if st, err := os.Lstat("/var/tmp"); err == nil && st.IsDir() {
		if err := tmpfs("/var/tmp", "mode=1777", private); err != nil {
			return err
		}
	}
	// /dev: the harmless devices, a private /dev/shm, the usual links.
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("a private /dev (tmpfs): %w", err)
	}
	for _, d := range devices {
		p := "/dev/" + d
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			return fmt.Errorf("/dev/%s: %w", d, err)
		}
		if err := unix.MoveMount(devs[d], "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("/dev/%s (move_mount): %w", d, err)
		}
		if err := unix.MountSetattr(unix.AT_FDCWD, p, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC, Attr_clr: unix.MOUNT_ATTR_NODEV}); err != nil {
			return fmt.Errorf("/dev/%s (mount_setattr): %w", d, err)
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, "/dev/"+name); err != nil {
			return fmt.Errorf("/dev/%s: %w", name, err)
		}
	}
	if err := os.Mkdir("/dev/shm", 0o1777); err != nil {
		return fmt.Errorf("/dev/shm: %w", err)
	}
	if err := tmpfs("/dev/shm", "mode=1777", private|unix.MS_NOEXEC); err != nil {
		return err
	}
	// What must not be seen: an empty directory in its place, or for a
	// file, an empty one (the sandbox's /dev/null).
	var hide []string
	for _, p := range slices.Sorted(slices.Values(sb.Hide)) { // parents before what is under them
		st, err := os.Stat(p)
		if err == nil && !st.IsDir() {
			if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("hiding %s (bind): %w", p, err)
			}
			if err := unix.MountSetattr(unix.AT_FDCWD, p, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOEXEC}); err != nil {
				return fmt.Errorf("hiding %s (mount_setattr): %w", p, err)
			}
			continue
		}
		if err := mkdirAll(p); err != nil {
			return fmt.Errorf("hiding %s: %w", p, err)
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
			return fmt.Errorf("hiding %s (tmpfs): %w", p, err)
		}
		hide = append(hide, p)
	}
	// What is shown at its own path, in order of depth.
	slices.SortFunc(binds, func(a, b bind) int { return strings.Compare(a.path, b.path) })
	for _, b := range binds {
		if err := mkdirAll(b.path); err != nil {
			return fmt.Errorf("showing %s: %w", b.path, err)
		}
		if err := unix.MoveMount(b.fd, "", unix.AT_FDCWD, b.path, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("showing %s (move_mount): %w", b.path, err)
		}
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_RDONLY}
		if b.rw {
			attr = &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Attr_clr: unix.MOUNT_ATTR_RDONLY}
		}
		if err := unix.MountSetattr(unix.AT_FDCWD, b.path, unix.AT_RECURSIVE, attr); err != nil {
			return fmt.Errorf("showing %s (mount_setattr): %w", b.path, err)
		}
	}
	// The directories made for hiding and showing stay as they are.
	for _, p := range append(hide, "/dev") {
		if err := unix.MountSetattr(unix.AT_FDCWD, p, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return fmt.Errorf("making %s read-only: %w", p, err)
		}
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("the instance's own /proc: %w", err)
	}
	if sb.Network == "none" {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("a network namespace of its own (unshare): %w", err)
		}
		if err := loopbackUp(); err != nil {
			return fmt.Errorf("its loopback interface: %w", err)
		}
	}
	// No way back to privileges: nothing it runs may gain any (setuid
	// bits, file capabilities), whatever the uid.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	last := lastCap()
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}

// mkdirAll makes p and its parents where missing (inside a tmpfs of the
// sandbox: the host is read-only by then).
func mkdirAll(p string) error {
	if st, err := os.Stat(p); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%s is not a directory", p)
		}
		return nil
	}
	return os.MkdirAll(p, 0o755)
}

// lastCap is the highest capability this kernel knows.
func lastCap() int {
	data, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && n > 0 && n < 64 {
			return n
		}
	}
	return unix.CAP_LAST_CAP
}

// loopbackUp brings lo up in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
