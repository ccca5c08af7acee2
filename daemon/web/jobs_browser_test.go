package web_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon/web"
	"github.com/gridmgr/gridmgr/daemon/web/webtest"
	"github.com/gridmgr/gridmgr/wire"
)

// hostile is a job name and a reason that would run a script if the page
// wrote them as HTML.
const (
	hostileName   = `<img src=x onerror=alert(1)>`
	hostileReason = `</td><script>window.pwned=1</script><img src=x onerror="window.pwned=2">`
)

// jobGrid is pageGrid with a job queue at gm152 (the manager serving the
// page) and at gm164.
type jobGrid struct {
	pageGrid
	queues map[string]*wire.JobReply // by manager name
	dags   *wire.JobReply            // gm152's workflows
}

func (g *jobGrid) queue(peer string) (string, *wire.JobReply) {
	name := peer
	for _, n := range []string{"gm152", "gm154", "gm156", "gm160", "gm162", "gm164"} {
		if peer == longPeer(n) {
			name = n
		}
	}
	if name == "" {
		name = "gm152"
	}
	return name, g.queues[name]
}

func (g *jobGrid) Jobs(_ context.Context, peer string) (*wire.JobReply, error) {
	name, q := g.queue(peer)
	if q == nil {
		return nil, &client.RemoteError{Code: wire.ErrorReply_CODE_UNSUPPORTED, Message: name + ": this manager takes no jobs (its properties file says jobs.enabled = false)"}
	}
	out := proto.CloneOf(q)
	for _, j := range out.Jobs {
		j.Log = nil
	}
	return out, nil
}

func (g *jobGrid) JobLog(_ context.Context, peer, id string) (*wire.JobInfo, error) {
	name, q := g.queue(peer)
	for _, j := range q.GetJobs() {
		if j.Id == id {
			return proto.CloneOf(j), nil
		}
	}
	return nil, &client.RemoteError{Code: wire.ErrorReply_CODE_NOT_FOUND, Message: name + ": no job " + id}
}

// Dags: the workflows of gm152's queue, if the test gave any.
func (g *jobGrid) Dags(_ context.Context, peer string) (*wire.JobReply, error) {
	if name, _ := g.queue(peer); name == "gm152" && g.dags != nil {
		return proto.CloneOf(g.dags), nil
	}
	return &wire.JobReply{}, nil
}

