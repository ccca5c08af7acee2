package relations

import (
	"errors"
	"fmt"
	"github.com/gridmgr/gridmgr/peeraddr"
	"slices"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/internal/text"
)

// Errors of the cycle check.
var (
	// ErrCycle: the relation would make a manager its own ancestor.
	ErrCycle = errors.New("relations: would close a cycle")
	// ErrSelf: a manager cannot be related to itself.
	ErrSelf = errors.New("relations: a manager cannot be related to itself")
)

// MaxAncestors bounds the ancestor chain we keep and send: deeper entries
// are dropped. Hierarchies are shallow; the bound only stops a runaway.
const MaxAncestors = 256

// Liveness sets how heartbeats turn into states.
type Liveness struct {
	Interval time.Duration // heartbeat interval
	Misses   int           // missed heartbeats before Down
}

// For is the liveness to judge r by: the longer of our interval and the
// one the peer says it heartbeats at.
func (l Liveness) For(r *Relation) Liveness {
	if r.PeerInterval > l.Interval {
		l.Interval = r.PeerInterval
	}
	return l
}

// SuspectAt is when a relation that is Up becomes Suspect if nothing is
// heard from it meanwhile (Check; NextCheck's deadline for it).
func (l Liveness) SuspectAt(r *Relation) time.Time {
	lr := l.For(r)
	return r.LastHeard().Add(lr.Interval + lr.grace() + 1)
}

// grace is how late a heartbeat may be before it counts as missed.
func (l Liveness) grace() time.Duration { return l.Interval / 2 }

// Missed is how many heartbeats a silence of d has missed.
func (l Liveness) Missed(d time.Duration) int {
	if d <= l.Interval+l.grace() {
		return 0
	}
	return int((d - l.grace()) / l.Interval)
}

// Change is one state change of a relation, with its cause.
type Change struct {
	Peer  string
	Name  string
	Role  Role
	From  State
	To    State
	Cause string
}

// Set is a manager's relations, keyed by peer id. A peer is either a
// superior or an inferior, never both. Iteration order is sorted by peer id
// so that simulations are deterministic.
type Set struct {
	self string
	name string // our own name, for messages
	// all is every relation sorted by role (superiors first), then peer;
	// the first nsup are the superiors. A change makes a new slice, so
	// that one handed out stays as it was (see All). A slice, not a map:
	// most managers have two or three relations, which a map held in
	// about 300 bytes more.
	all  []*Relation
	nsup int
}

// NewSet returns an empty set for the manager whose peer id is self and
// whose name (used in messages) is name.
func NewSet(self, name string) *Set {
	return &Set{self: self, name: name}
}

// find returns the index in all where a relation with role and peer is
// or would go, and whether it is there.
func (s *Set) find(role Role, peer string) (int, bool) {
	lo, hi := 0, s.nsup
	if role != Superior {
		lo, hi = s.nsup, len(s.all)
	}
	i, ok := slices.BinarySearchFunc(s.all[lo:hi], peer, func(r *Relation, p string) int { return strings.Compare(r.Peer, p) })
	return lo + i, ok
}

// insert puts r in its place, in a new slice.
func (s *Set) insert(r *Relation) {
	i, _ := s.find(r.Role, r.Peer)
	s.all = slices.Concat(s.all[:i], []*Relation{r}, s.all[i:])
	if r.Role == Superior {
		s.nsup++
	}
}

// remove takes out the relation at i, in a new slice.
func (s *Set) remove(i int) {
	if s.all[i].Role == Superior {
		s.nsup--
	}
	s.all = slices.Concat(s.all[:i], s.all[i+1:])
}

// setRole moves r to role, and to its place in all.
func (s *Set) setRole(r *Relation, role Role) {
	if i, ok := s.find(r.Role, r.Peer); ok {
		s.remove(i)
	}
	r.Role = role
	s.insert(r)
}

// Self is our own peer id.
func (s *Set) Self() string { return s.self }

// Get returns the relation with peer, or nil.
func (s *Set) Get(peer string) *Relation {
	if len(s.all) <= 16 { // most sets: a scan is cheaper than two searches
		for _, r := range s.all {
			if r.Peer == peer {
				return r
			}
		}
		return nil
	}
	if i, ok := s.find(Superior, peer); ok {
		return s.all[i]
	}
	if i, ok := s.find(Inferior, peer); ok {
		return s.all[i]
	}
	return nil
}

// ByName returns the relation whose peer told us name; if several did, the
// one with the smallest peer id. Nil if none.
func (s *Set) ByName(name string) *Relation {
	var best *Relation
	for _, r := range s.all {
		if r.Name == name && (best == nil || r.Peer < best.Peer) {
			best = r
		}
	}
	return best
}

// Len is the number of relations.
func (s *Set) Len() int { return len(s.all) }

// All returns every relation, sorted by role (superiors first) then peer.
// The slice is shared: callers must not modify it. It stays as it was when
// the set changes (the set makes a new one), though its relations change.
func (s *Set) All() []*Relation { return s.all }

