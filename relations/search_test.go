package relations

import (
	"fmt"
	"github.com/gridmgr/gridmgr/peeraddr"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// searchFixture is a manager "me" whose configured superior p (ancestors
// g, then gg) was up from t0 and went down, with a fallback fb. It plays
// the caller of a Failover: it carries out ActTry and ActRemove on the
// set and writes every act down.
type searchFixture struct {
	t     *testing.T
	set   *Set
	fo    *Failover
	p     Policy
	now   time.Time
	trace []string
}

var t0 = time.Unix(1000, 0)

func newSearchFixture(t *testing.T) *searchFixture {
	x := &searchFixture{
		t:   t,
		set: NewSet("me", "gm-me"),
		fo:  NewFailover(rand.New(rand.NewPCG(1, 2))),
		p: Policy{
			Live:             Liveness{Interval: time.Second, Misses: 3},
			Fallbacks:        []peeraddr.PeerAddrs{{Peer: "fb"}},
			Superiors:        []peeraddr.PeerAddrs{{Peer: "p"}},
			HandshakeTimeout: 2 * time.Second,
			Retry:            Backoff{Initial: time.Second, Max: 8 * time.Second},
			Settle:           5 * time.Second,
		},
		now: t0,
	}
	p, err := x.set.AddSuperior(t0, peeraddr.PeerAddrs{Peer: "p"}, true, x.p.Retry)
	if err != nil {
		t.Fatal(err)
	}
	p.Name = "P"
	x.set.SetState(t0, p, Up, "welcomed")
	p.Ancestors = []Ancestor{{Peer: "gg", Name: "GG", Depth: 2}, {Peer: "g", Name: "G", Depth: 1}}
	x.set.SetState(t0.Add(time.Second), p, Down, "channel lost")
	return x
}

// call runs one call of the Failover at x.now, checks that it left the
// set alone, and carries out its acts.
func (x *searchFixture) call(f func() []Act) {
	x.t.Helper()
	before := slices.Clone(x.set.All())
	acts := f()
	if !slices.Equal(before, x.set.All()) {
		x.t.Fatalf("the Failover changed the set itself")
	}
	for _, a := range acts {
		x.trace = append(x.trace, actString(a))
		switch a.Kind {
		case ActTry:
			if _, err := x.set.AddCandidate(x.now, a.Cand, a.Failed, a.Deadline, x.p.Retry); err != nil {
				x.t.Fatalf("ActTry %s: %v", a.Cand.Peer, err)
			}
		case ActRemove:
			if x.set.Get(a.Rel.Peer) != a.Rel {
				x.t.Fatalf("ActRemove %s: not in the set", a.Rel.Peer)
			}
			x.set.Remove(a.Rel.Peer)
		}
	}
}

func (x *searchFixture) at(d time.Duration) { x.now = t0.Add(d) }

func (x *searchFixture) tick(d time.Duration) {
	x.at(d)
	x.call(func() []Act { return x.fo.Tick(x.now, x.set, &x.p) })
}

// welcome: peer welcomed us.
func (x *searchFixture) welcome(d time.Duration, peer string) {
	x.at(d)
	r := x.set.Get(peer)
	x.set.SetState(x.now, r, Up, "welcomed")
	x.call(func() []Act { return x.fo.SuperiorUp(x.now, x.set, &x.p, r) })
}

// refuse: the candidate peer refused us.
func (x *searchFixture) refuse(d time.Duration, peer string) {
	x.at(d)
	r := x.set.Get(peer)
	r.LastError = "refused"
	x.set.SetState(x.now, r, Down, r.LastError)
	x.call(func() []Act { return x.fo.TrialFailed(x.now, x.set, &x.p, r) })
}

func actString(a Act) string {
	peer := func(r *Relation) string { return r.Peer }
	switch a.Kind {
	case ActDeclared:
		if a.Cause != "" {
			return fmt.Sprintf("declared %s: %s", a.Failed, a.Cause)
		}
		return fmt.Sprintf("declared %s: silent %s restarted=%v", a.Failed, a.Silent, a.Restarted)
	case ActNotCandidate:
		return "not a candidate " + a.Cand.Peer
	case ActTry:
		return fmt.Sprintf("try %s (%s) for %s round %d until %s", a.Cand.Peer, a.Cand.Why, a.Failed, a.Round, a.Deadline.Sub(t0))
	case ActRoot:
		return fmt.Sprintf("root for %s after %d first=%v", a.Failed, a.Tried, a.First)
	case ActNoReplacement:
		return "no replacement for " + a.Failed
	case ActTimedOut:
		return "timed out " + peer(a.Rel)
	case ActCandidateFailed:
		return "candidate failed " + peer(a.Rel)
	case ActRemove:
		return fmt.Sprintf("remove %s %q %s", peer(a.Rel), a.Reason, a.Why)
	case ActReplaced:
		return fmt.Sprintf("replaced %s by %s (%s) took %s", a.Failed, peer(a.Rel), a.Why, a.Took)
	case ActCovered:
		return fmt.Sprintf("covered %s by %s", a.Failed, peer(a.Rel))
	case ActStandby:
		return "standby " + peer(a.Rel)
	case ActBack:
		return "back " + peer(a.Rel)
	case ActReturn:
		return fmt.Sprintf("return from %s to %s", peer(a.Rel), peer(a.Orig))
	case ActForgotten:
		return "forgotten " + peer(a.Rel)
	case ActChanged:
		return "changed"
	case ActPushChain:
		return "push chain"
	}
	return fmt.Sprintf("act(%d)", a.Kind)
}

func TestFailoverSearch(t *testing.T) {
	tests := []struct {
		name  string
		setup func(x *searchFixture)
		steps func(x *searchFixture)
		want  []string
		check func(t *testing.T, x *searchFixture)
	}{
		{
			name:  "not failed before the failure timeout",
			steps: func(x *searchFixture) { x.tick(3 * time.Second) },
		},
		{
			name: "the grandparent takes us: the failed superior is removed",
			steps: func(x *searchFixture) {
				x.tick(4 * time.Second)
				x.welcome(5*time.Second, "g")
			},
			want: []string{
				"declared p: silent 4s restarted=false",
				"try g (grandparent) for p round 1 until 6s",
				"replaced p by g (grandparent) took 5s",
				`remove p "replaced by G" down`,
				"changed",
				"push chain",
			},
			check: func(t *testing.T, x *searchFixture) {
				if x.set.Get("p") != nil || x.set.Get("g").StandsFor != "p" || x.set.Get("g").Trial != "" || x.fo.Searching("p") {
					t.Fatalf("after: p=%v g=%+v searching=%v", x.set.Get("p"), x.set.Get("g"), x.fo.Searching("p"))
				}
			},
		},
		{
			name:  "prefer_configured: the failed superior is kept on standby, then returned to",
			setup: func(x *searchFixture) { x.p.PreferConfigured = true },
			steps: func(x *searchFixture) {
				x.tick(4 * time.Second)
				x.welcome(5*time.Second, "g")
				x.welcome(6*time.Second, "p")
				x.tick(10 * time.Second) // up for 4s: not settled
				x.tick(11 * time.Second)
			},
			want: []string{
				"declared p: silent 4s restarted=false",
				"try g (grandparent) for p round 1 until 6s",
				"replaced p by g (grandparent) took 5s",
				"standby p",
				"changed",
				"push chain",
				"changed",
				"return from g to p",
				`remove g "" down`,
				"changed",
				"push chain",
			},
		},
		{
			name: "a candidate that refuses, one that times out, candidates exhausted: root, then a new round",
			steps: func(x *searchFixture) {
				x.tick(4 * time.Second)
				x.refuse(4500*time.Millisecond, "g")
				x.tick(5 * time.Second) // gg on trial until 6.5s
				x.tick(6500 * time.Millisecond)
				x.tick(6501 * time.Millisecond)
				x.tick(6502 * time.Millisecond)
				x.tick(9 * time.Second) // fb times out; the next round waits for the backoff
				x.tick(20 * time.Second)
			},
			want: []string{
				"declared p: silent 4s restarted=false",
				"try g (grandparent) for p round 1 until 6s",
				"candidate failed g",
				`remove g "" down`,
				"try gg (ancestor at depth 3) for p round 1 until 6.5s",
				"timed out gg",
				"candidate failed gg",
				`remove gg "" down`,
				"try fb (fallback) for p round 1 until 8.501s", // gg timed out at 6.501s: a trial ends after its deadline
				"timed out fb",
				"candidate failed fb",
				`remove fb "" down`,
				"root for p after 3 first=true",
				"try g (grandparent) for p round 2 until 22s",
			},
			check: func(t *testing.T, x *searchFixture) {
				if got := x.fo.Names(); !slices.Equal(got, []string{"P"}) {
					t.Fatalf("Names = %v", got)
				}
				if x.set.Get("gg") != nil || x.set.Get("fb") != nil || x.set.Get("p") == nil {
					t.Fatalf("relations left: %v", x.set.All())
				}
			},
		},
		{
			name: "the old superior comes back during the search: the candidate on trial is removed",
			steps: func(x *searchFixture) {
				x.tick(4 * time.Second)
				x.welcome(5*time.Second, "p")
			},
			want: []string{
				"declared p: silent 4s restarted=false",
				"try g (grandparent) for p round 1 until 6s",
				"back p",
				`remove g "failed superior is back" down`,
				"changed",
			},
			check: func(t *testing.T, x *searchFixture) {
				if x.fo.Searching("p") || x.set.Get("g") != nil || len(x.set.All()) != 1 {
					t.Fatalf("after: searching=%v set=%v", x.fo.Searching("p"), x.set.All())
				}
			},
		},
		{
			name: "a live superior already covers the failed one",
			setup: func(x *searchFixture) {
				g, _ := x.set.AddSuperior(t0, peeraddr.PeerAddrs{Peer: "g"}, false, x.p.Retry)
				x.set.SetState(t0, g, Up, "welcomed")
			},
			steps: func(x *searchFixture) { x.tick(4 * time.Second) },
			want: []string{
				"declared p: silent 4s restarted=false",
				"covered p by g",
				`remove p "replaced by g" down`,
				"changed",
				"push chain",
			},
		},
		{
			name: "an inferior is not a candidate, and is forgotten a minute after it went down",
			setup: func(x *searchFixture) {
				i := x.set.AddInferior(t0, "gg", "GG", nil)
				x.set.SetState(t0, i, Down, "lost")
			},
			steps: func(x *searchFixture) {
				x.tick(4 * time.Second)
				x.tick(DownInferiorRetention)
			},
			want: []string{
				"declared p: silent 4s restarted=false",
				"not a candidate gg",
				"try g (grandparent) for p round 1 until 6s",
				"timed out g",
				"candidate failed g",
				`remove g "" down`,
				"try fb (fallback) for p round 1 until 1m2s",
				"forgotten gg",
				`remove gg "" down`,
			},
		},
		{
			name: "removed by its superior: failed at once, removed, never a candidate again",
			setup: func(x *searchFixture) {
				x.set.Get("p").Ancestors = nil
			},
			steps: func(x *searchFixture) {
				x.at(2 * time.Second)
				x.call(func() []Act { return x.fo.RemovedBy(x.now, x.set, &x.p, x.set.Get("p"), "bye") })
				x.refuse(3*time.Second, "fb")
				x.tick(30 * time.Second)
			},
			want: []string{
				"declared p: removed: bye",
				"try fb (fallback) for p round 1 until 4s",
				`remove p "bye" down`,
				"changed",
				"candidate failed fb",
				`remove fb "" down`,
				"root for p after 1 first=true",
				"try fb (fallback) for p round 2 until 32s",
			},
		},
		{
			name: "a goodbye fails the superior at once; a second one does nothing",
			steps: func(x *searchFixture) {
				x.at(2 * time.Second)
				p := x.set.Get("p")
				x.call(func() []Act { return x.fo.SuperiorGone(x.now, x.set, &x.p, p, "goodbye: stopping") })
				x.call(func() []Act { return x.fo.SuperiorGone(x.now, x.set, &x.p, p, "goodbye: stopping") })
			},
			want: []string{
				"declared p: goodbye: stopping",
				"try g (grandparent) for p round 1 until 4s",
			},
		},
		{
			name: "a superior removed on purpose ends its search",
			steps: func(x *searchFixture) {
				x.tick(4 * time.Second)
				x.set.Remove("p")
				x.fo.Ended("p")
				x.tick(5 * time.Second)
			},
			want: []string{
				"declared p: silent 4s restarted=false",
				"try g (grandparent) for p round 1 until 6s",
			},
			check: func(t *testing.T, x *searchFixture) {
				if x.fo.Searching("p") || len(x.fo.Names()) != 0 {
					t.Fatalf("search left: %v", x.fo.Names())
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := newSearchFixture(t)
			if tt.setup != nil {
				tt.setup(x)
			}
			tt.steps(x)
			if !slices.Equal(x.trace, tt.want) {
				t.Fatalf("acts:\n  %s\nwant:\n  %s", strings.Join(x.trace, "\n  "), strings.Join(tt.want, "\n  "))
			}
			if tt.check != nil {
				tt.check(t, x)
			}
		})
	}
}

// TestFailoverDeadline: the next thing to do is the failure timeout, then
// the trial's end, then the next round.
func TestFailoverDeadline(t *testing.T) {
	x := newSearchFixture(t)
	next := func() time.Duration { return x.fo.Deadline(x.set, &x.p).Sub(t0) }
	if got := next(); got != 3500*time.Millisecond {
		t.Fatalf("before the failure: %s, want 3.5s", got)
	}
	x.p.Fallbacks = nil
	x.set.Get("p").Ancestors = nil
	x.tick(4 * time.Second)
	// No candidate at all: a root, with the next round in the backoff.
	if len(x.trace) != 2 || !strings.HasPrefix(x.trace[1], "root for p after 0 first=true") {
		t.Fatalf("acts: %v", x.trace)
	}
	if got := next(); got < 4800*time.Millisecond || got > 5200*time.Millisecond {
		t.Fatalf("next round at %s, want 5s ± 20%%", got)
	}
}
