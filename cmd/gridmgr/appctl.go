package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/node/p2p/transfer"
	"github.com/gridmgr/gridmgr/node/render"
	"github.com/gridmgr/gridmgr/wire"
)

// The commands that act on applications at the manager that owns their
// reservation: the CLI finds it from the reservation number, through the
// manager given with -n or -d.

// appTarget is addTarget with a longer default timeout (installs and
// stops take a while).
func appTarget(fs *flagSet, timeout time.Duration) *target {
	t := addTarget(fs, true)
	*t.timeout = timeout
	fs.Lookup("timeout").DefValue = text.FormatDuration(timeout)
	return t
}

// appClient is withClient for the app subcommands, with the arguments
// checked before the manager is asked: fewer than minArgs is a usage
// error that says what is missing (missing), and check (if set) says
// what is wrong with them — so a stranger learns what to give before
// being asked which manager.
func appClient(fs *flagSet, t *target, args []string, minArgs, maxArgs int, missing string, check func(pos []string) error,
	fn func(ctx context.Context, cl *client.Client, pos []string) error) error {
	pos, err := parse(fs, args, maxArgs)
	if err != nil {
		return err
	}
	if len(pos) < minArgs {
		return usageErr("%s\n%s", missing, fs.seeHelp())
	}
	if check != nil {
		if err := check(pos); err != nil {
			return err
		}
	}
	// The flags are parsed: withClient parses nothing more.
	return withClient(fs, t, nil, 0, func(ctx context.Context, cl *client.Client, _ []string) error {
		return fn(ctx, cl, pos)
	})
}

// checkInstance is a usage error unless id is RESERVATION.APP.
func checkInstance(id string) error {
	if _, _, err := client.SplitInstance(id); err != nil {
		return usageErr("%v", err)
	}
	return nil
}

func checkFirstInstance(pos []string) error { return checkInstance(pos[0]) }

// withOwner runs fn with a session at the owner of the reservation that
// instance (RESERVATION.APP) or reservation id belongs to.
func withOwner(ctx context.Context, cl *client.Client, id string, fn func(owner *client.Client) error) error {
	res := id
	if strings.Contains(id, ".") || !strings.Contains(id, "-") {
		r, _, err := client.SplitInstance(id)
		if err != nil {
			return usageErr("%v", err)
		}
		res = r
	} else if err := client.CheckReservationID(id); err != nil {
		return usageErr("%v", err)
	}
	r := client.NewReserver(cl)
	defer r.Close()
	owner, err := r.OwnerOf(ctx, res)
	if err != nil {
		return err
	}
	return fn(owner)
}

func cmdAppInstall(c *cli, args []string) error {
	fs := c.newFlags("app install", "-n ADDR | -d DIR [flags] RESERVATION BUNDLE",
		"Upload a bundle (gridmgr app pack) to the manager that owns a committed\n"+
			"reservation you hold, and install it there as the instance\n"+
			"RESERVATION.APP. The upload is checked by its sha256 and stored once: a\n"+
			"retry, or another instance of the same bundle, sends nothing again (the\n"+
			"client remembers the hash of a bundle file not changed for 2 s before it\n"+
			"was sent, in the user's cache directory); an upload cut short resumes.\n"+
			"The manager checks the bundle before writing\n"+
			"anything, records every change it makes, and runs the install commands\n"+
			"with the reservation's limits. Start it with 'gridmgr app start'.")
	t := appTarget(fs, 5*time.Minute)
	start := fs.Bool("start", false, "start the instance once installed")
	check := func(pos []string) error {
		if res := pos[0]; strings.Contains(res, ".") || strings.HasSuffix(res, ".gapp") {
			return usageErr("%q is not a reservation number; give RESERVATION then BUNDLE", res)
		} else if err := client.CheckReservationID(res); err != nil {
			return usageErr("%v", err)
		}
		_, err := openBundle(pos[1], false) // the manager reads every file as it installs
		return err
	}
	missing := "give the reservation number (gridmgr reserve printed it) and the bundle file (gridmgr app pack wrote it)"
	return appClient(fs, t, args, 2, 2, missing, check, func(ctx context.Context, cl *client.Client, pos []string) error {
		res, file := pos[0], pos[1]
		if dir, err := os.UserCacheDir(); err == nil {
			transfer.HashCacheFile = filepath.Join(dir, "gridmgr", "bundle-hashes")
		}
		return withOwner(ctx, cl, res, func(owner *client.Client) error {
			st, _ := os.Stat(file)
			var progress func(sent, total int64)
			if st != nil && st.Size() >= 4<<20 && !*t.json {
				last := time.Time{}
				progress = func(sent, total int64) {
					if now := time.Now(); now.Sub(last) >= 500*time.Millisecond || sent == total {
						last = now
						fmt.Fprintf(c.stderr, "\ruploading %s: %s of %s (%d%%)", filepath.Base(file), render.Bytes(uint64(sent)), render.Bytes(uint64(total)), sent*100/max(total, 1))
						if sent == total {
							fmt.Fprintln(c.stderr)
						}
					}
				}
			}
			rep, err := owner.Install(ctx, file, res, progress)
			if err != nil {
				return err
			}
			ai := first(rep)
			if *start && ai != nil {
				srep, err := owner.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_START, Instance: ai.Id})
				if err != nil {
					return fmt.Errorf("installed %s, but starting it failed: %w", ai.Id, err)
				}
				rep, ai = srep, first(srep)
			}
			text := ""
			if ai != nil {
				text = fmt.Sprintf("installed %s %s as %s on %s (%d changes recorded)\n", ai.App, ai.Version, ai.Id, ai.Manager, ai.Changes)
				if *start {
					text += render.AppInstance(ai, time.Now())
				} else {
					text += fmt.Sprintf("start it: gridmgr app start %s %s\n", targetFlags(t), ai.Id)
				}
			}
			t.show(c, rep, text)
			return nil
		})
	})
}

