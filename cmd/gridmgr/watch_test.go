package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// Job events print as one line each, with watch --kind job as with
// events: a job submitted at gm160 shows at the root as
// "job/submitted gm160.1 for alice"; --json prints the event itself.
func TestWatchJobEvents(t *testing.T) {
	g := formedWebDemo(t, 100*time.Millisecond)
	rootDir := g.mgrs["gm152"].Cfg.DataDir
	var out, errb lockedBuf
	stop := make(chan struct{})
	done := make(chan int, 1)
	go func() {
		done <- (&cli{stdout: &out, stderr: &errb, interrupt: stop}).main([]string{"watch", "-d", rootDir, "--kind", "job"})
	}()
	for !strings.Contains(errb.String(), "watching") {
		select {
		case code := <-done:
			t.Fatalf("watch exit %d: %s", code, errb.String())
		case <-time.After(20 * time.Millisecond): // polling the command's stderr
		}
	}
	at := g.mgrs["gm160"]
	ask := func(req *wire.JobRequest) *wire.JobReply {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rep, err := at.Driver.Request(ctx, &wire.Envelope{Body: &wire.Envelope_JobRequest{JobRequest: req}})
		if err != nil || rep.GetJobReply() == nil {
			t.Fatalf("%v: %v %v", req.Op, rep, err)
		}
		return rep.GetJobReply()
	}
	bundle := []byte("not a bundle: the job never runs")
	sum := sha256.Sum256(bundle)
	sha := hex.EncodeToString(sum[:])
	ask(&wire.JobRequest{Op: wire.JobRequest_OP_BLOB, Sha256: sha, Size: int64(len(bundle)), Data: bundle})
	var cluster string
	for i := 0; ; i++ {
		// Idle for ever (no manager is named nowhere); submitted again
		// until the watch, whose subscription may not have reached the
		// root's mesh yet, prints one.
		cluster = ask(&wire.JobRequest{Op: wire.JobRequest_OP_SUBMIT, RequestId: "watch-" + strconv.Itoa(i), User: "alice",
			Jobs: []*wire.JobSpec{{Name: "idle", Count: 1, BundleSha256: sha, App: "x", Cpus: 1, Mem: 64 << 20, RuntimeMs: 60000,
				Requirement: `name == "nowhere"`, InDir: "in", OutDir: "out"}}}).Cluster
		time.Sleep(200 * time.Millisecond) // the event's trip to the root
		if strings.Contains(out.String(), "job/submitted") || i > 25 {
			break
		}
	}
	close(stop)
	<-done
	line := regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} gm160    job/submitted (gm160\.\d+) for alice$`)
	if !line.MatchString(out.String()) {
		t.Fatalf("watch --kind job printed:\n%s\nstderr: %s\nwant a line like job/submitted %s for alice", out.String(), errb.String(), cluster)
	}
	if strings.Contains(out.String(), "reservation/") || strings.Contains(out.String(), "relation/") {
		t.Errorf("watch --kind job printed other kinds:\n%s", out.String())
	}
	// The root archived them: events prints them the same way.
	code, evs, stderr := run(t, "events", "-d", rootDir, "--since", "10m", "--filter", `event.kind == "job"`)
	if code != 0 || !line.MatchString(evs) {
		t.Fatalf("events exit %d:\n%s\n%s", code, evs, stderr)
	}
}
