package main

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/deploy"
	"github.com/gridmgr/gridmgr/node/render"
	"github.com/gridmgr/gridmgr/wire"
)

// demoApp is the demo's application (cmd/gridmgr/demoapp): a shell loop
// that does a little work each second and counts its rounds.
//
//go:embed demoapp
var demoApp embed.FS

// demoAppAt is the manager the demo deploys its application on.
const demoAppAt = "gm160"

// packDemoApp writes the demo application's directory and its bundle
// under dir and returns the bundle's path.
func packDemoApp(dir string) (string, error) {
	src := filepath.Join(dir, "ticker")
	err := fs.WalkDir(demoApp, "demoapp", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		to := filepath.Join(src, strings.TrimPrefix(p, "demoapp"))
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		data, err := demoApp.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, data, 0o644)
	})
	if err != nil {
		return "", err
	}
	bundle := filepath.Join(dir, "ticker.gapp")
	f, err := os.Create(bundle)
	if err != nil {
		return "", err
	}
	_, err = deploy.PackWith(src, f, deploy.PackOptions{Zstd: true}) // as gridmgr app pack does
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return bundle, err
}

// demoApps reserves 1 cpu and 256 MiB at gm160, installs the demo
// application there, starts it, shows it running with what it uses,
// pauses and resumes it, asks it for its rounds, and removes it, checking
// that the host is as before.
func demoApps(c *cli, g *demoGrid) error {
	out := c.stdout
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := g.mgrs[demoAppAt]
	cl, err := client.Connect(ctx, client.Options{Addr: m.Addr(), OneOff: true})
	if err != nil {
		return err
	}
	defer cl.Close()
	bundle, err := packDemoApp(g.dir)
	if err != nil {
		return fmt.Errorf("packing the demo application: %w", err)
	}
	before, err := deploy.Digest(daemon.InstallDirs(m.Cfg.DataDir)...)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\napplications: reserve 1 cpu and 256 MiB at %s, install the demo app there, run it, remove it\n", demoAppAt)
	res, _, err := cl.Reserve(ctx, &wire.ReserveRequest{RequestId: client.NewRequestID(), User: "demo", Commit: true,
		Amounts: []*wire.Amount{{Kind: "cpus", N: 1}, {Kind: "mem", N: 256 << 20}}})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  reserved %s\n", res.Id)
	rep, err := cl.Install(ctx, bundle, res.Id, nil)
	var re *client.RemoteError
	if errors.As(err, &re) && re.Code == wire.ErrorReply_CODE_UNAVAILABLE {
		// Not root: no cgroups, so no install commands and no run.
		fmt.Fprintf(out, "  this host cannot run it: %s\n", re.Message)
		_, _, err = cl.ReservationOp(ctx, wire.ReservationOpRequest_OP_RELEASE, res.Id, 0, client.NewRequestID())
		return err
	}
	if err != nil {
		return err
	}
	ai := first(rep)
	removed := false
	defer func() {
		// Applications outlive their manager: one the tour did not get to
		// remove (it failed half-way) must not outlive the demo.
		if !removed {
			rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer rcancel()
			_, _ = cl.App(rctx, &wire.AppRequest{Op: wire.AppRequest_OP_REMOVE, Instance: ai.Id})
		}
	}()
	fmt.Fprintf(out, "  installed %s %s as %s (%d changes recorded)\n", ai.App, ai.Version, ai.Id, ai.Changes)
	act := func(op wire.AppRequest_Op) (*wire.AppInstance, error) {
		rep, err := cl.App(ctx, &wire.AppRequest{Op: op, Instance: ai.Id})
		if err != nil {
			return nil, err
		}
		return first(rep), nil
	}
	remove := func() error {
		t0 := time.Now()
		rep, err := cl.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_REMOVE, Instance: ai.Id})
		took := time.Since(t0)
		removed = err == nil
		if err != nil {
			return err
		}
		after, err := deploy.Digest(daemon.InstallDirs(m.Cfg.DataDir)...)
		if err != nil {
			return err
		}
		same := "the same as before the install"
		if after != before {
			same = "NOT the same as before the install"
		}
		fmt.Fprintf(out, "  removed %s in %s: host restored: %d changes undone (digest of what installs change %s)\n", ai.Id, fmtDur(took), rep.Undone, same)
		if after != before {
			return errors.New("the host was not restored")
		}
		_, _, err = cl.ReservationOp(ctx, wire.ReservationOpRequest_OP_RELEASE, res.Id, 0, client.NewRequestID())
		return err
	}
	started, err := act(wire.AppRequest_OP_START)
	if errors.As(err, &re) && re.Code == wire.ErrorReply_CODE_UNAVAILABLE {
		fmt.Fprintf(out, "  this host cannot run it: %s\n", re.Message)
		return remove()
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  started: %s, confined, as %s, within the reservation's 1 cpu and 256 MiB\n", started.State, orDefault(started.User, "the manager's user"))
	time.Sleep(2500 * time.Millisecond)
	st, err := act(wire.AppRequest_OP_STATUS)
	if err != nil {
		return err
	}
	fmt.Fprint(out, indent(render.AppInstance(st, time.Now())))
	if _, err := act(wire.AppRequest_OP_PAUSE); err != nil {
		return err
	}
	rounds := func() string {
		rep, err := cl.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_GET, Instance: ai.Id, Path: "output/rounds.txt"})
		if err != nil {
			return "(" + plainError(err) + ")"
		}
		return strings.TrimSpace(string(rep.Data))
	}
	p1 := rounds()
	time.Sleep(2 * time.Second)
	fmt.Fprintf(out, "  paused (cgroup freezer) for 2s: rounds %s → %s\n", p1, rounds())
	if _, err := act(wire.AppRequest_OP_RESUME); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	p3, err := cl.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_EXEC, Instance: ai.Id, Operation: "rounds"})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  resumed for 2s: rounds %s (its operation \"rounds\")\n", strings.TrimSpace(p3.GetOutput()))
	logs, err := cl.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_LOGS, Instance: ai.Id, Offset: -200})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  its output ends:\n%s", indent(indent(lastLines(string(logs.Data), 3))))
	return remove()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}