// jobsAt is a queue of jobs in several states, ids CLUSTER.N of manager at.
func jobsAt(at string, now time.Time) *wire.JobReply {
	ms := func(ago time.Duration) int64 { return now.Add(-ago).UnixMilli() }
	log := func(ago time.Duration, typ, detail string, try uint32, mgr string) *wire.JobLogEntry {
		return &wire.JobLogEntry{TimeUnixMs: ms(ago), Type: typ, Detail: detail, Try: try, Manager: mgr}
	}
	const longReason = "try 3 failed (exit 3: the program wrote \"cannot open scene-5.blend: no such file or directory\" to stderr); " +
		"its 2 retries are spent and on_failure = \"hold\": it waits for gridmgr job unhold (which runs it again) or gridmgr job rm"
	id := func(n int, idx int) string {
		if idx < 0 {
			return fmt.Sprintf("%s.%d", at, n)
		}
		return fmt.Sprintf("%s.%d[%d]", at, n, idx)
	}
	return &wire.JobReply{Jobs: []*wire.JobInfo{
		{Id: id(3, -1), Cluster: id(3, -1), Name: "render", User: "alice", State: wire.JobState_JOB_STATE_COMPLETED, Manager: "gm160",
			SinceUnixMs: ms(40 * time.Minute), Tries: 1, Exited: true, Exit: "exit 0", SubmittedUnixMs: ms(55 * time.Minute),
			StartedUnixMs: ms(50 * time.Minute), EndedUnixMs: ms(40 * time.Minute), CpuSeconds: 412.5, MemBytes: 380 << 20,
			OutputDir: "/home/alice/results-render",
			Results:   []*wire.JobFile{{Path: "stdout", Size: 1834}, {Path: "stderr", Size: 0}, {Path: "frame-0.png", Size: 2_411_520}, {Path: "log/render.txt", Size: 90_112}},
			Log: []*wire.JobLogEntry{log(55*time.Minute, "submitted", "by alice", 0, ""), log(55*time.Minute, "matched", "gm160 (of 3: gm160, gm162, gm164)", 0, ""),
				log(54*time.Minute, "reserved", "gm160-12", 0, "gm160"), log(51*time.Minute, "staged", "bundle and inputs installed as gm160-4-a1b2c3.render", 0, "gm160"),
				log(50*time.Minute, "started", "try 1 at gm160", 1, "gm160"), log(41*time.Minute, "exited", "exit 0", 1, "gm160"),
				log(40*time.Minute, "completed", "exit 0 at gm160; 4 files brought back", 1, "gm160")}},
		{Id: id(4, 0), Cluster: id(4, -1), Index: 0, Name: "sweep", User: "bob", State: wire.JobState_JOB_STATE_RUNNING, Manager: "gm162",
			SinceUnixMs: ms(3 * time.Minute), Tries: 1, SubmittedUnixMs: ms(5 * time.Minute), StartedUnixMs: ms(3 * time.Minute),
			Log: []*wire.JobLogEntry{log(5*time.Minute, "submitted", "by bob", 0, ""), log(3*time.Minute, "started", "try 1 at gm162", 1, "gm162")}},
		{Id: id(4, 1), Cluster: id(4, -1), Index: 1, Name: "sweep", User: "bob", State: wire.JobState_JOB_STATE_IDLE,
			SinceUnixMs: ms(5 * time.Minute), SubmittedUnixMs: ms(5 * time.Minute),
			Reason: "no manager offers cpus_free >= 16 && mem_free >= 64 GiB (6 asked; the largest has 8 cpus)",
			Log:    []*wire.JobLogEntry{log(5*time.Minute, "submitted", "by bob", 0, "")}},
		{Id: id(5, 5), Cluster: id(5, -1), Index: 5, Name: "render", User: "alice", State: wire.JobState_JOB_STATE_HELD, Manager: "gm164",
			SinceUnixMs: ms(2 * time.Hour), Tries: 3, Exited: true, ExitCode: 3, Exit: "exit 3", Reason: longReason, SubmittedUnixMs: ms(3 * time.Hour),
			Results: []*wire.JobFile{{Path: "stdout", Size: 0}, {Path: "stderr", Size: 57}},
			Log: []*wire.JobLogEntry{log(3*time.Hour, "submitted", "by alice", 0, ""), log(150*time.Minute, "started", "try 1 at gm164", 1, "gm164"),
				log(140*time.Minute, "retried", "try 1 failed (exit 3); 2 of 2 retries left", 1, "gm164"), log(2*time.Hour, "held", longReason, 3, "gm164")}},
		{Id: id(6, -1), Cluster: id(6, -1), Name: "convert", User: "carol", State: wire.JobState_JOB_STATE_FAILED, Manager: "gm154",
			SinceUnixMs: ms(26 * time.Hour), Tries: 1, Exited: true, Exit: "oom-killed", Reason: "killed past its memory (256 MiB); no retries left",
			Log: []*wire.JobLogEntry{log(27*time.Hour, "submitted", "by carol", 0, ""), log(26*time.Hour, "failed", "killed past its memory (256 MiB); no retries left", 1, "gm154")}},
		{Id: id(7, -1), Cluster: id(7, -1), Name: hostileName, User: `<b>mallory</b>`, State: wire.JobState_JOB_STATE_HELD,
			SinceUnixMs: ms(20 * time.Second), Reason: hostileReason,
			Log:     []*wire.JobLogEntry{log(20*time.Second, "held", hostileReason, 0, `<i>x</i>`)},
			Results: []*wire.JobFile{{Path: `<svg onload=alert(3)>`, Size: 10}}},
	}}
}

