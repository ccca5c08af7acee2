package sim

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// do carries out action i. Actions with a rate (and churn) start a
// stream that runs in the background; the others end when what they
// started is over (answers in, the tree healed).
func (r *runner) do(i int, a *Action) error {
	idx := i + 1
	switch a.Do {
	case "settle":
		took, ok := r.waitUntil(r.healed, a.Within.D())
		if !ok {
			r.note(idx, a, "not healed within %v: %s", a.Within.D(), r.why)
		}
		r.add(r.fig(idx, a, "build time", "s", []float64{took.Seconds()}, nil))
		r.add(r.fig(idx, a, "healed", "1=yes", []float64{b2f(ok)}, nil))
	case "query":
		r.queries(idx, a)
	case "reserve":
		r.reserves(idx, a)
	case "kill":
		var victims []int
		switch {
		case a.Name != "":
			victims = []int{nameIndex(a.Name, r.g.n)}
		case a.Subtree != "":
			victims = r.subtree(nameIndex(a.Subtree, r.g.n))
		case a.Region != "":
			for m := 0; m < r.g.n; m++ {
				if r.g.names[r.g.region[m]] == a.Region {
					victims = append(victims, m)
				}
			}
		default:
			live := r.liveList()
			k := int(math.Round(float64(len(live)) * a.Percent / 100))
			for _, j := range r.rng.Perm(len(live))[:k] {
				victims = append(victims, live[j])
			}
		}
		killed := 0
		for _, m := range victims {
			if !r.dead[m] {
				r.kill(m)
				killed++
			}
		}
		r.add(r.fig(idx, a, "managers killed", "", []float64{float64(killed)}, nil))
		r.reconverge(idx, a, "reconverge time", r.detectModel())
	case "restart":
		var who []int
		if a.Name != "" {
			who = []int{nameIndex(a.Name, r.g.n)}
		} else {
			for m := range r.dead {
				if r.dead[m] {
					who = append(who, m)
				}
			}
		}
		for _, m := range who {
			r.start(m)
		}
		r.exact = false
		r.world++
		r.add(r.fig(idx, a, "managers restarted", "", []float64{float64(len(who))}, nil))
		// No model: a restarted manager dials its saved superiors at once,
		// but one that is restarting too refuses it and it backs off.
		r.reconverge(idx, a, "settle time", nil)
	case "partition":
		cut := 0
		r.cut(func(m int) bool {
			in := r.g.names[r.g.region[m]] == a.Region
			if in {
				cut++
			}
			return in
		})
		r.add(r.fig(idx, a, "managers cut off", "", []float64{float64(cut)}, nil))
		r.cutAt = r.net.Now()
		r.reconverge(idx, a, "reconverge time", r.detectModel())
	case "heal":
		var model *float64
		if !r.cutAt.IsZero() {
			lasted := r.net.Now().Sub(r.cutAt)
			bound, why := r.rejoinModel(lasted)
			b := bound.Seconds()
			model = &b
			r.note(idx, a, "%s", why)
			r.cutAt = time.Time{}
		}
		r.cut(nil)
		// Managers that replaced a superior across the cut keep the
		// replacement (unless prefer_configured_superior): the shape to
		// reach is a settled one, not the configured one.
		r.exact = false
		r.reconverge(idx, a, "rejoin time", model)
	case "churn":
		r.churn(idx, a)
	case "admin":
		r.admin(idx, a)
	case "rewire":
		r.rewire(idx, a)
	case "rest":
		r.rest(idx, a)
	case "wait":
		r.step(a.For.D())
	default:
		return fmt.Errorf("unknown action %q", a.Do)
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// note records what went wrong in action idx, once per action.
func (r *runner) note(idx int, a *Action, format string, args ...any) {
	prefix := fmt.Sprintf("action %d (%s): ", idx, a.Do)
	for _, n := range r.notes {
		if strings.HasPrefix(n, prefix) {
			return
		}
	}
	r.notes = append(r.notes, prefix+fmt.Sprintf(format, args...))
}

// replyErr describes a reply that is not the answer hoped for.
func replyErr(env *wire.Envelope) string {
	if env == nil {
		return "no answer in time"
	}
	if e := env.GetError(); e != nil {
		return e.Message
	}
	return fmt.Sprintf("unexpected reply %T", env.Body)
}

// add records figures now.
func (r *runner) add(fs ...Figure) { r.figs = append(r.figs, fs...) }

// reconverge waits until the hierarchy is what it should be and records
// the time taken beside its model (nil: none).
func (r *runner) reconverge(idx int, a *Action, what string, model *float64) {
	before := r.falseRep
	took, ok := r.waitUntil(r.healed, a.Within.D())
	if !ok {
		r.note(idx, a, "not healed within %v: %s", a.Within.D(), r.why)
	}
	r.add(r.fig(idx, a, what, "s", []float64{took.Seconds()}, model))
	r.add(r.fig(idx, a, "healed", "1=yes", []float64{b2f(ok)}, nil))
	r.add(r.fig(idx, a, "false failure detections", "", []float64{float64(r.falseRep - before)}, nil))
}

// detectModel is the model of a reconvergence after a kill or a cut:
// detection alone. A relation is down once silent for misses intervals
// plus half an interval of grace (relations.Liveness.FailAfter); the
// worst case over many failures is that whole span.
func (r *runner) detectModel() *float64 {
	cfg := r.base()
	m := cfg.Liveness().FailAfter().Seconds()
	return &m
}

// backoffJitter is the spread of each redial delay, ±20%
// (relations/backoff.go).
const backoffJitter = 0.2

// rejoinModel is the longest the managers a partition cut off may wait,
// once it heals after lasting cut, to be back under their superiors, and
// why. It is not the failure detector's span: a cut-off manager declared
// its superior failed (after FailAfter) and redials it with backoff
// (dial.retry_initial, doubling to dial.retry_max, each ±20%); a dial
// into the cut hangs until it times out (memnet's DialTimeout, node/p2p's
// 10s). An attempt that started before the heal hangs, so a manager
// rejoins at its first attempt started after the heal: up to a timeout
// and a backoff later. The bound takes the earliest each attempt can
// start to decide whether it may have hung, and the latest for when the
// next one starts (each waits for its manager's next tick too); then the
// dial's delay and the handshake's round trip, two ticks, and the
// check's resolution.
func (r *runner) rejoinModel(cut time.Duration) (time.Duration, string) {
	cfg := r.base()
	hang := r.net.DialTimeout
	fail := cfg.Liveness().FailAfter()
	// The relation fell silent up to one interval before the cut (the
	// last heartbeat), and the failure is seen on the next tick.
	early, late := fail-cfg.HeartbeatInterval, fail+r.net.TickEvery
	nw := &r.sc.Network
	farthest := max(nw.SameRack.D(), nw.SameRegion.D(), nw.CrossRegion.D())
	for _, d := range nw.Between {
		farthest = max(farthest, d.D())
	}
	tick := r.net.TickEvery
	slack := 3*time.Duration(float64(farthest)*(1+nw.Jitter)) + 2*tick + r.opt.Check
	if cut < early {
		return slack, fmt.Sprintf("the cut lasted %v, less than the failure detector's span (%v): nothing to rejoin", cut.Round(time.Millisecond), fail)
	}
	delay := cfg.RetryInitial
	lo := early + time.Duration(float64(delay)*(1-backoffJitter))
	hi := late + time.Duration(float64(delay)*(1+backoffJitter)) + tick
	hung := 0
	for lo < cut {
		hung++
		delay = min(2*delay, cfg.RetryMax)
		lo += hang + time.Duration(float64(delay)*(1-backoffJitter))
		hi += hang + time.Duration(float64(delay)*(1+backoffJitter)) + tick
	}
	bound := hi - cut + slack
	return bound, fmt.Sprintf("rejoin time: the model is a bound, not the failure detector's span: after a cut of %v, "+
		"the managers cut off redial their superior with backoff (%v doubling to %v, ±20%%, from its failure at %v); "+
		"%d redial(s) may have started in the cut and hung for the %v dial timeout, so the next may start %v after the heal",
		cut.Round(time.Millisecond), cfg.RetryInitial, cfg.RetryMax, fail, hung, hang, (hi - cut).Round(time.Millisecond))
}

func (r *runner) liveList() []int {
	var out []int
	for m := range r.dead {
		if !r.dead[m] {
			out = append(out, m)
		}
	}
	return out
}

func (r *runner) kill(m int) {
	r.world++
	r.net.Kill(r.peer(m))
	r.dead[m] = true
	r.up--
}

func (r *runner) start(m int) {
	if !r.dead[m] {
		return
	}
	r.world++
	r.net.Start(r.peer(m))
	r.dead[m] = false
	r.up++
}

// subtree is m and every manager under it by primary superiors.
func (r *runner) subtree(m int) []int {
	in := make([]bool, r.g.n)
	in[m] = true
	out := []int{m}
	for i := m + 1; i < r.g.n; i++ { // superiors come before inferiors
		if p := r.g.parents[i]; len(p) > 0 && in[p[0]] {
			in[i] = true
			out = append(out, i)
		}
	}
	return out
}

// hier is the hierarchy as the managers see it now, read from their
// Cores: each live manager's live inferiors and its live superior (-1: a
// root). The models of a query's walk and of an admin flood follow it,
// not the configured tree: after a failover or a heal they are the walk
// the code makes. ok is false where the models do not apply: a manager
// with two live superiors (the walk climbs to both, a flood meets
// itself), or a relation taken as live to a manager that is dead or cut
// off (the walk waits for it until its budget ends).
type hier struct {
	kids [][]int32
	sup  []int32
	ok   bool
	seq  [2]uint64 // eventSeq, world when read
}

// hierarchy reads the hierarchy, or returns the last reading if no
// relation event and no change of the world happened since.
func (r *runner) hierarchy() *hier {
	if h := r.hier; h != nil && h.seq == [2]uint64{r.eventSeq, r.world} {
		return h
	}
	n := r.g.n
	h := &hier{kids: make([][]int32, n), sup: make([]int32, n), ok: true, seq: [2]uint64{r.eventSeq, r.world}}
	for i := range h.sup {
		h.sup[i] = -1
	}
	for i := 0; i < n; i++ {
		if r.dead[i] {
			continue
		}
		set := r.nodeAt(i).Core.Relations()
		for _, rel := range set.Superiors() {
			if !rel.State.Live() {
				continue
			}
			j := peerIndex(r.net, rel.Peer)
			if j < 0 || r.dead[j] || r.comp[j] != r.comp[i] || h.sup[i] >= 0 {
				h.ok = false
				continue
			}
			h.sup[i] = int32(j)
		}
		for _, rel := range set.Inferiors() {
			if !rel.State.Live() {
				continue
			}
			j := peerIndex(r.net, rel.Peer)
			if j < 0 || r.dead[j] || r.comp[j] != r.comp[i] {
				h.ok = false
				continue
			}
			h.kids[i] = append(h.kids[i], int32(j))
		}
	}
	r.hier = h
	return h
}

// searchDown is the model of manager m's search of its subtree, depth
// levels down (skipping inferior skip): the round trip of its slowest
// branch, and how many managers it visits (m included). A manager asks
// all its inferiors at once and answers when the last one has, so the
// round trip is the slowest path's.
func (r *runner) searchDown(h *hier, m, depth, skip int) (time.Duration, int) {
	nw := &r.sc.Network
	order := []int32{int32(m)}
	parent := []int32{-1} // position in order of each one's asker
	level := []int32{0}
	for i := 0; i < len(order); i++ {
		if int(level[i]) >= depth {
			continue
		}
		for _, k := range h.kids[order[i]] {
			if i == 0 && int(k) == skip {
				continue
			}
			order = append(order, k)
			parent = append(parent, int32(i))
			level = append(level, level[i]+1)
		}
	}
	rt := make([]time.Duration, len(order))
	for i := len(order) - 1; i > 0; i-- {
		p := parent[i]
		rt[p] = max(rt[p], 2*r.g.latency(nw, int(order[p]), int(order[i]))+rt[i])
	}
	return rt[0], len(order)
}

// walkModel is the model of a query from entry e that climbs up levels
// and searches down levels below each manager on its way, when nothing
// stops it early (want more than it can find): the managers it visits,
// and its latency in ms. A walk (query.Walk) searches in phases: a
// manager first asks its inferiors (all at once) and only when their
// answers are in, and it is still short of offers, climbs to its
// superior, which does the same with its other inferiors. So the
// critical path is, for each manager on the way up, the round trip of
// its slowest search down, plus the round trips of the climb, plus the
// client's. (A flood that asked up and down at once would take only the
// round trip to the farthest manager: the price of the phases is what
// stops a query early when want is met.) Each manager but the entry is
// asked once and answers once: 2 × (visited − 1) mesh messages.
func (r *runner) walkModel(e, up, down int) (visited int, ms float64, ok bool) {
	h := r.hierarchy()
	if !h.ok {
		return 0, 0, false
	}
	nw := &r.sc.Network
	total := 2 * nw.Client.D()
	from := -1
	for m, level := e, 0; ; level++ {
		d, n := r.searchDown(h, m, down, from)
		total += d
		visited += n
		sup := int(h.sup[m])
		if level >= up || sup < 0 {
			break
		}
		total += 2 * r.g.latency(nw, m, sup)
		from, m = m, sup
	}
	return visited, float64(total) / 1e6, true
}

// floodModel is the model of an admin command --all from entry e: it is
// sent to every relation at once (up and down) and each manager answers
// when all it sent to have, so the answer comes after the round trip to
// the farthest manager along the tree. It returns the managers reached
// and the latency in ms.
func (r *runner) floodModel(e int) (visited int, ms float64, ok bool) {
	h := r.hierarchy()
	if !h.ok {
		return 0, 0, false
	}
	nw := &r.sc.Network
	dist := make([]time.Duration, r.g.n)
	seen := make([]bool, r.g.n)
	seen[e] = true
	queue := []int32{int32(e)}
	var far time.Duration
	for i := 0; i < len(queue); i++ {
		m := queue[i]
		next := h.kids[m]
		if s := h.sup[m]; s >= 0 {
			next = append(slices.Clip(next), s)
		}
		for _, k := range next {
			if seen[k] {
				continue
			}
			seen[k] = true
			dist[k] = dist[m] + r.g.latency(nw, int(m), int(k))
			far = max(far, dist[k])
			queue = append(queue, k)
		}
	}
	return len(queue), float64(2*nw.Client.D()+2*far) / 1e6, true
}

// queries runs a query action: count queries at once (waiting for their
// answers), or a stream of rate per second for a while.
func (r *runner) queries(idx int, a *Action) {
	var lat, visited, offers, msgs, partial []float64
	failed, sent := 0, 0
	// The model, for queries sent at once that nothing stops early: each
	// one's walk (walkModel), as far as up and down let it go. None for
	// streams, for a query whose want the managers it may visit could
	// meet, or where the hierarchy is not one the model follows; and not
	// computed past 10⁸ managers' worth of walks (a second of wall time).
	var mLat, mVisited []float64
	modelled := a.Rate == 0 && a.Count*r.up <= 1e8
	send := func() {
		e := r.pick(a.From)
		if modelled {
			v, ms, ok := r.walkModel(e, a.Up, a.Down)
			if !ok || a.Want < v {
				modelled = false
			}
			mLat, mVisited = append(mLat, ms), append(mVisited, float64(v))
		}
		q := &wire.QueryRequest{Requirement: a.Requirement, Rank: a.Rank, Want: uint32(a.Want), Up: uint32(a.Up),
			Down: uint32(a.Down), Limit: uint32(a.Limit), BudgetMs: uint32(a.Budget.D() / time.Millisecond)}
		start := r.net.Now()
		sent++
		r.request(e, memnet.Client, &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: q}}, a.Budget.D()+5*time.Second,
			func(env *wire.Envelope) bool {
				rep := env.GetQueryReply()
				if rep == nil {
					failed++
					r.note(idx, a, "query failed: %s", replyErr(env))
					return true
				}
				lat = append(lat, float64(r.net.Now().Sub(start))/1e6)
				visited = append(visited, float64(rep.Visited))
				offers = append(offers, float64(len(rep.Offers)))
				partial = append(partial, b2f(len(rep.Missing) > 0))
				if len(rep.Missing) > 0 {
					m := rep.Missing[0]
					r.note(idx, a, "partial answer: %s (and %d more) did not answer: %s", m.Name, len(rep.Missing)-1, m.Why)
				}
				// The entry named the query (in place: the network is in
				// memory); its mesh requests were counted by id, and each
				// has one reply.
				msgs = append(msgs, float64(2*r.qmsgs[q.QueryId]))
				delete(r.qmsgs, q.QueryId)
				return true
			})
	}
	report := func() {
		var pLat, pVisited, pMsg *float64
		if modelled && len(mLat) > 0 {
			l, v := mean(mLat), mean(mVisited)
			m := 2 * (v - 1)
			pLat, pVisited, pMsg = &l, &v, &m
		}
		r.add(r.fig(idx, a, "queries sent", "", []float64{float64(sent)}, nil),
			r.fig(idx, a, "query latency", "ms", lat, pLat),
			r.fig(idx, a, "managers visited", "", visited, pVisited),
			r.fig(idx, a, "offers returned", "", offers, nil),
			r.fig(idx, a, "mesh messages per query", "", msgs, pMsg),
			r.fig(idx, a, "partial answers", "fraction", []float64{fraction(partial)}, nil),
			r.fig(idx, a, "no answer or error", "", []float64{float64(failed)}, nil))
	}
	r.stream(idx, a, send, report, func() bool { return sent == len(lat)+failed })
}

