package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// formedDemoGrid starts the six-manager demo grid for a CLI test, with
// the CLI's client key in a temporary dir, and waits until it formed.
func formedDemoGrid(t *testing.T) *demoGrid {
	t.Helper()
	t.Setenv("GRIDMGR_CLIENT_KEY", t.TempDir()+"/client.key")
	c := &cli{stdout: &strings.Builder{}, stderr: &strings.Builder{}}
	g, err := startDemoGrid(time.Second, "error", c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.stop)
	select {
	case <-g.formed:
	case <-time.After(30 * time.Second):
		t.Fatal("grid did not form")
	}
	return g
}

// Query-then-reserve through the CLI on the six-manager grid over real
// libp2p: another client takes the best offer between the query and the
// reservation, so the CLI falls back to the next offer; then the holder
// commits, renews and releases through other managers of the grid.
func TestCLIReserveFallsBackWhenOfferStolen(t *testing.T) {
	g := formedDemoGrid(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The thief: its own client identity, reserving whatever the CLI's
	// best offer has free, at that offer's manager.
	thief, err := client.DialNew(ctx, g.mgrs["gm152"].Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer thief.Close()
	tr := client.NewReserver(thief)
	defer tr.Close()
	var stolen *wire.Reservation
	var offered []string
	afterQueryHook = func(offers []*wire.Offer) {
		for _, o := range offers {
			offered = append(offered, o.Name)
		}
		best := offers[0]
		res, err := tr.ReserveAt(ctx, best.Name, &wire.ReserveRequest{Amounts: []*wire.Amount{{Kind: "cpus", N: best.CpusFree}}})
		if err != nil {
			t.Errorf("thief: %v", err)
			return
		}
		stolen = res
	}
	defer func() { afterQueryHook = nil }()

	at := g.mgrs["gm160"].Addr()
	code, out, stderr := run(t, "reserve", "-n", at, "--cpus", "16", "--mem", "8GiB", "--rank", "cpus_free", "--json")
	if code != 0 {
		t.Fatalf("reserve exit %d\n%s\n%s", code, out, stderr)
	}
	if stolen == nil || len(offered) < 2 || offered[0] != "gm164" {
		t.Fatalf("the best offer should be gm164 and be stolen; offers %v, stolen %v", offered, stolen)
	}
	var got struct {
		ID        string `json:"id"`
		OwnerName string `json:"owner_name"`
		State     string `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("reserve --json: %v\n%s", err, out)
	}
	if got.OwnerName != offered[1] || got.State != "held" || !strings.HasPrefix(got.ID, offered[1]+"-") {
		t.Fatalf("want a hold at the second offer %s, got %+v", offered[1], got)
	}
	if !strings.Contains(stderr, "gm164: refused: ") {
		t.Errorf("the fallback is not shown on stderr:\n%s", stderr)
	}

	// The holder acts through managers that do not own the reservation:
	// the CLI finds the owner from the number.
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"commit", "-n", g.mgrs["gm152"].Addr(), got.ID, "--lease", "1m"}, "committed " + got.ID + " at " + got.OwnerName + ": cpus 16, mem 8.0 GiB\nlease ends"},
		{[]string{"renew", "-n", g.mgrs["gm164"].Addr(), got.ID}, "renewed " + got.ID + " at " + got.OwnerName + ": cpus 16, mem 8.0 GiB\nlease ends"},
		{[]string{"reservations", "-n", g.mgrs[got.OwnerName].Addr(), "--mine"}, got.ID},
		{[]string{"release", "-n", g.mgrs["gm156"].Addr(), got.ID}, "released " + got.ID + " at " + got.OwnerName + ": cpus 16, mem 8.0 GiB\nended "},
		{[]string{"release", "-n", at, got.ID}, ": released by its holder"}, // idempotent
	} {
		code, out, stderr := run(t, step.args...)
		if code != 0 || !strings.Contains(out, step.want) {
			t.Fatalf("%v: exit %d, want %q in\n%s\n%s", step.args, code, step.want, out, stderr)
		}
	}
	// Another client may not release the thief's reservation.
	code, _, stderr = run(t, "release", "-n", at, stolen.Id)
	if code != 1 || !strings.Contains(stderr, "forbidden") || !strings.Contains(stderr, "only its holder or an admin") {
		t.Fatalf("release of someone else's reservation: exit %d\n%s", code, stderr)
	}
	// Bad input is a usage error naming what was wrong.
	for _, bad := range [][]string{
		{"reserve", "-n", at},
		{"reserve", "-n", at, "--cpus", "-1"},
		{"reserve", "-n", at, "--mem", "lots"},
		{"reserve", "-n", at, "--token", "gpus"},
		{"reserve", "-n", at, "--at", "gm154", "--token", "gpus=1"},
		{"reserve", "-n", at, "--at", "gm154", "--cpus", "1", "--commit", "--lease", "1000h"},
		{"commit", "-n", at, "not-a-number"},
	} {
		code, _, stderr := run(t, bad...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", bad, code, stderr)
		}
	}
	// Co-reservation through the CLI: three managers or none.
	code, out, stderr = run(t, "reserve", "-n", at, "--all", "cpus_free >= 8", "--count", "3", "--cpus", "8")
	if code != 0 || !strings.Contains(out, "co-reserved on 3 managers") || strings.Count(out, "committed") != 3 {
		t.Fatalf("co-reservation: exit %d\n%s\n%s", code, out, stderr)
	}
	code, _, stderr = run(t, "reserve", "-n", at, "--all", "cpus_free >= 8", "--count", "9", "--cpus", "8")
	if code != 1 || !strings.Contains(stderr, "wanted") {
		t.Fatalf("co-reservation of 9: exit %d\n%s", code, stderr)
	}
}

// The reservations command pages as a user runs it, against one manager
// over real libp2p with more reservations than a page holds: the first
// page ends with the number to give --after, --after lists the rest
// (including what was made after the first page, and not what was
// released), --all-pages lists every one once, --json carries next, and a
// bad or foreign cursor is a usage error naming --after or the field.
func TestCLIReservationsPages(t *testing.T) {
	t.Setenv("GRIDMGR_CLIENT_KEY", filepath.Join(t.TempDir(), "client.key"))
	cfg := config.Default()
	cfg.Name = "lst"
	cfg.DataDir = t.TempDir()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.LogLevel = "error"
	cfg.CPUs, cfg.Memory, cfg.MemoryFree = 65536, 8<<30, 8<<30
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := daemon.Start(cfg, newLogger(&strings.Builder{}, "error", false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	var made []string // in the order of their numbers
	reserve := func(n, from int) {
		var wg sync.WaitGroup
		ids := make([]string, n)
		for w := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 32 {
					rep, err := m.Driver.RequestAs(ctx, "loader", &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
						RequestId: fmt.Sprint("r", from+i), Amounts: []*wire.Amount{{Kind: "cpus", N: 1}}, Commit: true, LeaseMs: 3600000}}})
					if err != nil || rep.GetReservationReply() == nil {
						t.Errorf("reserve %d: %v %v", from+i, rep, err)
						return
					}
					ids[i] = rep.GetReservationReply().Reservation.Id
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		mu.Lock()
		defer mu.Unlock()
		made = append(made, ids...)
		slices.SortFunc(made, func(a, b string) int { return cmp.Compare(cliSeq(t, a), cliSeq(t, b)) })
	}
	start := time.Now()
	reserve(6234, 0)
	t.Logf("6234 reservations made in %v", time.Since(start))
	at := m.Addr()
	rows := func(out string) []string {
		var ids []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "lst-") {
				ids = append(ids, strings.Fields(l)[0])
			}
		}
		return ids
	}

	code, out, stderr := run(t, "reservations", "-n", at)
	first := rows(out)
	if code != 0 || !slices.Equal(first, made[:5000]) {
		t.Fatalf("first page: exit %d, %d rows, want the oldest 5000\n%s", code, len(first), stderr)
	}
	hint := "… and 1234 more (oldest shown first)\nnext page: --after " + made[4999] + " (--all-pages lists every page)\n"
	if !strings.HasSuffix(out, hint) {
		t.Fatalf("the first page does not end with\n%s", hint+out[max(0, len(out)-300):])
	}
	code, out, _ = run(t, "reservations", "-n", at, "--json")
	var page struct {
		Reservations []struct{ ID string } `json:"reservations"`
		More         int                   `json:"more"`
		Next         string                `json:"next"`
	}
	if err := json.Unmarshal([]byte(out), &page); code != 0 || err != nil || len(page.Reservations) != 5000 || page.More != 1234 || page.Next != made[4999] {
		t.Fatalf("--json: exit %d, %v, %d listed, more %d, next %q", code, err, len(page.Reservations), page.More, page.Next)
	}

	// Between the pages: some released (listed and not yet), more made.
	release := []string{made[10], made[5100], made[6000]}
	for _, id := range release {
		rep, err := m.Driver.RequestAs(ctx, "loader", &wire.Envelope{Body: &wire.Envelope_ReservationOp{ReservationOp: &wire.ReservationOpRequest{
			Op: wire.ReservationOpRequest_OP_RELEASE, Id: id, RequestId: "rel-" + id}}})
		if err != nil || rep.GetReservationReply() == nil {
			t.Fatalf("release %s: %v %v", id, rep, err)
		}
	}
	reserve(100, 10000)
	var want []string
	for _, id := range made[5000:] {
		if id != release[1] && id != release[2] {
			want = append(want, id)
		}
	}
	code, out, stderr = run(t, "reservations", "-n", at, "--after", page.Next)
	if got := rows(out); code != 0 || !slices.Equal(got, want) || strings.Contains(out, "next page") {
		t.Fatalf("--after %s: exit %d, %d rows, want %d (the rest, new ones too, not the released)\n%s", page.Next, code, len(got), len(want), stderr)
	}

	// Every page at once: each live reservation once, in order.
	var live []string
	for _, id := range made {
		if !slices.Contains(release, id) {
			live = append(live, id)
		}
	}
	code, out, stderr = run(t, "reservations", "-n", at, "--all-pages")
	if got := rows(out); code != 0 || !slices.Equal(got, live) || strings.Contains(out, "more") || !strings.HasPrefix(out, "lst: 6331 live reservation(s)\n") {
		t.Fatalf("--all-pages: exit %d, %d rows, want %d\n%s\n%s", code, len(got), len(live), out[:min(len(out), 300)], stderr)
	}
	code, out, _ = run(t, "reservations", "-n", at, "--all-pages", "--all", "--json")
	page.Next, page.More, page.Reservations = "", 0, nil
	if err := json.Unmarshal([]byte(out), &page); code != 0 || err != nil || len(page.Reservations) != len(made) || page.More != 0 || page.Next != "" {
		t.Fatalf("--all-pages --all --json: exit %d, %v, %d listed of %d, more %d, next %q", code, err, len(page.Reservations), len(made), page.More, page.Next)
	}
	// From a page in the middle, to the end.
	code, out, _ = run(t, "reservations", "-n", at, "--all-pages", "--after", made[99])
	if got := rows(out); code != 0 || !slices.Equal(got, slices.DeleteFunc(slices.Clone(live), func(id string) bool { return cliSeq(t, id) <= cliSeq(t, made[99]) })) {
		t.Fatalf("--all-pages --after %s: exit %d, %d rows", made[99], code, len(got))
	}

	// Past the end: an empty page, no next.
	name, _, tag, _ := reservation.ParseID(made[0])
	code, out, stderr = run(t, "reservations", "-n", at, "--after", reservation.FormatID(name, 999999, tag))
	if code != 0 || len(rows(out)) != 0 || strings.Contains(out, "next page") {
		t.Fatalf("past the end: exit %d\n%s%s", code, out, stderr)
	}
	// Bad cursors: usage errors that say what is wrong.
	for _, c := range []struct{ after, want string }{
		{"nope", `--after: reservation number "nope" is malformed`},
		{name + "-0-" + tag, "is not a positive number"},
		{reservation.FormatID("gm160", 3, "aaaaaa"), "reservations_request.after: reservation number gm160-3-aaaaaa is not this manager's (lst, tag " + tag + ")"},
	} {
		code, out, stderr := run(t, "reservations", "-n", at, "--after", c.after)
		if code != exitUsage || out != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("--after %s: exit %d, want %d and %q\n%s%s", c.after, code, exitUsage, c.want, out, stderr)
		}
	}
}

func cliSeq(t *testing.T, id string) uint64 {
	t.Helper()
	_, seq, _, err := reservation.ParseID(id)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// Releasing a reservation whose application runs, end to end (the demo
// grid's managers over libp2p, the CLI at a leaf, the reservation at the
// root): the answer says which instances it removed, what they were
// doing and that the host was restored, in text and in JSON; and so it
// is (the process is gone, so is the instance's directory, nothing is
// listed).
func TestReleaseRemovesAppsAndSaysSo(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("runs applications: needs root")
	}
	g := formedDemoGrid(t)
	leaf := g.mgrs["gm160"].Addr()
	instances := filepath.Join(g.mgrs["gm152"].Cfg.DataDir, daemon.AppsDir, "instances")
	reserve := func() string {
		t.Helper()
		code, out, stderr := run(t, "reserve", "-n", leaf, "--at", "gm152", "--cpus", "1", "--mem", "128MiB", "--commit", "--lease", "10m", "--json")
		var r struct{ Id string }
		if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil {
			t.Fatalf("reserve: exit %d %v\n%s%s", code, err, out, stderr)
		}
		return r.Id
	}
	app := func(name string) string {
		return packApp(t, "name = \""+name+"\"\nversion = \"1\"\n[install]\nfiles = [{ from = \"run.sh\" }]\n[run]\ncommand = [\"/bin/sh\", \"run.sh\"]\n",
			"while :; do sleep 0.1; done\n")
	}
	install := func(res, bundle string, start bool) {
		t.Helper()
		args := []string{"app", "install", "-n", leaf, res, bundle}
		if start {
			args = append(args, "--start")
		}
		if code, out, stderr := run(t, args...); code != 0 {
			t.Fatalf("install: exit %d\n%s%s", code, out, stderr)
		}
	}

	res := reserve()
	install(res, app("loop"), true)
	id := res + ".loop"
	code, out, _ := run(t, "app", "status", "-n", leaf, id, "--json")
	var st struct{ Instances []struct{ Pids []int32 } }
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.Instances) != 1 || len(st.Instances[0].Pids) == 0 {
		t.Fatalf("status: exit %d %v\n%s", code, err, out)
	}
	pid := int(st.Instances[0].Pids[0])

	code, out, stderr := run(t, "release", "-n", leaf, res)
	want := regexp.MustCompile(`(?m)^removed its application ` + regexp.QuoteMeta(id) + ` \(it was running\); host restored: [1-9][0-9]* changes undone$`)
	if code != 0 || !strings.HasPrefix(out, "released "+res+" at gm152: ") || !want.MatchString(out) {
		t.Fatalf("release: exit %d\n%s%s", code, out, stderr)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("the application's process %d still runs after the release said it was removed", pid)
	}
	if _, err := os.Stat(filepath.Join(instances, id)); !os.IsNotExist(err) {
		t.Errorf("its directory is still there: %v", err)
	}
	if code, out, _ := run(t, "app", "list", "-n", g.mgrs["gm152"].Addr()); code != 0 || !strings.HasPrefix(out, "no applications") {
		t.Errorf("app list after the release:\n%s", out)
	}

	// Two instances, one running and one only installed, in JSON.
	res = reserve()
	install(res, app("one"), true)
	install(res, app("two"), false)
	code, out, stderr = run(t, "release", "-n", leaf, res, "--json")
	var got struct {
		State       string
		AppsRemoved []struct {
			Id, State string
			Removed   bool
			Undone    uint32
		} `json:"apps_removed"`
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got.State != "released" || len(got.AppsRemoved) != 2 {
		t.Fatalf("release --json: exit %d %v\n%s%s", code, err, out, stderr)
	}
	for i, w := range []struct{ id, state string }{{res + ".one", "running"}, {res + ".two", "installed"}} {
		if rm := got.AppsRemoved[i]; rm.Id != w.id || rm.State != w.state || !rm.Removed || rm.Undone == 0 {
			t.Errorf("release --json: removal %d is %+v, want %s (%s) removed", i, rm, w.id, w.state)
		}
	}

	// A hold runs nothing: nothing is said about applications.
	code, out, _ = run(t, "reserve", "-n", leaf, "--at", "gm152", "--cpus", "1", "--json")
	var held struct{ Id string }
	json.Unmarshal([]byte(out), &held)
	if code, out, _ := run(t, "release", "-n", leaf, held.Id); code != 0 || strings.Contains(out, "application") {
		t.Errorf("release of a hold: exit %d\n%s", code, out)
	}
}
