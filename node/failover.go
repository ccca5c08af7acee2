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

// failover is the search for a replacement of one failed superior.
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
type failover struct {
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
	nextRound  time.Time
	backoff    relations.Backoff
}

// failoverTick declares failures, starts new rounds and times out trials.
func (c *Core) failoverTick(now time.Time) {
	for _, r := range c.set.Failed(now, c.live) {
		if c.failovers[r.Peer] == nil {
			cause := fmt.Sprintf("silent for %s (%s)", fmtDur(now.Sub(r.LastHeard)), firstLine(r.LastError))
			if r.LastHeard.IsZero() {
				cause = fmt.Sprintf("not heard in %s since this manager restarted (%s)", fmtDur(now.Sub(r.RestoredAt)), firstLine(r.LastError))
			}
			c.startFailover(now, r, cause)
		}
	}
	for _, r := range c.set.Superiors() {
		if r.Trial != "" && !r.State.Live() && !r.TrialDeadline.IsZero() && now.After(r.TrialDeadline) {
			r.LastError = fmt.Sprintf("no welcome within %s", fmtDur(c.cfg.HandshakeTimeout))
			c.rd.Closes = append(c.rd.Closes, Close{Peer: r.Peer, Reason: r.LastError, Dead: true})
			c.trialFailed(now, r)
		}
	}
	for _, peer := range slices.Sorted(maps.Keys(c.failovers)) {
		f := c.failovers[peer]
		if f.trying == "" && !f.nextRound.IsZero() && !now.Before(f.nextRound) {
			f.round++
			f.nextRound = time.Time{}
			c.refreshCandidates(f)
			c.tryNext(now, f)
		}
	}
	c.preferConfigured(now)
	c.forgetDownInferiors(now)
}

// startFailover declares r failed and starts looking for its replacement.
func (c *Core) startFailover(now time.Time, r *relations.Relation, cause string) {
	f := &failover{
		failed:     relations.PeerAddrs{Peer: r.Peer, Addrs: slices.Clone(r.Addrs)},
		name:       r.DisplayName(),
		configured: r.Configured,
		lastHeard:  r.LastHeard,
		declared:   now,
		cause:      cause,
		backoff:    c.backoff(),
	}
	if f.lastHeard.IsZero() {
		f.lastHeard = r.RestoredAt
	}
	c.failovers[r.Peer] = f
	c.event(now, r.Peer, f.name, "superior failed: "+cause)
	c.log.Warn("superior failed", "peer", f.name, "cause", cause)
	var skipped []relations.Skipped
	f.cands, skipped = c.set.Candidates(r, c.cfg.FallbackSuperiors, nil)
	for _, s := range skipped {
		c.event(now, s.Peer, s.Label(), "not a candidate: "+s.Reason)
	}
	c.tryNext(now, f)
}

// refreshCandidates rebuilds the list for a later round: the failed
// superior's last known ancestors, fallbacks and now the configured
// superiors too.
func (c *Core) refreshCandidates(f *failover) {
	failed := &relations.Relation{Peer: f.failed.Peer}
	var anc []relations.Ancestor
	for _, cd := range f.cands {
		if cd.Origin == relations.FromAdoption {
			anc = append(anc, relations.Ancestor{Peer: cd.Peer, Name: cd.Name, Addrs: cd.Addrs, Depth: len(anc) + 1})
		}
	}
	failed.Ancestors = anc
	f.cands, _ = c.set.Candidates(failed, c.cfg.FallbackSuperiors, c.configuredSuperiors())
	f.next = 0
}

// tryNext tries the next candidate of f, or ends the round.
func (c *Core) tryNext(now time.Time, f *failover) {
	for f.next < len(f.cands) {
		cd := f.cands[f.next]
		f.next++
		if c.removedBy[cd.Peer] {
			continue // it removed us
		}
		if r := c.set.Get(cd.Peer); r != nil {
			if r.Role == relations.Superior && r.State.Live() {
				// Already ours: nothing to add.
				c.replaced(now, f, r, cd.Why, true)
				return
			}
			continue // an inferior, or a superior being dialled: not now
		}
		r, err := c.set.AddCandidate(now, cd, f.failed.Peer, now.Add(c.cfg.HandshakeTimeout), c.backoff())
		if err != nil {
			c.log.Debug("candidate skipped", "peer", cd.Label(), "err", err)
			continue
		}
		f.trying = cd.Peer
		c.log.Info("trying a new superior", "peer", cd.Label(), "as", cd.Why, "in_place_of", f.name, "round", f.round+1)
		c.dialDue(now)
		_ = r
		return
	}
	f.trying = ""
	d, _ := f.backoff.Next(c.rng)
	f.nextRound = now.Add(d)
	if c.set.LiveSuperiors() == 0 {
		c.event(now, f.failed.Peer, f.name, fmt.Sprintf("no candidate took %s in place of %s: acting as a root, retrying in %s", c.cfg.Name, f.name, fmtDur(d)))
		c.log.Warn("acting as root", "failed_superior", f.name, "candidates", len(f.cands), "retry_in", fmtDur(d))
	} else {
		c.log.Warn("no replacement for failed superior; keeping the others", "failed_superior", f.name, "retry_in", fmtDur(d))
	}
}

