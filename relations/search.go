package relations

import (
	"github.com/gridmgr/gridmgr/internal/keys"
	"github.com/gridmgr/gridmgr/peeraddr"
	"math/rand/v2"
	"slices"
	"time"
)

// DownInferiorRetention is how long an inferior that went down (and did
// not say goodbye) stays listed: long enough for an operator to see it in
// status and tree, then forgotten so that churn does not pile up.
const DownInferiorRetention = time.Minute

// Policy is what a Failover needs from the properties file. It is passed
// with every call, so a reloaded configuration applies at once.
type Policy struct {
	Live             Liveness
	Fallbacks        []peeraddr.PeerAddrs // fallback_superiors
	Superiors        []peeraddr.PeerAddrs // the configured superiors, tried in later rounds
	HandshakeTimeout time.Duration
	Retry            Backoff // Initial and Max of a new search's backoff
	PreferConfigured bool    // prefer_configured_superior
	Settle           time.Duration
}

// ActKind is what an Act asks the caller to do.
type ActKind uint8

const (
	// ActDeclared: Rel (a superior) is declared failed, for Cause; if
	// Cause is empty, the caller words it from Silent, Restarted and
	// Rel.LastError. From is the state it was in.
	ActDeclared ActKind = iota + 1
	// ActNotCandidate: Cand is left out of the search, for Reason.
	ActNotCandidate
	// ActTry: add Cand as a superior on trial in place of Failed (Name),
	// to be welcomed by Deadline, and dial it. Round counts from 1.
	ActTry
	// ActRoot: the round ended with no superior left: this manager acts
	// as a root, retrying in Retry. First is set the first time for this
	// search. Tried is how many candidates the round had.
	ActRoot
	// ActNoReplacement: the round ended without a replacement while other
	// superiors are live; the next round is in Retry.
	ActNoReplacement
	// ActTimedOut: Rel, on trial, was not welcomed within the handshake
	// timeout: record that as its error and close its channel as dead.
	ActTimedOut
	// ActCandidateFailed: Rel, on trial, did not take us (Rel.LastError
	// says why). Its removal follows.
	ActCandidateFailed
	// ActRemove: close Rel's channel for Reason (unless Reason is empty),
	// then remove Rel and tell what waits on it (Why: "down" or
	// "removed"). The Failover has already forgotten what it kept on Rel.
	ActRemove
	// ActReplaced: Rel (Why: "grandparent", "fallback", …) took us in
	// place of Failed (Name). Took is the time since Failed was last
	// heard, SinceDeclared since it was declared failed.
	ActReplaced
	// ActCovered: Rel was already a live superior and covers Failed
	// (Name): nothing to add.
	ActCovered
	// ActStandby: Rel, the replaced configured superior, is kept and
	// dialled, to move back once it has been up for Settle.
	ActStandby
	// ActBack: Rel, a failed superior, was welcomed again: its search
	// ended.
	ActBack
	// ActReturn: Rel stood in for Orig, a configured superior up for Took:
	// say goodbye to Rel for Reason. Its removal follows.
	ActReturn
	// ActForgotten: Rel, an inferior, was down for Took and is forgotten.
	// Its removal follows.
	ActForgotten
	// ActChanged: the superiors changed: save them.
	ActChanged
	// ActPushChain: tell the inferiors our new ancestors.
	ActPushChain
	// ActProbe: ask each of Helpers whether it can reach Rel (Failed,
	// Name), for round Round, and report each answer (or that none will
	// come) with ProbeAnswer before Deadline.
	ActProbe
	// ActProbed: a round of indirect probes of Rel ended with Verdict:
	// Answered of Tried helpers answered; Reason is a helper that reached
	// it (Reached). Informational; a Reached verdict holds Rel suspect
	// (Relation.HeldUntil), an Unreached one of a lost channel is followed
	// by ActDeclared.
	ActProbed
)

