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
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/node/p2p/events"
	"github.com/gridmgr/gridmgr/node/render"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/wire"
)

// kindsFlag collects --kind values (repeatable, or comma-separated).
type kindsFlag []wire.EventKind

func (k *kindsFlag) String() string { return "" }
func (k *kindsFlag) Set(s string) error {
	for w := range strings.SplitSeq(s, ",") {
		kind, err := events.ParseKind(strings.TrimSpace(w))
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
			"down, failovers, reservations, applications, admin commands; with --kind\n"+
			"utilization, the periodic samples of a manager's inferiors (each with its\n"+
			"subtree's totals). The events travel on the grid's gossipsub topics; this\n"+
			"command subscribes through the manager it connects to. Ctrl-C stops it.")
	t := addTarget(fs, true)
	var kinds kindsFlag
	fs.Var(&kinds, "kind", "event kinds to show: relation, reservation, app, admin, utilization (repeat or comma-separate; default all but utilization)")
	under := fs.String("under", "", "only events from this manager (name or peer id) and the managers below it")
	filter := fs.String("filter", "", `CEL filter over event, e.g. 'event.kind == "reservation" && event.manager == "gm160"'`)
	count := countVar(fs, "count", 0, 0, 1_000_000, "stop after this many events (0: run until interrupted)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	var match *query.EventFilter
	if *filter != "" {
		f, err := query.CompileEventFilter(*filter)
		if err != nil {
			return usageErr("--filter: %s", strings.TrimPrefix(err.Error(), "filter: "))
		}
		match = f
	}
	if len(kinds) == 0 {
		kinds = slices.Clone(events.Kinds)
	}
	addr, err := t.address()
	if err != nil {
		return err
	}
	opts, err := t.options()
	if err != nil {
		return err
	}
	// A watcher holds nothing: a one-off identity lets several watch at
	// once from one account (two hosts with one peer id would clash).
	opts.Key = nil
	ch, err := p2p.NewClientHost(opts)
	if err != nil {
		return err
	}
	defer ch.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dctx, dcancel := context.WithTimeout(ctx, *t.timeout)
	cl, err := client.Dial(dctx, &client.Host{ClientHost: ch}, addr)
	dcancel()
	if err != nil {
		if isAddrErr(err) {
			return usageErr("-n: %s", plainError(err))
		}
		return dialErr(addr, *t.timeout, err)
	}
	defer cl.Close()

	// The directory: the tree below the manager says who is under --under.
	scope, err := newScope(ctx, cl, *under, *t.timeout)
	if err != nil {
		return err
	}
	bus, err := events.New(ctx, ch.LibP2P(), events.Options{})
	if err != nil {
		return err
	}
	defer bus.Close()
	var topics []string
	for _, k := range kinds {
		if k == wire.EventKind_EVENT_KIND_UTILIZATION {
			// The samples of the inferiors of --under (or of the manager
			// connected to): they are published on its topic, so
			// subscribe there, connected to it.
			topics = append(topics, events.UtilTopic(scope.rootPeer))
			if scope.rootPeer != cl.Peer() {
				if _, err := ch.Open(ctx, peeraddr.PeerAddrs{Peer: scope.rootPeer, Addrs: scope.rootAddrs}); err != nil {
					return fmt.Errorf("connecting to %s for its samples: %s", scope.rootName, plainError(err))
				}
			}
			continue
		}
		topics = append(topics, events.KindTopic(k))
	}
	sub, err := bus.Subscribe(topics...)
	if err != nil {
		return err
	}
	defer sub.Close()
	var names []string
	util := false
	for _, k := range kinds {
		if k == wire.EventKind_EVENT_KIND_UTILIZATION {
			util = true
		} else {
			names = append(names, events.KindName(k))
		}
	}
	var what []string
	if len(names) > 0 {
		where := "the grid"
		if *under != "" {
			where = fmt.Sprintf("%s and below (%d managers)", scope.rootName, len(scope.peers))
		}
		what = append(what, fmt.Sprintf("%s events from %s", strings.Join(names, ", "), where))
	}
	if util {
		what = append(what, fmt.Sprintf("the utilization samples of %s's inferiors (and its own, if it is a root)", scope.rootName))
	}
	fmt.Fprintf(c.stderr, "watching %s, through %s; Ctrl-C stops\n", strings.Join(what, " and "), text.ShortPeer(cl.Peer()))

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
		select {
		case <-stop:
			return nil
		case <-cl.Done():
			return fmt.Errorf("the connection to the manager ended; %d events shown", shown)
		case r, ok := <-sub.C:
			if !ok {
				return nil
			}
			ev := r.Event
			if ev.Kind == wire.EventKind_EVENT_KIND_RELATION && scope.under != "" {
				scope.refresh(ctx, cl)
			}
			if !scope.has(ev.Peer) && ev.Kind != wire.EventKind_EVENT_KIND_UTILIZATION {
				continue
			}
			if match != nil {
				if ok, err := match.Match(ev); err != nil || !ok {
					continue
				}
			}
			printEvent(c, t, ev)
			if shown++; *count > 0 && shown >= *count {
				return nil
			}
		}
	}
}

