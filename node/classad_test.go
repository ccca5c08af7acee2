package node_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/wire"
)

// leonardoPolicy is the machine ad of the ClassAd matchmaking paper
// (Raman, Livny, Solomon 1998) as an owner's policy: the research group
// may always run, friends when the machine is quiet (load < 0.3, keyboard
// idle 15 minutes), anyone else only at night (before 8:00 or from 18:00,
// Madison time), and the untrusted never.
const leonardoPolicy = `!(request.user in ["rival", "riffraff"]) && (
  request.user in ["raman", "miron", "solomon", "jbasney"] ? true :
  request.user in ["tannenba", "wright"] ? load1 < 0.3 && idle_s > 15.0 * 60.0 :
  now.getHours("America/Chicago") < 8 || now.getHours("America/Chicago") >= 18)`

// leonardoRank is the paper's machine Rank: its research group 10,
// friends 1, anyone else 0.
const leonardoRank = `(request.user in ["raman", "miron", "solomon", "jbasney"] ? 10 : 0) + (request.user in ["tannenba", "wright"] ? 1 : 0)`

// leonardoRankPolicy is the same policy as the paper writes it, on the
// machine's own Rank of the request (owner_rank):
//
//	Constraint = !member(other.Owner, Untrusted) &&
//	             Rank >= 10 ? true :
//	             Rank > 0 ? LoadAvg < 0.3 && KeyboardIdle > 15*60 :
//	             DayTime < 8*60*60 || DayTime > 18*60*60
//
// (parenthesised as meant: in C's precedence the untrusted would be let in
// at night).
const leonardoRankPolicy = `!(request.user in ["rival", "riffraff"]) && (
  owner_rank >= 10 ? true :
  owner_rank > 0 ? load1 < 0.3 && idle_s > 15.0 * 60.0 :
  now.getHours("America/Chicago") < 8 || now.getHours("America/Chicago") >= 18)`

// The paper's owner policy, with time of day on the manager's (virtual)
// clock and live host values: who gets an offer by day and by night, on a
// busy and on a quiet machine. The policy written on request.user and the
// paper's, written on the owner's rank of the request (owner_rank), decide
// alike.
func TestClassAdOwnerPolicyInTime(t *testing.T) {
	for _, policy := range []string{leonardoPolicy, leonardoRankPolicy} {
		t.Run(map[string]string{leonardoPolicy: "users", leonardoRankPolicy: "owner_rank"}[policy], func(t *testing.T) {
			testOwnerPolicyInTime(t, policy)
		})
	}
}

func testOwnerPolicyInTime(t *testing.T, policy string) {
	cfg := config.Default()
	cfg.Name = "leonardo"
	cfg.CPUs = 1
	cfg.OS, cfg.Arch = "SOLARIS251", "INTEL"
	cfg.Attributes = map[string]any{"kflops": int64(21893), "mips": int64(104)}
	cfg.Policy = policy
	cfg.Rank = leonardoRank
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n := newNet(11)
	n.Add("P-leo", cfg)
	n.Start("P-leo")
	// The virtual clock starts at 2026-01-01 00:00 UTC, 18:00 in Madison:
	// night. Run to 10:00 Madison (16:00 UTC): day.
	n.RunFor(16 * time.Hour)
	busy := node.HostValues{CPUs: 1, Mem: 64 << 20, HaveLoad: true, Load1: 0.9, HaveIdle: true, Idle: time.Minute}
	quiet := busy
	quiet.Load1, quiet.Idle = 0.04, 24*time.Minute
	ownerRank := map[string]float64{"raman": 10, "tannenba": 1, "someone": 0}
	offered := func(user string) bool {
		t.Helper()
		rep := n.Ask("P-leo", &wire.Envelope{Id: 1, Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{
			Requirement: `arch == "INTEL" && os == "SOLARIS251"`, User: user}}}, time.Second)
		if rep.GetQueryReply() == nil {
			t.Fatalf("query: %v", rep)
		}
		offers := rep.GetQueryReply().Offers
		if len(offers) == 1 && (!offers[0].OwnerRanked || offers[0].OwnerRank != ownerRank[user]) {
			t.Errorf("%s: owner rank %v (ranked %v), want %v", user, offers[0].OwnerRank, offers[0].OwnerRanked, ownerRank[user])
		}
		return len(offers) == 1
	}
	for _, c := range []struct {
		when   string
		hours  time.Duration // to run before asking
		host   node.HostValues
		offers map[string]bool
	}{
		{"10:00, busy", 0, busy, map[string]bool{"raman": true, "tannenba": false, "someone": false, "rival": false}},
		{"10:00, quiet", 0, quiet, map[string]bool{"raman": true, "tannenba": true, "someone": false, "rival": false}},
		{"20:00, busy", 10, busy, map[string]bool{"raman": true, "tannenba": false, "someone": true, "rival": false}},
		{"07:00 next day, busy", 11, busy, map[string]bool{"someone": true, "rival": false}},
		{"08:00, busy", 1, busy, map[string]bool{"someone": false}},
	} {
		n.RunFor(c.hours * time.Hour)
		n.SetHost("P-leo", c.host)
		for user, want := range c.offers {
			if got := offered(user); got != want {
				t.Errorf("%s: %s offered %v, want %v", c.when, user, got, want)
			}
		}
	}
}