// Act is one thing a Failover asks its caller to do. Acts are to be
// carried out in order, before the next call.
type Act struct {
	Kind      ActKind
	Rel       *Relation
	Orig      *Relation // ActReturn: the configured superior returned to
	Failed    string    // the failed superior's peer
	Name      string    // the failed superior's name
	Cand      Candidate // ActTry, ActNotCandidate
	From      State     // ActDeclared
	Cause     string    // ActDeclared
	Silent    time.Duration
	Restarted bool // ActDeclared: never heard since this manager restarted
	Why       string
	Reason    string
	Round     int
	Tried     int
	First     bool
	Deadline  time.Time
	Retry     time.Duration
	Took      time.Duration
	// SinceDeclared: ActReplaced.
	SinceDeclared time.Duration
	// Helpers: ActProbe.
	Helpers []Candidate
	// Verdict, Answered: ActProbed.
	Verdict  Verdict
	Answered int
}

// Failover searches for the replacements of failed superiors. It is pure:
// the caller feeds it what happened (Tick, SuperiorUp, TrialFailed,
// SuperiorGone, RemovedBy, Ended) with the current time, the Set (which
// it reads) and the Policy, and carries out the Acts it returns, in order.
//
// A superior is declared failed when it has been silent for
// heartbeat.misses intervals (plus half an interval of grace) and is not
// live; a goodbye from it fails it at once; a lost channel fails it one
// interval after the loss if the managers asked by an indirect probe do
// not reach it either, and a silent superior they do reach is held
// suspect (probe.go). The candidates are its
// ancestors as it last reported them (the grandparent first), then
// fallback_superiors; they are tried one at a time, each given the
// handshake timeout to welcome us. A refusal (a candidate that finds us
// among its ancestors refuses: that is how a descendant is never taken)
// moves on to the next. When all are tried, the round ends; if no
// superior is left, this manager is a root until a later round (with
// backoff, adding the configured superiors) or the failed superior itself
// (still redialled) takes it back.
//
// Removals and additions of relations are Acts: a Failover never adds to
// or removes from the Set. It does mark relations with what the search is
// for them (Relation.Trial, TrialDeadline, StandsFor, Standby).
type Failover struct {
	rng       *rand.Rand
	searches  map[string]*search // failed superior's peer → its search
	removedBy map[string]bool    // superiors that removed us: never candidates again
	probes    map[string]*probe  // superior's peer → its indirect probes (probe.go)

	// During a call: the set, the policy, the acts so far, and the
	// relations those acts add or remove (not yet carried out).
	set   *Set
	p     *Policy
	acts  []Act
	gone  []string // peers
	added []string
}

// search is the search for a replacement of one failed superior.
type search struct {
	failed    peeraddr.PeerAddrs
	name      string
	lastHeard time.Time // when the failed superior was last heard
	declared  time.Time
	cands     []Candidate
	next      int    // index of the next candidate to try
	trying    string // peer on trial, "" between rounds
	round     int
	rootSaid  bool // the root act was given for this search
	nextRound time.Time
	backoff   Backoff
}

// NewFailover returns a Failover with no search, drawing backoff jitter
// from rng.
func NewFailover(rng *rand.Rand) *Failover {
	// The maps are made at their first entry: most managers of a large
	// simulated grid never search or probe.
	return &Failover{rng: rng}
}

func (f *Failover) begin(set *Set, p *Policy) {
	f.set, f.p = set, p
	f.acts, f.gone, f.added = nil, nil, nil
}

func (f *Failover) end() []Act {
	acts := f.acts
	// The acts are the caller's; nothing of a call is kept (most calls
	// have no act, and a manager keeps no scratch space for the rare ones).
	f.set, f.p, f.acts, f.gone, f.added = nil, nil, nil, nil, nil
	return acts
}

func (f *Failover) act(a Act) {
	// From nil: most calls that act, act once (an Act is 336 bytes).
	f.acts = append(f.acts, a)
}

// remove asks for r's removal, closing its channel for reason.
func (f *Failover) remove(r *Relation, reason, why string) {
	f.gone = append(f.gone, r.Peer)
	f.added = slices.DeleteFunc(f.added, func(p string) bool { return p == r.Peer })
	f.act(Act{Kind: ActRemove, Rel: r, Reason: reason, Why: why})
}

// get is the relation with peer as it will be once the acts so far are
// carried out; added reports a relation an act adds (it has no
// *Relation yet).
func (f *Failover) get(peer string) (r *Relation, added bool) {
	if slices.Contains(f.added, peer) {
		return nil, true
	}
	if slices.Contains(f.gone, peer) {
		return nil, false
	}
	return f.set.Get(peer), false
}

