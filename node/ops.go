package node

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// op is a request we answer only after hearing from other managers: a tree
// walk waiting for inferiors, or a ping of a relation.
type op struct {
	origin   origin
	deadline time.Time
	done     bool

	// tree walk
	root    *wire.TreeNode
	waiting map[uint64]*wire.TreeNode // our envelope id → the child it asks

	// ping
	peer   string
	name   string
	sentAt time.Time
	pingID uint64

	// query walk
	walk *query.Walk
	ids  []uint64 // our envelope ids (indexed in Core.byEnv until done)
}

// Share of the asker's budget a manager gives its inferiors, and share it
// waits for them before answering: the rest covers the hop back. Each level
// of the tree thus gets 80% of its parent's budget.
const (
	childBudgetPct = 80
	waitBudgetPct  = 90
)

// ChildBudget is the budget a manager with budget b gives an inferior whose
// round trip is rtt.
func ChildBudget(b, rtt time.Duration) time.Duration {
	return b*childBudgetPct/100 - rtt
}

func (c *Core) addOp(o *op) {
	c.ops = append(c.ops, o)
	for _, id := range o.ids {
		c.byEnv[id] = o
	}
	for id := range o.waiting {
		c.byEnv[id] = o
	}
	if o.pingID != 0 {
		c.byEnv[o.pingID] = o
	}
}

func (c *Core) overloaded(o origin) bool {
	if len(c.ops) < maxOps {
		return false
	}
	c.replyErr(o, wire.ErrorReply_CODE_OVERLOADED, fmt.Sprintf("%s has %d requests in flight", c.cfg.Name, len(c.ops)))
	return true
}

// startTree answers a tree request: this manager, its inferiors as it sees
// them, and (depth and budget allowing) their own subtrees, asked for in
// parallel.
func (c *Core) startTree(now time.Time, o origin, req *wire.TreeRequest) {
	root := c.selfNode()
	if req.RequestId != 0 {
		if c.seenTrees.Has(req.RequestId) {
			root.Incomplete = "duplicate"
			c.reply(o, &wire.Envelope{Body: &wire.Envelope_TreeReply{TreeReply: &wire.TreeReply{Root: root}}})
			return
		}
		c.seenTrees.Add(now, req.RequestId)
	}
	if c.overloaded(o) {
		return
	}
	id := req.RequestId
	if id == 0 {
		id = c.rng.Uint64() | 1
		c.seenTrees.Add(now, id)
	}
	budget := c.cfg.TreeBudget
	if req.BudgetMs > 0 {
		budget = time.Duration(req.BudgetMs) * time.Millisecond
	}
	depth := req.MaxDepth
	t := &op{origin: o, root: root, waiting: make(map[uint64]*wire.TreeNode), deadline: now.Add(budget * waitBudgetPct / 100)}
	infs := slices.Clone(c.set.Inferiors()) // the set's view is shared: sort a copy
	slices.SortStableFunc(infs, func(a, b *relations.Relation) int { return strings.Compare(a.Name, b.Name) })
	for _, r := range infs {
		child := relationNode(now, r)
		root.Children = append(root.Children, child)
		cb := ChildBudget(budget, r.RTT)
		switch {
		case !r.State.Live():
			child.Incomplete = "down"
		case depth == 1:
			child.Incomplete = "depth limit"
		case cb < minHopBudget:
			child.Incomplete = "no budget"
		default:
			next := depth
			if next > 1 {
				next--
			}
			eid := c.newID()
			t.waiting[eid] = child
			c.send(r.Peer, &wire.Envelope{Id: eid, Body: &wire.Envelope_TreeRequest{TreeRequest: &wire.TreeRequest{
				RequestId: id, BudgetMs: uint32(cb / time.Millisecond), MaxDepth: next,
			}}})
		}
	}
	if len(t.waiting) == 0 {
		c.finishTree(t, "")
		return
	}
	c.addOp(t)
}

func (c *Core) selfNode() *wire.TreeNode {
	return &wire.TreeNode{Peer: c.self, Name: c.cfg.Name, Addrs: c.addrs, State: wire.RelationState_RELATION_STATE_UP}
}

func relationNode(now time.Time, r *relations.Relation) *wire.TreeNode {
	n := &wire.TreeNode{
		Peer:  r.Peer,
		Name:  r.Name,
		Addrs: r.Addrs,
		State: stateToPB(r.State),
		RttUs: uint64(r.RTT / time.Microsecond),
	}
	if !r.LastHeard.IsZero() {
		n.LastHeardMsAgo = uint64(max(0, now.Sub(r.LastHeard)) / time.Millisecond)
	}
	return n
}

func (c *Core) onTreeReply(now time.Time, r *relations.Relation, replyTo uint64, tr *wire.TreeReply) error {
	t := c.findOp(replyTo)
	if t == nil {
		return nil // too late: the walk already answered without it
	}
	child := t.waiting[replyTo]
	if child == nil || child.Peer != r.Peer {
		return fmt.Errorf("%w: tree reply %d from %s answers nothing asked of it", ErrProtocol, replyTo, r.DisplayName())
	}
	delete(t.waiting, replyTo)
	delete(c.byEnv, replyTo)
	if got := tr.GetRoot(); got != nil {
		if child.Name == "" {
			child.Name = got.Name
		}
		child.Children = got.Children
		child.Incomplete = got.Incomplete
	} else {
		child.Incomplete = "empty reply"
	}
	if len(t.waiting) == 0 {
		c.finishTree(t, "")
	}
	return nil
}

