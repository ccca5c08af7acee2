package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/wire"
)

// Topic names.
const (
	eventPrefix = "/gridmgr/ev/1/"
	batchPrefix = "/gridmgr/evb/1/"
	utilPrefix  = "/gridmgr/util/1/"
)

// MaxEventSize bounds one event message (bytes), a batch included.
const MaxEventSize = 64 << 10

// MaxBatch bounds the events of one batch message (wire.EventBatch).
const MaxBatch = 256

// Kinds are the event kinds that have a grid-wide topic.
var Kinds = []wire.EventKind{
	wire.EventKind_EVENT_KIND_RELATION, wire.EventKind_EVENT_KIND_RESERVATION,
	wire.EventKind_EVENT_KIND_APP, wire.EventKind_EVENT_KIND_ADMIN, wire.EventKind_EVENT_KIND_JOB,
}

// KindName is the word of a kind: "relation", "utilization".
func KindName(k wire.EventKind) string {
	return strings.ToLower(strings.TrimPrefix(k.String(), "EVENT_KIND_"))
}

// ParseKind reads a kind word.
func ParseKind(s string) (wire.EventKind, error) {
	for _, k := range append(Kinds, wire.EventKind_EVENT_KIND_UTILIZATION) {
		if KindName(k) == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("unknown event kind %q; use relation, reservation, app, admin, job or utilization", s)
}

// KindTopic is the topic of an event kind (not utilization).
func KindTopic(k wire.EventKind) string {
	if t, ok := kindTopics[k]; ok {
		return t
	}
	return eventPrefix + KindName(k)
}

// kindTopics are the topics of Kinds, worked out once: every event
// published and validated asks for its topic.
var kindTopics = func() map[wire.EventKind]string {
	m := make(map[wire.EventKind]string, len(Kinds))
	for _, k := range Kinds {
		m[k] = eventPrefix + KindName(k)
	}
	return m
}()

// BatchTopic is the topic of the batches (wire.EventBatch) of the kind
// whose event topic is t; "" if t is not an event topic.
func BatchTopic(t string) string {
	if !strings.HasPrefix(t, eventPrefix) {
		return ""
	}
	if bt, ok := batchTopics[t]; ok {
		return bt
	}
	return batchPrefix + strings.TrimPrefix(t, eventPrefix)
}

// batchTopics maps each kind topic to its batch topic.
var batchTopics = func() map[string]string {
	m := make(map[string]string, len(Kinds))
	for _, k := range Kinds {
		m[eventPrefix+KindName(k)] = batchPrefix + KindName(k)
	}
	return m
}()

// UtilTopic is the topic of the samples of peer's inferiors.
func UtilTopic(peerID string) string { return utilPrefix + peerID }

// TopicOf is where ev is published.
func TopicOf(ev *wire.Event) string {
	if u := ev.GetUtilization(); u != nil || ev.Kind == wire.EventKind_EVENT_KIND_UTILIZATION {
		if u.GetSuperior() != "" {
			return UtilTopic(u.GetSuperior())
		}
		return UtilTopic(ev.Peer)
	}
	return KindTopic(ev.Kind)
}

var topicRE = regexp.MustCompile(`^/gridmgr/(evb?/1/(relation|reservation|app|admin|job)|util/1/[1-9A-HJ-NP-Za-km-z]{32,128})$`)

// ValidTopic reports whether t is a topic of the bus.
func ValidTopic(t string) bool { return topicRE.MatchString(t) }

// Options configure a Bus.
type Options struct {
	Log *slog.Logger
	// Accept reports whether a message forwarded by from may enter: a
	// manager accepts its own and its relations'. nil accepts every peer
	// (a consumer, which connects to managers only).
	Accept func(from peer.ID) bool
	// Queue bounds the events waiting to be published; default 4096.
	Queue int
	// SubBuffer is each subscription's buffer; default 1024.
	SubBuffer int
	// Tracer, if set, sees gossipsub's raw events (the measurements count
	// the bytes of the RPCs a node receives with it).
	Tracer pubsub.RawTracer
	// Single publishes every event in a message of its own on its event
	// topic, as managers did before batches (wire.EventBatch): to compare,
	// and to test what an older manager sends. Such a bus sends no
	// notices either.
	Single bool
	// NoticeEvery is how often a manager (Accept set) looks for a
	// neighbour on an event topic that does not take its batch topic, and
	// while there is one, says so to the grid in a notice
	// (wire.EventBatch.singles_wanted); default 5s. A manager that hears a
	// notice publishes that kind's events one per message until
	// 3 × NoticeEvery after the last.
	NoticeEvery time.Duration
}

// Stats are the bus's counts since New.
type Stats struct {
	Published, Dropped, PublishErrors uint64 // events handed to gossipsub; dropped on a full queue; refused by it
	Messages                          uint64 // gossipsub messages those events went in (batches count once)
	Received, Rejected, Lagged        uint64 // delivered to subscribers; refused by validation; lost by slow subscribers
	Notices                           uint64 // notices sent: a neighbour takes single events only (Options.NoticeEvery)
}

// Bus is a node's gossipsub instance with the grid's topics.
type Bus struct {
	ps     *pubsub.PubSub
	self   peer.ID
	selfID string // self.String()
	log    *slog.Logger
	opts   Options

	mu     sync.Mutex
	topics map[string]*pubsub.Topic

	queue   chan *wire.Event
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{} // publishLoop ended
	noticed chan struct{} // noticeLoop ended (or never ran)

	published, dropped, pubErrs, received, rejected, lagged, messages atomic.Uint64

	gmu   sync.Mutex
	gates map[string]gate      // by event topic
	heard map[string]time.Time // by event topic: the last notice heard (singles wanted)

	notices atomic.Uint64 // notices sent
}

// gate is what batchesTaken found for a topic, and when.
type gate struct {
	ok, refreshing bool
	at             time.Time
}

// gateFor is how long batchesTaken's answer stands: asking gossipsub for a
// topic's peers is two round trips to its event loop, which a publication
// should not wait on (a stale answer is looked at again in the
// background, and used meanwhile). A peer that subscribes in the meantime
// may miss that long of a topic's events, less than gossipsub itself may
// take to graft it (a heartbeat, 1 s; docs/monitoring.md).
const gateFor = 100 * time.Millisecond

// gateStale is the age past which batchesTaken's answer is not used even
// while a new one is sought: after a quiet while, ask and wait.
const gateStale = time.Second

// Params are the gossipsub parameters of the bus: the defaults, with a
// mesh wide enough to keep every relation of a manager in it (a tree is
// the overlay, and a pruned tree edge would cut a subtree off the mesh).
func Params() pubsub.GossipSubParams {
	p := pubsub.DefaultGossipSubParams()
	p.D, p.Dlo, p.Dhi, p.Dscore, p.Dout = 64, 4, 256, 4, 2
	return p
}

// New starts the bus on h.
func New(ctx context.Context, h host.Host, opts Options) (*Bus, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Queue <= 0 {
		opts.Queue = 4096
	}
	if opts.SubBuffer <= 0 {
		opts.SubBuffer = 1024
	}
	if opts.NoticeEvery <= 0 {
		opts.NoticeEvery = defaultNoticeEvery
	}
	ctx, cancel := context.WithCancel(ctx)
	psOpts := []pubsub.Option{
		pubsub.WithGossipSubParams(Params()),
		pubsub.WithMessageSignaturePolicy(pubsub.StrictSign),
		pubsub.WithMaxMessageSize(MaxEventSize + 1024),
		pubsub.WithSubscriptionFilter(pubsub.WrapLimitSubscriptionFilter(pubsub.NewRegexpSubscriptionFilter(topicRE), 64)),
		pubsub.WithPeerExchange(false),
		pubsub.WithFloodPublish(true),
	}
	if opts.Tracer != nil {
		psOpts = append(psOpts, pubsub.WithRawTracer(opts.Tracer))
	}
	ps, err := pubsub.NewGossipSub(ctx, h, psOpts...)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("events: gossipsub: %w", err)
	}
	b := &Bus{
		ps: ps, self: h.ID(), selfID: h.ID().String(), log: opts.Log, opts: opts,
		topics: make(map[string]*pubsub.Topic), gates: make(map[string]gate), heard: make(map[string]time.Time),
		queue: make(chan *wire.Event, opts.Queue),
		ctx:   ctx, cancel: cancel, done: make(chan struct{}), noticed: make(chan struct{}),
	}
	go b.publishLoop()
	if opts.Accept != nil && !opts.Single {
		go b.noticeLoop()
	} else {
		close(b.noticed)
	}
	return b, nil
}

