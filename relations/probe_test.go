package relations

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/peeraddr"
)

// probeFixture is a manager "me" under x (heard last at t0), whose own
// superiors are g1 and g2 (the helpers), with a virtual clock. It keeps
// the kinds of the acts of every call.
type probeFixture struct {
	t   *testing.T
	set *Set
	fo  *Failover
	p   Policy
	x   *Relation
	now time.Time
}

func newProbeFixture(t *testing.T, helpers ...string) *probeFixture {
	f := &probeFixture{
		t:   t,
		set: NewSet("me", "ME"),
		fo:  NewFailover(rand.New(rand.NewPCG(1, 2))),
		p: Policy{
			Live:             Liveness{Interval: time.Second, Misses: 3},
			HandshakeTimeout: 2 * time.Second,
			Retry:            Backoff{Initial: time.Second, Max: 8 * time.Second},
		},
		now: t0,
	}
	x, err := f.set.AddSuperior(t0, peeraddr.PeerAddrs{Peer: "x"}, true, f.p.Retry)
	if err != nil {
		t.Fatal(err)
	}
	x.Name = "X"
	f.set.SetState(t0, x, Up, "welcomed")
	x.SetLastHeard(t0)
	for _, h := range helpers {
		x.Ancestors = append(x.Ancestors, Ancestor{Peer: h, Name: h, Depth: 1})
	}
	x.Ancestors = append(x.Ancestors, Ancestor{Peer: "deep", Depth: 2}) // not a helper: no channel to x
	f.x = x
	return f
}

// at moves the clock to t0+d, runs the failure detector as the Core does,
// then the Failover's tick, and returns the kinds of its acts.
func (f *probeFixture) at(d time.Duration) []ActKind {
	f.now = t0.Add(d)
	f.set.Check(f.now, f.p.Live, 0)
	return kinds(f.fo.Tick(f.now, f.set, &f.p))
}

func kinds(acts []Act) []ActKind {
	var out []ActKind
	for _, a := range acts {
		out = append(out, a.Kind)
	}
	return out
}

// lose: x's channel is lost at t0+d (it crashed: connection reset).
func (f *probeFixture) lose(d time.Duration) {
	f.now = t0.Add(d)
	f.set.SetState(f.now, f.x, Down, "channel lost: connection reset by peer")
	f.fo.Lost(f.now, f.x)
}

func (f *probeFixture) answer(helper string, reached, answered bool) []ActKind {
	return kinds(f.fo.ProbeAnswer(f.now, f.set, &f.p, "x", helper, f.fo.probes["x"].round, reached, answered))
}

// The deadline the caller sleeps to is when the next probe is due.
func (f *probeFixture) deadline() time.Duration { return f.fo.Deadline(f.set, &f.p).Sub(t0) }

// A crash: the channel is reset; one interval later both helpers say they
// do not reach x either: declared failed then, not at the 3.5s timeout.
func TestProbeCrashDeclaredAfterOneInterval(t *testing.T) {
	f := newProbeFixture(t, "g1", "g2")
	f.lose(300 * time.Millisecond)
	if got := f.deadline(); got != 1300*time.Millisecond {
		t.Fatalf("deadline %v, want the probe one interval after the loss (1.3s)", got)
	}
	if k := f.at(1299 * time.Millisecond); len(k) != 0 {
		t.Fatalf("acts before the probe is due: %v", k)
	}
	k := f.at(1300 * time.Millisecond)
	if !slices.Equal(k, []ActKind{ActProbe}) {
		t.Fatalf("acts %v, want a probe", k)
	}
	if k := f.answer("g1", false, true); len(k) != 0 {
		t.Fatalf("acts after one of two answers: %v (a round waits for every helper)", k)
	}
	k = f.answer("g2", false, true)
	if !slices.Contains(k, ActDeclared) || k[0] != ActProbed {
		t.Fatalf("acts %v, want probed then declared", k)
	}
	if !f.fo.Searching("x") {
		t.Fatal("x is not being replaced")
	}
}

// A link flap between us and x only, with the channel lost: a helper
// reaches x, so the fast path does not fail it; the heartbeat timeout
// still can (the channel is gone, we must redial).
func TestProbeReachedKeepsLostSuperiorUntilTimeout(t *testing.T) {
	f := newProbeFixture(t, "g1", "g2")
	f.lose(100 * time.Millisecond)
	f.at(1100 * time.Millisecond)
	if k := f.answer("g2", true, true); !slices.Equal(k, []ActKind{ActProbed}) {
		t.Fatalf("acts %v, want the round ended at its first reached", k)
	}
	if k := f.at(3499 * time.Millisecond); slices.Contains(k, ActDeclared) {
		t.Fatal("declared before the heartbeat timeout although a helper reached x")
	}
}