// Superiors returns the superiors sorted by peer id (shared, as All).
func (s *Set) Superiors() []*Relation { return s.all[:s.nsup:s.nsup] }

// Inferiors returns the inferiors sorted by peer id (shared, as All).
func (s *Set) Inferiors() []*Relation { return s.all[s.nsup:] }

// AddSuperior adds (or updates the addresses of) a superior we should dial.
// It fails if the peer is ourselves or already our inferior.
func (s *Set) AddSuperior(now time.Time, pa peeraddr.PeerAddrs, configured bool, b Backoff) (*Relation, error) {
	if pa.Peer == s.self {
		return nil, fmt.Errorf("%w: superior %s is %s itself", ErrSelf, pa.Peer, s.name)
	}
	if r := s.Get(pa.Peer); r != nil {
		if r.Role != Superior {
			return nil, fmt.Errorf("%w: %s is already an inferior of %s", ErrCycle, r.DisplayName(), s.name)
		}
		r.Addrs = MergeAddrs(r.Addrs, pa.Addrs)
		r.Configured = r.Configured || configured
		return r, nil
	}
	r := &Relation{
		Peer:       pa.Peer,
		Addrs:      slices.Clone(pa.Addrs),
		Role:       Superior,
		Configured: configured,
		Origin:     FromAdmin,
		State:      Connecting,
		Backoff:    b,
	}
	r.since = r.stamp(now)
	r.nextDial = r.since
	if configured {
		r.Origin = FromConfig
	}
	s.insert(r)
	return r, nil
}

// AddInferior adds or refreshes an inferior whose Hello we accepted. The
// caller must have run CheckInferior first. A configured superior that is
// down becomes the inferior (the first of two managers that name each other
// to connect wins); it keeps Configured so RestoreSuperior can turn it back
// when the inferior relation ends.
func (s *Set) AddInferior(now time.Time, peer, name string, addrs []string) *Relation {
	r := s.Get(peer)
	if r == nil {
		r = &Relation{Peer: peer, Role: Inferior, State: Connecting}
		r.since = r.stamp(now)
		s.insert(r)
	}
	if r.Role == Superior {
		s.setRole(r, Inferior)
		r.State, r.since = Connecting, r.stamp(now)
		r.Dialling, r.nextDial, r.Attempts = false, 0, 0
		r.Backoff.Reset()
		r.Ancestors = nil
	}
	r.Name = name
	r.Addrs = slices.Clone(addrs)
	return r
}

// RestoreSuperior turns an inferior that the properties file names as a
// superior back into a superior to dial, once the inferior relation ended.
// It reports whether it did.
func (s *Set) RestoreSuperior(now time.Time, r *Relation) bool {
	if r.Role != Inferior || !r.Configured {
		return false
	}
	s.setRole(r, Superior)
	r.State, r.since = Down, r.stamp(now)
	r.resetChannel()
	return true
}

// Remove forgets a relation. The node calls it in one place,
// Core.removeRelation, which also tells what waits on the relation (a test
// there keeps it so); Failover asks for removals with ActRemove.
func (s *Set) Remove(peer string) {
	if r := s.Get(peer); r != nil {
		i, _ := s.find(r.Role, peer)
		s.remove(i)
	}
}

// SetState moves a relation to a new state and reports the change, or
// returns ok=false when it was already in that state.
func (s *Set) SetState(now time.Time, r *Relation, to State, cause string) (Change, bool) {
	if r.State == to {
		return Change{}, false
	}
	c := Change{Peer: r.Peer, Name: r.DisplayName(), Role: r.Role, From: r.State, To: to, Cause: cause}
	if to == Up && r.State != Suspect {
		// A fresh channel: start heartbeat bookkeeping from scratch.
		r.resetChannel()
		r.lastHeard = r.stamp(now)
	}
	if to == Down || to == Connecting {
		r.resetChannel()
	}
	r.State = to
	r.since = r.stamp(now)
	return c, true
}

// Ancestors is our ancestor set: every live superior at depth 1 and its
// reported ancestors one deeper, each peer once at its smallest depth,
// sorted by depth then peer, at most MaxAncestors entries.
func (s *Set) Ancestors() []Ancestor {
	return s.AppendAncestors(nil)
}

// AppendAncestors is Ancestors written over dst (from dst[:0]), never
// nil. It runs on every heartbeat from a superior: with room in dst (a
// buffer on the caller's stack) it allocates nothing.
func (s *Set) AppendAncestors(dst []Ancestor) []Ancestor {
	// A slice searched in full, not a map: a chain is a few entries.
	out := dst[:0]
	add := func(a Ancestor) {
		if a.Peer == "" || a.Peer == s.self {
			return
		}
		for i := range out {
			if out[i].Peer == a.Peer {
				if a.Depth < out[i].Depth {
					out[i] = a
				}
				return
			}
		}
		out = append(out, a)
	}
	for _, r := range s.Superiors() {
		if !r.State.Live() {
			continue
		}
		add(Ancestor{Peer: r.Peer, Name: r.Name, Addrs: r.Addrs, Depth: 1})
		for _, a := range r.Ancestors {
			a.Depth++
			add(a)
		}
	}
	if out == nil {
		out = []Ancestor{}
	}
	slices.SortFunc(out, func(a, b Ancestor) int {
		if a.Depth != b.Depth {
			return a.Depth - b.Depth
		}
		return strings.Compare(a.Peer, b.Peer)
	})
	if len(out) > MaxAncestors {
		out = out[:MaxAncestors]
	}
	return out
}