// targetFlags repeats the -n or -d flag the user gave, for a hint.
func targetFlags(t *target) string {
	if *t.dataDir != "" {
		return "-d " + *t.dataDir
	}
	return "-n " + *t.addr
}

func first(rep *wire.AppReply) *wire.AppInstance {
	if rep == nil || len(rep.Instances) == 0 {
		return nil
	}
	return rep.Instances[0]
}

// instanceCommand makes the commands that take one instance and show it
// afterwards: start, stop, pause, resume, status.
func instanceCommand(name string, op wire.AppRequest_Op, about string, timeout time.Duration) func(c *cli, args []string) error {
	return func(c *cli, args []string) error {
		fs := c.newFlags("app "+name, "-n ADDR | -d DIR [flags] INSTANCE", about)
		t := appTarget(fs, timeout)
		return oneInstance(c, fs, t, args, op, func(_ string, rep *wire.AppReply) (string, error) {
			if ai := first(rep); ai != nil {
				return render.AppInstance(ai, time.Now()), nil
			}
			return "", nil
		})
	}
}

// oneInstance asks op of the instance args name, at its owner, and shows
// the reply as text says (text's error is the command's).
func oneInstance(c *cli, fs *flagSet, t *target, args []string, op wire.AppRequest_Op,
	text func(id string, rep *wire.AppReply) (string, error)) error {
	missing := "give one instance (RESERVATION.APP, as 'gridmgr app list' shows)"
	return appClient(fs, t, args, 1, 1, missing, checkFirstInstance, func(ctx context.Context, cl *client.Client, pos []string) error {
		return withOwner(ctx, cl, pos[0], func(owner *client.Client) error {
			rep, err := owner.App(ctx, &wire.AppRequest{Op: op, Instance: pos[0]})
			if err != nil {
				return err
			}
			out, err := text(pos[0], rep)
			t.show(c, rep, out)
			return err
		})
	})
}
func cmdAppStart(c *cli, args []string) error {
	fs := c.newFlags("app start", "-n ADDR | -d DIR [flags] INSTANCE [ARG...]",
		"Start an installed instance (RESERVATION.APP): its run.command, confined (the\n"+
			"host read-only, only its own directory writable, its own processes; see\n"+
			"docs/sandbox.md), as its reservation's uid, within the reservation's limits\n"+
			"(cpus → CPU quota, mem → memory limit, shared by the reservation's\n"+
			"applications), its output kept in rotating files (gridmgr app logs).\n\n"+
			"Where its app.toml allows it ([run] args = true, env = true), each ARG is\n"+
			"appended to the run command as one word (no shell: put -- before the first\n"+
			"that starts with -) and --env adds a variable to its environment; a start\n"+
			"without them runs the command alone. A restart (on failure, or after the\n"+
			"host or the manager restarted) uses the last start's.")
	t := appTarget(fs, time.Minute)
	var env envFlags
	fs.Var(&env, "env", "add `NAME=VALUE` to the run command's environment (repeatable; the app.toml must say [run] env = true)")
	missing := "give one instance (RESERVATION.APP, as 'gridmgr app list' shows)"
	return appClient(fs, t, args, 1, 1<<10, missing, checkFirstInstance, func(ctx context.Context, cl *client.Client, pos []string) error {
		return withOwner(ctx, cl, pos[0], func(owner *client.Client) error {
			rep, err := owner.Start(ctx, pos[0], pos[1:], env)
			if err != nil {
				return err
			}
			out := ""
			if ai := first(rep); ai != nil {
				out = render.AppInstance(ai, time.Now())
			}
			t.show(c, rep, out)
			return nil
		})
	})
}

