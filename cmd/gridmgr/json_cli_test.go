package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gridmgr/gridmgr/wire"
)

// jsonShapes is what each command that takes --json prints: the wire
// message (or one of the messages) docs/cli-json.md documents for it.
// Commands with no message print what they would print without --json.
var jsonShapes = map[string][]proto.Message{
	"tree":         {&wire.TreeNode{}},
	"status":       {&wire.StatusReply{}},
	"query":        {&wire.QueryReply{}},
	"resources":    {&wire.ResourcesReply{}},
	"reserve":      {&wire.Reservation{}, &wire.ReservationsReply{}},
	"reservations": {&wire.ReservationsReply{}},
	"calendar":     {&wire.CalendarReply{}},
	"commit":       {&wire.Reservation{}, &wire.ReservationsReply{}},
	"renew":        {&wire.Reservation{}, &wire.ReservationsReply{}},
	"release":      {&wire.Reservation{}, &wire.ReservationsReply{}},
	"admin":        {&wire.AdminReply{}},
	"watch":        {&wire.Event{}},
	"events":       {&wire.Event{}},
	"app install":  {&wire.AppReply{}},
	"app start":    {&wire.AppReply{}},
	"app stop":     {&wire.AppReply{}},
	"app pause":    {&wire.AppReply{}},
	"app resume":   {&wire.AppReply{}},
	"app status":   {&wire.AppReply{}},
	"app idle":     {&wire.AppReply{}},
	"app exec-op":  {&wire.AppReply{}},
	"app put":      {&wire.AppReply{}},
	"app remove":   {&wire.AppReply{}},
	"app list":     {&wire.AppReply{}},
	"app logs":     nil, // the instance's output as it is
	"app get":      nil, // the file's bytes
	"job submit":   {&wire.JobReply{}},
	"job q":        {&wire.JobReply{}},
	"job log":      {&wire.JobReply{}},
	"job why":      {&wire.JobReply{}},
	"dag submit":   {&wire.JobReply{}},
	"dag status":   {&wire.JobReply{}},
	"dag rerun":    {&wire.JobReply{}},
	"glidein":      {&wire.GlideinList{}},
	"glidein list": {&wire.GlideinList{}},
}

// Every command whose help lists --json is in jsonShapes, and no other.
func TestJSONCommandsListed(t *testing.T) {
	var withJSON []string
	check := func(name string) {
		_, out, errb := run(t, append(strings.Fields(name), "-h")...)
		if strings.Contains(out+errb, "--json") {
			withJSON = append(withJSON, name)
		}
	}
	for _, c := range commands() {
		if c.run != nil && c.name != "app" && c.name != "job" && c.name != "dag" {
			check(c.name)
		}
	}
	for _, s := range dagCommands {
		check("dag " + s.name)
	}
	check("glidein list")
	for _, s := range appCommands {
		check("app " + s.name)
	}
	for _, s := range jobCommands {
		check("job " + s.name)
	}
	var listed []string
	for name := range jsonShapes {
		listed = append(listed, name)
	}
	slices.Sort(withJSON)
	slices.Sort(listed)
	if !slices.Equal(withJSON, listed) {
		t.Fatalf("commands with --json:\n  %v\njsonShapes lists:\n  %v", withJSON, listed)
	}
}

