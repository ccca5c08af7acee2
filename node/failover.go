package node

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// downInferiorRetention is how long an inferior that went down (and did not
// say goodbye) stays listed: long enough for an operator to see it in
// status and tree, then forgotten so that churn does not pile up.
const downInferiorRetention = time.Minute

// failover is the module that replaces failed superiors: the searches in
// progress (by failed superior) and the superiors that removed this
// manager (never candidates again). The saved superiors a restart begins
// from are its business too (RestoreRelations, startSuperiors).
type failover struct {
	c         *Core
	searches  map[string]*search // failed superior's peer → search for its replacement
	removedBy map[string]bool    // superiors that removed us: never candidates again
}

func newFailover(c *Core) *failover {
	return &failover{c: c, searches: make(map[string]*search), removedBy: make(map[string]bool)}
}

// handle: failover has no messages of its own (it acts on heartbeats,
// goodbyes and welcomes, which the Core handles).
func (f *failover) handle(time.Time, origin, *wire.Envelope) (bool, error) { return false, nil }

// relationEnded forgets the search for a superior that was removed on
// purpose (left, or removed by an admin): it is not to be replaced.
func (f *failover) relationEnded(_ time.Time, r *relations.Relation, _ string) {
	if f.c.set.Get(r.Peer) == nil {
		delete(f.searches, r.Peer)
	}
}

// deadline is the earliest of: a superior's silence reaching the failure
// timeout, a candidate's trial ending, a new round of a search, a
// configured superior settled enough to move back to, a down inferior to
// forget.
func (f *failover) deadline(time.Time) time.Time {
	c := f.c
	var next time.Time
	at := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	at(c.set.NextFailure(c.live, func(peer string) bool { return f.searches[peer] != nil }))
	for _, r := range c.set.Superiors() {
		if r.Trial != "" && !r.State.Live() && !r.TrialDeadline.IsZero() {
			at(r.TrialDeadline.Add(1))
		}
		if c.cfg.PreferConfiguredSuperior && r.StandsFor != "" && r.State.Live() && !r.Configured {
			if orig := c.set.Get(r.StandsFor); orig != nil && orig.Role == relations.Superior && orig.State == relations.Up {
				at(orig.Since.Add(c.cfg.FailoverSettle))
			}
		}
	}
	for _, s := range f.searches {
		if s.trying == "" && !s.nextRound.IsZero() {
			at(s.nextRound)
		}
	}
	for _, r := range c.set.Inferiors() {
		if r.State == relations.Down && !r.Configured {
			at(r.Since.Add(downInferiorRetention))
		}
	}
	return next
}

// search is the search for a replacement of one failed superior.
//
// A superior is declared failed when it has been silent for
// heartbeat.misses intervals (plus half an interval of grace) and is not
// live; a goodbye from it fails it at once. The candidates are its
// ancestors as it last reported them (the grandparent first), then
// fallback_superiors; they are tried one at a time, each given the
// handshake timeout to welcome us. A refusal (a candidate that finds us
// among its ancestors refuses: that is how a descendant is never taken)
// moves on to the next. When all are tried, the round ends; if no superior
// is left, this manager is a root until a later round (with backoff, adding
// the configured superiors) or the failed superior itself (still redialled)
// takes it back.
type search struct {
	failed     relations.PeerAddrs
	name       string
	configured bool
	lastHeard  time.Time // when the failed superior was last heard
	declared   time.Time
	cause      string
	cands      []relations.Candidate
	next       int    // index of the next candidate to try
	trying     string // peer in trial, "" between rounds
	round      int
	rootSaid   bool // the root event was published for this search
	nextRound  time.Time
	backoff    relations.Backoff
}

