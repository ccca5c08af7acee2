package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/node/render"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/wire"
)

// `gridmgr query -h` and `gridmgr resources` show every value a
// requirement, rank or policy can read, from the one list that defines
// them (query.Variables): the help every variable, request's fields and
// the unit constants; resources every variable of the manager, with its
// value here (owner_rank: the owner's rank expression, as its value
// depends on the request).
func TestEveryVariableInHelpAndResources(t *testing.T) {
	code, help, _ := run(t, "query", "-h")
	if code != 0 {
		t.Fatalf("query -h: exit %d", code)
	}
	for _, v := range query.Variables() {
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(v.Name) + ` `).MatchString(help) {
			t.Errorf("query -h does not list %s:\n%s", v.Name, help)
		}
	}
	units, _ := query.Units()
	if !strings.Contains(help, strings.Join(units, " ")) {
		t.Errorf("query -h does not list the units %v", units)
	}

	// A manager with something in every map but apps, declaring some
	// live values and measuring others.
	cfg := config.Default()
	cfg.Name = "leo"
	cfg.Attributes = map[string]any{"zone": "eu-1"}
	cfg.Tokens = map[string]int64{"gpus": 2}
	cfg.Policy = `owner_rank >= 1 || load1 < 0.3`
	cfg.Rank = `request.user == "raman" ? 10 : 0`
	idle := 1200.0
	cfg.IdleS = &idle
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n := memnet.New(1)
	nd := n.Add("P-leo", cfg)
	nd.Host = &node.HostValues{CPUs: 8, Mem: 16 << 30, MemAvail: 8 << 30, CPUUtil: 0.25, Hostname: "leo.example", OS: "linux", Arch: "amd64",
		HaveLoad: true, Load1: 0.5, Load5: 0.25, Load15: 0.125, HaveUptime: true, Uptime: time.Hour, HaveDisk: true, DiskFree: 5 << 30,
		Disks: map[string]uint64{"scratch": 3 << 30}}
	n.Start("P-leo")
	n.RunFor(time.Second)
	rep := n.Ask("P-leo", &wire.Envelope{Id: 1, Body: &wire.Envelope_ResourcesRequest{ResourcesRequest: &wire.ResourcesRequest{}}}, time.Second)
	if rep.GetResourcesReply() == nil {
		t.Fatalf("resources: %v", rep)
	}
	out := render.Resources(rep.GetResourcesReply())
	for _, v := range query.Variables() {
		if v.Request {
			continue // the asker's, not the manager's
		}
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(v.Name) + `[ .\[]`).MatchString(out) {
			t.Errorf("resources does not show %s:\n%s", v.Name, out)
		}
	}
	for _, want := range []string{
		"cpus           8\n", "cpu_util       0.250 (25.0%, smoothed)\n", "mem            17179869184 (16.0 GiB)\n",
		"attrs.zone     eu-1\n", "tokens.gpus    2\n", "apps           none\n", "load1          0.5\n", "load15         0.125\n",
		"uptime_s       3600\n", "disk_free      5368709120 (5.0 GiB)\n", "disks.scratch  3221225472 (3.0 GiB)\n",
		"idle_s         1200\n", `owner_rank     by request: request.user == "raman" ? 10 : 0` + "\n",
		"net_mbps       unknown (the host does not report a link speed)\n",
		"policy         owner_rank >= 1 || load1 < 0.3\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("resources lacks %q:\n%s", want, out)
		}
	}
}