// topic joins t once and registers its validator.
func (b *Bus) topic(t string) (*pubsub.Topic, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if tp, ok := b.topics[t]; ok {
		return tp, nil
	}
	if !ValidTopic(t) {
		return nil, fmt.Errorf("events: %q is not a topic of the grid", t)
	}
	if err := b.ps.RegisterTopicValidator(t, b.validate(t)); err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	tp, err := b.ps.Join(t)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	b.topics[t] = tp
	return tp, nil
}

// validate is the check of every message on topic t, ours included:
// forwarded by an accepted peer, a well-formed event of the topic's kind,
// whose producer signed it; on a batch topic, a batch of 1 to MaxBatch
// such events, refused whole if any one of them is not. gossipsub checks
// the signature before (of every message but the ones this node signs as
// it publishes them: the repository's copy of go-libp2p-pubsub,
// third_party/go-libp2p-pubsub, does not verify its own signature again).
func (b *Bus) validate(t string) pubsub.ValidatorEx {
	batch := strings.HasPrefix(t, batchPrefix)
	kindTopic := t
	if batch {
		kindTopic = eventPrefix + strings.TrimPrefix(t, batchPrefix)
	}
	return func(_ context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
		reject := func(why string) pubsub.ValidationResult {
			b.rejected.Add(1)
			b.log.Debug("event rejected", "topic", t, "from", from.String(), "why", why)
			return pubsub.ValidationReject
		}
		if from != b.self && b.opts.Accept != nil && !b.opts.Accept(from) {
			return reject("not forwarded by a manager of the grid")
		}
		if len(msg.Data) > MaxEventSize {
			return reject("too large")
		}
		signer := msg.GetFrom()
		signerID := b.selfID // most messages a manager validates are its own
		if signer != b.self {
			signerID = signer.String()
		}
		// Our own publish hands what it encoded along (publishLoop): the
		// same checks, without decoding it again.
		own := msg.ReceivedFrom == b.self
		if batch {
			eb, _ := msg.ValidatorData.(*wire.EventBatch)
			if eb == nil || !own {
				eb = &wire.EventBatch{}
				if err := proto.Unmarshal(msg.Data, eb); err != nil {
					return reject("malformed batch: " + err.Error())
				}
			}
			if eb.SinglesWanted {
				if len(eb.Events) > 0 {
					return reject(fmt.Sprintf("a notice with %d events", len(eb.Events)))
				}
				b.gmu.Lock()
				b.heard[kindTopic] = time.Now()
				b.gmu.Unlock()
				msg.ValidatorData = eb
				return pubsub.ValidationAccept
			}
			if len(eb.Events) == 0 || len(eb.Events) > MaxBatch {
				return reject(fmt.Sprintf("a batch of %d events", len(eb.Events)))
			}
			for i, ev := range eb.Events {
				if why := checkEvent(kindTopic, ev, signerID); why != "" {
					return reject(fmt.Sprintf("batch event %d: %s", i, why))
				}
			}
			msg.ValidatorData = eb
			return pubsub.ValidationAccept
		}
		ev, _ := msg.ValidatorData.(*wire.Event)
		if ev == nil || !own {
			ev = &wire.Event{}
			if err := proto.Unmarshal(msg.Data, ev); err != nil {
				return reject("malformed: " + err.Error())
			}
		}
		if why := checkEvent(t, ev, signerID); why != "" {
			return reject(why)
		}
		msg.ValidatorData = ev
		return pubsub.ValidationAccept
	}
}

