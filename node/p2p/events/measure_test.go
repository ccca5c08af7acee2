package events_test

// Measurements of the event bus (docs/monitoring.md, "Measured"). They are
// benchmarks, so `go test` alone does not run them:
//
//	go test ./node/p2p/events/ -run '^$' -bench BenchmarkEventLatency -benchtime 1x
//	go test ./node/p2p/events/ -run '^$' -bench BenchmarkUtilizationBandwidth -benchtime 1x -timeout 30m
//
// GRIDMGR_BENCH_N=100,300 limits the sizes of the bandwidth benchmark,
// GRIDMGR_BENCH_NAIVE_N those of its naive contrast, and
// GRIDMGR_BENCH_NAIVE=0 skips its naive contrast.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/node/p2p/events"
	"github.com/gridmgr/gridmgr/wire"
)

// ---- BenchmarkEventLatency -------------------------------------------------

// The six-manager tree of configs/: gm152 root; gm154, gm156 under it;
// gm160, gm162 under gm154; gm164 under gm156.
var (
	latNames    = []string{"gm152", "gm154", "gm156", "gm160", "gm162", "gm164"}
	latParent   = []int{-1, 0, 0, 1, 1, 2}
	latProducer = 3 // gm160
	latConsumer = 5 // the consumer connects to gm164
)

const (
	latRounds   = 4   // rounds per design, alternated bus, raw, bus, raw, …
	latPerRound = 250 // events per round: 1000 per design
	latPace     = 2 * time.Millisecond
)

// tcpTree starts the tree's hosts and a consumer host on loopback TCP,
// each child connected to its parent only and the consumer to gm164.
func tcpTree(b *testing.B) (managers []host.Host, consumer host.Host) {
	b.Helper()
	newTCPHost := func() host.Host {
		h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { h.Close() })
		return h
	}
	connectTCP := func(a, to host.Host) {
		if err := a.Connect(context.Background(), peer.AddrInfo{ID: to.ID(), Addrs: to.Addrs()}); err != nil {
			b.Fatal(err)
		}
	}
	for range latNames {
		managers = append(managers, newTCPHost())
	}
	for i, p := range latParent {
		if p >= 0 {
			connectTCP(managers[i], managers[p])
		}
	}
	consumer = newTCPHost()
	connectTCP(consumer, managers[latConsumer])
	return managers, consumer
}

// neighbours is the Accept of a manager of a tree given by parent.
func neighbours(parent []int, ids []peer.ID, i int) func(peer.ID) bool {
	set := map[peer.ID]bool{}
	if parent[i] >= 0 {
		set[ids[parent[i]]] = true
	}
	for j, p := range parent {
		if p == i {
			set[ids[j]] = true
		}
	}
	return func(from peer.ID) bool { return set[from] }
}

func hostIDs(hs []host.Host) []peer.ID {
	ids := make([]peer.ID, len(hs))
	for i, h := range hs {
		ids[i] = h.ID()
	}
	return ids
}

// managerTopics are what a manager subscribes to: the four event topics
// and its utilization topic (util, normally UtilTopic(self)).
func managerTopics(util string) []string {
	ts := []string{util}
	for _, k := range events.Kinds {
		ts = append(ts, events.KindTopic(k))
	}
	return ts
}