// tick declares failures, starts new rounds and times out trials.
func (f *failover) tick(now time.Time) {
	c := f.c
	for _, r := range c.set.Failed(now, c.live) {
		if f.searches[r.Peer] == nil {
			cause := fmt.Sprintf("silent for %s (%s)", fmtDur(now.Sub(r.LastHeard)), firstLine(r.LastError))
			if r.LastHeard.IsZero() {
				cause = fmt.Sprintf("not heard in %s since this manager restarted (%s)", fmtDur(now.Sub(r.RestoredAt)), firstLine(r.LastError))
			}
			f.start(now, r, cause)
		}
	}
	for _, r := range c.set.Superiors() {
		if r.Trial != "" && !r.State.Live() && !r.TrialDeadline.IsZero() && now.After(r.TrialDeadline) {
			r.LastError = fmt.Sprintf("no welcome within %s", fmtDur(c.cfg.HandshakeTimeout))
			c.rd.Closes = append(c.rd.Closes, Close{Peer: r.Peer, Reason: r.LastError, Dead: true})
			f.trialFailed(now, r)
		}
	}
	for _, peer := range slices.Sorted(maps.Keys(f.searches)) {
		s := f.searches[peer]
		if s.trying == "" && !s.nextRound.IsZero() && !now.Before(s.nextRound) {
			s.round++
			s.nextRound = time.Time{}
			f.refreshCandidates(s)
			f.tryNext(now, s)
		}
	}
	f.preferConfigured(now)
	f.forgetDownInferiors(now)
}

// start declares r failed and starts looking for its replacement.
func (f *failover) start(now time.Time, r *relations.Relation, cause string) {
	c := f.c
	s := &search{
		failed:     relations.PeerAddrs{Peer: r.Peer, Addrs: slices.Clone(r.Addrs)},
		name:       r.DisplayName(),
		configured: r.Configured,
		lastHeard:  r.LastHeard,
		declared:   now,
		cause:      cause,
		backoff:    c.backoff(),
	}
	if s.lastHeard.IsZero() {
		s.lastHeard = r.RestoredAt
	}
	f.searches[r.Peer] = s
	c.event(now, r.Peer, s.name, "superior failed: "+cause)
	c.log.Warn("superior failed", "peer", s.name, "cause", cause)
	c.metrics.Failover("declared")
	c.publishRelation(now, "failed-superior", r.Peer, s.name, relations.Superior, r.State, relations.Down, cause)
	var skipped []relations.Skipped
	s.cands, skipped = c.set.Candidates(r, c.cfg.FallbackSuperiors, nil)
	for _, sk := range skipped {
		c.event(now, sk.Peer, sk.Label(), "not a candidate: "+sk.Reason)
	}
	f.tryNext(now, s)
}

// refreshCandidates rebuilds the list for a later round: the failed
// superior's last known ancestors, fallbacks and now the configured
// superiors too.
func (f *failover) refreshCandidates(s *search) {
	failed := &relations.Relation{Peer: s.failed.Peer}
	var anc []relations.Ancestor
	for _, cd := range s.cands {
		if cd.Origin == relations.FromAdoption {
			anc = append(anc, relations.Ancestor{Peer: cd.Peer, Name: cd.Name, Addrs: cd.Addrs, Depth: len(anc) + 1})
		}
	}
	failed.Ancestors = anc
	s.cands, _ = f.c.set.Candidates(failed, f.c.cfg.FallbackSuperiors, f.c.cfg.Superiors)
	s.next = 0
}

// tryNext tries the next candidate of s, or ends the round.
func (f *failover) tryNext(now time.Time, s *search) {
	c := f.c
	for s.next < len(s.cands) {
		cd := s.cands[s.next]
		s.next++
		if f.removedBy[cd.Peer] {
			continue // it removed us
		}
		if r := c.set.Get(cd.Peer); r != nil {
			if r.Role == relations.Superior && r.State.Live() {
				// Already ours: nothing to add.
				f.replaced(now, s, r, cd.Why, true)
				return
			}
			continue // an inferior, or a superior being dialled: not now
		}
		if _, err := c.set.AddCandidate(now, cd, s.failed.Peer, now.Add(c.cfg.HandshakeTimeout), c.backoff()); err != nil {
			c.log.Debug("candidate skipped", "peer", cd.Label(), "err", err)
			continue
		}
		s.trying = cd.Peer
		c.log.Info("trying a new superior", "peer", cd.Label(), "as", cd.Why, "in_place_of", s.name, "round", s.round+1)
		c.dialDue(now)
		return
	}
	s.trying = ""
	d, _ := s.backoff.Next(c.rng)
	s.nextRound = now.Add(d)
	if c.set.LiveSuperiors() == 0 {
		c.event(now, s.failed.Peer, s.name, fmt.Sprintf("no candidate took %s in place of %s: acting as a root, retrying in %s", c.cfg.Name, s.name, fmtDur(d)))
		c.log.Warn("acting as root", "failed_superior", s.name, "candidates", len(s.cands), "retry_in", fmtDur(d))
		if !s.rootSaid {
			s.rootSaid = true
			c.metrics.Failover("root")
			c.publishRelation(now, "root", s.failed.Peer, s.name, relations.Superior, relations.Down, relations.Down,
				fmt.Sprintf("no candidate took %s in place of %s; retrying in %s", c.cfg.Name, s.name, fmtDur(d)))
		}
	} else {
		c.log.Warn("no replacement for failed superior; keeping the others", "failed_superior", s.name, "retry_in", fmtDur(d))
	}
}

