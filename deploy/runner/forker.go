package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// forker starts the processes of one instance from a thread of their
// own: the thread that confine made the sandbox's (its mount namespace,
// network namespace, no_new_privs, empty bounding set, nice). Each child
// is forked from it into the instance's cgroup and execs as the
// instance's uid and gid, with no supplementary groups, in a session of
// its own. Forks take turns.
type forker struct {
	reqs   chan forkReq
	reaper *reaper
}

type forkReq struct {
	cg    *cgroupJoin // the cgroup the child starts in
	argv  []string
	env   []string
	dir   string
	files []uintptr // stdin, stdout, stderr
	reply chan forkRes
}

type forkRes struct {
	pid  int
	exit <-chan syscall.WaitStatus
	err  error
}

// startForker confines a new locked thread to ss's sandbox and serves
// forks from it; it returns once the sandbox is made, or why it could
// not be.
func startForker(ss *shimSpec, rp *reaper) (*forker, error) {
	f := &forker{reqs: make(chan forkReq), reaper: rp}
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // for good: this thread is the sandbox's
		if ss.Nested {
			// The sandbox is the one this manager runs in.
		} else if err := confine(&ss.Sandbox); err != nil {
			ready <- err
			return // the locked thread ends with the goroutine
		}
		if ss.Nice > 0 {
			// Per thread on Linux; children inherit it.
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, 0, ss.Nice); err != nil {
				ready <- fmt.Errorf("nice %d: %w", ss.Nice, err)
				return
			}
		}
		ready <- nil
		for req := range f.reqs {
			req.reply <- f.fork(ss, req)
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return f, nil
}

// start forks argv into cg (its exit comes on the returned channel).
func (f *forker) start(cg *cgroupJoin, argv, env []string, dir string, files []uintptr) (int, <-chan syscall.WaitStatus, error) {
	reply := make(chan forkRes, 1)
	f.reqs <- forkReq{cg: cg, argv: argv, env: env, dir: dir, files: files, reply: reply}
	res := <-reply
	return res.pid, res.exit, res.err
}

func (f *forker) fork(ss *shimSpec, req forkReq) forkRes {
	path, err := lookPath(req.dir, req.argv, req.env)
	if err != nil {
		return forkRes{err: err}
	}
	attr := &syscall.ProcAttr{
		Dir:   req.dir,
		Env:   req.env,
		Files: req.files,
		Sys: &syscall.SysProcAttr{
			Setsid:     true,
			Credential: &syscall.Credential{Uid: ss.UID, Gid: ss.GID, Groups: []uint32{}},
		},
	}
	leave := func() error { return nil }
	if ss.Nested {
		// As the manager's own uid (it may not change it); killed if
		// the shim (this thread) ends, the keeper's cleanup aside.
		attr.Sys.Credential = nil
		attr.Sys.Pdeathsig = syscall.SIGKILL
	} else if leave, err = req.cg.enter(attr.Sys); err != nil {
		return forkRes{err: err}
	}
	pid, err := syscall.ForkExec(path, req.argv, attr)
	if lerr := leave(); lerr != nil && err == nil {
		// The child is in its cgroup; this thread may not have left it.
		// Say so, but the child runs.
		fmt.Fprintf(os.Stderr, "leaving the instance's cgroup: %v\n", lerr)
	}
	if err != nil {
		return forkRes{err: startError(req.argv[0], err)}
	}
	return forkRes{pid: pid, exit: f.reaper.wait(pid)}
}

// startError says in words why argv0 could not be started.
func startError(argv0 string, err error) error {
	switch {
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%s: permission denied (the program, and every directory on its way, must be executable by the instance's user)", argv0)
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("%s: no such file (for a script, its interpreter must exist on the host)", argv0)
	case errors.Is(err, syscall.ENOEXEC):
		return fmt.Errorf("%s: not a program this host can run (a script needs a #! line)", argv0)
	case errors.Is(err, syscall.EAGAIN):
		return fmt.Errorf("%s: the reservation has as many processes as it may (apps.max_pids)", argv0)
	}
	return fmt.Errorf("%s: %w", argv0, err)
}

// lookPath finds the program of argv as the sandbox sees it: relative to
// dir when it has a '/', else on the PATH of env.
func lookPath(dir string, argv, env []string) (string, error) {
	if len(argv) == 0 || argv[0] == "" {
		return "", errors.New("no command to run")
	}
	p := argv[0]
	if strings.Contains(p, "/") {
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		st, err := os.Stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("the program %s does not exist (as the application sees the host)", argv[0])
		case err != nil:
			return "", fmt.Errorf("the program %s: %w", argv[0], err)
		case st.IsDir() || st.Mode().Perm()&0o111 == 0:
			return "", fmt.Errorf("the program %s is not executable", argv[0])
		}
		return p, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		c := filepath.Join(d, p)
		if st, err := os.Stat(c); err == nil && !st.IsDir() && st.Mode().Perm()&0o111 != 0 {
			return c, nil
		}
	}
	return "", fmt.Errorf("the program %q is not on the PATH (%s)", p, path)
}
