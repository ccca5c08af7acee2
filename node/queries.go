package node

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// Query defaults and bounds, applied at the entry manager.
const (
	DefaultQueryLimit = 10
	MaxQueryLimit     = 1000
	DefaultQueryWant  = 1
	MaxQueryBudget    = time.Minute // also bounds tree and ping budgets
	seenQueryTTL      = 2 * time.Minute
	maxSeenQueries    = 1 << 16
	maxOps            = 4096 // concurrent tree, ping and query operations
	seenTreeTTL       = time.Minute
	maxSeenTrees      = 1 << 16
	defaultPingTO     = 5 * time.Second
)

// queries is the module of the requests answered after hearing from other
// managers: tree walks, pings of a relation, and queries (query.Walk). Its
// state is the operations in flight, indexed by the envelope ids they
// sent, and the request ids seen lately (loops and duplicates).
type queries struct {
	e           queriesEnv
	ops         []*op          // operations in flight, oldest first
	byEnv       map[uint64]*op // our request envelope id → operation
	seenTrees   seenSet        // tree request ids seen lately
	seenQueries seenSet        // query ids seen lately
}

// queriesEnv is what the queries module sees of the Core besides env:
// what a tree node names, randomness for new ids, the compiled
// expressions, and this manager's answers (its offer, its resources),
// which the reservations module's values make.
type queriesEnv interface {
	env
	// listenAddrs are the manager's transport addresses.
	listenAddrs() []string
	// randomID draws a random id from the Core's source.
	randomID() uint64
	// expressions compiles requirements and ranks (shared, cached).
	expressions() *query.Cache
	// userOf is request.user for a request from client (Core.userOf).
	userOf(client, declared string) string
	// offerOf is this manager's offer for a query, nil if it does not match.
	offerOf(now time.Time, req *wire.QueryRequest, need, rank *query.Program) *wire.Offer
	// verdictOf is why this manager made no offer for an explained query.
	verdictOf(now time.Time, req *wire.QueryRequest, need *query.Program) *wire.Verdict
	// resources is this manager's resources reply.
	resources(now time.Time) *wire.ResourcesReply
}

func newQueries(e queriesEnv) *queries {
	return &queries{
		e:           e,
		byEnv:       make(map[uint64]*op),
		seenTrees:   newSeenSet(seenTreeTTL, maxSeenTrees),
		seenQueries: newSeenSet(seenQueryTTL, maxSeenQueries),
	}
}

// op is a request we answer only after hearing from other managers: a tree
// walk waiting for inferiors, a ping of a relation, or a query walk.
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
	walk    *query.Walk
	ids     []uint64 // our envelope ids (indexed in byEnv until done)
	started time.Time
	from    string // the relation that asked ("" for a client)
	role    string // entry, down, up

	// an earliest search at its entry: the answer is computed over every
	// offer (the walk keeps up to MaxQueryLimit), then cut to limit
	earliest    bool
	want, limit int
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

// handle takes tree, ping, query and resources requests, and from
// relations (the Core passes no replies from clients) the replies to what
// this module asked.
func (q *queries) handle(now time.Time, o origin, env *wire.Envelope) (bool, error) {
	switch b := env.Body.(type) {
	case *wire.Envelope_TreeRequest:
		q.startTree(now, o, b.TreeRequest)
	case *wire.Envelope_PingRequest:
		q.startPing(now, o, b.PingRequest)
	case *wire.Envelope_QueryRequest:
		q.startQuery(now, o, b.QueryRequest)
	case *wire.Envelope_ResourcesRequest:
		q.e.reply(o, &wire.Envelope{Body: &wire.Envelope_ResourcesReply{ResourcesReply: q.e.resources(now)}})
	case *wire.Envelope_TreeReply:
		return true, q.onTreeReply(now, o.peer, env.ReplyTo, b.TreeReply)
	case *wire.Envelope_PingReply:
		return true, q.onPingReply(now, o.peer, env.ReplyTo)
	case *wire.Envelope_QueryReply:
		return true, q.onQueryReply(now, o.peer, env.ReplyTo, b.QueryReply)
	case *wire.Envelope_Error:
		if q.findOp(env.ReplyTo) == nil {
			return false, nil
		}
		q.onErrorReply(now, o.peer, env.ReplyTo, b.Error)
	default:
		return false, nil
	}
	return true, nil
}

