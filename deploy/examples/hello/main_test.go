package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runHello runs the program in-process with args.
func runHello(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// greetingFile writes text as the greeting file and points
// GREETING_FILE at it.
func greetingFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "greeting.txt")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GREETING_FILE", p)
	return p
}

func TestInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "deeper")
	code, out, errOut := runHello("--init", dir)
	if code != 0 || out != "" || errOut != "" {
		t.Fatalf("--init: exit %d, %q, %q", code, out, errOut)
	}
	data, err := os.ReadFile(filepath.Join(dir, "initialized"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := time.Parse(time.RFC3339, strings.TrimSpace(string(data))); err != nil {
		t.Errorf("initialized holds %q, not a time: %v", data, err)
	}

	// A directory that cannot be made (a file is in the way; this holds
	// for root too): a plain message and exit 1, no usage.
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	code, _, errOut = runHello("--init", filepath.Join(file, "data"))
	if code != 1 || !strings.HasPrefix(errOut, "hello: ") || strings.Contains(errOut, "usage") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("--init under a file: exit %d, %q; want 1 and one line", code, errOut)
	}
}

func TestGreet(t *testing.T) {
	greetingFile(t, "Hi\n")
	if code, out, _ := runHello("--greet", "Ann", "Bob Smith"); code != 0 || out != "Hi, Ann!\nHi, Bob Smith!\n" {
		t.Errorf("--greet: exit %d, %q", code, out)
	}
	t.Setenv("GREETING_FILE", "")
	if code, out, _ := runHello("--greet", "Ann"); code != 0 || out != "Hello, Ann!\n" {
		t.Errorf("--greet without GREETING_FILE: exit %d, %q", code, out)
	}
	t.Setenv("GREETING_FILE", filepath.Join(t.TempDir(), "none.txt"))
	if code, _, errOut := runHello("--greet", "Ann"); code != 1 || !strings.Contains(errOut, "reading the greeting") {
		t.Errorf("--greet with a missing file: exit %d, %q", code, errOut)
	}
}

// TestGreetingFileOfTheManifest reads etc/greeting.txt relative to the
// working directory, as app.toml's GREETING_FILE is, from this directory
// (where it is the file the bundle places).
func TestGreetingFileOfTheManifest(t *testing.T) {
	t.Setenv("GREETING_FILE", "etc/greeting.txt")
	if code, out, errOut := runHello("--greet", "Ann"); code != 0 || out != "Hello, Ann!\n" {
		t.Errorf("--greet: exit %d, %q, %q", code, out, errOut)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--bogus"},
		{"-h"},
		{"--greet"},
		{"--greet=false", "Ann"},
		{"Ann", "--greet"},
		{"--init"},
		{"--init", ""},
		{"--listen", "127.0.0.1:0", "--stats", "127.0.0.1:1"},
		{"--stats", "127.0.0.1:1", "extra"},
	} {
		code, out, errOut := runHello(args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "usage: hello") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and the usage", args, code, out, errOut)
		}
	}
}

// clock is a settable time for the idle window.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestServer(t *testing.T, greeting string) (*server, *clock, string) {
	t.Helper()
	file := greetingFile(t, greeting)
	s, err := newServer(file)
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)}
	s.now = c.now
	return s, c, file
}

// get sends method path to h and returns the status and the body.
func get(h http.Handler, method, path string) (int, string) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w.Code, w.Body.String()
}

func TestHandlers(t *testing.T) {
	s, c, file := newTestServer(t, "Hi")
	h := s.handler()
	for _, tc := range []struct {
		name         string
		advance      time.Duration
		method, path string
		code         int
		body         string
	}{
		{"health", 0, "GET", "/healthz", 200, "ok\n"},
		{"idle before any greeting", 0, "GET", "/idle", 200, "idle\n"},
		{"stats before any greeting", 0, "GET", "/stats", 200, "requests 0\n"},
		{"greet", 0, "GET", "/?name=Ann", 200, "Hi, Ann!\n"},
		{"busy just after", 0, "GET", "/idle", 503, "busy\n"},
		{"busy within 30s", 29 * time.Second, "GET", "/idle", 503, "busy\n"},
		{"idle after 30s", time.Second, "GET", "/idle", 200, "idle\n"},
		{"greet no name", 0, "GET", "/", 200, "Hi, world!\n"},
		{"stats", 0, "GET", "/stats", 200, "requests 2\nlast_greeting world\n"},
		{"greet a name on lines", 0, "GET", "/?name=Jane%0A%09Doe", 200, "Hi, Jane\n\tDoe!\n"},
		{"stats on one line", 0, "GET", "/stats", 200, "requests 3\nlast_greeting Jane Doe\n"},
		{"probes are no requests", 0, "GET", "/stats", 200, "requests 3\nlast_greeting Jane Doe\n"},
		{"unknown path", 0, "GET", "/nope", 404, ""},
		{"reload must be POST", 0, "GET", "/reload", 405, ""},
		{"greet must be GET", 0, "POST", "/", 405, ""},
	} {
		c.t = c.t.Add(tc.advance)
		code, body := get(h, tc.method, tc.path)
		if code != tc.code || (tc.body != "" && body != tc.body) {
			t.Errorf("%s: %s %s: %d %q; want %d %q", tc.name, tc.method, tc.path, code, body, tc.code, tc.body)
		}
	}

	os.WriteFile(file, []byte("Howdy\n"), 0o644)
	if code, body := get(h, "POST", "/reload"); code != 200 || body != "greeting: Howdy\n" {
		t.Errorf("reload: %d %q", code, body)
	}
	if _, body := get(h, "GET", "/?name=Ann"); body != "Howdy, Ann!\n" {
		t.Errorf("after reload: %q", body)
	}
	os.Remove(file)
	if code, body := get(h, "POST", "/reload"); code != 500 || !strings.Contains(body, "reading the greeting") {
		t.Errorf("reload of a missing file: %d %q", code, body)
	}
	if _, body := get(h, "GET", "/?name=Ann"); body != "Howdy, Ann!\n" {
		t.Errorf("a failed reload changed the greeting: %q", body)
	}
}