// Each command that takes --json, run in-process against the six-manager
// grid, prints its documented shape (docs/cli-json.md): the fields of its
// message by their .proto names, integers as numbers, enums as words; no
// quoted number and no SCREAMING_ENUM anywhere. The values a script reads
// are read the way it would, into typed fields.
func TestCLIJSONEveryCommand(t *testing.T) {
	t.Setenv("GRIDMGR_CLIENT_KEY", t.TempDir()+"/client.key")
	g := formedWebDemo(t, 200*time.Millisecond) // gm152 archives events
	root, leaf := g.mgrs["gm152"].Cfg.DataDir, g.mgrs["gm160"].Cfg.DataDir
	covered := map[string]bool{}

	// shape runs the command with --json and checks that its output is
	// one object of the shape of m; it returns the output.
	shape := func(m proto.Message, args ...string) string {
		t.Helper()
		code, out, stderr := run(t, append(args, "--json")...)
		if code != 0 {
			t.Fatalf("%s --json: exit %d\n%s\n%s", strings.Join(args, " "), code, out, stderr)
		}
		checkJSONOutput(t, strings.Join(args, " "), out, m.ProtoReflect().Descriptor())
		covered[commandName(args)] = true
		return out
	}
	decode := func(out string, v any) {
		t.Helper()
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("as a script reads it: %v\n%s", err, out)
		}
	}
	nowMs := time.Now().UnixMilli()

	var tree struct {
		Name     string `json:"name"`
		Children []struct {
			Name           string `json:"name"`
			State          string `json:"state"`
			RttUs          uint64 `json:"rtt_us"`
			LastHeardMsAgo uint64 `json:"last_heard_ms_ago"`
		} `json:"children"`
	}
	decode(shape(&wire.TreeNode{}, "tree", "-d", root), &tree)
	if tree.Name != "gm152" || len(tree.Children) != 2 || tree.Children[0].State != "up" {
		t.Fatalf("tree: %+v", tree)
	}

	var st struct {
		Name      string `json:"name"`
		UptimeMs  uint64 `json:"uptime_ms"`
		Relations []struct {
			Role  string `json:"role"`
			State string `json:"state"`
			RttUs uint64 `json:"rtt_us"`
		} `json:"relations"`
	}
	decode(shape(&wire.StatusReply{}, "status", "-d", leaf), &st)
	if st.Name != "gm160" || len(st.Relations) != 1 || st.Relations[0].Role != "superior" || st.Relations[0].State != "up" {
		t.Fatalf("status: %+v", st)
	}

	var q struct {
		Offers []struct {
			Name     string  `json:"name"`
			CpusFree int64   `json:"cpus_free"`
			MemFree  int64   `json:"mem_free"`
			CpuUtil  float64 `json:"cpu_util"`
		} `json:"offers"`
		Visited uint32 `json:"visited"`
		Visits  []struct {
			Direction string `json:"direction"`
		} `json:"visits"`
	}
	decode(shape(&wire.QueryReply{}, "query", "-d", leaf, "--want", "100", "--path", "cpus >= 1"), &q)
	if len(q.Offers) != 6 || q.Visited != 6 || q.Offers[0].MemFree <= 0 || len(q.Visits) == 0 || q.Visits[0].Direction != "unspecified" {
		t.Fatalf("query: %+v", q)
	}
	var early struct {
		Earliest struct {
			Found       bool     `json:"found"`
			BeginUnixMs int64    `json:"begin_unix_ms"`
			Managers    []string `json:"managers"`
		} `json:"earliest"`
	}
	decode(shape(&wire.QueryReply{}, "query", "-d", leaf, "--earliest", "--duration", "1h", "--cpus", "1", "cpus >= 1"), &early)
	if !early.Earliest.Found || early.Earliest.BeginUnixMs < nowMs-60_000 || len(early.Earliest.Managers) != 1 {
		t.Fatalf("query --earliest: %+v", early)
	}

	var res struct {
		Values struct {
			Cpus int64 `json:"cpus"`
			Mem  int64 `json:"mem"`
		} `json:"values"`
		Attributes map[string]string `json:"attributes"`
	}
	decode(shape(&wire.ResourcesReply{}, "resources", "-d", leaf), &res)
	if res.Values.Cpus <= 0 || res.Values.Mem <= 0 || res.Attributes["zone"] == "" {
		t.Fatalf("resources: %+v", res)
	}

	type reservation struct {
		ID            string `json:"id"`
		OwnerName     string `json:"owner_name"`
		State         string `json:"state"`
		ExpiresUnixMs int64  `json:"expires_unix_ms"`
		Window        bool   `json:"window"`
		Group         string `json:"group"`
		Amounts       []struct {
			Kind string `json:"kind"`
			N    int64  `json:"n"`
		} `json:"amounts"`
	}
	var held reservation
	decode(shape(&wire.Reservation{}, "reserve", "-d", leaf, "--at", "gm160", "--cpus", "1", "--mem", "64MiB"), &held)
	if held.State != "held" || held.OwnerName != "gm160" || len(held.Amounts) != 2 || held.Amounts[0].N != 1 || held.Amounts[1].N != 64<<20 ||
		held.ExpiresUnixMs < nowMs || held.ExpiresUnixMs > nowMs+3_600_000 {
		t.Fatalf("reserve: %+v", held)
	}
	var win reservation
	decode(shape(&wire.Reservation{}, "reserve", "-d", leaf, "--at", "gm160", "--cpus", "1", "--commit", "--begin", "+1h", "--duration", "2h"), &win)
	if win.State != "committed" || !win.Window {
		t.Fatalf("reserve a window: %+v", win)
	}
	var co struct {
		Reservations []reservation `json:"reservations"`
	}
	decode(shape(&wire.ReservationsReply{}, "reserve", "-d", leaf, "--all", "cpus_free >= 1", "--count", "2", "--cpus", "1"), &co)
	if len(co.Reservations) != 2 || co.Reservations[0].State != "committed" || co.Reservations[0].Group == "" {
		t.Fatalf("reserve --all: %+v", co)
	}

	var list struct {
		Name         string        `json:"name"`
		Reservations []reservation `json:"reservations"`
		Usage        []struct {
			Kind     string `json:"kind"`
			Capacity int64  `json:"capacity"`
			Used     int64  `json:"used"`
		} `json:"usage"`
		Live uint32 `json:"live"`
		More uint32 `json:"more"`
		Next string `json:"next"`
	}
	decode(shape(&wire.ReservationsReply{}, "reservations", "-d", leaf, "--all"), &list)
	if list.Name != "gm160" || list.Live < 2 || len(list.Usage) == 0 || list.Usage[0].Used <= 0 {
		t.Fatalf("reservations: %+v", list)
	}

	var cal struct {
		FromUnixMs int64 `json:"from_unix_ms"`
		Kinds      []struct {
			Kind  string `json:"kind"`
			Steps []struct {
				AtUnixMs int64 `json:"at_unix_ms"`
				Used     int64 `json:"used"`
			} `json:"steps"`
		} `json:"kinds"`
		Bookings []reservation `json:"bookings"`
	}
	decode(shape(&wire.CalendarReply{}, "calendar", "-d", leaf, "--to", "+4h"), &cal)
	if cal.FromUnixMs < nowMs-60_000 || len(cal.Kinds) == 0 || len(cal.Kinds[0].Steps) == 0 || len(cal.Bookings) < 2 {
		t.Fatalf("calendar: %+v", cal)
	}

	var r reservation
	decode(shape(&wire.Reservation{}, "commit", "-d", root, held.ID), &r)
	if r.ID != held.ID || r.State != "committed" {
		t.Fatalf("commit: %+v", r)
	}
	decode(shape(&wire.Reservation{}, "renew", "-d", root, held.ID, "--lease", "10m"), &r)
	if r.State != "committed" || r.ExpiresUnixMs < nowMs+9*60_000 {
		t.Fatalf("renew: %+v", r)
	}
	var rel struct {
		Reservations []reservation `json:"reservations"`
	}
	decode(shape(&wire.ReservationsReply{}, "release", "-d", root, co.Reservations[0].ID, co.Reservations[1].ID), &rel)
	if len(rel.Reservations) != 2 || rel.Reservations[1].State != "released" {
		t.Fatalf("release: %+v", rel)
	}
	shape(&wire.Reservation{}, "release", "-d", root, held.ID)

	var adm struct {
		Name    string `json:"name"`
		Ok      bool   `json:"ok"`
		Output  string `json:"output"`
		Code    string `json:"code"`
		Replies []struct {
			Name string `json:"name"`
			Ok   bool   `json:"ok"`
		} `json:"replies"`
	}
	decode(shape(&wire.AdminReply{}, "admin", "-d", root, "relations"), &adm)
	if !adm.Ok || adm.Name != "gm152" || adm.Code != "unspecified" || adm.Output == "" {
		t.Fatalf("admin: %+v", adm)
	}
	decode(shape(&wire.AdminReply{}, "admin", "-d", root, "--all", "relations"), &adm)
	if len(adm.Replies) != 6 {
		t.Fatalf("admin --all: %+v", adm)
	}

	var apps struct {
		Instances []struct {
			ID       string `json:"id"`
			State    string `json:"state"`
			MemBytes int64  `json:"mem_bytes"`
		} `json:"instances"`
	}
	decode(shape(&wire.AppReply{}, "app", "list", "-d", leaf), &apps)
	decode(shape(&wire.AppReply{}, "app", "list", "-d", root, "--all"), &apps)
	appsRan := jsonAppCommands(t, leaf, shape, decode, covered)
	jsonJobCommands(t, leaf, shape, decode)

	// The event archive at the root kept the reservations above: one
	// event a line.
	var lines []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, out, stderr := run(t, "events", "-d", root, "--since", "10m", "--filter", `event.kind == "reservation"`, "--json")
		if code != 0 {
			t.Fatalf("events --json: exit %d\n%s", code, stderr)
		}
		lines = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if out != "" && len(lines) >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // the events travel by gossip
	}
	covered["events"] = true
	kinds := map[string]bool{}
	for _, l := range lines {
		checkJSONOutput(t, "events", l, (&wire.Event{}).ProtoReflect().Descriptor())
		var ev struct {
			Kind        string `json:"kind"`
			Type        string `json:"type"`
			TimeUnixMs  int64  `json:"time_unix_ms"`
			Seq         uint64 `json:"seq"`
			Reservation *struct {
				ID      string `json:"id"`
				Amounts []struct {
					N int64 `json:"n"`
				} `json:"amounts"`
			} `json:"reservation"`
		}
		decode(l, &ev)
		if ev.Kind != "reservation" || ev.Reservation == nil || ev.Seq == 0 || ev.TimeUnixMs < nowMs-60_000 {
			t.Fatalf("events --json line: %+v\n%s", ev, l)
		}
		kinds[ev.Type] = true
	}
	if !kinds["held"] || !kinds["committed"] || !kinds["released"] {
		t.Fatalf("events --json: types %v\n%s", kinds, strings.Join(lines, "\n"))
	}

	// watch --json: one event a line, as they come.
	var out, errb lockedBuf
	stop := make(chan struct{})
	done := make(chan int, 1)
	wc := &cli{stdout: &out, stderr: &errb, interrupt: stop}
	go func() {
		done <- wc.main([]string{"watch", "-d", root, "--kind", "reservation,relation", "--count", "2", "--json"})
	}()
	var code int
	for i := 0; ; i++ {
		shape(&wire.Reservation{}, "reserve", "-d", leaf, "--at", "gm164", "--cpus", "1", "--hold", "1s")
		select {
		case code = <-done:
		case <-time.After(300 * time.Millisecond):
			if i > 50 {
				close(stop)
				t.Fatalf("watch printed %q; stderr %q", out.String(), errb.String())
			}
			continue
		}
		break
	}
	covered["watch"] = true
	lines = strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("watch --json: exit %d, %d lines\n%s", code, len(lines), out.String())
	}
	for _, l := range lines {
		checkJSONOutput(t, "watch", l, (&wire.Event{}).ProtoReflect().Descriptor())
		var ev struct {
			Kind string `json:"kind"`
			Seq  uint64 `json:"seq"`
		}
		decode(l, &ev)
		if ev.Kind != "reservation" && ev.Kind != "relation" {
			t.Fatalf("watch --json line: %s", l)
		}
	}

	var missed []string
	for name, msgs := range jsonShapes {
		if msgs != nil && !covered[name] {
			missed = append(missed, name)
		}
	}
	slices.Sort(missed)
	switch {
	case len(missed) > 0 && appsRan:
		t.Errorf("not run: %s", strings.Join(missed, ", "))
	case len(missed) > 0:
		t.Logf("not run on this host (see above): %s", strings.Join(missed, ", "))
	}
}

