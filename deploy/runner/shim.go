package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// The environment markers of the two roles this executable may play.
const (
	shimEnv  = "GRIDMGR_RUNNER_SHIM"  // the supervisor of one instance: its state dir
	execEnv  = "GRIDMGR_RUNNER_EXEC"  // join a cgroup, become the user, exec: the spec (JSON)
	readyEnv = "GRIDMGR_RUNNER_READY" // the exec helper's fd that closes on exec
)

// What the exec helper prints, with execFailedCode, when it could not
// exec the program.
const (
	execFailed     = "gridmgr-runner: "
	execFailedCode = 127
)

// MaybeShim plays the supervisor or the exec helper when this process was
// started as one, and never returns then. main (and TestMain of any test
// that runs applications) must call it first.
func MaybeShim() {
	if dir := os.Getenv(shimEnv); dir != "" {
		os.Exit(shimMain(dir))
	}
	if spec := os.Getenv(execEnv); spec != "" {
		execMain(spec)
	}
}

// execMain joins the instance's cgroup, lowers its priority, becomes the
// instance's user and execs the program: the program starts inside its
// limits and nothing of this helper stays.
func execMain(specJSON string) {
	// Started by a shim, fd 3 tells it whether the exec happened: it
	// closes on exec (nothing read), or carries the reason it did not.
	var ready *os.File
	if os.Getenv(readyEnv) == "3" {
		syscall.CloseOnExec(3)
		ready = os.NewFile(3, "ready")
	}
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, execFailed+format+"\n", args...)
		if ready != nil {
			fmt.Fprintf(ready, format, args...)
		}
		os.Exit(execFailedCode)
	}
	var ss shimSpec
	if err := json.Unmarshal([]byte(specJSON), &ss); err != nil {
		fail("bad spec: %v", err)
	}
	g, err := openGroup(ss.Version, ss.Cgroup, Limits{}, false)
	if err != nil {
		fail("cgroup %s: %v", ss.Cgroup, err)
	}
	if err := g.add(os.Getpid()); err != nil {
		fail("joining the cgroup %s: %v", ss.Cgroup, err)
	}
	if ss.Nice > 0 {
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, 0, ss.Nice); err != nil {
			fail("nice %d: %v", ss.Nice, err)
		}
	}
	if err := os.Chdir(ss.Dir); err != nil {
		fail("working directory: %v", err)
	}
	if ss.SetUser {
		if err := syscall.Setgroups(nil); err != nil {
			fail("setgroups: %v", err)
		}
		if err := syscall.Setgid(int(ss.GID)); err != nil {
			fail("setgid %d: %v", ss.GID, err)
		}
		if err := syscall.Setuid(int(ss.UID)); err != nil {
			fail("setuid %d: %v", ss.UID, err)
		}
	}
	err = syscall.Exec(ss.Path, ss.Command, ss.Env)
	fail("running %s: %v", ss.Command[0], err)
}

// shimMain supervises one instance: it starts the program (through the
// exec helper, in its own process group), records each exit, restarts it
// by its policy, rotates its logs, and stops it on SIGTERM.
func shimMain(dir string) int {
	ready := os.NewFile(3, "ready")
	tell := func(s string) {
		if ready != nil {
			fmt.Fprintln(ready, s)
			ready.Close()
			ready = nil
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "spec.json"))
	if err != nil {
		tell("error: " + err.Error())
		return 1
	}
	var ss shimSpec
	if err := json.Unmarshal(data, &ss); err != nil {
		tell("error: bad spec: " + err.Error())
		return 1
	}
	g, err := openGroup(ss.Version, ss.Cgroup, Limits{}, false)
	if err != nil {
		tell("error: " + err.Error())
		return 1
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	st := shimState{ShimPid: os.Getpid(), State: StateStarting}
	save := func() { _ = writeJSON(filepath.Join(dir, "state.json"), &st) }
	self, err := os.Executable()
	if err != nil {
		tell("error: " + err.Error())
		return 1
	}
	open := func(name string) (*os.File, error) {
		return os.OpenFile(filepath.Join(ss.LogDir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	}
	stdout, err := open("stdout.log")
	if err != nil {
		tell("error: " + err.Error())
		return 1
	}
	stderr, err := open("stderr.log")
	if err != nil {
		tell("error: " + err.Error())
		return 1
	}
	go rotate(ss.LogDir, ss.LogMax, ss.LogKeep)
	specJSON, _ := json.Marshal(&ss)
	backoff := 100 * time.Millisecond
	for {
		cmd := exec.Command(self)
		cmd.Env = []string{execEnv + "=" + string(specJSON), readyEnv + "=3"}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		pr, pw, err := os.Pipe()
		if err != nil {
			tell("error: " + err.Error())
			return 1
		}
		cmd.ExtraFiles = []*os.File{pw}
		ooms := g.oomKills()
		err = cmd.Start()
		pw.Close()
		var why []byte
		if err == nil {
			why, _ = io.ReadAll(io.LimitReader(pr, 4096)) // EOF at the exec
		}
		pr.Close()
		if err != nil || len(why) > 0 {
			if err == nil {
				err = errors.New(string(why))
				_ = cmd.Wait()
			}
			st.State, st.LastExit = StateFailed, "cannot start: "+err.Error()
			save()
			tell("error: " + st.LastExit)
			return 1
		}
		st.State, st.AppPid, st.Started = StateRunning, cmd.Process.Pid, time.Now().UTC()
		save()
		tell("ok")
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		var werr error
		select {
		case werr = <-exited:
		case <-stop:
			st.State = StateStopping
			save()
			_ = g.thaw()
			_ = syscall.Kill(-cmd.Process.Pid, ss.StopSignal)
			select {
			case werr = <-exited:
			case <-time.After(ss.StopGrace):
				_ = killAll(g)
				werr = <-exited
			}
			_ = killAll(g)
			st.State, st.LastExit = StateStopped, exitText(werr, false)
			save()
			return 0
		}
		oom := g.oomKills() > ooms
		_ = killAll(g) // what it left behind goes with it
		st.LastExit = exitText(werr, oom)
		switch {
		case oom:
			st.State = StateOOMKilled
		case werr == nil:
			st.State = StateExited
		default:
			st.State = StateFailed
		}
		// An exec that failed (no such program) is not worth retrying.
		var ee *exec.ExitError
		if errors.As(werr, &ee) && ee.ExitCode() == execFailedCode {
			save()
			return 0
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

// exitText says how a process ended: "exit 1", "signal KILL", "oom-killed".
func exitText(err error, oom bool) string {
	if oom {
		return "oom-killed"
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return err.Error()
		}
		return "exit 0"
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "signal " + signalName(ws.Signal())
	}
	return "exit " + strconv.Itoa(ee.ExitCode())
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "KILL"
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGINT:
		return "INT"
	case syscall.SIGSEGV:
		return "SEGV"
	case syscall.SIGABRT:
		return "ABRT"
	}
	return strconv.Itoa(int(s))
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