// IsAncestor reports whether peer is among our ancestors.
func (s *Set) IsAncestor(peer string) bool {
	for _, a := range s.Ancestors() {
		if a.Peer == peer {
			return true
		}
	}
	return false
}

// CheckInferior decides whether peer may become our inferior. It refuses
// ourselves, any of our ancestors, and any peer we hold or are dialling as
// a superior (that would be a cycle of two the moment both are up). A
// superior that is down may become an inferior (see AddInferior).
func (s *Set) CheckInferior(peer string) error {
	if peer == s.self {
		return fmt.Errorf("%w: the hello came from %s's own peer id", ErrSelf, s.name)
	}
	if r := s.Get(peer); r != nil && r.Role == Superior && r.State != Down {
		return fmt.Errorf("%w: %s is a superior of %s (%s)", ErrCycle, r.DisplayName(), s.name, r.State)
	}
	for _, a := range s.Ancestors() {
		if a.Peer == peer {
			name := a.Name
			if name == "" {
				name = text.ShortPeer(a.Peer)
			}
			return fmt.Errorf("%w: %s is an ancestor of %s (depth %d)", ErrCycle, name, s.name, a.Depth)
		}
	}
	return nil
}

// CheckSuperiorChain decides whether a superior that reports ancestors may
// stay our superior: it may not, if we are among them.
func (s *Set) CheckSuperiorChain(superior string, ancestors []Ancestor) error {
	if superior == s.self {
		return fmt.Errorf("%w: the superior is %s itself", ErrSelf, s.name)
	}
	for _, a := range ancestors {
		if a.Peer == s.self {
			return fmt.Errorf("%w: %s is already above %s (depth %d in its chain)",
				ErrCycle, s.name, text.ShortPeer(superior), a.Depth)
		}
	}
	return nil
}

// Check runs the failure detector at now: live relations that have been
// silent move to Suspect or Down. late is how long after the earliest
// thing that was due the caller runs this check (its own loop's lateness,
// see Core.NextDeadline): when it exceeds half an interval, the loop was
// starved (CPU, a stalled process), and that time is not held against the
// peers: their silence clocks are moved forward by it, so that a starved
// manager does not declare others failed for its own lateness (every
// relation heard from, live or not, so that Failed is not fooled either).
// It returns the changes in peer order.
func (s *Set) Check(now time.Time, l Liveness, late time.Duration) []Change {
	if late > l.grace() {
		for _, r := range s.all {
			if !r.LastHeard().IsZero() {
				r.SetLastHeard(r.LastHeard().Add(late))
			}
		}
	}
	var out []Change
	for _, r := range s.All() {
		if !r.State.Live() {
			continue
		}
		missed := l.For(r).Missed(now.Sub(r.LastHeard()))
		switch {
		case missed >= l.Misses && !now.Before(r.HeldUntil()):
			if c, ok := s.SetState(now, r, Down, fmt.Sprintf("%d heartbeats missed", missed)); ok {
				r.LastError = c.Cause
				out = append(out, c)
			}
		case missed >= 1:
			if c, ok := s.SetState(now, r, Suspect, fmt.Sprintf("%d heartbeat(s) missed", missed)); ok {
				out = append(out, c)
			}
		default:
			if c, ok := s.SetState(now, r, Up, "heard again"); ok {
				r.heldUntil = 0
				out = append(out, c)
			}
		}
	}
	return out
}

// NextCheck is the earliest time at or after which Check would change a
// relation's state, zero if no relation is live. A suspect relation heard
// again (any message counts; heartbeats turn it up at once) is due now.
func (s *Set) NextCheck(now time.Time, l Liveness) time.Time {
	var next time.Time
	for _, r := range s.All() { // the cached slice: cheaper than the map
		if !r.State.Live() {
			continue
		}
		t := l.SuspectAt(r) // Up: suspect from then
		if r.State == Suspect {
			lr := l.For(r)
			t = r.LastHeard().Add(lr.FailAfter()) // down from then
			if r.HeldUntil().After(t) {
				t = r.HeldUntil() // held by an indirect probe
			}
			if lr.Missed(now.Sub(r.LastHeard())) == 0 {
				t = now // heard again
			}
		}
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}

// MergeAddrs returns have followed by the addresses of add it lacks.
func MergeAddrs(have, add []string) []string {
	out := slices.Clone(have)
	for _, a := range add {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}
