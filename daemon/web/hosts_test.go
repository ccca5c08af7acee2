package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/gridmgr/gridmgr/daemon/web"
)

// hostServer serves the UI on a loopback port, answering also to names.
func hostServer(t *testing.T, names ...string) (*httptest.Server, *fake, http.Handler, string) {
	t.Helper()
	f := &fake{}
	srv := httptest.NewUnstartedServer(nil)
	hc, err := web.NewHostCheck(srv.Listener.Addr().String(), names)
	if err != nil {
		t.Fatal(err)
	}
	h := web.Handler(f, web.Options{Token: token, Hosts: hc})
	srv.Config.Handler = h
	srv.Start()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return srv, f, h, port
}

// request sends method path to srv with Host host, as a page of that
// origin would (same-origin, with the admin token).
func request(t *testing.T, srv *httptest.Server, method, path, body, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Origin", "http://"+host)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") == "text/event-stream" {
		return resp.StatusCode, "(a live stream)" // it does not end by itself
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// every route of the UI, with a body that would pass.
var everyRoute = []struct{ method, path, body string }{
	{"GET", "/", ""},
	{"GET", "/static/app.js", ""},
	{"GET", "/static/vendor/cytoscape.min.js", ""},
	{"GET", "/api/self", ""},
	{"GET", "/api/tree", ""},
	{"GET", "/api/manager?peer=gm154", ""},
	{"GET", "/api/apps", ""},
	{"GET", "/api/utilization", ""},
	{"GET", "/api/recent", ""},
	{"GET", "/api/events", ""},
	{"POST", "/api/query", `{"requirement":"cpus_free > 1"}`},
	{"POST", "/api/admin", `{"command":"set log_level debug"}`},
	{"GET", "/nope", ""},
}

// DNS rebinding: a page at http://evil.example:PORT whose name now points
// at the manager sends Host: evil.example:PORT, same-origin as far as the
// browser knows. Every route refuses it, the event stream too, before
// anything reaches the grid; the refusal says which Host and which key.
func TestRebindingRefused(t *testing.T) {
	srv, f, _, port := hostServer(t, "grid.example.org", "10.9.8.7:8443")
	p, _ := strconv.Atoi(port)
	other := strconv.Itoa(p%65535 + 1)
	for _, host := range []string{
		"evil.example", "evil.example:" + port, "EVIL.example:" + port,
		"localhost.evil.example:" + port, "127.0.0.1.evil.example:" + port, "127.0.0.1.nip.io:" + port,
		"127.0.0.1:" + other, "localhost:" + other, // the right host, another port
		"[::1]:" + port,                         // loopback, but not the address listened on
		"grid.example.org.:" + port, "10.9.8.7", // near misses of the names given
		"10.9.8.7:8150", "[127.0.0.1]:" + port, "127.0.0.1:" + port + "x",
	} {
		for _, rt := range everyRoute {
			status, body := request(t, srv, rt.method, rt.path, rt.body, host)
			var e struct{ Error string }
			if status != http.StatusMisdirectedRequest || json.Unmarshal([]byte(body), &e) != nil ||
				!strings.Contains(e.Error, "host "+strconv.Quote(host)) || !strings.Contains(e.Error, "http_hosts") {
				t.Errorf("Host %s: %s %s: %d %.300s; want 421 naming the host and http_hosts", host, rt.method, rt.path, status, body)
			}
		}
	}
	if n := f.calls.Load(); n != 0 || len(f.admins) != 0 || len(f.subs) != 0 {
		t.Errorf("refused requests reached the grid: %d calls, admin %q, %d streams", n, f.admins, len(f.subs))
	}
}

// The listen address, localhost on a loopback listener and the names
// given pass, on every route, in the forms a browser writes them.
func TestHostsAccepted(t *testing.T) {
	srv, f, _, port := hostServer(t, "grid.example.org", "10.9.8.7:8443", "fd00::7")
	for _, host := range []string{
		"127.0.0.1:" + port, "localhost:" + port, "LocalHost:" + port,
		"grid.example.org", "grid.example.org:9999", "Grid.Example.ORG:" + port, // a name without a port: any port
		"10.9.8.7:8443", "[fd00::7]", "[fd00::7]:80",
	} {
		for _, rt := range everyRoute {
			if rt.path == "/api/events" || rt.path == "/nope" {
				continue
			}
			status, body := request(t, srv, rt.method, rt.path, rt.body, host)
			if status != http.StatusOK {
				t.Errorf("Host %s: %s %s: %d %.300s; want 200", host, rt.method, rt.path, status, body)
			}
		}
	}
	if len(f.admins) == 0 {
		t.Error("no admin command ran")
	}
	// The event stream opens for a name given.
	req, _ := http.NewRequest("GET", srv.URL+"/api/events", nil)
	req.Host = "grid.example.org"
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("event stream for grid.example.org: %s %q", resp.Status, resp.Header.Get("Content-Type"))
	}
}

