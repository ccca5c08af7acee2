package node_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/wire"
)

// memnet's Sized hook (the simulator's bytes at rest) gets every message
// Trace gets, after it, with the message's encoded size, whether the
// message was delivered on the Net's goroutine or on a worker of a
// parallel window (where Sized's size is computed), and the two runs
// agree.
func TestSizedSeesEveryDeliveryWithItsSize(t *testing.T) {
	run := func(workers int) (msgs int, bytes int) {
		g := newRandomGrid(t, 5, 40)
		g.n.Workers, g.n.Lookahead = workers, g.n.Latency
		var traced []*wire.Envelope
		g.n.Trace = func(_ time.Time, _ string, _ *memnet.Node, env *wire.Envelope) {
			traced = append(traced, env)
		}
		g.n.Sized = func(_ *memnet.Node, env *wire.Envelope, size int) {
			if len(traced) == 0 || traced[len(traced)-1] != env {
				t.Fatalf("%d workers: Sized got a message Trace did not get just before", workers)
			}
			traced = traced[:len(traced)-1]
			if want := proto.Size(env); size != want {
				t.Fatalf("%d workers: Sized says %d bytes, the message is %d", workers, size, want)
			}
			msgs++
			bytes += size
		}
		g.n.RunFor(5 * time.Second)
		if len(traced) != 0 {
			t.Fatalf("%d workers: %d messages traced and not sized", workers, len(traced))
		}
		return msgs, bytes
	}
	m1, b1 := run(1)
	m2, b2 := run(2)
	if m1 == 0 || b1 == 0 {
		t.Fatalf("nothing was sized (%d messages, %d bytes)", m1, b1)
	}
	if m1 != m2 || b1 != b2 {
		t.Fatalf("one worker sized %d messages, %d bytes; two sized %d, %d", m1, b1, m2, b2)
	}
	t.Logf("%d messages, %d bytes", m1, b1)
}