// trialFailed drops a candidate that did not take us and tries the next.
func (c *Core) trialFailed(now time.Time, r *relations.Relation) {
	f := c.failovers[r.Trial]
	c.log.Info("candidate did not take this manager", "peer", r.DisplayName(), "err", r.LastError)
	if r.LastError != "" {
		c.event(now, r.Peer, r.DisplayName(), "candidate did not take us: "+r.LastError)
	}
	c.set.Remove(r.Peer)
	if f != nil && f.trying == r.Peer {
		f.trying = ""
		c.tryNext(now, f)
	}
}

// replaced ends failover f: r took us (or already was our superior).
func (c *Core) replaced(now time.Time, f *failover, r *relations.Relation, why string, already bool) {
	delete(c.failovers, f.failed.Peer)
	r.Trial, r.TrialDeadline = "", time.Time{}
	if r.StandsFor == "" {
		r.StandsFor = f.failed.Peer
	}
	took := now.Sub(f.lastHeard)
	if already {
		// No new relation: a live superior (the one that stood in for
		// it before, or another superior of ours) covers the failed one.
		c.event(now, r.Peer, r.DisplayName(), fmt.Sprintf("%s failed; %s (%s) is already a superior of %s", f.name, r.DisplayName(), why, c.cfg.Name))
		c.log.Info("failed superior already covered", "failed", f.name, "by", r.DisplayName())
	} else {
		what := fmt.Sprintf("reparented: %s (%s) took %s in place of %s, %s after %s was last heard",
			r.DisplayName(), why, c.cfg.Name, f.name, fmtDur(took), f.name)
		c.event(now, r.Peer, r.DisplayName(), what)
		c.log.Info("reparented", "superior", r.DisplayName(), "as", why, "in_place_of", f.name,
			"since_last_heard", fmtDur(took), "since_declared", fmtDur(now.Sub(f.declared)))
	}
	if old := c.set.Get(f.failed.Peer); old != nil && old.Role == relations.Superior && !old.State.Live() {
		if c.cfg.PreferConfiguredSuperior && old.Configured {
			old.Standby = true
			c.log.Info("will keep dialling the configured superior and move back once it is up", "peer", f.name,
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
// ends in adoption; a failed superior that is back cancels its failover.
func (c *Core) superiorUp(now time.Time, r *relations.Relation) {
	c.adminSuperiorUp(now, r)
	if r.Trial != "" {
		if f := c.failovers[r.Trial]; f != nil {
			why := r.Origin.String()
			for _, cd := range f.cands {
				if cd.Peer == r.Peer {
					why = cd.Why
				}
			}
			c.replaced(now, f, r, why, false)
			return
		}
		r.Trial, r.TrialDeadline = "", time.Time{}
	}
	r.Standby = false
	if f := c.failovers[r.Peer]; f != nil {
		delete(c.failovers, r.Peer)
		c.event(now, r.Peer, r.DisplayName(), "failed superior is back: failover ended")
		if t := c.set.Get(f.trying); t != nil && t.Trial == r.Peer {
			c.closeChan(t.Peer, "failed superior is back")
			c.set.Remove(t.Peer)
		}
	}
	c.relationsChanged()
}

// superiorGone fails a superior at once (it said goodbye: it is shutting
// down or leaving us), so that its inferiors move without waiting for the
// heartbeat timeout.
func (c *Core) superiorGone(now time.Time, r *relations.Relation, cause string) {
	if r.Role != relations.Superior || r.Trial != "" || c.failovers[r.Peer] != nil || c.stopping {
		return
	}
	c.startFailover(now, r, cause)
}

// preferConfigured moves back to a configured superior that returned and
// stayed up for failover.settle, letting go of the superior that stood in
// for it.
func (c *Core) preferConfigured(now time.Time) {
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
		c.set.Remove(r.Peer)
		c.failOps(r.Peer, "down")
		c.relationsChanged()
		c.pushChain(now)
	}
}

// forgetDownInferiors drops inferiors that have been down for
// downInferiorRetention (a configured superior that connected as an
// inferior is turned back into a superior instead, elsewhere).
func (c *Core) forgetDownInferiors(now time.Time) {
	for _, r := range c.set.Inferiors() {
		if r.State == relations.Down && !r.Configured && now.Sub(r.Since) >= downInferiorRetention {
			c.event(now, r.Peer, r.DisplayName(), fmt.Sprintf("inferior forgotten after %s down", fmtDur(now.Sub(r.Since))))
			c.set.Remove(r.Peer)
		}
	}
}

// configuredSuperiors is the properties file's superiors.
func (c *Core) configuredSuperiors() []relations.PeerAddrs { return c.cfg.Superiors }

// relationsChanged asks the runtime to save the superiors.
func (c *Core) relationsChanged() { c.relDirty = true }

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
func (c *Core) startSuperiors(now time.Time) {
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
	for _, peer := range slices.Sorted(maps.Keys(c.failovers)) {
		out = append(out, c.failovers[peer].name)
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
