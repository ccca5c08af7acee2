package daemon_test

import (
	"context"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// A reply far larger than the stream window, sent after the session was
// quiet for longer than the write deadline's slack, must arrive whole (it
// used to be written under the previous send's deadline and reset the
// session).
func TestLargeReplyAfterQuietSession(t *testing.T) {
	if testing.Short() {
		t.Skip("slow under -short")
	}
	cfg := config.Default()
	cfg.Name = "big"
	cfg.DataDir = t.TempDir()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.CPUs, cfg.Memory = 60000, 1<<40
	cfg.Reservations = reservation.Limits{HoldTimeout: time.Hour}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := daemon.Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := dialClient(t, ctx, m.Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 3000 // about 1 MiB of listing
	for i := 0; i < n; i++ {
		if _, _, err := cl.Reserve(ctx, &wire.ReserveRequest{User: "u", Amounts: []*wire.Amount{{Kind: "cpus", N: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(400 * time.Millisecond) // longer than the write deadline's slack
	for i := 0; i < 2; i++ {
		rep, err := cl.Reservations(ctx, true, false)
		if err != nil {
			t.Fatalf("listing %d: %v", i, err)
		}
		if len(rep.Reservations) != n || rep.Live != n || rep.More != 0 {
			t.Fatalf("listing %d: %d reservations (%d more), %d live; want %d", i, len(rep.Reservations), rep.More, rep.Live, n)
		}
	}
}
