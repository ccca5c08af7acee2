package jobs

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/wire"
)

// fakeGrid is a runtime for a Queue: managers with slots, reservations,
// instances whose programs exit as a script says, and faults injected by
// the test. It answers acts at the virtual time the test advances, and
// keeps what a real runtime keeps on disk (the saves), so a "crash" of
// the submit side can reload the queue from it.
type fakeGrid struct {
	t        *testing.T
	now      time.Time
	mgrs     map[string]*fakeMgr
	order    []string
	resSeq   int
	pending  []Act
	disk     map[string]*wire.JobRecord
	next     uint64
	accepted map[string]int // job → accepted tries
	exits    func(job string, try uint32) int32
	runFor   time.Duration
	earliest time.Duration // nothing free now: the first window begins this far ahead (0: none)
	log      []string
	changes  []Change
}

type fakeMgr struct {
	name      string
	slots     int
	used      int
	down      bool // does not answer
	refuse    string
	res       map[string]time.Time // reservation → lease end
	inst      map[string]*fakeInst
	policyOff bool
}

type fakeInst struct {
	job     string
	try     uint32
	started time.Time
	running bool
	stopped bool
}

func newFakeGrid(t *testing.T, mgrs ...string) *fakeGrid {
	g := &fakeGrid{t: t, now: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC), mgrs: map[string]*fakeMgr{},
		disk: map[string]*wire.JobRecord{}, accepted: map[string]int{}, runFor: 10 * time.Second}
	for _, m := range mgrs {
		g.mgrs[m] = &fakeMgr{name: m, slots: 2, res: map[string]time.Time{}, inst: map[string]*fakeInst{}}
		g.order = append(g.order, m)
	}
	g.exits = func(string, uint32) int32 { return 0 }
	return g
}

func testSpec(name string, index, count uint32) *wire.JobSpec {
	return &wire.JobSpec{Name: name, Index: index, Count: count, App: "job", BundleSha256: strings.Repeat("a", 64),
		Cpus: 1, Mem: 1 << 20, RuntimeMs: 60000, InDir: "in", OutDir: "out", Outputs: []string{"result"}}
}

func cluster(name string, n int, edit func(*wire.JobSpec)) []*wire.JobSpec {
	var out []*wire.JobSpec
	for i := range n {
		s := testSpec(name, uint32(i), uint32(n))
		if edit != nil {
			edit(s)
		}
		out = append(out, s)
	}
	return out
}

// take applies a Ready: saves to disk, acts queued.
func (g *fakeGrid) take(rd Ready) {
	for _, r := range rd.Saves {
		g.disk[r.Info.Id] = proto.Clone(r).(*wire.JobRecord)
	}
	if rd.Next != 0 {
		g.next = rd.Next
	}
	for _, a := range rd.Acts {
		if a.Kind == ActForget {
			delete(g.disk, a.Job)
			continue
		}
		g.pending = append(g.pending, a)
	}
	g.changes = append(g.changes, rd.Changes...)
}

// answer does every pending act and reports its result.
func (g *fakeGrid) answer(q *Queue) {
	acts := g.pending
	g.pending = nil
	for _, a := range acts {
		q.Done(g.now, g.do(a))
		g.take(q.Ready())
	}
}

func (g *fakeGrid) mgrOf(a *wire.JobAttempt) *fakeMgr { return g.mgrs[a.Name] }

