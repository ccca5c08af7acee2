package node

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/internal/keys"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// failoverEnv is what the failover module reaches of the Core: the set
// (read; the module adds superiors to it, and removes relations only
// through removeRelation), the policy from the config, the log, events
// and metrics, messages and channels, and the Core's reactions to a
// change of superiors. *Core implements it.
type failoverEnv interface {
	env
	failoverPolicy(p *relations.Policy)
	stoppingNow() bool
	takeSaved() *relations.Saved

	event(now time.Time, peer, name, what string)
	publishRelation(now time.Time, typ, peer, name string, role relations.Role, from, to relations.State, cause string)
	closeChan(peer, reason string)
	closeDead(peer, reason string)
	removeRelation(now time.Time, r *relations.Relation, why string)
	relationsChanged()
	pushChain(now time.Time)
	dialDue(now time.Time)
	backoff() relations.Backoff
	dial(peer string, addrs []string)
}

// failover is the module that replaces failed superiors. The search
// itself is relations.Failover, pure; this module feeds it what the Core
// hears and carries out its acts (the wording of events and logs is
// here). The saved superiors a restart begins from are its business too
// (RestoreRelations, startSuperiors).
type failover struct {
	env      failoverEnv
	m        *relations.Failover
	policy   relations.Policy // refreshed from the config before each call to m
	removing string           // the peer an ActRemove is removing: m knows already

	// Indirect probes we asked (relations/probe.go): by envelope id, and
	// the channels opened only for them (to helpers that are not
	// relations), by helper.
	asked      map[uint64]probeAsk
	probeChans map[string]*probeChan
	// Indirect probes asked of us: by target, the one question we put to
	// it and who waits for the answer.
	pings map[string]*ping
	// askers: how many answers an unrelated asker still waits for on the
	// channel it opened (closed at zero).
	askers map[string]int
}

type probeAsk struct {
	target, helper string
	round          int
}

type probeChan struct {
	open bool
	ids  []uint64 // asked on it, not answered (sent once open)
}

type ping struct {
	id       uint64
	deadline time.Time
	wait     time.Duration
	askers   []origin
}

func newFailover(c *Core) *failover {
	// The maps are made at their first entry: most managers never probe.
	return &failover{env: c, m: relations.NewFailover(c.rng)}
}

// handle takes the indirect probes: a question put to us (by a relation,
// or on a channel opened for it: probeMsg), the target's answer to the
// question we passed on, and a helper's answer to ours.
func (f *failover) handle(now time.Time, o origin, env *wire.Envelope) (bool, error) {
	switch b := env.Body.(type) {
	case *wire.Envelope_IndirectProbe:
		if o.peer == "" {
			return false, nil // a client's: not served
		}
		f.onProbe(now, o, b.IndirectProbe)
		return true, nil
	case *wire.Envelope_IndirectProbeReply:
		if a, ok := f.asked[env.ReplyTo]; ok && a.helper == o.peer {
			f.probeAnswered(now, env.ReplyTo, b.IndirectProbeReply.Reached, true)
			return true, nil
		}
		if pg := f.pings[o.peer]; pg != nil && pg.id == env.ReplyTo {
			f.pingDone(o.peer, true, "")
		}
		return true, nil
	case *wire.Envelope_Error:
		// An older target answers our question UNSUPPORTED: it is alive.
		if pg := f.pings[o.peer]; pg != nil && pg.id == env.ReplyTo && env.ReplyTo != 0 {
			f.pingDone(o.peer, true, "")
			return true, nil
		}
		// An older helper does not know the question: no answer will come.
		if a, ok := f.asked[env.ReplyTo]; ok && env.ReplyTo != 0 && a.helper == o.peer {
			f.probeAnswered(now, env.ReplyTo, false, false)
			return true, nil
		}
	}
	return false, nil
}

// probeMsg takes a message from peer, which is not a relation: an
// indirect probe it opened a channel for, or a helper's answer on the
// channel we opened. Anything else on a probe channel ends it unanswered.
func (f *failover) probeMsg(now time.Time, peer string, env *wire.Envelope) bool {
	if q := env.GetIndirectProbe(); q != nil {
		if f.askers == nil {
			f.askers = make(map[string]int)
		}
		f.askers[peer]++
		f.onProbe(now, origin{peer: peer, id: env.Id, trace: env.TraceId}, q)
		return true
	}
	pc := f.probeChans[peer]
	if pc == nil {
		return false
	}
	if rep := env.GetIndirectProbeReply(); rep != nil {
		if a, ok := f.asked[env.ReplyTo]; ok && a.helper == peer {
			f.probeAnswered(now, env.ReplyTo, rep.Reached, true)
		}
		return true
	}
	f.probeChanLost(now, peer) // an older helper refused the channel
	f.env.closeChan(peer, "not an indirect probe answer")
	return true
}