// jsonAppCommands runs the app commands on an instance of the demo
// application at the leaf gm160, if this host can install it (it needs
// root and cgroups; elsewhere the install's refusal is logged and it
// returns false).
func jsonAppCommands(t *testing.T, leaf string, shape func(proto.Message, ...string) string, decode func(string, any), covered map[string]bool) bool {
	t.Helper()
	bundle, err := packDemoApp(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		ID string `json:"id"`
	}
	decode(shape(&wire.Reservation{}, "reserve", "-d", leaf, "--at", "gm160", "--cpus", "1", "--mem", "256MiB", "--commit"), &r)
	code, out, stderr := run(t, "app", "install", "-d", leaf, r.ID, bundle, "--json")
	if code != 0 {
		t.Logf("app install refused here, the app commands on an instance are not run: %s", strings.TrimSpace(stderr))
		return false
	}
	checkJSONOutput(t, "app install", out, (&wire.AppReply{}).ProtoReflect().Descriptor())
	covered["app install"] = true
	var rep struct {
		Instances []struct {
			ID      string `json:"id"`
			State   string `json:"state"`
			Changes uint32 `json:"changes"`
		} `json:"instances"`
	}
	decode(out, &rep)
	if len(rep.Instances) != 1 {
		t.Fatalf("app install: %s", out)
	}
	id := rep.Instances[0].ID
	defer run(t, "app", "remove", "-d", leaf, id)
	for _, args := range [][]string{{"start"}, {"status"}, {"pause"}, {"resume"}, {"exec-op", "rounds"}} {
		args := append([]string{"app", args[0], "-d", leaf, id}, args[1:]...)
		shape(&wire.AppReply{}, args...)
	}
	shape(&wire.AppReply{}, "app", "put", "-d", leaf, id, writeFile(t, t.TempDir(), "in.txt", "hello\n"), "input/in.txt")
	// idle exits 1 when the instance is busy, and prints its answer.
	code, out, stderr = run(t, "app", "idle", "-d", leaf, id, "--json")
	if code != 0 && code != 1 {
		t.Fatalf("app idle --json: exit %d\n%s", code, stderr)
	}
	checkJSONOutput(t, "app idle", out, (&wire.AppReply{}).ProtoReflect().Descriptor())
	var idle struct {
		Idle   bool   `json:"idle"`
		Output string `json:"output"`
	}
	decode(out, &idle)
	if idle.Idle != (code == 0) {
		t.Fatalf("app idle: exit %d, idle %v", code, idle.Idle)
	}
	covered["app idle"] = true
	var stopped struct {
		Instances []struct {
			State string `json:"state"`
		} `json:"instances"`
	}
	decode(shape(&wire.AppReply{}, "app", "stop", "-d", leaf, id), &stopped)
	if len(stopped.Instances) != 1 || stopped.Instances[0].State != "stopped" {
		t.Fatalf("app stop: %+v", stopped)
	}
	var removed struct {
		Undone uint32 `json:"undone"`
	}
	decode(shape(&wire.AppReply{}, "app", "remove", "-d", leaf, id), &removed)
	if removed.Undone == 0 {
		t.Fatalf("app remove: undone %d", removed.Undone)
	}
	return true
}