// envFlags collects --env NAME=VALUE (repeatable): what a start adds to
// the run command's environment. The manager checks the names.
type envFlags map[string]string

func (e *envFlags) String() string { return "" }
func (e *envFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return errors.New("write NAME=VALUE, e.g. MODE=fast")
	}
	if _, dup := (*e)[k]; dup {
		return fmt.Errorf("%s is given twice", k)
	}
	if *e == nil {
		*e = envFlags{}
	}
	(*e)[k] = v
	return nil
}

func cmdAppRemove(c *cli, args []string) error {
	fs := c.newFlags("app remove", "-n ADDR | -d DIR [flags] INSTANCE",
		"Stop an instance and undo every change its installation and run made to\n"+
			"the host, newest first; the host is as it was before the install. The end\n"+
			"of the reservation (release, or its lease running out) does the same.")
	t := appTarget(fs, 2*time.Minute)
	return oneInstance(c, fs, t, args, wire.AppRequest_OP_REMOVE, func(id string, rep *wire.AppReply) (string, error) {
		return fmt.Sprintf("removed %s; host restored: %d changes undone\n", id, rep.Undone), nil
	})
}
func cmdAppList(c *cli, args []string) error {
	fs := c.newFlags("app list", "-n ADDR | -d DIR [flags]",
		"List the application instances at one manager, with their state and what\n"+
			"they use. --all lists those of its subtree: it and the managers below it,\n"+
			"not those above (at a leaf, that is the leaf alone). --grid lists those of\n"+
			"the whole grid: it climbs to the root above the manager (each root, in a\n"+
			"mesh) and lists every manager below. The last line says what was searched.")
	t := appTarget(fs, 10*time.Second)
	all := fs.Bool("all", false, "every manager of its subtree: it and those below it")
	grid := fs.Bool("grid", false, "every manager of the grid: those below the root(s) above it")
	check := func([]string) error {
		if *all && *grid {
			return usageErr("--all and --grid are exclusive: --grid is every manager, --all those under the one given")
		}
		return nil
	}
	return appClient(fs, t, args, 0, 0, "", check, func(ctx context.Context, cl *client.Client, _ []string) error {
		if !*all && !*grid {
			rep, err := cl.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_LIST})
			if err != nil {
				return err
			}
			text := render.AppList(rep.Instances)
			if len(rep.Instances) == 0 {
				text = "no applications at this manager (--all looks in its subtree, --grid in the whole grid)\n"
			}
			t.show(c, rep, text)
			return nil
		}
		r := client.NewReserver(cl)
		defer r.Close()
		ls, err := r.ListApps(ctx, *grid)
		if err != nil {
			return err
		}
		searched := appsSearched(ls, *grid)
		t.show(c, &wire.AppReply{Instances: ls.Instances, Message: searched}, render.AppList(ls.Instances)+searched+"\n")
		return nil
	})
}

// appsSearched says what app list --all or --grid searched, and who did
// not answer.
func appsSearched(ls *client.AppsListing, grid bool) string {
	searched := fmt.Sprintf("searched %s's subtree: %s", ls.Manager, managersText(ls.Searched))
	switch {
	case grid:
		searched = fmt.Sprintf("searched the whole grid, from %s: %s", rootsText(ls.From), managersText(ls.Searched))
	case ls.Root:
		searched += fmt.Sprintf(", the whole grid (%s is a root)", ls.Manager)
	default:
		searched += "; the managers above it are not searched: --grid searches the whole grid"
	}
	if len(ls.Missing) > 0 {
		var missing []string
		for _, m := range ls.Missing {
			if m.Subtree {
				missing = append(missing, fmt.Sprintf("%s and below (%s)", m.Name, plainError(m.Err)))
			} else {
				missing = append(missing, fmt.Sprintf("%s (%s)", m.Name, plainError(m.Err)))
			}
		}
		searched += "\nnot answering: " + strings.Join(missing, "; ")
	}
	return searched
}

