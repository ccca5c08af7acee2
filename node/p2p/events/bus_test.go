package events_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/node/p2p/events"
	"github.com/gridmgr/gridmgr/wire"
)

func newHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func connect(t *testing.T, a, b host.Host) {
	t.Helper()
	if err := a.Connect(context.Background(), peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

func newBus(t *testing.T, h host.Host, accept func(peer.ID) bool) *events.Bus {
	t.Helper()
	b, err := events.New(context.Background(), h, events.Options{Accept: accept})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func relationEvent(producer host.Host, seq uint64) *wire.Event {
	return &wire.Event{Version: 1, Kind: wire.EventKind_EVENT_KIND_RELATION, Type: "down", Manager: "gm", Peer: producer.ID().String(),
		Seq: seq, TimeUnixMs: time.Now().UnixMilli(), Body: &wire.Event_Relation{Relation: &wire.RelationChange{Name: "x"}}}
}

// managers is a chain a — b — c of managers, each accepting what its
// neighbours forward, and each relaying the event topics.
type grid struct {
	hosts []host.Host
	buses []*events.Bus
	subs  []*events.Sub
}

func chain(t *testing.T) *grid {
	g := &grid{}
	for range 3 {
		g.hosts = append(g.hosts, newHost(t))
	}
	connect(t, g.hosts[1], g.hosts[0])
	connect(t, g.hosts[2], g.hosts[1])
	related := map[int][]int{0: {1}, 1: {0, 2}, 2: {1}}
	for i, h := range g.hosts {
		b := newBus(t, h, func(from peer.ID) bool {
			for _, j := range related[i] {
				if g.hosts[j].ID() == from {
					return true
				}
			}
			return false
		})
		g.buses = append(g.buses, b)
		topics := []string{events.UtilTopic(h.ID().String())}
		for _, k := range events.Kinds {
			topics = append(topics, events.KindTopic(k))
		}
		s, err := b.Subscribe(topics...)
		if err != nil {
			t.Fatal(err)
		}
		g.subs = append(g.subs, s)
	}
	return g
}

// waitMesh waits until each bus knows its neighbours subscribe to topic.
func waitPeers(t *testing.T, b *events.Bus, topic string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(b.Peers(topic)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d peers, want %d", topic, len(b.Peers(topic)), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func next(t *testing.T, s *events.Sub, within time.Duration) *wire.Event {
	t.Helper()
	select {
	case r, ok := <-s.C:
		if !ok {
			t.Fatal("subscription closed")
		}
		return r.Event
	case <-time.After(within):
		return nil
	}
}

// An event published at one end of the chain reaches the other end and a
// consumer connected there; a forged one (producer ≠ signer), a malformed
// one and one injected by a client are not delivered.
func TestDeliveryAndRejection(t *testing.T) {
	g := chain(t)
	rel := events.KindTopic(wire.EventKind_EVENT_KIND_RELATION)
	waitPeers(t, g.buses[0], rel, 1)
	waitPeers(t, g.buses[1], rel, 2)
	// A consumer (no Accept: it takes what its manager forwards).
	ch := newHost(t)
	connect(t, ch, g.hosts[2])
	cb := newBus(t, ch, nil)
	cs, err := cb.Subscribe(rel)
	if err != nil {
		t.Fatal(err)
	}
	waitPeers(t, g.buses[2], rel, 2)

	// gossipsub grafts its mesh at its heartbeats: publish until the
	// consumer hears, then every subscriber has the event.
	seq := uint64(0)
	for ev := (*wire.Event)(nil); ev == nil; {
		if seq++; seq > 100 {
			t.Fatal("nothing reached the consumer")
		}
		g.buses[0].Publish(relationEvent(g.hosts[0], seq))
		ev = next(t, cs, 200*time.Millisecond)
	}
	for i, s := range []*events.Sub{g.subs[1], g.subs[2]} {
		for {
			ev := next(t, s, 10*time.Second)
			if ev == nil || ev.Peer != g.hosts[0].ID().String() {
				t.Fatalf("subscriber %d got %v", i, ev)
			}
			if ev.Seq == seq {
				break
			}
		}
	}

	// Forged: a's bus publishes an event that claims to come from b.
	g.buses[0].Publish(relationEvent(g.hosts[1], 1000))
	// A client connected to b publishes on the grid's topic.
	intruder := newHost(t)
	connect(t, intruder, g.hosts[1])
	ib := newBus(t, intruder, nil)
	if _, err := ib.Subscribe(rel); err != nil { // joins the topic's mesh
		t.Fatal(err)
	}
	waitPeers(t, g.buses[1], rel, 3)
	// and knows b is on the topic: else its publish goes nowhere, and b
	// has nothing to reject.
	waitPeers(t, ib, rel, 1)
	ib.Publish(relationEvent(intruder, 1))
	if ev := next(t, cs, 2*time.Second); ev != nil {
		t.Fatalf("consumer got a forged or injected event: %v", ev)
	}
	if st := g.buses[1].Stats(); st.Rejected == 0 {
		t.Fatalf("b rejected nothing: %+v", st)
	}
	// Still serving: a good event still flows.
	g.buses[0].Publish(relationEvent(g.hosts[0], seq+1))
	if ev := next(t, cs, 10*time.Second); ev == nil || ev.Seq != seq+1 {
		t.Fatalf("after the rejections: %v", ev)
	}
}

// A sample goes to the superior's topic only: b hears c's sample, a does
// not.
func TestSamplesReachTheSuperiorOnly(t *testing.T) {
	g := chain(t)
	waitPeers(t, g.buses[2], events.UtilTopic(g.hosts[1].ID().String()), 1)
	var ev *wire.Event
	for seq := uint64(1); ev == nil && seq < 100; seq++ {
		g.buses[2].Publish(&wire.Event{Version: 1, Kind: wire.EventKind_EVENT_KIND_UTILIZATION, Type: "sample", Manager: "c",
			Peer: g.hosts[2].ID().String(), Seq: seq, Body: &wire.Event_Utilization{Utilization: &wire.Utilization{
				Superior: g.hosts[1].ID().String(), SubtreeManagers: 1}}})
		ev = next(t, g.subs[1], 200*time.Millisecond)
	}
	if ev.GetUtilization() == nil || ev.Manager != "c" {
		t.Fatalf("b got %v", ev)
	}
	if ev := next(t, g.subs[0], time.Second); ev != nil {
		t.Fatalf("a got c's sample: %v", ev)
	}
}

func TestTopicNames(t *testing.T) {
	if _, err := events.ParseKind("nope"); err == nil {
		t.Fatal("ParseKind accepted nope")
	}
	for _, bad := range []string{"/gridmgr/ev/1/other", "/gridmgr/util/1/", "x", "/gridmgr/util/1/../x"} {
		if events.ValidTopic(bad) {
			t.Fatalf("%q is a valid topic", bad)
		}
	}
}

// Bad input from a peer the manager accepts: malformed and oversized
// events, events on the wrong topic, and a flood of subscriptions are
// refused, and the manager still delivers good events.
func TestBadInputRefused(t *testing.T) {
	mh, ch, ih := newHost(t), newHost(t), newHost(t)
	connect(t, ch, mh)
	connect(t, ih, mh)
	mb := newBus(t, mh, nil) // accepts every forwarder: the checks below are the event's own
	rel := events.KindTopic(wire.EventKind_EVENT_KIND_RELATION)
	ms, err := mb.Subscribe(rel)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	cb := newBus(t, ch, nil)
	cs, err := cb.Subscribe(rel)
	if err != nil {
		t.Fatal(err)
	}
	// The intruder runs plain gossipsub: no validation of its own. It
	// joins the grid's topic first (a flood in the same message would be
	// refused whole, this subscription with it).
	ips, err := pubsub.NewGossipSub(context.Background(), ih)
	if err != nil {
		t.Fatal(err)
	}
	itp, err := ips.Join(rel)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := itp.Subscribe(); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, mb, rel, 2)
	// A flood of subscriptions: names outside the grid's topics, and many
	// valid-looking ones.
	for i := range 300 {
		name := fmt.Sprintf("/flood/%d", i)
		if i%2 == 0 {
			name = events.UtilTopic(fmt.Sprintf("12D3KooWFlood%040d", i))
		}
		tp, err := ips.Join(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tp.Subscribe(); err != nil {
			t.Fatal(err)
		}
	}
	good := relationEvent(ih, 1)
	wrongKind := relationEvent(ih, 2)
	wrongKind.Kind = wire.EventKind_EVENT_KIND_APP
	incomplete := relationEvent(ih, 3)
	incomplete.Version = 0
	var bad [][]byte
	for _, ev := range []*wire.Event{wrongKind, incomplete} {
		b, _ := proto.Marshal(ev)
		bad = append(bad, b)
	}
	bad = append(bad, []byte("\xff\xff not a protobuf"), make([]byte, events.MaxEventSize+10))
	gb, _ := proto.Marshal(good)
	var ev *wire.Event
	ready := pubsub.WithReadiness(pubsub.MinTopicSize(1))
	for i := 0; ev == nil && i < 50; i++ {
		// The bad ones first, each time (each is a new message: gossipsub
		// numbers them), then the good one, until the consumer hears.
		for _, b := range bad {
			_ = itp.Publish(context.Background(), b, ready)
		}
		_ = itp.Publish(context.Background(), gb, ready)
		ev = next(t, cs, 200*time.Millisecond)
	}
	if ev == nil || ev.Seq != 1 {
		t.Fatalf("consumer got %v, want the good event", ev)
	}
	// gossipsub validates messages concurrently: the good one may have
	// been delivered before the bad ones sent ahead of it were refused.
	for deadline := time.Now().Add(10 * time.Second); mb.Stats().Rejected < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			st := mb.Stats()
			t.Fatalf("the manager rejected %d messages: %+v", st.Rejected, st)
		}
	}
}

// rawEvent is a gossipsub message carrying ev on topic, signed with the
// key of h as go-libp2p-pubsub signs (StrictSign); broken flips a bit of
// the signature.
func rawEvent(t *testing.T, h host.Host, topic string, ev *wire.Event, seqno uint64, broken bool) *pubsubpb.Message {
	t.Helper()
	data, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return rawData(t, h, topic, data, seqno, broken)
}

// rawData is a gossipsub message carrying data on topic, signed with the
// key of h (rawEvent).
func rawData(t *testing.T, h host.Host, topic string, data []byte, seqno uint64, broken bool) *pubsubpb.Message {
	t.Helper()
	seq := make([]byte, 8)
	binary.BigEndian.PutUint64(seq, seqno)
	m := &pubsubpb.Message{From: []byte(h.ID()), Data: data, Seqno: seq, Topic: &topic}
	unsigned, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := h.Peerstore().PrivKey(h.ID()).Sign(append([]byte(pubsub.SignPrefix), unsigned...))
	if err != nil {
		t.Fatal(err)
	}
	if broken {
		sig[len(sig)/2] ^= 1
	}
	m.Signature = sig
	return m
}

// A manager runs a patched go-libp2p-pubsub that does not verify the
// signatures it has just made itself (third_party/go-libp2p-pubsub): what
// it receives is still verified. A peer the manager accepts as a forwarder
// writes gossipsub messages by hand, each signed by its own key with an
// event it produced: the one with a broken signature is not delivered,
// the good ones before and after are. And the manager's own events still
// reach its own subscription.
func TestReceivedSignaturesVerified(t *testing.T) {
	mh, ih := newHost(t), newHost(t)
	connect(t, ih, mh)
	mb := newBus(t, mh, nil) // accepts every forwarder: only the signature can refuse
	rel := events.KindTopic(wire.EventKind_EVENT_KIND_RELATION)
	ms, err := mb.Subscribe(rel)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()

	// Its own event, validated without verifying its own signature.
	mb.Publish(relationEvent(mh, 1))
	if ev := next(t, ms, 10*time.Second); ev == nil || ev.Peer != mh.ID().String() || ev.Seq != 1 {
		t.Fatalf("the manager's own event: got %v", ev)
	}

	s, err := ih.NewStream(context.Background(), mh.ID(), pubsub.GossipSubID_v11)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := msgio.NewVarintWriter(s)
	send := func(m *pubsubpb.Message) {
		t.Helper()
		b, err := proto.Marshal(&pubsubpb.RPC{Publish: []*pubsubpb.Message{m}})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteMsg(b); err != nil {
			t.Fatal(err)
		}
	}
	send(rawEvent(t, ih, rel, relationEvent(ih, 1), 1, false))
	if ev := next(t, ms, 10*time.Second); ev == nil || ev.Peer != ih.ID().String() || ev.Seq != 1 {
		t.Fatalf("a well signed event: got %v", ev)
	}
	// Validation runs on several goroutines: the good one after the bad
	// one may overtake it, so look a while past it too.
	send(rawEvent(t, ih, rel, relationEvent(ih, 2), 2, true))
	send(rawEvent(t, ih, rel, relationEvent(ih, 3), 3, false))
	got3 := false
	for ev := next(t, ms, 10*time.Second); ev != nil; ev = next(t, ms, time.Second) {
		if ev.Seq == 2 {
			t.Fatalf("the event with a broken signature was delivered: %v", ev)
		}
		got3 = got3 || ev.Seq == 3
	}
	if !got3 {
		t.Fatal("the good event after the badly signed one was not delivered")
	}
}
