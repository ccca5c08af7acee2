package reservation

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	coordT0       = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	coordDeadline = coordT0.Add(10 * time.Second)
	errCoordLost  = errors.New("request lost")
)

func coordRefusal(msg string) error { return &Error{Code: CodeRefused, Msg: msg} }

// coordStep is one event told to the coordinator, and the actions expected
// right after it ("" for none; else Action.String()s joined by ", ").
type coordStep struct {
	do   func(c *Coordinator, now time.Time)
	at   time.Duration // since coordT0
	want string
	post bool // runs after Done (an answer to be ignored)
}

func coordHoldAns(i int, id string) func(*Coordinator, time.Time) {
	return func(c *Coordinator, now time.Time) { c.OnHold(now, i, id, nil) }
}

func coordRefuse(i int, err error) func(*Coordinator, time.Time) {
	return func(c *Coordinator, now time.Time) { c.OnHold(now, i, "", err) }
}

func coordCommitAns(i int, err error) func(*Coordinator, time.Time) {
	return func(c *Coordinator, now time.Time) { c.OnCommit(now, i, err) }
}

func coordReleaseAns(i int, err error) func(*Coordinator, time.Time) {
	return func(c *Coordinator, now time.Time) { c.OnRelease(now, i, err) }
}

func coordTick(c *Coordinator, now time.Time) { c.Tick(now) }

func coordActs(c *Coordinator) string {
	var s []string
	for _, a := range c.Actions() {
		s = append(s, a.String())
	}
	return strings.Join(s, ", ")
}