// The job's own attributes (request.attrs, --attr) reach the owner's
// policy at every manager a query visits and at reservation.
func TestRequestAttrs(t *testing.T) {
	cfg := config.Default()
	cfg.Name = "gm1"
	cfg.CPUs = 4
	cfg.Policy = `has(request.attrs.kind) && request.attrs.kind == "simulation" && int(request.attrs.disk_mb) <= 500`
	n := oneManager(t, "P-gm1", cfg, 12)
	for _, c := range []struct {
		attrs map[string]string
		want  bool
	}{
		{map[string]string{"kind": "simulation", "disk_mb": "200"}, true},
		{map[string]string{"kind": "simulation", "disk_mb": "900"}, false},
		{map[string]string{"kind": "render"}, false},
		{nil, false},
	} {
		rep := n.Ask("P-gm1", &wire.Envelope{Id: 1, Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{
			Requirement: "true", Attrs: c.attrs}}}, time.Second)
		if got := len(rep.GetQueryReply().GetOffers()) == 1; got != c.want {
			t.Errorf("query with %v: offered %v", c.attrs, got)
		}
		rep = n.Ask("P-gm1", &wire.Envelope{Id: 2, Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
			RequestId: fmt.Sprint(c.attrs), Attrs: c.attrs, Amounts: []*wire.Amount{{Kind: "cpus", N: 1}}}}}, time.Second)
		if got := rep.GetReservationReply() != nil; got != c.want {
			t.Errorf("reserve with %v: granted %v (%v)", c.attrs, got, rep)
		}
	}
	// Too many attributes are refused, naming the field.
	many := map[string]string{}
	for i := range 40 {
		many[fmt.Sprint("k", i)] = "v"
	}
	rep := n.Ask("P-gm1", &wire.Envelope{Id: 3, Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{Requirement: "true", Attrs: many}}}, time.Second)
	if e := rep.GetError(); e == nil || !strings.Contains(e.Message, "query_request.attrs") {
		t.Fatalf("40 attrs: %v", rep)
	}
}