// liveSuperiors counts the live superiors once the acts so far are
// carried out (an added candidate is never live yet).
func (f *Failover) liveSuperiors() int {
	n := f.set.LiveSuperiors()
	for _, peer := range f.gone {
		if r := f.set.Get(peer); r != nil && r.Role == Superior && r.State.Live() {
			n--
		}
	}
	return n
}

// Searching reports whether the replacement of the superior peer is being
// looked for.
func (f *Failover) Searching(peer string) bool { return f.searches[peer] != nil }

// Names lists the failed superiors whose replacement is being looked for
// (their names), sorted by peer.
func (f *Failover) Names() []string {
	var out []string
	for _, peer := range keys.Sorted(f.searches) {
		out = append(out, f.searches[peer].name)
	}
	return out
}

// Ended is told that the relation with peer ended and is no longer in the
// set, for another reason than an act of this Failover (it left, or an
// administrator removed it): a superior removed on purpose is not to be
// replaced, so its search is forgotten.
func (f *Failover) Ended(peer string) {
	delete(f.searches, peer)
	delete(f.probes, peer)
}

// Deadline is the earliest of: a superior's silence reaching the failure
// timeout, a candidate's trial ending, a new round of a search, a
// configured superior settled enough to move back to, a down inferior to
// forget. Zero if none.
func (f *Failover) Deadline(set *Set, p *Policy) time.Time {
	var next time.Time
	at := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	at(set.NextFailure(p.Live, f.Searching))
	at(f.probeDeadline(set, p.Live))
	for _, r := range set.Superiors() {
		if r.Trial != "" && !r.State.Live() && !r.TrialDeadline().IsZero() {
			at(r.TrialDeadline().Add(1))
		}
		if p.PreferConfigured && r.StandsFor != "" && r.State.Live() && !r.Configured {
			if orig := set.Get(r.StandsFor); orig != nil && orig.Role == Superior && orig.State == Up {
				at(orig.Since().Add(p.Settle))
			}
		}
	}
	for _, s := range f.searches {
		if s.trying == "" && !s.nextRound.IsZero() {
			at(s.nextRound)
		}
	}
	for _, r := range set.Inferiors() {
		if r.State == Down && !r.Configured {
			at(r.Since().Add(DownInferiorRetention))
		}
	}
	return next
}

