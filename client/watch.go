package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/node/p2p/events"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/wire"
)

// EventKinds are the kinds Watch shows by default: every kind with a
// grid-wide topic (utilization is asked for by name).
var EventKinds = events.Kinds

// EventKindName is the word of a kind: "relation", "utilization".
func EventKindName(k wire.EventKind) string { return events.KindName(k) }

// ParseEventKind reads a kind word ("reservation").
func ParseEventKind(s string) (wire.EventKind, error) { return events.ParseKind(s) }

// WatchOptions say which of the grid's events a Watch delivers.
type WatchOptions struct {
	// Kinds to deliver; nil is EventKinds. Utilization delivers the
	// samples of the inferiors of Under (or of the manager dialled).
	Kinds []wire.EventKind
	// Under, if set, keeps the events of this manager (name or peer id)
	// and the managers below it; "" keeps the whole grid's.
	Under string
	// Filter, if set, is a CEL filter over event (query.CompileEventFilter).
	Filter string
	// Timeout bounds the dial and each read of the tree; default 5s.
	Timeout time.Duration
}

// SamplesError: the manager whose utilization samples were asked for
// could not be reached (the samples are published on its topic, so the
// Watch must connect to it).
type SamplesError struct {
	Manager string // its name
	Err     error
}

func (e *SamplesError) Error() string {
	return fmt.Sprintf("connecting to %s for its samples: %v", e.Manager, e.Err)
}
func (e *SamplesError) Unwrap() error { return e.Err }

// Watch is a live subscription to the grid's events (gossipsub) through
// one manager, from a client host of its own with a one-off identity (a
// watcher holds nothing, so several may run from one account). Close it
// when done.
type Watch struct {
	// Kinds are the kinds delivered (WatchOptions.Kinds or EventKinds).
	Kinds []wire.EventKind
	// RootName and RootPeer are the manager Under named, or the one
	// dialled.
	RootName, RootPeer string

	host   *p2p.ClientHost
	cl     *Client
	bus    *events.Bus
	sub    *events.Sub
	cancel context.CancelFunc
	ctx    context.Context
	scope  *scope
	match  *query.EventFilter
}

// Subscribe dials the manager of o and subscribes to the events w asks
// for; they arrive through Next. Errors: an *OptionError for Filter (not
// a filter) or Under (no such manager at or below the one dialled),
// those of Options.Address and HostOptions, a *DialError, a
// *SamplesError.
func Subscribe(ctx context.Context, o Options, w WatchOptions) (_ *Watch, err error) {
	var match *query.EventFilter
	if w.Filter != "" {
		f, err := query.CompileEventFilter(w.Filter)
		if err != nil {
			return nil, &OptionError{Field: "Filter", Err: err}
		}
		match = f
	}
	kinds := slices.Clone(w.Kinds)
	if len(kinds) == 0 {
		kinds = slices.Clone(EventKinds)
	}
	timeout := w.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	addr, err := o.Address()
	if err != nil {
		return nil, err
	}
	o.OneOff = true
	opts, _, err := o.HostOptions()
	if err != nil {
		return nil, err
	}
	ch, err := p2p.NewClientHost(opts)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	wa := &Watch{Kinds: kinds, host: ch, cancel: cancel, ctx: wctx, match: match}
	defer func() {
		if err != nil {
			wa.Close()
		}
	}()
	dctx, dcancel := context.WithTimeout(wctx, timeout)
	wa.cl, err = Dial(dctx, &Host{ClientHost: ch}, addr)
	dcancel()
	if err != nil {
		return nil, &DialError{Addr: addr, Err: err}
	}
	// The directory: the tree below the manager says who is under Under.
	wa.scope = &scope{under: w.Under, timeout: timeout}
	if err := wa.scope.load(wctx, wa.cl); err != nil {
		return nil, err
	}
	wa.RootName, wa.RootPeer = wa.scope.rootName, wa.scope.rootPeer
	wa.bus, err = events.New(wctx, ch.LibP2P(), events.Options{})
	if err != nil {
		return nil, err
	}
	var topics []string
	for _, k := range kinds {
		if k == wire.EventKind_EVENT_KIND_UTILIZATION {
			// The samples of the inferiors of Under (or of the manager
			// dialled): they are published on its topic, so subscribe
			// there, connected to it.
			topics = append(topics, events.UtilTopic(wa.scope.rootPeer))
			if wa.scope.rootPeer != wa.cl.Peer() {
				if _, err := ch.Open(wctx, peeraddr.PeerAddrs{Peer: wa.scope.rootPeer, Addrs: wa.scope.rootAddrs}); err != nil {
					return nil, &SamplesError{Manager: wa.scope.rootName, Err: err}
				}
			}
			continue
		}
		topics = append(topics, events.KindTopic(k))
	}
	wa.sub, err = wa.bus.Subscribe(topics...)
	if err != nil {
		return nil, err
	}
	return wa, nil
}