// checkEvent says why ev may not travel on topic t (an event or a
// utilization topic) in a message signed by signerID; "" if it may.
func checkEvent(t string, ev *wire.Event, signerID string) string {
	if ev == nil {
		return "no event"
	}
	if ev.Peer != signerID {
		return "producer " + ev.Peer + " is not the signer " + signerID
	}
	if ev.Version == 0 || ev.Kind == wire.EventKind_EVENT_KIND_UNSPECIFIED || len(ev.Manager) > 64 || len(ev.Type) > 32 {
		return "not a complete event"
	}
	if strings.HasPrefix(t, eventPrefix) {
		if KindTopic(ev.Kind) != t {
			return "kind " + KindName(ev.Kind) + " on topic " + t
		}
	} else if ev.Kind != wire.EventKind_EVENT_KIND_UTILIZATION {
		return "kind " + KindName(ev.Kind) + " on a utilization topic"
	}
	return ""
}

// Publish queues ev for publication; it never blocks (a full queue drops
// it, counted in Stats.Dropped).
func (b *Bus) Publish(ev *wire.Event) {
	select {
	case b.queue <- ev:
	default:
		b.dropped.Add(1)
	}
}

// publishLoop publishes what is queued. Signing is the costly part of a
// publication, so the loop takes everything queued at once (the events of
// one turn of the manager's loop, or of one group commit, come together)
// and publishes the events of one kind in one signed batch (wire.EventBatch
// on the kind's batch topic) while every peer on the kind's event topic
// also subscribes its batch topic; else one message per event, as before.
func (b *Bus) publishLoop() {
	defer close(b.done)
	var evs []*wire.Event
	for {
		select {
		case <-b.ctx.Done():
			return
		case ev := <-b.queue:
			evs = append(evs[:0], ev)
		more:
			for len(evs) < b.opts.Queue {
				select {
				case ev := <-b.queue:
					evs = append(evs, ev)
				default:
					break more
				}
			}
			if !b.publishAll(evs) {
				return
			}
			clear(evs)
		}
	}
}