// trialFailed drops a candidate that did not take us and tries the next.
func (f *failover) trialFailed(now time.Time, r *relations.Relation) {
	c := f.c
	s := f.searches[r.Trial]
	c.log.Info("candidate did not take this manager", "peer", r.DisplayName(), "err", r.LastError)
	if r.LastError != "" {
		c.event(now, r.Peer, r.DisplayName(), "candidate did not take us: "+r.LastError)
	}
	c.set.Remove(r.Peer)
	if s != nil && s.trying == r.Peer {
		s.trying = ""
		f.tryNext(now, s)
	}
}

// replaced ends search s: r took us (or already was our superior).
func (f *failover) replaced(now time.Time, s *search, r *relations.Relation, why string, already bool) {
	c := f.c
	delete(f.searches, s.failed.Peer)
	r.Trial, r.TrialDeadline = "", time.Time{}
	if r.StandsFor == "" {
		r.StandsFor = s.failed.Peer
	}
	took := now.Sub(s.lastHeard)
	if already {
		// No new relation: a live superior (the one that stood in for
		// it before, or another superior of ours) covers the failed one.
		c.event(now, r.Peer, r.DisplayName(), fmt.Sprintf("%s failed; %s (%s) is already a superior of %s", s.name, r.DisplayName(), why, c.cfg.Name))
		c.log.Info("failed superior already covered", "failed", s.name, "by", r.DisplayName())
	} else {
		what := fmt.Sprintf("reparented: %s (%s) took %s in place of %s, %s after %s was last heard",
			r.DisplayName(), why, c.cfg.Name, s.name, fmtDur(took), s.name)
		c.event(now, r.Peer, r.DisplayName(), what)
		c.log.Info("reparented", "superior", r.DisplayName(), "as", why, "in_place_of", s.name,
			"since_last_heard", fmtDur(took), "since_declared", fmtDur(now.Sub(s.declared)))
		c.metrics.Failover("reparented")
		c.publishRelation(now, "reparented", r.Peer, r.DisplayName(), relations.Superior, relations.Down, r.State,
			fmt.Sprintf("%s (%s) in place of %s", r.DisplayName(), why, s.name))
	}
	if old := c.set.Get(s.failed.Peer); old != nil && old.Role == relations.Superior && !old.State.Live() {
		if c.cfg.PreferConfiguredSuperior && old.Configured {
			old.Standby = true
			c.log.Info("will keep dialling the configured superior and move back once it is up", "peer", s.name,
				"settle", fmtDur(c.cfg.FailoverSettle))
		} else {
			c.closeChan(old.Peer, "replaced by "+r.DisplayName())
			c.set.Remove(old.Peer)
		}
	}
	c.relationsChanged()
	c.pushChain(now)
}

// superiorUp is called when a superior was welcomed: a candidate's trial
// ends in adoption; a failed superior that is back cancels its search.
func (f *failover) superiorUp(now time.Time, r *relations.Relation) {
	c := f.c
	c.adm.superiorUp(now, r)
	if r.Trial != "" {
		if s := f.searches[r.Trial]; s != nil {
			why := r.Origin.String()
			for _, cd := range s.cands {
				if cd.Peer == r.Peer {
					why = cd.Why
				}
			}
			f.replaced(now, s, r, why, false)
			return
		}
		r.Trial, r.TrialDeadline = "", time.Time{}
	}
	r.Standby = false
	if s := f.searches[r.Peer]; s != nil {
		delete(f.searches, r.Peer)
		c.event(now, r.Peer, r.DisplayName(), "failed superior is back: failover ended")
		if t := c.set.Get(s.trying); t != nil && t.Trial == r.Peer {
			c.closeChan(t.Peer, "failed superior is back")
			c.set.Remove(t.Peer)
		}
	}
	c.relationsChanged()
}

