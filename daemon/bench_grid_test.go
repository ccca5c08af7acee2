package daemon_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/host"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// gridOf1000 is a tree of managers on mocknet hosts in this process: host i
// has superior (i-1)/fanout.
type gridOf1000 struct {
	mn      mocknet.Mocknet
	hosts   []host.Host
	drivers []*node.Driver
	cancel  context.CancelFunc
}

const gridFanout = 8

// startGridOf makes n linked mocknet hosts, lets before set things up on
// them (gossipsub must exist before the first connection), then starts a
// manager on each and waits for the tree.
func startGridOf(b *testing.B, n int, before func(hosts []host.Host), configure ...func(i int, cfg *config.Config)) *gridOf1000 {
	mn := mocknet.New()
	g := &gridOf1000{mn: mn}
	for i := 0; i < n; i++ {
		h, err := mn.GenPeer()
		if err != nil {
			b.Fatal(err)
		}
		g.hosts = append(g.hosts, h)
		if i > 0 {
			if _, err := mn.LinkPeers(g.hosts[(i-1)/gridFanout].ID(), h.ID()); err != nil {
				b.Fatal(err)
			}
		}
	}
	before(g.hosts)
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	var up atomic.Int64
	formed := make(chan struct{})
	for i, h := range g.hosts {
		cfg := config.Default()
		cfg.Name = fmt.Sprintf("m%04d", i)
		cfg.CPUs, cfg.Memory = 4, 8<<30
		if i > 0 {
			s := g.hosts[(i-1)/gridFanout]
			var addrs []string
			for _, a := range s.Addrs() {
				addrs = append(addrs, a.String())
			}
			cfg.Superiors = []peeraddr.PeerAddrs{{Peer: s.ID().String(), Addrs: addrs}}
		}
		for _, f := range configure {
			f(i, &cfg)
		}
		if err := cfg.Validate(); err != nil {
			b.Fatal(err)
		}
		var addrs []string
		for _, a := range h.Addrs() {
			addrs = append(addrs, a.String())
		}
		ph := p2p.Wrap(h, p2p.Options{})
		d := node.NewDriver(cfg, h.ID().String(), addrs, ph, nil, node.DriverOptions{OnEvent: func(e node.Event) {
			if e.Role == relations.Superior && e.State == relations.Up && up.Add(1) == int64(n-1) {
				close(formed)
			}
		}})
		ph.Attach(d)
		g.drivers = append(g.drivers, d)
		go d.Run(ctx)
	}
	select {
	case <-formed:
	case <-time.After(2 * time.Minute):
		b.Fatalf("grid of %d did not form: %d relations up", n, up.Load())
	}
	return g
}

func (g *gridOf1000) stop() {
	g.cancel()
	for _, d := range g.drivers {
		<-d.Done()
	}
	g.mn.Close()
}

