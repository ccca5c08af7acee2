package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/deploy"
	"github.com/gridmgr/gridmgr/node/render"
	"github.com/gridmgr/gridmgr/wire"
)

// appCommands are the subcommands of `gridmgr app`.
var appCommands = []subcommand{
	{"pack", "DIR [-o FILE]", "check an application's directory (app.toml and its files) and write it as one bundle", cmdAppPack},
	{"check", "FILE", "check a bundle as a manager would before installing it, and show what it holds", cmdAppCheck},
	{"install", "RESERVATION BUNDLE", "upload a bundle to the owner of a reservation you hold and install it", cmdAppInstall},
	{"start", "INSTANCE [ARG...]", "start an installed instance, confined, within its reservation's limits", cmdAppStart},
	{"stop", "INSTANCE", "stop an instance: its stop signal, then SIGKILL after its grace", instanceCommand("stop", wire.AppRequest_OP_STOP,
		"Stop an instance: its stop signal (run.stop_signal) to its processes, then\n"+
			"SIGKILL to all of them after run.stop_grace. It stays installed.", 2*time.Minute)},
	{"pause", "INSTANCE", "freeze an instance's processes (cgroup freezer)", instanceCommand("pause", wire.AppRequest_OP_PAUSE,
		"Freeze every process of an instance (the cgroup freezer): they keep their\n"+
			"memory and use no CPU until 'gridmgr app resume'.", 30*time.Second)},
	{"resume", "INSTANCE", "thaw what pause froze", instanceCommand("resume", wire.AppRequest_OP_RESUME,
		"Thaw the processes 'gridmgr app pause' froze.", 30*time.Second)},
	{"status", "INSTANCE", "an instance's state, pids, CPU, memory, ports and own values", instanceCommand("status", wire.AppRequest_OP_STATUS,
		"Show an instance's process data: state, pids, CPU and memory used (from its\n"+
			"cgroup) against what was reserved, its ports, restarts and last exit, and\n"+
			"the values its app.toml's [values] scheme reports.", 30*time.Second)},
	{"logs", "INSTANCE [-f]", "what an instance wrote (-f follows)", cmdAppLogs},
	{"idle", "INSTANCE", "ask an instance whether it is idle", cmdAppIdle},
	{"exec-op", "INSTANCE OP [ARG…]", "run one of an application's own operations", cmdAppExec},
	{"put", "INSTANCE LOCAL REMOTE", "give a file to an application (into its data.in)", cmdAppPut},
	{"get", "INSTANCE LOCAL REMOTE", "take a file from an application (from its data.out)", cmdAppGet},
	{"remove", "INSTANCE", "stop an instance and undo every change it made", cmdAppRemove},
	{"list", "[--all | --grid]", "the instances at one manager, in its subtree (--all) or in the whole grid (--grid)", cmdAppList},
}

func cmdApp(c *cli, args []string) error {
	return runGroup(c, "app", "Applications arrive at a manager as one bundle: a zip archive of their files\n"+
		"with an app.toml manifest at its root (deploy/examples/hello/app.toml shows\n"+
		"every key).", appCommands, args)
}

func cmdAppPack(c *cli, args []string) error {
	fl := c.newFlags("app pack", "DIR [-o FILE] [--deflate]",
		"Check an application's directory — its app.toml and every file the manifest\n"+
			"places — and write it as one bundle (a zip archive), its files compressed\n"+
			"with Zstandard. The same files always give the same bytes, so the bundle's\n"+
			"sha256 names its content. A symbolic link or a special file in DIR is an\n"+
			"error. An existing FILE is not overwritten. A manager of an older version,\n"+
			"which reads no Zstandard, is sent a deflated copy by whoever sends it the\n"+
			"bundle.")
	out := fl.String("o", "", "bundle to write (default NAME-VERSION.gapp in the current directory)")
	useDeflate := fl.Bool("deflate", false, "compress with deflate instead of Zstandard: a bundle that any zip tool reads (Info-ZIP's unzip reads no Zstandard), installed more slowly (10 MB of an executable in about 55 ms instead of 25)")
	useZstd := fl.Bool("zstd", false, "compress with Zstandard (the default)")
	pos, err := parse(fl, args, 1)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageErr("say which directory to pack\n%s", fl.seeHelp())
	}
	if *useDeflate && *useZstd {
		return usageErr("--deflate and --zstd: choose one compression\n%s", fl.seeHelp())
	}
	dir := pos[0]
	if st, err := os.Stat(dir); err != nil {
		return usageErr("cannot read %s", fileErr(err))
	} else if !st.IsDir() {
		return usageErr("%s is not a directory: give the application's directory (its app.toml and files)", dir)
	}
	// Pack into a temporary file beside the target, then link it in place:
	// a failed pack leaves nothing, and an existing file is never replaced.
	where := filepath.Dir(orDefault(*out, "."))
	tmp, err := os.CreateTemp(where, ".gapp-*")
	if err != nil {
		// The temporary file's name means nothing to the user: say which
		// file could not be written, and why.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		if _, serr := os.Stat(where); errors.Is(serr, fs.ErrNotExist) {
			return usageErr("cannot write %s: there is no directory %s", orDefault(*out, "the bundle"), where)
		}
		return fmt.Errorf("cannot write %s in %s: %s", orDefault(*out, "the bundle"), where, plainError(err))
	}
	defer os.Remove(tmp.Name())
	m, err := deploy.PackWith(dir, tmp, deploy.PackOptions{Zstd: !*useDeflate})
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return usageErr("%s", err)
	}
	path := *out
	if path == "" {
		path = fmt.Sprintf("%s-%s.gapp", m.Name, safeVersion(m.Version))
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			if *out != "" {
				return usageErr("%s exists; not overwriting it (remove it first, or name another file with -o)", path)
			}
			return usageErr("%s exists; not overwriting it (remove it first, or name another file with -o FILE)", path)
		}
		return fmt.Errorf("cannot write %s", fileErr(err))
	}
	b, err := openBundle(path, false) // written by Pack: its entries are sound
	if err != nil {
		return err
	}
	method := "Zstandard"
	if *useDeflate {
		method = "deflated"
	}
	fmt.Fprintf(c.stdout, "packed %s %s (class %s): %d files, %s expanded, %s bundle (%s)\nsha256 %s\nwrote %s\n",
		m.Name, m.Version, m.Class, countFiles(b), render.Bytes(uint64(b.Expanded)), render.Bytes(uint64(b.Size)), method, b.SHA256, path)
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// safeVersion makes a version usable in a file name.
func safeVersion(v string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == ' ' || r < 0x20 {
			return '_'
		}
		return r
	}, v)
}