// onProbe answers whether we can reach target: at once if it is us or not
// a live relation of ours; else we ask it, and answer when it answers or
// after ProbeWait. When we are target, the inferior that asked (from) is
// alive even if we do not hear it: it is held, not failed, for HoldMax.
func (f *failover) onProbe(now time.Time, o origin, q *wire.IndirectProbe) {
	e, target := f.env, q.Target
	if target == e.me() {
		if r := e.relations().Get(q.From); r != nil && r.Role == relations.Inferior && r.State.Live() {
			if until := r.LastHeard().Add(f.pol().Live.For(r).HoldMax()); until.After(r.HeldUntil()) {
				r.SetHeldUntil(until)
			}
		}
		f.probeReply(o, target, true, "")
		return
	}
	r := e.relations().Get(target)
	if r == nil {
		f.probeReply(o, target, false, "not a relation of "+e.name())
		return
	}
	if !r.State.Live() {
		f.probeReply(o, target, false, fmt.Sprintf("%s: %s", r.State, firstLine(r.LastError)))
		return
	}
	pg := f.pings[target]
	if pg == nil {
		wait := f.pol().Live.For(r).ProbeWait()
		pg = &ping{id: e.newID(), deadline: now.Add(wait), wait: wait}
		if f.pings == nil {
			f.pings = make(map[string]*ping)
		}
		f.pings[target] = pg
		e.send(target, &wire.Envelope{Id: pg.id, Body: &wire.Envelope_IndirectProbe{IndirectProbe: &wire.IndirectProbe{Target: target, From: q.From}}})
	} else if q.From != "" {
		// One question is out already: tell target who else asks (no reply).
		e.send(target, &wire.Envelope{Body: &wire.Envelope_IndirectProbe{IndirectProbe: &wire.IndirectProbe{Target: target, From: q.From}}})
	}
	pg.askers = append(pg.askers, o)
}

// pingDone answers everyone who asked about target.
func (f *failover) pingDone(target string, reached bool, reason string) {
	pg := f.pings[target]
	if pg == nil {
		return
	}
	delete(f.pings, target)
	for _, o := range pg.askers {
		f.probeReply(o, target, reached, reason)
	}
}

// probeReply answers an indirect probe; the channel of an asker that is
// not a relation is closed once it has all its answers.
func (f *failover) probeReply(o origin, target string, reached bool, reason string) {
	e := f.env
	e.reply(o, &wire.Envelope{Body: &wire.Envelope_IndirectProbeReply{IndirectProbeReply: &wire.IndirectProbeReply{
		Target: target, Reached: reached, Reason: reason}}})
	if n, ok := f.askers[o.peer]; ok {
		if n <= 1 {
			delete(f.askers, o.peer)
			if r := e.relations().Get(o.peer); r == nil || !r.State.Live() {
				e.closeChan(o.peer, "indirect probe answered")
			}
		} else {
			f.askers[o.peer] = n - 1
		}
	}
}

// sendProbes asks each helper of an ActProbe: on its relation's channel
// if it is one of ours, else on a channel opened for it.
func (f *failover) sendProbes(a *relations.Act) {
	e := f.env
	for _, h := range a.Helpers {
		id := e.newID()
		if f.asked == nil {
			f.asked = make(map[uint64]probeAsk)
		}
		f.asked[id] = probeAsk{target: a.Failed, helper: h.Peer, round: a.Round}
		if r := e.relations().Get(h.Peer); r != nil {
			f.sendProbe(h.Peer, id)
			continue
		}
		pc := f.probeChans[h.Peer]
		if pc == nil {
			pc = &probeChan{}
			if f.probeChans == nil {
				f.probeChans = make(map[string]*probeChan)
			}
			f.probeChans[h.Peer] = pc
			e.dial(h.Peer, h.Addrs)
		}
		pc.ids = append(pc.ids, id)
		if pc.open {
			f.sendProbe(h.Peer, id)
		}
	}
}

