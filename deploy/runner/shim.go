package runner

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gridmgr/gridmgr/internal/memtrim"
)

// standbyEnv marks a process started as a runner's standby: this same
// executable, waiting on fd 3 for what to become (a shim, a one-shot
// exec, a probe). Its value is the runner's state directory.
const standbyEnv = "GRIDMGR_RUNNER_STANDBY"

// nestedEnv marks a nested runner's standby (Options.Nested): with
// nestedKeeper, the keeper that starts it; with nestedStandby, the
// standby itself.
const (
	nestedEnv     = "GRIDMGR_RUNNER_NESTED"
	nestedKeeper  = "keeper"
	nestedStandby = "standby"
)

// standbyIdle is how long a standby waits to be used before it ends.
const standbyIdle = 10 * time.Minute

// activation is what a runner tells a standby (one JSON line on fd 3).
type activation struct {
	Op   string    `json:"op"`             // "shim", "exec" or "probe"
	Dir  string    `json:"dir,omitempty"`  // shim: the instance's state directory (spec.json)
	Spec *shimSpec `json:"spec,omitempty"` // exec, probe
	Exec *execReq  `json:"exec,omitempty"` // exec
}

// execReq asks for one command in an instance's sandbox, cgroup and
// user: a one-shot's activation, or a request on a running shim's
// control socket.
type execReq struct {
	Argv      []string `json:"argv"`
	TimeoutMs int64    `json:"timeout_ms"`
	MaxOutput int      `json:"max_output"`
}

// execReply is its answer; Error is set when the command could not run
// (Code then means nothing) or did not end in time.
type execReply struct {
	Output []byte `json:"output,omitempty"`
	Code   int    `json:"code"`
	Error  string `json:"error,omitempty"`
}

// startReply answers a shim's activation once its program runs (or
// could not start) and a probe.
type startReply struct {
	Error string `json:"error,omitempty"`
}

// A process started as a runner's standby becomes one before anything
// else of its program runs: package initialisation reaches here before
// main (or a test binary's TestMain), whatever program links this
// package, and before the packages this one does not need are
// initialised. So any binary that can start applications is also their
// supervisor, with nothing for its main to do.
func init() {
	if os.Getenv(standbyEnv) != "" {
		switch os.Getenv(nestedEnv) {
		case nestedKeeper:
			os.Exit(keeperMain())
		case nestedStandby:
			os.Exit(standbyMain(true))
		}
		os.Exit(standbyMain(false))
	}
}

// keeperMain is the first process of a nested runner's standby: a child
// subreaper that starts the standby (this executable again, in a session
// of its own, handing it fd 3) and reaps. When the standby — a shim, a
// one-shot — ends, by itself or by kill -9, every process it left below
// it is given to the keeper, which SIGKILLs them all and ends once it
// has no child left: so nothing an instance started outlives its shim,
// with no PID namespace to take it down.
func keeperMain() int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "gridmgr keeper: child subreaper:", err)
		return 1
	}
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE, syscall.SIGINT)
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gridmgr keeper:", err)
		return 1
	}
	env := []string{standbyEnv + "=" + os.Getenv(standbyEnv), nestedEnv + "=" + nestedStandby}
	pid, err := syscall.ForkExec(self, []string{self}, &syscall.ProcAttr{
		Env: env, Files: []uintptr{0, 1, 2, 3}, Sys: &syscall.SysProcAttr{Setsid: true}})
	// Only the standby holds the runner's end now: it sees the standby
	// go when it goes.
	_ = syscall.Close(3)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gridmgr keeper: starting the standby:", err)
		return 1
	}
	// From here on it only waits: what starting touched of the
	// executable goes back to the page cache.
	_, _ = memtrim.Executable()
	code, ended := 0, false
	for {
		if ended {
			signalTree(os.Getpid(), syscall.SIGKILL) // the waits below reap them
		}
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil { // ECHILD: nothing is left below the keeper
			return code
		}
		if wpid == pid {
			ended, code = true, ws.ExitStatus()
		}
	}
}

