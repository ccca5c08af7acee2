package jobs

import (
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

// dnodeSpec is a node of count jobs after the nodes named.
func dnodeSpec(name string, count int, after ...string) *wire.DagNode {
	return &wire.DagNode{Name: name, After: after, Jobs: cluster(name, count, nil)}
}

func diamond() *wire.DagSpec {
	return &wire.DagSpec{Name: "diamond", Nodes: []*wire.DagNode{
		dnodeSpec("join", 1, "left", "right"), // out of order on purpose
		dnodeSpec("prepare", 1),
		dnodeSpec("left", 3, "prepare"),
		dnodeSpec("right", 1, "prepare"),
	}}
}

func submitDag(t *testing.T, g *fakeGrid, q *Queue, req string, d *wire.DagSpec) string {
	t.Helper()
	id, _, err := q.SubmitDag(g.now, DagSubmission{RequestID: req, User: "alice", Owner: "peer-alice", Dag: d})
	if err != nil {
		t.Fatal(err)
	}
	g.take(q.Ready())
	return id
}

// checkOrder fails unless every job of a node was released only after
// every job of the nodes it comes after completed, and started once.
func checkOrder(t *testing.T, g *fakeGrid, q *Queue, dagID string) {
	t.Helper()
	completed := map[string]int{} // node → jobs completed so far
	size := map[string]int{}
	after := map[string][]string{}
	for _, j := range q.jobs {
		if j.r.Info.Dag == dagID && j.r.Info.Role == "" {
			size[j.r.Info.Node]++
			after[j.r.Info.Node] = j.r.Info.After
		}
	}
	for _, c := range g.changes {
		if c.Dag != dagID || c.Node == "" {
			continue
		}
		j := q.jobs[c.Job]
		if j == nil || j.r.Info.Role != "" {
			continue
		}
		switch c.Entry.Type {
		case "completed":
			completed[c.Node]++
		case "released":
			for _, a := range after[c.Node] {
				if completed[a] != size[a] {
					t.Fatalf("%s (node %s) released when %d of %d jobs of %s had completed", c.Job, c.Node, completed[a], size[a], a)
				}
			}
		}
	}
	starts := map[string]int{}
	for _, l := range g.log {
		starts[strings.Fields(l)[1]]++
	}
	for id, j := range q.jobs {
		if j.r.Info.Dag == dagID && j.r.Info.State == wire.JobState_JOB_STATE_COMPLETED && starts[id] != 1 {
			t.Errorf("%s started %d times", id, starts[id])
		}
	}
}

func TestDagDiamondRunsInOrder(t *testing.T) {
	g := newFakeGrid(t, "gm1", "gm2")
	q := New(Config{Self: "gm0"})
	id := submitDag(t, g, q, "d1", diamond())
	if id != "gm0.1" {
		t.Fatalf("workflow id %q", id)
	}
	// before anything ran, only prepare may be matched
	for _, j := range q.jobs {
		want := wire.JobState_JOB_STATE_WAITING
		if j.r.Info.Node == "prepare" {
			want = wire.JobState_JOB_STATE_IDLE
		}
		if j.r.Info.State != want {
			t.Fatalf("%s (%s) is %s at submission", j.r.Info.Id, j.r.Info.Node, StateName(j.r.Info.State))
		}
	}
	g.run(q, time.Second, time.Hour)
	ds, err := q.Dags([]string{id}, Filter{})
	if err != nil || ds[0].State != DagCompleted {
		t.Fatalf("workflow %v %v", ds, err)
	}
	checkOrder(t, g, q, id)
	if s := states(q); s["completed"] != 6 {
		t.Fatalf("states %v", s)
	}
	var types []string
	for _, c := range g.changes {
		if c.Job == id {
			types = append(types, c.Entry.Type)
		}
	}
	if strings.Join(types, ",") != "dag-submitted,dag-completed" {
		t.Fatalf("workflow events %v", types)
	}
}

// A 3-level fan-out and fan-in with a 50-job array in the middle; the
// submit side crashes at many steps and reloads from what it wrote: the
// workflow completes, each job started once.
func TestDagFanOutFanInSurvivesCrashes(t *testing.T) {
	spec := func() *wire.DagSpec {
		return &wire.DagSpec{Name: "fan", Nodes: []*wire.DagNode{
			dnodeSpec("split", 1), dnodeSpec("work", 50, "split"), dnodeSpec("gather", 1, "work"),
		}}
	}
	for _, crashAt := range []int{3, 17, 60, 151, 333, 500} {
		g := newFakeGrid(t, "gm1", "gm2", "gm3")
		g.mgrs["gm1"].slots, g.mgrs["gm2"].slots, g.mgrs["gm3"].slots = 8, 8, 8
		q := New(Config{Self: "gm0"})
		id := submitDag(t, g, q, "f", spec())
		steps := 0
		for !(allEnded(q) && q.Quiet()) && steps < 20000 {
			q.Tick(g.now)
			g.take(q.Ready())
			for len(g.pending) > 0 {
				acts := g.pending
				g.pending = nil
				for _, a := range acts {
					r := g.do(a)
					steps++
					if steps == crashAt {
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
		ds, _ := q.Dags([]string{id}, Filter{})
		if len(ds) != 1 || ds[0].State != DagCompleted {
			t.Fatalf("crash at %d: workflow %v", crashAt, ds)
		}
		if s := states(q); s["completed"] != 52 {
			t.Fatalf("crash at %d: states %v", crashAt, s)
		}
		starts := map[string]int{}
		for _, l := range g.log {
			starts[strings.Fields(l)[1]]++
		}
		if len(starts) != 52 {
			t.Fatalf("crash at %d: %d jobs started", crashAt, len(starts))
		}
		for j, n := range starts {
			if n != 1 {
				t.Fatalf("crash at %d: %s started %d times", crashAt, j, n)
			}
		}
	}
}

// A node that fails for good: what does not depend on it still runs, the
// workflow then says failed and why; a rerun runs only what did not
// complete.
func TestDagFailureThenRerun(t *testing.T) {
	g := newFakeGrid(t, "gm1", "gm2")
	broken := true
	g.exits = func(job string, try uint32) int32 {
		if broken && job == "gm0.5" { // right: prepare gm0.2, then left, other, right by name
			return 3
		}
		return 0
	}
	q := New(Config{Self: "gm0"})
	d := diamond()
	d.Nodes = append(d.Nodes, dnodeSpec("other", 2, "prepare"), dnodeSpec("after-join", 1, "join"))
	id := submitDag(t, g, q, "d", d)
	g.run(q, time.Second, time.Hour)
	ds, _ := q.Dags([]string{id}, Filter{})
	info := ds[0]
	if info.State != DagFailed {
		t.Fatalf("workflow %s, want failed", info.State)
	}
	byNode := map[string]*wire.DagNodeInfo{}
	for _, n := range info.Nodes {
		byNode[n.Name] = n
	}
	for name, want := range map[string]string{"prepare": "completed", "left": "completed", "other": "completed", "right": "failed", "join": "waiting", "after-join": "waiting"} {
		if byNode[name].State != want {
			t.Errorf("node %s is %s, want %s (%s)", name, byNode[name].State, want, byNode[name].Reason)
		}
	}
	if r := byNode["after-join"].Reason; !strings.Contains(r, "right failed") || !strings.Contains(r, "dag rerun") {
		t.Errorf("after-join's reason %q", r)
	}
	startsBefore := len(g.log)
	if _, err := q.Rerun(g.now, id, "peer-mallory", false); err == nil {
		t.Fatal("another client reran the workflow")
	}
	broken = false
	if _, err := q.Rerun(g.now, id, "peer-alice", false); err != nil {
		t.Fatal(err)
	}
	g.take(q.Ready())
	g.run(q, time.Second, time.Hour)
	ds, _ = q.Dags([]string{id}, Filter{})
	if ds[0].State != DagCompleted {
		t.Fatalf("after the rerun the workflow is %s", ds[0].State)
	}
	var again []string
	for _, l := range g.log[startsBefore:] {
		again = append(again, strings.Fields(l)[1])
	}
	// right ran again, then join and after-join for the first time;
	// nothing that completed ran again
	if strings.Join(again, " ") != "gm0.5 gm0.6 gm0.7" {
		t.Fatalf("the rerun started %v", again)
	}
	if _, err := q.Rerun(g.now, id, "peer-alice", false); err == nil {
		t.Fatal("a completed workflow was rerun")
	}
}

// pre runs before the node's jobs and post after them, whatever they did;
// post's exit decides the node. Hold and unhold keep the order.
func TestDagPrePostAndHold(t *testing.T) {
	g := newFakeGrid(t, "gm1")
	q := New(Config{Self: "gm0"})
	pre := testSpec("a-pre", 0, 1)
	post := testSpec("a-post", 0, 1)
	d := &wire.DagSpec{Name: "pp", Nodes: []*wire.DagNode{
		{Name: "a", Jobs: cluster("a", 2, func(s *wire.JobSpec) { s.MaxRetries = 0 }), Pre: pre, Post: post},
		dnodeSpec("b", 1, "a"),
	}}
	g.exits = func(job string, try uint32) int32 {
		if job == "gm0.3[1]" { // a[1] fails: the post still runs and says ok
			return 1
		}
		return 0
	}
	id := submitDag(t, g, q, "p", d)
	// hold the whole workflow at once, unhold it: nothing skips its turn
	if err := q.Hold(g.now, []string{id}, "peer-alice", false, ""); err != nil {
		t.Fatal(err)
	}
	g.run(q, time.Second, time.Minute)
	if ds, _ := q.Dags([]string{id}, Filter{}); ds[0].State != DagHeld {
		t.Fatalf("held workflow is %s", ds[0].State)
	}
	if err := q.Unhold(g.now, []string{id}, "peer-alice", false); err != nil {
		t.Fatal(err)
	}
	g.run(q, time.Second, time.Hour)
	var order []string
	for _, l := range g.log {
		order = append(order, strings.Fields(l)[1])
	}
	// pre (gm0.2), a's two jobs (gm0.3), post (gm0.4), b (gm0.5)
	if len(order) != 5 || order[0] != "gm0.2" || order[3] != "gm0.4" || order[4] != "gm0.5" {
		t.Fatalf("start order %v", order)
	}
	if got := q.jobs["gm0.4"].r.Spec.Env[EnvNodeResult]; got != "failed" {
		t.Fatalf("post saw %s=%q", EnvNodeResult, got)
	}
	if ds, _ := q.Dags([]string{id}, Filter{}); ds[0].State != DagCompleted {
		t.Fatalf("workflow %s: the post command decides the node", ds[0].State)
	}
}

func TestDagRemoveAndRequestID(t *testing.T) {
	g := newFakeGrid(t, "gm1")
	q := New(Config{Self: "gm0"})
	id := submitDag(t, g, q, "same", diamond())
	id2, dup, err := q.SubmitDag(g.now, DagSubmission{RequestID: "same", User: "alice", Owner: "peer-alice", Dag: diamond()})
	if err != nil || !dup || id2 != id {
		t.Fatalf("retried submit: %q %v %v", id2, dup, err)
	}
	if _, _, err := q.Submit(g.now, Submission{RequestID: "same", User: "alice", Owner: "peer-alice", Jobs: cluster("x", 1, nil)}); err == nil {
		t.Fatal("a workflow's request id answered a job submit")
	}
	// after a restart: the same workflow, and its id resolves
	q2 := New(Config{Self: "gm0"})
	q2.Load(g.now, g.next, records(g))
	if ds, _ := q2.Dags([]string{id}, Filter{}); ds[0].State != DagRunning || ds[0].Nodes[0].State == "" {
		t.Fatalf("after a restart, before any tick, the workflow is %q", ds[0].State)
	}
	for _, c := range q2.Ready().Changes {
		if strings.HasPrefix(c.Entry.Type, "dag-") {
			t.Fatalf("a restart published %s", c.Entry.Type)
		}
	}
	id3, dup, err := q2.SubmitDag(g.now, DagSubmission{RequestID: "same", User: "alice", Owner: "peer-alice", Dag: diamond()})
	if err != nil || !dup || id3 != id {
		t.Fatalf("retried submit after restart: %q %v %v", id3, dup, err)
	}
	if err := q2.Remove(g.now, []string{id}, "peer-alice", false); err != nil {
		t.Fatal(err)
	}
	g.run(q2, time.Second, time.Minute)
	ds, _ := q2.Dags([]string{id}, Filter{})
	if ds[0].State != DagRemoved {
		t.Fatalf("removed workflow is %s", ds[0].State)
	}
	if s := states(q2); s["removed"] != 6 {
		t.Fatalf("states %v", s)
	}
	// forgotten with all its jobs once ended long enough
	g.now = g.now.Add(8 * 24 * time.Hour)
	g.run(q2, time.Second, 2*time.Second)
	if len(q2.jobs) != 0 || len(q2.dags) != 0 {
		t.Fatalf("%d jobs and %d workflows kept", len(q2.jobs), len(q2.dags))
	}
}

// A client that removes a workflow and reruns it at once, before the
// manager's next tick, is not told that the workflow is still running.
func TestDagRerunRightAfterRemove(t *testing.T) {
	g := newFakeGrid(t, "gm1")
	q := New(Config{Self: "gm0"})
	id := submitDag(t, g, q, "d", diamond())
	if err := q.Remove(g.now, []string{id}, "peer-alice", false); err != nil {
		t.Fatal(err)
	}
	info, err := q.Rerun(g.now, id, "peer-alice", false)
	if err != nil {
		t.Fatalf("rerun right after remove: %v", err)
	}
	if info.State != DagRunning {
		t.Fatalf("after the rerun the workflow is %s", info.State)
	}
	g.take(q.Ready())
	g.run(q, time.Second, time.Hour)
	if ds, _ := q.Dags([]string{id}, Filter{}); ds[0].State != DagCompleted {
		t.Fatalf("the rerun workflow ended %s", ds[0].State)
	}
}

func TestCheckDagRefuses(t *testing.T) {
	for name, edit := range map[string]func(*wire.DagSpec){
		"cycle":       func(d *wire.DagSpec) { d.Nodes[1].After = []string{"join"} },
		"unknown":     func(d *wire.DagSpec) { d.Nodes[0].After = []string{"nope"} },
		"self":        func(d *wire.DagSpec) { d.Nodes[0].After = []string{"join"} },
		"twice":       func(d *wire.DagSpec) { d.Nodes[2].Name = "right" },
		"no jobs":     func(d *wire.DagSpec) { d.Nodes[0].Jobs = nil },
		"bad index":   func(d *wire.DagSpec) { d.Nodes[2].Jobs[1].Index = 0 },
		"array pre":   func(d *wire.DagSpec) { d.Nodes[0].Pre = testSpec("p", 0, 2) },
		"bad name":    func(d *wire.DagSpec) { d.Name = "Bad Name" },
		"dup after":   func(d *wire.DagSpec) { d.Nodes[0].After = []string{"left", "left"} },
		"no nodes":    func(d *wire.DagSpec) { d.Nodes = nil },
		"bad spec":    func(d *wire.DagSpec) { d.Nodes[1].Jobs[0].BundleSha256 = "x" },
		"bad post":    func(d *wire.DagSpec) { d.Nodes[1].Post = &wire.JobSpec{} },
		"bad node nm": func(d *wire.DagSpec) { d.Nodes[1].Name = "" },
	} {
		d := diamond()
		edit(d)
		if _, err := CheckDag(d); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := CheckDag(diamond()); err != nil {
		t.Fatal(err)
	}
}

// A workflow's next node is released the moment the node before it
// completes, while the reservation it ended on is still being cleaned
// (its instance removed) for reuse: the next node waits for that claim
// rather than query and reserve anew, so a chain runs on one reservation.
func TestDagChainWaitsForTheClaim(t *testing.T) {
	g := newFakeGrid(t, "gm1", "gm2")
	q := New(Config{Self: "gm0"})
	d := &wire.DagSpec{Name: "chain", Nodes: []*wire.DagNode{dnodeSpec("a", 1), dnodeSpec("b", 1, "a"), dnodeSpec("c", 1, "b")}}
	submitDag(t, g, q, "c", d)
	matches := 0
	var held []Act // clean acts answered one step late
	for step := 0; step < 2000 && !(allEnded(q) && q.Quiet() && len(held) == 0); step++ {
		q.Tick(g.now)
		g.take(q.Ready())
		late := held
		held = nil
		for len(g.pending) > 0 {
			acts := g.pending
			g.pending = nil
			for _, a := range acts {
				if a.Kind == ActMatch {
					matches++
				}
				if a.Kind == ActClean && !a.Release {
					held = append(held, a)
					continue
				}
				q.Done(g.now, g.do(a))
				g.take(q.Ready())
			}
		}
		for _, a := range late {
			q.Done(g.now, g.do(a))
			g.take(q.Ready())
		}
		g.now = g.now.Add(20 * time.Millisecond)
	}
	if ds, _ := q.Dags(nil, Filter{Ended: true}); ds[0].State != DagCompleted {
		t.Fatalf("workflow %s", ds[0].State)
	}
	if matches != 1 || g.resSeq != 1 {
		t.Fatalf("%d matches and %d reservations for a 3-node chain; want 1 of each (the claim reused)", matches, g.resSeq)
	}
}