// publishAll publishes evs, grouped by topic in the order of their first
// event, each group in order; false once the bus is closing.
func (b *Bus) publishAll(evs []*wire.Event) bool {
	if b.opts.Single {
		for _, ev := range evs {
			if !b.publishOne(TopicOf(ev), ev) {
				return false
			}
		}
		return true
	}
	done := make([]bool, len(evs))
	var group []*wire.Event
	for i, ev := range evs {
		if done[i] {
			continue
		}
		t := TopicOf(ev)
		group = append(group[:0], ev)
		for j := i + 1; j < len(evs); j++ {
			if !done[j] && TopicOf(evs[j]) == t {
				group = append(group, evs[j])
				done[j] = true
			}
		}
		if !b.publishGroup(t, group) {
			return false
		}
	}
	return true
}

// publishGroup publishes the events of topic t, in batches when t has a
// batch topic and every peer on t takes batches. A lone event goes in a
// batch of one then: a subscriber reads the two topics apart, and an event
// on the event topic could overtake a batch made before it.
func (b *Bus) publishGroup(t string, evs []*wire.Event) bool {
	bt := BatchTopic(t)
	if bt == "" || !b.batchesTaken(t, bt) {
		for _, ev := range evs {
			if !b.publishOne(t, ev) {
				return false
			}
		}
		return true
	}
	for len(evs) > 0 {
		n := min(len(evs), MaxBatch)
		// The batch owns its slice: subscribers read it after this loop
		// has reused evs.
		eb := &wire.EventBatch{Events: slices.Clone(evs[:n])}
		data, err := proto.Marshal(eb)
		for err == nil && len(data) > MaxEventSize && n > 1 {
			n /= 2
			eb.Events = eb.Events[:n:n]
			data, err = proto.Marshal(eb)
		}
		if err != nil || len(data) > MaxEventSize {
			b.pubErrs.Add(1) // one event too large on its own
		} else if !b.send(bt, data, eb, n) {
			return false
		}
		evs = evs[n:]
	}
	return true
}

