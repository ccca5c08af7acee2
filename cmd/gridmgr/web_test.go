package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon/web/webtest"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/wire"
)

// The web UI in a real browser (Debian's chromium, headless) against the
// demo grid: the grid browser shows six managers and five edges; killing
// gm154 turns it red and shows gm160 and gm162 under gm152 within 5 s (the
// time to red is logged); the landscape shows a deployed application's
// row and drops it when removed; an admin command without the token is
// refused on the page. Screenshots go to $GRIDMGR_ARTIFACTS.
func TestWebUIInBrowser(t *testing.T) {
	ctx, _ := webtest.Browser(t)
	// A 200 ms heartbeat: a failure is declared after 3 missed, so the
	// tree heals well inside the 5 s the test allows the page.
	g := formedWebDemo(t, 200*time.Millisecond)
	url := "http://" + g.mgrs["gm152"].HTTPAddr() + "/"
	if err := webtest.Navigate(ctx, url); err != nil {
		t.Fatal(err)
	}
	if _, err := webtest.WaitFor(ctx, `window.gridmgr && gridmgr.nodes().length === 6 && gridmgr.edges().length === 5 && gridmgr.nodes().every(n => n.state === 'up')`, 15*time.Second); err != nil {
		nodes, _ := webtest.Eval[any](ctx, `window.gridmgr && gridmgr.nodes()`)
		t.Fatalf("%v; nodes: %v", err, nodes)
	}
	// The live stream is connected before the kill, so the page hears it.
	if _, err := webtest.WaitFor(ctx, `document.querySelector('#live').classList.contains('on')`, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	webtest.Screenshot(t, ctx, "webui-1-grid.png")

	g.mgrs["gm154"].Crash()
	kill := time.Now()
	red, err := webtest.WaitFor(ctx, `gridmgr.nodes().some(n => n.name === 'gm154' && n.state === 'down')`, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	moved := `(() => { const p = Object.fromEntries(gridmgr.nodes().map(n => [n.name, n.parent])); return p.gm160 === 'gm152' && p.gm162 === 'gm152'; })()`
	if _, err := webtest.WaitFor(ctx, moved, 5*time.Second-time.Since(kill)); err != nil {
		nodes, _ := webtest.Eval[any](ctx, `gridmgr.nodes()`)
		t.Fatalf("%v; nodes: %v", err, nodes)
	}
	healed := time.Since(kill)
	t.Logf("kill gm154 → red vertex on screen: %v; → gm160 and gm162 shown under gm152: %v", red, healed)
	webtest.Screenshot(t, ctx, "webui-2-gm154-killed.png")

	// Landscape: an application installed at gm160 appears, and goes when
	// removed.
	actx, acancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer acancel()
	cl, err := client.DialNew(actx, g.mgrs["gm160"].Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res, _, err := cl.Reserve(actx, &wire.ReserveRequest{RequestId: client.NewRequestID(), Commit: true,
		Amounts: []*wire.Amount{{Kind: "cpus", N: 1}, {Kind: "mem", N: 256 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := packDemoApp(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rep, err := cl.Install(actx, bundle, res.Id, nil)
	var re *client.RemoteError
	if errors.As(err, &re) && re.Code == wire.ErrorReply_CODE_UNAVAILABLE {
		t.Logf("this host cannot install applications (%s): the landscape part is skipped", re.Message)
	} else {
		if err != nil {
			t.Fatal(err)
		}
		id := rep.Instances[0].Id
		defer cl.App(context.Background(), &wire.AppRequest{Op: wire.AppRequest_OP_REMOVE, Instance: id})
		if _, err := cl.App(actx, &wire.AppRequest{Op: wire.AppRequest_OP_START, Instance: id}); err != nil {
			t.Fatal(err)
		}
		row := fmt.Sprintf(`gridmgr.landscapeRows().includes(%q)`, id)
		if _, err := webtest.WaitFor(ctx, row, 15*time.Second); err != nil {
			apps, _ := webtest.Eval[any](ctx, `fetch('/api/apps').then(r => r.text())`)
			t.Fatalf("%v; /api/apps: %v", err, apps)
		}
		if err := webtest.Navigate(ctx, url+"#manager=gm160"); err != nil {
			t.Fatal(err)
		}
		webtest.WaitFor(ctx, `gridmgr.ready`, 10*time.Second)
		webtest.Eval[bool](ctx, `document.querySelector('button[data-tab=landscape]').click(), true`)
		webtest.Screenshot(t, ctx, "webui-3-landscape.png")
		// A service that stops leaves the landscape; started, it is back;
		// removed, it is gone.
		for _, step := range []struct {
			op    wire.AppRequest_Op
			shown bool
		}{{wire.AppRequest_OP_STOP, false}, {wire.AppRequest_OP_START, true}, {wire.AppRequest_OP_REMOVE, false}} {
			if _, err := cl.App(actx, &wire.AppRequest{Op: step.op, Instance: id}); err != nil {
				t.Fatal(err)
			}
			want := row
			if !step.shown {
				want = "!" + row
			}
			if _, err := webtest.WaitFor(ctx, want, 15*time.Second); err != nil {
				t.Fatalf("after %v: %v", step.op, err)
			}
		}
	}

	// A change without the admin token is refused, and the page says so.
	if _, err := webtest.Eval[bool](ctx, `(() => {
		document.querySelector('button[data-tab=admin]').click();
		document.querySelector('#atoken').value = 'not-the-token';
		document.querySelector('#acmd').value = 'set log_level debug';
		document.querySelector('#aform').requestSubmit();
		return true; })()`); err != nil {
		t.Fatal(err)
	}
	if _, err := webtest.WaitFor(ctx, `document.querySelector('#aout').textContent.includes('admin token required')`, 10*time.Second); err != nil {
		text, _ := webtest.Eval[string](ctx, `document.querySelector('#aout').textContent`)
		t.Fatalf("%v; the page says %q", err, text)
	}
	webtest.Screenshot(t, ctx, "webui-4-admin-refused.png")
}
