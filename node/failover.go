package node

import (
	"fmt"
	"strings"
	"time"

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
}

func newFailover(c *Core) *failover {
	return &failover{env: c, m: relations.NewFailover(c.rng)}
}

// handle: failover has no messages of its own (it acts on heartbeats,
// goodbyes and welcomes, which the Core handles).
func (f *failover) handle(time.Time, origin, *wire.Envelope) (bool, error) { return false, nil }

// relationEnded forgets the search for a superior that was removed on
// purpose (left, or removed by an admin): it is not to be replaced. The
// search's own removals are not news to it.
func (f *failover) relationEnded(_ time.Time, r *relations.Relation, _ string) {
	if r.Peer != f.removing && f.env.relations().Get(r.Peer) == nil {
		f.m.Ended(r.Peer)
	}
}

// pol is the policy as the config says now.
func (f *failover) pol() *relations.Policy {
	f.env.failoverPolicy(&f.policy)
	return &f.policy
}

// deadline: see relations.Failover.Deadline.
func (f *failover) deadline(time.Time) time.Time {
	return f.m.Deadline(f.env.relations(), f.pol())
}

// tick declares failures, starts new rounds and times out trials.
func (f *failover) tick(now time.Time) {
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
	e, log, self := f.env, f.env.logger(), f.env.conf().Name
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
			e.event(now, r.Peer, a.Name, "superior failed: "+cause)
			log.Warn("superior failed", "peer", a.Name, "cause", cause)
			e.meter().Failover("declared")
			e.publishRelation(now, "failed-superior", r.Peer, a.Name, relations.Superior, a.From, relations.Down, cause)
		case relations.ActNotCandidate:
			e.event(now, a.Cand.Peer, a.Cand.Label(), "not a candidate: "+a.Reason)
		case relations.ActTry:
			cd := a.Cand
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
		}
	}
}

// RestoreRelations gives the Core the superiors saved by an earlier run;
// call it before Start. They are used instead of the properties file's
// superiors unless the file names other superiors than when they were
// saved (the operator changed it: the file wins). It returns what was
// decided, for the log.
func (c *Core) RestoreRelations(sv *relations.Saved) string {
	if sv == nil {
		return "no saved relations: starting from the properties file"
	}
	if !sv.SameConfigured(c.cfg.Superiors) {
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
		for _, pa := range e.conf().Superiors {
			if _, err := set.AddSuperior(now, pa, true, e.backoff()); err != nil {
				e.logger().Error("ignoring configured superior", "peer", pa.Peer, "err", err)
			}
		}
		e.relationsChanged()
		return
	}
	configured := map[string]bool{}
	for _, pa := range e.conf().Superiors {
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
		r.RestoredAt = now
		for _, a := range s.Ancestors {
			r.Ancestors = append(r.Ancestors, relations.Ancestor{Peer: a.Peer, Name: a.Name, Addrs: a.Addrs, Depth: a.Depth})
		}
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
		Superiors:        c.cfg.Superiors,
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
