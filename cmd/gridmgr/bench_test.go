package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"

	"github.com/gridmgr/gridmgr/daemon"
)

// rssKB reads a process's resident set size from /proc.
func rssKB(b *testing.B, pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb
		}
	}
	b.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

// medianRSS samples a process's RSS n times, 200ms apart, and returns the
// median.
func medianRSS(b *testing.B, pid, n int) int {
	var s []int
	for i := 0; i < n; i++ {
		s = append(s, rssKB(b, pid))
		time.Sleep(200 * time.Millisecond) // sampling a live process
	}
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkIdleRSS compares the resident memory of one idle `gridmgr run`
// (a single manager, no relations) with a bare libp2p host process with the
// same transport stack (node/p2p/internal/barehost), both started and
// measured side by side in the same run (goal ≤ 1.35); "web" runs the
// manager with http_listen (the web UI and /metrics), both fetched once
// before measuring (goal ≤ 1.4).
//
//	go test -run XXX -bench IdleRSS -benchtime 1x ./cmd/gridmgr/
func BenchmarkIdleRSS(b *testing.B) {
	b.Run("plain", func(b *testing.B) { idleRSS(b, false) })
	b.Run("web", func(b *testing.B) { idleRSS(b, true) })
}

func idleRSS(b *testing.B, web bool) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "gridmgr")
	bare := filepath.Join(dir, "barehost")
	for _, c := range [][]string{{"build", "-o", bin, "."}, {"build", "-o", bare, "../../node/p2p/internal/barehost"}} {
		if out, err := exec.Command("go", c...).CombinedOutput(); err != nil {
			b.Fatalf("go %v: %v\n%s", c, err, out)
		}
	}
	cfg := filepath.Join(dir, "idle.toml")
	props := "name = \"idle\"\nlisten = [\"/ip4/127.0.0.1/tcp/0\"]\ndata_dir = \"data\"\nlog_level = \"warn\"\n"
	httpPort := 0
	if web {
		httpPort = freePort(b)
		props += fmt.Sprintf("http_listen = \"127.0.0.1:%d\"\n", httpPort)
	}
	os.WriteFile(cfg, []byte(props), 0o644)

	for i := 0; i < b.N; i++ {
		bh := exec.Command(bare)
		out, _ := bh.StdoutPipe()
		if err := bh.Start(); err != nil {
			b.Fatal(err)
		}
		if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
			b.Fatalf("barehost did not start: %v", err)
		}
		gm := exec.Command(bin, "run", "-c", cfg)
		if err := gm.Start(); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := daemon.ReadAddrFile(filepath.Join(dir, "data")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("gridmgr did not write its addr file")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if web {
			for _, path := range []string{"/", "/metrics", "/static/app.js", "/api/tree"} {
				resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", httpPort, path))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
		time.Sleep(2 * time.Second) // let both settle into idle
		var bareKB, gmKB []int
		for j := 0; j < 5; j++ {
			bareKB = append(bareKB, medianRSS(b, bh.Process.Pid, 1))
			gmKB = append(gmKB, medianRSS(b, gm.Process.Pid, 1))
		}
		slices.Sort(bareKB)
		slices.Sort(gmKB)
		bh.Process.Signal(os.Interrupt)
		gm.Process.Signal(os.Interrupt)
		bh.Wait()
		gm.Wait()
		b.ReportMetric(float64(bareKB[2])/1024, "bare-MiB")
		b.ReportMetric(float64(gmKB[2])/1024, "gridmgr-MiB")
		b.ReportMetric(float64(gmKB[2])/float64(bareKB[2]), "ratio")
	}
}

// BenchmarkDemoFormation measures the time from starting the demo's six
// managers to the full tree (both ends of all five relations up), against a
// baseline of the same work in bare libp2p: six hosts created and five
// connections with one stream each, in the same run.
//
//	go test -run XXX -bench DemoFormation -benchtime 20x ./cmd/gridmgr/
func BenchmarkDemoFormation(b *testing.B) {
	c := &cli{stdout: devNull{}, stderr: devNull{}}
	var demoT, bareT time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		g, err := startDemoGrid(time.Second, "error", c, nil)
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-g.formed:
		case <-time.After(30 * time.Second):
			b.Fatal("demo grid did not form")
		}
		demoT += time.Since(t0)
		b.StopTimer()
		g.stop()
		b.StartTimer()

		t1 := time.Now()
		bareTree(b)
		bareT += time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(demoT.Microseconds())/n/1e3, "demo-ms")
	b.ReportMetric(float64(bareT.Microseconds())/n/1e3, "bare-ms")
	b.ReportMetric(float64(demoT)/float64(bareT), "ratio")
}

type devNull struct{}

func (devNull) Write(p []byte) (int, error) { return len(p), nil }

// bareTree builds the demo's shape with bare libp2p hosts: six hosts, five
// connections, one stream opened on each.
func bareTree(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	made := map[string]host.Host{}
	defer func() {
		for _, h := range made {
			h.Close()
		}
	}()
	for _, e := range demoTree {
		h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.Transport(tcp.NewTCPTransport),
			libp2p.Security(noise.ID, noise.New), libp2p.Muxer(yamux.ID, yamux.DefaultTransport), libp2p.DisableRelay())
		if err != nil {
			b.Fatal(err)
		}
		h.SetStreamHandler("/bench/tree", func(s network.Stream) { s.Close() })
		made[e[0]] = h
		if sup := e[1]; sup != "" {
			s := made[sup]
			if err := h.Connect(ctx, peer.AddrInfo{ID: s.ID(), Addrs: s.Addrs()}); err != nil {
				b.Fatal(err)
			}
			st, err := h.NewStream(ctx, s.ID(), "/bench/tree")
			if err != nil {
				b.Fatal(err)
			}
			st.Close()
		}
	}
}

func freePort(b testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
