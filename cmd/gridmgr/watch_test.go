package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

// lockedBuf is a bytes.Buffer safe for a command writing while the test
// reads.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// As a user runs them: watch prints a reservation made at the far end of
// the tree, --under keeps one subtree, events reads the archive back,
// web-token prints the token; bad flags exit 2 with the flag named.
func TestWatchEventsAndWebToken(t *testing.T) {
	g := formedWebDemo(t, 100*time.Millisecond)
	rootDir := g.mgrs["gm152"].Cfg.DataDir

	var errbs []*lockedBuf
	watch := func(args ...string) (*lockedBuf, chan int, chan struct{}) {
		var out, errb lockedBuf
		errbs = append(errbs, &errb)
		stop := make(chan struct{})
		wc := &cli{stdout: &out, stderr: &errb, interrupt: stop}
		done := make(chan int, 1)
		go func() { done <- wc.main(append([]string{"watch", "-d", rootDir}, args...)) }()
		return &out, done, stop
	}
	reserveAt := func(name string, i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := g.mgrs[name].Driver.Request(ctx, &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
			RequestId: name + strconv.Itoa(i), Amounts: []*wire.Amount{{Kind: "cpus", N: 1}}, HoldMs: 1000}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Everything, then only gm156's subtree (gm164 is in it, gm160 not).
	all, allDone, _ := watch("--kind", "reservation", "--count", "1")
	under, underDone, stopUnder := watch("--kind", "reservation", "--under", "gm156")
	var code int
	for i := 0; ; i++ {
		reserveAt("gm160", i)
		reserveAt("gm164", i)
		select {
		case code = <-allDone:
		case <-time.After(200 * time.Millisecond):
			if i > 50 {
				t.Fatalf("watch printed nothing; stderr: %q %q", errbs[0].String(), errbs[1].String())
			}
			continue
		}
		break
	}
	if code != 0 || !strings.Contains(all.String(), "reservation/held") {
		t.Fatalf("watch exit %d, printed %q", code, all.String())
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(under.String(), "gm164") && time.Now().Before(deadline) {
		reserveAt("gm164", 1000+int(time.Now().UnixMilli()%100000))
		time.Sleep(100 * time.Millisecond) // polling the output of a live command
	}
	close(stopUnder)
	if code := <-underDone; code != 0 {
		t.Fatalf("watch --under exit %d", code)
	}
	if got := under.String(); !strings.Contains(got, "gm164") || strings.Contains(got, "gm160") {
		t.Fatalf("watch --under gm156 printed:\n%s", got)
	}

	// The root archives what reaches it.
	code, out, stderr := run(t, "events", "-d", rootDir, "--since", "10m", "--filter", `event.kind == "reservation" && event.manager == "gm164"`)
	if code != 0 || !strings.Contains(out, "gm164") || strings.Contains(out, "gm160 ") {
		t.Fatalf("events exit %d:\n%s\n%s", code, out, stderr)
	}
	code, out, _ = run(t, "web-token", "-d", rootDir)
	if code != 0 || !regexp.MustCompile(`^[0-9a-f]{64}\n$`).MatchString(out) {
		t.Fatalf("web-token exit %d: %q", code, out)
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"watch", "-d", rootDir, "--kind", "nope"}, "unknown event kind"},
		{[]string{"watch", "-d", rootDir, "--under", "gm999"}, "--under gm999"},
		{[]string{"watch", "-d", rootDir, "--filter", "event.kind =="}, "--filter"},
		{[]string{"events", "-d", rootDir, "--since", "yesterday"}, "--since"},
		{[]string{"events", "-d", rootDir, "--limit", "0"}, "--limit"},
		{[]string{"events", "-d", g.mgrs["gm154"].Cfg.DataDir}, "archive"},
		{[]string{"web-token"}, "-c FILE"},
	} {
		code, _, stderr := run(t, bad.args...)
		if code == 0 || !strings.Contains(stderr, bad.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error naming %q", bad.args, code, stderr, bad.want)
		}
	}
}

// formedWebDemo starts the demo grid with the web UI and the archive at
// gm152 and the given heartbeat, waits until it has formed, and stops it
// at the end of the test.
func formedWebDemo(t *testing.T, heartbeat time.Duration) *demoGrid {
	t.Helper()
	c := &cli{stdout: devNull{}, stderr: devNull{}}
	g, err := startDemoGridWeb(heartbeat, "error", "127.0.0.1:0", c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.stop)
	select {
	case <-g.formed:
	case <-time.After(20 * time.Second):
		t.Fatal("the demo grid did not form")
	}
	return g
}