// batchesTaken reports whether every peer known on topic t also
// subscribes its batch topic bt (an older manager or consumer subscribes t
// only: it must keep receiving single events), and no notice said lately
// that such a peer is elsewhere in the grid.
func (b *Bus) batchesTaken(t, bt string) bool {
	now := time.Now()
	b.gmu.Lock()
	if at, ok := b.heard[t]; ok && now.Sub(at) < noticeHolds*b.opts.NoticeEvery {
		b.gmu.Unlock()
		return false
	}
	g, known := b.gates[t]
	if !known || now.Sub(g.at) >= gateStale { // the first time, or after a quiet while: ask, and wait
		b.gmu.Unlock()
		ok := b.peersTakeBatches(t, bt)
		b.gmu.Lock()
		b.gates[t] = gate{ok: ok, at: now}
		b.gmu.Unlock()
		return ok
	}
	if now.Sub(g.at) >= gateFor && !g.refreshing {
		b.gates[t] = gate{ok: g.ok, at: g.at, refreshing: true}
		go func() {
			ok := b.peersTakeBatches(t, bt)
			b.gmu.Lock()
			b.gates[t] = gate{ok: ok, at: time.Now()}
			b.gmu.Unlock()
		}()
	}
	b.gmu.Unlock()
	return g.ok
}

func (b *Bus) peersTakeBatches(t, bt string) bool {
	peers := b.ps.ListPeers(t)
	if len(peers) == 0 {
		return true
	}
	takes := make(map[peer.ID]bool, len(peers))
	for _, p := range b.ps.ListPeers(bt) {
		takes[p] = true
	}
	for _, p := range peers {
		if !takes[p] {
			return false
		}
	}
	return true
}

// defaultNoticeEvery is Options.NoticeEvery's default; a notice holds for
// noticeHolds of it, so one lost notice does not switch batches back on.
const (
	defaultNoticeEvery = 5 * time.Second
	noticeHolds        = 3
)

// noticeLoop tells the grid, every NoticeEvery, of each event topic on
// which this manager has had a neighbour that does not take the batch
// topic at its last two looks:
// a manager or consumer from before batches, which receives single events
// only. Its own test (batchesTaken) sees only its neighbours; the notice
// reaches every producer of the kind, which then publishes single events
// that reach the older subscriber through the newer managers between
// them (they relay the event topic too).
func (b *Bus) noticeLoop() {
	defer close(b.noticed)
	tick := time.NewTicker(b.opts.NoticeEvery)
	defer tick.Stop()
	notice, err := proto.Marshal(&wire.EventBatch{SinglesWanted: true})
	if err != nil {
		return
	}
	older := map[string]bool{} // by event topic: an older neighbour at the last look
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-tick.C:
		}
		for _, k := range Kinds {
			t := KindTopic(k)
			bt := BatchTopic(t)
			b.mu.Lock()
			tp, joined := b.topics[bt]
			_, relayed := b.topics[t]
			b.mu.Unlock()
			// Twice in a row: a peer that subscribes announces the two
			// topics one after the other, and would be taken for an older
			// one in between.
			was := older[t]
			older[t] = joined && relayed && !b.peersTakeBatches(t, bt)
			if !older[t] || !was {
				continue
			}
			err := tp.Publish(b.ctx, notice, pubsub.WithValidatorData(&wire.EventBatch{SinglesWanted: true}))
			if b.ctx.Err() != nil {
				return
			}
			if err != nil {
				b.log.Debug("notice not published", "topic", bt, "err", err)
				continue
			}
			b.notices.Add(1)
		}
	}
}