func printEvent(c *cli, t *target, ev *wire.Event) {
	if t.json != nil && *t.json {
		fmt.Fprintf(c.stdout, "%s\n", plainJSON(ev)) // one event a line
		return
	}
	fmt.Fprintln(c.stdout, render.Event(ev))
}

// scope is the set of managers at and under a manager, from the tree.
type scope struct {
	under     string // as given; "" is the whole grid
	rootName  string
	rootPeer  string
	rootAddrs []string
	peers     map[string]bool
	timeout   time.Duration
	refreshed time.Time
}

func newScope(ctx context.Context, cl *client.Client, under string, timeout time.Duration) (*scope, error) {
	s := &scope{under: under, timeout: timeout}
	if err := s.load(ctx, cl); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *scope) load(ctx context.Context, cl *client.Client) error {
	tctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	root, err := cl.Tree(tctx, 0)
	if err != nil {
		return err
	}
	s.refreshed = time.Now()
	top := root
	if s.under != "" {
		top = findNode(root, s.under)
		if top == nil {
			return usageErr("--under %s: no manager of that name or peer id at or below %s (gridmgr tree lists them)", s.under, root.Name)
		}
	}
	s.rootName, s.rootPeer, s.rootAddrs = top.Name, top.Peer, top.Addrs
	s.peers = map[string]bool{}
	var walk func(n *wire.TreeNode)
	walk = func(n *wire.TreeNode) {
		s.peers[n.Peer] = true
		for _, ch := range n.Children {
			walk(ch)
		}
	}
	walk(top)
	return nil
}

// refresh re-reads the tree after a relation event (a failover moves
// managers), at most once a second.
func (s *scope) refresh(ctx context.Context, cl *client.Client) {
	if time.Since(s.refreshed) < time.Second {
		return
	}
	_ = s.load(ctx, cl) // keep the old set if the tree cannot be read now
}

func (s *scope) has(peer string) bool { return s.under == "" || s.peers[peer] }

func findNode(n *wire.TreeNode, key string) *wire.TreeNode {
	if n.Name == key || n.Peer == key {
		return n
	}
	for _, ch := range n.Children {
		if f := findNode(ch, key); f != nil {
			return f
		}
	}
	return nil
}

// address is the target's multiaddr: -n, or the addr file of -d.
func (t *target) address() (string, error) {
	switch {
	case *t.addr != "" && *t.dataDir != "":
		return "", usageErr("give -n ADDR or -d DIR, not both")
	case *t.addr == "" && *t.dataDir == "":
		return "", usageErr("which manager? give -n ADDR (full multiaddr with /p2p/<peer id>) or -d DATA_DIR")
	case *t.addr == "":
		a, err := daemon.ReadAddrFile(*t.dataDir)
		if err != nil {
			return "", usageErr("-d: %v", err)
		}
		return a, nil
	}
	return *t.addr, nil
}

func cmdEvents(c *cli, args []string) error {
	fs := c.newFlags("events", "-n ADDR | -d DIR [flags]",
		"Read back the events a manager archived (its properties file has [archive]\n"+
			"enabled = true): oldest first, from --since (default: the last hour).")
	t := addTarget(fs, true)
	since := fs.when("since", "1h", false, "from when: "+backForms)
	until := fs.when("until", "", false, "until when (the same forms; default: now)")
	filter := fs.String("filter", "", `CEL filter over event, e.g. 'event.kind == "reservation" && event.manager == "gm160"'`)
	limit := countVar(fs, "limit", 1000, 1, node.MaxEventsListed, "most events to show")
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
		if *filter != "" {
			if _, err := query.CompileEventFilter(*filter); err != nil {
				return usageErr("--filter: %s", strings.TrimPrefix(err.Error(), "filter: "))
			}
		}
		req := &wire.EventsRequest{Filter: *filter, Limit: uint32(*limit)}
		if !from.IsZero() {
			req.SinceUnixMs = from.UnixMilli()
		}
		if !to.IsZero() {
			req.UntilUnixMs = to.UnixMilli()
		}
		env, err := cl.Call(ctx, &wire.Envelope{Body: &wire.Envelope_EventsRequest{EventsRequest: req}})
		if err != nil {
			return err
		}
		if e := env.GetError(); e != nil {
			return &client.RemoteError{Code: e.Code, Message: e.Message}
		}
		rep := env.GetEventsReply()
		if rep == nil {
			return errors.New("the manager answered something else than events")
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