func (f *failover) sendProbe(helper string, id uint64) {
	f.env.send(helper, &wire.Envelope{Id: id, Body: &wire.Envelope_IndirectProbe{IndirectProbe: &wire.IndirectProbe{Target: f.asked[id].target, From: f.env.me()}}})
}

// probeConnected sends the probes waiting for a channel we opened to a
// helper; false if we opened none to peer.
func (f *failover) probeConnected(peer string) bool {
	pc := f.probeChans[peer]
	if pc == nil || pc.open {
		return false
	}
	pc.open = true
	for _, id := range pc.ids {
		f.sendProbe(peer, id)
	}
	return true
}

// probeChanLost: the channel to a helper failed or closed (or could not be
// opened): its probes will get no answer.
func (f *failover) probeChanLost(now time.Time, peer string) {
	pc := f.probeChans[peer]
	if pc == nil {
		return
	}
	delete(f.probeChans, peer)
	for _, id := range pc.ids {
		f.probeAnswered(now, id, false, false)
	}
}

// probeAnswered hands a helper's answer (or that none will come) to the
// search.
func (f *failover) probeAnswered(now time.Time, id uint64, reached, answered bool) {
	a, ok := f.asked[id]
	if !ok {
		return
	}
	delete(f.asked, id)
	if pc := f.probeChans[a.helper]; pc != nil {
		pc.ids = slices.DeleteFunc(pc.ids, func(x uint64) bool { return x == id })
		if len(pc.ids) == 0 {
			delete(f.probeChans, a.helper)
			if pc.open {
				f.env.closeChan(a.helper, "indirect probe answered")
			}
		}
	}
	f.apply(now, f.m.ProbeAnswer(now, f.env.relations(), f.pol(), a.target, a.helper, a.round, reached, answered))
}

// forgetRound drops what is left of a round of probes of target that
// ended (late answers are not wanted).
func (f *failover) forgetRound(target string, round int) {
	for _, id := range keys.Sorted(f.asked) {
		if a := f.asked[id]; a.target == target && a.round == round {
			f.forgetAsk(id)
		}
	}
}

// forgetTarget drops the questions about target still out: it is being
// replaced, their answers are not wanted.
func (f *failover) forgetTarget(target string) {
	for _, id := range keys.Sorted(f.asked) {
		if a := f.asked[id]; a.target == target {
			f.forgetAsk(id)
		}
	}
}

// dropProbeChan closes the channel opened to ask peer, if any, and drops
// the questions on it.
func (f *failover) dropProbeChan(peer string) {
	pc := f.probeChans[peer]
	if pc == nil {
		return
	}
	for _, id := range pc.ids {
		delete(f.asked, id)
	}
	delete(f.probeChans, peer)
	f.env.closeChan(peer, "indirect probe ended")
}

// forgetAsk drops one question; the channel opened for it is closed once
// it carries no other.
func (f *failover) forgetAsk(id uint64) {
	a := f.asked[id]
	delete(f.asked, id)
	if pc := f.probeChans[a.helper]; pc != nil {
		pc.ids = slices.DeleteFunc(pc.ids, func(x uint64) bool { return x == id })
		if len(pc.ids) == 0 {
			delete(f.probeChans, a.helper)
			f.env.closeChan(a.helper, "indirect probe ended")
		}
	}
}

// askerGone: the channel to peer closed or was replaced: questions it put
// to us are not answered on the channel that replaces it (a new channel
// may be its hello as our inferior).
func (f *failover) askerGone(peer string) {
	delete(f.askers, peer)
	for _, pg := range f.pings {
		pg.askers = slices.DeleteFunc(pg.askers, func(o origin) bool { return o.peer == peer })
	}
}

// pingTick answers the questions put to us whose target did not answer
// within ProbeWait: not reached. Only the target's answer to the question
// counts as reached (handle), not any message: a heartbeat sent before a
// cut may arrive after the question left, and the failure detector moves
// LastHeard forward when our own loop was late.
func (f *failover) pingTick(now time.Time) {
	for _, target := range keys.Sorted(f.pings) {
		pg := f.pings[target]
		r := f.env.relations().Get(target)
		switch {
		case r == nil || !r.State.Live():
			f.pingDone(target, false, "channel lost")
		case !now.Before(pg.deadline):
			f.pingDone(target, false, "no answer within "+text.FormatMeasured(pg.wait))
		}
	}
}