// managersText is "3 managers (gm154, gm160, gm162)", the names left out
// past a few.
func managersText(names []string) string {
	n := fmt.Sprintf("%d managers", len(names))
	if len(names) == 1 {
		n = "1 manager"
	}
	if len(names) > 8 {
		return n
	}
	return n + " (" + strings.Join(names, ", ") + ")"
}

// rootsText is "its root gm152", or "its roots gm152 and gm200".
func rootsText(roots []string) string {
	switch len(roots) {
	case 0:
		return "nowhere"
	case 1:
		return "its root " + roots[0]
	}
	return "its roots " + strings.Join(roots[:len(roots)-1], ", ") + " and " + roots[len(roots)-1]
}

func cmdAppLogs(c *cli, args []string) error {
	fs := c.newFlags("app logs", "-n ADDR | -d DIR [flags] INSTANCE",
		"Show what an instance wrote to its standard output (or --stderr), kept by\n"+
			"its manager in rotating files. -f follows it until interrupted.")
	t := appTarget(fs, 10*time.Second)
	follow := fs.Bool("f", false, "follow: keep printing what it writes until Ctrl-C")
	stderr := fs.Bool("stderr", false, "standard error instead of standard output")
	tail := countVar(fs, "tail", 20, 0, 100_000, "show the last N lines first (0: everything kept)")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("give one instance (RESERVATION.APP, as 'gridmgr app list' shows)\n%s", fs.seeHelp())
	}
	if err := checkInstance(pos[0]); err != nil {
		return err
	}
	ctx, cancel := t.context()
	cl, err := t.dial(ctx)
	cancel()
	if err != nil {
		return err
	}
	defer cl.Close()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel = t.context()
	defer func() { cancel() }()
	return withOwner(ctx, cl, pos[0], func(owner *client.Client) error {
		offset := int64(0)
		if *tail > 0 {
			// The last lines: read the end, keep the last N.
			ctx, cancel = t.context()
			rep, err := owner.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_LOGS, Instance: pos[0], Offset: -256 << 10, Stderr: *stderr, Limit: 256 << 10})
			if err != nil {
				return err
			}
			lines := strings.SplitAfter(string(rep.Data), "\n")
			if lines[len(lines)-1] == "" {
				lines = lines[:len(lines)-1]
			}
			if len(lines) > *tail {
				lines = lines[len(lines)-*tail:]
			}
			fmt.Fprint(c.stdout, strings.Join(lines, ""))
			if !*follow {
				return nil
			}
			offset = rep.Offset
		}
		for {
			ctx, cancel = t.context()
			rep, err := owner.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_LOGS, Instance: pos[0], Offset: offset, Stderr: *stderr, Limit: 256 << 10})
			if err != nil {
				return err
			}
			_, _ = c.stdout.Write(rep.Data)
			offset = rep.Offset
			if len(rep.Data) == 256<<10 {
				continue // more is there
			}
			if !*follow {
				return nil
			}
			select {
			case <-sigs:
				return nil
			case <-time.After(500 * time.Millisecond):
			}
		}
	})
}

