package web_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon/web"
	"github.com/gridmgr/gridmgr/wire"
)

// fake is a Backend with a fixed grid and a feed of events.
type fake struct {
	mu     sync.Mutex
	subs   []chan *wire.Event
	admins []string
	// calls counts the calls that reach the grid (every method but Self).
	calls atomic.Int64
	// noArchive: Recent answers ErrNoArchive.
	noArchive bool
	// subscribed, if set, gets one value per Subscribe, once the stream
	// holds its slot.
	subscribed chan struct{}
	// gate, if set, holds every Tree call until it is closed; entered gets
	// one value per Tree call held.
	gate, entered chan struct{}
}

func (f *fake) Self() (string, string) { return "gm152", "P152" }
func (f *fake) Tree(ctx context.Context) (*wire.TreeNode, error) {
	f.calls.Add(1)
	if f.gate != nil {
		f.entered <- struct{}{}
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &wire.TreeNode{Peer: "P152", Name: "gm152", Children: []*wire.TreeNode{{Peer: "P154", Name: "gm154", State: wire.RelationState_RELATION_STATE_UP}}}, nil
}
func (f *fake) Status(_ context.Context, peer string) (*wire.StatusReply, error) {
	f.calls.Add(1)
	if peer == "gone" {
		return nil, &client.RemoteError{Code: wire.ErrorReply_CODE_UNAVAILABLE, Message: "gone cannot be reached"}
	}
	return &wire.StatusReply{Name: "gm154", Peer: "P154"}, nil
}
func (f *fake) Resources(context.Context, string) (*wire.ResourcesReply, error) {
	f.calls.Add(1)
	return &wire.ResourcesReply{Values: &wire.Offer{Name: "gm154", Cpus: 8, CpusFree: 6}}, nil
}
func (f *fake) Reservations(context.Context, string) (*wire.ReservationsReply, error) {
	f.calls.Add(1)
	return &wire.ReservationsReply{Name: "gm154", Live: 1}, nil
}
func (f *fake) Apps(context.Context) ([]*wire.AppInstance, error) {
	f.calls.Add(1)
	return []*wire.AppInstance{{Id: "gm154-1-abcdef.web", App: "web", Manager: "gm154", State: "running"}}, nil
}
func (f *fake) Query(_ context.Context, req *wire.QueryRequest) (*wire.QueryReply, error) {
	f.calls.Add(1)
	if req.Requirement == "bad" {
		return nil, &client.RemoteError{Code: wire.ErrorReply_CODE_BAD_REQUEST, Message: "undeclared reference to 'bad'"}
	}
	if !req.Trace {
		panic("query without trace")
	}
	return &wire.QueryReply{Offers: []*wire.Offer{{Name: "gm154"}}, Visited: 2}, nil
}
func (f *fake) Subscribe(ctx context.Context) (<-chan *wire.Event, error) {
	f.calls.Add(1)
	ch := make(chan *wire.Event, 8)
	f.mu.Lock()
	f.subs = append(f.subs, ch)
	f.mu.Unlock()
	if f.subscribed != nil {
		f.subscribed <- struct{}{}
	}
	return ch, nil
}
func (f *fake) publish(ev *wire.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.subs {
		select {
		case ch <- ev:
		default: // a stream that ended, or a slow one
		}
	}
}
func (f *fake) Utilization(context.Context) ([]*wire.Event, error) {
	f.calls.Add(1)
	return []*wire.Event{{Kind: wire.EventKind_EVENT_KIND_UTILIZATION, Manager: "gm154", Body: &wire.Event_Utilization{Utilization: &wire.Utilization{CpuUtil: 0.5}}}}, nil
}
func (f *fake) Recent(_ context.Context, limit int) ([]*wire.Event, error) {
	f.calls.Add(1)
	if f.noArchive {
		return nil, fmt.Errorf("gm152: %w", web.ErrNoArchive)
	}
	evs := []*wire.Event{
		{Kind: wire.EventKind_EVENT_KIND_RELATION, Type: "up", Manager: "gm152", TimeUnixMs: 1_700_000_000_000,
			Body: &wire.Event_Relation{Relation: &wire.RelationChange{Peer: "P154", Name: "gm154", Role: wire.Role_ROLE_INFERIOR}}},
		{Kind: wire.EventKind_EVENT_KIND_RESERVATION, Type: "committed", Manager: "gm154", TimeUnixMs: 1_700_000_001_000,
			Body: &wire.Event_Reservation{Reservation: &wire.ReservationChange{Id: "gm154-7", Amounts: []*wire.Amount{{Kind: "cpus", N: 2}}}}},
	}
	return evs[max(len(evs)-limit, 0):], nil
}
func (f *fake) Admin(_ context.Context, cmd string) (*wire.AdminReply, error) {
	f.calls.Add(1)
	f.mu.Lock()
	f.admins = append(f.admins, cmd)
	f.mu.Unlock()
	return &wire.AdminReply{Ok: true, Output: "did " + cmd}, nil
}

func (f *fake) Jobs(_ context.Context, peer string) (*wire.JobReply, error) {
	f.calls.Add(1)
	switch peer {
	case "gm154":
		return nil, &client.RemoteError{Code: wire.ErrorReply_CODE_UNSUPPORTED, Message: "gm154: this manager keeps no job queue"}
	case "gone":
		return nil, fmt.Errorf("gone cannot be reached: dial timeout")
	}
	return &wire.JobReply{Jobs: []*wire.JobInfo{{Id: "gm152.1", Cluster: "gm152.1", Name: "<img src=x onerror=alert(1)>", User: "alice",
		State: wire.JobState_JOB_STATE_HELD, Reason: "<script>alert(2)</script>"}}, More: 7}, nil
}
func (f *fake) JobLog(_ context.Context, peer, id string) (*wire.JobInfo, error) {
	f.calls.Add(1)
	if id != "gm152.1" {
		return nil, &client.RemoteError{Code: wire.ErrorReply_CODE_NOT_FOUND, Message: "gm152: no job " + id}
	}
	return &wire.JobInfo{Id: id, Log: []*wire.JobLogEntry{{Type: "submitted", Detail: "by alice"}}}, nil
}

func (f *fake) Dags(_ context.Context, peer string) (*wire.JobReply, error) {
	f.calls.Add(1)
	if peer == "gm154" {
		return nil, &client.RemoteError{Code: wire.ErrorReply_CODE_UNSUPPORTED, Message: "gm154: this manager keeps no job queue"}
	}
	return &wire.JobReply{Dags: []*wire.DagInfo{{Id: "gm152.2", Name: "diamond", User: "alice", State: "running",
		Nodes: []*wire.DagNodeInfo{{Name: "prepare", Cluster: "gm152.3", State: "completed", Jobs: map[string]uint32{"completed": 1}},
			{Name: "join", After: []string{"prepare"}, Cluster: "gm152.4", State: "waiting", Jobs: map[string]uint32{"waiting": 1}}}}}}, nil
}
func (f *fake) Attributes(context.Context) (map[string]map[string]string, error) {
	f.calls.Add(1)
	return map[string]map[string]string{"P154": {"glidein": "g1", "glidein_owner": "alice", "site": "not shown"}}, nil
}

const token = "tok-123"

func server(t *testing.T, opts web.Options) (*httptest.Server, *fake) {
	f := &fake{}
	if opts.Token == "" {
		opts.Token = token
	}
	srv := httptest.NewServer(web.Handler(f, opts))
	t.Cleanup(srv.Close)
	return srv, f
}

func do(t *testing.T, srv *httptest.Server, method, path, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestRoutes(t *testing.T) {
	srv, f := server(t, web.Options{})
	for _, c := range []struct {
		method, path, body string
		hdr                map[string]string
		status             int
		want               string
	}{
		{"GET", "/", "", nil, 200, "<title>gridmgr</title>"},
		{"GET", "/static/app.js", "", nil, 200, "window.gridmgr"},
		{"GET", "/static/vendor/cytoscape.min.js", "", nil, 200, "cytoscape"},
		{"GET", "/api/self", "", nil, 200, `"name":"gm152"`},
		{"GET", "/api/tree", "", nil, 200, `"name":"gm154"`},
		{"GET", "/api/manager?peer=gm154", "", nil, 200, `"cpus_free":"6"`},
		{"GET", "/api/manager?peer=gone", "", nil, 200, `"status_error":"unavailable: gone cannot be reached"`},
		{"GET", "/api/apps", "", nil, 200, `"id":"gm154-1-abcdef.web"`},
		{"GET", "/api/utilization", "", nil, 200, `"cpu_util":0.5`},
		{"GET", "/api/recent", "", nil, 200, `"archived":true`},
		{"GET", "/api/recent?limit=1", "", nil, 200, `"id":"gm154-7"`},
		{"GET", "/api/recent?limit=0", "", nil, 400, "limit"},
		{"GET", "/api/recent?limit=x", "", nil, 400, "limit"},
		{"GET", "/api/jobs", "", nil, 200, `"more":7`},
		{"GET", "/api/jobs", "", nil, 200, `"state":"JOB_STATE_HELD"`},
		// JSON escapes < and > in user text: no HTML in the answer.
		{"GET", "/api/jobs", "", nil, 200, `"name":"\u003cimg src=x onerror=alert(1)\u003e"`},
		{"GET", "/api/jobs?peer=gm154", "", nil, 501, "gm154: this manager keeps no job queue"},
		{"GET", "/api/jobs?peer=gone", "", nil, 502, "gone cannot be reached"},
		{"GET", "/api/jobs?peer=" + strings.Repeat("p", 200), "", nil, 400, "peer: too long"},
		{"GET", "/api/job?id=gm152.1", "", nil, 200, `"detail":"by alice"`},
		{"GET", "/api/job?peer=gm152&id=gm152.9", "", nil, 404, "gm152: no job gm152.9"},
		{"GET", "/api/job", "", nil, 400, "id: name one job"},
		{"GET", "/api/job?id=" + strings.Repeat("x", 300), "", nil, 400, "id: name one job"},
		{"POST", "/api/jobs", "", nil, 405, "GET, HEAD"},
		{"GET", "/api/dags", "", nil, 200, `"after":["prepare"]`},
		{"GET", "/api/dags", "", nil, 200, `"name":"diamond"`},
		{"GET", "/api/dags?peer=gm154", "", nil, 501, "keeps no job queue"},
		// Only the attributes the tree shows.
		{"GET", "/api/attributes", "", nil, 200, `{"attributes":{"P154":{"glidein":"g1","glidein_owner":"alice"}}}`},
		{"POST", "/api/query", `{"requirement":"cpus_free > 1","limit":5}`, nil, 200, `"visited":2`},
		{"POST", "/api/query", `{"requirement":"bad"}`, nil, 400, "undeclared reference"},
		{"POST", "/api/query", `{"requirement":`, nil, 400, "not the JSON expected"},
		{"POST", "/api/query", `{"requirement":"x","evil":1}`, nil, 400, "unknown field"},
		{"POST", "/api/query", `{"requirement":""}`, nil, 400, "requirement"},
		{"POST", "/api/query", `{"requirement":"x"} {}`, nil, 400, "more than one"},
		{"POST", "/api/query", `{"requirement":"` + strings.Repeat("a", 70<<10) + `"}`, nil, 413, "64 KiB"},
		// Bad paths and methods.
		{"GET", "/nope", "", nil, 404, "no page"},
		{"GET", "/api/../../etc/passwd", "", nil, 404, ""},
		{"GET", "/static/../web.go", "", nil, 404, ""},
		{"DELETE", "/", "", nil, 405, "GET, HEAD"},
		{"GET", "/api/query", "", nil, 405, "POST"},
		{"PUT", "/api/admin", "", nil, 405, "POST"},
		{"POST", "/static/app.js", "", nil, 405, ""},
		// Admin: the token, and same-origin only.
		{"POST", "/api/admin", `{"command":"set log_level debug"}`, nil, 403, "admin token required"},
		{"POST", "/api/admin", `{"command":"set log_level debug"}`, map[string]string{"Authorization": "Bearer wrong"}, 403, "admin token required"},
		{"POST", "/api/admin", `{"command":"set log_level debug"}`, map[string]string{"Authorization": "Bearer " + token, "Origin": "http://evil.example"}, 403, "cross-origin"},
		{"POST", "/api/admin", `{"command":"set log_level debug"}`, map[string]string{"Authorization": "Bearer " + token, "Sec-Fetch-Site": "cross-site"}, 403, "cross-site"},
		{"POST", "/api/admin", `{"command":""}`, map[string]string{"Authorization": "Bearer " + token}, 400, "command"},
		{"POST", "/api/admin", `{"command":"set log_level debug"}`, map[string]string{"Authorization": "Bearer " + token, "Sec-Fetch-Site": "same-origin"}, 200, "did set log_level debug"},
	} {
		status, body := do(t, srv, c.method, c.path, c.body, c.hdr)
		if status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s %s: %d %.200q; want %d with %q", c.method, c.path, status, body, c.status, c.want)
		}
		if status >= 400 && !strings.HasPrefix(c.path, "/static") && !strings.Contains(body, `"error"`) {
			t.Errorf("%s %s: error body is not JSON {\"error\"}: %q", c.method, c.path, body)
		}
	}
	if len(f.admins) != 1 {
		t.Fatalf("admin commands run: %q; want only the authorised one", f.admins)
	}
}

func TestReadOnlyWithoutToken(t *testing.T) {
	f := &fake{}
	srv := httptest.NewServer(web.Handler(f, web.Options{}))
	defer srv.Close()
	status, body := do(t, srv, "POST", "/api/admin", `{"command":"status"}`, map[string]string{"Authorization": "Bearer "})
	if status != 403 || !strings.Contains(body, "read-only") {
		t.Fatalf("%d %s", status, body)
	}
	_, self := do(t, srv, "GET", "/api/self", "", nil)
	if !strings.Contains(self, `"admin":false`) || !strings.Contains(self, `"admin_enabled":false`) {
		t.Fatalf("self: %s", self)
	}
}

// /api/self says admin only to a request with the admin token: a page
// without it (or with a wrong one) is told it is read-only, although the
// manager has a token.
func TestSelfAdminOnlyWithToken(t *testing.T) {
	srv, _ := server(t, web.Options{})
	for _, c := range []struct {
		auth string
		want string
	}{
		{"", `"admin":false`},
		{"Bearer ", `"admin":false`},
		{"Bearer wrong", `"admin":false`},
		{token, `"admin":false`}, // no "Bearer "
		{"Bearer " + token, `"admin":true`},
	} {
		hdr := map[string]string{}
		if c.auth != "" {
			hdr["Authorization"] = c.auth
		}
		status, body := do(t, srv, "GET", "/api/self", "", hdr)
		if status != 200 || !strings.Contains(body, c.want) || !strings.Contains(body, `"admin_enabled":true`) {
			t.Errorf("Authorization %q: %d %s; want %s", c.auth, status, body, c.want)
		}
	}
}

// The Events tab's past: the archive's latest events, newest last; at a
// manager without an archive, why there are none and how to keep them.
func TestRecentEvents(t *testing.T) {
	srv, _ := server(t, web.Options{})
	status, body := do(t, srv, "GET", "/api/recent?limit=2", "", nil)
	var got struct {
		Archived bool             `json:"archived"`
		Events   []map[string]any `json:"events"`
	}
	if err := json.Unmarshal([]byte(body), &got); status != 200 || err != nil || !got.Archived || len(got.Events) != 2 || got.Events[1]["type"] != "committed" {
		t.Fatalf("%d %s (%v)", status, body, err)
	}
	f := &fake{noArchive: true}
	srv2 := httptest.NewServer(web.Handler(f, web.Options{Token: token}))
	defer srv2.Close()
	status, body = do(t, srv2, "GET", "/api/recent", "", nil)
	if status != 200 || !strings.Contains(body, `"archived":false`) || !strings.Contains(body, "[archive] enabled = true") || strings.Contains(body, `"events"`) {
		t.Fatalf("without an archive: %d %s", status, body)
	}
}

// Live events arrive as Server-Sent Events; streams beyond the limit are
// refused with 503.
func TestEventStream(t *testing.T) {
	srv, f := server(t, web.Options{MaxStreams: 2})
	open := func() (*http.Response, error) {
		return srv.Client().Get(srv.URL + "/api/events")
	}
	r1, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Body.Close()
	r2, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Body.Close()
	if r1.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("content type %q", r1.Header.Get("Content-Type"))
	}
	r3, err := open()
	if err != nil {
		t.Fatal(err)
	}
	r3.Body.Close()
	if r3.StatusCode != 503 {
		t.Fatalf("third stream: %s", r3.Status)
	}
	br := bufio.NewReader(r1.Body)
	if _, err := br.ReadString('\n'); err != nil { // the opening comment
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		f.mu.Lock()
		n := len(f.subs)
		f.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("streams did not subscribe")
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.publish(&wire.Event{Kind: wire.EventKind_EVENT_KIND_RELATION, Type: "down", Manager: "gm154"})
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var ev map[string]any
			if err := json.Unmarshal([]byte(data), &ev); err != nil || ev["type"] != "down" {
				t.Fatalf("event %q: %v", data, err)
			}
			break
		}
	}
}