// relationEnded forgets the search for a superior that was removed on
// purpose (left, or removed by an admin): it is not to be replaced. The
// search's own removals are not news to it. A superior that went down
// (its channel lost) is to be probed; a relation we were asked about
// that went down is not reached.
func (f *failover) relationEnded(now time.Time, r *relations.Relation, why string) {
	if r.Peer != f.removing && f.env.relations().Get(r.Peer) == nil {
		f.m.Ended(r.Peer)
	}
	if f.pings[r.Peer] != nil {
		f.pingDone(r.Peer, false, "channel lost")
	}
	if why == "down" && f.env.relations().Get(r.Peer) == r && !f.env.stoppingNow() {
		f.m.Lost(now, r)
	}
}

// pol is the policy as the config says now.
func (f *failover) pol() *relations.Policy {
	f.env.failoverPolicy(&f.policy)
	return &f.policy
}

// deadline: see relations.Failover.Deadline; and the questions put to us
// that time out.
func (f *failover) deadline(time.Time) time.Time {
	next := f.m.Deadline(f.env.relations(), f.pol())
	for _, pg := range f.pings {
		if next.IsZero() || pg.deadline.Before(next) {
			next = pg.deadline
		}
	}
	return next
}

// tick answers the questions put to us that are due, declares failures,
// probes silent superiors, starts new rounds and times out trials.
func (f *failover) tick(now time.Time) {
	f.pingTick(now)
	f.apply(now, f.m.Tick(now, f.env.relations(), f.pol()))
}

// trialFailed drops a candidate that did not take us and tries the next.
func (f *failover) trialFailed(now time.Time, r *relations.Relation) {
	f.apply(now, f.m.TrialFailed(now, f.env.relations(), f.pol(), r))
}

// superiorUp is called when a superior was welcomed: a candidate's trial
// ends in adoption; a failed superior that is back cancels its search.
func (f *failover) superiorUp(now time.Time, r *relations.Relation) {
	f.apply(now, f.m.SuperiorUp(now, f.env.relations(), f.pol(), r))
}

// superiorGone fails a superior at once (it said goodbye: it is shutting
// down or leaving us), so that its inferiors move without waiting for the
// heartbeat timeout.
func (f *failover) superiorGone(now time.Time, r *relations.Relation, cause string) {
	if f.env.stoppingNow() {
		return
	}
	f.apply(now, f.m.SuperiorGone(now, f.env.relations(), f.pol(), r, cause))
}

// removedBySuperior handles a goodbye with removed set: the superior does
// not want us back, so we do not redial it, and look for a new superior
// among its ancestors (failover without the wait).
func (f *failover) removedBySuperior(now time.Time, r *relations.Relation, reason string) {
	f.apply(now, f.m.RemovedBy(now, f.env.relations(), f.pol(), r, reason))
}

