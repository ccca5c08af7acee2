package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// BenchmarkEarliestSearch: a 1,000-manager tree (fan-out 10, 1 ms links)
// on the simulated network, each manager with 16 cpus and ten 4-cpu
// windows booked over the next two days. From the root it runs a plain
// whole-grid query ("cpus_free >= 8") and the earliest-window search for
// the same amounts (8 cpus for 3 h on 10 managers), alternately, b.N of
// each. It reports each one's latency in virtual time (the walk's hops)
// and its wall time per query (what the managers computed), and the
// ratios earliest ÷ plain (goal ≤ 2).
//
//	go test -run '^$' -bench EarliestSearch -benchtime 20x ./node/
func BenchmarkEarliestSearch(b *testing.B) {
	const managers, fanout = 1000, 10
	n := newNet(7)
	name := func(i int) string { return fmt.Sprintf("m%04d", i) }
	startTree(b, n, managers, fanout, name, func(i int) node.HostValues {
		return node.HostValues{CPUs: 16, Mem: 64 << 30, MemAvail: 64 << 30, CPUUtil: 0.1, Hostname: name(i), OS: "linux", Arch: "amd64"}
	})
	for i := range managers {
		for w := range 10 {
			begin := n.Now().Add(time.Duration((i*7+w*5)%48) * time.Hour)
			rep := n.Ask(pid(name(i)), &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
				RequestId: fmt.Sprintf("w%d", w), Amounts: []*wire.Amount{{Kind: "cpus", N: 4}}, Commit: true,
				BeginUnixMs: begin.UnixMilli(), DurationMs: uint64(3 * time.Hour / time.Millisecond)}}}, time.Second)
			if rep.GetReservationReply() == nil && rep.GetError().GetCode() != wire.ErrorReply_CODE_REFUSED {
				b.Fatalf("booking a window at %s: %v", name(i), rep)
			}
		}
	}
	ask := func(earliest bool) (virt, wall time.Duration, rep *wire.QueryReply) {
		q := &wire.QueryRequest{Requirement: "cpus_free >= 8", Cpus: 8, Down: 255, Up: 255, Want: 10, Limit: 10, BudgetMs: 10000}
		if earliest {
			q.Requirement, q.Earliest, q.DurationMs = "true", true, uint64(3*time.Hour/time.Millisecond)
		}
		t0, w0 := n.Now(), time.Now()
		env := n.Ask(pid(name(0)), &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: q}}, 20*time.Second)
		virt, wall = n.Now().Sub(t0), time.Since(w0)
		if rep = env.GetQueryReply(); rep == nil {
			b.Fatalf("query: %v", env)
		}
		return virt, wall, rep
	}
	var pv, pw, ev, ew time.Duration
	var visited uint32
	for b.Loop() {
		v, w, rep := ask(false)
		pv, pw = pv+v, pw+w
		v, w, rep = ask(true)
		ev, ew = ev+v, ew+w
		if rep.Earliest == nil || !rep.Earliest.Found || len(rep.Earliest.Managers) != 10 {
			b.Fatalf("the earliest search found nothing: %v", rep.Earliest)
		}
		visited = rep.Visited
	}
	N := float64(b.N)
	b.ReportMetric(float64(visited), "managers")
	b.ReportMetric(pv.Seconds()*1000/N, "plain_virtual_ms")
	b.ReportMetric(ev.Seconds()*1000/N, "earliest_virtual_ms")
	b.ReportMetric(pw.Seconds()*1000/N, "plain_wall_ms")
	b.ReportMetric(ew.Seconds()*1000/N, "earliest_wall_ms")
	b.ReportMetric(float64(ev)/float64(pv), "x_plain_virtual")
	b.ReportMetric(float64(ew)/float64(pw), "x_plain_wall")
}

// startTree adds managers name(0)… to n in a tree of fanout (name(0) the
// root), each on host(i), starts them and runs until the tree is up.
func startTree(tb testing.TB, n *memnet.Net, managers, fanout int, name func(int) string, host func(int) node.HostValues) {
	tb.Helper()
	for i := range managers {
		cfg := config.Default()
		cfg.Name = name(i)
		if i > 0 {
			cfg.Superiors = []peeraddr.PeerAddrs{peerAddrs(name((i - 1) / fanout))}
		}
		if err := cfg.Validate(); err != nil {
			tb.Fatal(err)
		}
		hv := host(i)
		n.Add(pid(name(i)), cfg).Host = &hv
	}
	for i := range managers {
		n.Start(pid(name(i)))
	}
	if !n.RunUntil(func() bool { return treeUp(n, managers) }, 5*time.Minute) {
		tb.Fatal("the tree did not form")
	}
}

// treeUp reports whether every manager but the root has its superior up.
func treeUp(n *memnet.Net, managers int) bool {
	up := 0
	for _, nd := range n.Nodes() {
		if nd.Core == nil {
			continue
		}
		for _, r := range nd.Core.Relations().Superiors() {
			if r.State == relations.Up {
				up++
				break
			}
		}
	}
	return up == managers-1
}
