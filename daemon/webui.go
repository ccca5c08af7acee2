package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon/web"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/wire"
)

// WebToken is the admin token of the web UI of the manager whose identity
// key is key: whoever can read the key (the manager's data dir) can
// derive it with `gridmgr web-token`.
func WebToken(key crypto.PrivKey) (string, error) {
	raw, err := key.Raw()
	if err != nil {
		return "", err
	}
	return web.AdminToken(raw), nil
}

// webBackend is the web UI's view of the grid from this manager: its own
// Core in-process, other managers over client streams from its own host,
// found through the tree.
type webBackend struct {
	m *Manager

	mu     sync.Mutex
	tree   *wire.TreeNode // last whole-grid tree
	treeAt time.Time
	apps   []*wire.AppInstance
	appsAt time.Time

	umu     sync.Mutex             // held by the one refresh of asked
	asked   map[string]*wire.Event // samples made by asking managers, by peer
	askedAt time.Time

	amu   sync.Mutex           // held by the one refresh of attrs
	attrs map[string]attrEntry // the tree's attributes of each manager asked, by peer
}

// attrEntry is what a manager answered of its attributes (those the tree
// shows), and when.
type attrEntry struct {
	at    time.Time
	attrs map[string]string
}

// webHandler is the web UI, answering to the Host headers hosts allows.
func (m *Manager) webHandler(hosts *web.HostCheck) (http.Handler, error) {
	tok, err := WebToken(m.Key)
	if err != nil {
		return nil, err
	}
	return web.Handler(&webBackend{m: m}, web.Options{Token: tok, Log: m.log.With("manager", m.Cfg.Name), Hosts: hosts}), nil
}

func (b *webBackend) Self() (string, string) { return b.m.Cfg.Name, b.m.Host.PeerID() }

func (b *webBackend) local(ctx context.Context, env *wire.Envelope) (*wire.Envelope, error) {
	rep, err := b.m.Driver.Request(ctx, env)
	if err != nil {
		return nil, err
	}
	if e := rep.GetError(); e != nil {
		return nil, &client.RemoteError{Code: e.Code, Message: e.Message}
	}
	return rep, nil
}

// dialer opens client streams from the manager's own host.
type dialer struct{ m *Manager }

func (d dialer) Open(ctx context.Context, pa peeraddr.PeerAddrs) (client.Conn, error) {
	// Closing the last stream to a manager that is not a relation closes
	// the connection too (p2p.Host.OpenClient).
	return d.m.Host.OpenClient(ctx, pa)
}

// remote runs fn against the manager peer (a peer id or a name), over a
// client stream unless it is this manager.
func (b *webBackend) remote(ctx context.Context, peer string, fn func(*client.Client) error) error {
	n := b.find(ctx, peer)
	if n == nil {
		return fmt.Errorf("no manager %q in the grid seen from %s", peer, b.m.Cfg.Name)
	}
	cl, err := client.DialPeer(ctx, dialer{b.m}, peeraddr.PeerAddrs{Peer: n.Peer, Addrs: n.Addrs})
	if err != nil {
		return fmt.Errorf("%s cannot be reached: %w", n.Name, err)
	}
	defer cl.Close()
	return fn(cl)
}

func (b *webBackend) isSelf(peer string) bool {
	return peer == "" || peer == b.m.Cfg.Name || peer == b.m.Host.PeerID()
}

// find looks peer up in the last tree (reading it if it is old).
func (b *webBackend) find(ctx context.Context, peer string) *wire.TreeNode {
	b.mu.Lock()
	t := b.tree
	fresh := time.Since(b.treeAt) < 5*time.Second
	b.mu.Unlock()
	if t == nil || !fresh {
		if nt, err := b.Tree(ctx); err == nil {
			t = nt
		}
	}
	if t == nil {
		return nil
	}
	var find func(n *wire.TreeNode) *wire.TreeNode
	find = func(n *wire.TreeNode) *wire.TreeNode {
		if n.Peer == peer || n.Name == peer {
			return n
		}
		for _, c := range n.Children {
			if f := find(c); f != nil {
				return f
			}
		}
		return nil
	}
	return find(t)
}

