package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/wire"
)

// Topic names.
const (
	eventPrefix = "/gridmgr/ev/1/"
	utilPrefix  = "/gridmgr/util/1/"
)

// MaxEventSize bounds one event message (bytes).
const MaxEventSize = 64 << 10

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

var topicRE = regexp.MustCompile(`^/gridmgr/(ev/1/(relation|reservation|app|admin|job)|util/1/[1-9A-HJ-NP-Za-km-z]{32,128})$`)

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
}

// Stats are the bus's counts since New.
type Stats struct {
	Published, Dropped, PublishErrors uint64 // events handed to gossipsub; dropped on a full queue; refused by it
	Received, Rejected, Lagged        uint64 // delivered to subscribers; refused by validation; lost by slow subscribers
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

	queue  chan *wire.Event
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	published, dropped, pubErrs, received, rejected, lagged atomic.Uint64
}

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
		topics: make(map[string]*pubsub.Topic),
		queue:  make(chan *wire.Event, opts.Queue),
		ctx:    ctx, cancel: cancel, done: make(chan struct{}),
	}
	go b.publishLoop()
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
// whose producer signed it. gossipsub checks the signature before (of
// every message but the ones this node signs as it publishes them: the
// repository's copy of go-libp2p-pubsub, third_party/go-libp2p-pubsub,
// does not verify its own signature again).
func (b *Bus) validate(t string) pubsub.ValidatorEx {
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
		// Our own publish hands the event it encoded along (publishLoop):
		// the same checks, without decoding it again.
		ev, _ := msg.ValidatorData.(*wire.Event)
		if ev == nil || msg.ReceivedFrom != b.self {
			ev = &wire.Event{}
			if err := proto.Unmarshal(msg.Data, ev); err != nil {
				return reject("malformed: " + err.Error())
			}
		}
		signer := msg.GetFrom()
		signerID := b.selfID // most messages a manager validates are its own
		if signer != b.self {
			signerID = signer.String()
		}
		if ev.Peer != signerID {
			return reject("producer " + ev.Peer + " is not the signer " + signerID)
		}
		if ev.Version == 0 || ev.Kind == wire.EventKind_EVENT_KIND_UNSPECIFIED || len(ev.Manager) > 64 || len(ev.Type) > 32 {
			return reject("not a complete event")
		}
		if strings.HasPrefix(t, eventPrefix) {
			if KindTopic(ev.Kind) != t {
				return reject("kind " + KindName(ev.Kind) + " on topic " + t)
			}
		} else if ev.Kind != wire.EventKind_EVENT_KIND_UTILIZATION {
			return reject("kind " + KindName(ev.Kind) + " on a utilization topic")
		}
		msg.ValidatorData = ev
		return pubsub.ValidationAccept
	}
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

func (b *Bus) publishLoop() {
	defer close(b.done)
	for {
		select {
		case <-b.ctx.Done():
			return
		case ev := <-b.queue:
			data, err := proto.Marshal(ev)
			if err != nil || len(data) > MaxEventSize {
				b.pubErrs.Add(1)
				continue
			}
			tp, err := b.topic(TopicOf(ev))
			if err == nil {
				err = tp.Publish(b.ctx, data, pubsub.WithValidatorData(ev))
			}
			if err != nil {
				if b.ctx.Err() != nil {
					return
				}
				b.pubErrs.Add(1)
				b.log.Debug("event not published", "kind", KindName(ev.Kind), "err", err)
				continue
			}
			b.published.Add(1)
		}
	}
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
// which is closed by Close or when the bus closes.
func (b *Bus) Subscribe(topics ...string) (*Sub, error) {
	if len(topics) == 0 {
		return nil, errors.New("events: subscribe to no topic")
	}
	ctx, cancel := context.WithCancel(b.ctx)
	c := make(chan Received, b.opts.SubBuffer)
	s := &Sub{C: c, cancel: cancel}
	for _, t := range topics {
		tp, err := b.topic(t)
		var ps *pubsub.Subscription
		if err == nil {
			ps, err = tp.Subscribe(pubsub.WithBufferSize(b.opts.SubBuffer))
		}
		if err != nil {
			s.Close()
			return nil, err
		}
		s.subs = append(s.subs, ps)
	}
	for i, ps := range s.subs {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for {
				msg, err := ps.Next(ctx)
				if err != nil {
					return
				}
				ev, ok := msg.ValidatorData.(*wire.Event)
				if !ok {
					continue
				}
				b.received.Add(1)
				select {
				case c <- Received{Event: ev, Topic: topics[i]}:
				default:
					b.lagged.Add(1)
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
		Published: b.published.Load(), Dropped: b.dropped.Load(), PublishErrors: b.pubErrs.Load(),
		Received: b.received.Load(), Rejected: b.rejected.Load(), Lagged: b.lagged.Load(),
	}
}

// Close stops the bus. Subscriptions end.
func (b *Bus) Close() {
	b.cancel()
	<-b.done
}
