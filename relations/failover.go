package relations

import (
	"fmt"
	"github.com/gridmgr/gridmgr/peeraddr"
	"slices"
	"time"

	"github.com/gridmgr/gridmgr/internal/text"
)

// Origin is why a superior is ours.
type Origin uint8

const (
	// FromConfig: the properties file names it.
	FromConfig Origin = iota
	// FromAdoption: an ancestor of a failed superior took us in its place.
	FromAdoption
	// FromFallback: a fallback_superiors entry took us after a failure.
	FromFallback
	// FromAdmin: added at runtime by an administrator.
	FromAdmin
)

func (o Origin) String() string {
	switch o {
	case FromConfig:
		return "configured"
	case FromAdoption:
		return "adopted"
	case FromFallback:
		return "fallback"
	case FromAdmin:
		return "admin"
	}
	return fmt.Sprintf("origin(%d)", uint8(o))
}

// ParseOrigin is the inverse of Origin.String.
func ParseOrigin(s string) (Origin, bool) {
	for o := FromConfig; o <= FromAdmin; o++ {
		if o.String() == s {
			return o, true
		}
	}
	return 0, false
}

// FailAfter is how long a relation may be silent before it is declared
// failed: the grace of one interval plus Misses intervals, the moment
// Missed reaches Misses.
func (l Liveness) FailAfter() time.Duration {
	return l.grace() + time.Duration(l.Misses)*l.Interval
}

// Failed returns the superiors that are declared failed at now: not live,
// heard from at least once (or restored from an earlier run, see
// RestoredAt), and silent for FailAfter or longer. A superior from the
// properties file never heard from since we started is retried, never
// declared failed, so that managers may start in any order. Candidates in trial are
// not returned: a failed trial moves on to the next candidate instead.
func (s *Set) Failed(now time.Time, l Liveness) []*Relation {
	var out []*Relation
	for _, r := range s.Superiors() {
		heard := r.LastHeard()
		if heard.IsZero() {
			heard = r.RestoredAt()
		}
		if r.State.Live() || heard.IsZero() || r.Trial != "" || r.Standby {
			continue
		}
		if now.Sub(heard) >= l.For(r).FailAfter() {
			out = append(out, r)
		}
	}
	return out
}

// NextFailure is the earliest time at which Failed would return a superior
// that skip does not exclude (skip: those whose failure is already being
// handled), zero if none.
func (s *Set) NextFailure(l Liveness, skip func(peer string) bool) time.Time {
	var next time.Time
	for _, r := range s.Superiors() {
		heard := r.LastHeard()
		if heard.IsZero() {
			heard = r.RestoredAt()
		}
		if r.State.Live() || heard.IsZero() || r.Trial != "" || r.Standby || skip(r.Peer) {
			continue
		}
		if t := heard.Add(l.For(r).FailAfter()); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}

// Candidate is a manager that may take us in place of a failed superior.
type Candidate struct {
	peeraddr.PeerAddrs
	Name   string
	Origin Origin // FromAdoption (an ancestor), FromFallback or FromConfig
	Why    string // "grandparent", "ancestor at depth 3", "fallback", "configured"
}

// Label is the candidate's name, or a short form of its peer id.
func (c Candidate) Label() string {
	if c.Name != "" {
		return c.Name
	}
	return text.ShortPeer(c.Peer)
}

// Skipped is a candidate left out, and why.
type Skipped struct {
	Candidate
	Reason string
}

// Candidates lists, in the order to try them, the managers that may take
// us in place of failed: its ancestors as it last reported them, nearest
// first (the grandparent, then the next live ancestor), then fallbacks
// from the properties file, then (when extra is set, for later rounds) the
// configured superiors. Ourselves, the failed superior and duplicates are
// dropped; our inferiors are descendants and are skipped with a reason
// (attaching under one would close a cycle). Deeper descendants are
// refused by the candidate itself, which knows its ancestors.
func (s *Set) Candidates(failed *Relation, fallbacks, extra []peeraddr.PeerAddrs) (out []Candidate, skipped []Skipped) {
	seen := map[string]bool{s.self: true, failed.Peer: true}
	add := func(c Candidate) {
		if c.Peer == "" || seen[c.Peer] {
			return
		}
		seen[c.Peer] = true
		if r := s.Get(c.Peer); r != nil && r.Role == Inferior {
			if c.Name == "" {
				c.Name = r.Name
			}
			skipped = append(skipped, Skipped{c, fmt.Sprintf("%s is an inferior of %s: attaching under it would close a cycle", c.Label(), s.name)})
			return
		}
		out = append(out, c)
	}
	anc := slices.Clone(failed.Ancestors)
	slices.SortStableFunc(anc, func(a, b Ancestor) int { return a.Depth - b.Depth })
	for _, a := range anc {
		why := "grandparent"
		if a.Depth > 1 {
			why = fmt.Sprintf("ancestor at depth %d", a.Depth+1)
		}
		add(Candidate{PeerAddrs: peeraddr.PeerAddrs{Peer: a.Peer, Addrs: slices.Clone(a.Addrs)}, Name: a.Name, Origin: FromAdoption, Why: why})
	}
	for _, pa := range fallbacks {
		add(Candidate{PeerAddrs: peeraddr.PeerAddrs{Peer: pa.Peer, Addrs: slices.Clone(pa.Addrs)}, Origin: FromFallback, Why: "fallback"})
	}
	for _, pa := range extra {
		add(Candidate{PeerAddrs: peeraddr.PeerAddrs{Peer: pa.Peer, Addrs: slices.Clone(pa.Addrs)}, Origin: FromConfig, Why: "configured"})
	}
	return out, skipped
}

// AddCandidate adds a superior to try in place of the failed superior
// replaces. It fails if the peer is already related to us.
func (s *Set) AddCandidate(now time.Time, c Candidate, replaces string, deadline time.Time, b Backoff) (*Relation, error) {
	if c.Peer == s.self {
		return nil, fmt.Errorf("%w: candidate %s is %s itself", ErrSelf, c.Label(), s.name)
	}
	if r := s.Get(c.Peer); r != nil {
		return nil, fmt.Errorf("relations: %s is already a %s of %s (%s)", r.DisplayName(), r.Role, s.name, r.State)
	}
	r, err := s.AddSuperior(now, c.PeerAddrs, c.Origin == FromConfig, b)
	if err != nil {
		return nil, err
	}
	r.Name = c.Name
	r.Origin = c.Origin
	r.Trial = replaces
	r.StandsFor = replaces
	r.trialDeadline = r.stamp(deadline)
	return r, nil
}

// LiveSuperiors counts the superiors in a live state.
func (s *Set) LiveSuperiors() int {
	n := 0
	for _, r := range s.Superiors() {
		if r.State.Live() {
			n++
		}
	}
	return n
}
