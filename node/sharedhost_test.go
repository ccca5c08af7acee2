package node_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/wire"
)

// Managers of a simulated network may share one Host (the simulator gives
// each pair of cpus and memory one): what one is told (SetHost) is its
// own, a restarted manager starts from the shared values again, and a
// Host without a time counts as sampled at each manager's own first
// start, not at a restart or at another's start.
func TestSharedHostStaysShared(t *testing.T) {
	n := newNet(9)
	shared := &node.HostValues{CPUs: 3, Mem: 1 << 30, MemAvail: 1 << 30}
	for _, name := range []string{"a", "b"} {
		cfg := config.Default()
		cfg.Name = name
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		n.Add(pid(name), cfg).Host = shared
	}
	resources := func(name string) *wire.ResourcesReply {
		t.Helper()
		rep := n.Ask(pid(name), &wire.Envelope{Body: &wire.Envelope_ResourcesRequest{ResourcesRequest: &wire.ResourcesRequest{}}}, time.Second)
		if rep.GetResourcesReply() == nil {
			t.Fatalf("%s answered %v", name, rep)
		}
		return rep.GetResourcesReply()
	}
	n.Start(pid("a"))
	n.RunFor(3 * time.Second)
	n.Start(pid("b"))
	n.RunFor(time.Second)
	n.SetHost(pid("a"), node.HostValues{CPUs: 7, Mem: 1 << 30, MemAvail: 1 << 30})
	if !reflect.DeepEqual(*shared, node.HostValues{CPUs: 3, Mem: 1 << 30, MemAvail: 1 << 30}) {
		t.Fatalf("SetHost on a changed the shared values: %+v", *shared)
	}
	if got := resources("a").Values.Cpus; got != 7 {
		t.Errorf("a has %d cpus after SetHost, want 7", got)
	}
	if got := resources("b").Values.Cpus; got != 3 {
		t.Errorf("b has %d cpus, want the shared 3", got)
	}
	if ago := resources("b").SampledMsAgo; ago < 1000 || ago > 1100 {
		t.Errorf("b's host was sampled %d ms ago, want about 1000 (its start)", ago)
	}
	n.Kill(pid("b"))
	n.RunFor(2 * time.Second)
	n.Start(pid("b"))
	n.RunFor(time.Second)
	if got := resources("b").Values.Cpus; got != 3 {
		t.Errorf("restarted b has %d cpus, want the shared 3", got)
	}
	if ago := resources("b").SampledMsAgo; ago < 4000 || ago > 4100 {
		t.Errorf("restarted b's host was sampled %d ms ago, want about 4000 (its first start)", ago)
	}
}
