// How the runner runs an instance's commands: the manifest's ${VAR}
// substitutions, the runner.Spec (sandbox, uid, cgroup limits,
// environment, stop and restart) of an instance and of its class's shared
// commands, and whether this manager can run it at all.

package deploy

import (
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gridmgr/gridmgr/deploy/runner"
	"github.com/gridmgr/gridmgr/wire"
)

// vars are the substitutions of the manifest's commands and environment.
func (e *Executor) vars(r *Record) map[string]string {
	v := map[string]string{
		"INSTANCE_DIR": e.host.InstanceDir(r.ID),
		"INSTANCE":     r.ID,
		"APP":          r.App,
		"CLASS_DIR":    e.host.ClassDir(r.Class),
	}
	for name, p := range r.Ports {
		v["PORT_"+strings.ToUpper(name)] = strconv.Itoa(int(p))
	}
	return v
}

func (e *Executor) expand(r *Record, words []string) []string {
	v := e.vars(r)
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = varRE.ReplaceAllStringFunc(w, func(s string) string { return v[s[2:len(s)-1]] })
	}
	return out
}

// spec is how the runner runs the instance's command (nil: only its
// environment, for Exec): as its reservation's uid, in its reservation's
// cgroup, in a sandbox where its own directory is writable, its class's
// readable, and the manager's data hidden.
func (e *Executor) spec(r *Record, cmd []string) runner.Spec {
	m := r.m
	dir := e.host.InstanceDir(r.ID)
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "TMPDIR=/tmp", "GRIDMGR_INSTANCE=" + r.ID, "GRIDMGR_RESERVATION=" + r.Reservation}
	for _, k := range slices.Sorted(maps.Keys(e.vars(r))) {
		env = append(env, k+"="+e.vars(r)[k])
	}
	for _, k := range slices.Sorted(maps.Keys(m.Install.Env)) {
		env = append(env, k+"="+e.expand(r, []string{m.Install.Env[k]})[0])
	}
	sb := runner.Sandbox{
		Writable: []string{dir},
		Hide:     slices.Clone(e.o.Hide),
		Network:  m.Network,
		Hostname: hostname(r.ID),
		TmpBytes: r.Mem,
	}
	if st, err := os.Stat(e.host.ClassDir(r.Class)); err == nil && st.IsDir() {
		sb.ReadOnly = []string{e.host.ClassDir(r.Class)}
	}
	return runner.Spec{
		ID:         r.ID,
		Group:      r.Reservation,
		Dir:        dir,
		Command:    cmd,
		Env:        env,
		UID:        r.UID,
		GID:        r.UID,
		Nice:       m.Run.Nice,
		Limits:     runner.Limits{CPUs: float64(r.CPUs), Mem: r.Mem, Pids: e.o.MaxPids},
		Sandbox:    sb,
		StopSignal: signalOf(m.Run.StopSignal),
		StopGrace:  time.Duration(m.Run.StopGrace),
		Restart:    runner.Restart{OnFailure: m.Run.Restart == "on-failure", Max: m.Run.MaxRestarts},
		LogDir:     e.logDir(r.ID),
		LogMax:     e.o.LogMax,
		LogKeep:    e.o.LogKeep,
	}
}

// classSpec is how the class's shared commands run: as the class's uid,
// in the class's directory (writable), with no instance directory.
func (e *Executor) classSpec(r *Record) runner.Spec {
	s := e.spec(r, nil)
	dir := e.host.ClassDir(r.Class)
	s.Dir, s.UID, s.GID = dir, r.ClassUID, r.ClassUID
	s.Sandbox.Writable, s.Sandbox.ReadOnly = []string{dir}, nil
	for i, kv := range s.Env {
		if strings.HasPrefix(kv, "HOME=") {
			s.Env[i] = "HOME=" + dir
		}
	}
	return s
}

// hostname is what an instance's processes see as the host's name: its
// id, cut to what a host name may be.
func hostname(id string) string {
	if len(id) > 64 {
		return id[:64]
	}
	return id
}

func signalOf(name string) syscall.Signal {
	switch name {
	case "SIGINT":
		return syscall.SIGINT
	case "SIGHUP":
		return syscall.SIGHUP
	case "SIGQUIT":
		return syscall.SIGQUIT
	case "SIGUSR1":
		return syscall.SIGUSR1
	case "SIGUSR2":
		return syscall.SIGUSR2
	case "SIGKILL":
		return syscall.SIGKILL
	}
	return syscall.SIGTERM
}

// runnable is instance id's record, if the manager can run it.
func (e *Executor) runnable(id string) (*Record, error) {
	r := e.get(id)
	if r == nil {
		return nil, e.notFound(id)
	}
	if err := e.canRun(); err != nil {
		return nil, err
	}
	if r.UID == 0 {
		return nil, errorf(wire.ErrorReply_CODE_CONFLICT, "%s was installed by a gridmgr that did not confine applications: remove it and install it again", id)
	}
	return r, nil
}

func (e *Executor) canRun() error {
	if e.run == nil {
		return errorf(wire.ErrorReply_CODE_UNAVAILABLE, "this manager cannot run applications: %v", e.runErr)
	}
	return nil
}
