package main

import (
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/node/p2p"
)

// The demo makes this machine's client key (the one the CLI uses by
// default) an admin of its grid and says so: a changing admin command from
// the CLI runs on every manager, and another key is still refused.
func TestDemoAdminIsLocalClientKey(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo's tour")
	}
	keys := t.TempDir()
	mine := filepath.Join(keys, "mine.key")
	t.Setenv("GRIDMGR_CLIENT_KEY", mine)
	stop := make(chan struct{})
	out := &syncBuf{}
	errb := &syncBuf{}
	c := &cli{stdout: out, stderr: errb, interrupt: stop}
	done := make(chan int, 1)
	go func() { done <- c.main([]string{"demo", "--web", ""}) }()
	stopped := false
	stopDemo := func() {
		if !stopped {
			stopped = true
			close(stop)
			if code := <-done; code != 0 {
				t.Errorf("demo exit %d\n%s\n%s", code, out.String(), errb.String())
			}
		}
	}
	defer stopDemo()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "From another terminal try:") {
		select {
		case code := <-done:
			t.Fatalf("demo exit %d before its grid was up\n%s\n%s", code, out.String(), errb.String())
		case <-time.After(50 * time.Millisecond): // waiting for the tour, not timing it
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo not up within 60s\n%s", out.String())
		}
	}
	text := out.String()
	key, err := p2p.ReadIdentity(mine)
	if err != nil {
		t.Fatalf("the demo did not create the client key: %v", err)
	}
	if want := "admin: this machine's client key " + mine + " (peer " + p2p.PeerIDOf(key) + ") is in every demo manager's admins"; !strings.Contains(text, want) {
		t.Fatalf("the demo does not say %q:\n%s", want, text)
	}
	m := regexp.MustCompile(` admin  -d (\S+) --all 'set attribute rack r7'`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("the demo suggests no admin command:\n%s", text)
	}
	root := m[1]

	// The suggested command, as the user would type it.
	code, stdout, stderr := run(t, "admin", "-d", root, "--all", "--timeout", "10s", "set attribute rack r7")
	if code != 0 || !strings.Contains(stdout, "6 manager(s) answered, 0 failed") {
		t.Fatalf("admin --all from the local client key: exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = run(t, "query", "-d", root, "--want", "6", "attrs.rack == 'r7'")
	if code != 0 || !strings.Contains(stdout, "6 offer(s) shown of 6 matched") {
		t.Fatalf("the change is not in force on every manager: exit %d\n%s\n%s", code, stdout, stderr)
	}

	// Another key is still refused.
	t.Setenv("GRIDMGR_CLIENT_KEY", filepath.Join(keys, "other.key"))
	code, stdout, stderr = run(t, "admin", "-d", root, "drain")
	if code != 1 || !strings.Contains(stderr, "only the peers in its admins list") {
		t.Fatalf("another key's drain: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	stopDemo()
}

// The demo's hints run the program the way it was started.
func TestInvocation(t *testing.T) {
	wd, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	onPath := func(name string) (string, error) {
		if name == "gridmgr" {
			return "/usr/local/bin/gridmgr", nil
		}
		return "", errors.New("not found")
	}
	for _, c := range []struct{ arg0, exe, want string }{
		{"/tmp/go-build2961/b001/exe/gridmgr", "/tmp/go-build2961/b001/exe/gridmgr", "go run ./cmd/gridmgr"},
		{"gridmgr", "/usr/local/bin/gridmgr", "gridmgr"},
		{"./gridmgr", wd + "/gridmgr", wd + "/gridmgr"},
		{"bin/gridmgr", "/srv/gridmgr-1.2", wd + "/bin/gridmgr"},
		{"/opt/grid tools/gridmgr", "/opt/grid tools/gridmgr", `'/opt/grid tools/gridmgr'`},
		{"gm", "/home/a/bin/gm", "/home/a/bin/gm"}, // started by a name that $PATH does not find
		{"", "", "gridmgr"},
	} {
		if got := invocation(c.arg0, c.exe, onPath); got != c.want {
			t.Errorf("invocation(%q, %q) = %s, want %s", c.arg0, c.exe, got, c.want)
		}
	}
}