func TestCoordScripts(t *testing.T) {
	tests := []struct {
		name     string
		n, count int
		first    string // actions right after NewCoordinator
		steps    []coordStep
		want     []Granted // on success
		errHas   []string  // on failure: substrings of Result's error
		timeout  bool
	}{
		{
			name: "all grant, commit, success", n: 3, count: 3,
			first: "hold 0, hold 1, hold 2",
			steps: []coordStep{
				{do: coordHoldAns(1, "b")},
				{do: coordHoldAns(0, "a")},
				{do: coordHoldAns(2, "c"), want: "commit 0 a, commit 1 b, commit 2 c"},
				{do: coordCommitAns(2, nil)},
				{do: coordCommitAns(0, nil)},
				{do: coordCommitAns(1, nil)},
			},
			want: []Granted{{0, "a"}, {1, "b"}, {2, "c"}},
		},
		{
			name: "count = n = 1", n: 1, count: 1,
			first: "hold 0",
			steps: []coordStep{
				{do: coordHoldAns(0, "a"), want: "commit 0 a"},
				{do: coordCommitAns(0, nil)},
			},
			want: []Granted{{0, "a"}},
		},
		{
			name: "third refuses, no spare: all released", n: 3, count: 3,
			first: "hold 0, hold 1, hold 2",
			steps: []coordStep{
				{do: coordHoldAns(0, "a")},
				{do: coordHoldAns(1, "b")},
				{do: coordRefuse(2, coordRefusal("not enough free (cpus: asked 8, free 2 of 16)")), want: "release 0 a, release 1 b"},
				{do: coordReleaseAns(1, nil)},
				{do: coordReleaseAns(0, nil)},
			},
			errHas: []string{"2 of 3 held", "gm2 refused: not enough free (cpus: asked 8, free 2 of 16)", "no candidates left", "2 released"},
		},
		{
			name: "refusal with a spare: the spare is asked", n: 4, count: 3,
			first: "hold 0, hold 1, hold 2",
			steps: []coordStep{
				{do: coordHoldAns(0, "a")},
				{do: coordRefuse(1, coordRefusal("drained")), want: "hold 3"},
				{do: coordHoldAns(3, "d")},
				{do: coordHoldAns(2, "c"), want: "commit 0 a, commit 2 c, commit 3 d"},
				{do: coordCommitAns(0, nil)},
				{do: coordCommitAns(3, nil)},
				{do: coordCommitAns(2, nil)},
			},
			want: []Granted{{0, "a"}, {2, "c"}, {3, "d"}},
		},
		{
			name: "two refusals use both spares in order", n: 5, count: 2,
			first: "hold 0, hold 1",
			steps: []coordStep{
				{do: coordRefuse(1, coordRefusal("full")), want: "hold 2"},
				{do: coordRefuse(0, errCoordLost), want: "hold 3"},
				{do: coordHoldAns(3, "d")},
				{do: coordHoldAns(2, "c"), want: "commit 2 c, commit 3 d"},
				{do: coordCommitAns(2, nil)},
				{do: coordCommitAns(3, nil)},
			},
			want: []Granted{{2, "c"}, {3, "d"}},
		},
		{
			name: "late hold answer after give-up is released", n: 2, count: 2,
			first: "hold 0, hold 1",
			steps: []coordStep{
				{do: coordRefuse(0, coordRefusal("access list"))},
				{do: coordHoldAns(1, "b"), want: "release 1 b"},
				{do: coordReleaseAns(1, nil)},
			},
			errHas: []string{"0 of 2 held", "gm0 refused: access list", "no candidates left", "1 released"},
		},
		{
			name: "commit failure: compensation releases all", n: 3, count: 3,
			first: "hold 0, hold 1, hold 2",
			steps: []coordStep{
				{do: coordHoldAns(0, "a")},
				{do: coordHoldAns(1, "b")},
				{do: coordHoldAns(2, "c"), want: "commit 0 a, commit 1 b, commit 2 c"},
				{do: coordCommitAns(0, nil)},
				{do: coordCommitAns(1, &Error{Code: CodeGone, Msg: "b expired"}), want: "release 0 a, release 1 b, release 2 c"},
				{do: coordReleaseAns(1, &Error{Code: CodeGone, Msg: "b expired"})}, // gone: nothing live
				{do: coordReleaseAns(0, nil)},
				{do: coordReleaseAns(2, nil)},
				{do: coordCommitAns(2, nil)}, // in flight when it failed: awaited, then nothing
			},
			errHas: []string{"1 of 3 committed", "commit of b at gm1 failed: b expired", "3 released"},
		},
		{
			name: "deadline in phase 1: granted released, late grant released", n: 3, count: 2,
			first: "hold 0, hold 1",
			steps: []coordStep{
				{do: coordHoldAns(0, "a"), at: time.Second},
				{do: coordTick, at: 9 * time.Second},
				{do: coordTick, at: 10 * time.Second, want: "release 0 a"},
				{do: coordReleaseAns(0, nil), at: 11 * time.Second},
				{do: coordHoldAns(1, "b"), at: 12 * time.Second, want: "release 1 b"},
				{do: coordReleaseAns(1, nil), at: 12 * time.Second},
			},
			errHas:  []string{"passed with 1 of 2 held, 0 committed", "no answer to hold from gm1", "2 released"},
			timeout: true,
		},
		{
			name: "deadline in phase 2: a commit in flight is released too", n: 2, count: 2,
			first: "hold 0, hold 1",
			steps: []coordStep{
				{do: coordHoldAns(0, "a")},
				{do: coordHoldAns(1, "b"), want: "commit 0 a, commit 1 b"},
				{do: coordCommitAns(0, nil)},
				{do: coordTick, at: 11 * time.Second, want: "release 0 a, release 1 b"},
				{do: coordCommitAns(1, nil), at: 12 * time.Second},
				{do: coordReleaseAns(0, nil)},
				{do: coordReleaseAns(1, nil)},
			},
			errHas:  []string{"passed with 2 of 2 held, 1 committed", "no answer to commit from gm1", "2 released"},
			timeout: true,
		},
		{
			name: "last grant after the deadline: no commit, released", n: 2, count: 2,
			first: "hold 0, hold 1",
			steps: []coordStep{
				{do: coordHoldAns(0, "a")},
				{do: coordHoldAns(1, "b"), at: 10 * time.Second, want: "release 0 a, release 1 b"},
				{do: coordReleaseAns(0, nil)},
				{do: coordReleaseAns(1, nil)},
			},
			errHas:  []string{"passed with 2 of 2 held, 0 committed; 2 released"},
			timeout: true,
		},
		{
			name: "last commit answer after the deadline still succeeds", n: 1, count: 1,
			first: "hold 0",
			steps: []coordStep{
				{do: coordHoldAns(0, "a"), want: "commit 0 a"},
				{do: coordCommitAns(0, nil), at: 20 * time.Second},
				{do: coordTick, at: 21 * time.Second, post: true},
			},
			want: []Granted{{0, "a"}},
		},
		{
			name: "failed releases are reported, not retried", n: 2, count: 2,
			first: "hold 0, hold 1",
			steps: []coordStep{
				{do: coordHoldAns(0, "a")},
				{do: coordHoldAns(1, "b"), want: "commit 0 a, commit 1 b"},
				{do: coordCommitAns(0, nil)},
				{do: coordCommitAns(1, errCoordLost), want: "release 0 a, release 1 b"},
				{do: coordReleaseAns(0, errCoordLost)},
				{do: coordReleaseAns(1, errCoordLost)},
				{do: coordReleaseAns(1, nil), post: true},
				{do: coordTick, at: time.Minute, post: true},
			},
			errHas: []string{
				"commit of b at gm1 failed: request lost",
				"release of a at gm0 failed: request lost (not retried: it stays until its lease ends unless renewed)",
				"release of b at gm1 failed: request lost (not retried: it lapses at its hold timeout)",
			},
		},
		{
			name: "unexpected and duplicate answers are ignored", n: 3, count: 2,
			first: "hold 0, hold 1",
			steps: []coordStep{
				{do: coordHoldAns(2, "x")},  // never asked
				{do: coordHoldAns(-1, "x")}, // out of range
				{do: coordHoldAns(7, "x")},
				{do: coordCommitAns(0, nil)}, // no commit sent
				{do: coordReleaseAns(0, nil)},
				{do: coordHoldAns(0, "a")},
				{do: coordHoldAns(0, "a")},                 // duplicate
				{do: coordRefuse(0, coordRefusal("late"))}, // contradicting duplicate
				{do: coordHoldAns(0, "a2")},                // another id for an answered hold
				{do: coordHoldAns(1, "b"), want: "commit 0 a, commit 1 b"},
				{do: coordHoldAns(1, "b")},
				{do: coordCommitAns(0, nil)},
				{do: coordCommitAns(0, errCoordLost)},
				{do: coordCommitAns(1, nil)},
				{do: coordCommitAns(1, nil), post: true},
				{do: coordReleaseAns(1, nil), post: true},
				{do: coordHoldAns(2, "c"), post: true},
				{do: coordTick, at: time.Minute, post: true},
			},
			want: []Granted{{0, "a"}, {1, "b"}},
		},
		{
			name: "grant after its loss was reported is released", n: 3, count: 2,
			first: "hold 0, hold 1",
			steps: []coordStep{
				{do: coordRefuse(0, errCoordLost), want: "hold 2"},
				{do: coordHoldAns(0, "a"), want: "release 0 a"},
				{do: coordHoldAns(0, "a")}, // once only
				{do: coordHoldAns(1, "b")},
				{do: coordHoldAns(2, "c"), want: "commit 1 b, commit 2 c"},
				{do: coordCommitAns(1, nil)},
				{do: coordCommitAns(2, nil)},
				{do: coordReleaseAns(0, nil)},
			},
			want: []Granted{{1, "b"}, {2, "c"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewCoordinator(tc.n, tc.count, coordDeadline)
			if err != nil {
				t.Fatal(err)
			}
			names := make([]string, tc.n)
			for i := range names {
				names[i] = fmt.Sprintf("gm%d", i)
			}
			c.SetNames(names)
			if got := coordActs(c); got != tc.first {
				t.Fatalf("first actions %q, want %q", got, tc.first)
			}
			for k, s := range tc.steps {
				if c.Done() != s.post {
					t.Fatalf("step %d: Done is %v", k, c.Done())
				}
				if _, err := c.Result(); !s.post && !errors.Is(err, ErrCoordPending) {
					t.Fatalf("step %d: Result before Done = %v, want ErrCoordPending", k, err)
				}
				s.do(c, coordT0.Add(s.at))
				if got := coordActs(c); got != s.want {
					t.Fatalf("step %d: actions %q, want %q", k, got, s.want)
				}
			}
			if !c.Done() {
				t.Fatal("not Done after the script")
			}
			if got := coordActs(c); got != "" {
				t.Fatalf("actions after Done: %q", got)
			}
			got, err := c.Result()
			if tc.want != nil {
				if err != nil || !slices.Equal(got, tc.want) {
					t.Fatalf("Result = %v, %v; want %v", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Result = %v, nil; want an error", got)
			}
			t.Log(err)
			var ce *CoordError
			if !errors.As(err, &ce) || ce.Timeout != tc.timeout {
				t.Fatalf("error %#v: want a *CoordError with Timeout %v", err, tc.timeout)
			}
			for _, h := range tc.errHas {
				if !strings.Contains(err.Error(), h) {
					t.Errorf("error %q does not contain %q", err, h)
				}
			}
		})
	}
}

func TestCoordRefusalCodeUnwraps(t *testing.T) {
	c, _ := NewCoordinator(1, 1, coordDeadline)
	c.Actions()
	c.OnHold(coordT0, 0, "", coordRefusal("not enough free (mem)"))
	_, err := c.Result()
	if CodeOf(err) != CodeRefused {
		t.Fatalf("CodeOf(%v) = %v, want refused", err, CodeOf(err))
	}
}

func TestCoordNewErrors(t *testing.T) {
	for _, tc := range []struct {
		n, count int
		ok       bool
	}{
		{3, 4, false}, {3, 0, false}, {0, 0, false}, {0, 1, false}, {-1, 1, false}, {2, -1, false},
		{1, 1, true}, {5, 5, true}, {5, 1, true},
	} {
		c, err := NewCoordinator(tc.n, tc.count, coordDeadline)
		if (err == nil) != tc.ok || (c != nil) != tc.ok {
			t.Errorf("NewCoordinator(%d, %d) = %v, %v; want ok %v", tc.n, tc.count, c, err, tc.ok)
		}
	}
	if _, err := NewCoordinator(2, 1, time.Time{}); err == nil {
		t.Error("no error without a deadline")
	}
}

// TestCoordAbortTakesBackUnsentActions: when the driver has not collected
// the commits yet and the deadline passes, they are never returned.
func TestCoordAbortTakesBackUnsentActions(t *testing.T) {
	c, _ := NewCoordinator(3, 2, coordDeadline)
	c.Actions()
	c.OnHold(coordT0, 0, "", coordRefusal("no")) // queues hold 2
	c.OnHold(coordT0, 1, "b", nil)
	c.Tick(coordDeadline) // hold 2 never sent
	if got := coordActs(c); got != "release 1 b" {
		t.Fatalf("actions %q", got)
	}
	c.OnHold(coordT0, 2, "c", nil) // never asked: ignored
	c.OnRelease(coordT0, 1, nil)
	if !c.Done() || coordActs(c) != "" {
		t.Fatal("want Done and nothing more")
	}

	c, _ = NewCoordinator(2, 2, coordDeadline)
	c.Actions()
	c.OnHold(coordT0, 0, "a", nil)
	c.OnHold(coordT0, 1, "b", nil) // queues both commits
	c.Tick(coordDeadline)
	if got := coordActs(c); got != "release 0 a, release 1 b" {
		t.Fatalf("actions %q", got)
	}
	c.OnCommit(coordT0, 0, nil) // never sent: ignored
	c.OnRelease(coordT0, 0, nil)
	c.OnRelease(coordT0, 1, nil)
	if !c.Done() {
		t.Fatal("not Done")
	}
}

// coordSim is a simulated driver with managers that answer in random order.
type coordSim struct {
	t        *testing.T
	rng      *rand.Rand
	c        *Coordinator
	n, count int
	now      time.Time

	pRefuse, pLost float64

	state    map[string]State // every reservation made at the managers
	known    map[string]bool  // ids the coordinator was told of
	relFail  map[string]bool  // release answered with an error
	inflight []Action
	strays   []Granted // grants whose reply was reported lost, to deliver later
	replays  []func()  // answers already given, to repeat
	seen     map[Action]bool
	asked    map[int]bool
	granted  map[int]string // hold grants reported, by target
	commits  []Action
	seq      int
	lastHold int
	// expectAbort: an answer just made success impossible (a failed commit,
	// or a refusal with every candidate asked), so the next batch must
	// release every grant, unless the coordinator had already given up.
	expectAbort  bool
	commitFailed bool
}

func (s *coordSim) newID(i int) string {
	s.seq++
	id := FormatID(fmt.Sprintf("gm%d", i), uint64(s.seq), "aaaaaa")
	s.state[id] = Held
	return id
}

func (s *coordSim) collect() {
	t := s.t
	acts := s.c.Actions()
	var commits []Action
	for k, a := range acts {
		if k > 0 && acts[k-1].Target > a.Target {
			t.Fatalf("actions not ordered by target: %v", acts)
		}
		if s.seen[a] {
			t.Fatalf("action %v issued twice", a)
		}
		s.seen[a] = true
		switch a.Kind {
		case ActHold:
			if s.asked[a.Target] || a.Target <= s.lastHold {
				t.Fatalf("hold %d: asked before or out of order (last %d)", a.Target, s.lastHold)
			}
			s.asked[a.Target], s.lastHold = true, a.Target
		case ActCommit:
			commits = append(commits, a)
		case ActRelease:
			if !s.known[a.ID] {
				t.Fatalf("release of %s, never granted", a.ID)
			}
			for b := range s.seen {
				if b.Kind == ActRelease && b.ID == a.ID && b != a {
					t.Fatalf("two releases of %s", a.ID)
				}
			}
		}
	}
	if len(commits) > 0 {
		if s.commits != nil {
			t.Fatalf("commits issued in two batches: %v then %v", s.commits, commits)
		}
		if len(commits) != s.count || len(s.granted) != s.count {
			t.Fatalf("%d commits with %d holds granted, count %d", len(commits), len(s.granted), s.count)
		}
		for _, a := range commits {
			if s.granted[a.Target] != a.ID {
				t.Fatalf("commit %v: not a granted hold (%v)", a, s.granted)
			}
		}
		s.commits = commits
	}
	s.inflight = append(s.inflight, acts...)
	if s.expectAbort {
		s.expectAbort = false
		for i, id := range s.granted {
			if !s.seen[Action{ActRelease, i, id}] {
				t.Fatalf("grant %s at %d not released at once after a fatal answer (batch %v)", id, i, acts)
			}
		}
	}
}

// released reports whether a release of any grant was issued.
func (s *coordSim) released() bool {
	for i, id := range s.granted {
		if s.seen[Action{ActRelease, i, id}] {
			return true
		}
	}
	return false
}

func (s *coordSim) fatal() {
	s.expectAbort = !s.released()
}

func (s *coordSim) deliver(a Action) {
	now, c, r := s.now, s.c, s.rng.Float64()
	lostReq, lostReply := r < s.pLost/2, r >= s.pLost/2 && r < s.pLost
	switch a.Kind {
	case ActHold:
		switch {
		case lostReq:
			s.refused()
			s.answer(func() { c.OnHold(now, a.Target, "", errCoordLost) })
		case lostReply:
			s.refused()
			id := s.newID(a.Target)
			if s.rng.IntN(2) == 0 {
				s.strays = append(s.strays, Granted{a.Target, id})
			}
			s.answer(func() { c.OnHold(now, a.Target, "", errCoordLost) })
		case s.rng.Float64() < s.pRefuse:
			s.refused()
			s.answer(func() { c.OnHold(now, a.Target, "", coordRefusal("not enough free")) })
		default:
			id := s.newID(a.Target)
			s.known[id] = true
			if _, ok := s.granted[a.Target]; ok {
				s.t.Fatalf("hold %d answered twice", a.Target)
			}
			if s.commits == nil {
				s.granted[a.Target] = id
			}
			s.answer(func() { c.OnHold(now, a.Target, id, nil) })
		}
	case ActCommit:
		var err error
		switch {
		case lostReq:
			err = errCoordLost
		case s.rng.Float64() < s.pRefuse/4 && s.state[a.ID] == Held:
			s.state[a.ID], err = Expired, &Error{Code: CodeGone, Msg: "expired"}
		case s.state[a.ID] == Held || s.state[a.ID] == Committed:
			s.state[a.ID] = Committed
			if lostReply {
				err = errCoordLost
			}
		default:
			err = &Error{Code: CodeGone, Msg: "released"}
		}
		if err != nil {
			s.fatal()
			s.commitFailed = true
		}
		s.answer(func() { c.OnCommit(now, a.Target, err) })
	case ActRelease:
		var err error
		switch {
		case lostReq:
			err = errCoordLost
		case s.state[a.ID].Live():
			s.state[a.ID] = Released
			if lostReply {
				err = errCoordLost
			}
		default:
			err = &Error{Code: CodeGone, Msg: "not live"}
		}
		if err != nil && CodeOf(err) != CodeGone {
			s.relFail[a.ID] = true
		}
		s.answer(func() { c.OnRelease(now, a.Target, err) })
	}
}

// refused notes a hold refusal: fatal once every candidate was asked.
func (s *coordSim) refused() {
	if len(s.asked) == s.n && s.commits == nil {
		s.fatal()
	}
}

func (s *coordSim) answer(f func()) {
	f()
	s.replays = append(s.replays, f)
}

func (s *coordSim) step() {
	rng := s.rng
	s.now = s.now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
	switch r := rng.IntN(100); {
	case r < 70 && len(s.inflight) > 0:
		k := rng.IntN(len(s.inflight))
		a := s.inflight[k]
		s.inflight = slices.Delete(s.inflight, k, k+1)
		s.deliver(a)
	case r < 75 && len(s.strays) > 0:
		g := s.strays[0]
		s.strays = s.strays[1:]
		s.known[g.ID] = true
		s.c.OnHold(s.now, g.Target, g.ID, nil)
	case r < 80 && len(s.replays) > 0:
		s.replays[rng.IntN(len(s.replays))]()
	case r < 83:
		i := rng.IntN(s.n+2) - 1
		if !s.asked[i] {
			s.c.OnHold(s.now, i, "bogus", nil)
			s.c.OnCommit(s.now, i, nil)
			s.c.OnRelease(s.now, i, nil)
		}
	default:
		s.c.Tick(s.now)
	}
}

func TestCoordRandom(t *testing.T) {
	var outcomes [3]int // success, timeout, other failure
	for seed := range uint64(3000) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		n := 1 + rng.IntN(6)
		count := 1 + rng.IntN(n)
		deadline := coordT0.Add(time.Duration(1+rng.IntN(8)) * time.Second)
		c, err := NewCoordinator(n, count, deadline)
		if err != nil {
			t.Fatal(err)
		}
		s := &coordSim{
			t: t, rng: rng, c: c, n: n, count: count, now: coordT0,
			pRefuse: rng.Float64() * 0.4, pLost: rng.Float64() * 0.2,
			state: map[string]State{}, known: map[string]bool{}, relFail: map[string]bool{},
			seen: map[Action]bool{}, asked: map[int]bool{}, granted: map[int]string{}, lastHold: -1,
		}
		steps := 0
		for s.collect(); !c.Done(); s.collect() {
			if steps++; steps > 100000 {
				t.Fatalf("seed %d: not Done after %d steps", seed, steps)
			}
			s.step()
		}
		if len(s.inflight) > 0 {
			t.Fatalf("seed %d: Done with %d actions unanswered: %v", seed, len(s.inflight), s.inflight)
		}
		if got := c.Actions(); got != nil {
			t.Fatalf("seed %d: actions after Done: %v", seed, got)
		}
		res, err := c.Result()
		keep := map[string]bool{}
		if err == nil {
			outcomes[0]++
			if len(res) != count {
				t.Fatalf("seed %d: %d committed, want %d", seed, len(res), count)
			}
			for k, g := range res {
				if k > 0 && res[k-1].Target >= g.Target {
					t.Fatalf("seed %d: result not ordered by distinct targets: %v", seed, res)
				}
				if s.state[g.ID] != Committed || s.seen[Action{ActRelease, g.Target, g.ID}] {
					t.Fatalf("seed %d: %v is %v at its manager (released: %v)", seed, g, s.state[g.ID], s.seen[Action{ActRelease, g.Target, g.ID}])
				}
				keep[g.ID] = true
			}
		} else {
			var ce *CoordError
			if !errors.As(err, &ce) {
				t.Fatalf("seed %d: error %v is not a *CoordError", seed, err)
			}
			if ce.Timeout {
				outcomes[1]++
			} else {
				outcomes[2]++
				if !s.commitFailed && len(s.asked) != n {
					t.Fatalf("seed %d: gave up with %d of %d candidates asked: %v", seed, len(s.asked), n, err)
				}
			}
			for id := range s.relFail {
				if !strings.Contains(err.Error(), "release of "+id) {
					t.Fatalf("seed %d: failed release of %s not reported in %q", seed, id, err)
				}
			}
		}
		// Every id the coordinator learned of is kept or its release was
		// sent; whatever is live at a manager is kept, unknown to the
		// coordinator (a lost reply), or a release that failed.
		for id := range s.known {
			if keep[id] {
				continue
			}
			released := false
			for a := range s.seen {
				released = released || (a.Kind == ActRelease && a.ID == id)
			}
			if !released {
				t.Fatalf("seed %d: %s granted, neither kept nor released (err %v)", seed, id, err)
			}
		}
		for id, st := range s.state {
			if st.Live() && !keep[id] && s.known[id] && !s.relFail[id] {
				t.Fatalf("seed %d: %s left %v (err %v)", seed, id, st, err)
			}
		}
		seenCommit := map[string]bool{}
		for _, a := range s.commits {
			if seenCommit[a.ID] {
				t.Fatalf("seed %d: %s committed twice", seed, a.ID)
			}
			seenCommit[a.ID] = true
		}
	}
	t.Logf("outcomes: %d succeeded, %d timed out, %d failed otherwise", outcomes[0], outcomes[1], outcomes[2])
	for k, o := range outcomes {
		if o == 0 {
			t.Errorf("outcome %d never reached: the simulation misses a path", k)
		}
	}
}
