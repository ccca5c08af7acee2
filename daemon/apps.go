package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/gridmgr/gridmgr/deploy"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/p2p/transfer"
	"github.com/gridmgr/gridmgr/wire"
)

// AppsDir is where a manager keeps its applications, in its data dir:
// the bundles uploaded (bundles/), the instances and their journals
// (deploy.Host's layout), their logs and the runner's state.
const AppsDir = "apps"

// InstallDirs are the directories under a manager's data dir that
// installing, running and removing applications change — digest them
// (deploy.Digest) to see that a removal gave the host back as it was.
// The bundle store (apps/bundles) is not among them: it is a cache of
// what clients uploaded, kept an hour for a reinstall (docs/sandbox.md).
func InstallDirs(dataDir string) []string {
	var dirs []string
	for _, d := range []string{"instances", "classes", "state", "logs", "run"} {
		dirs = append(dirs, filepath.Join(dataDir, AppsDir, d))
	}
	return dirs
}

// apps is the manager's application runtime (the node.Runner of
// node.CallApp): it does each call on a goroutine of its own with the
// deploy.Executor and reports the answer to the driver.
type apps struct {
	ex      *deploy.Executor
	store   *transfer.Store
	early   *deploy.EarlyCache // bundles' files decoded as they arrive
	deliver func(node.Input) bool
	log     *slog.Logger
}

// earlyBudget bounds the memory early unpacking holds (the bytes of the
// uploads it follows and the files it decoded from them, until their
// installation writes them): an upload larger than what is left is not
// followed, and a decoder stops at the frame that would pass it.
const earlyBudget = 64 << 20

// arriving is the bundle server's Arriving: each upload from its first
// byte is unpacked early, within earlyBudget.
func (a *apps) arriving(size int64) transfer.Arrival {
	if e := a.early.Begin(size); e != nil {
		return e
	}
	return nil
}

func openApps(m *Manager) (*apps, error) {
	dir := filepath.Join(m.Cfg.DataDir, AppsDir)
	store, err := transfer.OpenStore(filepath.Join(dir, "bundles"))
	if err != nil {
		return nil, fmt.Errorf("applications: %w", err)
	}
	// What no application may see: the manager's data (keys, stores,
	// journals, other tenants' instances and bundles) and the grid's
	// pre-shared key.
	hide := []string{m.Cfg.DataDir}
	if m.Cfg.PrivateNetworkKey != "" {
		hide = append(hide, m.Cfg.PrivateNetworkKey)
	}
	a := &apps{store: store, early: deploy.NewEarlyCache(earlyBudget), log: m.log}
	ex, err := deploy.OpenExecutor(deploy.ExecutorOptions{
		Dir:              dir,
		Manager:          m.Cfg.Name,
		Hide:             hide,
		Bundle:           store.Path,
		BundleChecked:    true, // the store hashed each bundle as it arrived
		Early:            a.early,
		UIDFirst:         m.Cfg.AppsUIDs.First,
		UIDLast:          m.Cfg.AppsUIDs.Last,
		MaxInstanceBytes: int64(m.Cfg.AppsMaxInstance),
		MaxPids:          int64(m.Cfg.AppsMaxPids),
		Log:              m.log.With("manager", m.Cfg.Name),
		Changed:          func() { a.report() },
		Nested:           appsNested(&m.Cfg), // glidein.go: a glide-in's applications run inside its own sandbox
	})
	if err != nil {
		return nil, fmt.Errorf("applications: %w", err)
	}
	a.ex = ex
	return a, nil
}

// Run implements node.Runner for node.CallApp.
func (a *apps) Run(nc node.Call) {
	call := nc.Req.(node.AppCall)
	go func() {
		switch {
		case call.Reconcile:
			a.ex.Reconcile(call.Live)
			a.collect()
			a.report()
			go a.watch()
			return
		case len(call.Ended) > 0:
			removed := a.ex.Ended(call.Ended)
			a.collect()
			a.report()
			if nc.ID != 0 { // a release waits for what was removed
				if removed == nil {
					removed = []*wire.AppRemoval{}
				}
				a.deliver(nc.Done(removed, nil))
			}
			return
		}
		rep, err := a.do(call)
		var de *deploy.Error
		if errors.As(err, &de) {
			err = node.AppErrorf(de.Code, "%s", de.Msg)
		}
		a.deliver(nc.Done(rep, err))
		switch call.Req.Op {
		case wire.AppRequest_OP_INSTALL, wire.AppRequest_OP_START, wire.AppRequest_OP_STOP, wire.AppRequest_OP_REMOVE,
			wire.AppRequest_OP_PAUSE, wire.AppRequest_OP_RESUME:
			a.report()
		}
	}()
}

// report tells the Core the instances here: queries see their counts,
// and each change is published as an application event.
func (a *apps) report() bool {
	list := a.ex.List()
	if list == nil {
		list = []*wire.AppInstance{}
	}
	return a.deliver(node.Input{Kind: node.InputApps, AppList: list})
}

// watch reports the instances every appsReport (they may end by
// themselves) until the manager stops.
func (a *apps) watch() {
	for {
		time.Sleep(appsReport)
		if !a.report() {
			return
		}
	}
}

