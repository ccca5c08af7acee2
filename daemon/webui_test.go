package daemon_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/wire"
)

// utilization reads the web UI's /api/utilization at addr: each manager's
// sample by name.
func utilization(t *testing.T, addr string) map[string]*wire.Event {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/api/utilization")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/api/utilization: %s: %s", resp.Status, b)
	}
	var out struct {
		Samples []json.RawMessage `json:"samples"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	got := map[string]*wire.Event{}
	for _, raw := range out.Samples {
		ev := new(wire.Event)
		if err := protojson.Unmarshal(raw, ev); err != nil {
			t.Fatal(err)
		}
		got[ev.Manager] = ev
	}
	return got
}

// The web UI's Managers table at the root shows every manager's own
// counts, those two levels down too: gm164 (under gm156), whose samples go
// to gm156's topic and never reach the root, showed 0 reservations and
// 0/0 applications before (its row was made from a query's offer); now
// the root asks it. Each sample names its superior and its subtree.
func TestWebUtilizationTwoLevelsDown(t *testing.T) {
	g := newGrid(t)
	root := g.cfgs["gm152"]
	root.HTTPListen = "127.0.0.1:0"
	g.cfgs["gm152"] = root
	for _, e := range patent {
		cfg := g.cfgs[e[0]]
		cfg.CPUs, cfg.Memory = 8, 8<<30
		g.cfgs[e[0]] = cfg
		g.start(e[0])
	}
	g.waitTree("gm152", wantTree, 10*time.Second)
	addr := g.mgrs["gm152"].HTTPAddr()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := dialClient(t, ctx, g.mgrs["gm164"].Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Closed after the instances are removed (cleanups run last first):
	// applications outlive their manager, so a test must remove its own.
	t.Cleanup(func() { cl.Close() })
	// Two committed reservations at gm164, and an instance running on
	// each where this host can run applications (root, cgroups).
	wantRunning := uint32(2)
	var bundle string
	for i := range 2 {
		res, _, err := cl.Reserve(ctx, &wire.ReserveRequest{RequestId: client.NewRequestID(), Commit: true,
			Amounts: []*wire.Amount{{Kind: "cpus", N: 1}, {Kind: "mem", N: 128 << 20}}})
		if err != nil {
			t.Fatal(err)
		}
		if wantRunning == 0 {
			continue
		}
		if os.Geteuid() != 0 {
			t.Log("not root: no application instances (the reservations are checked)")
			wantRunning = 0
			continue
		}
		if bundle == "" {
			bundle = packLoop(t, "")
		}
		rep, err := cl.Install(ctx, bundle, res.Id, nil)
		var re *client.RemoteError
		if i == 0 && errors.As(err, &re) && re.Code == wire.ErrorReply_CODE_UNAVAILABLE {
			t.Logf("this host cannot install applications (%s): the reservations are checked", re.Message)
			wantRunning = 0
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		id := rep.Instances[0].Id
		t.Cleanup(func() { cl.App(context.Background(), &wire.AppRequest{Op: wire.AppRequest_OP_REMOVE, Instance: id}) })
		if _, err := cl.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_START, Instance: id}); err != nil {
			t.Fatal(err)
		}
	}

	// The samples asked for are kept 10 s: the first read after the
	// reservations may predate them.
	var got map[string]*wire.Event
	deadline := time.Now().Add(25 * time.Second)
	for {
		got = utilization(t, addr)
		u := got["gm164"].GetUtilization()
		if u.GetReservations() == 2 && u.GetRunning() == wantRunning && u.GetInstances() == wantRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gm164 at the root: %v; want 2 reservations, %d/%d running", u, wantRunning, wantRunning)
		}
		time.Sleep(500 * time.Millisecond) // the cache's age, not a race
	}
	for _, e := range patent {
		if got[e[0]] == nil {
			t.Errorf("no sample of %s at the root", e[0])
		}
	}
	u := got["gm164"].GetUtilization()
	if u.Superior != g.ids["gm156"] || u.SubtreeManagers != 1 {
		t.Errorf("gm164: superior %s, subtree %d; want gm156 (%s), 1", u.Superior, u.SubtreeManagers, g.ids["gm156"])
	}
	if free := u.Free; len(free) < 2 || free[0].Kind != "cpus" || free[0].N > 8 {
		t.Errorf("gm164's free amounts: %v", free)
	}
	if n := got["gm160"].GetUtilization().GetReservations(); n != 0 {
		t.Errorf("gm160 has %d reservations at the root; it has none", n)
	}
}

// getJSON reads path of the web UI at addr into v.
func getJSON(t *testing.T, addr, path string, v any) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %s: %s", path, resp.Status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v: %s", path, err, b)
	}
}

// The Events tab's past: a manager that archives gives its latest events
// (newest last, no utilization samples); one that does not says so and
// how to keep them.
func TestWebRecentEvents(t *testing.T) {
	g := newGrid(t)
	for _, name := range []string{"gm152", "gm154"} {
		cfg := g.cfgs[name]
		cfg.HTTPListen = "127.0.0.1:0"
		cfg.ArchiveEnabled = name == "gm152"
		cfg.MonitorInterval = time.Second // samples are archived too, and left out
		cfg.CPUs = 8
		g.cfgs[name] = cfg
		g.start(name)
	}
	g.waitTree("gm152", "gm152(gm154)", 10*time.Second)
	m := g.mgrs["gm152"]
	for i := range 3 {
		rep := ask(t, m, &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
			RequestId: client.NewRequestID(), Amounts: []*wire.Amount{{Kind: "cpus", N: 1}}, HoldMs: 20_000}}})
		if rep.GetReservationReply() == nil {
			t.Fatalf("reserve %d: %v", i, rep)
		}
	}
	type recent struct {
		Archived bool              `json:"archived"`
		Reason   string            `json:"reason"`
		Events   []json.RawMessage `json:"events"`
	}
	var got []*wire.Event
	for deadline := time.Now().Add(10 * time.Second); ; {
		var r recent
		getJSON(t, m.HTTPAddr(), "/api/recent?limit=2", &r)
		if !r.Archived {
			t.Fatalf("gm152 archives; /api/recent says %q", r.Reason)
		}
		got = got[:0]
		for _, raw := range r.Events {
			ev := new(wire.Event)
			if err := protojson.Unmarshal(raw, ev); err != nil {
				t.Fatal(err)
			}
			got = append(got, ev)
		}
		held := 0
		for _, ev := range got {
			if ev.Type == "held" {
				held++
			}
		}
		if held == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/api/recent?limit=2 gave %v; want the last two reservations held", got)
		}
		time.Sleep(100 * time.Millisecond) // the archive writes in batches
	}
	if len(got) != 2 || got[0].TimeUnixMs > got[1].TimeUnixMs || got[0].GetReservation().Id >= got[1].GetReservation().Id {
		t.Errorf("not the latest two, oldest first: %v", got)
	}
	time.Sleep(1500 * time.Millisecond) // a sample archived
	var all recent
	getJSON(t, m.HTTPAddr(), "/api/recent", &all)
	for _, raw := range all.Events {
		ev := new(wire.Event)
		if err := protojson.Unmarshal(raw, ev); err == nil && ev.Kind == wire.EventKind_EVENT_KIND_UTILIZATION {
			t.Fatalf("a utilization sample among the recent events: %v", ev)
		}
	}

	var none recent
	getJSON(t, g.mgrs["gm154"].HTTPAddr(), "/api/recent", &none)
	if none.Archived || len(none.Events) != 0 || !strings.Contains(none.Reason, "gm154 keeps no event archive") || !strings.Contains(none.Reason, "[archive] enabled = true") {
		t.Errorf("at gm154, which does not archive: %+v", none)
	}
}

// The Jobs tab's data: the root's UI lists the job queue of another
// manager (over a client stream) and its own (in-process), every user's
// jobs, and reads a job's log; a job that is not there is a 404, a
// manager that takes no jobs says so.
func TestWebJobs(t *testing.T) {
	g := newGrid(t)
	for _, name := range []string{"gm152", "gm154", "gm156"} {
		cfg := g.cfgs[name]
		if name == "gm152" {
			cfg.HTTPListen = "127.0.0.1:0"
		}
		cfg.JobsEnabled = name != "gm156"
		g.cfgs[name] = cfg
		g.start(name)
	}
	g.waitTree("gm152", "gm152(gm154,gm156)", 10*time.Second)
	at := g.mgrs["gm154"]
	bundle := []byte("not a bundle: the job never runs")
	sum := sha256.Sum256(bundle)
	sha := hex.EncodeToString(sum[:])
	if rep := ask(t, at, &wire.Envelope{Body: &wire.Envelope_JobRequest{JobRequest: &wire.JobRequest{Op: wire.JobRequest_OP_BLOB,
		Sha256: sha, Size: int64(len(bundle)), Data: bundle}}}); rep.GetJobReply() == nil {
		t.Fatalf("blob: %v", rep)
	}
	// Idle for ever: no manager is named nowhere.
	rep := ask(t, at, &wire.Envelope{Body: &wire.Envelope_JobRequest{JobRequest: &wire.JobRequest{Op: wire.JobRequest_OP_SUBMIT,
		RequestId: "web-1", User: "<b>bob</b>", Jobs: []*wire.JobSpec{{Name: "idle-one", Count: 1, BundleSha256: sha, App: "x",
			Cpus: 1, Mem: 64 << 20, RuntimeMs: 60000, Requirement: `name == "nowhere"`, InDir: "in", OutDir: "out"}}}}})
	cluster := rep.GetJobReply().GetCluster()
	if cluster == "" {
		t.Fatalf("submit: %v", rep)
	}
	addr := g.mgrs["gm152"].HTTPAddr()
	type list struct {
		Jobs []json.RawMessage `json:"jobs"`
		More uint32            `json:"more"`
	}
	var l list
	getJSON(t, addr, "/api/jobs?peer=gm154", &l)
	if len(l.Jobs) != 1 {
		t.Fatalf("gm154's queue from gm152's UI: %d jobs; want 1", len(l.Jobs))
	}
	in := new(wire.JobInfo)
	if err := protojson.Unmarshal(l.Jobs[0], in); err != nil {
		t.Fatal(err)
	}
	if in.Id != cluster || in.User != "<b>bob</b>" || in.Name != "idle-one" || in.State != wire.JobState_JOB_STATE_IDLE {
		t.Errorf("gm154's job: %v", in)
	}
	var own list
	getJSON(t, addr, "/api/jobs", &own)
	if len(own.Jobs) != 0 || own.Jobs == nil {
		t.Errorf("gm152's own queue: %v; want [] (empty)", own.Jobs)
	}
	var raw json.RawMessage
	getJSON(t, addr, "/api/job?peer="+g.ids["gm154"]+"&id="+cluster, &raw)
	withLog := new(wire.JobInfo)
	if err := protojson.Unmarshal(raw, withLog); err != nil {
		t.Fatal(err)
	}
	if len(withLog.Log) == 0 || withLog.Log[0].Type != "submitted" {
		t.Errorf("%s's log: %v", cluster, withLog.Log)
	}
	for _, c := range []struct {
		path   string
		status int
		want   string
	}{
		{"/api/job?peer=gm154&id=gm154.999", 404, "gm154.999"},
		{"/api/jobs?peer=gm156", 501, "jobs.enabled = false"},
		{"/api/jobs?peer=gm999", 502, "in the grid seen from gm152"},
	} {
		resp, err := http.Get("http://" + addr + c.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %s %s; want %d with %q", c.path, resp.Status, b, c.status, c.want)
		}
	}
}
