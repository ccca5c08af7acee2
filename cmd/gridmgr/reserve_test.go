package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/node/p2p"
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
		OwnerName string `json:"ownerName"`
		State     string `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("reserve --json: %v\n%s", err, out)
	}
	if got.OwnerName != offered[1] || got.State != "RESERVATION_STATE_HELD" || !strings.HasPrefix(got.ID, offered[1]+"-") {
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