// The Jobs tab against a fake grid: gm152's queue (the manager serving
// the page) by default, with counts by state, a filter, and a job's log
// and results on click; gm164's queue picked in the tab (and in the URL);
// hostile names and reasons shown as text, never as HTML; a manager that
// takes no jobs says so; job events read as one line in the Events tab.
func TestJobsInBrowser(t *testing.T) {
	ctx, stop := webtest.Browser(t)
	now := time.Now()
	g := &jobGrid{pageGrid: pageGrid{root: patentTree()}, queues: map[string]*wire.JobReply{"gm152": jobsAt("gm152", now), "gm164": jobsAt("gm164", now)}}
	g.queues["gm164"].Jobs = g.queues["gm164"].Jobs[:4]
	g.queues["gm164"].More = 12
	srv := httptest.NewServer(web.Handler(g, web.Options{Token: token}))
	defer srv.Close()
	defer stop()

	if err := webtest.Navigate(ctx, srv.URL+"/#tab=jobs"); err != nil {
		t.Fatal(err)
	}
	must(t, ctx, `window.gridmgr && gridmgr.ready && gridmgr.jobsOf() === 'gm152' && gridmgr.jobRows().length === 6`, `[gridmgr.jobsOf(), gridmgr.jobRows()]`)
	// Newest cluster first; the hostile name and user as text.
	must(t, ctx, fmt.Sprintf(`(() => { const r = gridmgr.jobRows(); return r[0].id === 'gm152.7' && r[0].name === %q && r[0].user === '<b>mallory</b>' && r[0].reason === %q &&
		r[5].id === 'gm152.3' && r[5].state === 'completed' && r[5].where === 'gm160' && r[5].exit === 'exit 0' && r[5].since === '40 min ago'; })()`, hostileName, hostileReason),
		`gridmgr.jobRows()`)
	noHTML := `document.querySelectorAll('main img, main script, main svg, main b, main i').length === 0 && window.pwned === undefined`
	must(t, ctx, noHTML, `[...document.querySelectorAll('main img, main script, main svg, main b, main i')].map(e => e.outerHTML)`)
	must(t, ctx, `[...document.querySelectorAll('#jcounts button')].map(b => b.textContent).join(' ') === 'all6 idle1 running1 completed1 failed1 held2'`,
		`[...document.querySelectorAll('#jcounts button')].map(b => b.textContent)`)
	webtest.Screenshot(t, ctx, "jobs-gm152.png")

	// The filter: held jobs, then alice's held ones.
	webtest.Eval[bool](ctx, `[...document.querySelectorAll('#jcounts button')].find(b => b.textContent.startsWith('held')).click(), true`)
	must(t, ctx, `gridmgr.jobRows().map(r => r.id).join() === 'gm152.7,gm152.5[5]'`, `gridmgr.jobRows()`)
	webtest.Eval[bool](ctx, `(() => { const u = document.querySelector('#juser'); u.value = 'ali'; u.dispatchEvent(new Event('input')); return true; })()`)
	must(t, ctx, `gridmgr.jobRows().map(r => r.id).join() === 'gm152.5[5]'`, `gridmgr.jobRows()`)
	// Its details: the long reason whole, the log, the results.
	webtest.Eval[bool](ctx, `document.querySelector('#jobtable tbody tr').click(), true`)
	must(t, ctx, `(() => { const d = document.querySelector('#jdetail'); return d.textContent.includes('Log (4)') && d.textContent.includes('gridmgr job rm') && d.textContent.includes('Results (2, 57 B)')
		&& d.scrollWidth <= d.clientWidth; })()`, `document.querySelector('#jdetail').textContent`)
	webtest.Screenshot(t, ctx, "jobs-gm152-held.png")
	webtest.Eval[bool](ctx, `(() => { const u = document.querySelector('#juser'); u.value = ''; document.querySelector('#jstate').value = ''; u.dispatchEvent(new Event('input'));
		[...document.querySelectorAll('#jobtable tbody tr')].find(tr => tr.dataset.job === 'gm152.3').click(); return true; })()`)
	must(t, ctx, `(() => { const d = document.querySelector('#jdetail').textContent; return d.includes('Log (7)') && d.includes('frame-0.png') && d.includes('2.3 MiB') && d.includes('cpu 412.5 s'); })()`,
		`document.querySelector('#jdetail').textContent`)
	webtest.Screenshot(t, ctx, "jobs-gm152-completed.png")
	// The hostile job's details: text too.
	webtest.Eval[bool](ctx, `[...document.querySelectorAll('#jobtable tbody tr')].find(tr => tr.dataset.job === 'gm152.7').click(), true`)
	must(t, ctx, fmt.Sprintf(`document.querySelector('#jdetail').textContent.includes(%q) && document.querySelector('#jdetail').textContent.includes('<svg onload=alert(3)>')`, hostileName),
		`document.querySelector('#jdetail').textContent`)
	must(t, ctx, noHTML, `[...document.querySelectorAll('main img, main script, main svg, main b, main i')].map(e => e.outerHTML)`)

	// Another manager, picked in the tab: its queue, and the URL says so.
	webtest.Eval[bool](ctx, fmt.Sprintf(`(() => { const s = document.querySelector('#jmgr'); s.value = %q; s.dispatchEvent(new Event('change')); return true; })()`, longPeer("gm164")))
	must(t, ctx, `gridmgr.jobsOf() === 'gm164' && gridmgr.jobRows().length === 4 && gridmgr.jobRows()[0].id === 'gm164.5[5]' && location.hash === '#tab=jobs&manager=gm164'`,
		`[gridmgr.jobsOf(), gridmgr.jobRows(), location.hash]`)
	must(t, ctx, `document.querySelector('#jmore').textContent.includes('12 more jobs at gm164 are not listed')`, `document.querySelector('#jmore').textContent`)
	must(t, ctx, `document.querySelector('#jdetail').classList.contains('none') && document.querySelector('#jnote').textContent.includes('Click a job')`, `document.querySelector('#jdetail').textContent`)
	webtest.Eval[bool](ctx, `[...document.querySelectorAll('#jobtable tbody tr')].find(tr => tr.dataset.job === 'gm164.5[5]').click(), true`)
	must(t, ctx, `document.querySelector('#jdetail').textContent.includes('Log (4)')`, `document.querySelector('#jdetail').textContent`)
	webtest.Screenshot(t, ctx, "jobs-gm164.png")

	// A manager that takes no jobs.
	webtest.Eval[bool](ctx, fmt.Sprintf(`(() => { const s = document.querySelector('#jmgr'); s.value = %q; s.dispatchEvent(new Event('change')); return true; })()`, longPeer("gm156")))
	must(t, ctx, `gridmgr.jobsOf() === 'gm156' && document.querySelector('#jerr').textContent === "gm156's job queue cannot be read: this manager takes no jobs (its properties file says jobs.enabled = false)" && gridmgr.jobRows().length === 0`,
		`[gridmgr.jobsOf(), document.querySelector('#jerr').textContent]`)
	webtest.Screenshot(t, ctx, "jobs-gm156-no-queue.png")

	// Job events in the Events tab, one line each.
	webtest.Eval[bool](ctx, `document.querySelector('button[data-tab=events]').click(), true`)
	g.publish(&wire.Event{Kind: wire.EventKind_EVENT_KIND_JOB, Type: "started", Manager: "gm152", Peer: longPeer("gm152"), Seq: 50, TimeUnixMs: now.UnixMilli(),
		Body: &wire.Event_Job{Job: &wire.JobChange{Id: "gm152.17[3]", User: "alice", State: wire.JobState_JOB_STATE_RUNNING, Manager: "gm160", Try: 1, Detail: "try 1 at gm160"}}})
	g.publish(&wire.Event{Kind: wire.EventKind_EVENT_KIND_JOB, Type: "held", Manager: "gm152", Peer: longPeer("gm152"), Seq: 51, TimeUnixMs: now.UnixMilli() + 1,
		Body: &wire.Event_Job{Job: &wire.JobChange{Id: "gm152.7", User: "<b>mallory</b>", State: wire.JobState_JOB_STATE_HELD, Detail: hostileReason}}})
	must(t, ctx, `gridmgr.eventLines().some(l => l.endsWith('gm152    job/started gm152.17[3] try 1 at gm160 for alice'))`, `gridmgr.eventLines()`)
	must(t, ctx, fmt.Sprintf(`gridmgr.eventLines().some(l => l.endsWith(%q))`, "job/held gm152.7 for <b>mallory</b>: "+hostileReason), `gridmgr.eventLines()`)
	must(t, ctx, noHTML, `document.querySelector('#events').innerHTML`)
	if !strings.HasPrefix(longPeer("gm164"), "12D3") {
		t.Fatal("longPeer changed")
	}
}