// finishTree answers a tree walk; children still waited for are marked
// with why.
func (c *Core) finishTree(t *op, why string) {
	for id, child := range t.waiting {
		child.Incomplete = why
		delete(c.byEnv, id)
	}
	t.waiting = nil
	t.done = true
	c.reply(t.origin, &wire.Envelope{Body: &wire.Envelope_TreeReply{TreeReply: &wire.TreeReply{Root: t.root}}})
}

// startPing answers a ping: itself, or a relation pinged over its channel.
func (c *Core) startPing(now time.Time, o origin, req *wire.PingRequest) {
	if req.Peer == "" || req.Peer == c.self || req.Peer == c.cfg.Name {
		c.reply(o, &wire.Envelope{Body: &wire.Envelope_PingReply{PingReply: &wire.PingReply{Peer: c.self, Name: c.cfg.Name}}})
		return
	}
	r := c.findRelation(req.Peer)
	if r == nil {
		c.replyErr(o, wire.ErrorReply_CODE_NOT_FOUND, fmt.Sprintf("%s has no relation with %q", c.cfg.Name, req.Peer))
		return
	}
	if !r.State.Live() {
		c.replyErr(o, wire.ErrorReply_CODE_UNAVAILABLE, fmt.Sprintf("relation %s is %s", r.DisplayName(), r.State))
		return
	}
	if c.overloaded(o) {
		return
	}
	budget := defaultPingTO
	if req.BudgetMs > 0 {
		budget = time.Duration(req.BudgetMs) * time.Millisecond
	}
	p := &op{origin: o, peer: r.Peer, name: r.DisplayName(), sentAt: now, deadline: now.Add(budget), pingID: c.newID()}
	c.send(r.Peer, &wire.Envelope{Id: p.pingID, Body: &wire.Envelope_PingRequest{PingRequest: &wire.PingRequest{}}})
	c.addOp(p)
}

// findRelation finds a relation by peer id or by name.
func (c *Core) findRelation(key string) *relations.Relation {
	if r := c.set.Get(key); r != nil {
		return r
	}
	return c.set.ByName(key)
}

func (c *Core) onPingReply(now time.Time, r *relations.Relation, replyTo uint64) error {
	p := c.findOp(replyTo)
	if p == nil {
		return nil
	}
	if p.peer != r.Peer {
		return fmt.Errorf("%w: ping reply %d from %s, asked of %s", ErrProtocol, replyTo, r.DisplayName(), p.name)
	}
	p.done = true
	c.reply(p.origin, &wire.Envelope{Body: &wire.Envelope_PingReply{PingReply: &wire.PingReply{
		Peer: r.Peer, Name: r.DisplayName(), RttUs: uint64(now.Sub(p.sentAt) / time.Microsecond),
	}}})
	return nil
}

func (c *Core) onErrorReply(now time.Time, r *relations.Relation, replyTo uint64, e *wire.ErrorReply) error {
	o := c.findOp(replyTo)
	if o == nil {
		return nil
	}
	if o.walk != nil {
		c.sendAsks(o, o.walk.OnLost(now, r.Peer, "error: "+e.Message))
		return nil
	}
	if o.waiting != nil {
		if child := o.waiting[replyTo]; child != nil && child.Peer == r.Peer {
			child.Incomplete = "error: " + e.Message
			delete(o.waiting, replyTo)
			delete(c.byEnv, replyTo)
			if len(o.waiting) == 0 {
				c.finishTree(o, "")
			}
		}
		return nil
	}
	if o.peer == r.Peer {
		o.done = true
		c.replyErr(o.origin, e.Code, e.Message)
	}
	return nil
}

// findOp finds the live operation that sent envelope id.
func (c *Core) findOp(id uint64) *op {
	if o := c.byEnv[id]; o != nil && !o.done {
		return o
	}
	return nil
}

// failOps ends what waits on peer: tree children are marked why, pings
// get an error.
func (c *Core) failOps(peer, why string) {
	for _, o := range c.ops {
		if o.done {
			continue
		}
		if o.walk != nil {
			c.sendAsks(o, o.walk.OnLost(c.now, peer, why))
			continue
		}
		if o.waiting != nil {
			for id, child := range o.waiting {
				if child.Peer == peer {
					child.Incomplete = why
					delete(o.waiting, id)
					delete(c.byEnv, id)
				}
			}
			if len(o.waiting) == 0 {
				c.finishTree(o, "")
			}
		} else if o.peer == peer {
			o.done = true
			c.replyErr(o.origin, wire.ErrorReply_CODE_UNAVAILABLE, fmt.Sprintf("relation %s is %s", o.name, why))
		}
	}
	c.compactOps()
}

// expireOps answers operations whose deadline passed and forgets old tree
// request ids.
func (c *Core) expireOps(now time.Time) {
	for _, o := range c.ops {
		if o.done {
			continue
		}
		if o.walk != nil {
			// A walk has phases with their own ends (the down search may
			// end before the climb): let it judge.
			c.sendAsks(o, o.walk.OnTick(now))
			continue
		}
		if now.Before(o.deadline) {
			continue
		}
		if o.waiting != nil {
			c.finishTree(o, "timeout")
		} else {
			o.done = true
			c.replyErr(o.origin, wire.ErrorReply_CODE_TIMEOUT, fmt.Sprintf("no ping reply from %s", o.name))
		}
	}
	c.compactOps()
	c.seenTrees.Expire(now)
	c.seenQueries.Expire(now)
}

func (c *Core) compactOps() {
	live := c.ops[:0]
	for _, o := range c.ops {
		if !o.done {
			live = append(live, o)
			continue
		}
		if o.pingID != 0 {
			delete(c.byEnv, o.pingID)
		}
		for _, id := range o.ids {
			delete(c.byEnv, id)
		}
	}
	clear(c.ops[len(live):])
	c.ops = live
}