// Tick declares failures, times out trials, starts new rounds, moves back
// to configured superiors that are settled and forgets inferiors down for
// DownInferiorRetention.
func (f *Failover) Tick(now time.Time, set *Set, p *Policy) []Act {
	f.begin(set, p)
	f.probeTick(now)
	for _, r := range set.Failed(now, p.Live) {
		if f.searches[r.Peer] == nil {
			a := Act{Kind: ActDeclared, Rel: r, From: r.State, Silent: now.Sub(r.LastHeard())}
			if r.LastHeard().IsZero() {
				a.Silent, a.Restarted = now.Sub(r.RestoredAt()), true
			}
			f.start(now, r, a)
		}
	}
	for _, r := range set.Superiors() {
		if r.Trial != "" && !r.State.Live() && !r.TrialDeadline().IsZero() && now.After(r.TrialDeadline()) {
			f.act(Act{Kind: ActTimedOut, Rel: r})
			f.trialFailed(now, r)
		}
	}
	for _, peer := range keys.Sorted(f.searches) {
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
	return f.end()
}

// start declares r failed (the ActDeclared a) and tries the first
// candidate.
func (f *Failover) start(now time.Time, r *Relation, a Act) {
	s := &search{
		failed:    peeraddr.PeerAddrs{Peer: r.Peer, Addrs: slices.Clone(r.Addrs)},
		name:      r.DisplayName(),
		lastHeard: r.LastHeard(),
		declared:  now,
		backoff:   Backoff{Initial: f.p.Retry.Initial, Max: f.p.Retry.Max},
	}
	if s.lastHeard.IsZero() {
		s.lastHeard = r.RestoredAt()
	}
	if f.searches == nil {
		f.searches = make(map[string]*search)
	}
	f.searches[r.Peer] = s
	delete(f.probes, r.Peer)
	a.Failed, a.Name = r.Peer, s.name
	f.act(a)
	var skipped []Skipped
	s.cands, skipped = f.set.Candidates(r, f.p.Fallbacks, nil)
	for _, sk := range skipped {
		f.act(Act{Kind: ActNotCandidate, Cand: sk.Candidate, Reason: sk.Reason, Failed: r.Peer, Name: s.name})
	}
	f.tryNext(now, s)
}

// refreshCandidates rebuilds the list for a later round: the failed
// superior's last known ancestors, fallbacks and now the configured
// superiors too.
func (f *Failover) refreshCandidates(s *search) {
	failed := &Relation{Peer: s.failed.Peer}
	var anc []Ancestor
	for _, cd := range s.cands {
		if cd.Origin == FromAdoption {
			anc = append(anc, Ancestor{Peer: cd.Peer, Name: cd.Name, Addrs: cd.Addrs, Depth: len(anc) + 1})
		}
	}
	failed.Ancestors = anc
	s.cands, _ = f.set.Candidates(failed, f.p.Fallbacks, f.p.Superiors)
	s.next = 0
}

// tryNext tries the next candidate of s, or ends the round.
func (f *Failover) tryNext(now time.Time, s *search) {
	for s.next < len(s.cands) {
		cd := s.cands[s.next]
		s.next++
		if f.removedBy[cd.Peer] {
			continue // it removed us
		}
		r, added := f.get(cd.Peer)
		if added {
			continue // a superior being dialled: not now
		}
		if r != nil {
			if r.Role == Superior && r.State.Live() {
				// Already ours: nothing to add.
				f.replaced(now, s, r, cd.Why, true)
				return
			}
			continue // an inferior, or a superior being dialled: not now
		}
		if cd.Peer == f.set.Self() {
			continue // Candidates never lists us; Set.AddCandidate would refuse
		}
		f.added = append(f.added, cd.Peer)
		s.trying = cd.Peer
		f.act(Act{Kind: ActTry, Cand: cd, Failed: s.failed.Peer, Name: s.name, Round: s.round + 1,
			Deadline: now.Add(f.p.HandshakeTimeout)})
		return
	}
	s.trying = ""
	d, _ := s.backoff.Next(f.rng)
	s.nextRound = now.Add(d)
	if f.liveSuperiors() == 0 {
		f.act(Act{Kind: ActRoot, Failed: s.failed.Peer, Name: s.name, Retry: d, Tried: len(s.cands), First: !s.rootSaid})
		s.rootSaid = true
	} else {
		f.act(Act{Kind: ActNoReplacement, Failed: s.failed.Peer, Name: s.name, Retry: d})
	}
}

// TrialFailed is told that r, a candidate on trial, went down or was
// refused (r.LastError says why): it is dropped and the next candidate
// tried.
func (f *Failover) TrialFailed(now time.Time, set *Set, p *Policy, r *Relation) []Act {
	f.begin(set, p)
	f.trialFailed(now, r)
	return f.end()
}

func (f *Failover) trialFailed(now time.Time, r *Relation) {
	s := f.searches[r.Trial]
	f.act(Act{Kind: ActCandidateFailed, Rel: r})
	f.remove(r, "", "down")
	if s != nil && s.trying == r.Peer {
		s.trying = ""
		f.tryNext(now, s)
	}
}

// replaced ends search s: r took us (or already was our superior).
func (f *Failover) replaced(now time.Time, s *search, r *Relation, why string, already bool) {
	delete(f.searches, s.failed.Peer)
	r.Trial, r.trialDeadline = "", 0
	if r.StandsFor == "" {
		r.StandsFor = s.failed.Peer
	}
	kind := ActReplaced
	if already {
		kind = ActCovered
	}
	f.act(Act{Kind: kind, Rel: r, Failed: s.failed.Peer, Name: s.name, Why: why,
		Took: now.Sub(s.lastHeard), SinceDeclared: now.Sub(s.declared)})
	if old, _ := f.get(s.failed.Peer); old != nil && old.Role == Superior && !old.State.Live() {
		if f.p.PreferConfigured && old.Configured {
			old.Standby = true
			f.act(Act{Kind: ActStandby, Rel: old, Failed: s.failed.Peer, Name: s.name})
		} else {
			f.remove(old, "replaced by "+r.DisplayName(), "down")
		}
	}
	f.act(Act{Kind: ActChanged})
	f.act(Act{Kind: ActPushChain})
}

// SuperiorUp is told that the superior r was welcomed: a candidate's
// trial ends in adoption; a failed superior that is back ends its search.
func (f *Failover) SuperiorUp(now time.Time, set *Set, p *Policy, r *Relation) []Act {
	f.begin(set, p)
	f.superiorUp(now, r)
	return f.end()
}

func (f *Failover) superiorUp(now time.Time, r *Relation) {
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
		r.Trial, r.trialDeadline = "", 0
	}
	r.Standby = false
	delete(f.probes, r.Peer)
	r.heldUntil = 0
	if s := f.searches[r.Peer]; s != nil {
		delete(f.searches, r.Peer)
		f.act(Act{Kind: ActBack, Rel: r})
		if t, _ := f.get(s.trying); t != nil && t.Trial == r.Peer {
			f.remove(t, "failed superior is back", "down")
		}
	}
	f.act(Act{Kind: ActChanged})
}