func standbyMain(nested bool) int {
	if nested {
		// Orphans of the instance come to this process, not to the
		// keeper above it, while it lives.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			fmt.Fprintln(os.Stderr, "gridmgr standby: child subreaper:", err)
			return 1
		}
	} else if os.Getpid() != 1 {
		// Everything below relies on being the first process of a PID
		// namespace of its own (kill(-1) must reach only the instance).
		fmt.Fprintln(os.Stderr, "gridmgr standby: not the first process of a PID namespace of its own; refusing to act")
		return 1
	}
	f := os.NewFile(3, "runner")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gridmgr standby: fd 3:", err)
		return 1
	}
	defer c.Close()
	// The control socket a shim will answer on, bound now. It is an
	// abstract one (no file: nothing to clean up after a kill -9, nothing
	// written to disk, which is the slowest thing a start does on some
	// hosts); only the manager's uid's connections are served
	// (serveControl).
	var nonce [12]byte
	_, _ = rand.Read(nonce[:])
	sock := controlPrefix + hex.EncodeToString(nonce[:])
	l, lerr := net.Listen("unix", sock)
	_ = c.SetReadDeadline(time.Now().Add(standbyIdle))
	_, _ = memtrim.Executable()
	r := bufio.NewReader(c)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return 0 // unused, or the manager went: nothing to do
	}
	_ = c.SetReadDeadline(time.Time{})
	var act activation
	if err := json.Unmarshal(line, &act); err != nil {
		reply(c, startReply{Error: "bad activation: " + err.Error()})
		return 1
	}
	switch act.Op {
	case "shim":
		if act.Spec == nil {
			reply(c, startReply{Error: "bad activation: no spec"})
			return 1
		}
		if act.Spec.Nested != nested {
			reply(c, startReply{Error: "bad activation: nested and not nested mixed"})
			return 1
		}
		if lerr != nil {
			reply(c, startReply{Error: "control socket: " + lerr.Error()})
			return 1
		}
		return shimMain(act.Dir, act.Spec, c, l, sock)
	case "exec":
		if act.Spec == nil || act.Exec == nil {
			reply(c, execReply{Error: "bad activation: no spec or command"})
			return 1
		}
		if act.Spec.Nested != nested {
			reply(c, execReply{Error: "bad activation: nested and not nested mixed"})
			return 1
		}
		oneShot(act.Spec, act.Exec, c, r)
		return 0
	case "probe":
		if act.Spec == nil {
			reply(c, startReply{Error: "bad activation: no spec"})
			return 1
		}
		if act.Spec.Nested != nested {
			reply(c, startReply{Error: "bad activation: nested and not nested mixed"})
			return 1
		}
		if nested {
			// It started (fork and exec work) and is a subreaper.
			var on int32
			err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&on)), 0, 0, 0)
			if err == nil && on == 0 {
				err = errors.New("not a child subreaper")
			}
			if err == nil {
				_, err = startForker(act.Spec, newReaper())
			}
			reply(c, startReply{Error: errText(err)})
			return 0
		}
		err := unix.Sethostname([]byte(act.Spec.Sandbox.Hostname))
		if err == nil {
			_, err = startForker(act.Spec, newReaper())
		}
		reply(c, startReply{Error: errText(err)})
		return 0
	}
	reply(c, startReply{Error: "bad activation: op " + strconv.Quote(act.Op)})
	return 1
}