// stream sends count requests now and waits for done, or sends rate per
// second (exponential gaps) for a while in the background; report runs
// when the last request is over.
func (r *runner) stream(idx int, a *Action, send func(), report func(), done func() bool) {
	if a.Rate == 0 {
		for range a.Count {
			send()
		}
		r.waitUntil(done, a.Budget.D()+10*time.Second)
		report()
		return
	}
	end := r.net.Now().Add(a.For.D())
	r.streams++
	base := slices.Clone(r.recv)
	var next func()
	next = func() {
		if !r.net.Now().Before(end) {
			r.streams--
			// What each manager received meanwhile: this stream's
			// traffic and everything else that ran at the same time.
			r.add(r.fig(idx, a, "messages per manager per second under load (all traffic)", "1/s",
				r.perManager(base, a.For.D()), nil))
			// Report once the requests in flight are over.
			var wait func()
			wait = func() {
				if done() {
					report()
					return
				}
				r.net.After(r.opt.Check, wait)
			}
			wait()
			return
		}
		send()
		r.net.After(time.Duration(r.rng.ExpFloat64()/a.Rate*1e9)+1, next)
	}
	r.net.After(time.Duration(r.rng.ExpFloat64()/a.Rate*1e9)+1, next)
}

// reserves runs a reserve action: each request finds offers with a query
// and reserves at them (on several managers at once: hold all, then
// commit all, or release what was held).
func (r *runner) reserves(idx int, a *Action) {
	var lat []float64
	ok, conflict, noOffer, failed, sent, over := 0, 0, 0, 0, 0, 0
	need := query.Need{CPUs: a.CPUs, Mem: a.mem, Zeros: true}.And(a.Requirement)
	var amounts []*wire.Amount
	if a.CPUs > 0 {
		amounts = append(amounts, &wire.Amount{Kind: reservation.CPUs, N: a.CPUs})
	}
	if a.mem > 0 {
		amounts = append(amounts, &wire.Amount{Kind: reservation.Mem, N: a.mem})
	}
	k := a.Managers
	timeout := a.Budget.D() + 5*time.Second
	send := func() {
		sent++
		user := fmt.Sprintf("user%d", r.rng.IntN(100))
		start := r.net.Now()
		finish := func(outcome *int) {
			*outcome++
			over++
			if outcome == &ok {
				lat = append(lat, float64(r.net.Now().Sub(start))/1e6)
			}
		}
		q := &wire.QueryRequest{Requirement: need, Want: uint32(k), Limit: uint32(k), Cpus: a.CPUs, Mem: a.mem, User: user,
			Up: uint32(a.Up), Down: uint32(a.Down),
			BudgetMs: uint32(a.Budget.D() / time.Millisecond)}
		r.request(r.pick(a.From), user, &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: q}}, timeout, func(env *wire.Envelope) bool {
			rep := env.GetQueryReply()
			switch {
			case env == nil || rep == nil:
				r.note(idx, a, "query failed: %s", replyErr(env))
				finish(&failed)
				return true
			case len(rep.Offers) < k:
				finish(&noOffer)
				return true
			}
			r.reqSeq++
			group := fmt.Sprintf("g%d", r.reqSeq)
			held := make([]*wire.Reservation, k)
			answered, refused := 0, 0
			for j, o := range rep.Offers[:k] {
				owner := peerIndex(r.net, o.Peer)
				rr := &wire.ReserveRequest{RequestId: fmt.Sprintf("%s-%d", group, j), User: user, Amounts: amounts,
					Commit: k == 1, LeaseMs: uint64(a.Lease.D() / time.Millisecond)}
				if k > 1 {
					rr.Group = group
				}
				r.request(owner, user, &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: rr}}, timeout, func(env *wire.Envelope) bool {
					answered++
					if rv := env.GetReservationReply(); rv != nil {
						held[j] = rv.Reservation
					} else if e := env.GetError(); e != nil && e.Code == wire.ErrorReply_CODE_REFUSED {
						refused++
					} else {
						r.note(idx, a, "reserve failed: %s", replyErr(env))
					}
					if answered < k {
						return true
					}
					r.settleGroup(held, refused, user, timeout, finish, &ok, &conflict, &failed)
					return true
				})
			}
			return true
		})
	}
	report := func() {
		r.add(r.fig(idx, a, "reservations tried", "", []float64{float64(sent)}, nil),
			r.fig(idx, a, "reserved", "fraction", []float64{ratio(ok, sent)}, nil),
			r.fig(idx, a, "conflicts (offer taken meanwhile)", "fraction", []float64{ratio(conflict, sent)}, nil),
			r.fig(idx, a, "no offer", "fraction", []float64{ratio(noOffer, sent)}, nil),
			r.fig(idx, a, "failed (error, timeout)", "fraction", []float64{ratio(failed, sent)}, nil),
			r.fig(idx, a, "reservation latency", "ms", lat, nil))
	}
	r.stream(idx, a, send, report, func() bool { return over == sent })
}

