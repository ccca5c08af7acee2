package web_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/client"
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
	// Open a collapsed subtree: the view moves its focus there, and the
	// few managers now drawn are laid out to be read (they were spread
	// over the zoomed-out extent of the 637 before, drawn as dots).
	if _, err := webtest.Eval[bool](ctx, `(() => { const m = cy.nodes('.more')[0]; m.emit('tap'); return true; })()`); err != nil {
		t.Fatal(err)
	}
	if _, err := webtest.WaitFor(ctx, `gridmgr.visible() < 50 && cy.zoom() >= 0.5 && gridmgr.inView()`, 5*time.Second); err != nil {
		got, _ := webtest.Eval[any](ctx, `[gridmgr.visible(), cy.zoom()]`)
		t.Fatalf("%v; vertices drawn and zoom: %v", err, got)
	}
	webtest.Screenshot(t, ctx, "webui-1000-managers-subtree.png")
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

// pageGrid is a fake of the six managers of configs/ with peer ids as long
// as real ones, a tree the test changes, and a sample of each manager.
type pageGrid struct {
	fake
	tmu  sync.Mutex
	root *wire.TreeNode
	// Until busyUntil (Unix ns), Resources calls to gm164 fail, as from
	// a manager too busy to answer.
	busyUntil atomic.Int64
}

func (g *pageGrid) Resources(ctx context.Context, peer string) (*wire.ResourcesReply, error) {
	if peer == longPeer("gm164") && time.Now().UnixNano() < g.busyUntil.Load() {
		return nil, &client.RemoteError{Code: wire.ErrorReply_CODE_UNAVAILABLE, Message: "gm164 is busy"}
	}
	return g.fake.Resources(ctx, peer)
}

// longPeer is a peer id of the real length (52 characters).
func longPeer(name string) string {
	return "12D3KooW" + strings.Repeat("Xy9", 12) + "peer" + name[2:]
}

func (g *pageGrid) Self() (string, string) { return "gm152", longPeer("gm152") }
func (g *pageGrid) Tree(context.Context) (*wire.TreeNode, error) {
	g.tmu.Lock()
	defer g.tmu.Unlock()
	return proto.CloneOf(g.root), nil
}
func (g *pageGrid) setTree(t *wire.TreeNode)                          { g.tmu.Lock(); g.root = t; g.tmu.Unlock() }
func (g *pageGrid) Apps(context.Context) ([]*wire.AppInstance, error) { return nil, nil }
func (g *pageGrid) Status(_ context.Context, peer string) (*wire.StatusReply, error) {
	return &wire.StatusReply{Name: "gm164", Peer: longPeer("gm164"), Hostname: "node164", Os: "linux", Arch: "amd64", Cpus: 8, Version: "test",
		Relations: []*wire.RelationInfo{{Peer: longPeer("gm156"), Name: "gm156", Role: wire.Role_ROLE_SUPERIOR, State: wire.RelationState_RELATION_STATE_UP, RttUs: 210}},
		Events:    []*wire.RelationEvent{{MsAgo: 5000, Peer: longPeer("gm156"), Name: "gm156", What: "up"}}}, nil
}
func (g *pageGrid) Reservations(context.Context, string) (*wire.ReservationsReply, error) {
	return &wire.ReservationsReply{Name: "gm164", Live: 1, Reservations: []*wire.Reservation{{Id: "gm164-1", State: wire.ReservationState_RESERVATION_STATE_COMMITTED,
		Amounts: []*wire.Amount{{Kind: "cpus", N: 2}}, User: "alice"}}}, nil
}

// node is a tree node of a manager of pageGrid.
func node(name string, state wire.RelationState, kids ...*wire.TreeNode) *wire.TreeNode {
	port := map[string]int{"gm152": 8152, "gm154": 8154, "gm156": 8156, "gm160": 8160, "gm162": 8162, "gm164": 8164}[name]
	return &wire.TreeNode{Peer: longPeer(name), Name: name, Addrs: []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port)}, State: state, Children: kids}
}

const up = wire.RelationState_RELATION_STATE_UP

func patentTree() *wire.TreeNode {
	return node("gm152", up, node("gm154", up, node("gm160", up), node("gm162", up)), node("gm156", up, node("gm164", up)))
}