// Tree is the whole grid: the tree under the root above this manager.
func (b *webBackend) Tree(ctx context.Context) (*wire.TreeNode, error) {
	rep, err := b.local(ctx, &wire.Envelope{Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}})
	if err != nil {
		return nil, err
	}
	var root *wire.TreeNode
	st := rep.GetStatusReply()
	var top *wire.Ancestor
	for _, a := range st.Ancestors {
		if top == nil || a.Depth > top.Depth {
			top = a
		}
	}
	if top != nil {
		cl, err := client.DialPeer(ctx, dialer{b.m}, peeraddr.PeerAddrs{Peer: top.Peer, Addrs: top.Addrs})
		if err == nil {
			root, err = cl.Tree(ctx, 0)
			cl.Close()
		}
		if err != nil {
			root = nil // the root cannot be reached: show what is below us
		}
	}
	if root == nil {
		tr, err := b.local(ctx, &wire.Envelope{Body: &wire.Envelope_TreeRequest{TreeRequest: &wire.TreeRequest{BudgetMs: 3000}}})
		if err != nil {
			return nil, err
		}
		root = tr.GetTreeReply().GetRoot()
	}
	b.mu.Lock()
	b.tree, b.treeAt = root, time.Now()
	b.mu.Unlock()
	return root, nil
}

func (b *webBackend) Status(ctx context.Context, peer string) (*wire.StatusReply, error) {
	if b.isSelf(peer) {
		rep, err := b.local(ctx, &wire.Envelope{Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}})
		return rep.GetStatusReply(), err
	}
	var st *wire.StatusReply
	err := b.remote(ctx, peer, func(cl *client.Client) (err error) { st, err = cl.Status(ctx); return })
	return st, err
}

func (b *webBackend) Resources(ctx context.Context, peer string) (*wire.ResourcesReply, error) {
	if b.isSelf(peer) {
		rep, err := b.local(ctx, &wire.Envelope{Body: &wire.Envelope_ResourcesRequest{ResourcesRequest: &wire.ResourcesRequest{}}})
		return rep.GetResourcesReply(), err
	}
	var r *wire.ResourcesReply
	err := b.remote(ctx, peer, func(cl *client.Client) (err error) { r, err = cl.Resources(ctx); return })
	return r, err
}

func (b *webBackend) Reservations(ctx context.Context, peer string) (*wire.ReservationsReply, error) {
	if b.isSelf(peer) {
		rep, err := b.local(ctx, &wire.Envelope{Body: &wire.Envelope_ReservationsRequest{ReservationsRequest: &wire.ReservationsRequest{Limit: 200}}})
		return rep.GetReservationsReply(), err
	}
	var r *wire.ReservationsReply
	err := b.remote(ctx, peer, func(cl *client.Client) (err error) { r, err = cl.Reservations(ctx, false, false); return })
	return r, err
}

// Apps lists every instance of the grid, asking each manager of the tree
// (eight at a time); the answer is kept for two seconds.
func (b *webBackend) Apps(ctx context.Context) ([]*wire.AppInstance, error) {
	b.mu.Lock()
	if time.Since(b.appsAt) < 2*time.Second {
		out := b.apps
		b.mu.Unlock()
		return out, nil
	}
	b.mu.Unlock()
	root, err := b.Tree(ctx)
	if err != nil {
		return nil, err
	}
	var nodes []*wire.TreeNode
	var walk func(n *wire.TreeNode)
	walk = func(n *wire.TreeNode) {
		nodes = append(nodes, n)
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(root)
	var (
		mu  sync.Mutex
		out []*wire.AppInstance
		wg  sync.WaitGroup
		sem = make(chan struct{}, 8)
	)
	list := &wire.AppRequest{Op: wire.AppRequest_OP_LIST}
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			var rep *wire.AppReply
			var err error
			if b.isSelf(n.Peer) {
				var env *wire.Envelope
				env, err = b.local(cctx, &wire.Envelope{Body: &wire.Envelope_AppRequest{AppRequest: list}})
				rep = env.GetAppReply()
			} else {
				err = b.remote(cctx, n.Peer, func(cl *client.Client) (err error) { rep, err = cl.App(cctx, list); return })
			}
			if err != nil || rep == nil {
				return
			}
			mu.Lock()
			for _, ai := range rep.Instances {
				if ai.Manager == "" {
					ai.Manager = n.Name
				}
				out = append(out, ai)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	b.mu.Lock()
	b.apps, b.appsAt = out, time.Now()
	b.mu.Unlock()
	return out, nil
}

func (b *webBackend) Query(ctx context.Context, req *wire.QueryRequest) (*wire.QueryReply, error) {
	rep, err := b.local(ctx, &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: req}})
	if err != nil {
		return nil, err
	}
	return rep.GetQueryReply(), nil
}

