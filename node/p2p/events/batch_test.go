package events_test

import (
	"context"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/node/p2p/events"
	"github.com/gridmgr/gridmgr/wire"
)

// A batch (wire.EventBatch) is accepted or refused whole: a peer the
// manager accepts writes batches by hand over a raw gossipsub stream. A
// good batch is delivered event by event, in order; a batch with one event
// whose producer is not the signer (a forged inner event), one with a
// broken signature, an empty one, one with an event of another kind and a
// notice (singles_wanted) that carries an event deliver nothing; a good batch after them is delivered.
func TestBatchRefusedWhole(t *testing.T) {
	mh, ih, other := newHost(t), newHost(t), newHost(t)
	connect(t, ih, mh)
	mb := newBus(t, mh, nil) // accepts every forwarder: only the batch's own checks refuse
	rel := events.KindTopic(wire.EventKind_EVENT_KIND_RELATION)
	ms, err := mb.Subscribe(rel)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	s, err := ih.NewStream(context.Background(), mh.ID(), pubsub.GossipSubID_v11)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := msgio.NewVarintWriter(s)
	msgSeq := uint64(0)
	sendBatch := func(broken bool, eb *wire.EventBatch) {
		t.Helper()
		data, err := proto.Marshal(eb)
		if err != nil {
			t.Fatal(err)
		}
		msgSeq++
		m := rawData(t, ih, events.BatchTopic(rel), data, msgSeq, broken)
		b, err := proto.Marshal(&pubsubpb.RPC{Publish: []*pubsubpb.Message{m}})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteMsg(b); err != nil {
			t.Fatal(err)
		}
	}
	send := func(broken bool, evs ...*wire.Event) {
		t.Helper()
		sendBatch(broken, &wire.EventBatch{Events: evs})
	}
	expect := func(seqs ...uint64) {
		t.Helper()
		for _, want := range seqs {
			ev := next(t, ms, 10*time.Second)
			if ev == nil || ev.Peer != ih.ID().String() || ev.Seq != want {
				t.Fatalf("want event %d of the good batch, got %v", want, ev)
			}
		}
	}
	send(false, relationEvent(ih, 1), relationEvent(ih, 2), relationEvent(ih, 3))
	expect(1, 2, 3)

	wrongKind := relationEvent(ih, 12)
	wrongKind.Kind = wire.EventKind_EVENT_KIND_APP
	send(false, relationEvent(ih, 10), relationEvent(other, 11), relationEvent(ih, 12))                   // forged inner event
	send(true, relationEvent(ih, 20), relationEvent(ih, 21))                                              // broken signature
	send(false)                                                                                           // empty
	send(false, relationEvent(ih, 30), wrongKind)                                                         // another kind inside
	sendBatch(false, &wire.EventBatch{SinglesWanted: true, Events: []*wire.Event{relationEvent(ih, 35)}}) // a notice with an event
	// Validation runs on several goroutines: the good batch may overtake
	// the bad ones, so look a while past it too.
	send(false, relationEvent(ih, 40), relationEvent(ih, 41))
	var got []uint64
	for ev := next(t, ms, 10*time.Second); ev != nil; ev = next(t, ms, time.Second) {
		got = append(got, ev.Seq)
	}
	if len(got) != 2 || got[0] != 40 || got[1] != 41 {
		t.Fatalf("after the bad batches, got events %v; want only 40, 41", got)
	}
	if st := mb.Stats(); st.Rejected < 4 { // the broken signature is refused by gossipsub itself
		t.Fatalf("the manager rejected %d batches: %+v", st.Rejected, st)
	}
}

