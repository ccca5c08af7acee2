package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/node/render"
	"github.com/gridmgr/gridmgr/wire"
)

// kindsFlag collects --kind values (repeatable, or comma-separated).
type kindsFlag []wire.EventKind

func (k *kindsFlag) String() string { return "" }
func (k *kindsFlag) Set(s string) error {
	for w := range strings.SplitSeq(s, ",") {
		kind, err := client.ParseEventKind(strings.TrimSpace(w))
		if err != nil {
			return err
		}
		if !slices.Contains(*k, kind) {
			*k = append(*k, kind)
		}
	}
	return nil
}

func cmdWatch(c *cli, args []string) error {
	fs := c.newFlags("watch", "-n ADDR | -d DIR [flags]",
		"Print the grid's events live, as they happen: relations going up, suspect or\n"+
			"down, failovers, reservations, applications, admin commands, jobs of the\n"+
			"managers' queues (submitted, started, held, completed…); with --kind\n"+
			"utilization, the periodic samples of a manager's inferiors (each with its\n"+
			"subtree's totals). The events travel on the grid's gossipsub topics; this\n"+
			"command subscribes through the manager it connects to. Ctrl-C stops it.")
	t := addTarget(fs, true)
	var kinds kindsFlag
	fs.Var(&kinds, "kind", "event kinds to show: relation, reservation, app, admin, job, utilization (repeat or comma-separate; default all but utilization)")
	under := fs.String("under", "", "only events from this manager (name or peer id) and the managers below it")
	filter := fs.String("filter", "", `CEL filter over event, e.g. 'event.kind == "reservation" && event.manager == "gm160"'`)
	count := countVar(fs, "count", 0, 0, 1_000_000, "stop after this many events (0: run until interrupted)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	w, err := client.Subscribe(context.Background(), t.opts(),
		client.WatchOptions{Kinds: kinds, Under: *under, Filter: *filter, Timeout: *t.timeout})
	if err != nil {
		return watchErr(t, *under, err)
	}
	defer w.Close()
	fmt.Fprintf(c.stderr, "watching %s, through %s; Ctrl-C stops\n", watchingWhat(w, *under), text.ShortPeer(w.Peer()))

	stop := c.interrupt
	if stop == nil {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sig)
		done := make(chan struct{})
		go func() { <-sig; close(done) }()
		stop = done
	}
	shown := 0
	for {
		ev, err := w.Next(stop)
		if errors.Is(err, client.ErrClosed) {
			return fmt.Errorf("the connection to the manager ended; %d events shown", shown)
		}
		if err != nil || ev == nil {
			return err
		}
		printEvent(c, t, ev)
		if shown++; *count > 0 && shown >= *count {
			return nil
		}
	}
}

// watchErr is the CLI's account of an error of client.Subscribe.
func watchErr(t *target, under string, err error) error {
	var oe *client.OptionError
	var se *client.SamplesError
	switch {
	case errors.As(err, &oe) && oe.Field == "Filter":
		return usageErr("--filter: %s", strings.TrimPrefix(oe.Err.Error(), "filter: "))
	case errors.As(err, &oe) && oe.Field == "Under":
		return usageErr("--under %s: %v (gridmgr tree lists them)", under, oe.Err)
	case errors.As(err, &se):
		return fmt.Errorf("connecting to %s for its samples: %s", se.Manager, plainError(se.Err))
	case errors.As(err, &oe), errors.Is(err, client.ErrNoManager), errors.Is(err, client.ErrTwoManagers):
		return t.dialError(err)
	}
	var de *client.DialError
	if errors.As(err, &de) {
		if isAddrErr(de.Err) {
			return usageErr("-n: %s", plainError(de.Err))
		}
		return dialErr(de.Addr, *t.timeout, de.Err)
	}
	return err
}

// watchingWhat says what a watch shows: "reservation events from gm160
// and below (4 managers) and the utilization samples of ...".
func watchingWhat(w *client.Watch, under string) string {
	var names []string
	util := false
	for _, k := range w.Kinds {
		if k == wire.EventKind_EVENT_KIND_UTILIZATION {
			util = true
		} else {
			names = append(names, client.EventKindName(k))
		}
	}
	var what []string
	if len(names) > 0 {
		where := "the grid"
		if under != "" {
			where = fmt.Sprintf("%s and below (%d managers)", w.RootName, w.Managers())
		}
		what = append(what, fmt.Sprintf("%s events from %s", strings.Join(names, ", "), where))
	}
	if util {
		what = append(what, fmt.Sprintf("the utilization samples of %s's inferiors (and its own, if it is a root)", w.RootName))
	}
	return strings.Join(what, " and ")
}

func printEvent(c *cli, t *target, ev *wire.Event) {
	if t.json != nil && *t.json {
		fmt.Fprintf(c.stdout, "%s\n", plainJSON(ev)) // one event a line
		return
	}
	fmt.Fprintln(c.stdout, render.Event(ev))
}

func cmdEvents(c *cli, args []string) error {
	fs := c.newFlags("events", "-n ADDR | -d DIR [flags]",
		"Read back the events a manager archived (its properties file has [archive]\n"+
			"enabled = true): oldest first, from --since (default: the last hour).")
	t := addTarget(fs, true)
	since := fs.when("since", "1h", false, "from when: "+backForms)
	until := fs.when("until", "", false, "until when (the same forms; default: now)")
	filter := fs.String("filter", "", `CEL filter over event, e.g. 'event.kind == "reservation" && event.manager == "gm160"'`)
	limit := countVar(fs, "limit", 1000, 1, client.MaxEventsListed, "most events to show")
	return withClient(fs, t, args, 0, func(ctx context.Context, cl *client.Client, _ []string) error {
		now := time.Now()
		from, err := since.at("since", now)
		if err != nil {
			return err
		}
		to, err := until.at("until", now)
		if err != nil {
			return err
		}
		req := &wire.EventsRequest{Filter: *filter, Limit: uint32(*limit)}
		if !from.IsZero() {
			req.SinceUnixMs = from.UnixMilli()
		}
		if !to.IsZero() {
			req.UntilUnixMs = to.UnixMilli()
		}
		rep, err := cl.Events(ctx, req)
		var oe *client.OptionError
		if errors.As(err, &oe) {
			return usageErr("--filter: %s", strings.TrimPrefix(oe.Err.Error(), "filter: "))
		}
		if err != nil {
			return err
		}
		for _, ev := range rep.Events {
			printEvent(c, t, ev)
		}
		// On stderr, so --json output stays one event a line.
		switch {
		case len(rep.Events) == 0:
			fmt.Fprintf(c.stderr, "no events archived since %s\n", render.Time(from, now))
		case rep.More > 0:
			fmt.Fprintf(c.stderr, "%d more events match: narrow --since/--until or raise --limit\n", rep.More)
		}
		return nil
	})
}