// settleGroup ends a reservation once every hold is answered: one
// manager's is committed already; a group is committed when all held,
// else what was held is released.
func (r *runner) settleGroup(held []*wire.Reservation, refused int, user string, timeout time.Duration,
	finish func(*int), ok, conflict, failed *int) {
	all := true
	for _, h := range held {
		all = all && h != nil
	}
	if len(held) == 1 {
		switch {
		case all:
			finish(ok)
		case refused > 0:
			finish(conflict)
		default:
			finish(failed)
		}
		return
	}
	op := wire.ReservationOpRequest_OP_COMMIT
	if !all {
		op = wire.ReservationOpRequest_OP_RELEASE
	}
	pending, good := 0, 0
	for _, h := range held {
		if h == nil {
			continue
		}
		pending++
		r.reqSeq++
		req := &wire.ReservationOpRequest{RequestId: fmt.Sprintf("op%d", r.reqSeq), Op: op, Id: h.Id}
		r.request(peerIndex(r.net, h.OwnerPeer), user, &wire.Envelope{Body: &wire.Envelope_ReservationOp{ReservationOp: req}}, timeout,
			func(env *wire.Envelope) bool {
				pending--
				if env.GetReservationReply() != nil {
					good++
				}
				if pending > 0 {
					return true
				}
				switch {
				case all && good == len(held):
					finish(ok)
				case !all && refused > 0:
					finish(conflict)
				default:
					finish(failed)
				}
				return true
			})
	}
	if pending == 0 { // nothing held: every hold refused or failed
		if refused > 0 {
			finish(conflict)
		} else {
			finish(failed)
		}
	}
}

