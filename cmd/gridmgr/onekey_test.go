package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node/p2p"
)

// Fifty `gridmgr reserve` processes at once with the one default client
// key, as a script or a job wrapper runs them: every one reserves. Before
// the managers allowed one peer id more connections than libp2p's 8, 20 to
// 35 of them failed with "connection failed".
func TestOneKeyFiftyProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs fifty processes")
	}
	bin := buildBinary(t)
	cfg := config.Default()
	cfg.Name = "solo"
	cfg.DataDir = t.TempDir()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.Tokens = map[string]int64{"slots": 1000}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := daemon.Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	env := append(os.Environ(), "GRIDMGR_CLIENT_KEY="+filepath.Join(t.TempDir(), "client.key"))
	const n = 50
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []string
	)
	for i := range n {
		wg.Go(func() {
			cmd := exec.Command(bin, "reserve", "-n", m.Addr(), "--token", "slots=1", "--timeout", "30s")
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%d: %v: %s", i, err, out))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d of %d processes with one client key failed:\n%s", len(failed), n, strings.Join(failed, "\n"))
	}
}

// A refusal by a manager's limit that lasts until the --timeout says which
// limit refused and what to do, both at the connection and at the stream.
func TestLimitRefusalWords(t *testing.T) {
	t.Setenv("GRIDMGR_CLIENT_KEY", "/keys/ci.key")
	addr := "/ip4/127.0.0.1/tcp/4152/p2p/" + goodPeer
	conn := limitDialErr(addr, &p2p.LimitError{Manager: goodPeer, Conn: true, Tries: 9, For: 4900e6}).Error()
	stream := plainError(fmt.Errorf("solo: %w: %w: stream reset (remote): code: 0x1002", client.ErrClosed, p2p.ErrLimit))
	owner := plainError(fmt.Errorf("cannot reach manager …Jv: %w", &p2p.LimitError{Manager: goodPeer, Conn: true, Tries: 3, For: 2e9}))
	for _, c := range []struct {
		got  string
		want []string
	}{
		{conn, []string{"cannot reach the manager at " + addr, "refused the connection 9 times in 4.9s", "limit of connections from one peer id",
			"/keys/ci.key is the same peer id", "run fewer", "--timeout", "GRIDMGR_CLIENT_KEY=FILE"}},
		{owner, []string{"cannot reach manager …Jv: manager 12D3…SkJYjv refused the connection 3 times in 2s", "/keys/ci.key is the same peer id", "--timeout"}},
		{stream, []string{"solo: the manager refused this client's stream by one of its resource limits", "client streams from one peer id",
			"/keys/ci.key is the same peer id", "GRIDMGR_CLIENT_KEY=FILE"}},
	} {
		for _, w := range c.want {
			if !strings.Contains(c.got, w) {
				t.Errorf("%q lacks %q", c.got, w)
			}
		}
	}
	t.Logf("%s\n%s\n%s", conn, owner, stream)
}
