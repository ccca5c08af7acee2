package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/wire"
)

// cmdGlidein launches glide-ins (docs/glidein.md), or with list or rm as
// its first argument lists or removes them.
func cmdGlidein(c *cli, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "list", "ls":
			return c.sub("glidein list", cmdGlideinList(c, args[1:]))
		case "rm":
			return c.sub("glidein rm", cmdGlideinRm(c, args[1:]))
		case "help":
			args = []string{"-h"}
		}
	}
	fs := c.newFlags("glidein", "-n ADDR | -d DIR --count N --cpus C --mem M [flags]\n       gridmgr glidein list|rm …",
		"Launch glide-ins: a personal grid of N managers on hosts the grid reserves\n"+
			"for you. The manager you point at (the launcher) queues one job per\n"+
			"glide-in, one per host (spread): it reserves C cpus and M memory there for\n"+
			"--duration, sends this gridmgr executable (once per host, by its sha256) and\n"+
			"runs a manager from a properties file made for it, under the launcher,\n"+
			"offering what it reserved to your jobs only, with the attribute\n"+
			"glidein = NAME. Jobs with requirement = 'attrs.glidein == \"NAME\"' run only\n"+
			"there. A glide-in retires (takes no new job) before its lease ends, leaves\n"+
			"after --idle with nothing to do, and its host is restored like any\n"+
			"application's. It waits until every glide-in has joined (--no-wait: not).\n\n"+
			"  gridmgr glidein list [NAME]   the glide-ins launched here, joined or not\n"+
			"  gridmgr glidein rm NAME       remove them (a running job there is stopped)")
	t := jobTarget(fs, true, 10*time.Minute)
	name := fs.String("name", "", "the glide-ins' name NAME (they are NAME-0 … NAME-(N-1)); default: a new one")
	count := countVar(fs, "count", 0, 1, 1000, "how many glide-ins, one per host")
	cpus := countVar[int64](fs, "cpus", 1, 1, 65536, "cpus each reserves and offers")
	memStr := fs.String("mem", "1GiB", "memory each reserves and offers, e.g. 2GiB")
	duration := fs.duration("duration", time.Hour, time.Minute, 7*24*time.Hour, "each glide-in's lease: it is gone by then")
	begin := fs.when("begin", "", true, "not before this time: "+aheadForms)
	reqExpr := fs.String("requirement", "", "what a host must offer besides the amounts (CEL, as gridmgr query takes it)")
	idle := fs.duration("idle", 20*time.Minute, time.Second, 7*24*time.Hour, "a glide-in with nothing to do this long leaves")
	retire := fs.duration("retire", 0, 0, 7*24*time.Hour, "retire this long before the lease ends (default: max(5m, a tenth of --duration), at most half)")
	listen := fs.String("listen", "", "each glide-in's listen multiaddr (default: /ip4/0.0.0.0/tcp/0, or /ip4/127.0.0.1/tcp/0 when the launcher listens on loopback only)")
	heartbeat := fs.duration("heartbeat", time.Second, 10*time.Millisecond, time.Hour, "the glide-ins' heartbeat interval (use the launcher's)")
	private := fs.Bool("private", false, "a fresh pre-shared key for the glide-ins and the launcher: no one else can connect to them")
	user := fs.String("user", "", "the user to launch as, whose jobs they run (default: the launcher's account of this client)")
	reqID := fs.String("request-id", "", "the launch's request id, to launch again one whose answer was lost (default: a new one)")
	noWait := fs.Bool("no-wait", false, "do not wait for them to join")
	program := fs.String("program", "", "the gridmgr executable to send (default: this one); for hosts of another build or architecture")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	switch {
	case *count == 0:
		return usageErr("say how many glide-ins: --count N\n%s", fs.seeHelp())
	case *name != "" && config.CheckGlideinName(*name) != "":
		return usageErr("--name: %s", config.CheckGlideinName(*name))
	case *retire >= *duration:
		return usageErr("--retire %s: must be shorter than --duration %s", text.FormatDuration(*retire), text.FormatDuration(*duration))
	}
	mem, err := text.ParseSize(*memStr)
	if err != nil || mem < 64<<20 || mem > 1<<50 {
		return usageErr("--mem %q: want a size of at least 64MiB, such as 512MiB or 4GiB (a glide-in is a manager)", *memStr)
	}
	now := time.Now()
	at, err := begin.at("begin", now)
	if err != nil {
		return err
	}
	if !at.IsZero() && at.Before(now.Add(-time.Minute)) {
		return usageErr("--begin is in the past")
	}
	if *name == "" {
		*name = "g" + client.NewRequestID()[:6]
	}
	spec := client.GlideinSpec{Name: *name, Count: *count, CPUs: *cpus, Mem: int64(mem), Duration: *duration, Begin: at,
		Requirement: *reqExpr, Idle: *idle, Listen: *listen, Heartbeat: *heartbeat, Private: *private, User: *user,
		RequestID: *reqID, Now: now, Program: *program, Progress: func(s string) { fmt.Fprintln(c.stderr, s) }}
	if *retire > 0 {
		start := now
		if at.After(now) {
			start = at
		}
		spec.RetireAt = start.Add(*duration - *retire)
	}
	ctx, cancel := t.context()
	defer cancel()
	cl, err := t.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	spec.Redial = func(ctx context.Context) (*client.Client, error) { return client.Connect(ctx, t.opts()) }
	s, err := cl.LaunchGlideins(ctx, spec)
	if err != nil {
		return submitErr(err)
	}
	fmt.Fprintf(c.stderr, "launched %d glide-in(s) %s as %s\n", s.Count, *name, s.Cluster)
	if *noWait || at.After(now.Add(time.Minute)) {
		if !*t.json {
			fmt.Fprintf(c.stdout, "%s %s\n", *name, s.Cluster)
			return nil
		}
		list, err := cl.GlideinList(ctx, *name, false, false)
		if err != nil {
			return err
		}
		return showGlideins(c, t, list) // as they are now: queued
	}
	list, err := waitGlideins(ctx, cl, *name, *count, func(g client.GlideinInfo) {
		fmt.Fprintf(c.stderr, "%s %s%s\n", g.Name, glideinWord(g), atHost(g))
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			fmt.Fprint(c.stderr, renderGlideins(list))
			return fmt.Errorf("not every glide-in joined within --timeout %s (they stay queued: gridmgr glidein list, or rm %s)", text.FormatDuration(*t.timeout), *name)
		}
		return err
	}
	return showGlideins(c, t, list)
}

