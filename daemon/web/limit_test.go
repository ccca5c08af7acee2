package web_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/daemon/web"
)

// limited is a handler over f that answers to the host grid.test.
func limited(t *testing.T, f *fake, opts web.Options) http.Handler {
	t.Helper()
	hc, err := web.NewHostCheck("", []string{"grid.test"})
	if err != nil {
		t.Fatal(err)
	}
	opts.Hosts = hc
	return web.Handler(f, opts)
}

// call is one request served in its own goroutine.
type call struct {
	w    *httptest.ResponseRecorder
	done chan struct{}
	stop context.CancelFunc
}

// end ends the request (a stream: as its client going away) and waits
// for the handler to return.
func (c *call) end() *httptest.ResponseRecorder {
	c.stop()
	<-c.done
	return c.w
}

// begin serves method path from the client at remote until the request
// holds its place (wait: f.subscribed or f.entered gets a value) or is
// answered; held says which.
func begin(h http.Handler, wait chan struct{}, method, path, remote string) (c *call, held bool) {
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequestWithContext(ctx, method, "http://grid.test"+path, nil)
	req.RemoteAddr = remote
	c = &call{w: httptest.NewRecorder(), done: make(chan struct{}), stop: cancel}
	go func() {
		defer close(c.done)
		h.ServeHTTP(c.w, req)
	}()
	select {
	case <-wait:
		return c, true
	case <-c.done:
		cancel()
		return c, false
	}
}

// One client may hold 8 live streams (the default); its 9th is refused
// with 429 and a message that says it is the per-client limit, while
// another client still gets one. IPv6 clients count by /64.
func TestStreamsPerClient(t *testing.T) {
	f := &fake{subscribed: make(chan struct{}, 64)}
	h := limited(t, f, web.Options{})
	var open []*call
	defer func() {
		for _, c := range open {
			c.end()
		}
	}()
	for _, client := range []string{"192.0.2.1", "[2001:db8::1]"} {
		for i := range 8 {
			remote := client + ":" + string(rune('1'+i)) + "000"
			if strings.HasPrefix(client, "[") {
				remote = "[2001:db8::" + string(rune('1'+i)) + "]:1000" // other addresses of the same /64
			}
			c, ok := begin(h, f.subscribed, "GET", "/api/events", remote)
			if !ok {
				t.Fatalf("%s: stream %d refused: %d %s", remote, i+1, c.w.Code, c.w.Body)
			}
			open = append(open, c)
		}
		ninth := client + ":9000"
		if strings.HasPrefix(client, "[") {
			ninth = "[2001:db8::ff]:9000"
		}
		c, ok := begin(h, f.subscribed, "GET", "/api/events", ninth)
		if ok {
			open = append(open, c)
			t.Fatalf("%s: a 9th stream opened", ninth)
		}
		if c.w.Code != http.StatusTooManyRequests || !strings.Contains(c.w.Body.String(), "per-client limit") ||
			!strings.Contains(c.w.Body.String(), "8 live event streams") {
			t.Errorf("%s: 9th stream: %d %s; want 429 naming the per-client limit", ninth, c.w.Code, c.w.Body)
		}
	}
	for _, other := range []string{"192.0.2.2:1000", "[2001:db8:0:1::1]:1000"} {
		c, ok := begin(h, f.subscribed, "GET", "/api/events", other)
		if !ok {
			t.Fatalf("%s: refused while another client holds its 8: %d %s", other, c.w.Code, c.w.Body)
		}
		open = append(open, c)
	}
	if s, sc, _, _ := web.Held(h); s != 18 || sc != 4 {
		t.Errorf("held: %d streams by %d clients; want 18 by 4", s, sc)
	}
	for _, c := range open {
		if w := c.end(); w.Code != 200 || w.Header().Get("Content-Type") != "text/event-stream" {
			t.Errorf("stream: %d %q", w.Code, w.Header().Get("Content-Type"))
		}
	}
	open = nil
	if s, sc, _, _ := web.Held(h); s != 0 || sc != 0 {
		t.Errorf("after closing every stream: %d streams by %d clients held", s, sc)
	}
}

// Closing streams frees their slots: after many rounds of one client
// filling its 8 and closing them (and being refused a 9th), nothing is
// held, and the client gets its 8 again.
func TestStreamSlotsFreed(t *testing.T) {
	f := &fake{subscribed: make(chan struct{}, 64)}
	h := limited(t, f, web.Options{MaxStreams: 20})
	round := func() {
		var open []*call
		for i := range 9 {
			c, ok := begin(h, f.subscribed, "GET", "/api/events", "192.0.2.1:4000")
			if ok != (i < 8) {
				t.Fatalf("stream %d: opened %v (%d %s)", i+1, ok, c.w.Code, c.w.Body)
			}
			if ok {
				open = append(open, c)
			}
		}
		for _, c := range open {
			c.end()
		}
	}
	for range 300 {
		round()
	}
	if s, sc, c, cc := web.Held(h); s != 0 || sc != 0 || c != 0 || cc != 0 {
		t.Fatalf("after 300 rounds: %d streams by %d clients, %d calls by %d clients held", s, sc, c, cc)
	}
	round()
	// Past the total (MaxStreams), any client gets 503; the refusal holds
	// nothing.
	many := web.Handler(f, web.Options{Hosts: mustHosts(t), MaxStreams: 1})
	a, ok := begin(many, f.subscribed, "GET", "/api/events", "192.0.2.1:1")
	if !ok {
		t.Fatal("first stream refused")
	}
	b, ok := begin(many, f.subscribed, "GET", "/api/events", "192.0.2.2:1")
	if ok || b.w.Code != http.StatusServiceUnavailable || !strings.Contains(b.w.Body.String(), "manager's limit") {
		t.Fatalf("second stream over MaxStreams 1: %d %s; want 503", b.w.Code, b.w.Body)
	}
	a.end()
	if s, sc, _, _ := web.Held(many); s != 0 || sc != 0 {
		t.Fatalf("%d streams by %d clients held", s, sc)
	}
}