// apply carries out the acts of the search, in order.
func (f *failover) apply(now time.Time, acts []relations.Act) {
	e, log, self := f.env, f.env.logger(), f.env.name()
	for i := range acts {
		a := &acts[i]
		r := a.Rel
		switch a.Kind {
		case relations.ActDeclared:
			cause := a.Cause
			if cause == "" && a.Restarted {
				cause = fmt.Sprintf("not heard in %s since this manager restarted (%s)", text.FormatMeasured(a.Silent), firstLine(r.LastError))
			} else if cause == "" {
				cause = fmt.Sprintf("silent for %s (%s)", text.FormatMeasured(a.Silent), firstLine(r.LastError))
			}
			f.forgetTarget(r.Peer)
			e.event(now, r.Peer, a.Name, "superior failed: "+cause)
			log.Warn("superior failed", "peer", a.Name, "cause", cause)
			e.meter().Failover("declared")
			e.publishRelation(now, "failed-superior", r.Peer, a.Name, relations.Superior, a.From, relations.Down, cause)
		case relations.ActNotCandidate:
			e.event(now, a.Cand.Peer, a.Cand.Label(), "not a candidate: "+a.Reason)
		case relations.ActTry:
			cd := a.Cand
			f.dropProbeChan(cd.Peer) // closed before the trial's dial, which would replace it
			if _, err := e.relations().AddCandidate(now, cd, a.Failed, a.Deadline, e.backoff()); err != nil {
				log.Debug("candidate skipped", "peer", cd.Label(), "err", err) // the search rules it out first
				continue
			}
			log.Info("trying a new superior", "peer", cd.Label(), "as", cd.Why, "in_place_of", a.Name, "round", a.Round)
			e.dialDue(now)
		case relations.ActRoot:
			e.event(now, a.Failed, a.Name, fmt.Sprintf("no candidate took %s in place of %s: acting as a root, retrying in %s", self, a.Name, text.FormatMeasured(a.Retry)))
			log.Warn("acting as root", "failed_superior", a.Name, "candidates", a.Tried, "retry_in", text.FormatMeasured(a.Retry))
			if a.First {
				e.meter().Failover("root")
				e.publishRelation(now, "root", a.Failed, a.Name, relations.Superior, relations.Down, relations.Down,
					fmt.Sprintf("no candidate took %s in place of %s; retrying in %s", self, a.Name, text.FormatMeasured(a.Retry)))
			}
		case relations.ActNoReplacement:
			log.Warn("no replacement for failed superior; keeping the others", "failed_superior", a.Name, "retry_in", text.FormatMeasured(a.Retry))
		case relations.ActTimedOut:
			r.LastError = fmt.Sprintf("no welcome within %s", text.FormatMeasured(f.policy.HandshakeTimeout))
			e.closeDead(r.Peer, r.LastError)
		case relations.ActCandidateFailed:
			log.Info("candidate did not take this manager", "peer", r.DisplayName(), "err", r.LastError)
			if r.LastError != "" {
				e.event(now, r.Peer, r.DisplayName(), "candidate did not take us: "+r.LastError)
			}
		case relations.ActRemove:
			if a.Reason != "" {
				// The peer may have taken us already, its welcome still on
				// the way (a superior that restarted while we replaced
				// it): told why we leave, it forgets us, rather than keep
				// us for DownInferiorRetention as an inferior gone down.
				e.send(r.Peer, &wire.Envelope{Body: &wire.Envelope_Goodbye{Goodbye: &wire.Goodbye{Reason: a.Reason}}})
				e.closeChan(r.Peer, a.Reason)
			}
			f.removing = r.Peer
			e.removeRelation(now, r, a.Why)
			f.removing = ""
		case relations.ActReplaced:
			what := fmt.Sprintf("reparented: %s (%s) took %s in place of %s, %s after %s was last heard",
				r.DisplayName(), a.Why, self, a.Name, text.FormatMeasured(a.Took), a.Name)
			e.event(now, r.Peer, r.DisplayName(), what)
			log.Info("reparented", "superior", r.DisplayName(), "as", a.Why, "in_place_of", a.Name,
				"since_last_heard", text.FormatMeasured(a.Took), "since_declared", text.FormatMeasured(a.SinceDeclared))
			e.meter().Failover("reparented")
			e.publishRelation(now, "reparented", r.Peer, r.DisplayName(), relations.Superior, relations.Down, r.State,
				fmt.Sprintf("%s (%s) in place of %s", r.DisplayName(), a.Why, a.Name))
		case relations.ActCovered:
			// No new relation: a live superior (the one that stood in for
			// it before, or another superior of ours) covers the failed one.
			e.event(now, r.Peer, r.DisplayName(), fmt.Sprintf("%s failed; %s (%s) is already a superior of %s", a.Name, r.DisplayName(), a.Why, self))
			log.Info("failed superior already covered", "failed", a.Name, "by", r.DisplayName())
		case relations.ActStandby:
			log.Info("will keep dialling the configured superior and move back once it is up", "peer", a.Name,
				"settle", text.FormatMeasured(f.policy.Settle))
		case relations.ActBack:
			e.event(now, r.Peer, r.DisplayName(), "failed superior is back: failover ended")
		case relations.ActReturn:
			reason := fmt.Sprintf("returning to configured superior %s (up for %s)", a.Orig.DisplayName(), text.FormatMeasured(a.Took))
			e.event(now, r.Peer, r.DisplayName(), "left: "+reason)
			log.Info("moving back to configured superior", "peer", a.Orig.DisplayName(), "leaving", r.DisplayName())
			e.send(r.Peer, &wire.Envelope{Body: &wire.Envelope_Goodbye{Goodbye: &wire.Goodbye{Reason: reason}}})
			e.closeChan(r.Peer, reason)
		case relations.ActForgotten:
			e.event(now, r.Peer, r.DisplayName(), fmt.Sprintf("inferior forgotten after %s down", text.FormatMeasured(a.Took)))
		case relations.ActChanged:
			e.relationsChanged()
		case relations.ActPushChain:
			e.pushChain(now)
		case relations.ActProbe:
			var names []string
			for _, h := range a.Helpers {
				names = append(names, h.Label())
			}
			log.Info("superior silent: asking others whether they reach it", "peer", a.Name, "state", r.State.String(),
				"helpers", strings.Join(names, ","), "round", a.Round)
			f.sendProbes(a)
		case relations.ActProbed:
			f.forgetRound(a.Failed, a.Round)
			log.Info("indirect probe", "peer", a.Name, "verdict", a.Verdict.String(), "answered", a.Answered, "asked", a.Tried,
				"silent", text.FormatMeasured(a.Silent))
			if a.Verdict == relations.Reached && a.First && r.State == relations.Suspect && r.HeldUntil().After(now) {
				helper := a.Reason
				if h := e.relations().Get(helper); h != nil {
					helper = h.DisplayName()
				} else {
					for _, an := range r.Ancestors {
						if an.Peer == helper && an.Name != "" {
							helper = an.Name
						}
					}
				}
				e.event(now, r.Peer, a.Name, fmt.Sprintf("silent for %s but %s reaches it: kept (the link is at fault), failed only if silent for %s",
					text.FormatMeasured(a.Silent), helper, text.FormatMeasured(r.HeldUntil().Sub(r.LastHeard()))))
			}
		}
	}
}