// BenchmarkGridQuery1000 asks the root of a 1,000-manager tree (fan-out 8,
// depth 4, mocknet hosts in this process) for every manager's offer (down
// all, top 10 kept at each merge), against a gossipsub publish from the
// root reaching all 999 other hosts, on the same hosts and connections,
// measured in the same run (goal ≤ 2.0). gossipsub runs unsigned with
// content-addressed ids (mocknet has no encryption either, so neither side
// pays for crypto) and with mesh bounds that keep every tree neighbour in
// the mesh, so delivery does not wait for gossip.
//
//	go test -run '^$' -bench GridQuery1000 -benchtime 20x ./daemon/
func BenchmarkGridQuery1000(b *testing.B) {
	const n = 1000
	ctx := context.Background()
	var got atomic.Int64
	var round atomic.Int64
	done := make(chan struct{}, 1)
	var gs *gossip
	perHost := make([]atomic.Int64, n)
	g := startGridOf(b, n, func(hosts []host.Host) {
		gs = joinGossip(b, ctx, hosts, func(i int) {
			perHost[i].Add(1)
			if got.Add(1) == round.Load()*(n-1) {
				done <- struct{}{}
			}
		})
	})
	topics, pss := gs.topics, gs.pss
	defer g.stop()
	seq := 0
	publish := func() time.Duration {
		seq++
		round.Add(1)
		t0 := time.Now()
		if err := topics[0].Publish(ctx, []byte(fmt.Sprintf("round %d", seq))); err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			var miss []string
			for i := 1; i < n; i++ {
				if perHost[i].Load() < int64(seq) {
					miss = append(miss, fmt.Sprintf("%d(got %d, parent %d, topic peers %d, parent has %d)", i, perHost[i].Load(), (i-1)/gridFanout,
						len(pss[i].ListPeers("grid")), len(pss[(i-1)/gridFanout].ListPeers("grid"))))
				}
			}
			b.Fatalf("publish %d reached %d of %d hosts; missing %v", seq, got.Load()-(round.Load()-1)*(n-1), n-1, miss)
		}
		return time.Since(t0)
	}
	// Let the meshes form (gossipsub heartbeats are 1 s), then check that
	// one publish reaches everyone.
	time.Sleep(5 * time.Second)
	publish()

	query := func() time.Duration {
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		t0 := time.Now()
		rep, err := g.drivers[0].Request(qctx, &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{
			Requirement: "cpus >= 1", Rank: "cpus", Down: 255, Up: 0, Want: 1, Limit: 10, BudgetMs: 25000,
		}}})
		d := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		qr := rep.GetQueryReply()
		if qr == nil || qr.Visited != n || len(qr.Missing) != 0 {
			b.Fatalf("query: %v", rep)
		}
		return d
	}
	query() // warm the expression caches
	var pubT, queryT time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		queryT += query()
		pubT += publish()
	}
	b.StopTimer()
	nn := float64(b.N)
	b.ReportMetric(float64(queryT.Microseconds())/nn/1e3, "query-ms")
	b.ReportMetric(float64(pubT.Microseconds())/nn/1e3, "gossipsub-ms")
	b.ReportMetric(float64(queryT)/float64(pubT), "ratio")
}

// gossip is gossipsub on every host of a benchmark grid, joined to one
// topic, set up as the baseline of the 1,000-manager benchmarks: unsigned
// with content-addressed ids (mocknet has no encryption either, so neither
// side pays for crypto), mesh bounds that keep every tree neighbour in the
// mesh so delivery does not wait for gossip.
type gossip struct {
	topics []*pubsub.Topic
	pss    []*pubsub.PubSub
}

// joinGossip starts gossipsub on hosts (before their first connection);
// every host but the first subscribes, and deliver(i) runs on each message
// host i receives.
func joinGossip(b *testing.B, ctx context.Context, hosts []host.Host, deliver func(i int)) *gossip {
	params := pubsub.DefaultGossipSubParams()
	params.D, params.Dlo, params.Dhi, params.Dscore, params.Dout = gridFanout+1, gridFanout+1, gridFanout+4, 2, 2
	gs := &gossip{}
	for i, h := range hosts {
		ps, err := pubsub.NewGossipSub(ctx, h,
			pubsub.WithGossipSubParams(params),
			pubsub.WithMessageSignaturePolicy(pubsub.StrictNoSign),
			pubsub.WithMessageIdFn(func(m *pubsubpb.Message) string {
				s := sha256.Sum256(m.Data)
				return string(s[:])
			}))
		if err != nil {
			b.Fatal(err)
		}
		t, err := ps.Join("grid")
		if err != nil {
			b.Fatal(err)
		}
		gs.topics = append(gs.topics, t)
		gs.pss = append(gs.pss, ps)
		if i == 0 {
			continue
		}
		sub, err := t.Subscribe()
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for {
				if _, err := sub.Next(ctx); err != nil {
					return
				}
				deliver(i)
			}
		}()
	}
	return gs
}