func countFiles(b *deploy.Bundle) int {
	n := 0
	for _, e := range b.Files {
		if !e.Dir {
			n++
		}
	}
	return n
}

// fileErr says what went wrong with a file as "PATH: why" ("open" and
// the like are the system call's, not the user's, words).
func fileErr(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Path + ": " + pe.Err.Error()
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.New + ": " + le.Err.Error()
	}
	return plainError(err)
}

// openBundle opens and checks the bundle at path, as a manager does
// before installing it; with verify, it also reads every file in it, as
// installing does.
func openBundle(path string, verify bool) (*deploy.Bundle, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageErr("cannot read the bundle %s", fileErr(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, usageErr("%s is a directory: give a bundle ('gridmgr app pack %s' makes one of it)", path, path)
	}
	b, err := deploy.Open(f, st.Size(), deploy.Limits{})
	if err == nil && verify {
		err = b.Verify()
	}
	if err != nil {
		return nil, usageErr("%s: %s", path, strings.TrimPrefix(err.Error(), deploy.ErrBadBundle.Error()+": "))
	}
	return b, nil
}

func cmdAppCheck(c *cli, args []string) error {
	fl := c.newFlags("app check", "FILE",
		"Check a bundle as a manager does before installing it — every entry a\n"+
			"relative path inside the application, only files and directories, within\n"+
			"the size, count and compression limits, a valid app.toml whose files are\n"+
			"all there — reads every file as installing it does (its compression, size\n"+
			"and checksum), and shows what it holds. Nothing is written.")
	pos, err := parse(fl, args, 1)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageErr("say which bundle to check\n%s", fl.seeHelp())
	}
	b, err := openBundle(pos[0], true)
	if err != nil {
		return err
	}
	m := b.Manifest
	w := c.stdout
	fmt.Fprintf(w, "%s %s (class %s): ok\n", m.Name, m.Version, m.Class)
	if m.Description != "" {
		fmt.Fprintf(w, "  %s\n", m.Description)
	}
	method := "deflated"
	if b.Zstd() {
		method = "Zstandard"
	}
	fmt.Fprintf(w, "files      %d (%s expanded, %s bundle, %s)\nsha256     %s\n", countFiles(b), render.Bytes(uint64(b.Expanded)), render.Bytes(uint64(b.Size)), method, b.SHA256)
	fmt.Fprintf(w, "installs   %s on disk per instance, before what it writes (counted against its disk limit)\n",
		render.Bytes(uint64(b.PlacedBy(m.Install.Files, m.Install.Dirs))))
	if m.Network == "none" {
		fmt.Fprintf(w, "network    none: a network namespace of its own, loopback only\n")
	}
	fmt.Fprintf(w, "run        %s (stop: %s, then SIGKILL after %s; restart: %s)\n",
		strings.Join(m.Run.Command, " "), m.Run.StopSignal, m.Run.StopGrace.D(), m.Run.Restart)
	if len(m.Install.Ports) > 0 {
		fmt.Fprintf(w, "ports      %s\n", strings.Join(m.Install.Ports, ", "))
	}
	var ops []string
	for _, op := range m.Operations {
		ops = append(ops, op.Name)
	}
	if len(ops) > 0 {
		fmt.Fprintf(w, "operations %s\n", strings.Join(ops, ", "))
	}
	var vals []string
	for _, v := range m.Values.Values {
		vals = append(vals, v.Name+" ("+v.Type+")")
	}
	if len(vals) > 0 {
		fmt.Fprintf(w, "values     %s\n", strings.Join(vals, ", "))
	}
	return nil
}
