package sim

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/node/memnet"
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
		r.reconverge(idx, a, "reconverge time")
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
		r.reconverge(idx, a, "settle time")
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
		r.reconverge(idx, a, "reconverge time")
	case "heal":
		r.cut(nil)
		// Managers that replaced a superior across the cut keep the
		// replacement (unless prefer_configured_superior): the shape to
		// reach is a settled one, not the configured one.
		r.exact = false
		r.reconverge(idx, a, "rejoin time")
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

// later records figures when fn says, at the end of the run (for
// streams still running when their action hands over).
func (r *runner) reconverge(idx int, a *Action, what string) {
	before := r.falseRep
	took, ok := r.waitUntil(r.healed, a.Within.D())
	if !ok {
		r.note(idx, a, "not healed within %v: %s", a.Within.D(), r.why)
	}
	// Detection: a relation is down once silent for misses intervals
	// plus half an interval of grace (relations.Liveness.FailAfter); the
	// worst case over many failures is that whole span.
	base := r.base()
	model := base.Liveness().FailAfter().Seconds()
	r.add(r.fig(idx, a, what, "s", []float64{took.Seconds()}, &model))
	r.add(r.fig(idx, a, "healed", "1=yes", []float64{b2f(ok)}, nil))
	r.add(r.fig(idx, a, "false failure detections", "", []float64{float64(r.falseRep - before)}, nil))
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

// critical is the model of a whole-grid query's latency from entry e, in
// ms. A walk (query.Walk) searches in phases: a manager first asks its
// inferiors (all at once) and only when their answers are in, and it is
// still short of offers, climbs to its superior, which does the same
// with its other inferiors. So the critical path is, for each manager on
// the way up, the round trip of its slowest down search, plus the round
// trips of the climb, plus the client's. (A flood that asked up and down
// at once would take only the round trip to the farthest manager: the
// price of the phases is what stops a query early when want is met.)
func (r *runner) critical(e int) float64 {
	nw := &r.sc.Network
	n := r.g.n
	kids := make([][]int32, n)
	for i := 1; i < n; i++ {
		if p := r.g.parents[i][0]; !r.dead[i] && !r.dead[p] {
			kids[p] = append(kids[p], int32(i))
		}
	}
	// down[m]: round trip of m's search of its whole subtree. Inferiors
	// come after their superiors in index order.
	down := make([]time.Duration, n)
	for m := n - 1; m >= 0; m-- {
		for _, k := range kids[m] {
			down[m] = max(down[m], 2*r.g.latency(nw, m, int(k))+down[k])
		}
	}
	total := 2 * nw.Client.D()
	from := -1
	for m := e; ; {
		var d time.Duration
		for _, k := range kids[m] {
			if int(k) != from {
				d = max(d, 2*r.g.latency(nw, m, int(k))+down[k])
			}
		}
		total += d
		if len(r.g.parents[m]) == 0 || r.dead[r.g.parents[m][0]] {
			break
		}
		sup := int(r.g.parents[m][0])
		total += 2 * r.g.latency(nw, m, sup)
		from, m = m, sup
	}
	return float64(total) / 1e6
}

// queries runs a query action: count queries at once (waiting for their
// answers), or a stream of rate per second for a while.
func (r *runner) queries(idx int, a *Action) {
	var lat, visited, offers, msgs, partial []float64
	failed, sent := 0, 0
	var models []float64
	whole := a.Want >= r.g.n
	send := func() {
		e := r.pick(a.From)
		if whole && a.Rate == 0 {
			models = append(models, r.critical(e))
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
		var mLat, mMsg *float64
		if len(models) > 0 {
			v := mean(models)
			mLat = &v
			w := float64(2 * (r.up - 1))
			mMsg = &w
		}
		r.add(r.fig(idx, a, "queries sent", "", []float64{float64(sent)}, nil),
			r.fig(idx, a, "query latency", "ms", lat, mLat),
			r.fig(idx, a, "managers visited", "", visited, nil),
			r.fig(idx, a, "offers returned", "", offers, nil),
			r.fig(idx, a, "mesh messages per query", "", msgs, mMsg),
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
	need := fmt.Sprintf("cpus_free >= %d && mem_free >= %d", a.CPUs, a.mem)
	if a.Requirement != "" {
		need = "(" + a.Requirement + ") && " + need
	}
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
	model := r.critical(e)
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
	var mp *float64
	if a.All {
		mp = &model
	}
	r.add(r.fig(idx, a, "answered in", "ms", []float64{reach}, mp),
		r.fig(idx, a, "managers that answered", "", []float64{answers}, nil),
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
	r.reconverge(idx, a, "settle time")
}

// rest measures what the grid costs when nothing happens.
func (r *runner) rest(idx int, a *Action) {
	base := slices.Clone(r.recv)
	r.sizing = true
	defer func() { r.sizing = false }()
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