func reply(w io.Writer, v any) {
	data, _ := json.Marshal(v)
	_, _ = w.Write(append(data, '\n'))
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// hostPid is this process's pid as the host sees it (it is 1 in its own
// PID namespace): /proc is still the host's for every thread but the
// forker's.
func hostPid() int {
	l, err := os.Readlink("/proc/self")
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(l)
	return n
}

// instance is what a shim and a one-shot share: the sandbox's forker,
// the instance's cgroup (made here, inside its group's, which gets the
// limits) and what joining it takes. Nested, there is no sandbox and no
// cgroup: the forker only forks, join is nil, and g is the tree of
// processes below this one.
type instance struct {
	fk     *forker
	join   *cgroupJoin
	g      group
	nested bool
}

// signal sends sig to every process of the instance.
func (in *instance) signal(sig syscall.Signal) {
	if in.nested {
		signalTree(os.Getpid(), sig)
		return
	}
	_ = syscall.Kill(-1, sig) // every process of the namespace
}

// waitEnd waits until no process of the instance is left, or until;
// it reports whether none is.
func (in *instance) waitEnd(until time.Time) bool {
	for {
		if in.nested {
			if len(descendants(os.Getpid())) == 0 {
				return true
			}
		} else if err := syscall.Kill(-1, 0); errors.Is(err, syscall.ESRCH) {
			return true // kill(-1) reaches every process of the namespace but this one
		}
		if !time.Now().Before(until) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killAll kills every process of the instance and waits until none is
// left.
func (in *instance) killAll() {
	if in.nested {
		_ = killTree(os.Getpid(), 10*time.Second)
		return
	}
	killNamespace()
}

// makeInstanceCgroup makes the cgroup of ss's group, with its limits,
// then the instance's inside it. The runner removes a group's cgroup
// when its last instance is removed, which may be while an instance of
// the same group starts (a job's next one on the same reservation): the
// instance's cgroup is made only inside a group cgroup that exists (not
// with MkdirAll, which would make the group's again without its limits),
// and the whole is tried again when the group's, or the parent's, went
// away meanwhile.
func makeInstanceCgroup(ss *shimSpec) (group, error) {
	parent := ss.Cgroup[:strings.LastIndexByte(ss.Cgroup, '/')]
	var err error
	for range 10 {
		if _, err = openGroup(ss.Version, parent, ss.Limits, true); err == nil {
			time.Sleep(ss.TestPause)
			var g group
			if g, err = openLeaf(ss.Version, ss.Cgroup); err == nil {
				return g, nil
			}
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return nil, err
}

// prepare makes ss's instance: the sandbox (on the forker's thread) at
// the same time as the cgroups and the host name (on this one). dir is
// the instance's state directory ("" for a one-shot).
func prepare(ss *shimSpec, dir string) (*instance, error) {
	if ss.Nested {
		fk, err := startForker(ss, newReaper())
		if err != nil {
			return nil, err
		}
		g := &treeGroup{shim: selfRef()}
		if dir != "" {
			g.marker = filepath.Join(dir, pausedMarker)
		}
		return &instance{fk: fk, g: g, nested: true}, nil
	}
	rp := newReaper()
	type confined struct {
		fk  *forker
		err error
	}
	cc := make(chan confined, 1)
	go func() {
		fk, err := startForker(ss, rp)
		cc <- confined{fk, err}
	}()
	in, err := func() (*instance, error) {
		g, err := makeInstanceCgroup(ss)
		if err != nil {
			return nil, err
		}
		join, err := openJoin(ss.Version, ss.Cgroup)
		if err != nil {
			return nil, err
		}
		if h := ss.Sandbox.Hostname; h != "" {
			if err := unix.Sethostname([]byte(h)); err != nil {
				join.close()
				return nil, fmt.Errorf("hostname: %w", err)
			}
		}
		return &instance{join: join, g: g}, nil
	}()
	c := <-cc
	if err == nil {
		err = c.err
	}
	if err != nil {
		if in != nil {
			in.join.close()
		}
		return nil, err
	}
	in.fk = c.fk
	return in, nil
}

// shimMain supervises one instance from inside its PID namespace, as its
// first process: it starts the program, records each exit, restarts it
// by its policy, rotates its logs, runs commands in the instance on
// request (its control socket), and stops it on SIGTERM. When it ends,
// the kernel kills whatever is left in the namespace.
func shimMain(dir string, ss *shimSpec, c net.Conn, l net.Listener, sock string) int {
	tell := func(msg string) {
		if c != nil {
			reply(c, startReply{Error: msg})
			c.Close()
			c = nil
		}
	}
	pid := hostPid()
	st := shimState{ShimPid: pid, ShimStart: procStart(pid), State: StateStarting, Control: sock}
	if ss.Nested {
		st.KeeperPid = os.Getppid()
		st.KeeperStart = procStart(st.KeeperPid)
	}
	save := func() { _ = writeJSON(filepath.Join(dir, "state.json"), &st) }
	fail := func(msg string) int {
		st.State, st.LastExit = StateFailed, "cannot start: "+msg
		save()
		tell(st.LastExit)
		return 1
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	in, err := prepare(ss, dir)
	if err != nil {
		return fail(err.Error())
	}
	fk, g := in.fk, in.g
	open := func(name string) (*os.File, error) {
		return os.OpenFile(filepath.Join(ss.LogDir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	}
	stdout, err := open("stdout.log")
	if err != nil {
		return fail(err.Error())
	}
	stderr, err := open("stderr.log")
	if err != nil {
		return fail(err.Error())
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return fail(err.Error())
	}
	go rotate(ss.LogDir, ss.LogMax, ss.LogKeep)
	var stopping sync.Mutex // held while stopping: no new commands
	go serveControl(l, in, ss, &stopping)

	backoff := 100 * time.Millisecond
	trimmed := false
	for {
		ooms := g.oomKills()
		appPid, exited, err := fk.start(in.join, ss.Command, ss.Env, ss.Dir, []uintptr{null.Fd(), stdout.Fd(), stderr.Fd()})
		if err != nil {
			return fail(err.Error())
		}
		// What the cgroup used before (install steps) is not the
		// program's.
		st.State, st.AppPid, st.Started, st.CPUAtStart = StateRunning, appPid, time.Now().UTC(), g.cpuNs()
		save()
		tell("")
		if !trimmed {
			// The program runs, and the manager knows: what starting
			// touched of the executable (most of it) goes back to the
			// page cache, off the start's path. A shim then holds about
			// 4 MiB of it instead of 20.
			_, _ = memtrim.Executable()
			trimmed = true
		}
		var ws syscall.WaitStatus
		select {
		case ws = <-exited:
		case <-stop:
			stopping.Lock()
			st.State = StateStopping
			save()
			_ = g.thaw()
			in.signal(ss.StopSignal) // every process of the instance
			until := time.Now().Add(ss.StopGrace)
			select {
			case ws = <-exited:
				// The program ended; what it left behind (a daemon
				// that handles the signal slowly, or ignores it) has
				// the rest of the grace, as the program had.
				in.waitEnd(until)
			case <-time.After(ss.StopGrace):
				in.signal(syscall.SIGKILL)
				ws = <-exited
			}
			in.killAll()
			st.State, st.LastExit = StateStopped, exitText(ws, false)
			save()
			return 0
		}
		oom := g.oomKills() > ooms
		in.killAll() // what it left behind goes with it
		st.LastExit = exitText(ws, oom)
		switch {
		case oom:
			st.State = StateOOMKilled
		case ws.Exited() && ws.ExitStatus() == 0:
			st.State = StateExited
		default:
			st.State = StateFailed
		}
		if st.State == StateExited || !ss.Restart.OnFailure || st.Restarts >= ss.Restart.Max {
			save()
			return 0
		}
		st.State = StateRestarting
		save()
		select {
		case <-time.After(backoff):
		case <-stop:
			st.State = StateStopped
			save()
			return 0
		}
		backoff = min(2*backoff, 5*time.Second)
		st.Restarts++
	}
}

// killNamespace kills every process of the PID namespace but this one
// (its first) and waits until none is left.
func killNamespace() {
	if os.Getpid() != 1 {
		return // never: standbyMain checked; kill(-1) outside would reach the host
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-1, syscall.SIGKILL); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// controlPrefix begins the name of every shim's abstract control
// socket.
const controlPrefix = "@gridmgr-runner-"

// fromManager says whether c's peer has this process's uid (the
// manager's: root, or a nested manager's own): an abstract socket has no
// file permissions, and an application on the host's network could
// connect to it too. (A nested instance's processes have that uid too,
// and may ask; they gain nothing they do not have.)
func fromManager(c net.Conn) bool {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
		return false
	}
	return cred.Uid == uint32(os.Geteuid())
}

func serveControl(l net.Listener, in *instance, ss *shimSpec, stopping *sync.Mutex) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			if !fromManager(c) {
				return
			}
			var req execReq
			if err := json.NewDecoder(io.LimitReader(c, 1<<20)).Decode(&req); err != nil {
				reply(c, execReply{Error: "bad request: " + err.Error()})
				return
			}
			if !stopping.TryLock() {
				reply(c, execReply{Error: "the instance is stopping"})
				return
			}
			stopping.Unlock()
			reply(c, runCommand(in, ss, &req, false))
		}()
	}
}

// oneShot runs one command in a new sandbox of the instance (it is not
// running: an install step, an operation of a stopped instance) and
// answers on c; r is c's reader, which ends when the runner goes (the
// command is then killed).
func oneShot(ss *shimSpec, req *execReq, c net.Conn, r io.Reader) {
	in, err := prepare(ss, "")
	if err != nil {
		reply(c, execReply{Error: "cannot confine the command: " + err.Error()})
		return
	}
	go func() {
		_, _ = io.Copy(io.Discard, r)
		in.killAll() // the runner went away: nobody wants the answer
		os.Exit(1)
	}()
	reply(c, runCommand(in, ss, req, true))
}

// runCommand runs req in the instance, its output captured (stdout and
// stderr together, at most MaxOutput bytes), killed at its timeout.
// Whatever it leaves running is killed when it ends: its whole session,
// or with whole, every process of the namespace.
func runCommand(in *instance, ss *shimSpec, req *execReq, whole bool) execReply {
	pr, pw, err := os.Pipe()
	if err != nil {
		return execReply{Error: err.Error()}
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		pr.Close()
		pw.Close()
		return execReply{Error: err.Error()}
	}
	pid, exited, err := in.fk.start(in.join, req.Argv, ss.Env, ss.Dir, []uintptr{null.Fd(), pw.Fd(), pw.Fd()})
	pw.Close()
	null.Close()
	if err != nil {
		pr.Close()
		return execReply{Error: err.Error()}
	}
	kill := func() {
		if whole {
			in.killAll()
		} else {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	out := &capped{max: req.MaxOutput}
	read := make(chan struct{})
	go func() {
		_, _ = io.Copy(out, pr)
		close(read)
	}()
	timeout := time.Duration(req.TimeoutMs) * time.Millisecond
	var ws syscall.WaitStatus
	select {
	case ws = <-exited:
	case <-time.After(timeout):
		kill()
		<-exited
		<-read
		pr.Close()
		return execReply{Output: out.Bytes(), Code: -1, Error: fmt.Sprintf("%s did not finish within %s", req.Argv[0], timeout)}
	}
	kill() // what it started and left behind
	select {
	case <-read:
	case <-time.After(time.Second):
	}
	pr.Close()
	code := ws.ExitStatus()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return execReply{Output: out.Bytes(), Code: code}
}

// capped keeps the first max bytes written to it.
type capped struct {
	mu sync.Mutex
	bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.Buffer.Bytes())
}

// exitText says how a process ended: "exit 1", "signal KILL", "oom-killed".
func exitText(ws syscall.WaitStatus, oom bool) string {
	switch {
	case oom:
		return "oom-killed"
	case ws.Signaled():
		return "signal " + signalName(ws.Signal())
	}
	return "exit " + strconv.Itoa(ws.ExitStatus())
}

func signalName(s syscall.Signal) string {
	name := unix.SignalName(s)
	if name == "" {
		return strconv.Itoa(int(s))
	}
	return strings.TrimPrefix(name, "SIG")
}

// rotate copies a log past max bytes to .1 (shifting older ones, keeping
// keep) and truncates it; the program writes with O_APPEND, so it goes on
// at the new end.
func rotate(dir string, max int64, keep int) {
	for range time.Tick(time.Second) {
		for _, name := range []string{"stdout.log", "stderr.log"} {
			p := filepath.Join(dir, name)
			st, err := os.Stat(p)
			if err != nil || st.Size() <= max {
				continue
			}
			for i := keep - 1; i >= 1; i-- {
				_ = os.Rename(fmt.Sprintf("%s.%d", p, i), fmt.Sprintf("%s.%d", p, i+1))
			}
			if err := copyTo(p, p+".1"); err == nil {
				_ = os.Truncate(p, 0)
			}
		}
	}
}

func copyTo(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return err
}