func (g *pageGrid) Utilization(context.Context) ([]*wire.Event, error) {
	var out []*wire.Event
	for _, name := range []string{"gm152", "gm154", "gm156", "gm160", "gm162", "gm164"} {
		u := &wire.Utilization{CpuUtil: 0.25, Free: []*wire.Amount{{Kind: "cpus", N: 6}, {Kind: "mem", N: 4 << 30}}, SubtreeManagers: 1}
		if name == "gm164" { // two levels down: its own counts
			u.Reservations, u.Instances, u.Running = 1, 2, 2
		}
		out = append(out, &wire.Event{Kind: wire.EventKind_EVENT_KIND_UTILIZATION, Type: "asked", Manager: name, Peer: longPeer(name),
			TimeUnixMs: time.Now().UnixMilli(), Body: &wire.Event_Utilization{Utilization: u}})
	}
	return out, nil
}

// eventAt is the time of the archived events: 15:04:05.120 today, local.
var eventAt = func() time.Time {
	n := time.Now()
	return time.Date(n.Year(), n.Month(), n.Day(), 15, 4, 5, 120e6, time.Local)
}()

func (g *pageGrid) Recent(_ context.Context, limit int) ([]*wire.Event, error) {
	if g.noArchive {
		return nil, web.ErrNoArchive
	}
	return []*wire.Event{
		{Kind: wire.EventKind_EVENT_KIND_RELATION, Type: "up", Manager: "gm156", Peer: longPeer("gm156"), Seq: 1, TimeUnixMs: eventAt.UnixMilli(),
			Body: &wire.Event_Relation{Relation: &wire.RelationChange{Peer: longPeer("gm164"), Name: "gm164", Role: wire.Role_ROLE_INFERIOR}}},
		{Kind: wire.EventKind_EVENT_KIND_RESERVATION, Type: "committed", Manager: "gm164", Peer: longPeer("gm164"), Seq: 1, TimeUnixMs: eventAt.UnixMilli() + 1000,
			Body: &wire.Event_Reservation{Reservation: &wire.ReservationChange{Id: "gm164-1", Amounts: []*wire.Amount{{Kind: "cpus", N: 2}}, User: "alice"}}},
	}, nil
}

// must evaluates a JavaScript boolean expression until it is true (5 s),
// failing the test with what describe (an expression) gives if not.
func must(t *testing.T, ctx context.Context, expr, describe string) {
	t.Helper()
	if _, err := webtest.WaitFor(ctx, expr, 5*time.Second); err != nil {
		got, _ := webtest.Eval[any](ctx, describe)
		t.Fatalf("%v; %s = %v", err, describe, got)
	}
}

