package relations

import (
	"fmt"
	"slices"
	"time"

	"github.com/gridmgr/gridmgr/internal/keys"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/peeraddr"
)

// Indirect probes: before a superior whose channel was lost is given up,
// others are asked whether they can reach it (SWIM's indirect probe, as in
// memberlist). The managers asked (the helpers) are the superior's own
// superiors, as it last reported its ancestors: each has a channel to it
// of its own. A helper that has no live relation with it, or whose
// relation says nothing within ProbeWait, answers "not reached"; one that
// hears it answers "reached".
//
//   - A lost channel (the superior crashed: its connections were reset,
//     or it refused our redial) is probed ProbeAfterLoss later, time for a
//     quick restart to have come back. If no helper reached it and at
//     least one answered, it is declared failed at once, instead of
//     waiting for the heartbeat timeout (FailAfter).
//   - A silent superior (channel open, heartbeats missed) is probed once
//     it is suspect, then every interval. While a helper reaches it, it is
//     held suspect (Relation.HeldUntil), not turned down: the silence is
//     our link's, and a link that comes back brings its heartbeats back.
//     A superior others reach but we cannot hear is declared failed after
//     HoldMax of silence all the same: our path to it is broken. A silent
//     superior is never declared failed sooner than FailAfter: a stalled
//     superior (CPU, memory) keeps its connections, and its silence is
//     judged as before.
//   - With no helper (the superior is a root), or no helper answering
//     (they are gone too, or we are cut off), the heartbeat timeout alone
//     decides, as before.

// ProbeHelpers is how many of the superior's superiors are asked at most.
const ProbeHelpers = 3

// ProbeWait is how long a helper waits for the superior's answer: half an
// interval (a live manager answers within a round trip).
func (l Liveness) ProbeWait() time.Duration { return l.grace() }

// ProbeAfterLoss is how long after a superior's channel was lost it is
// probed: one interval, during which a superior that restarts at once
// comes back (we redial it; its superiors see it again) and is kept.
func (l Liveness) ProbeAfterLoss() time.Duration { return l.Interval }

// probeRound is how long a round waits for its helpers' answers (a helper
// may need a dial, then waits ProbeWait), and how long after a round the
// next one may start.
func (l Liveness) probeRound() time.Duration { return l.Interval }

// HoldMax is the silence after which a superior that helpers still reach
// is declared failed anyway: three times FailAfter.
func (l Liveness) HoldMax() time.Duration { return 3 * l.FailAfter() }

// Verdict is what a round of indirect probes found.
type Verdict uint8

const (
	// NoAnswer: no helper answered (or there was none to ask).
	NoAnswer Verdict = iota
	// Reached: a helper reached the superior: it is alive.
	Reached
	// Unreached: helpers answered and none reached it.
	Unreached
)

func (v Verdict) String() string {
	switch v {
	case Reached:
		return "reached"
	case Unreached:
		return "not reached"
	}
	return "no answer"
}

// probe is the state of the indirect probes of one superior.
type probe struct {
	lostAt   time.Time // when its channel was lost (zero: only silent)
	round    int       // rounds started
	started  time.Time // start of the current or last round
	deadline time.Time // of the round running; zero: none
	asked    []string  // helpers of the round running
	got      []bool    // which answered
	answers  int
	reached  []string // helpers that reached it
	ended    time.Time
}

// Lost is told that the channel of the superior r was lost (it went down
// while live, not by a goodbye): it will be probed ProbeAfterLoss later.
func (f *Failover) Lost(now time.Time, r *Relation) {
	if r.Role != Superior || r.Trial != "" || f.searches[r.Peer] != nil || r.LastHeard().IsZero() {
		return
	}
	p := f.probes[r.Peer]
	if p == nil {
		p = &probe{}
		f.setProbe(r.Peer, p)
	}
	if p.lostAt.IsZero() {
		p.lostAt = now
	}
}

// probeable reports whether r is a superior that may be probed: heard
// from, not up, not on trial or standby, its failure not being handled.
func (f *Failover) probeable(r *Relation) bool {
	return r.Role == Superior && r.Trial == "" && !r.Standby && f.searches[r.Peer] == nil && !r.LastHeard().IsZero() &&
		r.State != Up && r.State != 0
}

// nextProbe is when the next round for r is due, zero if none: a lost
// channel ProbeAfterLoss after the loss, a suspect one once suspect; then
// a round interval after the last one ended, while it stays so.
func (f *Failover) nextProbe(r *Relation, p *probe, l Liveness) time.Time {
	if p != nil && !p.deadline.IsZero() {
		return time.Time{} // running
	}
	var base time.Time
	switch {
	case r.State == Suspect:
		base = r.LastHeard().Add(l.Interval + l.grace())
	case !r.State.Live() && p != nil && !p.lostAt.IsZero():
		base = p.lostAt.Add(l.ProbeAfterLoss())
	default:
		return time.Time{}
	}
	if p == nil || p.started.Before(base) {
		return base
	}
	return p.ended.Add(l.probeRound())
}

// helpers are the managers to ask about r: its superiors (depth 1 of its
// ancestors) that are neither us nor it, and not relations of ours that
// are down (we could not reach them).
func (f *Failover) helpers(r *Relation) []Candidate {
	var out []Candidate
	for _, a := range r.Ancestors {
		if a.Depth != 1 || a.Peer == f.set.Self() || a.Peer == r.Peer {
			continue
		}
		if h := f.set.Get(a.Peer); h != nil && !h.State.Live() {
			continue
		}
		if slices.ContainsFunc(out, func(c Candidate) bool { return c.Peer == a.Peer }) {
			continue
		}
		out = append(out, Candidate{PeerAddrs: peerAddrs(a), Name: a.Name, Origin: FromAdoption, Why: "superior of " + r.DisplayName()})
		if len(out) == ProbeHelpers {
			break
		}
	}
	return out
}