func (b *webBackend) Subscribe(ctx context.Context) (<-chan *wire.Event, error) {
	if b.m.mon == nil {
		return nil, errors.New("no event bus")
	}
	return b.m.mon.subscribe(ctx), nil
}

// Recent is the latest limit events of this manager's archive (other than
// utilization samples), oldest first. The archive is read back from now in
// windows four times longer each (a minute, four, …, then all of it) until
// one holds limit events, so that a busy archive is not read whole.
func (b *webBackend) Recent(ctx context.Context, limit int) ([]*wire.Event, error) {
	mo := b.m.mon
	if mo == nil || mo.arch == nil {
		return nil, web.ErrNoArchive
	}
	notSample := func(ev *wire.Event) bool { return ev.Kind != wire.EventKind_EVENT_KIND_UTILIZATION }
	now := time.Now()
	for w := time.Minute; ; w *= 4 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		since := now.Add(-w)
		all := w > 4096*time.Minute // about three days: the rest of the archive
		if all {
			since = time.Time{}
		}
		evs, _, err := mo.arch.Query(since, time.Time{}, notSample, 0)
		if err != nil {
			return nil, err
		}
		if len(evs) >= limit || all {
			return evs[max(len(evs)-limit, 0):], nil
		}
	}
}

// utilizationAge is how long the samples made by asking managers are
// kept before they are asked again.
const utilizationAge = 10 * time.Second

// Utilization is the latest sample of every manager of the tree. Those
// heard on the bus (this manager's own and its inferiors', which publish
// on its topic) are as heard; every other manager, which publishes on its
// own superior's topic that this one does not hear, is asked (its
// resources, its live reservations and its instances, over one stream;
// eight managers at a time; at most every utilizationAge), so that a
// manager two levels down shows its own counts, not zeros. A manager that
// cannot be asked keeps its last sample, whose age the page shows.
func (b *webBackend) Utilization(ctx context.Context) ([]*wire.Event, error) {
	heard := b.m.mon.samples()
	have := make(map[string]bool, len(heard))
	for _, ev := range heard {
		have[ev.Peer] = true
	}
	// One refresh at a time: a caller that comes during one takes its
	// answer.
	b.umu.Lock()
	defer b.umu.Unlock()
	if time.Since(b.askedAt) >= utilizationAge {
		root, err := b.Tree(ctx)
		if err != nil {
			return nil, err
		}
		fresh, inTree := b.askUtilization(ctx, root, have)
		for p := range b.asked {
			if fresh[p] == nil && inTree[p] {
				fresh[p] = b.asked[p] // not answering now: its last sample
			}
		}
		b.asked, b.askedAt = fresh, time.Now()
	}
	for _, p := range slices.Sorted(maps.Keys(b.asked)) {
		if !have[p] {
			heard = append(heard, b.asked[p])
		}
	}
	return heard, nil
}

// askUtilization asks the managers of the tree under root that are not in
// skip and not down for a sample each; inTree is every manager of the
// tree.
func (b *webBackend) askUtilization(ctx context.Context, root *wire.TreeNode, skip map[string]bool) (samples map[string]*wire.Event, inTree map[string]bool) {
	type job struct {
		n        *wire.TreeNode
		superior string
		subtree  uint32
	}
	var jobs []job
	inTree = map[string]bool{}
	var walk func(n *wire.TreeNode, superior string) uint32
	walk = func(n *wire.TreeNode, superior string) uint32 {
		inTree[n.Peer] = true
		size := uint32(1)
		for _, c := range n.Children {
			size += walk(c, n.Peer)
		}
		down := n.Incomplete == "down" || (superior != "" && n.State == wire.RelationState_RELATION_STATE_DOWN)
		if !skip[n.Peer] && !down {
			jobs = append(jobs, job{n, superior, size})
		}
		return size
	}
	walk(root, "")
	var (
		mu  sync.Mutex
		out = make(map[string]*wire.Event, len(jobs))
		wg  sync.WaitGroup
		sem = make(chan struct{}, 8)
	)
	for _, j := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			reps, err := b.askAll(cctx, j.n.Peer,
				&wire.Envelope{Body: &wire.Envelope_ResourcesRequest{ResourcesRequest: &wire.ResourcesRequest{}}},
				&wire.Envelope{Body: &wire.Envelope_ReservationsRequest{ReservationsRequest: &wire.ReservationsRequest{Limit: 1}}},
				&wire.Envelope{Body: &wire.Envelope_AppRequest{AppRequest: &wire.AppRequest{Op: wire.AppRequest_OP_LIST}}})
			if err != nil || reps[0].GetResourcesReply().GetValues() == nil || reps[1].GetReservationsReply() == nil {
				return
			}
			ev := askedSample(j.n, j.superior, j.subtree, reps[0].GetResourcesReply(), reps[1].GetReservationsReply(), reps[2].GetAppReply())
			mu.Lock()
			out[j.n.Peer] = ev
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, inTree
}