// jsonJobCommands submits, at the leaf gm160, a job that no manager can
// run (its requirement is met nowhere: it needs no application to run
// here) and lists it, its log and why it waits, with --json.
func jsonJobCommands(t *testing.T, leaf string, shape func(proto.Message, ...string) string, decode func(string, any)) {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "never.toml", "program = \"run.sh\"\ncount = 2\nrequirement = 'arch == \"sparc\"'\n")
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var sub struct {
		Cluster   string `json:"cluster"`
		Duplicate bool   `json:"duplicate"`
		Message   string `json:"message"`
	}
	decode(shape(&wire.JobReply{}, "job", "submit", "-d", leaf, filepath.Join(dir, "never.toml")), &sub)
	if !strings.HasPrefix(sub.Cluster, "gm160.") || sub.Duplicate || sub.Message == "" {
		t.Fatalf("job submit: %+v", sub)
	}
	type job struct {
		ID              string `json:"id"`
		State           string `json:"state"`
		Index           uint32 `json:"index"`
		SubmittedUnixMs int64  `json:"submitted_unix_ms"`
		OutputDir       string `json:"output_dir"`
		Log             []struct {
			Type       string `json:"type"`
			TimeUnixMs int64  `json:"time_unix_ms"`
		} `json:"log"`
	}
	var q struct {
		Jobs []job  `json:"jobs"`
		More uint32 `json:"more"`
	}
	decode(shape(&wire.JobReply{}, "job", "q", "-d", leaf), &q)
	if len(q.Jobs) != 2 || q.Jobs[1].ID != sub.Cluster+"[1]" || q.Jobs[1].Index != 1 || q.Jobs[0].State != "idle" ||
		q.Jobs[0].OutputDir != filepath.Join(dir, "results-never", "0") || q.Jobs[0].SubmittedUnixMs <= 0 {
		t.Fatalf("job q: %+v", q)
	}
	decode(shape(&wire.JobReply{}, "job", "log", "-d", leaf, sub.Cluster+"[0]"), &q)
	if len(q.Jobs) != 1 || len(q.Jobs[0].Log) == 0 || q.Jobs[0].Log[0].Type != "submitted" {
		t.Fatalf("job log: %+v", q)
	}
	var why struct {
		Jobs []job `json:"jobs"`
		Why  struct {
			Offers   []struct{} `json:"offers"`
			Visited  uint32     `json:"visited"`
			Verdicts []struct {
				Why    string `json:"why"`
				Detail string `json:"detail"`
			} `json:"verdicts"`
		} `json:"why"`
	}
	decode(shape(&wire.JobReply{}, "job", "why", "-d", leaf, sub.Cluster+"[1]"), &why)
	if len(why.Jobs) != 1 || len(why.Why.Offers) != 0 || why.Why.Visited != 6 || len(why.Why.Verdicts) == 0 ||
		!strings.Contains(why.Why.Verdicts[0].Detail, "sparc") {
		t.Fatalf("job why: %+v", why)
	}
	if code, _, errb := run(t, "job", "rm", "-d", leaf, sub.Cluster); code != 0 {
		t.Fatalf("job rm: %s", errb)
	}

	// A workflow of that job that cannot run, its status; removed, then
	// run again.
	writeFile(t, dir, "flow.toml", "name = \"never\"\n[nodes.a]\njob = \"never.toml\"\n[nodes.b]\nafter = [\"a\"]\njob = \"never.toml\"\n")
	var dsub struct {
		Cluster string `json:"cluster"`
		Dags    []struct {
			ID    string `json:"id"`
			State string `json:"state"`
			Nodes []struct {
				Name  string            `json:"name"`
				State string            `json:"state"`
				Jobs  map[string]uint32 `json:"jobs"`
				After []string          `json:"after"`
			} `json:"nodes"`
		} `json:"dags"`
	}
	decode(shape(&wire.JobReply{}, "dag", "submit", "-d", leaf, filepath.Join(dir, "flow.toml")), &dsub)
	if len(dsub.Dags) != 1 || dsub.Dags[0].ID != dsub.Cluster || dsub.Dags[0].State != "running" || len(dsub.Dags[0].Nodes) != 2 {
		t.Fatalf("dag submit: %+v", dsub)
	}
	id := dsub.Cluster
	decode(shape(&wire.JobReply{}, "dag", "status", "-d", leaf, id), &dsub)
	if n := dsub.Dags[0].Nodes[1]; n.Name != "b" || n.State != "waiting" || n.Jobs["waiting"] != 2 || len(n.After) != 1 {
		t.Fatalf("dag status: %+v", dsub)
	}
	if code, _, errb := run(t, "dag", "rm", "-d", leaf, id); code != 0 {
		t.Fatalf("dag rm: %s", errb)
	}
	decode(shape(&wire.JobReply{}, "dag", "rerun", "-d", leaf, id), &dsub)
	if dsub.Dags[0].State != "running" {
		t.Fatalf("dag rerun: %+v", dsub)
	}
	if code, _, errb := run(t, "dag", "rm", "-d", leaf, id); code != 0 {
		t.Fatalf("dag rm: %s", errb)
	}

	// Glide-ins that no manager can take (the requirement is met
	// nowhere), launched without waiting, and listed; then removed.
	prog := filepath.Join(dir, "fake-gridmgr")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var gl struct {
		Glideins []struct {
			Name  string `json:"name"`
			Group string `json:"group"`
			State string `json:"state"`
			Job   string `json:"job"`
		} `json:"glideins"`
	}
	decode(shape(&wire.GlideinList{}, "glidein", "-d", leaf, "--name", "jj", "--count", "1", "--mem", "64MiB", "--no-wait",
		"--program", prog, "--requirement", `arch == "sparc"`), &gl)
	if len(gl.Glideins) != 1 || gl.Glideins[0].Name != "jj-0" || gl.Glideins[0].Group != "jj" || gl.Glideins[0].Job == "" {
		t.Fatalf("glidein: %+v", gl)
	}
	decode(shape(&wire.GlideinList{}, "glidein", "list", "-d", leaf, "jj"), &gl)
	if len(gl.Glideins) != 1 || gl.Glideins[0].State != "idle" {
		t.Fatalf("glidein list: %+v", gl)
	}
	if code, _, errb := run(t, "glidein", "rm", "-d", leaf, "jj"); code != 0 {
		t.Fatalf("glidein rm: %s", errb)
	}
}

