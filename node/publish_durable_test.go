package node_test

import (
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/wire"
)

// reservationEvents are the reservation events nd published.
func reservationEvents(evs []*wire.Event) []*wire.Event {
	var out []*wire.Event
	for _, ev := range evs {
		if ev.Kind == wire.EventKind_EVENT_KIND_RESERVATION {
			out = append(out, ev)
		}
	}
	return out
}

// A reservation's event, like its answer, waits for the durable write: a
// manager killed (kill -9) while the write of a group commit is in flight
// has answered nothing and published nothing about it, and after a
// restart the store does not have it either. Once a write is done, the
// events of every request it carried are published, in the order the
// manager made them, together with the answers.
func TestEventsWaitForTheWrite(t *testing.T) {
	gm := pid("gm")
	n := oneManager(t, gm, testConfig(t, "gm"), 26)
	nd := n.Node(gm)
	n.SetHost(gm, node.HostValues{CPUs: 8, Mem: 8 << 30, MemAvail: 8 << 30})
	n.RunFor(time.Second)
	nd.Disk.Delay = 2 * time.Second

	// The first request starts a write; the next two come while it is in
	// flight and go together in the next one (a group commit).
	nd.Published = nil
	var sids []uint64
	for _, id := range []string{"a", "b", "c"} {
		sids = append(sids, n.Request(gm, reserveReq(id)))
		n.RunFor(100 * time.Millisecond)
	}
	n.RunFor(time.Second) // all three are in the manager, no write done
	if evs := reservationEvents(nd.Published); len(evs) != 0 {
		t.Fatalf("%d reservation events published before their write was durable: %v", len(evs), evs)
	}
	for _, sid := range sids {
		if len(nd.Replies[sid]) != 0 {
			t.Fatalf("answered before the write was durable: %v", nd.Replies[sid])
		}
	}
	n.Kill(gm) // kill -9 during the writes
	n.RunFor(10 * time.Second)
	if evs := reservationEvents(nd.Published); len(evs) != 0 {
		t.Fatalf("the killed manager published %d reservation events its disk does not have: %v", len(evs), evs)
	}
	if len(nd.Disk.Records) != 0 {
		t.Fatalf("the disk has %d reservations of a write the kill cut", len(nd.Disk.Records))
	}

	// Restarted: the same requests again; the events come with the writes.
	n.Start(gm)
	n.SetHost(gm, node.HostValues{CPUs: 8, Mem: 8 << 30, MemAvail: 8 << 30})
	n.RunFor(time.Second)
	nd.Published = nil
	sids = sids[:0]
	for _, id := range []string{"a", "b", "c"} {
		sids = append(sids, n.Request(gm, reserveReq(id)))
		n.RunFor(100 * time.Millisecond)
	}
	if !n.RunUntil(func() bool { return len(nd.Replies[sids[2]]) > 0 }, 30*time.Second) {
		t.Fatal("no answer after the writes")
	}
	evs := reservationEvents(nd.Published)
	if len(evs) != 3 || len(nd.Disk.Records) != 3 {
		t.Fatalf("%d reservation events and %d records on disk after three grants, want 3 and 3", len(evs), len(nd.Disk.Records))
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq <= evs[i-1].Seq {
			t.Fatalf("events out of order: %d after %d", evs[i].Seq, evs[i-1].Seq)
		}
	}
	for _, ev := range evs {
		if _, ok := nd.Disk.Records[ev.GetReservation().GetId()]; !ok {
			t.Fatalf("event for %s, which is not on disk", ev.GetReservation().GetId())
		}
	}
}