func (g *fakeGrid) do(a Act) Result {
	res := Result{ID: a.ID}
	unreach := func(m *fakeMgr) bool {
		if m.down {
			res.Err = Fail(Unreachable, "%s: connection refused", m.name)
			return true
		}
		return false
	}
	switch a.Kind {
	case ActMatch:
		res.Window = a.Begin // the fake's calendars are free ahead
		for _, n := range g.order {
			m := g.mgrs[n]
			if !m.down && !m.policyOff && m.used < m.slots {
				res.Offers = append(res.Offers, &wire.Offer{Peer: "p-" + n, Name: n})
			}
		}
		if len(res.Offers) == 0 && g.earliest > 0 && a.Begin.IsZero() {
			res.Window = g.now.Add(g.earliest)
			for _, n := range g.order {
				res.Offers = append(res.Offers, &wire.Offer{Peer: "p-" + n, Name: n})
			}
		}
		if len(res.Offers) == 0 {
			all := true
			for _, m := range g.mgrs {
				all = all && m.policyOff
			}
			res.Why, res.PolicyOnly = "no manager has a free cpu", all
			if all {
				res.Why = "policy refuses"
			}
		}
	case ActReserve:
		for _, o := range a.Offers {
			m := g.mgrs[o.Name]
			if m.down || (m.used >= m.slots && a.Begin.IsZero()) {
				continue
			}
			if m.refuse != "" {
				res.Err = Fail(Forbidden, "%s", m.refuse)
				return res
			}
			g.resSeq++
			id := fmt.Sprintf("%s-%d", m.name, g.resSeq)
			m.used++
			start := g.now
			if !a.Begin.IsZero() {
				start = a.Begin
			}
			m.res[id] = start.Add(a.Lease)
			res.Attempt = &wire.JobAttempt{Peer: o.Peer, Name: m.name, Reservation: id, LeaseEndUnixMs: start.Add(a.Lease).UnixMilli()}
			if !a.Begin.IsZero() {
				res.Attempt.BeginUnixMs = a.Begin.UnixMilli()
			}
			return res
		}
		res.Err = Fail(Refused, "not enough free")
	case ActStage:
		m := g.mgrOf(a.Attempt)
		if unreach(m) {
			return res
		}
		if _, ok := m.res[a.Attempt.Reservation]; !ok {
			res.Err = Fail(Gone, "reservation %s is gone", a.Attempt.Reservation)
			return res
		}
		m.res[a.Attempt.Reservation] = g.now.Add(a.Lease) // renewed
		inst := a.Attempt.Reservation + ".job"
		res.Instance = inst
		if in := m.inst[inst]; in != nil {
			if in.job != a.Job {
				g.t.Fatalf("%s: staging over %s's live instance %s", a.Job, in.job, inst)
			}
			if in.running {
				res.Status.State = "running"
			} else if !in.started.IsZero() {
				res.Status.State = "exited"
			}
			return res
		}
		m.inst[inst] = &fakeInst{job: a.Job}
	case ActStart:
		m := g.mgrOf(a.Attempt)
		if unreach(m) {
			return res
		}
		in := m.inst[a.Attempt.Instance]
		if in == nil {
			res.Err = Fail(Gone, "no instance")
			return res
		}
		if !in.started.IsZero() {
			return res // started already
		}
		in.running, in.started, in.try = true, g.now, a.Attempt.Try
		g.log = append(g.log, fmt.Sprintf("start %s try %d at %s", a.Job, in.try, m.name))
	case ActPoll:
		m := g.mgrOf(a.Attempt)
		if unreach(m) {
			return res
		}
		in := m.inst[a.Attempt.Instance]
		if in == nil {
			res.Err = Fail(Gone, "no instance %s", a.Attempt.Instance)
			return res
		}
		if g.now.Sub(in.started) >= g.runFor {
			in.running = false
			code := g.exits(in.job, in.try)
			res.Status = Status{State: "exited", Exited: true, ExitCode: code, Exit: fmt.Sprintf("exit %d", code)}
		} else {
			res.Status = Status{State: "running"}
		}
	case ActFetch:
		m := g.mgrOf(a.Attempt)
		if unreach(m) {
			return res
		}
		res.Files = []*wire.JobFile{{Path: "stdout"}, {Path: "result"}}
	case ActAccept:
		g.accepted[a.Job]++
		res.Files = []*wire.JobFile{{Path: "stdout"}, {Path: "result"}}
	case ActClean:
		m := g.mgrOf(a.Attempt)
		if unreach(m) {
			return res
		}
		if in := m.inst[a.Attempt.Instance]; in != nil {
			in.stopped = true
			delete(m.inst, a.Attempt.Instance)
		}
		if _, ok := m.res[a.Attempt.Reservation]; a.Release && ok {
			delete(m.res, a.Attempt.Reservation)
			m.used--
		}
	}
	return res
}

// run advances the virtual clock by step until every job ended or limit
// passed, ticking the queue and answering its acts.
func (g *fakeGrid) run(q *Queue, step, limit time.Duration) {
	end := g.now.Add(limit)
	for g.now.Before(end) {
		g.expire()
		q.Tick(g.now)
		g.take(q.Ready())
		for len(g.pending) > 0 {
			g.answer(q)
		}
		if allEnded(q) && q.Quiet() {
			return
		}
		g.now = g.now.Add(step)
	}
}

// expire ends the reservations whose lease passed, as their managers do
// (removing their instances).
func (g *fakeGrid) expire() {
	for _, m := range g.mgrs {
		for id, end := range m.res {
			if g.now.After(end) {
				delete(m.res, id)
				m.used--
				delete(m.inst, id+".job")
			}
		}
	}
}

