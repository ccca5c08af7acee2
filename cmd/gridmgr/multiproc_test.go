package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The gridmgr binary the multi-process tests run, built once per test
// process (linking it takes seconds; a dozen tests use it) into a
// directory TestMain removes.
var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// buildBinary is the gridmgr binary built from this tree.
func buildBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "gridmgr-test-bin-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "gridmgr")
		out, err := exec.Command("go", "build", "-o", built.bin, ".").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Six `gridmgr run` processes from configs/, started in reverse order
// (leaves first, the root last), form the patent tree; the CLI sees it; and
// each process exits cleanly on SIGTERM.
func TestMultiProcessFromConfigs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs six processes")
	}
	names := []string{"gm152", "gm154", "gm156", "gm160", "gm162", "gm164"}
	for _, n := range names {
		for _, port := range []string{"4" + n[2:], "8" + n[2:]} { // listen, http_listen
			l, err := net.Listen("tcp", "127.0.0.1:"+port)
			if err != nil {
				t.Fatalf("port %s (from configs/%s.toml) is not free: %v", port, n, err)
			}
			l.Close()
		}
	}
	bin := buildBinary(t)
	data := t.TempDir()
	type proc struct {
		name string
		cmd  *exec.Cmd
		log  *syncBuf
	}
	var procs []*proc
	t.Cleanup(func() {
		for _, p := range procs {
			if p.cmd.ProcessState == nil {
				p.cmd.Process.Kill()
				p.cmd.Wait()
			}
		}
	})
	for i := len(names) - 1; i >= 0; i-- {
		n := names[i]
		p := &proc{name: n, log: &syncBuf{}}
		p.cmd = exec.Command(bin, "run", "-c", filepath.Join("..", "..", "configs", n+".toml"),
			"--data-dir", filepath.Join(data, n), "--log-level", "info")
		p.cmd.Stderr = p.log
		p.cmd.Stdout = p.log
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
		time.Sleep(150 * time.Millisecond) // stagger the starts so that leaves retry their superiors
	}
	logs := func() string {
		var b strings.Builder
		for _, p := range procs {
			fmt.Fprintf(&b, "--- %s ---\n%s\n", p.name, p.log.String())
		}
		return b.String()
	}

	want := []string{"gm152", "├── gm154  up", "│   ├── gm160  up", "│   └── gm162  up", "└── gm156  up", "    └── gm164  up"}
	deadline := time.Now().Add(30 * time.Second)
	var last string
	formed := false
	for time.Now().Before(deadline) && !formed {
		out, err := exec.Command(bin, "tree", "-d", filepath.Join(data, "gm152"), "--timeout", "2s").CombinedOutput()
		last = string(out)
		formed = err == nil
		for _, w := range want {
			formed = formed && strings.Contains(last, w)
		}
		if !formed {
			time.Sleep(100 * time.Millisecond) // polling real processes
		}
	}
	if !formed {
		t.Fatalf("tree not formed in 30s; last `gridmgr tree`:\n%s\n%s", last, logs())
	}
	t.Logf("tree from the CLI:\n%s", last)

	// Each process serves /metrics on the http_listen of its file.
	for _, n := range names {
		resp, err := http.Get("http://127.0.0.1:8" + n[2:] + "/metrics")
		if err != nil {
			t.Fatalf("%s /metrics: %v", n, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `gridmgr_relations{role="superior",state="up"}`) {
			t.Fatalf("%s /metrics: %s\n%.500s", n, resp.Status, body)
		}
	}

	// A query from a separate CLI process at a leaf finds all six managers,
	// and every offered address can be dialled by the CLI.
	out, err := exec.Command(bin, "query", "-d", filepath.Join(data, "gm160"), "--want", "100", "--json", "cpus >= 1").Output()
	if err != nil {
		t.Fatalf("gridmgr query: %v\n%s", err, out)
	}
	var rep struct {
		Offers []struct {
			Name  string
			Peer  string
			Addrs []string
		}
		Visited int
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("query --json: %v\n%s", err, out)
	}
	if len(rep.Offers) != 6 || rep.Visited != 6 {
		t.Fatalf("query found %d offers visiting %d managers, want 6 and 6:\n%s", len(rep.Offers), rep.Visited, out)
	}
	for _, o := range rep.Offers {
		if len(o.Addrs) == 0 {
			t.Fatalf("offer of %s has no address", o.Name)
		}
		addr := o.Addrs[0] + "/p2p/" + o.Peer
		if out, err := exec.Command(bin, "ping", "-n", addr, "--count", "1").CombinedOutput(); err != nil || !strings.Contains(string(out), o.Name+": round trip") {
			t.Fatalf("cannot dial the offer of %s at %s: %v\n%s", o.Name, addr, err, out)
		}
	}

	// The leaves really did start before their superiors and retried.
	if !strings.Contains(procs[0].log.String(), "superior not up, will retry") {
		t.Errorf("gm164 (started first) never logged a retry:\n%s", procs[0].log.String())
	}

	for _, p := range procs {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s exited with %v\n%s", p.name, err, p.log.String())
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s did not exit within 10s of SIGTERM", p.name)
		}
		if _, err := os.Stat(filepath.Join(data, p.name, "addr")); !os.IsNotExist(err) {
			t.Errorf("%s left its addr file behind", p.name)
		}
	}
}