// TestReloadAndStats runs --reload and --stats against the handlers.
func TestReloadAndStats(t *testing.T) {
	s, _, file := newTestServer(t, "Hi")
	ts := httptest.NewServer(s.handler())
	defer ts.Close()
	addr := strings.TrimPrefix(ts.URL, "http://")
	get(s.handler(), "GET", "/?name=Ann")

	if code, out, errOut := runHello("--stats", addr); code != 0 || out != "requests 1\nlast_greeting Ann\n" {
		t.Errorf("--stats: exit %d, %q, %q", code, out, errOut)
	}
	os.WriteFile(file, []byte("Howdy"), 0o644)
	if code, out, errOut := runHello("--reload", addr); code != 0 || out != "greeting: Howdy\n" {
		t.Errorf("--reload: exit %d, %q, %q", code, out, errOut)
	}
	os.Remove(file)
	if code, out, errOut := runHello("--reload", addr); code != 1 || out != "" || !strings.Contains(errOut, "500 Internal Server Error") {
		t.Errorf("--reload of a missing file: exit %d, %q, %q", code, out, errOut)
	}

	ts.Close()
	if code, _, errOut := runHello("--stats", addr); code != 1 || !strings.HasPrefix(errOut, "hello: ") {
		t.Errorf("--stats to no server: exit %d, %q", code, errOut)
	}
}

func TestBatch(t *testing.T) {
	s, c, _ := newTestServer(t, "Hi")
	dir := t.TempDir()
	in, out := filepath.Join(dir, "input"), filepath.Join(dir, "output")

	if err := s.batch(in, out); err != nil {
		t.Fatalf("no input directory: %v", err)
	}
	os.MkdirAll(filepath.Join(in, "dir.txt"), 0o755)
	os.WriteFile(filepath.Join(in, "names.txt"), []byte("Ann\n\n  Bob Smith \nCy"), 0o644)
	os.WriteFile(filepath.Join(in, "empty.txt"), nil, 0o644)
	os.WriteFile(filepath.Join(in, "notes.md"), []byte("Dee\n"), 0o644)
	if err := s.batch(in, out); err != nil {
		t.Fatal(err)
	}

	if data, _ := os.ReadFile(filepath.Join(out, "names.txt")); string(data) != "Hi, Ann!\nHi, Bob Smith!\nHi, Cy!\n" {
		t.Errorf("output/names.txt: %q", data)
	}
	if data, err := os.ReadFile(filepath.Join(out, "empty.txt")); err != nil || len(data) != 0 {
		t.Errorf("output/empty.txt: %q, %v", data, err)
	}
	if names := list(t, out); names != "empty.txt names.txt" {
		t.Errorf("output holds %s (a temporary file left?)", names)
	}
	if names := list(t, in); names != "dir.txt notes.md" {
		t.Errorf("input holds %s; want only what is not a .txt file", names)
	}
	if _, body := get(s.handler(), "GET", "/stats"); body != "requests 0\nlast_greeting Cy\n" {
		t.Errorf("stats after a batch: %q", body)
	}
	c.t = c.t.Add(idleAfter - time.Second)
	if code, _ := get(s.handler(), "GET", "/idle"); code != 503 {
		t.Errorf("idle just after a batch: %d", code)
	}

	// An output that cannot be written keeps the input for the next round.
	os.WriteFile(filepath.Join(in, "again.txt"), []byte("Ann\n"), 0o644)
	os.RemoveAll(out)
	os.WriteFile(out, nil, 0o644) // a file where the directory should be
	if err := s.batch(in, out); err == nil {
		t.Error("no error when output is a file")
	}
	if _, err := os.Stat(filepath.Join(in, "again.txt")); err != nil {
		t.Errorf("the input was lost: %v", err)
	}
}

// list is the names in dir, sorted, joined by spaces.
func list(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}

// TestServe serves on a real listener and stops when the context (the
// signal, in --listen) is done.
func TestServe(t *testing.T) {
	s, _, _ := newTestServer(t, "Hi")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	done := make(chan error, 1)
	dir := t.TempDir()
	go func() {
		done <- s.serve(ctx, ln, filepath.Join(dir, "input"), filepath.Join(dir, "output"), &out, &errOut)
	}()

	resp, err := http.Get("http://" + ln.Addr().String() + "/?name=Ann")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "Hi, Ann!\n" {
		t.Errorf("GET /: %s %q", resp.Status, body)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "serving on "+ln.Addr().String()) || lines[1] != "hello: stopped" || errOut.Len() != 0 {
		t.Errorf("logs: stdout %q, stderr %q", out.String(), errOut.String())
	}
	if _, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err == nil {
		t.Error("still serving after the shutdown")
	}
}

// TestListenBusyAddress: --listen on an address in use fails with exit 1.
func TestListenBusyAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Setenv("GREETING_FILE", "")
	if code, out, errOut := runHello("--listen", ln.Addr().String()); code != 1 || out != "" || !strings.Contains(errOut, "address already in use") {
		t.Errorf("--listen on a busy address: exit %d, %q, %q", code, out, errOut)
	}
}