// A workflow running, from a fake queue: a fan-out and fan-in around a
// 50-job array with 37 done, a node running its pre command and one held,
// drawn left to right without overlapping boxes, each box's count from
// the node's own jobs (its pre and post commands apart).
func TestWorkflowGraphInBrowser(t *testing.T) {
	ctx, stop := webtest.Browser(t)
	now := time.Now()
	g := &jobGrid{pageGrid: pageGrid{root: patentTree()}, queues: map[string]*wire.JobReply{"gm152": {}}}
	nodes := []*wire.DagNodeInfo{
		{Name: "split", Cluster: "gm152.11", State: "completed", Jobs: map[string]uint32{"completed": 1}},
		{Name: "work", After: []string{"split"}, Cluster: "gm152.12", State: "running", Jobs: map[string]uint32{"completed": 37, "running": 8, "idle": 5}},
		{Name: "index", After: []string{"split"}, Cluster: "gm152.13", State: "pre", Jobs: map[string]uint32{"running": 1, "waiting": 1}},
		{Name: "check", After: []string{"split"}, Cluster: "gm152.14", State: "held", Reason: "gm152.14: held by alice", Jobs: map[string]uint32{"held": 1}},
		{Name: "gather", After: []string{"work", "index"}, Cluster: "gm152.15", State: "waiting", Reason: "waiting for work, index", Jobs: map[string]uint32{"waiting": 1}},
		{Name: "publish", After: []string{"gather", "check"}, Cluster: "gm152.16", State: "waiting", Reason: "waiting for gather, check", Jobs: map[string]uint32{"waiting": 1}},
	}
	g.dags = &wire.JobReply{Dags: []*wire.DagInfo{
		{Id: "gm152.10", Name: "fan", User: "alice", State: "running", Nodes: nodes, SubmittedUnixMs: now.Add(-time.Minute).UnixMilli()},
		{Id: "gm152.2", Name: "old", User: "bob", State: "completed", Nodes: nodes[:1], SubmittedUnixMs: now.Add(-time.Hour).UnixMilli()},
	}}
	for i := range 50 {
		st := wire.JobState_JOB_STATE_COMPLETED
		if i >= 37 {
			st = wire.JobState_JOB_STATE_RUNNING
		}
		g.queues["gm152"].Jobs = append(g.queues["gm152"].Jobs, &wire.JobInfo{Id: fmt.Sprintf("gm152.12[%d]", i), Cluster: "gm152.12", Index: uint32(i), Name: "work",
			User: "alice", State: st, Dag: "gm152.10", Node: "work", DagName: "fan", After: []string{"split"}})
	}
	g.queues["gm152"].Jobs = append(g.queues["gm152"].Jobs, &wire.JobInfo{Id: "gm152.17", Cluster: "gm152.17", Name: "index-pre", User: "alice",
		State: wire.JobState_JOB_STATE_RUNNING, Dag: "gm152.10", Node: "index", DagName: "fan", Role: "pre"},
		&wire.JobInfo{Id: "gm152.13", Cluster: "gm152.13", Name: "index", User: "alice", State: wire.JobState_JOB_STATE_WAITING, Dag: "gm152.10", Node: "index", DagName: "fan",
			Reason: "its pre command runs"})
	srv := httptest.NewServer(web.Handler(g, web.Options{}))
	defer srv.Close()
	defer stop()
	if err := webtest.Navigate(ctx, srv.URL+"/#tab=jobs"); err != nil {
		t.Fatal(err)
	}
	// The newest workflow still running is drawn.
	must(t, ctx, `window.gridmgr && gridmgr.dagShown() === 'gm152.10' && gridmgr.dags().map(d => d.id + ' ' + d.state + ' ' + d.nodes).join() === 'gm152.10 running 1/6,gm152.2 completed 1/1'`,
		`[gridmgr.dagShown(), gridmgr.dags()]`)
	nodesJS := `Object.fromEntries(gridmgr.dagNodes().map(n => [n.name, n]))`
	must(t, ctx, `(() => { const n = `+nodesJS+`; return n.work.text === 'work | 37/50 | running: 13 running' && n.index.text.startsWith('index | 0/1 | pre: 1 waiting')
		&& n.check.text === 'check | 0/1 | held: 1 held' && n.gather.text === 'gather | 0/1 | waiting for work, index' && n.split.state === 'completed'; })()`, `gridmgr.dagNodes()`)
	must(t, ctx, `(() => { const n = Object.values(`+nodesJS+`), b = n.map(x => x.box);
		return n.length === 6 && !b.some((p, i) => b.some((q, j) => i < j && p[0] < q[2] && q[0] < p[2] && p[1] < q[3] && q[1] < p[3])) && new Set(n.map(x => x.fill)).size === 5; })()`,
		`gridmgr.dagNodes()`)
	must(t, ctx, `gridmgr.dagEdges().length === 7 && gridmgr.dagEdges().every(e => e[2] === '')`, `gridmgr.dagEdges()`)
	must(t, ctx, `gridmgr.jobsOf() === 'gm152' && gridmgr.jobRows().length === 52 && gridmgr.jobRows().some(r => r.workflow === 'fan › index (pre)')`, `gridmgr.jobRows().slice(0, 3)`)
	webtest.Screenshot(t, ctx, "jobs-workflow-fan.png")
	// The other workflow, picked: drawn, and it stays picked.
	webtest.Eval[bool](ctx, `document.querySelector('#dagtable tr[data-dag="gm152.2"]').click(), true`)
	must(t, ctx, `gridmgr.dagShown() === 'gm152.2' && gridmgr.dagNodes().length === 1`, `gridmgr.dagShown()`)
	webtest.Eval[bool](ctx, `refreshJobs(), true`)
	must(t, ctx, `gridmgr.dagShown() === 'gm152.2' && gridmgr.jobsOf() === 'gm152'`, `gridmgr.dagShown()`)
}