// superiorGone fails a superior at once (it said goodbye: it is shutting
// down or leaving us), so that its inferiors move without waiting for the
// heartbeat timeout.
func (f *failover) superiorGone(now time.Time, r *relations.Relation, cause string) {
	if r.Role != relations.Superior || r.Trial != "" || f.searches[r.Peer] != nil || f.c.stopping {
		return
	}
	f.start(now, r, cause)
}

// removedBySuperior handles a goodbye with removed set: the superior does
// not want us back, so we do not redial it, and look for a new superior
// among its ancestors (failover without the wait).
func (f *failover) removedBySuperior(now time.Time, r *relations.Relation, reason string) {
	c := f.c
	f.removedBy[r.Peer] = true
	f.start(now, r, "removed: "+reason)
	if cur := c.set.Get(r.Peer); cur != nil && cur.Role == relations.Superior && !cur.State.Live() {
		c.closeChan(cur.Peer, reason)
		c.set.Remove(cur.Peer)
	}
	c.relationsChanged()
}

// preferConfigured moves back to a configured superior that returned and
// stayed up for failover.settle, letting go of the superior that stood in
// for it.
func (f *failover) preferConfigured(now time.Time) {
	c := f.c
	if !c.cfg.PreferConfiguredSuperior {
		return
	}
	for _, r := range c.set.Superiors() {
		if r.StandsFor == "" || !r.State.Live() || r.Configured {
			continue
		}
		orig := c.set.Get(r.StandsFor)
		if orig == nil || orig.Role != relations.Superior || orig.State != relations.Up || now.Sub(orig.Since) < c.cfg.FailoverSettle {
			continue
		}
		reason := fmt.Sprintf("returning to configured superior %s (up for %s)", orig.DisplayName(), fmtDur(now.Sub(orig.Since)))
		c.event(now, r.Peer, r.DisplayName(), "left: "+reason)
		c.log.Info("moving back to configured superior", "peer", orig.DisplayName(), "leaving", r.DisplayName())
		c.send(r.Peer, &wire.Envelope{Body: &wire.Envelope_Goodbye{Goodbye: &wire.Goodbye{Reason: reason}}})
		c.closeChan(r.Peer, reason)
		c.removeRelation(now, r, "down")
		c.relationsChanged()
		c.pushChain(now)
	}
}

// forgetDownInferiors drops inferiors that have been down for
// downInferiorRetention (a configured superior that connected as an
// inferior is turned back into a superior instead, elsewhere).
func (f *failover) forgetDownInferiors(now time.Time) {
	c := f.c
	for _, r := range c.set.Inferiors() {
		if r.State == relations.Down && !r.Configured && now.Sub(r.Since) >= downInferiorRetention {
			c.event(now, r.Peer, r.DisplayName(), fmt.Sprintf("inferior forgotten after %s down", fmtDur(now.Sub(r.Since))))
			c.set.Remove(r.Peer)
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
	c := f.c
	if c.saved == nil {
		for _, pa := range c.cfg.Superiors {
			if _, err := c.set.AddSuperior(now, pa, true, c.backoff()); err != nil {
				c.log.Error("ignoring configured superior", "peer", pa.Peer, "err", err)
			}
		}
		c.relationsChanged()
		return
	}
	configured := map[string]bool{}
	for _, pa := range c.cfg.Superiors {
		configured[pa.Peer] = true
	}
	for _, s := range c.saved.Superiors {
		r, err := c.set.AddSuperior(now, relations.PeerAddrs{Peer: s.Peer, Addrs: s.Addrs}, configured[s.Peer], c.backoff())
		if err != nil {
			c.log.Error("ignoring saved superior", "peer", s.Peer, "err", err)
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
	c.saved = nil
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(100 * time.Microsecond).String()
	}
}

// Failovers lists the failed superiors whose replacement is still being
// looked for (their names), for status and tests.
func (c *Core) Failovers() []string {
	var out []string
	for _, peer := range slices.Sorted(maps.Keys(c.fo.searches)) {
		out = append(out, c.fo.searches[peer].name)
	}
	return out
}

// firstLine is s up to its first newline (libp2p dial errors list every
// address on its own line).
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[:i])
	}
	return s
}
