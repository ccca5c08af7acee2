package p2p_test

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/node/pb"
	"github.com/gridmgr/gridmgr/relations"
)

// bareHost is a libp2p host with gridmgr's transport stack and nothing else.
func bareHost(b testing.TB, listen bool) host.Host {
	opts := []libp2p.Option{libp2p.Transport(tcp.NewTCPTransport), libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport), libp2p.DisableRelay()}
	if listen {
		opts = append(opts, libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	} else {
		opts = append(opts, libp2p.NoListenAddrs)
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	return h
}

// rawEcho opens one long-lived stream to an echo handler and returns a
// function doing one round trip of n bytes on it: the floor any protocol
// over libp2p pays.
func rawEcho(b testing.TB, n int) func() {
	srv, cli := bareHost(b, true), bareHost(b, false)
	srv.SetStreamHandler("/bench/echo", func(s network.Stream) {
		buf := make([]byte, n)
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				s.Reset()
				return
			}
			if _, err := s.Write(buf); err != nil {
				return
			}
		}
	})
	ctx := context.Background()
	if err := cli.Connect(ctx, peer.AddrInfo{ID: srv.ID(), Addrs: srv.Addrs()}); err != nil {
		b.Fatal(err)
	}
	s, err := cli.NewStream(ctx, srv.ID(), "/bench/echo")
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, n)
	return func() {
		if _, err := s.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(s, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// relationPair starts a superior and an inferior manager and waits for the
// relation to be up; it returns the inferior.
func relationPair(b testing.TB) *p2p.Manager {
	dir := b.TempDir()
	mk := func(name string, sup *p2p.Manager) *p2p.Manager {
		cfg := node.DefaultConfig()
		cfg.Name = name
		cfg.DataDir = filepath.Join(dir, name)
		cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
		if sup != nil {
			cfg.Superiors = []relations.PeerAddrs{{Peer: sup.Host.PeerID(), Addrs: sup.Host.Addrs()}}
		}
		if err := cfg.Validate(); err != nil {
			b.Fatal(err)
		}
		m, err := p2p.Start(cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(m.Stop)
		return m
	}
	sup := mk("sup", nil)
	inf := mk("inf", sup)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if _, err := pingRelation(ctx, inf); err == nil {
			return inf
		}
		select {
		case <-ctx.Done():
			b.Fatal("relation did not come up")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// pingRelation asks the inferior, in-process, to ping its superior over the
// relation: a request and its answer through both Cores, both drivers and
// the long-lived mesh stream.
func pingRelation(ctx context.Context, m *p2p.Manager) (*pb.Envelope, error) {
	rep, err := m.Driver.Request(ctx, &pb.Envelope{Body: &pb.Envelope_PingRequest{PingRequest: &pb.PingRequest{Peer: "sup"}}})
	if err == nil && rep.GetPingReply() == nil {
		return rep, &p2p.RemoteError{Code: rep.GetError().GetCode(), Message: rep.GetError().GetMessage()}
	}
	return rep, err
}

// BenchmarkRelationRoundTrip measures a request over a relation against the
// raw libp2p stream round trip, interleaved in the same run so that the
// machine's noise hits both alike. It reports both and their ratio
// (goal ≤ 1.5).
//
//	go test -run XXX -bench RelationRoundTrip -benchtime 20000x ./node/p2p/
func BenchmarkRelationRoundTrip(b *testing.B) {
	frame, _ := proto.Marshal(&pb.Envelope{Id: 1 << 20, Body: &pb.Envelope_PingRequest{PingRequest: &pb.PingRequest{}}})
	raw := rawEcho(b, len(frame)+1)
	inf := relationPair(b)
	ctx := context.Background()
	for i := 0; i < 1000; i++ { // warm both paths
		raw()
		if _, err := pingRelation(ctx, inf); err != nil {
			b.Fatal(err)
		}
	}
	var rawT, gridT, coreT, localT time.Duration
	local := &pb.Envelope{Body: &pb.Envelope_PingRequest{PingRequest: &pb.PingRequest{}}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		raw()
		t1 := time.Now()
		rep, err := pingRelation(ctx, inf)
		if err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := inf.Driver.Request(ctx, local); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		rawT += t1.Sub(t0)
		gridT += t2.Sub(t1)
		localT += t3.Sub(t2)
		coreT += time.Duration(rep.GetPingReply().RttUs) * time.Microsecond
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(rawT.Nanoseconds())/n/1e3, "raw-µs/rt")
	b.ReportMetric(float64(gridT.Nanoseconds())/n/1e3, "relation-µs/rt")
	b.ReportMetric(float64(coreT.Nanoseconds())/n/1e3, "core-µs/rt")
	b.ReportMetric(float64(localT.Nanoseconds())/n/1e3, "local-µs/req")
	b.ReportMetric(float64(gridT)/float64(rawT), "ratio")
}

// BenchmarkWholeTreeQuery asks the root of the six-manager grid, over a
// client stream, for every manager's offer (down all, up 0), against the
// raw libp2p round trips on the query's critical path (client → gm152 →
// gm154 → gm160: three), measured in the same run (goal ≤ 2.0).
//
//	go test -run '^$' -bench WholeTreeQuery -benchtime 2000x ./node/p2p/
func BenchmarkWholeTreeQuery(b *testing.B) {
	g := newGrid(b)
	for _, e := range patent {
		g.start(e[0])
	}
	g.waitTree("gm152", wantTree, 30*time.Second)
	raw := rawEcho(b, 64)
	ctx := context.Background()
	cl, err := p2p.Dial(ctx, g.mgrs["gm152"].Addr(), p2p.ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ask := func() {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		rep, err := cl.Query(qctx, &pb.QueryRequest{Requirement: "cpus >= 1 && mem_free > 0", Rank: "cpus", Down: 255, Up: 0, Want: 1, Limit: 10})
		if err != nil {
			b.Fatal(err)
		}
		if len(rep.Offers) != 6 || len(rep.Missing) != 0 {
			b.Fatalf("query answered %d offers, missing %v", len(rep.Offers), rep.Missing)
		}
	}
	for i := 0; i < 200; i++ { // warm up: compile caches, connections
		raw()
		ask()
	}
	var rawT, queryT time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		raw()
		t1 := time.Now()
		ask()
		t2 := time.Now()
		rawT += t1.Sub(t0)
		queryT += t2.Sub(t1)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(rawT.Nanoseconds())/n/1e3, "raw-µs/rt")
	b.ReportMetric(float64(queryT.Nanoseconds())/n/1e3, "query-µs")
	b.ReportMetric(float64(queryT)/float64(3*rawT), "ratio")
}