// SuperiorGone is told that the superior r said goodbye (it is shutting
// down or leaving us, for cause): it is failed at once, so that its
// inferiors move without waiting for the heartbeat timeout. Nothing is
// done for a candidate on trial or a superior already being replaced.
func (f *Failover) SuperiorGone(now time.Time, set *Set, p *Policy, r *Relation, cause string) []Act {
	f.begin(set, p)
	if r.Role == Superior && r.Trial == "" && f.searches[r.Peer] == nil {
		f.start(now, r, Act{Kind: ActDeclared, Rel: r, From: r.State, Cause: cause})
	}
	return f.end()
}

// RemovedBy is told that the superior r said goodbye with removed set
// (for reason): it does not want us back, so it is never a candidate
// again, and a new superior is looked for among its ancestors (failover
// without the wait). If it is not live, it is removed.
func (f *Failover) RemovedBy(now time.Time, set *Set, p *Policy, r *Relation, reason string) []Act {
	f.begin(set, p)
	if f.removedBy == nil {
		f.removedBy = make(map[string]bool)
	}
	f.removedBy[r.Peer] = true
	f.start(now, r, Act{Kind: ActDeclared, Rel: r, From: r.State, Cause: "removed: " + reason})
	if cur, _ := f.get(r.Peer); cur != nil && cur.Role == Superior && !cur.State.Live() {
		f.remove(cur, reason, "down")
	}
	f.act(Act{Kind: ActChanged})
	return f.end()
}

// preferConfigured moves back to a configured superior that returned and
// stayed up for Settle, letting go of the superior that stood in for it.
func (f *Failover) preferConfigured(now time.Time) {
	if !f.p.PreferConfigured {
		return
	}
	for _, r := range f.set.Superiors() {
		if r.StandsFor == "" || !r.State.Live() || r.Configured || slices.Contains(f.gone, r.Peer) {
			continue
		}
		orig, _ := f.get(r.StandsFor)
		if orig == nil || orig.Role != Superior || orig.State != Up || now.Sub(orig.Since()) < f.p.Settle {
			continue
		}
		f.act(Act{Kind: ActReturn, Rel: r, Orig: orig, Took: now.Sub(orig.Since())})
		// The removal is the caller's like any other; a search for r
		// (there is none while it is live) would end with it.
		delete(f.searches, r.Peer)
		f.remove(r, "", "down")
		f.act(Act{Kind: ActChanged})
		f.act(Act{Kind: ActPushChain})
	}
}

// forgetDownInferiors drops inferiors that have been down for
// DownInferiorRetention (a configured superior that connected as an
// inferior is turned back into a superior instead, elsewhere).
func (f *Failover) forgetDownInferiors(now time.Time) {
	for _, r := range f.set.Inferiors() {
		if r.State == Down && !r.Configured && now.Sub(r.Since()) >= DownInferiorRetention {
			f.act(Act{Kind: ActForgotten, Rel: r, Took: now.Sub(r.Since())})
			f.remove(r, "", "down")
		}
	}
}
