package node_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/wire"
)

// replyLog is a Transport that records, per channel, what each reply
// answers.
type replyLog struct {
	mu  sync.Mutex
	got map[uint64][]uint64
}

func (r *replyLog) Dial(string, []string)       {}
func (r *replyLog) CloseChannel(uint64, string) {}
func (r *replyLog) ClosePeer(string)            {}
func (r *replyLog) Send(ch uint64, e *wire.Envelope) {
	r.mu.Lock()
	r.got[ch] = append(r.got[ch], e.ReplyTo)
	r.mu.Unlock()
}

// batchLog is a replyLog that is a node.BatchTransport: what Queue takes
// counts as sent only once Push names its channel.
type batchLog struct {
	replyLog
	held map[uint64][]uint64
}

func (b *batchLog) Queue(ch uint64, e *wire.Envelope) {
	b.mu.Lock()
	b.held[ch] = append(b.held[ch], e.ReplyTo)
	b.mu.Unlock()
}

func (b *batchLog) Push(chs []uint64) {
	b.mu.Lock()
	for _, ch := range chs {
		b.got[ch] = append(b.got[ch], b.held[ch]...)
		delete(b.held, ch)
	}
	b.mu.Unlock()
}

func (r *replyLog) count(ch uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got[ch])
}

// Inputs a goroutine hands over keep their order whether the driver
// handles them on that goroutine (DeliverNow, the Core free) or queues
// them (Deliver, or DeliverNow while the Core is busy or something is
// queued), with several such goroutines and in-process requests at once.
// Each goroutine is a client channel sending pings numbered 1..n; the
// Core answers each at once, so the answers must come back numbered
// 1..n too.
// With a BatchTransport, what a turn queued is pushed at its end: every
// answer is pushed, in order.
func TestDeliverNowKeepsEachSendersOrder(t *testing.T) {
	t.Run("Send", func(t *testing.T) { deliverNowOrder(t, false) })
	t.Run("QueuePush", func(t *testing.T) { deliverNowOrder(t, true) })
}

func deliverNowOrder(t *testing.T, batch bool) {
	cfg := config.Default()
	cfg.Name = "d"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var tr node.Transport
	log := &replyLog{got: map[uint64][]uint64{}}
	tr = log
	if batch {
		b := &batchLog{replyLog: replyLog{got: map[uint64][]uint64{}}, held: map[uint64][]uint64{}}
		tr, log = b, &b.replyLog
	}
	d := node.NewDriver(cfg, "12D3KooWself", nil, tr, nil, node.DriverOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); <-d.Done() }()
	// Inputs delivered before Run are queued, and come first.
	for i := uint64(1); i <= 10; i++ {
		d.DeliverNow(ping(1, i))
	}
	go d.Run(ctx)

	const senders, n = 6, 3000
	var wg sync.WaitGroup
	for g := 1; g <= senders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			ch := uint64(g)
			from := uint64(1)
			if g == 1 {
				from = 11
			}
			for i := from; i <= n; i++ {
				var ok bool
				if rng.IntN(3) == 0 {
					ok = d.Deliver(ping(ch, i))
				} else {
					ok = d.DeliverNow(ping(ch, i))
				}
				if !ok {
					t.Error("driver stopped")
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // in-process requests beside them
		defer wg.Done()
		for i := 0; i < 500; i++ {
			rep, err := d.Request(ctx, &wire.Envelope{Body: &wire.Envelope_PingRequest{PingRequest: &wire.PingRequest{}}})
			if err != nil || rep.GetPingReply() == nil {
				t.Errorf("request %d: %v %v", i, rep, err)
				return
			}
		}
	}()
	wg.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for g := uint64(1); g <= senders; g++ {
		for log.count(g) < n {
			if time.Now().After(deadline) {
				t.Fatalf("channel %d: %d answers of %d", g, log.count(g), n)
			}
			time.Sleep(time.Millisecond)
		}
		log.mu.Lock()
		for i, id := range log.got[g] {
			if id != uint64(i+1) {
				log.mu.Unlock()
				t.Fatalf("channel %d: answer %d is to ping %d: order lost", g, i+1, id)
			}
		}
		log.mu.Unlock()
	}
}

// After Run has returned, DeliverNow does not run the Core, and Request
// reports the driver stopped.
func TestDeliverNowAfterStop(t *testing.T) {
	cfg := config.Default()
	cfg.Name = "d"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tr := &replyLog{got: map[uint64][]uint64{}}
	d := node.NewDriver(cfg, "12D3KooWself", nil, tr, nil, node.DriverOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	go d.Run(ctx)
	if _, err := d.Request(context.Background(), &wire.Envelope{Body: &wire.Envelope_PingRequest{PingRequest: &wire.PingRequest{}}}); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-d.Done()
	d.DeliverNow(ping(1, 1)) // queued at most, as Deliver would (never run)
	if _, err := d.Request(context.Background(), &wire.Envelope{Body: &wire.Envelope_PingRequest{PingRequest: &wire.PingRequest{}}}); err != node.ErrStopped {
		t.Fatalf("Request after stop: %v, want ErrStopped", err)
	}
	if c := tr.count(1); c != 0 {
		t.Fatalf("%d answers after the stop", c)
	}
}

func ping(ch, id uint64) node.Input {
	return node.Input{Kind: node.InputClient, Peer: fmt.Sprintf("client-%d", ch), Chan: ch,
		Env: &wire.Envelope{Id: id, Body: &wire.Envelope_PingRequest{PingRequest: &wire.PingRequest{}}}}
}