// Peer is the peer id of the manager dialled.
func (w *Watch) Peer() string { return w.cl.Peer() }

// Managers is how many managers are at and under Under (0 without Under).
func (w *Watch) Managers() int {
	if w.scope.under == "" {
		return 0
	}
	return len(w.scope.peers)
}

// Next waits for the next event that passes Under and Filter (the scope is
// re-read from the tree after a relation event, as a failover moves
// managers, at most once a second). It returns nil, nil when stop is
// closed or the subscription ended, and an error wrapping ErrClosed when
// the connection to the manager ended.
func (w *Watch) Next(stop <-chan struct{}) (*wire.Event, error) {
	for {
		select {
		case <-stop:
			return nil, nil
		case <-w.cl.Done():
			return nil, ErrClosed
		case r, ok := <-w.sub.C:
			if !ok {
				return nil, nil
			}
			ev := r.Event
			if ev.Kind == wire.EventKind_EVENT_KIND_RELATION && w.scope.under != "" {
				w.scope.refresh(w.ctx, w.cl)
			}
			if !w.scope.has(ev.Peer) && ev.Kind != wire.EventKind_EVENT_KIND_UTILIZATION {
				continue
			}
			if w.match != nil {
				if ok, err := w.match.Match(ev); err != nil || !ok {
					continue
				}
			}
			return ev, nil
		}
	}
}

// Close ends the subscription, the session and the host.
func (w *Watch) Close() {
	if w.sub != nil {
		w.sub.Close()
	}
	if w.bus != nil {
		w.bus.Close()
	}
	if w.cl != nil {
		_ = w.cl.Close()
	}
	w.cancel()
	_ = w.host.Close()
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

func (s *scope) load(ctx context.Context, cl *Client) error {
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
			return &OptionError{Field: "Under", Err: fmt.Errorf("no manager of that name or peer id at or below %s", root.Name)}
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
func (s *scope) refresh(ctx context.Context, cl *Client) {
	if time.Since(s.refreshed) < time.Second {
		return
	}
	_ = s.load(ctx, cl) // keep the old set if the tree cannot be read now
}

func (s *scope) has(peer string) bool { return s.under == "" || s.peers[peer] }

// findNode is the node of tree n whose name or peer id is key, or nil.
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

// MaxEventsListed bounds one Events reply (node.MaxEventsListed).
const MaxEventsListed = node.MaxEventsListed

// Events reads back the events the manager archived (its properties have
// [archive] enabled = true), oldest first. req.Filter is checked here
// first: one that is not a filter is an *OptionError for Filter.
func (c *Client) Events(ctx context.Context, req *wire.EventsRequest) (*wire.EventsReply, error) {
	if req.Filter != "" {
		if _, err := query.CompileEventFilter(req.Filter); err != nil {
			return nil, &OptionError{Field: "Filter", Err: err}
		}
	}
	env, err := c.Call(ctx, &wire.Envelope{Body: &wire.Envelope_EventsRequest{EventsRequest: req}})
	if err != nil {
		return nil, err
	}
	rep := env.GetEventsReply()
	if rep == nil {
		return nil, errors.New("the manager answered something else than events")
	}
	return rep, nil
}