func mustHosts(t *testing.T) *web.HostCheck {
	hc, err := web.NewHostCheck("", []string{"grid.test"})
	if err != nil {
		t.Fatal(err)
	}
	return hc
}

// Requests that ask the grid (here /api/tree, held by the backend) are
// bounded per client (8) and in all: a 9th from one client gets 429
// while another client's passes and requests that do not ask the grid
// are served; past MaxCalls, 503. All are freed when answered.
func TestCallsPerClient(t *testing.T) {
	f := &fake{gate: make(chan struct{}), entered: make(chan struct{}, 64)}
	h := limited(t, f, web.Options{MaxCalls: 10})
	var inFlight []*call
	for i := range 8 {
		c, ok := begin(h, f.entered, "GET", "/api/tree", "192.0.2.1:1000")
		if !ok {
			t.Fatalf("call %d refused: %d %s", i+1, c.w.Code, c.w.Body)
		}
		inFlight = append(inFlight, c)
	}
	for _, path := range []string{"/api/tree", "/api/apps", "/api/manager?peer=gm154", "/api/utilization", "/api/recent"} {
		c, ok := begin(h, f.entered, "GET", path, "192.0.2.1:1000")
		if ok {
			t.Fatalf("%s: a 9th call from one client reached the grid", path)
		}
		if c.w.Code != http.StatusTooManyRequests || !strings.Contains(c.w.Body.String(), "per-client limit") || c.w.Header().Get("Retry-After") == "" {
			t.Errorf("%s: 9th call: %d %s; want 429 naming the per-client limit", path, c.w.Code, c.w.Body)
		}
	}
	for _, path := range []string{"/api/self", "/"} {
		if c, ok := begin(h, f.entered, "GET", path, "192.0.2.1:1000"); ok || c.w.Code != 200 {
			t.Errorf("%s from the busy client: %d", path, c.w.Code)
		}
	}
	for _, remote := range []string{"192.0.2.2:1000", "192.0.2.3:1000"} {
		c, ok := begin(h, f.entered, "GET", "/api/tree", remote)
		if !ok {
			t.Fatalf("%s refused while another client holds its 8: %d %s", remote, c.w.Code, c.w.Body)
		}
		inFlight = append(inFlight, c)
	}
	c, ok := begin(h, f.entered, "GET", "/api/tree", "192.0.2.4:1000")
	if ok || c.w.Code != http.StatusServiceUnavailable || !strings.Contains(c.w.Body.String(), "10 requests to the grid at once") {
		t.Fatalf("11th call over MaxCalls 10: %d %s; want 503", c.w.Code, c.w.Body)
	}
	if _, _, n, clients := web.Held(h); n != 10 || clients != 3 {
		t.Errorf("held: %d calls by %d clients; want 10 by 3", n, clients)
	}
	close(f.gate)
	for _, c := range inFlight {
		<-c.done
		if c.w.Code != 200 {
			t.Errorf("held call answered %d %s", c.w.Code, c.w.Body)
		}
		c.stop()
	}
	if _, _, n, clients := web.Held(h); n != 0 || clients != 0 {
		t.Errorf("after the answers: %d calls by %d clients held", n, clients)
	}
}

// stalled is a client that stopped reading: a flush blocks until the
// write deadline the handler set passes (and for ever without one).
type stalled struct {
	hdr      http.Header
	mu       sync.Mutex
	deadline time.Time
	gone     chan struct{} // closed when the test ends
}

func (s *stalled) Header() http.Header         { return s.hdr }
func (s *stalled) WriteHeader(int)             {}
func (s *stalled) Write(b []byte) (int, error) { return len(b), nil }
func (s *stalled) Flush()                      { _ = s.FlushError() }
func (s *stalled) SetWriteDeadline(t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadline = t
	return nil
}
func (s *stalled) FlushError() error {
	s.mu.Lock()
	d := s.deadline
	s.mu.Unlock()
	var expire <-chan time.Time
	if !d.IsZero() {
		expire = time.After(time.Until(d))
	}
	select {
	case <-expire:
		return os.ErrDeadlineExceeded
	case <-s.gone:
		return errors.New("test over")
	}
}

// A stream whose client does not read is closed once a message has
// waited StreamWriteTimeout, and its slot is freed: a client cannot keep
// a slot by not reading.
func TestStalledStreamClosed(t *testing.T) {
	f := &fake{}
	h := limited(t, f, web.Options{StreamWriteTimeout: 50 * time.Millisecond})
	w := &stalled{hdr: http.Header{}, gone: make(chan struct{})}
	defer close(w.gone)
	req := httptest.NewRequest("GET", "http://grid.test/api/events", nil)
	req.RemoteAddr = "192.0.2.1:1000"
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(w, req)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a guard only: the handler ends 50 ms after it writes
		t.Fatal("the stream to a client that does not read was not closed: no write deadline")
	}
	if s, sc, _, _ := web.Held(h); s != 0 || sc != 0 {
		t.Fatalf("%d streams by %d clients held after the stalled stream ended", s, sc)
	}
}