func allEnded(q *Queue) bool {
	for _, j := range q.jobs {
		if !ended(j.r.Info.State) && j.r.Info.State != wire.JobState_JOB_STATE_HELD {
			return false
		}
		if !j.r.Accepted && j.r.Info.State == wire.JobState_JOB_STATE_COMPLETED {
			return false
		}
	}
	return true
}

func submit(t *testing.T, g *fakeGrid, q *Queue, req string, specs []*wire.JobSpec) string {
	t.Helper()
	c, _, err := q.Submit(g.now, Submission{RequestID: req, User: "alice", Owner: "peer-alice", Jobs: specs})
	if err != nil {
		t.Fatal(err)
	}
	g.take(q.Ready())
	return c
}

func states(q *Queue) map[string]int {
	m := map[string]int{}
	for _, j := range q.jobs {
		m[StateName(j.r.Info.State)]++
	}
	return m
}

func TestArrayCompletesOnceEach(t *testing.T) {
	g := newFakeGrid(t, "gm1", "gm2", "gm3")
	q := New(Config{Self: "gm0"})
	c := submit(t, g, q, "r1", cluster("sum", 20, nil))
	if c != "gm0.1" {
		t.Fatalf("cluster %q", c)
	}
	g.run(q, time.Second, time.Hour)
	if s := states(q); s["completed"] != 20 {
		t.Fatalf("states %v", s)
	}
	for id, n := range g.accepted {
		if n != 1 {
			t.Errorf("%s accepted %d times", id, n)
		}
	}
	if len(g.accepted) != 20 {
		t.Errorf("%d accepted", len(g.accepted))
	}
	// claims were reused: far fewer reservations than jobs
	if g.resSeq >= 20 {
		t.Errorf("%d reservations for 20 jobs: claims not reused", g.resSeq)
	}
	// and every reservation was released in the end
	for _, m := range g.mgrs {
		if m.used != 0 || len(m.inst) != 0 {
			t.Errorf("%s: %d slots still used, %d instances left", m.name, m.used, len(m.inst))
		}
	}
}

func TestSubmitRetryIsOneCluster(t *testing.T) {
	g := newFakeGrid(t, "gm1")
	q := New(Config{Self: "gm0"})
	c1 := submit(t, g, q, "same", cluster("a", 3, nil))
	c2, dup, err := q.Submit(g.now, Submission{RequestID: "same", User: "alice", Owner: "peer-alice", Jobs: cluster("a", 3, nil)})
	if err != nil || !dup || c2 != c1 || len(q.jobs) != 3 {
		t.Fatalf("retry: %q dup=%v err=%v, %d jobs", c2, dup, err, len(q.jobs))
	}
	if _, _, err := q.Submit(g.now, Submission{RequestID: "same", User: "mallory", Owner: "peer-m", Jobs: cluster("a", 3, nil)}); err == nil {
		t.Fatal("another submitter's request id answered as a duplicate")
	}
	// after a restart the request id is still known
	q2 := New(Config{Self: "gm0"})
	q2.Load(g.now, g.next, records(g))
	c3, dup, err := q2.Submit(g.now, Submission{RequestID: "same", User: "alice", Owner: "peer-alice", Jobs: cluster("a", 3, nil)})
	if err != nil || !dup || c3 != c1 {
		t.Fatalf("retry after restart: %q dup=%v err=%v", c3, dup, err)
	}
	c4, _, _ := q2.Submit(g.now, Submission{RequestID: "other", User: "alice", Owner: "peer-alice", Jobs: cluster("a", 1, nil)})
	if c4 != "gm0.2" {
		t.Fatalf("next cluster after restart %q", c4)
	}
}