// churn kills percent of the managers per minute, each restarted after
// down_for, for a while.
func (r *runner) churn(idx int, a *Action) {
	r.exact = false
	rate := a.Percent / 100 * float64(r.g.n) / 60 // per second
	end := r.net.Now().Add(a.For.D())
	kills, restarts := 0, 0
	r.streams++
	var next func()
	next = func() {
		if !r.net.Now().Before(end) {
			r.streams--
			r.add(r.fig(idx, a, "managers churned", "", []float64{float64(kills)}, nil))
			return
		}
		m := r.pick("random")
		if !r.dead[m] {
			r.kill(m)
			kills++
			r.net.After(a.DownFor.D(), func() { r.start(m); restarts++ })
		}
		r.net.After(time.Duration(r.rng.ExpFloat64()/rate*1e9)+1, next)
	}
	r.net.After(time.Duration(r.rng.ExpFloat64()/rate*1e9)+1, next)
}

// admin runs an admin command string on one manager or, with all, on the
// whole subtree under it.
func (r *runner) admin(idx int, a *Action) {
	e := r.pick(a.From)
	if a.From == "random" && a.All {
		e = 0
	}
	req := &wire.AdminRequest{Command: a.Command, All: a.All, BudgetMs: uint32(a.Budget.D() / time.Millisecond)}
	start := r.net.Now()
	var reach, answers, missing float64
	okv, done := 0.0, false
	// The model of a flood (--all): from the hierarchy before it starts.
	reached, model, modelOK := r.floodModel(e)
	// The manager's own peer id: an in-process admin, allowed to change it.
	r.request(e, r.peer(e), &wire.Envelope{Body: &wire.Envelope_AdminRequest{AdminRequest: req}}, a.Budget.D()+5*time.Second,
		func(env *wire.Envelope) bool {
			rep := env.GetAdminReply()
			if rep != nil && rep.Partial {
				return false
			}
			done = true
			if rep != nil {
				reach = float64(r.net.Now().Sub(start)) / 1e6
				answers = float64(max(len(rep.Replies), 1))
				missing = float64(len(rep.Missing))
				if len(rep.Missing) > 0 {
					m := rep.Missing[0]
					r.note(idx, a, "%s (and %d more) did not answer: %s", m.Name, len(rep.Missing)-1, m.Why)
				}
				okv = b2f(rep.Ok)
			}
			return true
		})
	r.waitUntil(func() bool { return done }, a.Budget.D()+10*time.Second)
	var mp, mr *float64
	if a.All && modelOK {
		rf := float64(reached)
		mp, mr = &model, &rf
	}
	r.add(r.fig(idx, a, "answered in", "ms", []float64{reach}, mp),
		r.fig(idx, a, "managers that answered", "", []float64{answers}, mr),
		r.fig(idx, a, "subtrees missing", "", []float64{missing}, nil),
		r.fig(idx, a, "ok", "1=yes", []float64{okv}, nil))
}