// The paper's job ad, rewritten as a query, against three machine ads
// rewritten as properties files: leonardo (the paper's machine, with its
// owner's policy and rank), raphael (a bigger INTEL/SOLARIS251 machine
// with no policy) and donatello (an INTEL/LINUX one). The job:
//
//	Owner = "raman"; Memory = 31; Cmd = "run_sim"
//	Constraint = other.Type == "Machine" && Arch == "INTEL" &&
//	             OpSys == "SOLARIS251" && Disk >= 10000 &&
//	             other.Memory >= self.Memory
//	Rank = Kflops/1E3 + other.Memory/32
//
// is gridmgr query --user raman --mem 31MiB --attr cmd=run_sim with the
// requirement and --rank below. raman matches both SOLARIS machines,
// ranked by their flops and memory, each owner's rank of the request
// reported beside; rival's job is refused by leonardo's owner at any hour.
func TestClassAdJobAd(t *testing.T) {
	const (
		requirement = `arch == "INTEL" && os == "SOLARIS251" && disk_free >= 10000 * KiB && mem >= request.mem`
		rank        = `double(attrs.kflops) / 1e3 + double(mem / MiB) / 32.0`
	)
	n := newNet(13)
	machines := []struct {
		name, os       string
		memMiB, kflops int64
		policy, rank   string
	}{
		{"leonardo", "SOLARIS251", 64, 21893, leonardoPolicy, `(request.user in ["raman", "miron", "solomon", "jbasney"] ? 10 : 0) + (request.user in ["tannenba", "wright"] ? 1 : 0)`},
		{"raphael", "SOLARIS251", 128, 30000, "", ""},
		{"donatello", "LINUX", 256, 50000, "", ""},
	}
	for i, m := range machines {
		cfg := config.Default()
		cfg.Name = m.name
		cfg.OS, cfg.Arch = m.os, "INTEL"
		cfg.Attributes = map[string]any{"kflops": m.kflops}
		cfg.Policy, cfg.Rank = m.policy, m.rank
		if i > 0 {
			cfg.Superiors = append(cfg.Superiors, peerAddrs("leonardo"))
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		nd := n.Add(pid(m.name), cfg)
		nd.Host = &node.HostValues{CPUs: 1, Mem: uint64(m.memMiB) << 20, MemAvail: uint64(m.memMiB) << 20, CPUUtil: 0.1,
			HaveDisk: true, DiskFree: 323496 << 10, HaveLoad: true, Load1: 0.9}
	}
	for _, m := range machines {
		n.Start(pid(m.name))
	}
	n.RunFor(5 * time.Second)
	ask := func(user string) []*wire.Offer {
		t.Helper()
		rep := n.Ask(pid("leonardo"), &wire.Envelope{Id: 1, Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{
			Requirement: requirement, Rank: rank, User: user, Mem: 31 << 20, Attrs: map[string]string{"cmd": "run_sim"},
			Down: 255, Up: 255, Want: 3, Limit: 10}}}, 5*time.Second)
		if rep.GetQueryReply() == nil {
			t.Fatalf("query: %v", rep)
		}
		return rep.GetQueryReply().Offers
	}
	show := func(offers []*wire.Offer) string {
		var s []string
		for _, o := range offers {
			own := "-"
			if o.OwnerRanked {
				own = fmt.Sprint(o.OwnerRank)
			}
			s = append(s, fmt.Sprintf("%s rank=%.3f owner=%s", o.Name, o.Rank, own))
		}
		return strings.Join(s, "; ")
	}
	// 18:00 in Madison (the virtual clock's start): night for the policy.
	if got, want := show(ask("raman")), "raphael rank=34.000 owner=-; leonardo rank=23.893 owner=10"; got != want {
		t.Errorf("raman's job at night:\n got %s\nwant %s", got, want)
	}
	if got, want := show(ask("rival")), "raphael rank=34.000 owner=-"; got != want {
		t.Errorf("rival's job:\n got %s\nwant %s", got, want)
	}
	if got, want := show(ask("someone")), "raphael rank=34.000 owner=-; leonardo rank=23.893 owner=0"; got != want {
		t.Errorf("someone's job at night:\n got %s\nwant %s", got, want)
	}
	n.RunFor(16 * time.Hour) // 10:00 in Madison: day, and leonardo is busy
	if got, want := show(ask("someone")), "raphael rank=34.000 owner=-"; got != want {
		t.Errorf("someone's job by day:\n got %s\nwant %s", got, want)
	}
	if got, want := show(ask("raman")), "raphael rank=34.000 owner=-; leonardo rank=23.893 owner=10"; got != want {
		t.Errorf("raman's job by day:\n got %s\nwant %s", got, want)
	}
}