// RestoreRelations gives the Core the superiors saved by an earlier run;
// call it before Start. They are used instead of the properties file's
// superiors unless the file names other superiors than when they were
// saved (the operator changed it: the file wins). It returns what was
// decided, for the log.
func (c *Core) RestoreRelations(sv *relations.Saved) string {
	c.dl.ok = false // see NextDeadline
	if sv == nil {
		return "no saved relations: starting from the properties file"
	}
	if !sv.SameConfigured(c.own.Superiors) {
		return "the properties file names other superiors than when relations were saved: starting from the properties file"
	}
	c.saved = sv
	return fmt.Sprintf("restoring %d saved superior(s)", len(sv.Superiors))
}

// startSuperiors registers the superiors to dial at start: the saved ones
// if RestoreRelations accepted them, else the properties file's.
func (f *failover) startSuperiors(now time.Time) {
	e, set := f.env, f.env.relations()
	saved := e.takeSaved()
	if saved == nil {
		for _, pa := range e.ownFields().Superiors {
			if _, err := set.AddSuperior(now, pa, true, e.backoff()); err != nil {
				e.logger().Error("ignoring configured superior", "peer", pa.Peer, "err", err)
			}
		}
		e.relationsChanged()
		return
	}
	configured := map[string]bool{}
	for _, pa := range e.ownFields().Superiors {
		configured[pa.Peer] = true
	}
	for _, s := range saved.Superiors {
		r, err := set.AddSuperior(now, peeraddr.PeerAddrs{Peer: s.Peer, Addrs: s.Addrs}, configured[s.Peer], e.backoff())
		if err != nil {
			e.logger().Error("ignoring saved superior", "peer", s.Peer, "err", err)
			continue
		}
		r.Name = s.Name
		if o, ok := relations.ParseOrigin(s.Origin); ok {
			r.Origin = o
		}
		r.StandsFor = s.StandsFor
		r.SetRestoredAt(now)
		r.Ancestors = s.Ancestors // replaced, never changed in place
	}
}

// Failovers lists the failed superiors whose replacement is still being
// looked for (their names), for status and tests.
func (c *Core) Failovers() []string { return c.fo.m.Names() }

// The Core as the failover module's environment (failoverEnv).

func (c *Core) stoppingNow() bool { return c.stopping }

// takeSaved hands over the saved superiors RestoreRelations accepted (nil:
// none), once.
func (c *Core) takeSaved() *relations.Saved {
	sv := c.saved
	c.saved = nil
	return sv
}

// closeDead closes peer's channel as dead (no flushing what is queued).
func (c *Core) closeDead(peer, reason string) {
	c.rd.Closes = append(c.rd.Closes, Close{Peer: peer, Reason: reason, Dead: true})
}

func (c *Core) failoverPolicy(p *relations.Policy) {
	*p = relations.Policy{
		Live:             c.live,
		Fallbacks:        c.cfg.FallbackSuperiors,
		Superiors:        c.own.Superiors,
		HandshakeTimeout: c.cfg.HandshakeTimeout,
		Retry:            c.backoff(),
		PreferConfigured: c.cfg.PreferConfiguredSuperior,
		Settle:           c.cfg.FailoverSettle,
	}
}

// firstLine is s up to its first newline (libp2p dial errors list every
// address on its own line).
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[:i])
	}
	return s
}