// The page against a fake of the six managers: the tab and manager are in
// the URL (restored on load, back and forward); the Events tab shows the
// archive's events with the CLI's 24-hour times, scrolls to its last one,
// and says why it is empty at a manager without an archive; the header
// says read-only until the admin token is given; the Managers table shows
// each row's own counts and the managers below it; selecting a manager
// keeps the whole tree in view and the details panel holds a full peer id
// without overflowing; when a superior dies only it is down, its
// inferiors "moving" until the tree shows them under their new superior.
func TestPageInBrowser(t *testing.T) {
	ctx, stop := webtest.Browser(t)
	g := &pageGrid{root: patentTree()}
	srv := httptest.NewServer(web.Handler(g, web.Options{Token: token}))
	defer srv.Close()
	defer stop()

	// Loaded at the Events tab: the archive's events, newest first.
	if err := webtest.Navigate(ctx, srv.URL+"/#tab=events"); err != nil {
		t.Fatal(err)
	}
	must(t, ctx, `window.gridmgr && gridmgr.ready && gridmgr.tab() === 'events' && gridmgr.eventLines().length === 2`, `[gridmgr.tab(), gridmgr.eventLines()]`)
	want := eventAt.Add(time.Second).Format("2006-01-02 15:04:05.000") + " gm164    reservation/committed gm164-1 cpus 2 for alice"
	must(t, ctx, fmt.Sprintf(`gridmgr.eventLines()[0] === %q`, want), `gridmgr.eventLines()`)
	must(t, ctx, `document.querySelector('#evnote').textContent.includes("gm152's archive")`, `document.querySelector('#evnote').textContent`)
	must(t, ctx, `document.querySelector('#mode').textContent === 'read-only'`, `document.querySelector('#mode').textContent`)
	// Live events join them; the list scrolls, its last line reachable.
	for i := range 300 {
		g.publish(&wire.Event{Kind: wire.EventKind_EVENT_KIND_RESERVATION, Type: "held", Manager: "gm160", Peer: longPeer("gm160"), Seq: uint64(10 + i),
			TimeUnixMs: time.Now().UnixMilli(), Body: &wire.Event_Reservation{Reservation: &wire.ReservationChange{Id: fmt.Sprintf("gm160-%d", i)}}})
		time.Sleep(2 * time.Millisecond) // the fake's stream holds 8 events; more are dropped

	}
	must(t, ctx, `gridmgr.eventLines().length > 50`, `gridmgr.eventLines().length`)
	must(t, ctx, `(() => { const e = document.querySelector('#events'); e.scrollTop = e.scrollHeight;
		const last = e.lastElementChild.getBoundingClientRect(), box = e.getBoundingClientRect();
		return e.scrollHeight > e.clientHeight && box.bottom <= innerHeight && last.bottom <= box.bottom + 1; })()`,
		`(() => { const e = document.querySelector('#events'); return [e.scrollHeight, e.clientHeight, e.getBoundingClientRect().bottom, innerHeight]; })()`)
	webtest.Screenshot(t, ctx, "page-events.png")

	// Tabs go into the history: back and forward follow them.
	webtest.Eval[bool](ctx, `document.querySelector('button[data-tab=resources]').click(), true`)
	must(t, ctx, `location.hash === '#tab=resources' && gridmgr.tab() === 'resources'`, `location.hash`)
	// The Managers table: gm164's own counts, the managers below each.
	must(t, ctx, `(() => { const r = Object.fromEntries(gridmgr.utilRows().map(r => [r.name, r]));
		return r.gm164 && r.gm164.res === '1' && r.gm164.apps === '2/2' && r.gm164.below === '0' && r.gm152.below === '5' && r.gm154.below === '2' && r.gm156.below === '1' && r.gm160.res === '0'; })()`,
		`gridmgr.utilRows()`)
	webtest.Screenshot(t, ctx, "page-resources.png")
	webtest.Eval[bool](ctx, `history.back(), true`)
	must(t, ctx, `gridmgr.tab() === 'events' && location.hash === '#tab=events'`, `[gridmgr.tab(), location.hash]`)
	webtest.Eval[bool](ctx, `history.forward(), true`)
	must(t, ctx, `gridmgr.tab() === 'resources'`, `[gridmgr.tab(), location.hash]`)

	// The admin token makes the header say admin; a wrong one does not.
	for _, c := range []struct{ tok, mode string }{{"wrong", "read-only"}, {token, "admin"}} {
		webtest.Eval[bool](ctx, fmt.Sprintf(`(() => { document.querySelector('button[data-tab=admin]').click();
			document.querySelector('#atoken').value = %q; document.querySelector('#acmd').value = 'status';
			document.querySelector('#aform').requestSubmit(); return true; })()`, c.tok))
		must(t, ctx, fmt.Sprintf(`document.querySelector('#mode').textContent === %q`, c.mode), `document.querySelector('#mode').textContent`)
	}

	// A manager two levels down, from the URL: the whole tree stays in
	// view, the root too; its peer id is whole in the panel's title and
	// the panel does not overflow. Its resources cannot be read for the
	// first second: the panel says why, and shows them once a try 2 s
	// later reads them.
	g.busyUntil.Store(time.Now().Add(time.Second).UnixNano())
	if err := webtest.Navigate(ctx, srv.URL+"/#manager=gm164"); err != nil {
		t.Fatal(err)
	}
	must(t, ctx, `window.gridmgr && gridmgr.selected() === 'gm164' && gridmgr.tab() === 'grid' && document.querySelector('#details .peerid') !== null`, `[gridmgr.selected(), gridmgr.tab()]`)
	time.Sleep(400 * time.Millisecond) // a pan, if any, animates for 200 ms
	must(t, ctx, `gridmgr.inView()`, `cy.nodes().map(n => [n.data('name'), n.renderedBoundingBox()])`)
	must(t, ctx, fmt.Sprintf(`(() => { const d = document.querySelector('#details'), p = d.querySelector('.peerid');
		return p.title === %q && d.scrollWidth <= d.clientWidth && p.getBoundingClientRect().right <= d.getBoundingClientRect().right; })()`, longPeer("gm164")),
		`(() => { const d = document.querySelector('#details'); return [d.scrollWidth, d.clientWidth]; })()`)
	must(t, ctx, `document.querySelector('#details').textContent.includes('Resourcescannot read its resources: unavailable: gm164 is busy') && document.querySelector('#details').textContent.includes('Reservations (1 live)')`,
		`document.querySelector('#details').textContent`)
	webtest.Screenshot(t, ctx, "page-details-gm164-busy.png")
	must(t, ctx, `document.querySelector('#details').textContent.includes('cpus free') && !document.querySelector('#details').textContent.includes('cannot read')`,
		`document.querySelector('#details').textContent`)
	webtest.Screenshot(t, ctx, "page-details-gm164.png")
	// Clicking another manager (the root) moves nothing out of view.
	webtest.Eval[bool](ctx, `cy.nodes().filter(n => n.data('name') === 'gm152').emit('tap'), true`)
	must(t, ctx, `gridmgr.selected() === 'gm152' && location.hash === '#manager=gm152'`, `[gridmgr.selected(), location.hash]`)
	time.Sleep(400 * time.Millisecond)
	must(t, ctx, `gridmgr.inView()`, `cy.nodes().map(n => [n.data('name'), n.renderedBoundingBox()])`)
	webtest.Eval[bool](ctx, `history.back(), true`)
	must(t, ctx, `gridmgr.selected() === 'gm164'`, `[gridmgr.selected(), location.hash]`)

	// gm154 answers the tree too late: its inferiors are not listed, and
	// nothing is known of them: they stay as they were, not down.
	states := `Object.fromEntries(gridmgr.nodes().map(n => [n.name, n.state]))`
	late := node("gm154", up)
	late.Incomplete = "timeout"
	g.setTree(node("gm152", up, late, node("gm156", up, node("gm164", up))))
	webtest.Eval[bool](ctx, `refreshTree(), true`)
	time.Sleep(300 * time.Millisecond) // the tree read and drawn
	must(t, ctx, `(() => { const s = `+states+`; return Object.values(s).every(x => x === 'up'); })()`, states)
	g.setTree(patentTree())

	// gm154 dies: only it is down; gm160 and gm162, missing from the tree
	// while they fail over, are "moving"; then under gm152, up.
	g.setTree(node("gm152", up, &wire.TreeNode{Peer: longPeer("gm154"), Name: "gm154", State: wire.RelationState_RELATION_STATE_DOWN, Incomplete: "down"},
		node("gm156", up, node("gm164", up))))
	g.publish(&wire.Event{Kind: wire.EventKind_EVENT_KIND_RELATION, Type: "down", Manager: "gm152", Peer: longPeer("gm152"), Seq: 99, TimeUnixMs: time.Now().UnixMilli(),
		Body: &wire.Event_Relation{Relation: &wire.RelationChange{Peer: longPeer("gm154"), Name: "gm154", Role: wire.Role_ROLE_INFERIOR, Cause: "3 heartbeats missed"}}})
	must(t, ctx, `(() => { const s = `+states+`; return s.gm154 === 'down' && s.gm160 === 'moving' && s.gm162 === 'moving' && s.gm152 === 'up' && s.gm164 === 'up'; })()`, states)
	must(t, ctx, `document.querySelector('#gridsum').textContent.startsWith('6 managers, 1 down, 2 moving')`, `document.querySelector('#gridsum').textContent`)
	webtest.Screenshot(t, ctx, "page-gm154-down-moving.png")
	g.setTree(node("gm152", up, &wire.TreeNode{Peer: longPeer("gm154"), Name: "gm154", State: wire.RelationState_RELATION_STATE_DOWN, Incomplete: "down"},
		node("gm156", up, node("gm164", up)), node("gm160", up), node("gm162", up)))
	webtest.Eval[bool](ctx, `refreshTree(), true`)
	must(t, ctx, `(() => { const s = `+states+`; const p = Object.fromEntries(gridmgr.nodes().map(n => [n.name, n.parent]));
		return s.gm154 === 'down' && s.gm160 === 'up' && s.gm162 === 'up' && p.gm160 === 'gm152'; })()`, `gridmgr.nodes()`)
	must(t, ctx, `document.querySelector('#gridsum').textContent.startsWith('6 managers, 1 down')`, `document.querySelector('#gridsum').textContent`)

	// A manager without an archive says why the Events tab is empty.
	g2 := &pageGrid{root: patentTree()}
	g2.noArchive = true
	srv2 := httptest.NewServer(web.Handler(g2, web.Options{}))
	defer func() { stop(); srv2.Close() }() // the page's event stream ends with the browser
	if err := webtest.Navigate(ctx, srv2.URL+"/#tab=events"); err != nil {
		t.Fatal(err)
	}
	must(t, ctx, `window.gridmgr && gridmgr.tab() === 'events' && document.querySelector('#evnote').textContent.includes('gm152 keeps no event archive') && document.querySelector('#evnote').textContent.includes('[archive] enabled = true')`,
		`document.querySelector('#evnote').textContent`)
	webtest.Screenshot(t, ctx, "page-events-no-archive.png")
}
