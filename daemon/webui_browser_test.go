package daemon_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/daemon/web/webtest"
	"github.com/gridmgr/gridmgr/node/p2p"
)

// webStep is the workflow's program: writes out/NAME.txt, and fails
// (exit 3) when its first argument is "right".
const webStep = `#!/bin/sh
if [ "$1" = right ]; then echo "right fails on purpose" >&2; exit 3; fi
mkdir -p out
echo "$1" > "out/$1.txt"
`

// webDiamond is a diamond whose right node fails for good: prepare and
// the 3-job array left complete, right fails, join waits for ever.
const webDiamond = `name = "diamond"
[nodes.prepare]
program = "bin/step"
args = ["prepare"]
outputs = ["prepare.txt"]
memory = "32MiB"
[nodes.left]
after = ["prepare"]
program = "bin/step"
count = 3
args = ["left-${INDEX}"]
outputs = ["left-${INDEX}.txt"]
memory = "32MiB"
[nodes.right]
after = ["prepare"]
program = "bin/step"
args = ["right"]
retries = 0
memory = "32MiB"
[nodes.join]
after = ["left", "right"]
program = "bin/step"
args = ["join"]
outputs = ["join.txt"]
memory = "32MiB"
`

// webMust polls a JavaScript boolean expression in the page until it is
// true (within d), failing the test with what describe gives if not.
func webMust(t *testing.T, ctx context.Context, d time.Duration, expr, describe string) {
	t.Helper()
	if _, err := webtest.WaitFor(ctx, expr, d); err != nil {
		got, _ := webtest.Eval[any](ctx, describe)
		t.Fatalf("%v; %s = %v", err, describe, got)
	}
}