// sub reports a subcommand's error under its own name, as job's do.
func (c *cli) sub(name string, err error) error {
	if code := c.exit(name, err); code != exitOK {
		return exitCode(code)
	}
	return nil
}

// waitGlideins polls the launcher until count glide-ins of name have
// joined, or one has ended (an error saying why), calling changed with
// each that changed.
func waitGlideins(ctx context.Context, cl *client.Client, name string, count int, changed func(client.GlideinInfo)) ([]client.GlideinInfo, error) {
	last := map[string]string{}
	for {
		list, err := cl.GlideinList(ctx, name, false, true)
		if err != nil {
			return list, err
		}
		joined := 0
		for _, g := range list {
			if w := glideinWord(g); last[g.Name] != w {
				last[g.Name] = w
				changed(g)
			}
			switch {
			case g.Joined:
				joined++
			case g.State == "completed" || g.State == "failed" || g.State == "removed" || g.State == "held":
				return list, fmt.Errorf("glide-in %s is %s before it joined: %s (gridmgr job log %s)", g.Name, g.State, g.Reason, g.Job)
			}
		}
		if joined >= count {
			return list, nil
		}
		select {
		case <-ctx.Done():
			return list, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func glideinWord(g client.GlideinInfo) string {
	if g.Joined {
		return "joined"
	}
	return g.State
}

func atHost(g client.GlideinInfo) string {
	if g.Host == "" {
		return ""
	}
	return " on " + g.Host
}

// renderGlideins is the table: NAME STATE HOST JOB SINCE REASON.
func renderGlideins(list []client.GlideinInfo) string {
	if len(list) == 0 {
		return "no glide-ins\n"
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tHOST\tJOB\tSINCE\tREASON")
	now := time.Now()
	for _, g := range list {
		host := g.Host
		if host == "" {
			host = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", g.Name, glideinWord(g), host, g.Job, ago(g.Since, now), text.Clip(strings.Join(strings.Fields(g.Reason), " "), 60))
	}
	tw.Flush()
	return b.String()
}

func showGlideins(c *cli, t *target, list []client.GlideinInfo) error {
	msg := &wire.GlideinList{}
	for _, g := range list {
		msg.Glideins = append(msg.Glideins, &wire.GlideinInfo{Group: g.Group, Name: g.Name, Job: g.Job, State: g.State, Host: g.Host,
			Joined: g.Joined, Peer: g.Peer, SinceUnixMs: g.Since, Reason: g.Reason, Cluster: g.Cluster})
	}
	t.show(c, msg, renderGlideins(list))
	return nil
}

func cmdGlideinList(c *cli, args []string) error {
	fs := c.newFlags("glidein list", "-n ADDR | -d DIR [flags] [NAME]",
		"List the glide-ins launched at this manager (yours, --all users'; NAME: only\n"+
			"those), each with its job's state, the host it runs on and whether it has\n"+
			"joined (its manager is up under the launcher). --ended adds those that left.")
	t := jobTarget(fs, true, 20*time.Second)
	all := fs.Bool("all", false, "every user's glide-ins")
	ended := fs.Bool("ended", false, "also those that ended")
	return withClient(fs, t, args, 1, func(ctx context.Context, cl *client.Client, pos []string) error {
		name := ""
		if len(pos) > 0 {
			name = pos[0]
			if msg := config.CheckGlideinName(name); msg != "" {
				return usageErr("%s", msg)
			}
		}
		list, err := cl.GlideinList(ctx, name, *all, *ended)
		if err != nil {
			return err
		}
		return showGlideins(c, t, list)
	})
}

func cmdGlideinRm(c *cli, args []string) error {
	fs := c.newFlags("glidein rm", "-n ADDR | -d DIR [flags] NAME…",
		"Remove glide-ins: their jobs are removed from the launcher's queue, which\n"+
			"stops each glide-in (and what it runs), removes it and releases its\n"+
			"reservation: its host is restored.")
	t := jobTarget(fs, false, 30*time.Second)
	pos, err := parse(fs, args, 100)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageErr("name the glide-ins to remove (gridmgr glidein list shows them)\n%s", fs.seeHelp())
	}
	for _, n := range pos {
		if msg := config.CheckGlideinName(n); msg != "" {
			return usageErr("%s", msg)
		}
	}
	return withClient(fs, t, args, 100, func(ctx context.Context, cl *client.Client, names []string) error {
		for _, n := range names {
			clusters, err := cl.GlideinClusters(ctx, n)
			if err != nil {
				return err
			}
			if len(clusters) == 0 {
				return usageErr("no glide-ins %s here that have not ended (gridmgr glidein list --ended)", n)
			}
			rep, err := cl.RemoveJobs(ctx, clusters)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "%s removed (%d job(s) of %s)\n", n, len(rep.Jobs), strings.Join(clusters, ", "))
			// Its private network, if it had one (--private), is closed.
			if err := cl.ClosePrivateNetwork(ctx, client.GlideinNetwork(n)); err == nil {
				fmt.Fprintf(c.stdout, "%s: its private network closed\n", n)
			}
		}
		return nil
	})
}