// Many events published at once go in few signed messages, and every
// subscriber sees each exactly once: the producer's own subscription in
// the order made, a consumer on another host all of them.
func TestBatchesDeliverEachEventOnce(t *testing.T) {
	ph, ch := newHost(t), newHost(t)
	connect(t, ch, ph)
	pb := newBus(t, ph, nil)
	cb := newBus(t, ch, nil)
	rel := events.KindTopic(wire.EventKind_EVENT_KIND_RELATION)
	ps, err := pb.Subscribe(rel)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := cb.Subscribe(rel)
	if err != nil {
		t.Fatal(err)
	}
	waitPeers(t, pb, events.BatchTopic(rel), 1)
	waitPeers(t, cb, events.BatchTopic(rel), 1)
	// gossipsub grafts its mesh at its heartbeats: publish until the
	// consumer hears.
	seq := uint64(0)
	for ev := (*wire.Event)(nil); ev == nil; {
		if seq++; seq > 100 {
			t.Fatal("nothing reached the consumer")
		}
		pb.Publish(relationEvent(ph, seq))
		ev = next(t, cs, 200*time.Millisecond)
	}
	first := seq + 1
	const n = 1000
	for i := range uint64(n) {
		pb.Publish(relationEvent(ph, first+i))
	}
	ownNext := uint64(1)
	for ownNext < first+n {
		ev := next(t, ps, 10*time.Second)
		if ev == nil {
			t.Fatalf("own subscription: event %d never came", ownNext)
		}
		if ev.Seq != ownNext {
			t.Fatalf("own subscription: event %d, want %d (out of order, twice or lost)", ev.Seq, ownNext)
		}
		ownNext++
	}
	seen := map[uint64]bool{}
	for len(seen) < n {
		ev := next(t, cs, 10*time.Second)
		if ev == nil {
			t.Fatalf("consumer: %d of %d events", len(seen), n)
		}
		if ev.Seq < first {
			continue // the probes
		}
		if seen[ev.Seq] {
			t.Fatalf("consumer: event %d twice", ev.Seq)
		}
		seen[ev.Seq] = true
	}
	if ev := next(t, cs, 500*time.Millisecond); ev != nil {
		t.Fatalf("consumer: an event after all of them: %v", ev)
	}
	st := pb.Stats()
	if st.Published != first+n-1 || st.Messages*4 > st.Published {
		t.Fatalf("%d events in %d messages: want all of them, in batches of 4 or more on average", st.Published, st.Messages)
	}
}

// A subscriber that knows only single events (an older manager or
// `gridmgr watch`: plain gossipsub on the event topic, no batch topic)
// keeps receiving one wire.Event per message, every one of them; the
// producer's own subscription still gets them all.
func TestOldSubscriberGetsSingleEvents(t *testing.T) {
	ph, oh := newHost(t), newHost(t)
	connect(t, oh, ph)
	pb := newBus(t, ph, nil)
	rel := events.KindTopic(wire.EventKind_EVENT_KIND_RELATION)
	ps, err := pb.Subscribe(rel)
	if err != nil {
		t.Fatal(err)
	}
	osub := oldSubscriber(t, oh, rel)
	waitPeers(t, pb, rel, 1)
	// In rounds of 20, read by the old subscriber before the next: a
	// queue of gossipsub's (32 messages per peer) must not be what drops.
	const n, round = 300, 20
	seen := map[uint64]bool{}
	for r := uint64(0); r < n; r += round {
		for i := range uint64(round) {
			pb.Publish(relationEvent(ph, r+i+1))
		}
		for i := range uint64(round) {
			if ev := next(t, ps, 10*time.Second); ev == nil || ev.Seq != r+i+1 {
				t.Fatalf("own subscription: got %v, want event %d", ev, r+i+1)
			}
		}
		for len(seen) < int(r+round) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			m, err := osub.Next(ctx)
			cancel()
			if err != nil {
				t.Fatalf("old subscriber: %d of %d events: %v", len(seen), r+round, err)
			}
			var ev wire.Event
			if err := proto.Unmarshal(m.Data, &ev); err != nil || ev.Version != 1 || ev.Peer != ph.ID().String() || ev.Seq == 0 || seen[ev.Seq] {
				t.Fatalf("old subscriber: not one new event (%v): %v", err, &ev)
			}
			seen[ev.Seq] = true
		}
	}
	if st := pb.Stats(); st.Messages != st.Published {
		t.Fatalf("%d events in %d messages with an old subscriber: want one each", st.Published, st.Messages)
	}
}