// appsReport is how often queries' apps is refreshed besides each change.
const appsReport = 10 * time.Second

func one(ai *wire.AppInstance, err error) (*wire.AppReply, error) {
	if err != nil {
		return nil, err
	}
	return &wire.AppReply{Instances: []*wire.AppInstance{ai}}, nil
}

func (a *apps) do(call node.AppCall) (*wire.AppReply, error) {
	req := call.Req
	id := req.Instance
	switch req.Op {
	case wire.AppRequest_OP_INSTALL:
		g, sha := call.Grant, req.BundleSha256
		// Not evicted for an upload while it installs: until the
		// instance exists, the executor's Bundles does not name it.
		defer a.store.Hold(sha)()
		ai, err := a.ex.Install(deploy.Grant{Reservation: g.Reservation, Holder: g.Holder, CPUs: g.CPUs, Mem: g.Mem, Disk: g.Disk}, sha)
		var de *deploy.Error
		if errors.Is(err, deploy.ErrBadBundle) || errors.As(err, &de) && de.Code == wire.ErrorReply_CODE_BAD_REQUEST {
			// deploy.Open refused its content: it will never install.
			a.dropUnused(map[string]bool{sha: true})
		}
		return one(ai, err)
	case wire.AppRequest_OP_START:
		return one(a.ex.StartWith(id, req.Args, req.Env))
	case wire.AppRequest_OP_STOP:
		return one(a.ex.Stop(id))
	case wire.AppRequest_OP_PAUSE:
		return one(a.ex.Pause(id))
	case wire.AppRequest_OP_RESUME:
		return one(a.ex.Resume(id))
	case wire.AppRequest_OP_STATUS:
		return one(a.ex.Status(id))
	case wire.AppRequest_OP_LIST:
		return &wire.AppReply{Instances: a.ex.List()}, nil
	case wire.AppRequest_OP_LOGS:
		data, off, err := a.ex.Logs(id, req.Stderr, req.Offset, int(req.Limit))
		if err != nil {
			return nil, err
		}
		return &wire.AppReply{Data: data, Offset: off}, nil
	case wire.AppRequest_OP_IDLE:
		idle, why, err := a.ex.Idle(id)
		if err != nil {
			return nil, err
		}
		return &wire.AppReply{Idle: idle, Output: why}, nil
	case wire.AppRequest_OP_EXEC:
		out, code, err := a.ex.Exec(id, req.Operation, req.Args)
		if err != nil {
			return nil, err
		}
		return &wire.AppReply{Output: string(out), ExitCode: int32(code)}, nil
	case wire.AppRequest_OP_PUT:
		if err := a.ex.Put(id, req.Path, req.Data); err != nil {
			return nil, err
		}
		return &wire.AppReply{Message: fmt.Sprintf("wrote %d bytes to %s", len(req.Data), req.Path)}, nil
	case wire.AppRequest_OP_GET:
		data, size, err := a.ex.Get(id, req.Path, req.Offset, int(req.Limit))
		if err != nil {
			return nil, err
		}
		return &wire.AppReply{Data: data, Offset: size}, nil
	case wire.AppRequest_OP_REMOVE:
		n, err := a.ex.Remove(id)
		if err != nil {
			return nil, err
		}
		a.collect() // the bundle stays a while: a job's next run here installs it again unsent
		return &wire.AppReply{Undone: uint32(n), Message: fmt.Sprintf("host restored: %d changes undone", n)}, nil
	}
	return nil, node.AppErrorf(wire.ErrorReply_CODE_UNSUPPORTED, "application operation %v is not served here", req.Op)
}

// dropUnused deletes the bundles of shas that no instance uses any more.
func (a *apps) dropUnused(shas map[string]bool) {
	used := a.ex.Bundles()
	for sha := range shas {
		if sha != "" && !used[sha] {
			if err := a.store.Remove(sha); err != nil {
				a.log.Warn("removing an unused bundle", "sha256", sha, "err", err)
			}
		}
	}
}

// collect deletes the bundles no instance uses and no upload touched
// within the last hour (an upload may precede its install by a while).
func (a *apps) collect() {
	used := a.ex.Bundles()
	list, err := a.store.List()
	if err != nil {
		a.log.Warn("listing bundles", "err", err)
		return
	}
	for _, e := range list {
		if !used[e.SHA256] && time.Since(e.ModTime) > time.Hour {
			if err := a.store.Remove(e.SHA256); err != nil {
				a.log.Warn("removing an unused bundle", "sha256", e.SHA256, "err", err)
			}
		}
	}
}

// checkUpload asks the Core whether peer may upload a bundle for
// reservation (it must hold it, or be an admin).
func (m *Manager) checkUpload(ctx context.Context, peer, reservation string) error {
	env, err := m.Driver.RequestAs(ctx, peer, &wire.Envelope{Body: &wire.Envelope_AppRequest{AppRequest: &wire.AppRequest{
		Op: wire.AppRequest_OP_UPLOAD, Reservation: reservation}}})
	if err != nil {
		return transfer.Refuse(wire.ErrorReply_CODE_UNAVAILABLE, "%s: %v", m.Cfg.Name, err)
	}
	if e := env.GetError(); e != nil {
		return transfer.Refuse(e.Code, "%s", e.Message)
	}
	return nil
}