// A real grid (gm152 above gm154, which has the leaf gm160 and a glide-in
// under it) seen in a real browser: the Jobs tab at gm152 lists a diamond
// workflow submitted there and draws it (prepare and the 3-job array left
// completed, right failed, join waiting after it; an edge from each node
// it comes after, the edge from the failed node marked; no two boxes
// overlapping), a click on a node lists its jobs, each job row names its
// workflow and node; the grid browser, served by the root and by the
// leaf, marks the manager whose attributes say glidein = "g1" with its
// badge and tooltip.
func TestWebWorkflowAndGlideinInBrowser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running jobs needs root (confined applications)")
	}
	ctx, stop := webtest.Browser(t)
	defer stop()
	withUI := func(name string, sup *daemon.Manager, attrs map[string]any) *daemon.Manager {
		cfg := jobConfig(t, name, sup, 0)
		cfg.HTTPListen = "127.0.0.1:0"
		cfg.Attributes = attrs
		return startJobManager(t, cfg)
	}
	root := withUI("gm152", nil, nil)
	mid := withUI("gm154", root, nil)
	leaf := withUI("gm160", mid, nil)
	withUI("g1-gm154", mid, map[string]any{"glidein": "g1", "glidein_owner": "alice"})
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		untilNoApps(t, cctx, root, mid, leaf)
	}()

	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := dialClient(t, cctx, root.Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for {
		tr, err := c.Tree(cctx, 0)
		if err == nil && len(tr.Children) == 1 && len(tr.Children[0].Children) == 2 {
			break
		}
		if cctx.Err() != nil {
			t.Fatalf("the grid did not form: %v", tr)
		}
		time.Sleep(50 * time.Millisecond) // polling the grid
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.WriteFile(filepath.Join(dir, "bin", "step"), []byte(webStep), 0o755)
	os.WriteFile(filepath.Join(dir, "flow.toml"), []byte(webDiamond), 0o644)
	sub, err := c.SubmitFlowFile(cctx, filepath.Join(dir, "flow.toml"), "gm152", client.SubmitOptions{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("workflow %s", sub.ID)

	// The Jobs tab at gm152: the workflow, once it has failed.
	if err := webtest.Navigate(ctx, "http://"+root.HTTPAddr()+"/#tab=jobs"); err != nil {
		t.Fatal(err)
	}
	webMust(t, ctx, 90*time.Second, fmt.Sprintf(`window.gridmgr && gridmgr.dagShown() === %q && gridmgr.dags().length === 1 && gridmgr.dags()[0].state === 'failed'`, sub.ID),
		`[gridmgr.dags(), gridmgr.dagNodes()]`)
	nodes := `Object.fromEntries(gridmgr.dagNodes().map(n => [n.name, n]))`
	webMust(t, ctx, 15*time.Second, `(() => { const n = `+nodes+`; return n.prepare.state === 'completed' && n.left.state === 'completed' && n.right.state === 'failed' && n.join.state === 'waiting'
		&& n.left.text.startsWith('left | 3/3') && n.prepare.text.startsWith('prepare | 1/1') && n.right.text.startsWith('right | 0/1') && n.join.text.includes('will not run'); })()`,
		`gridmgr.dagNodes()`)
	// The colours: each state its own fill, the same as the legend's.
	webMust(t, ctx, 5*time.Second, `(() => { const n = `+nodes+`, lg = s => getComputedStyle(document.querySelector('#jdaglegend .lg.ns-' + s)).backgroundColor;
		const fills = new Set([n.prepare.fill, n.right.fill, n.join.fill]);
		return fills.size === 3 && n.prepare.fill === n.left.fill && n.prepare.fill === lg('completed') && n.right.fill === lg('failed') && n.join.fill === lg('waiting'); })()`,
		`[gridmgr.dagNodes().map(n => [n.name, n.fill]), [...document.querySelectorAll('#jdaglegend .lg')].map(e => [e.textContent, getComputedStyle(e).backgroundColor])]`)
	// The edges: from each node it comes after; the one from the failed
	// node marked. Left to right by depth, and no two boxes overlap.
	webMust(t, ctx, 5*time.Second, `gridmgr.dagEdges().map(e => e.join(' ')).sort().join(',') === 'left join ,prepare left ,prepare right ,right join blocked'`, `gridmgr.dagEdges()`)
	webMust(t, ctx, 5*time.Second, `(() => { const n = `+nodes+`, b = Object.values(n).map(x => x.box);
		const overlap = b.some((p, i) => b.some((q, j) => i < j && p[0] < q[2] && q[0] < p[2] && p[1] < q[3] && q[1] < p[3]));
		return !overlap && n.prepare.box[2] < n.left.box[0] && n.left.box[0] === n.right.box[0] && n.right.box[2] < n.join.box[0]; })()`,
		`gridmgr.dagNodes().map(n => [n.name, n.box])`)
	// Job rows say their workflow and node.
	webMust(t, ctx, 5*time.Second, `gridmgr.jobRows().length === 6 && gridmgr.jobRows().every(r => r.workflow.startsWith('diamond › ')) && gridmgr.jobRows().some(r => r.state === 'waiting' && r.workflow === 'diamond › join')`,
		`gridmgr.jobRows()`)
	webtest.Screenshot(t, ctx, "jobs-workflow-gm152.png")
	// A click on a node lists its jobs.
	webtest.Eval[bool](ctx, `document.querySelector('#jdaggraph g.dnode[data-node=left]').dispatchEvent(new MouseEvent('click', {bubbles: true})), true`)
	webMust(t, ctx, 5*time.Second, `gridmgr.jobRows().length === 3 && gridmgr.jobRows().every(r => r.workflow === 'diamond › left' && r.state === 'completed') && `+nodes+`.left.on`,
		`[gridmgr.jobRows(), gridmgr.dagNodes()]`)
	webtest.Screenshot(t, ctx, "jobs-workflow-gm152-left.png")
	webtest.Eval[bool](ctx, `document.querySelector('#jdaggraph g.dnode[data-node=right]').dispatchEvent(new MouseEvent('click', {bubbles: true})), true`)
	webMust(t, ctx, 5*time.Second, `gridmgr.jobRows().length === 1 && gridmgr.jobRows()[0].state === 'failed' && gridmgr.jobRows()[0].workflow === 'diamond › right'`, `gridmgr.jobRows()`)

	// The grid browser, served by the root, then by the leaf: the glide-in
	// with its badge, under gm154.
	for _, at := range []*daemon.Manager{root, leaf} {
		if err := webtest.Navigate(ctx, "http://"+at.HTTPAddr()+"/"); err != nil {
			t.Fatal(err)
		}
		webMust(t, ctx, 15*time.Second, `window.gridmgr && gridmgr.nodes().length === 4 && gridmgr.nodes().some(n => n.name === 'g1-gm154' && n.glidein === 'g1' && n.parent === 'gm154')
			&& gridmgr.nodes().filter(n => n.glidein).length === 1`, `gridmgr.nodes()`)
		webMust(t, ctx, 5*time.Second, `gridmgr.label('g1-gm154').includes('glide-in g1') && !gridmgr.label('gm160').includes('glide-in')
			&& gridmgr.tip('g1-gm154').includes('joined under its launcher gm154, for alice')
			&& cy.nodes().filter(n => n.data('name') === 'g1-gm154').style('shape') === 'hexagon'`,
			`[gridmgr.label('g1-gm154'), gridmgr.tip('g1-gm154')]`)
		webtest.Eval[bool](ctx, `cy.nodes().filter(n => n.data('name') === 'g1-gm154').emit('tap'), true`)
		webMust(t, ctx, 10*time.Second, `document.querySelector('#details .badge.glidein')?.textContent === 'glide-in g1' && document.querySelector('#details').textContent.includes('cpus free')`,
			`document.querySelector('#details').textContent`)
		webtest.Screenshot(t, ctx, "tree-glidein-from-"+at.Cfg.Name+".png")
		// Another manager selected: the glide-in keeps its mark (the
		// violet ring, which selection covers).
		webtest.Eval[bool](ctx, `cy.nodes().filter(n => n.data('name') === 'gm160').emit('tap'), true`)
		webMust(t, ctx, 5*time.Second, `gridmgr.selected() === 'gm160' && cy.nodes().filter(n => n.data('name') === 'g1-gm154').style('border-color') === 'rgb(122,63,196)'`,
			`cy.nodes().filter(n => n.data('name') === 'g1-gm154').style('border-color')`)
		webtest.Screenshot(t, ctx, "tree-glidein-from-"+at.Cfg.Name+"-gm160-selected.png")
	}
}