// publishOne publishes ev alone on t; false once the bus is closing.
func (b *Bus) publishOne(t string, ev *wire.Event) bool {
	data, err := proto.Marshal(ev)
	if err != nil || len(data) > MaxEventSize {
		b.pubErrs.Add(1)
		return true
	}
	return b.send(t, data, ev, 1)
}

// send publishes data (n events; vd is what the own validator checks) on
// topic t; false once the bus is closing.
func (b *Bus) send(t string, data []byte, vd any, n int) bool {
	tp, err := b.topic(t)
	if err == nil {
		err = tp.Publish(b.ctx, data, pubsub.WithValidatorData(vd))
	}
	if err != nil {
		if b.ctx.Err() != nil {
			return false
		}
		b.pubErrs.Add(uint64(n))
		b.log.Debug("events not published", "topic", t, "events", n, "err", err)
		return true
	}
	b.published.Add(uint64(n))
	b.messages.Add(1)
	return true
}

// Received is an event a subscription delivered.
type Received struct {
	Event *wire.Event
	Topic string
}

// Sub is a subscription to one or more topics.
type Sub struct {
	C      <-chan Received
	cancel context.CancelFunc
	subs   []*pubsub.Subscription
	wg     sync.WaitGroup
}

// Close ends the subscription; C is closed after.
func (s *Sub) Close() {
	s.cancel()
	for _, ps := range s.subs {
		ps.Cancel()
	}
	s.wg.Wait()
}

// Subscribe subscribes to topics; events arrive on the Sub's channel,
// which is closed by Close or when the bus closes. An event topic's
// subscription takes its batch topic too: the events of a batch arrive one
// by one, in order, each as if it came on the event topic.
func (b *Bus) Subscribe(topics ...string) (*Sub, error) {
	if len(topics) == 0 {
		return nil, errors.New("events: subscribe to no topic")
	}
	ctx, cancel := context.WithCancel(b.ctx)
	c := make(chan Received, b.opts.SubBuffer)
	s := &Sub{C: c, cancel: cancel}
	var as []string // the topic each of s.subs is delivered as
	for _, t := range topics {
		ts := []string{t}
		if bt := BatchTopic(t); bt != "" && ValidTopic(t) {
			ts = append(ts, bt)
		}
		for _, st := range ts {
			tp, err := b.topic(st)
			var ps *pubsub.Subscription
			if err == nil {
				ps, err = tp.Subscribe(pubsub.WithBufferSize(b.opts.SubBuffer))
			}
			if err != nil {
				s.Close()
				return nil, err
			}
			s.subs = append(s.subs, ps)
			as = append(as, t)
		}
	}
	for i, ps := range s.subs {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			deliver := func(ev *wire.Event) {
				b.received.Add(1)
				select {
				case c <- Received{Event: ev, Topic: as[i]}:
				default:
					b.lagged.Add(1)
				}
			}
			for {
				msg, err := ps.Next(ctx)
				if err != nil {
					return
				}
				switch v := msg.ValidatorData.(type) {
				case *wire.Event:
					deliver(v)
				case *wire.EventBatch:
					for _, ev := range v.Events {
						deliver(ev)
					}
				}
			}
		}()
	}
	go func() {
		s.wg.Wait()
		close(c)
	}()
	return s, nil
}

// Peers lists the peers known to subscribe to topic t.
func (b *Bus) Peers(t string) []peer.ID { return b.ps.ListPeers(t) }

// Stats returns the counts.
func (b *Bus) Stats() Stats {
	return Stats{
		Published: b.published.Load(), Dropped: b.dropped.Load(), PublishErrors: b.pubErrs.Load(), Messages: b.messages.Load(),
		Received: b.received.Load(), Rejected: b.rejected.Load(), Lagged: b.lagged.Load(),
		Notices: b.notices.Load(),
	}
}

// Close stops the bus. Subscriptions end.
func (b *Bus) Close() {
	b.cancel()
	<-b.done
	<-b.noticed
}