// The vendored library is the one VENDOR.md records.
func TestVendoredLibrary(t *testing.T) {
	b, err := os.ReadFile("static/vendor/cytoscape.min.js")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	doc, err := os.ReadFile("static/vendor/VENDOR.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), hex.EncodeToString(sum[:])) {
		t.Fatalf("static/vendor/cytoscape.min.js (sha256 %x) is not the file VENDOR.md records", sum)
	}
}

// No request, however malformed, crashes the handler or gets a 5xx;
// the host x is one the handler answers to, so the routes behind the
// Host check are reached.
func FuzzHandler(f *testing.F) {
	f.Add("GET", "/api/manager?peer=x", "", "x")
	f.Add("POST", "/api/query", `{"requirement":"cpus > 1"}`, "x")
	f.Add("POST", "/api/admin", `{"command":"status"}`, "x")
	f.Add("GET", "/static/%2e%2e/web.go", "", "x")
	f.Add("OPTIONS", "/api/events", "x", "x")
	f.Add("GET", "/api/tree", "", "evil.example:8150")
	f.Add("GET", "/", "", "[::1")
	f.Add("GET", "/", "", "x:99999")
	f.Add("GET", "/", "", "")
	hosts, err := web.NewHostCheck("", []string{"x"})
	if err != nil {
		f.Fatal(err)
	}
	h := web.Handler(&fake{}, web.Options{Token: token, Hosts: hosts})
	f.Fuzz(func(t *testing.T, method, path, body, host string) {
		if path == "/api/events" || strings.HasPrefix(path, "/api/events?") {
			return // a stream: it does not end by itself
		}
		req, err := http.NewRequest(method, "http://x"+path, strings.NewReader(body))
		if err != nil || req.URL.Path == "/api/events" {
			return
		}
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("%s %q %q: %d %s", method, path, body, w.Code, w.Body)
		}
	})
}
