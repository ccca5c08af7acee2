package node_test

import (
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/wire"
)

// An owner may declare any live value in the properties file, the way
// resources.cpus declares the processors: queries see the declaration,
// not what the host measures; what is not declared is still measured.
func TestDeclaredLiveValues(t *testing.T) {
	cfg, err := config.Parse("leo.toml", []byte(`name = "leo"
data_dir = "/tmp/leo"

[resources]
cpus = 2
cpu_util = 0.5
load1 = 0.25
load15 = 0
uptime_s = "48h"
disk_free = "500GiB"
idle_s = "20m"

[resources.disks]
scratch = "100GiB"
`), "h")
	if err != nil {
		t.Fatal(err)
	}
	n := newNet(19)
	nd := n.Add("P-leo", *cfg)
	nd.Host = &node.HostValues{CPUs: 8, Mem: 1 << 30, MemAvail: 1 << 30, CPUUtil: 0.9,
		HaveLoad: true, Load1: 3, Load5: 4, Load15: 5, HaveUptime: true, Uptime: time.Minute,
		HaveDisk: true, DiskFree: 1 << 20, Disks: map[string]uint64{"scratch": 1 << 20, "home": 7 << 30},
		HaveIdle: true, Idle: time.Second}
	n.Start("P-leo")
	n.RunFor(time.Second)
	ask := func(requirement string) *wire.Offer {
		t.Helper()
		rep := n.Ask("P-leo", &wire.Envelope{Id: 1, Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{Requirement: requirement}}}, time.Second)
		if rep.GetQueryReply() == nil {
			t.Fatalf("query: %v", rep)
		}
		if offers := rep.GetQueryReply().Offers; len(offers) == 1 {
			return offers[0]
		}
		return nil
	}
	o := ask(`cpus == 2 && cpu_util == 0.5 && load1 == 0.25 && load15 == 0.0 && uptime_s == 48 * 3600 &&
		disk_free == 500 * GiB && idle_s == 1200.0 && disks.scratch == 100 * GiB`)
	if o == nil {
		t.Fatal("the declared values are not what the query sees")
	}
	got := map[string]string{}
	for _, a := range o.Matched {
		got[a.Key] = a.Value
	}
	for k, want := range map[string]string{"load1": "0.25", "load15": "0", "uptime_s": "172800", "idle_s": "1200", "disks.scratch": "107374182400", "disk_free": "536870912000"} {
		if got[k] != want {
			t.Errorf("matched %s = %q, want %q", k, got[k], want)
		}
	}
	// Not declared: measured.
	if ask(`load5 == 4.0 && disks.home == 7 * GiB && mem == GiB`) == nil {
		t.Error("the values not declared are not the measured ones")
	}
}