// drain reads a manager's subscription, as the daemon does.
func drain(s *events.Sub, n *atomic.Int64) {
	go func() {
		for range s.C {
			if n != nil {
				n.Add(1)
			}
		}
	}()
}

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(b *testing.B, within time.Duration, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// latRecorder pairs each sequence number's send time with its receive time.
type latRecorder struct {
	mu   sync.Mutex
	sent map[uint64]time.Time
	lat  []time.Duration
	got  chan struct{} // a token per event received
}

func newLatRecorder() *latRecorder {
	return &latRecorder{sent: map[uint64]time.Time{}, got: make(chan struct{}, 1<<16)}
}

func (r *latRecorder) send(seq uint64) {
	r.mu.Lock()
	r.sent[seq] = time.Now()
	r.mu.Unlock()
}

func (r *latRecorder) recv(seq uint64, at time.Time) {
	r.mu.Lock()
	t0, ok := r.sent[seq]
	if ok {
		delete(r.sent, seq)
		r.lat = append(r.lat, at.Sub(t0))
	}
	r.mu.Unlock()
	if ok {
		select {
		case r.got <- struct{}{}:
		default:
		}
	}
}

// latDesign is one of the two designs under measurement.
type latDesign struct {
	name    string
	publish func(seq uint64) // at the producer
	rec     *latRecorder     // fed by the consumer
	lost    int
}

// round publishes n events, one per latPace, and waits for them.
func (d *latDesign) round(b *testing.B, firstSeq uint64, n int) {
	b.Helper()
	tick := time.NewTicker(latPace)
	defer tick.Stop()
	for i := range n {
		<-tick.C
		seq := firstSeq + uint64(i)
		d.rec.send(seq)
		d.publish(seq)
	}
	timeout := time.After(5 * time.Second)
	for range n {
		select {
		case <-d.rec.got:
		case <-timeout:
			d.rec.mu.Lock()
			d.lost += len(d.rec.sent)
			clear(d.rec.sent)
			d.rec.mu.Unlock()
			return
		}
	}
}

// warm publishes until the consumer hears (gossipsub grafts at its
// heartbeats), then forgets the warm-up events.
func (d *latDesign) warm(b *testing.B, base uint64) {
	b.Helper()
	for i := range uint64(200) {
		d.rec.send(base + i)
		d.publish(base + i)
		select {
		case <-d.rec.got:
			time.Sleep(200 * time.Millisecond) // stragglers
			d.rec.mu.Lock()
			clear(d.rec.sent)
			d.rec.lat = d.rec.lat[:0]
			d.rec.mu.Unlock()
			for len(d.rec.got) > 0 {
				<-d.rec.got
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	b.Fatalf("%s: nothing reached the consumer", d.name)
}

func latRelationEvent(producer peer.ID, seq uint64) *wire.Event {
	return &wire.Event{Version: 1, Kind: wire.EventKind_EVENT_KIND_RELATION, Type: "down", Manager: "gm160", Peer: producer.String(),
		Seq: seq, TimeUnixMs: time.Now().UnixMilli(), Body: &wire.Event_Relation{Relation: &wire.RelationChange{
			Peer: producer.String(), Name: "gm162", Role: wire.Role(1), From: wire.RelationState(1), To: wire.RelationState(3), Cause: "keepalive timeout"}}}
}

// busDesign runs events.Bus on the tree: each manager accepts its tree
// neighbours and subscribes as a manager; the consumer subscribes to the
// relation topic.
func busDesign(b *testing.B, managers []host.Host, consumer host.Host) *latDesign {
	ids := hostIDs(managers)
	rel := events.KindTopic(wire.EventKind_EVENT_KIND_RELATION)
	var buses []*events.Bus
	for i, h := range managers {
		bus, err := events.New(context.Background(), h, events.Options{Accept: neighbours(latParent, ids, i)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(bus.Close)
		s, err := bus.Subscribe(managerTopics(events.UtilTopic(h.ID().String()))...)
		if err != nil {
			b.Fatal(err)
		}
		drain(s, nil)
		buses = append(buses, bus)
	}
	cb, err := events.New(context.Background(), consumer, events.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cb.Close)
	cs, err := cb.Subscribe(rel)
	if err != nil {
		b.Fatal(err)
	}
	d := &latDesign{name: "bus", rec: newLatRecorder()}
	go func() {
		for r := range cs.C {
			d.rec.recv(r.Event.Seq, time.Now())
		}
	}()
	waitUntil(b, 10*time.Second, "the bus's subscriptions", func() bool {
		return len(buses[latConsumer].Peers(rel)) == 2 && len(buses[latProducer].Peers(rel)) == 1
	})
	prod := buses[latProducer]
	pid := managers[latProducer].ID()
	d.publish = func(seq uint64) { prod.Publish(latRelationEvent(pid, seq)) }
	return d
}

// rawDesign runs plain gossipsub with its defaults on the same tree: one
// topic, no validator, raw bytes as long as the bus's event.
func rawDesign(b *testing.B, managers []host.Host, consumer host.Host, size int) *latDesign {
	const topic = "/bench/raw"
	join := func(h host.Host) (*pubsub.PubSub, *pubsub.Topic, *pubsub.Subscription) {
		ctx, cancel := context.WithCancel(context.Background())
		b.Cleanup(cancel)
		ps, err := pubsub.NewGossipSub(ctx, h)
		if err != nil {
			b.Fatal(err)
		}
		tp, err := ps.Join(topic)
		if err != nil {
			b.Fatal(err)
		}
		sub, err := tp.Subscribe()
		if err != nil {
			b.Fatal(err)
		}
		return ps, tp, sub
	}
	var pss []*pubsub.PubSub
	var prodTopic *pubsub.Topic
	for i, h := range managers {
		ps, tp, sub := join(h)
		pss = append(pss, ps)
		if i == latProducer {
			prodTopic = tp
		}
		go func() {
			for {
				if _, err := sub.Next(context.Background()); err != nil {
					return
				}
			}
		}()
	}
	_, _, csub := join(consumer)
	d := &latDesign{name: "raw", rec: newLatRecorder()}
	go func() {
		for {
			m, err := csub.Next(context.Background())
			if err != nil {
				return
			}
			if len(m.Data) >= 8 {
				d.rec.recv(binary.BigEndian.Uint64(m.Data), time.Now())
			}
		}
	}()
	waitUntil(b, 10*time.Second, "the raw subscriptions", func() bool {
		return len(pss[latConsumer].ListPeers(topic)) == 2 && len(pss[latProducer].ListPeers(topic)) == 1
	})
	d.publish = func(seq uint64) {
		data := make([]byte, size)
		binary.BigEndian.PutUint64(data, seq)
		if err := prodTopic.Publish(context.Background(), data); err != nil {
			b.Error(err)
		}
	}
	return d
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// BenchmarkEventLatency measures, in one run, the latency of relation
// events from gm160 to a consumer at gm164 over the bus, and the same over
// plain gossipsub (the baseline); the rounds of the two alternate, so that
// the machine's noise falls on both.
func BenchmarkEventLatency(b *testing.B) {
	size := len(must(proto.Marshal(latRelationEvent(peer.ID("12D3KooWAbcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQR"), 1_000_000))))
	bm, bc := tcpTree(b)
	rm, rc := tcpTree(b)
	designs := []*latDesign{busDesign(b, bm, bc), rawDesign(b, rm, rc, size)}
	for _, d := range designs {
		d.warm(b, 1)
	}
	b.ResetTimer()
	seq := uint64(1_000_000)
	for range latRounds {
		for _, d := range designs {
			d.round(b, seq, latPerRound)
			seq += latPerRound
		}
	}
	b.StopTimer()
	bus, raw := designs[0], designs[1]
	bp50, bp99 := percentile(bus.rec.lat, 50), percentile(bus.rec.lat, 99)
	rp50, rp99 := percentile(raw.rec.lat, 50), percentile(raw.rec.lat, 99)
	b.ReportMetric(us(bp50), "p50_us")
	b.ReportMetric(us(bp99), "p99_us")
	b.ReportMetric(us(rp50), "raw_p50_us")
	b.ReportMetric(us(rp99), "raw_p99_us")
	b.ReportMetric(us(bp50)/us(rp50), "ratio_p50")
	b.ReportMetric(us(bp99)/us(rp99), "ratio_p99")
	b.Logf("gm160 → gm154 → gm152 → gm156 → gm164 → consumer, %d-byte events, one per %v, %d rounds of %d alternated",
		size, latPace, latRounds, latPerRound)
	b.Logf("%-6s %8s %6s %10s %10s %10s", "design", "events", "lost", "p50 µs", "p90 µs", "p99 µs")
	for _, d := range designs {
		b.Logf("%-6s %8d %6d %10.0f %10.0f %10.0f", d.name, len(d.rec.lat), d.lost,
			us(percentile(d.rec.lat, 50)), us(percentile(d.rec.lat, 90)), us(percentile(d.rec.lat, 99)))
	}
	b.Logf("ratio bus/raw: p50 %.2f, p99 %.2f (goal ≤ 1.2)", us(bp50)/us(rp50), us(bp99)/us(rp99))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// ---- BenchmarkUtilizationBandwidth -----------------------------------------

const (
	utilFanout   = 8
	utilWarm     = 2  // intervals before counting
	utilMeasured = 10 // intervals counted
)

// rpcBytes is a RawTracer counting the bytes of the RPCs a node receives
// (the protobuf and its length prefix: mocknet has no transport framing,
// so the libp2p bandwidth counter has nothing to count there).
type rpcBytes struct{ n atomic.Int64 }

func (c *rpcBytes) RecvRPC(rpc *pubsub.RPC) {
	n := proto.Size(&rpc.RPC)
	c.n.Add(int64(n + len(binary.AppendUvarint(nil, uint64(n)))))
}
func (*rpcBytes) OnNewOutboundStream(peer.ID, protocol.ID) {}
func (*rpcBytes) OnClosedOutboundStream(peer.ID)           {}
func (*rpcBytes) Join(string)                              {}
func (*rpcBytes) Leave(string)                             {}
func (*rpcBytes) Graft(peer.ID, string)                    {}
func (*rpcBytes) Prune(peer.ID, string)                    {}
func (*rpcBytes) ValidateMessage(*pubsub.Message)          {}
func (*rpcBytes) DeliverMessage(*pubsub.Message)           {}
func (*rpcBytes) RejectMessage(*pubsub.Message, string)    {}
func (*rpcBytes) DuplicateMessage(*pubsub.Message)         {}
func (*rpcBytes) ThrottlePeer(peer.ID)                     {}
func (*rpcBytes) SendRPC(*pubsub.RPC, peer.ID)             {}
func (*rpcBytes) DropRPC(*pubsub.RPC, peer.ID)             {}
func (*rpcBytes) UndeliverableMessage(*pubsub.Message)     {}

// utilResult is one run of the bandwidth benchmark.
type utilResult struct {
	design         string
	n              int
	interval       time.Duration
	mean, max      float64 // bytes received per manager per second
	perSample      float64 // bytes received per manager per interval (= mean × interval)
	delivered, exp int64   // samples delivered to the managers' subscriptions in the window; expected (± a tick)
	setup          time.Duration
}

// utilSample is a manager's sample, shaped like Core.publishUtilization's.
func utilSample(self, superior peer.ID, name string, seq uint64) *wire.Event {
	sup := ""
	if superior != "" {
		sup = superior.String()
	}
	return &wire.Event{Version: 1, Kind: wire.EventKind_EVENT_KIND_UTILIZATION, Type: "sample", Manager: name, Peer: self.String(),
		Seq: seq, TimeUnixMs: time.Now().UnixMilli(), Body: &wire.Event_Utilization{Utilization: &wire.Utilization{
			CpuUtil: 0.4375,
			Free:    []*wire.Amount{{Kind: "cpus", N: 6}, {Kind: "gpus", N: 1}, {Kind: "mem", N: 12 << 30}},
			Usage: []*wire.Usage{{Kind: "cpus", Capacity: 8, Used: 2}, {Kind: "gpus", Capacity: 1},
				{Kind: "mem", Capacity: 16 << 30, Used: 4 << 30}},
			Reservations: 2, Instances: 3, Running: 3, SubtreeManagers: 9,
			SubtreeFree: []*wire.Amount{{Kind: "cpus", N: 54}, {Kind: "gpus", N: 9}, {Kind: "mem", N: 108 << 30}},
			Superior:    sup,
		}}}
}

// runUtil builds a tree of n managers with fanout utilFanout on mocknet
// (only parent–child pairs linked and connected), each running the bus,
// and counts the bytes each receives while every manager publishes one
// sample per interval. naive: every manager publishes on and subscribes
// to one grid-wide topic instead of its superior's.
func runUtil(b *testing.B, n int, interval time.Duration, measured int, naive bool) utilResult {
	b.Helper()
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mn := mocknet.New()
	defer mn.Close()
	hosts := make([]host.Host, n)
	parent := make([]int, n)
	for i := range n {
		sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		addr := ma.StringCast(fmt.Sprintf("/ip4/10.%d.%d.%d/tcp/4242", i>>16&255, i>>8&255, i&255))
		if hosts[i], err = mn.AddPeer(sk, addr); err != nil {
			b.Fatal(err)
		}
		parent[i] = (i - 1) / utilFanout
	}
	parent[0] = -1
	for i := 1; i < n; i++ {
		if _, err := mn.LinkPeers(hosts[i].ID(), hosts[parent[i]].ID()); err != nil {
			b.Fatal(err)
		}
		if _, err := mn.ConnectPeers(hosts[i].ID(), hosts[parent[i]].ID()); err != nil {
			b.Fatal(err)
		}
	}
	ids := hostIDs(hosts)
	root := ids[0]
	buses := make([]*events.Bus, n)
	counters := make([]*rpcBytes, n)
	var delivered atomic.Int64
	for i, h := range hosts {
		counters[i] = &rpcBytes{}
		bus, err := events.New(ctx, h, events.Options{Accept: neighbours(parent, ids, i), Tracer: counters[i]})
		if err != nil {
			b.Fatal(err)
		}
		defer bus.Close()
		util := events.UtilTopic(h.ID().String())
		if naive {
			util = events.UtilTopic(root.String())
		}
		s, err := bus.Subscribe(managerTopics(util)...)
		if err != nil {
			b.Fatal(err)
		}
		drain(s, &delivered)
		buses[i] = bus
	}
	// Ready when each manager knows that the topic it publishes on has its
	// superior (naive: all its neighbours) subscribed.
	waitUntil(b, 2*time.Minute, "the subscriptions to spread", func() bool {
		for i := 1; i < n; i++ {
			if naive {
				want := 1
				for _, p := range parent {
					if p == i {
						want++
					}
				}
				if len(buses[i].Peers(events.UtilTopic(root.String()))) < want {
					return false
				}
			} else if !slices.Contains(buses[i].Peers(events.UtilTopic(ids[parent[i]].String())), ids[parent[i]]) {
				return false
			}
		}
		return true
	})
	setup := time.Since(start)
	// Every manager publishes once per interval, the managers spread
	// evenly over it.
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sup := peer.ID("")
			if parent[i] >= 0 {
				sup = ids[parent[i]]
			}
			if naive {
				sup = root
				if i == 0 {
					sup = ""
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval * time.Duration(i) / time.Duration(n)):
			}
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for seq := uint64(1); ; seq++ {
				buses[i].Publish(utilSample(ids[i], sup, fmt.Sprintf("gm%d", i), seq))
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	time.Sleep(utilWarm * interval)
	snap := func() []int64 {
		s := make([]int64, n)
		for i, c := range counters {
			s[i] = c.n.Load()
		}
		return s
	}
	before, d0, t0 := snap(), delivered.Load(), time.Now()
	time.Sleep(time.Duration(measured) * interval)
	after, d1, secs := snap(), delivered.Load(), time.Since(t0).Seconds()
	cancel()
	wg.Wait()

	r := utilResult{design: "per-superior", n: n, interval: interval, delivered: d1 - d0, setup: setup}
	if naive {
		r.design = "grid-wide"
		r.exp = int64(n) * int64(n) * int64(measured) // every manager hears every sample, its own included
	} else {
		r.exp = int64(n) * int64(measured) // each sample reaches its superior; the root's, the root
	}
	var sum float64
	for i := range n {
		bps := float64(after[i]-before[i]) / secs
		sum += bps
		r.max = max(r.max, bps)
	}
	r.mean = sum / float64(n)
	r.perSample = r.mean * interval.Seconds()
	return r
}

func envSizes(name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 1 {
			out = append(out, n)
		}
	}
	return out
}

// BenchmarkUtilizationBandwidth measures the bytes a manager receives for
// the utilization samples, per second, in trees of 100, 300 and 1000
// managers (fanout 8) on mocknet, each manager publishing one sample per
// second of wall time (the daemon's interval is 10 s: divide by 10), and
// for contrast the naive design with one grid-wide topic.
func BenchmarkUtilizationBandwidth(b *testing.B) {
	var results []utilResult
	for _, n := range envSizes("GRIDMGR_BENCH_N", []int{100, 300, 1000}) {
		results = append(results, runUtil(b, n, time.Second, utilMeasured, false))
	}
	if os.Getenv("GRIDMGR_BENCH_NAIVE") != "0" {
		// Every manager checks every sample's signature: N² checks per
		// interval, which two cores cannot do at N = 300 in 1 s; the
		// interval grows as (N/100)² so that the checks per second stay
		// as at N = 100 (the bytes per interval do not depend on it).
		for _, n := range envSizes("GRIDMGR_BENCH_NAIVE_N", []int{100, 300}) {
			k := max(1, float64(n)/100)
			results = append(results, runUtil(b, n, time.Duration(k*k*float64(time.Second)), 4, true))
		}
	}
	b.Logf("%-13s %5s %6s %8s %10s %10s %12s %11s %11s %10s %8s", "design", "N", "setup", "interval", "mean B/s", "max B/s",
		"mean B/intv", "mean@10s", "max@10s", "delivered", "of")
	var first, last *utilResult
	for i, r := range results {
		iv := r.interval.Seconds()
		b.Logf("%-13s %5d %5.1fs %7.0fs %10.0f %10.0f %12.0f %11.1f %11.1f %10d %8d", r.design, r.n, r.setup.Seconds(), iv,
			r.mean, r.max, r.perSample, r.perSample/10, r.max*iv/10, r.delivered, r.exp)
		b.ReportMetric(r.perSample/10, fmt.Sprintf("%s_N%d_mean_B/s@10s", r.design, r.n))
		b.ReportMetric(r.max*iv/10, fmt.Sprintf("%s_N%d_max_B/s@10s", r.design, r.n))
		if r.design == "per-superior" {
			if first == nil {
				first = &results[i]
			}
			last = &results[i]
		}
	}
	if first != nil && last != first {
		ratio := last.mean / first.mean
		b.ReportMetric(ratio, fmt.Sprintf("ratio_mean_N%d/N%d", last.n, first.n))
		b.Logf("per-superior: mean(N=%d)/mean(N=%d) = %.3f (goal ≈ 1: flat in N)", last.n, first.n, ratio)
	}
	var naive []utilResult
	for _, r := range results {
		if r.design == "grid-wide" {
			naive = append(naive, r)
		}
	}
	if len(naive) > 1 {
		a, z := naive[0], naive[len(naive)-1]
		b.Logf("grid-wide: mean B/interval (N=%d)/(N=%d) = %.3f (N ratio %.1f: linear)", z.n, a.n, z.perSample/a.perSample, float64(z.n)/float64(a.n))
	}
}