// askedSample is a utilization sample made from a manager's answers, with
// the fields its own sample has (type "asked" says where it comes from).
func askedSample(n *wire.TreeNode, superior string, subtree uint32, res *wire.ResourcesReply, rv *wire.ReservationsReply, apps *wire.AppReply) *wire.Event {
	v := res.Values
	u := &wire.Utilization{
		CpuUtil:         v.CpuUtil,
		Free:            []*wire.Amount{{Kind: "cpus", N: v.CpusFree}, {Kind: "mem", N: v.MemFree}},
		Usage:           res.Usage,
		Reservations:    rv.Live,
		SubtreeManagers: subtree,
		Superior:        superior,
	}
	for _, x := range res.Usage {
		if x.Kind != "cpus" && x.Kind != "mem" {
			u.Free = append(u.Free, &wire.Amount{Kind: x.Kind, N: x.Capacity - x.Used})
		}
	}
	for _, ai := range apps.GetInstances() {
		u.Instances++
		if ai.State == "running" || ai.State == "paused" { // as the manager's own sample counts them
			u.Running++
		}
	}
	return &wire.Event{Version: 1, Kind: wire.EventKind_EVENT_KIND_UTILIZATION, Type: "asked", Manager: n.Name, Peer: n.Peer,
		TimeUnixMs: time.Now().UnixMilli(), Body: &wire.Event_Utilization{Utilization: u}}
}

// askAll sends the requests to the manager peer (this one in-process),
// over one stream, and returns the answers in their order.
func (b *webBackend) askAll(ctx context.Context, peer string, reqs ...*wire.Envelope) ([]*wire.Envelope, error) {
	out := make([]*wire.Envelope, 0, len(reqs))
	if b.isSelf(peer) {
		for _, r := range reqs {
			rep, err := b.local(ctx, r)
			if err != nil {
				return nil, err
			}
			out = append(out, rep)
		}
		return out, nil
	}
	err := b.remote(ctx, peer, func(cl *client.Client) error {
		for _, r := range reqs {
			rep, err := cl.Call(ctx, r)
			if err != nil {
				return err
			}
			out = append(out, rep)
		}
		return nil
	})
	return out, err
}

func (b *webBackend) Admin(ctx context.Context, command string) (*wire.AdminReply, error) {
	rep, err := b.m.Driver.Request(ctx, &wire.Envelope{Body: &wire.Envelope_AdminRequest{AdminRequest: &wire.AdminRequest{Command: command}}})
	if err != nil {
		return nil, err
	}
	if e := rep.GetError(); e != nil {
		return nil, &client.RemoteError{Code: e.Code, Message: e.Message}
	}
	return rep.GetAdminReply(), nil
}

// job asks the manager peer (this one in-process) req, a JobRequest.
func (b *webBackend) job(ctx context.Context, peer string, req *wire.JobRequest) (*wire.JobReply, error) {
	env := &wire.Envelope{Body: &wire.Envelope_JobRequest{JobRequest: req}}
	var rep *wire.Envelope
	var err error
	if b.isSelf(peer) {
		rep, err = b.local(ctx, env)
	} else {
		err = b.remote(ctx, peer, func(cl *client.Client) error {
			r, err := cl.Call(ctx, env)
			if err == nil {
				if e := r.GetError(); e != nil {
					err = &client.RemoteError{Code: e.Code, Message: e.Message}
				}
			}
			rep = r
			return err
		})
	}
	if err != nil {
		return nil, err
	}
	jr := rep.GetJobReply()
	if jr == nil {
		return nil, fmt.Errorf("%s answered the job request with something else", peer)
	}
	return jr, nil
}

