package memnet

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/wire"
)

// TestWindowsReplayTheOneGoroutineRun: a grid of 1,000 managers settles and
// runs at rest on one goroutine and on three. The deliveries traced (their
// times, senders, receivers and messages), the relation events and the
// sizes must be the same, in the same order: a window records what its
// events did and replays it, each at its event's time. Started by
// StartAll (Cores made on another goroutine; the list names one manager
// already up and one twice), the run must be the same again.
func TestWindowsReplayTheOneGoroutineRun(t *testing.T) {
	run := func(workers int, all bool) ([]string, *Net) {
		n := New(5)
		n.Latency = time.Millisecond
		if workers > 1 {
			n.Workers, n.Lookahead = workers, time.Millisecond
		}
		var log []string
		n.Trace = func(at time.Time, from string, to *Node, env *wire.Envelope) {
			log = append(log, fmt.Sprintf("%v %s>%s %T", at.Sub(Epoch), from[len(from)-4:], to.Name, env.Body))
		}
		n.Sized = func(to *Node, env *wire.Envelope, size int) {
			log = append(log, fmt.Sprintf("  %s %d", to.Name, size))
		}
		n.OnEvent = func(nd *Node, e node.Event) {
			log = append(log, fmt.Sprintf("%v %s: %s", n.Now().Sub(Epoch), nd.Name, e.What))
		}
		const managers, fanout = 1000, 8
		name := func(i int) string { return fmt.Sprintf("w%03d", i) }
		for i := range managers {
			cfg := config.Default()
			cfg.Name = name(i)
			if i > 0 {
				cfg.Superiors = []peeraddr.PeerAddrs{PeerAddrs(name((i - 1) / fanout))}
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			n.Add(PeerID(name(i)), cfg).Host = &node.HostValues{CPUs: 2, Mem: 1 << 30, MemAvail: 1 << 30}
		}
		n.Start(PeerID(name(7)))
		peers := []string{PeerID(name(3))}
		for i := range managers {
			peers = append(peers, PeerID(name(i)))
		}
		if all {
			started := 0
			n.StartAll(peers, func(k int) { started = k })
			if want := managers - 1; started != want {
				t.Fatalf("StartAll's progress said %d started, of %d", started, want)
			}
		} else {
			for _, p := range peers {
				n.Start(p)
			}
		}
		n.RunFor(2 * time.Second)
		return log, n
	}
	one, _ := run(1, false)
	for _, c := range []struct {
		workers int
		all     bool
	}{{3, false}, {1, true}, {3, true}} {
		got, _ := run(c.workers, c.all)
		if !slices.Equal(one, got) {
			for i := range min(len(one), len(got)) {
				if one[i] != got[i] {
					t.Fatalf("%d workers, StartAll %v: record %d is %q, one goroutine's %q", c.workers, c.all, i, got[i], one[i])
				}
			}
			t.Fatalf("%d workers, StartAll %v: %d records, one goroutine's %d", c.workers, c.all, len(got), len(one))
		}
	}
	if len(one) < 5000 {
		t.Fatalf("only %d records: the grid did not settle as the test means", len(one))
	}
	if i := slices.IndexFunc(one, func(s string) bool { return len(s) > 0 && s[0] != ' ' && !slices.Contains([]byte(s), '>') }); i < 0 {
		t.Fatal("no relation events recorded")
	}
}

// TestChunksLetTheSettleGo: after a window of 100,000 hooks, windows of
// 1,000 make the hooks and the events keep few slots (at most 4,096 hooks
// and 4,096 events, not the settle's 100,000), and a reset clears what it
// keeps (the messages and closures may go).
func TestChunksLetTheSettleGo(t *testing.T) {
	var l chunks[hook]
	var s chunks[pev]
	env := &wire.Envelope{}
	window := func(hooks int) {
		for range hooks {
			*l.next() = hook{env: env}
			s.next()
		}
		for i := int32(0); i < l.n; i++ {
			if l.at(i).env != env {
				t.Fatalf("hook %d of %d lost its message", i, l.n)
			}
		}
		l.reset()
		s.reset()
	}
	slots := func(c [][]hook) int { return len(c) * chunkLen }
	window(100_000)
	if slots(l.c) < 100_000 || len(s.c)*chunkLen < 100_000 {
		t.Fatalf("a window of 100,000 left %d slots of hooks and %d of events", slots(l.c), len(s.c)*chunkLen)
	}
	for range 400 {
		window(1000)
	}
	if slots(l.c) > 4096 || len(s.c)*chunkLen > 4096 {
		t.Errorf("400 windows of 1,000 after it keep %d slots of hooks and %d of events", slots(l.c), len(s.c)*chunkLen)
	}
	for _, c := range l.c {
		for i := range c {
			if c[i].env != nil {
				t.Fatal("a reset kept a message")
			}
		}
	}
}