func records(g *fakeGrid) []*wire.JobRecord {
	var out []*wire.JobRecord
	for _, id := range slices.Sorted(mapsKeys(g.disk)) {
		out = append(out, proto.Clone(g.disk[id]).(*wire.JobRecord))
	}
	return out
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestRetriesThenFailOrHold(t *testing.T) {
	for _, hold := range []bool{false, true} {
		g := newFakeGrid(t, "gm1")
		g.exits = func(string, uint32) int32 { return 3 }
		q := New(Config{Self: "gm0"})
		submit(t, g, q, "r", cluster("bad", 1, func(s *wire.JobSpec) { s.MaxRetries = 2; s.HoldOnFailure = hold }))
		g.run(q, time.Second, time.Hour)
		j := q.jobs["gm0.1"]
		want := wire.JobState_JOB_STATE_FAILED
		if hold {
			want = wire.JobState_JOB_STATE_HELD
		}
		if j.r.Info.State != want || j.r.Info.Tries != 3 {
			t.Fatalf("hold=%v: %s after %d tries: %s", hold, StateName(j.r.Info.State), j.r.Info.Tries, j.r.Info.Reason)
		}
		if !strings.Contains(j.r.Info.Reason, "exit 3") {
			t.Errorf("reason %q does not say the exit", j.r.Info.Reason)
		}
	}
}

func TestSuccessCodes(t *testing.T) {
	g := newFakeGrid(t, "gm1")
	g.exits = func(string, uint32) int32 { return 2 }
	q := New(Config{Self: "gm0"})
	submit(t, g, q, "r", cluster("two", 1, func(s *wire.JobSpec) { s.SuccessExitCodes = []int32{0, 2} }))
	g.run(q, time.Second, time.Hour)
	if s := q.jobs["gm0.1"].r.Info.State; s != wire.JobState_JOB_STATE_COMPLETED {
		t.Fatalf("exit 2 with success codes [0 2]: %s", StateName(s))
	}
}

// A random fifth of the runs fail; with retries every index completes
// exactly once, its results accepted once.
func TestRandomFailuresEachOnce(t *testing.T) {
	g := newFakeGrid(t, "gm1", "gm2", "gm3", "gm4", "gm5")
	rng := rand.New(rand.NewPCG(7, 7))
	fails := map[string]bool{}
	g.exits = func(job string, try uint32) int32 {
		k := fmt.Sprint(job, try)
		if _, ok := fails[k]; !ok {
			fails[k] = rng.IntN(5) == 0
		}
		if fails[k] {
			return 1
		}
		return 0
	}
	q := New(Config{Self: "gm0"})
	submit(t, g, q, "r", cluster("rnd", 200, func(s *wire.JobSpec) { s.MaxRetries = 5 }))
	g.run(q, time.Second, 10*time.Hour)
	if s := states(q); s["completed"] != 200 {
		t.Fatalf("states %v", s)
	}
	for id, n := range g.accepted {
		if n != 1 {
			t.Errorf("%s accepted %d times", id, n)
		}
	}
}

// The execute manager goes silent mid-run: within lost_after the job
// waits and goes on; past it the job is matched elsewhere, the lost copy
// is stopped when its manager answers again, and only one result is
// accepted.
func TestLostExecutor(t *testing.T) {
	for _, back := range []time.Duration{30 * time.Second, 90 * time.Second, 10 * time.Minute} {
		g := newFakeGrid(t, "gm1", "gm2")
		g.runFor = 2 * time.Minute
		q := New(Config{Self: "gm0"})
		submit(t, g, q, "r", cluster("long", 1, func(s *wire.JobSpec) { s.LostAfterMs = 60000 }))
		g.run(q, time.Second, 30*time.Second)
		j := q.jobs["gm0.1"]
		if j.r.Info.State != wire.JobState_JOB_STATE_RUNNING {
			t.Fatalf("not running: %s", StateName(j.r.Info.State))
		}
		first := j.r.Attempt.Name
		g.mgrs[first].down = true
		g.run(q, time.Second, back)
		g.mgrs[first].down = false
		g.run(q, time.Second, time.Hour)
		if j.r.Info.State != wire.JobState_JOB_STATE_COMPLETED || g.accepted["gm0.1"] != 1 {
			t.Fatalf("back after %s: %s, accepted %d", back, StateName(j.r.Info.State), g.accepted["gm0.1"])
		}
		moved := j.r.Info.Moves > 0
		if moved != (back > time.Minute) {
			t.Fatalf("back after %s: moved=%v", back, moved)
		}
		if moved {
			if len(g.mgrs[first].inst) != 0 || g.mgrs[first].used != 0 {
				t.Errorf("the lost copy at %s was not stopped and released", first)
			}
			if !hasLog(j, "lost") || !hasLog(j, "discarded") {
				t.Errorf("log does not tell: %v", logTypes(j))
			}
		}
	}
}

func hasLog(j *job, typ string) bool {
	return slices.ContainsFunc(j.r.Info.Log, func(e *wire.JobLogEntry) bool { return e.Type == typ })
}

func logTypes(j *job) []string {
	var out []string
	for _, e := range j.r.Info.Log {
		out = append(out, e.Type+": "+e.Detail)
	}
	return out
}

// The submit side crashes at every step of a run and comes back from what
// it wrote: every job completes, once, and no run is started again
// because of the restart.
func TestSubmitCrashAtEveryStep(t *testing.T) {
	for crashAt := 1; crashAt < 40; crashAt++ {
		g := newFakeGrid(t, "gm1", "gm2")
		q := New(Config{Self: "gm0"})
		submit(t, g, q, "r", cluster("c", 4, nil))
		steps := 0
		for !(allEnded(q) && q.Quiet()) && steps < 2000 {
			q.Tick(g.now)
			g.take(q.Ready())
			for len(g.pending) > 0 {
				acts := g.pending
				g.pending = nil
				for _, a := range acts {
					r := g.do(a)
					steps++
					if steps == crashAt {
						// crash: what was not saved is gone; acts in flight
						// are lost (their effects at the managers stay)
						q = New(Config{Self: "gm0"})
						q.Load(g.now, g.next, records(g))
						g.pending = nil
						break
					}
					q.Done(g.now, r)
					g.take(q.Ready())
				}
			}
			g.now = g.now.Add(time.Second)
		}
		for i := range 4 {
			id := JobID("gm0.1", uint32(i), 4)
			if s := q.jobs[id].r.Info.State; s != wire.JobState_JOB_STATE_COMPLETED {
				t.Fatalf("crash at %d: %s is %s", crashAt, id, StateName(s))
			}
			if g.accepted[id] < 1 {
				t.Fatalf("crash at %d: %s results never accepted", crashAt, id)
			}
		}
		starts := map[string]int{}
		for _, l := range g.log {
			starts[strings.Fields(l)[1]]++
		}
		for id, n := range starts {
			if n != 1 {
				t.Errorf("crash at %d: %s started %d times: %v", crashAt, id, n, g.log)
			}
		}
	}
}

func TestHoldUnholdRemove(t *testing.T) {
	g := newFakeGrid(t, "gm1")
	g.runFor = time.Minute
	q := New(Config{Self: "gm0"})
	submit(t, g, q, "r", cluster("h", 2, nil))
	g.run(q, time.Second, 10*time.Second)
	if err := q.Hold(g.now, []string{"gm0.1[0]"}, "peer-bob", false, ""); err == nil {
		t.Fatal("another client held alice's job")
	}
	if err := q.Hold(g.now, []string{"gm0.1"}, "peer-alice", false, "wait"); err != nil {
		t.Fatal(err)
	}
	g.take(q.Ready())
	g.run(q, time.Second, 30*time.Second)
	if s := states(q); s["held"] != 2 {
		t.Fatalf("states %v", s)
	}
	if m := g.mgrs["gm1"]; m.used != 0 || len(m.inst) != 0 {
		t.Fatalf("held jobs still hold gm1: %d used, %d instances", m.used, len(m.inst))
	}
	if err := q.Unhold(g.now, []string{"gm0.1[1]"}, "peer-alice", false); err != nil {
		t.Fatal(err)
	}
	if err := q.Remove(g.now, []string{"gm0.1[0]"}, "admin", true); err != nil {
		t.Fatal(err)
	}
	g.take(q.Ready())
	g.run(q, time.Second, time.Hour)
	if s := states(q); s["completed"] != 1 || s["removed"] != 1 {
		t.Fatalf("states %v", s)
	}
	if _, err := q.Resolve([]string{"gm0.9"}); err == nil || !strings.Contains(err.Error(), "gm0.9") {
		t.Fatalf("unknown job: %v", err)
	}
}

func TestPolicyHolds(t *testing.T) {
	g := newFakeGrid(t, "gm1", "gm2")
	for _, m := range g.mgrs {
		m.policyOff = true
	}
	q := New(Config{Self: "gm0"})
	submit(t, g, q, "r", cluster("p", 1, nil))
	g.run(q, time.Second, time.Minute)
	j := q.jobs["gm0.1"]
	if j.r.Info.State != wire.JobState_JOB_STATE_HELD || !strings.Contains(j.r.Info.Reason, "policy") {
		t.Fatalf("%s: %s", StateName(j.r.Info.State), j.r.Info.Reason)
	}
	for _, m := range g.mgrs {
		m.policyOff = false
	}
	_ = q.Unhold(g.now, []string{"gm0.1"}, "peer-alice", false)
	g.run(q, time.Second, time.Hour)
	if j.r.Info.State != wire.JobState_JOB_STATE_COMPLETED {
		t.Fatalf("after unhold: %s", StateName(j.r.Info.State))
	}
	// a reservation refused by the owner's access list holds the job too
	g2 := newFakeGrid(t, "gm1")
	g2.mgrs["gm1"].refuse = "gm1 refuses user alice: not in its access list"
	q2 := New(Config{Self: "gm0"})
	submit(t, g2, q2, "r", cluster("p", 1, nil))
	g2.run(q2, time.Second, time.Minute)
	if j := q2.jobs["gm0.1"]; j.r.Info.State != wire.JobState_JOB_STATE_HELD || !strings.Contains(j.r.Info.Reason, "access list") {
		t.Fatalf("refused: %s: %s", StateName(j.r.Info.State), j.r.Info.Reason)
	}
}

func TestQueueLimits(t *testing.T) {
	g := newFakeGrid(t, "gm1")
	q := New(Config{Self: "gm0", MaxQueuedPerUser: 5, MaxQueued: 8})
	submit(t, g, q, "r1", cluster("a", 5, nil))
	_, _, err := q.Submit(g.now, Submission{RequestID: "r2", User: "alice", Owner: "peer-alice", Jobs: cluster("a", 1, nil)})
	if err == nil || !strings.Contains(err.Error(), "max_queued_per_user") {
		t.Fatalf("per-user limit: %v", err)
	}
	if _, _, err := q.Submit(g.now, Submission{RequestID: "r3", User: "bob", Owner: "peer-bob", Jobs: cluster("b", 4, nil)}); err == nil || !strings.Contains(err.Error(), "jobs.max_queued") {
		t.Fatalf("total limit: %v", err)
	}
	if len(q.jobs) != 5 {
		t.Fatalf("a refused submit queued jobs: %d", len(q.jobs))
	}
}

func TestDeadlineAndBegin(t *testing.T) {
	g := newFakeGrid(t, "gm1")
	g.mgrs["gm1"].slots = 0
	q := New(Config{Self: "gm0"})
	submit(t, g, q, "r", cluster("d", 1, func(s *wire.JobSpec) { s.DeadlineUnixMs = g.now.Add(time.Minute).UnixMilli() }))
	g.run(q, time.Second, 5*time.Minute)
	if j := q.jobs["gm0.1"]; j.r.Info.State != wire.JobState_JOB_STATE_FAILED || !strings.Contains(j.r.Info.Reason, "deadline") {
		t.Fatalf("%s: %s", StateName(j.r.Info.State), j.r.Info.Reason)
	}
	g.mgrs["gm1"].slots = 2
	begin := g.now.Add(10 * time.Minute)
	submit(t, g, q, "r2", cluster("b", 1, func(s *wire.JobSpec) { s.BeginUnixMs = begin.UnixMilli() }))
	g.run(q, time.Second, 5*time.Minute)
	j2 := q.jobs["gm0.2"]
	if s := j2.r.Info.State; s != wire.JobState_JOB_STATE_RESERVED || j2.r.Attempt.BeginUnixMs != begin.UnixMilli() {
		t.Fatalf("before its begin: %s (a window booked from its begin, not a run)", StateName(s))
	}
	g.run(q, time.Second, time.Hour)
	j := q.jobs["gm0.2"]
	if j.r.Info.State != wire.JobState_JOB_STATE_COMPLETED || j.r.Info.StartedUnixMs < begin.UnixMilli() {
		t.Fatalf("%s, started %v (begin %v)", StateName(j.r.Info.State), time.UnixMilli(j.r.Info.StartedUnixMs), begin)
	}
}

// A program that runs past its runtime is stopped when its lease ends: a
// failed try, not a lost host (it is not run again elsewhere for ever).
func TestPastRuntimeIsAFailedTry(t *testing.T) {
	g := newFakeGrid(t, "gm1", "gm2")
	g.runFor = time.Hour
	q := New(Config{Self: "gm0", LeaseSlack: time.Minute})
	submit(t, g, q, "r", cluster("slow", 1, func(s *wire.JobSpec) { s.RuntimeMs = 60000; s.MaxRetries = 1 }))
	g.run(q, time.Second, 2*time.Hour)
	j := q.jobs["gm0.1"]
	if j.r.Info.State != wire.JobState_JOB_STATE_FAILED || j.r.Info.Tries != 2 || j.r.Info.Moves != 0 ||
		!strings.Contains(j.r.Info.Reason, "ran past its runtime") {
		t.Fatalf("%s after %d tries, %d moves: %s", StateName(j.r.Info.State), j.r.Info.Tries, j.r.Info.Moves, j.r.Info.Reason)
	}
}

// Nothing is free now: a job that may run now is told when the earliest
// window begins and waits for what frees first; one whose begin is ahead
// books its window on the calendars and runs when it begins.
func TestEarliestWindow(t *testing.T) {
	g := newFakeGrid(t, "gm1")
	g.mgrs["gm1"].slots = 0
	g.earliest = 30 * time.Minute
	q := New(Config{Self: "gm0"})
	submit(t, g, q, "r", cluster("w", 1, nil))
	start := g.now
	g.run(q, time.Second, 10*time.Minute)
	j := q.jobs["gm0.1"]
	if j.r.Info.State != wire.JobState_JOB_STATE_IDLE || !strings.Contains(j.r.Info.Reason, "earliest window") {
		t.Fatalf("%s: %s", StateName(j.r.Info.State), j.r.Info.Reason)
	}
	g.mgrs["gm1"].slots = 1
	g.run(q, time.Second, time.Hour)
	if j.r.Info.State != wire.JobState_JOB_STATE_COMPLETED || j.r.Info.StartedUnixMs > start.Add(20*time.Minute).UnixMilli() {
		t.Fatalf("%s, started %v: %v", StateName(j.r.Info.State), time.UnixMilli(j.r.Info.StartedUnixMs), logTypes(j))
	}
}

// A spread cluster (glide-ins) never has two jobs placed at one manager at
// once, even when each manager has room for two: the fourth of four on
// three managers waits and says why.
func TestSpreadPlacesOnePerManager(t *testing.T) {
	g := newFakeGrid(t, "gm1", "gm2", "gm3")
	g.runFor = time.Hour
	q := New(Config{Self: "gm0"})
	submit(t, g, q, "r1", cluster("glide", 4, func(s *wire.JobSpec) { s.Spread = true; s.RuntimeMs = 2 * 3600 * 1000 }))
	g.run(q, time.Second, time.Minute)
	at := map[string][]string{}
	idle := 0
	for _, j := range q.jobs {
		switch j.r.Info.State {
		case wire.JobState_JOB_STATE_RUNNING:
			at[j.r.Attempt.Name] = append(at[j.r.Attempt.Name], j.r.Info.Id)
		case wire.JobState_JOB_STATE_IDLE:
			idle++
			if !strings.Contains(j.r.Info.Reason, "spread") {
				t.Errorf("%s idle for %q, want the spread named", j.r.Info.Id, j.r.Info.Reason)
			}
		default:
			t.Errorf("%s is %s", j.r.Info.Id, StateName(j.r.Info.State))
		}
	}
	if len(at) != 3 || idle != 1 {
		t.Fatalf("placed %v, %d idle: want one on each of 3 managers and one idle", at, idle)
	}
	for m, js := range at {
		if len(js) != 1 {
			t.Fatalf("%s runs %v", m, js)
		}
	}
	// Without spread the same cluster doubles up.
	g2 := newFakeGrid(t, "gm1", "gm2", "gm3")
	g2.runFor = time.Hour
	q2 := New(Config{Self: "gm0"})
	submit(t, g2, q2, "r1", cluster("plain", 4, func(s *wire.JobSpec) { s.RuntimeMs = 2 * 3600 * 1000 }))
	g2.run(q2, time.Second, time.Minute)
	if s := states(q2); s["running"] != 4 {
		t.Fatalf("without spread: %v", s)
	}
}

// A job lost at the only manager that can run it is not left waiting for
// good: after a minute it may be matched there again.
func TestLostAtTheOnlyManagerRunsThereAgain(t *testing.T) {
	g := newFakeGrid(t, "gm1")
	g.runFor = 30 * time.Second
	q := New(Config{Self: "gm0"})
	submit(t, g, q, "r", cluster("only", 1, func(s *wire.JobSpec) { s.LostAfterMs = 10000 }))
	g.run(q, time.Second, 5*time.Second)
	if s := q.jobs["gm0.1"].r.Info.State; s != wire.JobState_JOB_STATE_RUNNING {
		t.Fatalf("state %s", StateName(s))
	}
	g.mgrs["gm1"].down = true
	g.run(q, time.Second, 15*time.Second)
	in := q.jobs["gm0.1"].r.Info
	if in.Moves != 1 || in.State != wire.JobState_JOB_STATE_IDLE {
		t.Fatalf("after its manager went silent: %s, %d moves", StateName(in.State), in.Moves)
	}
	g.mgrs["gm1"].down = false
	g.run(q, time.Second, 10*time.Second)
	if r := q.jobs["gm0.1"].r.Info.Reason; !strings.Contains(r, "lost at") {
		t.Fatalf("within the minute: reason %q", r)
	}
	g.run(q, time.Second, 5*time.Minute)
	if in := q.jobs["gm0.1"].r.Info; in.State != wire.JobState_JOB_STATE_COMPLETED || in.Manager != "gm1" {
		t.Fatalf("%s at %s: %s", StateName(in.State), in.Manager, in.Reason)
	}
}

// TestSaturatedMatchesKeepTheOrder: while as many matches as MaxMatching
// are in flight and no claim is kept, a Tick starts nothing and only asks
// to look again (it skips sorting the idle jobs then); once matches end,
// the jobs are matched in the queue's order, higher priority first, as if
// every Tick had sorted them.
func TestSaturatedMatchesKeepTheOrder(t *testing.T) {
	g := newFakeGrid(t, "gm1")
	g.mgrs["gm1"].slots = 100
	g.runFor = 24 * time.Hour // nothing ends, so no claim is kept
	q := New(Config{Self: "gm0"})
	submit(t, g, q, "r1", cluster("low", 6, nil))
	submit(t, g, q, "r2", cluster("high", 6, func(s *wire.JobSpec) { s.Priority = 5 }))
	matches := func() []string {
		var out []string
		for _, a := range g.pending {
			if a.Kind == ActMatch {
				out = append(out, a.Job)
			}
		}
		return out
	}
	q.Tick(g.now)
	g.take(q.Ready())
	first := matches()
	if want := []string{"gm0.2[0]", "gm0.2[1]", "gm0.2[2]", "gm0.2[3]"}; !slices.Equal(first, want) {
		t.Fatalf("the first Tick matched %v, want %v (MaxMatching 4, priority first)", first, want)
	}
	// Matches in flight: later Ticks start nothing and ask to look again.
	for range 5 {
		g.now = g.now.Add(time.Second)
		q.Tick(g.now)
		rd := q.Ready()
		if len(rd.Acts) != 0 {
			t.Fatalf("a Tick with %d matches in flight acted: %v", q.matching, rd.Acts)
		}
		if due := q.NextDeadline(g.now); !due.Equal(g.now.Add(2 * time.Second)) {
			t.Fatalf("next deadline %v, want the match retry %v", due, g.now.Add(2*time.Second))
		}
	}
	// The matches end (each job is placed); the next are the rest of
	// high's, then low's, in order.
	var order []string
	for range 40 {
		g.answer(q)
		g.now = g.now.Add(time.Minute)
		q.Tick(g.now)
		g.take(q.Ready())
		order = append(order, matches()...)
	}
	seen := map[string]bool{}
	var firsts []string
	for _, id := range append(first, order...) {
		if !seen[id] {
			seen[id] = true
			firsts = append(firsts, id)
		}
	}
	want := []string{"gm0.2[0]", "gm0.2[1]", "gm0.2[2]", "gm0.2[3]", "gm0.2[4]", "gm0.2[5]",
		"gm0.1[0]", "gm0.1[1]", "gm0.1[2]", "gm0.1[3]", "gm0.1[4]", "gm0.1[5]"}
	if !slices.Equal(firsts, want) {
		t.Fatalf("jobs first matched in the order %v, want %v", firsts, want)
	}
}

// TestChangeGapGrowsWithTheQueue: a submission asks for a Tick tickGap
// after the last one in a short queue, and later in a long one, whose
// Tick reads every job: 5 µs a job queued.
func TestChangeGapGrowsWithTheQueue(t *testing.T) {
	g := newFakeGrid(t, "gm1")
	q := New(Config{Self: "gm0", MaxQueued: 1 << 20, MaxQueuedPerUser: 1 << 20})
	begin := func(s *wire.JobSpec) { s.BeginUnixMs = g.now.Add(24 * time.Hour).UnixMilli() }
	for _, tc := range []struct {
		jobs int
		gap  time.Duration
	}{{10, tickGap}, {4000, tickGap}, {10000, 50 * time.Millisecond}, {40000, 200 * time.Millisecond}} {
		submit(t, g, q, fmt.Sprint("fill", tc.jobs), cluster("fill", tc.jobs-len(q.jobs)-1, begin))
		q.Tick(g.now)
		g.take(q.Ready())
		last := g.now
		g.now = g.now.Add(time.Millisecond)
		submit(t, g, q, fmt.Sprint("one", tc.jobs), cluster("one", 1, begin))
		if len(q.jobs) != tc.jobs {
			t.Fatalf("%d jobs queued, want %d", len(q.jobs), tc.jobs)
		}
		if got := q.NextDeadline(g.now); !got.Equal(last.Add(tc.gap)) {
			t.Errorf("%d jobs queued: a submission asks for a Tick %v after the last, want %v", tc.jobs, got.Sub(last), tc.gap)
		}
		g.pending = nil
		g.now = g.now.Add(time.Hour)
	}
}