func (q *queries) addOp(o *op) {
	q.ops = append(q.ops, o)
	for _, id := range o.ids {
		q.byEnv[id] = o
	}
	for id := range o.waiting {
		q.byEnv[id] = o
	}
	if o.pingID != 0 {
		q.byEnv[o.pingID] = o
	}
}

func (q *queries) overloaded(o origin) bool {
	if len(q.ops) >= maxOps {
		// Answered operations leave the list at the next tick, which
		// comes only when something is due: a burst of quick pings may
		// fill it with finished ones first.
		q.compactOps()
	}
	if len(q.ops) < maxOps {
		return false
	}
	q.e.replyErr(o, wire.ErrorReply_CODE_OVERLOADED, fmt.Sprintf("%s has %d requests in flight", q.e.name(), len(q.ops)))
	return true
}

// startTree answers a tree request: this manager, its inferiors as it sees
// them, and (depth and budget allowing) their own subtrees, asked for in
// parallel.
func (q *queries) startTree(now time.Time, o origin, req *wire.TreeRequest) {
	e := q.e
	root := q.selfNode()
	if req.RequestId != 0 {
		if q.seenTrees.Has(req.RequestId) {
			root.Incomplete = "duplicate"
			e.reply(o, &wire.Envelope{Body: &wire.Envelope_TreeReply{TreeReply: &wire.TreeReply{Root: root}}})
			return
		}
		q.seenTrees.Add(now, req.RequestId)
	}
	if q.overloaded(o) {
		return
	}
	id := req.RequestId
	if id == 0 {
		id = e.randomID() | 1
		q.seenTrees.Add(now, id)
	}
	budget := e.conf().TreeBudget
	if req.BudgetMs > 0 {
		budget = min(time.Duration(req.BudgetMs)*time.Millisecond, MaxQueryBudget)
	}
	depth := req.MaxDepth
	t := &op{origin: o, root: root, waiting: make(map[uint64]*wire.TreeNode), deadline: now.Add(budget * waitBudgetPct / 100)}
	infs := slices.Clone(e.relations().Inferiors()) // the set's view is shared: sort a copy
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
			eid := e.newID()
			t.waiting[eid] = child
			e.send(r.Peer, &wire.Envelope{Id: eid, Body: &wire.Envelope_TreeRequest{TreeRequest: &wire.TreeRequest{
				RequestId: id, BudgetMs: uint32(cb / time.Millisecond), MaxDepth: next,
			}}})
		}
	}
	if len(t.waiting) == 0 {
		q.finishTree(t, "")
		return
	}
	q.addOp(t)
}

func (q *queries) selfNode() *wire.TreeNode {
	return &wire.TreeNode{Peer: q.e.me(), Name: q.e.name(), Addrs: q.e.listenAddrs(), State: wire.RelationState_RELATION_STATE_UP}
}

func relationNode(now time.Time, r *relations.Relation) *wire.TreeNode {
	n := &wire.TreeNode{
		Peer:  r.Peer,
		Name:  r.Name,
		Addrs: r.Addrs,
		State: stateToPB(r.State),
		RttUs: uint64(r.RTT / time.Microsecond),
	}
	if !r.LastHeard().IsZero() {
		n.LastHeardMsAgo = uint64(max(0, now.Sub(r.LastHeard())) / time.Millisecond)
	}
	return n
}

func (q *queries) onTreeReply(now time.Time, peer string, replyTo uint64, tr *wire.TreeReply) error {
	t := q.findOp(replyTo)
	if t == nil {
		return nil // too late: the walk already answered without it
	}
	child := t.waiting[replyTo]
	if child == nil || child.Peer != peer {
		return fmt.Errorf("%w: tree reply %d from %s answers nothing asked of it", ErrProtocol, replyTo, peerName(q.e.relations(), peer))
	}
	delete(t.waiting, replyTo)
	delete(q.byEnv, replyTo)
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
		q.finishTree(t, "")
	}
	return nil
}

// finishTree answers a tree walk; children still waited for are marked
// with why.
func (q *queries) finishTree(t *op, why string) {
	for id, child := range t.waiting {
		child.Incomplete = why
		delete(q.byEnv, id)
	}
	t.waiting = nil
	t.done = true
	q.e.reply(t.origin, &wire.Envelope{Body: &wire.Envelope_TreeReply{TreeReply: &wire.TreeReply{Root: t.root}}})
}