// Dags is the workflows of the manager peer: every user's, ended ones
// too.
func (b *webBackend) Dags(ctx context.Context, peer string) (*wire.JobReply, error) {
	return b.job(ctx, peer, &wire.JobRequest{Op: wire.JobRequest_OP_DAG_STATUS, All: true, Ended: true})
}

// attrsAge is how long a manager's attributes are kept before it is asked
// again (they change when it restarts); attrsRetry how long one that did
// not answer waits to be asked again.
const (
	attrsAge   = 2 * time.Minute
	attrsRetry = 15 * time.Second
)

// Attributes is the attributes the grid browser marks managers by
// (web.TreeAttributes: glide-ins) of each manager of the tree, by peer. A
// manager is asked (its ResourcesReply, eight at a time) when it is new to
// the tree and then every attrsAge, so that a glide-in is marked soon
// after it joins without every manager being asked each time the page
// reads the tree.
func (b *webBackend) Attributes(ctx context.Context) (map[string]map[string]string, error) {
	b.mu.Lock()
	root := b.tree
	fresh := time.Since(b.treeAt) < 5*time.Second
	b.mu.Unlock()
	if root == nil || !fresh {
		var err error
		if root, err = b.Tree(ctx); err != nil {
			return nil, err
		}
	}
	b.amu.Lock()
	defer b.amu.Unlock()
	if b.attrs == nil {
		b.attrs = map[string]attrEntry{}
	}
	now := time.Now()
	var ask []*wire.TreeNode
	inTree := map[string]bool{}
	var walk func(n *wire.TreeNode, top bool)
	walk = func(n *wire.TreeNode, top bool) {
		inTree[n.Peer] = true
		e, ok := b.attrs[n.Peer]
		down := n.Incomplete == "down" || (!top && n.State == wire.RelationState_RELATION_STATE_DOWN)
		if !down && (!ok || now.Sub(e.at) >= attrsAge) {
			ask = append(ask, n)
		}
		for _, c := range n.Children {
			walk(c, false)
		}
	}
	walk(root, true)
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, 8)
	)
	for _, n := range ask {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			reps, err := b.askAll(cctx, n.Peer, &wire.Envelope{Body: &wire.Envelope_ResourcesRequest{ResourcesRequest: &wire.ResourcesRequest{}}})
			mu.Lock()
			defer mu.Unlock()
			if err != nil || reps[0].GetResourcesReply() == nil {
				// Asked again attrsRetry from now; what it said before stays.
				e := b.attrs[n.Peer]
				e.at = now.Add(attrsRetry - attrsAge)
				b.attrs[n.Peer] = e
				return
			}
			var as map[string]string
			for k, v := range reps[0].GetResourcesReply().Attributes {
				if web.TreeAttributes(k) {
					if as == nil {
						as = map[string]string{}
					}
					as[k] = v
				}
			}
			b.attrs[n.Peer] = attrEntry{at: now, attrs: as}
		})
	}
	wg.Wait()
	out := map[string]map[string]string{}
	for p, e := range b.attrs {
		if !inTree[p] {
			delete(b.attrs, p) // gone from the grid: asked again if it returns
			continue
		}
		if len(e.attrs) > 0 {
			out[p] = e.attrs
		}
	}
	return out, nil
}

// Jobs is the job queue of the manager peer: every user's jobs, ended
// ones too (at most what one list carries; more counts the rest).
func (b *webBackend) Jobs(ctx context.Context, peer string) (*wire.JobReply, error) {
	return b.job(ctx, peer, &wire.JobRequest{Op: wire.JobRequest_OP_LIST, All: true, Ended: true})
}

// JobLog is one job of the manager peer's queue, with its log.
func (b *webBackend) JobLog(ctx context.Context, peer, id string) (*wire.JobInfo, error) {
	rep, err := b.job(ctx, peer, &wire.JobRequest{Op: wire.JobRequest_OP_LOG, Ids: []string{id}})
	if err != nil {
		return nil, err
	}
	if len(rep.Jobs) != 1 {
		return nil, &client.RemoteError{Code: wire.ErrorReply_CODE_NOT_FOUND,
			Message: fmt.Sprintf("%q names %d jobs; name one, CLUSTER[INDEX]", id, len(rep.Jobs))}
	}
	return rep.Jobs[0], nil
}