// checkJSONOutput fails t unless out is one JSON object of the shape of
// md: no quoted number where the documented type is a number, no
// SCREAMING_ENUM in any string (checkPlainShape). Strings that hold
// digits are strings of the .proto (an Attr's value, an admin output).
func checkJSONOutput(t *testing.T, what, out string, md protoreflect.MessageDescriptor) {
	t.Helper()
	checkPlainShape(t, what, []byte(out), md)
}

// commandName is the command args run: "tree", or "app list".
func commandName(args []string) string {
	if (args[0] == "app" || args[0] == "job" || args[0] == "dag" || (args[0] == "glidein" && args[1] == "list")) && len(args) > 1 {
		return args[0] + " " + args[1]
	}
	return args[0]
}

// docs/cli-json.md documents every command of jsonShapes with its
// messages, every field of every message they print (by name, in order,
// with its JSON type) and every word of their enums, and nothing that is
// not printed; and its examples are each the shape of a message printed.
func TestJSONDocs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli-json.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)

	// The commands table.
	rows := map[string]string{} // "gridmgr tree" → its row
	inCommands := false
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "## ") {
			inCommands = l == "## Commands"
		}
		if !inCommands || !strings.HasPrefix(l, "| `gridmgr ") {
			continue
		}
		cells := strings.Split(l, "|")
		for _, m := range regexp.MustCompile("`(gridmgr [a-z -]+)`").FindAllStringSubmatch(cells[1], -1) {
			rows[m[1]] = cells[2]
		}
	}
	var roots []protoreflect.MessageDescriptor
	for name, msgs := range jsonShapes {
		prints, ok := rows["gridmgr "+name]
		if !ok {
			t.Errorf("docs/cli-json.md: no row for gridmgr %s in the commands table", name)
			continue
		}
		if msgs == nil && !strings.Contains(prints, "—") {
			t.Errorf("docs/cli-json.md: gridmgr %s prints no message, its row says %q", name, prints)
		}
		for _, m := range msgs {
			md := m.ProtoReflect().Descriptor()
			if !slices.Contains(roots, md) {
				roots = append(roots, md)
			}
			if !strings.Contains(prints, "`"+docName(md)+"`") {
				t.Errorf("docs/cli-json.md: gridmgr %s prints %s, its row says %q", name, docName(md), prints)
			}
		}
	}

	// The sections of messages and enums: "### `Name`", then a table.
	sections := map[string][][]string{} // name → its table's rows' cells
	var order []string
	cur := ""
	for _, l := range strings.Split(doc, "\n") {
		if m := regexp.MustCompile("^### `([A-Za-z.]+)`$").FindStringSubmatch(l); m != nil {
			cur = m[1]
			order = append(order, cur)
			sections[cur] = [][]string{}
			continue
		}
		if strings.HasPrefix(l, "#") {
			cur = ""
		}
		if cur == "" || !strings.HasPrefix(l, "| `") {
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(l, "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		sections[cur] = append(sections[cur], cells)
	}
	want := map[string]bool{}
	var walk func(md protoreflect.MessageDescriptor)
	walk = func(md protoreflect.MessageDescriptor) {
		name := docName(md)
		if want[name] {
			return
		}
		want[name] = true
		rows, ok := sections[name]
		if !ok {
			t.Errorf("docs/cli-json.md: no section ### `%s`", name)
		}
		var got, exp []string
		for _, r := range rows {
			got = append(got, r[0]+" "+r[1])
		}
		for i := 0; i < md.Fields().Len(); i++ {
			fd := md.Fields().Get(i)
			exp = append(exp, "`"+string(fd.Name())+"` `"+docType(fd)+"`")
			if fd.IsMap() {
				fd = fd.MapValue()
			}
			if fd.Message() != nil {
				walk(fd.Message())
			}
			if e := fd.Enum(); e != nil && !want[docName(e)] {
				want[docName(e)] = true
				var words, exp []string
				for _, r := range sections[docName(e)] {
					words = append(words, r[0])
				}
				for j := 0; j < e.Values().Len(); j++ {
					w, _ := enumWord(e, e.Values().Get(j).Number())
					exp = append(exp, "`"+w+"`")
				}
				if !slices.Equal(words, exp) {
					t.Errorf("docs/cli-json.md: the words of %s are\n  %v\nit lists\n  %v", docName(e), exp, words)
				}
			}
		}
		if ok && !slices.Equal(got, exp) {
			t.Errorf("docs/cli-json.md: the fields of %s are\n  %s\nit lists\n  %s", name, strings.Join(exp, "\n  "), strings.Join(got, "\n  "))
		}
	}
	for _, md := range roots {
		walk(md)
	}
	for _, name := range order {
		if !want[name] {
			t.Errorf("docs/cli-json.md: section %s is no message or enum a command prints", name)
		}
	}

	// The examples.
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(doc, -1)
	if len(blocks) < 10 {
		t.Fatalf("docs/cli-json.md: %d examples", len(blocks))
	}
	for _, blk := range blocks {
		values := []string{blk[1]}
		if !json.Valid([]byte(blk[1])) {
			values = strings.Split(strings.TrimSpace(blk[1]), "\n") // JSON lines
		}
		for _, v := range values {
			var why []string
			for _, md := range roots {
				errs := plainShapeErrors([]byte(v), md)
				if len(errs) == 0 {
					why = nil
					break
				}
				why = append(why, fmt.Sprintf("%s: %s", md.Name(), errs[0]))
			}
			if why != nil {
				t.Errorf("docs/cli-json.md: an example is no message a command prints:\n%.300s\n  %s", v, strings.Join(why, "\n  "))
			}
		}
	}
}

// docName is how docs/cli-json.md names a message or enum: its full name
// without the package (TreeNode, ErrorReply.Code).
func docName(d protoreflect.Descriptor) string {
	return strings.TrimPrefix(string(d.FullName()), string(d.ParentFile().Package())+".")
}

// docType is a field's JSON type as docs/cli-json.md writes it.
func docType(fd protoreflect.FieldDescriptor) string {
	if fd.IsMap() {
		return "{string: " + docKind(fd.MapValue()) + "}"
	}
	if fd.IsList() {
		return "[" + docKind(fd) + "]"
	}
	return docKind(fd)
}

func docKind(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return "bool"
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return "number"
	case protoreflect.StringKind:
		return "string"
	case protoreflect.BytesKind:
		return "base64"
	case protoreflect.EnumKind:
		return docName(fd.Enum())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return docName(fd.Message())
	}
	return "integer"
}