// startPing answers a ping: itself, or a relation pinged over its channel.
func (q *queries) startPing(now time.Time, o origin, req *wire.PingRequest) {
	e := q.e
	if req.Peer == "" || req.Peer == e.me() || req.Peer == e.name() {
		e.reply(o, &wire.Envelope{Body: &wire.Envelope_PingReply{PingReply: &wire.PingReply{Peer: e.me(), Name: e.name()}}})
		return
	}
	r := findRelation(e.relations(), req.Peer)
	if r == nil {
		e.replyErr(o, wire.ErrorReply_CODE_NOT_FOUND, fmt.Sprintf("%s has no relation with %q", e.name(), req.Peer))
		return
	}
	if !r.State.Live() {
		e.replyErr(o, wire.ErrorReply_CODE_UNAVAILABLE, fmt.Sprintf("relation %s is %s", r.DisplayName(), r.State))
		return
	}
	if q.overloaded(o) {
		return
	}
	budget := defaultPingTO
	if req.BudgetMs > 0 {
		budget = min(time.Duration(req.BudgetMs)*time.Millisecond, MaxQueryBudget)
	}
	p := &op{origin: o, peer: r.Peer, name: r.DisplayName(), sentAt: now, deadline: now.Add(budget), pingID: e.newID()}
	e.send(r.Peer, &wire.Envelope{Id: p.pingID, Body: &wire.Envelope_PingRequest{PingRequest: &wire.PingRequest{}}})
	q.addOp(p)
}

// findRelation finds a relation in set by peer id or by name.
func findRelation(set *relations.Set, key string) *relations.Relation {
	if r := set.Get(key); r != nil {
		return r
	}
	return set.ByName(key)
}

// peerName is a relation's display name, or the peer id shortened.
func peerName(set *relations.Set, peer string) string {
	if r := set.Get(peer); r != nil {
		return r.DisplayName()
	}
	return text.ShortPeer(peer)
}

func (q *queries) onPingReply(now time.Time, peer string, replyTo uint64) error {
	p := q.findOp(replyTo)
	if p == nil {
		return nil
	}
	if p.peer != peer {
		return fmt.Errorf("%w: ping reply %d from %s, asked of %s", ErrProtocol, replyTo, peerName(q.e.relations(), peer), p.name)
	}
	p.done = true
	q.e.reply(p.origin, &wire.Envelope{Body: &wire.Envelope_PingReply{PingReply: &wire.PingReply{
		Peer: peer, Name: peerName(q.e.relations(), peer), RttUs: uint64(now.Sub(p.sentAt) / time.Microsecond),
	}}})
	return nil
}

func (q *queries) onErrorReply(now time.Time, peer string, replyTo uint64, e *wire.ErrorReply) {
	o := q.findOp(replyTo)
	if o.walk != nil {
		q.sendAsks(o, o.walk.OnLost(now, peer, "error: "+e.Message))
		return
	}
	if o.waiting != nil {
		if child := o.waiting[replyTo]; child != nil && child.Peer == peer {
			child.Incomplete = "error: " + e.Message
			delete(o.waiting, replyTo)
			delete(q.byEnv, replyTo)
			if len(o.waiting) == 0 {
				q.finishTree(o, "")
			}
		}
		return
	}
	if o.peer == peer {
		o.done = true
		q.e.replyErr(o.origin, e.Code, e.Message)
	}
}

// findOp finds the live operation that sent envelope id.
func (q *queries) findOp(id uint64) *op {
	if o := q.byEnv[id]; o != nil && !o.done {
		return o
	}
	return nil
}

// relationEnded ends what waits on the relation: tree children are marked
// why, queries go on without it, pings get an error.
func (q *queries) relationEnded(now time.Time, r *relations.Relation, why string) {
	peer := r.Peer
	for _, o := range q.ops {
		if o.done {
			continue
		}
		if o.walk != nil {
			q.sendAsks(o, o.walk.OnLost(now, peer, why))
			continue
		}
		if o.waiting != nil {
			for id, child := range o.waiting {
				if child.Peer == peer {
					child.Incomplete = why
					delete(o.waiting, id)
					delete(q.byEnv, id)
				}
			}
			if len(o.waiting) == 0 {
				q.finishTree(o, "")
			}
		} else if o.peer == peer {
			o.done = true
			q.e.replyErr(o.origin, wire.ErrorReply_CODE_UNAVAILABLE, fmt.Sprintf("relation %s is %s", o.name, why))
		}
	}
	q.compactOps()
}

