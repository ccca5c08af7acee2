package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/wire"
)

func reserveReq(id string) *wire.Envelope {
	return &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
		RequestId: id, Amounts: []*wire.Amount{{Kind: "cpus", N: 1}},
	}}}
}

// A disk that takes 5 s per write delays the answers that wait for it —
// and nothing else: the manager's heartbeats keep their interval, and no
// relation anywhere turns suspect.
func TestSlowDiskDelaysOnlyItsReplies(t *testing.T) {
	n := patentNet(t, 21)
	for _, e := range patent {
		nd := n.Node(pid(e[0]))
		nd.Host = &node.HostValues{CPUs: 8, Mem: 8 << 30, MemAvail: 8 << 30}
		n.Start(pid(e[0]))
	}
	if !n.RunUntil(func() bool { return formed(n) }, time.Minute) {
		t.Fatal("tree not formed")
	}
	slow := n.Node(pid("gm154"))
	slow.Disk.Delay = 5 * time.Second
	last := map[string]time.Time{} // gm154 → peer: when the last heartbeat arrived
	var worst time.Duration
	n.Trace = func(at time.Time, from string, dst *memnet.Node, env *wire.Envelope) {
		to := dst.Peer
		if from != pid("gm154") || env.GetHeartbeat() == nil {
			return
		}
		if prev, ok := last[to]; ok {
			worst = max(worst, at.Sub(prev))
		}
		last[to] = at
	}
	var suspects []string
	for _, nd := range n.Nodes() {
		nd.Events = nil
	}
	start := n.Now()
	for i := range 3 {
		rep := n.Ask(pid("gm154"), reserveReq("r"+string(rune('a'+i))), 30*time.Second)
		if rep.GetReservationReply() == nil {
			t.Fatalf("reservation %d: %v", i, rep)
		}
	}
	took := n.Now().Sub(start)
	n.RunFor(5 * time.Second)
	for _, nd := range n.Nodes() {
		for _, e := range nd.Events {
			if strings.Contains(e.What, "suspect") || strings.Contains(e.What, "down") {
				suspects = append(suspects, nd.Name+": "+e.What)
			}
		}
	}
	if took < 15*time.Second {
		t.Errorf("three reservations answered after %v: their replies did not wait for the 5 s writes", took)
	}
	// Ticks fall on a 100 ms grid: a heartbeat may be that late, no more.
	if interval := time.Second; worst > interval+100*time.Millisecond {
		t.Errorf("a heartbeat of gm154 came %v after the previous one, interval %v", worst, interval)
	}
	if len(suspects) > 0 {
		t.Errorf("relations turned suspect or down while gm154's disk was slow: %v", suspects)
	}
	if got := len(slow.Disk.Records); got != 3 {
		t.Errorf("gm154's disk holds %d reservations, want 3", got)
	}
}

// A write that fails turns the reservation it would have made durable into
// an error, and the manager refuses further reservation changes until it
// restarts (what it holds in memory is no longer what the disk holds).
func TestFailedWriteRefusesReservations(t *testing.T) {
	n := patentNet(t, 22)
	for _, e := range patent {
		nd := n.Node(pid(e[0]))
		nd.Host = &node.HostValues{CPUs: 8, Mem: 8 << 30, MemAvail: 8 << 30}
		n.Start(pid(e[0]))
	}
	if !n.RunUntil(func() bool { return formed(n) }, time.Minute) {
		t.Fatal("tree not formed")
	}
	nd := n.Node(pid("gm160"))
	if rep := n.Ask(pid("gm160"), reserveReq("ok"), time.Second); rep.GetReservationReply() == nil {
		t.Fatalf("first reservation: %v", rep)
	}
	nd.Disk.FailWrites = 1
	rep := n.Ask(pid("gm160"), reserveReq("lost"), time.Second)
	if e := rep.GetError(); e.GetCode() != wire.ErrorReply_CODE_UNAVAILABLE || !strings.Contains(e.GetMessage(), "could not make the reservation durable") {
		t.Fatalf("reservation whose write failed: %v", rep)
	}
	rep = n.Ask(pid("gm160"), reserveReq("after"), time.Second)
	if e := rep.GetError(); e.GetCode() != wire.ErrorReply_CODE_UNAVAILABLE || !strings.Contains(e.GetMessage(), "store failed") {
		t.Fatalf("reservation after the failure: %v", rep)
	}
	if got := len(nd.Disk.Records); got != 1 {
		t.Errorf("disk holds %d reservations, want the first one only", got)
	}
	// A restart starts from the disk, and takes reservations again.
	n.Kill(pid("gm160"))
	n.Start(pid("gm160"))
	if rep := n.Ask(pid("gm160"), reserveReq("again"), time.Second); rep.GetReservationReply() == nil {
		t.Fatalf("reservation after a restart: %v", rep)
	}
}