// An older subscriber two hops from the producer (producer — newer
// manager — older manager, which knows only single events and is not a
// neighbour of the producer) receives the producer's events: the newer
// manager sees a neighbour that does not take batches and says so in a
// notice, and the producer, hearing it, publishes single events, which
// the newer manager relays. Without the notice the producer, whose only
// neighbour takes batches, would batch them all past the older one.
func TestOldSubscriberFarFromProducer(t *testing.T) {
	ph, mh, oh := newHost(t), newHost(t), newHost(t)
	connect(t, mh, ph)
	connect(t, oh, mh)
	all := func(peer.ID) bool { return true }
	mkBus := func(h host.Host) *events.Bus {
		b, err := events.New(context.Background(), h, events.Options{Accept: all, NoticeEvery: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		return b
	}
	pb, mb := mkBus(ph), mkBus(mh)
	rel := events.KindTopic(wire.EventKind_EVENT_KIND_RELATION)
	for _, b := range []*events.Bus{pb, mb} { // managers relay the event topics
		s, err := b.Subscribe(rel)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
	}
	osub := oldSubscriber(t, oh, rel)
	waitPeers(t, mb, rel, 2)
	waitPeers(t, pb, events.BatchTopic(rel), 1)
	oldNext := func(within time.Duration) *wire.Event {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		m, err := osub.Next(ctx)
		if err != nil {
			return nil
		}
		var ev wire.Event
		if err := proto.Unmarshal(m.Data, &ev); err != nil {
			t.Fatalf("the older subscriber got a message that is not one event: %v", err)
		}
		return &ev
	}
	// Until the notice has come round, the producer may batch: publish
	// until the older subscriber hears.
	seq := uint64(0)
	for ev := (*wire.Event)(nil); ev == nil; {
		if seq++; seq > 300 {
			t.Fatalf("no event reached the older subscriber in %d tries (notices sent by the middle manager: %d)", seq-1, mb.Stats().Notices)
		}
		pb.Publish(relationEvent(ph, seq))
		ev = oldNext(100 * time.Millisecond)
	}
	// From then on, every event reaches it, one per message (in rounds
	// of 20, each read before the next: a queue of gossipsub's, 32
	// messages per peer, must not be what drops).
	first := seq + 1
	const n, round = 100, 20
	seen := map[uint64]bool{}
	for r := uint64(0); r < n; r += round {
		for i := range uint64(round) {
			pb.Publish(relationEvent(ph, first+r+i))
		}
		for len(seen) < int(r+round) {
			ev := oldNext(10 * time.Second)
			if ev == nil {
				t.Fatalf("the older subscriber got %d of %d events after the first", len(seen), r+round)
			}
			if ev.Seq >= first {
				seen[ev.Seq] = true
			}
		}
	}
	if mb.Stats().Notices == 0 || pb.Stats().Notices != 0 {
		t.Fatalf("notices: %d by the middle manager (want some), %d by the producer (want none)", mb.Stats().Notices, pb.Stats().Notices)
	}
}

// oldSubscriber subscribes h to topic t as a manager or consumer from
// before batches would: plain gossipsub, the event topic only.
func oldSubscriber(t *testing.T, h host.Host, topic string) *pubsub.Subscription {
	t.Helper()
	ops, err := pubsub.NewGossipSub(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	otp, err := ops.Join(topic)
	if err != nil {
		t.Fatal(err)
	}
	osub, err := otp.Subscribe(pubsub.WithBufferSize(1024))
	if err != nil {
		t.Fatal(err)
	}
	return osub
}