// probeTick forgets the probes of superiors that are up or gone, ends
// rounds whose time is up, and starts the rounds due.
func (f *Failover) probeTick(now time.Time) {
	for _, peer := range keys.Sorted(f.probes) {
		r := f.set.Get(peer)
		if r == nil || r.Role != Superior || r.State == Up || f.searches[peer] != nil || r.Trial != "" {
			delete(f.probes, peer)
			if r != nil {
				r.heldUntil = 0
			}
			continue
		}
		if p := f.probes[peer]; !p.deadline.IsZero() && !now.Before(p.deadline) {
			f.endRound(now, r, p)
		}
	}
	for _, r := range f.set.Superiors() {
		if !f.probeable(r) {
			continue
		}
		l := f.p.Live.For(r)
		p := f.probes[r.Peer]
		if due := f.nextProbe(r, p, l); due.IsZero() || now.Before(due) {
			continue
		}
		if p == nil {
			p = &probe{}
			f.setProbe(r.Peer, p)
		}
		p.round++
		p.started = now
		p.answers, p.reached = 0, nil
		hs := f.helpers(r)
		if len(hs) == 0 {
			p.ended = now // nobody to ask: the heartbeat timeout decides
			continue
		}
		p.deadline = now.Add(l.probeRound())
		p.asked = p.asked[:0]
		for _, h := range hs {
			p.asked = append(p.asked, h.Peer)
		}
		p.got = make([]bool, len(hs))
		f.act(Act{Kind: ActProbe, Rel: r, Failed: r.Peer, Name: r.DisplayName(), Helpers: hs, Round: p.round, Deadline: p.deadline})
	}
}

// probeDeadline is the earliest time probeTick has something to do.
func (f *Failover) probeDeadline(set *Set, l Liveness) time.Time {
	var next time.Time
	at := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for peer, p := range f.probes {
		r := set.Get(peer)
		if r == nil || r.Role != Superior || r.State == Up || f.searches[peer] != nil || r.Trial != "" {
			continue // forgotten at the next tick; nothing to do for it
		}
		at(p.deadline)
	}
	for _, r := range set.Superiors() {
		if f.probeable(r) {
			at(f.nextProbe(r, f.probes[r.Peer], l.For(r)))
		}
	}
	return next
}

// ProbeAnswer is told what helper answered about target in round: reached
// or not; answered false means no answer will come (the helper could not
// be dialled, its channel closed, or it does not know the question). A
// round ends at its first reached or once every helper is done.
func (f *Failover) ProbeAnswer(now time.Time, set *Set, p *Policy, target, helper string, round int, reached, answered bool) []Act {
	f.begin(set, p)
	pr := f.probes[target]
	r := set.Get(target)
	if pr != nil && r != nil && pr.round == round && !pr.deadline.IsZero() {
		if i := slices.Index(pr.asked, helper); i >= 0 && !pr.got[i] {
			pr.got[i] = true
			if answered {
				pr.answers++
			}
			if reached {
				pr.reached = append(pr.reached, helper)
			}
			if reached || !slices.Contains(pr.got, false) {
				f.endRound(now, r, pr)
			}
		}
	}
	return f.end()
}

// endRound ends the running round of r's probes with its verdict: reached
// holds r suspect (if it is), not reached declares a lost superior failed.
func (f *Failover) endRound(now time.Time, r *Relation, p *probe) {
	l := f.p.Live.For(r)
	v := NoAnswer
	switch {
	case len(p.reached) > 0:
		v = Reached
	case p.answers > 0:
		v = Unreached
	}
	p.deadline, p.ended = time.Time{}, now
	a := Act{Kind: ActProbed, Rel: r, Failed: r.Peer, Name: r.DisplayName(), Verdict: v, Round: p.round,
		Tried: len(p.asked), Answered: p.answers, Helpers: nil, Silent: now.Sub(r.LastHeard())}
	if len(p.reached) > 0 {
		a.Reason = p.reached[0]
	}
	if v == Reached && r.State == Suspect {
		a.First = !r.HeldUntil().After(now) // a new hold: worth an event
		r.SetHeldUntil(r.LastHeard().Add(l.HoldMax()))
	}
	f.act(a)
	switch v {
	case Unreached:
		r.heldUntil = 0
		lost := !p.lostAt.IsZero() && !p.started.Before(p.lostAt.Add(l.ProbeAfterLoss()))
		if lost && !r.State.Live() && f.searches[r.Peer] == nil {
			asked := "the manager asked"
			if p.answers != 1 {
				asked = fmt.Sprintf("the %d managers asked", p.answers)
			}
			cause := fmt.Sprintf("channel lost %s ago (%s), and %s could not reach it either",
				text.FormatMeasured(now.Sub(p.lostAt)), firstLine(r.LastError), asked)
			delete(f.probes, r.Peer)
			f.start(now, r, Act{Kind: ActDeclared, Rel: r, From: r.State, Cause: cause, Silent: now.Sub(r.LastHeard())})
		}
	}
}

func peerAddrs(a Ancestor) peeraddr.PeerAddrs {
	return peeraddr.PeerAddrs{Peer: a.Peer, Addrs: slices.Clone(a.Addrs)}
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}

// setProbe files p as the probe of peer (the map is made at its first
// entry).
func (f *Failover) setProbe(peer string, p *probe) {
	if f.probes == nil {
		f.probes = make(map[string]*probe)
	}
	f.probes[peer] = p
}