// tick answers operations whose deadline passed and forgets old request
// ids.
func (q *queries) tick(now time.Time) {
	for _, o := range q.ops {
		if o.done {
			continue
		}
		if o.walk != nil {
			// A walk has phases with their own ends (the down search may
			// end before the climb): let it judge.
			q.sendAsks(o, o.walk.OnTick(now))
			continue
		}
		if now.Before(o.deadline) {
			continue
		}
		if o.waiting != nil {
			q.finishTree(o, "timeout")
		} else {
			o.done = true
			q.e.replyErr(o.origin, wire.ErrorReply_CODE_TIMEOUT, fmt.Sprintf("no ping reply from %s", o.name))
		}
	}
	q.compactOps()
	q.seenTrees.Expire(now)
	q.seenQueries.Expire(now)
}

// deadline is the earliest end of an operation (or of a walk's phase).
// Forgetting old request ids is not a deadline: it only frees memory.
func (q *queries) deadline(time.Time) time.Time {
	var next time.Time
	for _, o := range q.ops {
		if o.done {
			continue
		}
		t := o.deadline
		if o.walk != nil {
			t = o.walk.NextDeadline()
		}
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	return next
}

func (q *queries) compactOps() {
	live := q.ops[:0]
	for _, o := range q.ops {
		if !o.done {
			live = append(live, o)
			continue
		}
		if o.pingID != 0 {
			delete(q.byEnv, o.pingID)
		}
		for _, id := range o.ids {
			delete(q.byEnv, id)
		}
	}
	clear(q.ops[len(live):])
	q.ops = live
}

// startQuery begins a query from a client (the entry) or from a relation
// (o.peer; down from a superior, up from an inferior).
func (q *queries) startQuery(now time.Time, o origin, req *wire.QueryRequest) {
	e := q.e
	earliest, wantN, limitN := false, 0, 0
	if o.peer == "" {
		// The entry: fill defaults, name the query, and say who asks
		// (request.user) by the [users] table.
		req.QueryId = e.randomID() | 1
		req.User = e.userOf(o.client, req.User)
		req.Direction = wire.QueryRequest_DIRECTION_UNSPECIFIED
		if req.Limit == 0 {
			req.Limit = DefaultQueryLimit
		}
		if req.Want == 0 {
			req.Want = DefaultQueryWant
		}
		if req.BudgetMs == 0 {
			req.BudgetMs = uint32(e.conf().QueryBudget / time.Millisecond)
		}
		if req.Earliest {
			// Every manager the query may reach is a candidate: climb
			// until the search has seen as many as it may keep.
			earliest, wantN, limitN = true, int(req.Want), int(min(req.Limit, MaxQueryLimit))
			req.Limit, req.Want = MaxQueryLimit, MaxQueryLimit
		}
	} else {
		if req.Direction == wire.QueryRequest_DIRECTION_UNSPECIFIED {
			e.replyErr(o, wire.ErrorReply_CODE_BAD_REQUEST, "query from a relation must say its direction")
			return
		}
		if q.seenQueries.Has(req.QueryId) {
			// Reached twice (a manager with two superiors, or a rewiring
			// while the query runs): answer once, empty the second time.
			e.reply(o, &wire.Envelope{Body: &wire.Envelope_QueryReply{QueryReply: &wire.QueryReply{}}})
			return
		}
	}
	// Bounds hold for every asker, relations included: an answer is cut to
	// at most MaxQueryLimit offers and a walk lives at most MaxQueryBudget.
	if req.Limit == 0 || req.Limit > MaxQueryLimit {
		req.Limit = MaxQueryLimit
	}
	req.BudgetMs = min(req.BudgetMs, uint32(MaxQueryBudget/time.Millisecond))
	q.seenQueries.Add(now, req.QueryId)
	need, err := e.expressions().Get(query.Requirement, req.Requirement)
	if err != nil {
		e.replyErr(o, wire.ErrorReply_CODE_BAD_REQUEST, err.Error())
		return
	}
	var rank *query.Program
	if req.Rank != "" {
		if rank, err = e.expressions().Get(query.Rank, req.Rank); err != nil {
			e.replyErr(o, wire.ErrorReply_CODE_BAD_REQUEST, err.Error())
			return
		}
	}
	if q.overloaded(o) {
		return
	}
	if o.trace == "" {
		o.trace = fmt.Sprintf("%016x", req.QueryId)
	}
	fromName := ""
	if o.peer != "" {
		if r := e.relations().Get(o.peer); r != nil {
			fromName = r.DisplayName()
		}
	}
	own := e.offerOf(now, req, need, rank)
	w, asks := query.NewWalk(now, query.Self{Peer: e.me(), Name: e.name()}, req, o.peer, fromName,
		own, q.neighbors(relations.Inferior), q.neighbors(relations.Superior))
	if req.Explain && own == nil {
		w.AddVerdict(e.verdictOf(now, req, need))
	}
	qo := &op{origin: o, walk: w, deadline: w.Deadline(), started: now, from: fromName, role: queryRole(req.Direction),
		earliest: earliest, want: wantN, limit: limitN}
	q.addOp(qo)
	q.sendAsks(qo, asks)
	if last := len(q.ops) - 1; qo.done && last >= 0 && q.ops[last] == qo {
		// Answered at once (a manager with no one to ask: most of a
		// tree's managers are leaves): it need not wait in the list for
		// the next tick to leave it. No loop over q.ops runs here; if
		// the answer made another operation meanwhile (a local origin
		// asking again), qo is not last and waits for the compaction.
		q.ops[last] = nil
		q.ops = q.ops[:last]
	}
}

func (q *queries) neighbors(role relations.Role) []query.Neighbor {
	var rs []*relations.Relation
	if role == relations.Superior {
		rs = q.e.relations().Superiors()
	} else {
		rs = q.e.relations().Inferiors()
	}
	out := make([]query.Neighbor, len(rs))
	for i, r := range rs {
		out[i] = query.Neighbor{Peer: r.Peer, Name: r.DisplayName(), Live: r.State.Live(), RTT: r.RTT}
	}
	return out
}

// sendAsks sends what a walk asked for and answers if it is done.
func (q *queries) sendAsks(o *op, asks []query.Ask) {
	for _, a := range asks {
		id := q.e.newID()
		o.ids = append(o.ids, id)
		q.byEnv[id] = o
		q.e.send(a.To, &wire.Envelope{Id: id, TraceId: o.origin.trace, Body: &wire.Envelope_QueryRequest{QueryRequest: a.Req}})
	}
	if o.walk.Done() && !o.done {
		o.done = true
		for _, id := range o.ids {
			delete(q.byEnv, id)
		}
		rep := o.walk.Reply()
		if o.earliest {
			answerEarliest(rep, o.want, o.limit)
		}
		q.hopDone(o, rep)
		q.e.reply(o.origin, &wire.Envelope{Body: &wire.Envelope_QueryReply{QueryReply: rep}})
		// A done operation waits in q.ops for the next compaction, and
		// nothing reads its walk again (every reader skips done ones):
		// let the walk's offers, requests and visits go now. In a
		// whole-grid query they were about 1 KB a manager until then.
		o.walk, o.ids = nil, nil
	}
}

// queryRole names a manager's part in a query by the direction it came.
func queryRole(d wire.QueryRequest_Direction) string {
	switch d {
	case wire.QueryRequest_DIRECTION_DOWN:
		return "down"
	case wire.QueryRequest_DIRECTION_UP:
		return "up"
	}
	return "entry"
}

// hopDone logs one line per manager a query reached (debug level) and
// counts it: with the trace id, an operator can tell from the logs and
// metrics which managers a query reached and how long each took.
func (q *queries) hopDone(o *op, rep *wire.QueryReply) {
	e := q.e
	took := e.clock().Sub(o.started)
	partial := len(rep.Missing) > 0
	e.meter().QueryHop(o.role, took, len(o.ids), len(rep.Offers), partial)
	if !e.logger().Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	from := o.from
	if from == "" {
		from = "client " + text.ShortPeer(o.origin.client)
	}
	e.logger().Debug("query hop", "trace", o.origin.trace, "role", o.role, "from", from, "took", took,
		"asked", len(o.ids), "offers", len(rep.Offers), "visited", rep.Visited, "missing", len(rep.Missing))
}

func (q *queries) onQueryReply(now time.Time, peer string, replyTo uint64, rep *wire.QueryReply) error {
	o := q.findOp(replyTo)
	if o == nil || o.walk == nil {
		return nil // too late: the walk answered without it
	}
	if !o.walk.Waiting(peer) {
		return fmt.Errorf("%w: query reply %d from %s answers nothing asked of it", ErrProtocol, replyTo, peerName(q.e.relations(), peer))
	}
	q.sendAsks(o, o.walk.OnReply(now, peer, rep))
	return nil
}

// The verdicts of an explained query (query_request.explain): why a
// manager made no offer.
const (
	whyRequirement = "requirement"
	whyPolicy      = "policy"
	whyFree        = "free"
	whyDrained     = "drained"
	whyError       = "error"
)

// verdictOf is the reservations module's answer (queriesEnv).
func (c *Core) verdictOf(now time.Time, req *wire.QueryRequest, need *query.Program) *wire.Verdict {
	return c.res.verdictOf(now, req, need)
}

// verdictOf says why this manager made no offer for req: it retraces
// offerOf's decisions (drained, the earliest window, the requirement,
// the owner's policy) on the same values, and names the first clause
// that is not true (query.Explain). A requirement clause that reads only
// free amounts (cpus_free >= 2) is why="free": the manager has the
// resource, but it is reserved; with a window (duration) the verdict
// also says when one with the query's amounts could begin here. It is
// called only where offerOf gave nil, so a query without explain costs
// nothing more.
func (m *reservations) verdictOf(now time.Time, req *wire.QueryRequest, need *query.Program) *wire.Verdict {
	e := m.e
	vd := &wire.Verdict{Peer: e.me(), Name: e.name()}
	if m.drained && !req.Locate {
		vd.Why = whyDrained
		vd.Detail = fmt.Sprintf("%s is drained: it takes no new reservations and makes no offers", e.name())
		return vd
	}
	v := &m.vals
	noWindow := false
	switch from, to := queryWindow(now, req); {
	case req.Earliest && !req.Locate:
		// Over the first window, as offerOf; with none, the requirement
		// is judged on the values now.
		if starts, w := m.earliestStarts(now, req); starts == nil {
			noWindow = true
		} else {
			v = w
		}
	case !from.IsZero():
		v = m.valuesOver(from, to)
	}
	r := &query.Request{User: req.User, CPUs: req.Cpus, Mem: req.Mem, Attrs: req.Attrs}
	v, _, _ = m.forRequest(v, r)
	compile := e.expressions().Get
	if f, bad := query.Explain(need, v, r, compile); bad {
		vd.Why, vd.Clause, vd.Detail = whyRequirement, f.Clause, f.Detail
		if f.OnlyFree && !f.Undefined {
			vd.Why = whyFree
			if req.DurationMs > 0 && !noWindow {
				vd.EarliestUnixMs = m.earliestBegin(now, req)
			}
		}
		return vd
	}
	if noWindow {
		from, to := queryWindow(now, req)
		vd.Why = whyFree
		vd.Detail = fmt.Sprintf("no window of %s with %s free begins here before %s",
			text.FormatDuration(to.Sub(from)), amountsText(queryAmounts(req)), text.MessageTime(from.Add(earliestHorizon(req))))
		return vd
	}
	if req.Locate {
		return nil // it matched: a locate query does not ask the policy
	}
	if p := m.policy(); p != nil {
		if f, bad := query.Explain(p, v, r, compile); bad {
			vd.Why, vd.Clause, vd.Detail = whyPolicy, f.Clause, f.Detail
			return vd
		}
	}
	vd.Why = whyError
	vd.Detail = fmt.Sprintf("%s made no offer, yet its requirement and its owner's policy hold here now", e.name())
	return vd
}

// earliestHorizon is how far ahead an earliest search (or a verdict's
// earliest begin) looks for req.
func earliestHorizon(req *wire.QueryRequest) time.Duration {
	h := msDuration(req.HorizonMs)
	if h <= 0 {
		h = defaultHorizon
	}
	return min(h, maxCalendarSpan)
}

// earliestBegin is when a window of req's duration with its amounts free
// could begin here, from its begin (or now) within the horizon, as unix
// ms; 0 if the query names no amount (the clause alone says what it
// needs) or there is none.
func (m *reservations) earliestBegin(now time.Time, req *wire.QueryRequest) int64 {
	amounts := queryAmounts(req)
	if len(amounts) == 0 {
		return 0
	}
	from, to := queryWindow(now, req)
	spans := m.ledger.Earliest(amounts, from, from.Add(earliestHorizon(req)), to.Sub(from), 1)
	if len(spans) == 0 {
		return 0
	}
	return spans[0].From.Add(time.Millisecond - 1).Truncate(time.Millisecond).UnixMilli()
}

// amountsText writes amounts for a person: "cpus 2, mem 4.0 GiB, gpus 1".
func amountsText(amounts []reservation.Amount) string {
	if len(amounts) == 0 {
		return "nothing"
	}
	parts := make([]string, len(amounts))
	for i, a := range amounts {
		n := strconv.FormatInt(a.N, 10)
		if a.Kind == reservation.Mem {
			n = text.Size(a.N)
		}
		parts[i] = a.Kind + " " + n
	}
	return strings.Join(parts, ", ")
}