// Competing claims: with reservations.claim_window and an owner's rank,
// requests that arrive together wait for the window and the owner grants
// the one it ranks best, whatever came first; without a window, the first
// comes first.
func TestOwnerRankOrdersCompetingClaims(t *testing.T) {
	for _, c := range []struct {
		window time.Duration
		want   string // who gets the 4 cpus
	}{
		{0, "bob"},
		{50 * time.Millisecond, "raman"},
	} {
		cfg := config.Default()
		cfg.Name = "leonardo"
		cfg.CPUs = 4
		cfg.Rank = `request.user == "raman" ? 10 : 0`
		cfg.ClaimWindow = c.window
		n := oneManager(t, "P-leo", cfg, 14)
		ask := func(client, user string) uint64 {
			return n.RequestFrom("P-leo", client, &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
				RequestId: "r-" + user, User: user, Amounts: []*wire.Amount{{Kind: "cpus", N: 4}}}}})
		}
		// bob asks first, raman a moment later, within the window.
		bob := ask("P-bob", "bob")
		n.RunFor(10 * time.Millisecond)
		raman := ask("P-raman", "raman")
		nd := n.Node("P-leo")
		n.RunUntil(func() bool { return len(nd.Replies[bob]) > 0 && len(nd.Replies[raman]) > 0 }, time.Second)
		got := ""
		for who, sid := range map[string]uint64{"bob": bob, "raman": raman} {
			if r := nd.Replies[sid]; len(r) > 0 && r[0].GetReservationReply() != nil {
				got += who
			}
		}
		if got != c.want {
			t.Errorf("claim window %v: granted to %q, want %q", c.window, got, c.want)
		}
	}
	// A manager that stops with claims waiting decides them first: its
	// clients are answered, not left to time out.
	cfg := config.Default()
	cfg.Name = "leonardo"
	cfg.CPUs = 4
	cfg.Rank = `request.user == "raman" ? 10 : 0`
	cfg.ClaimWindow = time.Second
	n := oneManager(t, "P-leo", cfg, 15)
	sid := n.RequestFrom("P-leo", "P-bob", &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
		RequestId: "r-bob", User: "bob", Amounts: []*wire.Amount{{Kind: "cpus", N: 1}}}}})
	n.RunFor(10 * time.Millisecond)
	n.Stop("P-leo", "test")
	n.RunFor(10 * time.Millisecond)
	if r := n.Node("P-leo").Replies[sid]; len(r) != 1 || r[0].GetReservationReply() == nil {
		t.Fatalf("a claim waiting when the manager stopped: %v", r)
	}
}

// Ties in the asker's rank go to the owner who wants the request more
// (the paper: "ties are broken by the machine's rank"), across the tree:
// three machines alike but for their owners' ranks of raman, asked at a
// leaf. An owner without a rank counts as ranking 0; then names decide.
func TestOwnerRankBreaksTies(t *testing.T) {
	n := newNet(16)
	machines := []struct{ name, sup, rank string }{
		{"a-top", "", `request.user == "raman" ? -1 : 5`},
		{"b-mid", "a-top", ""},
		{"c-leaf", "b-mid", `request.user == "raman" ? 10 : 0`},
		{"d-leaf", "b-mid", `request.user == "raman" ? 0 : 1`},
	}
	for _, m := range machines {
		cfg := config.Default()
		cfg.Name, cfg.Rank = m.name, m.rank
		if m.sup != "" {
			cfg.Superiors = append(cfg.Superiors, peerAddrs(m.sup))
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		nd := n.Add(pid(m.name), cfg)
		nd.Host = &node.HostValues{CPUs: 4, Mem: 1 << 30, MemAvail: 1 << 30, CPUUtil: 0.1}
	}
	for _, m := range machines {
		n.Start(pid(m.name))
	}
	n.RunFor(5 * time.Second)
	order := func(user, rank string) string {
		t.Helper()
		rep := n.Ask(pid("d-leaf"), &wire.Envelope{Id: 1, Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{
			Requirement: "cpus >= 4", Rank: rank, User: user, Down: 255, Up: 255, Want: 10, Limit: 10}}}, 5*time.Second)
		var names []string
		for _, o := range rep.GetQueryReply().GetOffers() {
			names = append(names, o.Name)
		}
		return strings.Join(names, " ")
	}
	if got, want := order("raman", "cpus"), "c-leaf b-mid d-leaf a-top"; got != want {
		t.Errorf("raman, ranked alike:\n got %s\nwant %s", got, want)
	}
	if got, want := order("someone", ""), "a-top d-leaf b-mid c-leaf"; got != want {
		t.Errorf("someone, no rank:\n got %s\nwant %s", got, want)
	}
	// The asker's own rank comes first.
	if got, want := order("raman", `name == "a-top" ? 1 : 0`), "a-top c-leaf b-mid d-leaf"; got != want {
		t.Errorf("raman, preferring a-top:\n got %s\nwant %s", got, want)
	}
}