// Without Options.Hosts the handler answers only to the address each
// connection arrived at (and localhost on loopback).
func TestHostsDefault(t *testing.T) {
	srv, _ := server(t, web.Options{})
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for host, want := range map[string]int{
		srv.Listener.Addr().String(): 200, "localhost:" + port: 200,
		"evil.example:" + port: 421, "evil.example": 421,
	} {
		if status, body := request(t, srv, "GET", "/api/self", "", host); status != want {
			t.Errorf("Host %s: %d %.200s; want %d", host, status, body, want)
		}
	}
}

// A listener on every address (0.0.0.0, ::) answers to each address of
// the host's interfaces, to the address a connection arrived at (one that
// came after start), to localhost and to the names given; a listener on
// one address that is not loopback, to it and the names only.
func TestHostsEveryAddress(t *testing.T) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var own []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ip, _ := netip.AddrFromSlice(n.IP)
			own = append(own, ip.Unmap())
		}
	}
	if len(own) == 0 {
		t.Fatal("no interface addresses")
	}
	stranger := netip.MustParseAddr("192.0.2.77") // TEST-NET-1
	for _, a := range own {
		if a == stranger {
			t.Skip("this host has 192.0.2.77")
		}
	}
	get := func(h http.Handler, host string, local net.Addr) int {
		req := httptest.NewRequest("GET", "/api/self", nil)
		req.Host = host
		if local != nil {
			req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, local))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	for _, listen := range []string{"0.0.0.0:8150", "[::]:8150"} {
		hc, err := web.NewHostCheck(listen, []string{"grid.example.org:8150"})
		if err != nil {
			t.Fatal(err)
		}
		h := web.Handler(&fake{}, web.Options{Hosts: hc})
		for _, ip := range own {
			if c := get(h, netip.AddrPortFrom(ip, 8150).String(), nil); c != 200 {
				t.Errorf("%s: own address %s: %d", listen, ip, c)
			}
			if c := get(h, netip.AddrPortFrom(ip, 8151).String(), nil); c != 421 {
				t.Errorf("%s: own address %s, another port: %d", listen, ip, c)
			}
		}
		arrived := &net.TCPAddr{IP: stranger.AsSlice(), Port: 8150}
		for _, c := range []struct {
			host  string
			local net.Addr
			want  int
		}{
			{"localhost:8150", nil, 200},
			{"grid.example.org:8150", nil, 200},
			{"grid.example.org:8151", nil, 421}, // given with its port
			{"evil.example:8150", nil, 421},
			{"192.0.2.77:8150", nil, 421},
			{"192.0.2.77:8150", arrived, 200},
			{"evil.example:8150", arrived, 421},
		} {
			if got := get(h, c.host, c.local); got != c.want {
				t.Errorf("%s: Host %s (connection to %v): %d, want %d", listen, c.host, c.local, got, c.want)
			}
		}
	}
	hc, err := web.NewHostCheck("10.1.2.3:8150", nil)
	if err != nil {
		t.Fatal(err)
	}
	h := web.Handler(&fake{}, web.Options{Hosts: hc})
	for host, want := range map[string]int{"10.1.2.3:8150": 200, "localhost:8150": 421, "127.0.0.1:8150": 421, "evil.example:8150": 421} {
		if got := get(h, host, nil); got != want {
			t.Errorf("10.1.2.3:8150: Host %s: %d, want %d", host, got, want)
		}
	}
}

// What the daemon serves beside the UI (/metrics) obeys the same check
// through Wrap: a scrape by IP:port passes, a rebinding page does not.
func TestHostCheckWrap(t *testing.T) {
	hc, err := web.NewHostCheck("127.0.0.1:9100", nil)
	if err != nil {
		t.Fatal(err)
	}
	metrics := hc.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "gridmgr_up 1\n") }))
	for host, want := range map[string]int{"127.0.0.1:9100": 200, "localhost:9100": 200, "evil.example:9100": 421, "evil.example": 421} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Host = host
		w := httptest.NewRecorder()
		metrics.ServeHTTP(w, req)
		if w.Code != want || want == 421 && !strings.Contains(w.Body.String(), "http_hosts") {
			t.Errorf("/metrics with Host %s: %d %s; want %d", host, w.Code, w.Body, want)
		}
	}
}

func TestNewHostCheckRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		listen string
		names  []string
	}{
		{"localhost:8150", nil}, // the listener's address, not a name
		{"127.0.0.1", nil},
		{"127.0.0.1:8150", []string{"grid.example.org/ui"}},
		{"127.0.0.1:8150", []string{"[::1"}},
		{"127.0.0.1:8150", []string{""}},
	} {
		if _, err := web.NewHostCheck(c.listen, c.names); err == nil {
			t.Errorf("NewHostCheck(%q, %q): no error", c.listen, c.names)
		}
	}
}