// A silent superior (the link between us is cut, x is alive): suspect at
// 1.5s, probed, reached through g1: held suspect past the 3.5s timeout,
// down only at 10.5s of silence (HoldMax).
func TestProbeSilentReachedIsHeld(t *testing.T) {
	f := newProbeFixture(t, "g1")
	if k := f.at(1501 * time.Millisecond); !slices.Equal(k, []ActKind{ActProbe}) {
		t.Fatalf("acts %v at suspect, want a probe", k)
	}
	f.answer("g1", true, true)
	if !f.x.HeldUntil().Equal(t0.Add(10500 * time.Millisecond)) {
		t.Fatalf("held until %v, want t0+10.5s", f.x.HeldUntil().Sub(t0))
	}
	for d := 2 * time.Second; d < 10500*time.Millisecond; d += 100 * time.Millisecond {
		k := f.at(d)
		if f.x.State != Suspect || slices.Contains(k, ActDeclared) {
			t.Fatalf("at %v: %v, acts %v: a held superior went down", d, f.x.State, k)
		}
		if slices.Contains(k, ActProbe) {
			f.answer("g1", true, true)
		}
	}
	if k := f.at(10500 * time.Millisecond); f.x.State != Down || !slices.Contains(k, ActDeclared) {
		t.Fatalf("at 10.5s: %v, acts %v; want down and declared", f.x.State, k)
	}
}

// A stalled superior: silent, and the helper does not reach it either.
// Nothing is declared before the 3.5s timeout (a stall keeps connections:
// only the timeout judges it), and it is declared then.
func TestProbeSilentUnreachedWaitsForTimeout(t *testing.T) {
	f := newProbeFixture(t, "g1")
	f.at(1501 * time.Millisecond)
	if k := f.answer("g1", false, true); slices.Contains(k, ActDeclared) {
		t.Fatal("a silent superior declared before the timeout")
	}
	if k := f.at(3499 * time.Millisecond); slices.Contains(k, ActDeclared) {
		t.Fatal("declared before the timeout")
	}
	if k := f.at(3500 * time.Millisecond); !slices.Contains(k, ActDeclared) {
		t.Fatalf("acts %v at 3.5s, want declared", k)
	}
}

// Every helper is gone too (no answer: dials fail): no verdict; the
// heartbeat timeout decides, as without probes.
func TestProbeNoAnswerFallsBackToTimeout(t *testing.T) {
	f := newProbeFixture(t, "g1", "g2")
	f.lose(0)
	f.at(time.Second)
	f.answer("g1", false, false)
	if k := f.answer("g2", false, false); slices.Contains(k, ActDeclared) {
		t.Fatal("declared on no answer at all")
	}
	if k := f.at(3499 * time.Millisecond); slices.Contains(k, ActDeclared) {
		t.Fatal("declared before the timeout")
	}
	if k := f.at(3500 * time.Millisecond); !slices.Contains(k, ActDeclared) {
		t.Fatalf("acts %v at 3.5s, want declared", k)
	}
}

// A round whose helpers never answer ends at its deadline (one interval)
// with no verdict; late answers of that round are ignored.
func TestProbeRoundTimesOut(t *testing.T) {
	f := newProbeFixture(t, "g1")
	f.lose(0)
	f.at(time.Second)
	if got := f.deadline(); got != 2*time.Second {
		t.Fatalf("deadline %v, want the round's end at 2s", got)
	}
	if k := f.at(2 * time.Second); !slices.Equal(k, []ActKind{ActProbed}) {
		t.Fatalf("acts %v, want the round ended", k)
	}
	if k := kinds(f.fo.ProbeAnswer(f.now, f.set, &f.p, "x", "g1", 1, false, true)); len(k) != 0 {
		t.Fatalf("a late answer acted: %v", k)
	}
}

// A quick restart: x is welcomed again before the probe: nothing is
// probed or declared, and the probe state is forgotten.
func TestProbeQuickRestartForgotten(t *testing.T) {
	f := newProbeFixture(t, "g1")
	f.lose(0)
	f.now = t0.Add(600 * time.Millisecond)
	f.set.SetState(f.now, f.x, Up, "welcomed")
	f.x.SetLastHeard(f.now)
	f.fo.SuperiorUp(f.now, f.set, &f.p, f.x)
	for d := 600 * time.Millisecond; d < 5*time.Second; d += 100 * time.Millisecond {
		f.x.SetLastHeard(t0.Add(d))
		if k := f.at(d); len(k) != 0 {
			t.Fatalf("acts %v at %v after a quick restart", k, d)
		}
	}
	if len(f.fo.probes) != 0 {
		t.Fatal("probe state kept")
	}
}

// A root superior has no superior to ask: no probe, the timeout decides.
// Our own relations that are down are not asked; neither are we.
func TestProbeHelpers(t *testing.T) {
	f := newProbeFixture(t)
	f.lose(0)
	if k := f.at(time.Second); len(k) != 0 {
		t.Fatalf("acts %v with no helper", k)
	}
	if k := f.at(3500 * time.Millisecond); !slices.Contains(k, ActDeclared) {
		t.Fatalf("acts %v at 3.5s, want declared", k)
	}

	f = newProbeFixture(t, "me", "g1", "down", "g2", "g3", "g4")
	d, _ := f.set.AddSuperior(t0, peeraddr.PeerAddrs{Peer: "down"}, false, f.p.Retry)
	f.set.SetState(t0, d, Down, "dial failed")
	f.lose(0)
	f.now = t0.Add(time.Second)
	var asked []string
	for _, a := range f.fo.Tick(f.now, f.set, &f.p) {
		for _, h := range a.Helpers {
			asked = append(asked, h.Peer)
		}
	}
	if want := []string{"g1", "g2", "g3"}; !slices.Equal(asked, want) {
		t.Fatalf("asked %v, want %v (at most %d; not us, not a relation that is down, not deeper ancestors)", asked, want, ProbeHelpers)
	}
}