// owner_rank is the owner's rank of the request, computed before the
// policy: the policy, the asker's requirement and rank read it, at query
// and at reservation alike; where the owner has no rank it is undefined.
func TestOwnerRankVisibleToPolicy(t *testing.T) {
	cfg := config.Default()
	cfg.Name = "leonardo"
	cfg.CPUs = 4
	cfg.Rank = leonardoRank
	cfg.Policy = `owner_rank >= 1`
	n := oneManager(t, "P-leo", cfg, 17)
	query := func(user, requirement, rank string) []*wire.Offer {
		t.Helper()
		rep := n.Ask("P-leo", &wire.Envelope{Id: 1, Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{
			Requirement: requirement, Rank: rank, User: user}}}, time.Second)
		if rep.GetQueryReply() == nil {
			t.Fatalf("query: %v", rep)
		}
		return rep.GetQueryReply().Offers
	}
	for user, want := range map[string]bool{"raman": true, "tannenba": true, "someone": false} {
		if got := len(query(user, "true", "")) == 1; got != want {
			t.Errorf("policy owner_rank >= 1: %s offered %v, want %v", user, got, want)
		}
		rep := n.Ask("P-leo", &wire.Envelope{Id: 2, Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
			RequestId: "r-" + user, User: user, Amounts: []*wire.Amount{{Kind: "cpus", N: 1}}}}}, time.Second)
		if got := rep.GetReservationReply() != nil; got != want {
			t.Errorf("policy owner_rank >= 1: %s's reservation granted %v, want %v (%v)", user, got, want, rep)
		}
	}
	// The asker's requirement and rank see it too, and Matched shows it.
	offers := query("raman", "owner_rank >= 10", "owner_rank * 2.0")
	if len(offers) != 1 || offers[0].Rank != 20 || len(offers[0].Matched) != 1 || offers[0].Matched[0].Key != "owner_rank" || offers[0].Matched[0].Value != "10" {
		t.Errorf("raman, owner_rank >= 10: %v", offers)
	}
	if offers := query("tannenba", "owner_rank >= 10", ""); len(offers) != 0 {
		t.Errorf("tannenba, owner_rank >= 10: %v", offers)
	}
	// A reservation's requirement is checked with it.
	rep := n.Ask("P-leo", &wire.Envelope{Id: 3, Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
		RequestId: "r-t2", User: "tannenba", Requirement: "owner_rank >= 10", Amounts: []*wire.Amount{{Kind: "cpus", N: 1}}}}}, time.Second)
	if e := rep.GetError(); e == nil || !strings.Contains(e.Message, "owner_rank = 1") {
		t.Errorf("tannenba's reservation requiring owner_rank >= 10: %v", rep)
	}

	// Without an owner's rank, owner_rank is undefined: a policy on it
	// refuses everyone.
	cfg.Rank = ""
	n = oneManager(t, "P-leo", cfg, 18)
	if offers := query("raman", "true", ""); len(offers) != 0 {
		t.Errorf("no rank, policy owner_rank >= 1: %v", offers)
	}

	// The owner's rank cannot read itself.
	cfg.Rank, cfg.Policy = "owner_rank + 1.0", ""
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "rank: the owner's rank cannot read owner_rank") {
		t.Errorf("a rank reading owner_rank: %v", err)
	}
}