// rewire makes a manager take another as a superior, by admin command.
func (r *runner) rewire(idx int, a *Action) {
	m := nameIndex(a.Name, r.g.n)
	okv, done := 0.0, false
	cmd := "add-superior " + addrOf(nameIndex(a.Superior, r.g.n))
	r.request(m, r.peer(m), &wire.Envelope{Body: &wire.Envelope_AdminRequest{AdminRequest: &wire.AdminRequest{Command: cmd}}}, time.Minute,
		func(env *wire.Envelope) bool {
			done = true
			if rep := env.GetAdminReply(); rep != nil {
				okv = b2f(rep.Ok)
			}
			return true
		})
	r.waitUntil(func() bool { return done }, time.Minute)
	r.exact = false
	r.world++
	r.add(r.fig(idx, a, "added", "1=yes", []float64{okv}, nil))
	r.reconverge(idx, a, "settle time", nil)
}

// rest measures what the grid costs when nothing happens.
func (r *runner) rest(idx int, a *Action) {
	base := slices.Clone(r.recv)
	// Encoding every message to size it costs; only rest reads the bytes.
	r.net.Sized = func(_ *memnet.Node, env *wire.Envelope, size int) { r.bytes[classify(env)] += uint64(size) }
	defer func() { r.net.Sized = nil }()
	m0, b0 := r.msgs, r.bytes
	rels := 0
	for m := 0; m < r.g.n; m++ {
		if r.dead[m] {
			continue
		}
		for _, rel := range r.nodeAt(m).Core.Relations().Superiors() {
			if rel.State.Live() {
				rels++
			}
		}
	}
	r.step(a.For.D())
	secs := a.For.D().Seconds()
	per := r.perManager(base, a.For.D())
	live := float64(len(per))
	var all, bytes uint64
	for k := range numKinds {
		all += r.msgs[k] - m0[k]
		bytes += r.bytes[k] - b0[k]
	}
	hb := float64(r.msgs[kindHeartbeat]-m0[kindHeartbeat]) / live / secs
	model := 2 * float64(rels) / r.base().HeartbeatInterval.Seconds() / live
	r.add(r.fig(idx, a, "messages per manager per second", "1/s", per, nil),
		r.fig(idx, a, "heartbeats per manager per second", "1/s", []float64{hb}, &model),
		r.fig(idx, a, "bytes per manager per second", "B/s", []float64{float64(bytes) / live / secs}, nil),
		r.fig(idx, a, "relations", "", []float64{float64(rels)}, nil))
}

// perManager is, for each running manager, the mesh messages it received
// since base was taken, per second over d.
func (r *runner) perManager(base []uint32, d time.Duration) []float64 {
	var per []float64
	for m := 0; m < r.g.n; m++ {
		if !r.dead[m] {
			per = append(per, float64(r.recv[m]-base[m])/d.Seconds())
		}
	}
	return per
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func fraction(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return mean(xs)
}