func cmdAppIdle(c *cli, args []string) error {
	fs := c.newFlags("app idle", "-n ADDR | -d DIR [flags] INSTANCE",
		"Ask an instance whether it is idle, the way its app.toml says ([idle]: a\n"+
			"command, an HTTP probe, or its CPU use, as a share of the cpus reserved,\n"+
			"below a threshold). Exit status 0: idle; 1: busy.")
	t := appTarget(fs, 30*time.Second)
	return oneInstance(c, fs, t, args, wire.AppRequest_OP_IDLE, func(id string, rep *wire.AppReply) (string, error) {
		if !rep.Idle {
			return fmt.Sprintf("%s: busy (%s)\n", id, rep.Output), errSilentFail
		}
		return fmt.Sprintf("%s: idle (%s)\n", id, rep.Output), nil
	})
}
func cmdAppExec(c *cli, args []string) error {
	fs := c.newFlags("app exec-op", "-n ADDR | -d DIR [flags] INSTANCE OPERATION [ARG...]",
		"Run one of the operations an application declares ([[operation]] in its\n"+
			"app.toml; 'gridmgr app status' lists them), inside its limits, and print\n"+
			"what it printed. The exit status is the operation's.")
	t := appTarget(fs, time.Minute)
	missing := "give the instance (RESERVATION.APP) and the operation ('gridmgr app status' lists its operations)"
	return appClient(fs, t, args, 2, 1<<10, missing, checkFirstInstance, func(ctx context.Context, cl *client.Client, pos []string) error {
		return withOwner(ctx, cl, pos[0], func(owner *client.Client) error {
			rep, err := owner.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_EXEC, Instance: pos[0], Operation: pos[1], Args: pos[2:]})
			if err != nil {
				return err
			}
			t.show(c, rep, rep.Output)
			if rep.ExitCode != 0 {
				return exitCode(int(rep.ExitCode))
			}
			return nil
		})
	})
}

func cmdAppPut(c *cli, args []string) error {
	fs := c.newFlags("app put", "-n ADDR | -d DIR [flags] INSTANCE LOCAL REMOTE",
		"Give a file to an application: copy LOCAL to REMOTE, a path inside one of\n"+
			"the directories its app.toml lists in data.in (at most 3 MiB a file).")
	t := appTarget(fs, time.Minute)
	var data []byte
	check := func(pos []string) error {
		if err := checkInstance(pos[0]); err != nil {
			return err
		}
		var err error
		data, err = readSmall(pos[1], 3<<20)
		return err
	}
	missing := "give the instance (RESERVATION.APP), the local file and the path to write in the application"
	return appClient(fs, t, args, 3, 3, missing, check, func(ctx context.Context, cl *client.Client, pos []string) error {
		return withOwner(ctx, cl, pos[0], func(owner *client.Client) error {
			rep, err := owner.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_PUT, Instance: pos[0], Path: pos[2], Data: data})
			if err != nil {
				return err
			}
			t.show(c, rep, fmt.Sprintf("put %s (%s) as %s in %s\n", pos[1], render.Bytes(uint64(len(data))), pos[2], pos[0]))
			return nil
		})
	})
}

func readSmall(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageErr("cannot read %s", fileErr(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, usageErr("%s is larger than %s, the most one put carries", path, render.Bytes(uint64(limit)))
	}
	return data, nil
}

func cmdAppGet(c *cli, args []string) error {
	fs := c.newFlags("app get", "-n ADDR | -d DIR [flags] INSTANCE LOCAL REMOTE",
		"Take an application's results: copy REMOTE, a file inside one of the\n"+
			"directories its app.toml lists in data.out, to LOCAL ('-' for standard\n"+
			"output). An existing LOCAL is not overwritten.")
	t := appTarget(fs, 5*time.Minute)
	missing := "give the instance (RESERVATION.APP), the local file to write ('-': standard output) and the path to read in the application"
	return appClient(fs, t, args, 3, 3, missing, checkFirstInstance, func(ctx context.Context, cl *client.Client, pos []string) error {
		local := pos[1]
		var w io.Writer = c.stdout
		var f *os.File
		if local != "-" {
			var err error
			f, err = os.OpenFile(local, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				if errors.Is(err, os.ErrExist) {
					return usageErr("%s exists; not overwriting it (remove it first, or name another file; '-' writes to standard output)", local)
				}
				return usageErr("cannot write %s", fileErr(err))
			}
			w = f
		}
		err := withOwner(ctx, cl, pos[0], func(owner *client.Client) error {
			var off int64
			for {
				rep, err := owner.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_GET, Instance: pos[0], Path: pos[2], Offset: off})
				if err != nil {
					return err
				}
				if _, err := w.Write(rep.Data); err != nil {
					return err
				}
				off += int64(len(rep.Data))
				if off >= rep.Offset || len(rep.Data) == 0 {
					if f != nil {
						fmt.Fprintf(c.stderr, "got %s (%s) from %s\n", local, render.Bytes(uint64(off)), pos[0])
					}
					return nil
				}
			}
		})
		if f != nil {
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				_ = os.Remove(local)
			}
		}
		return err
	})
}

// exitCode is an error that makes the CLI exit with status n, silently.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

var errSilentFail = exitCode(1)
