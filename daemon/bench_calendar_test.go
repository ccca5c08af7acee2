package daemon_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/wire"
)

// BenchmarkDurableCalendar: durable reservations over libp2p (as
// BenchmarkDurableReservations: 32 clients, one cpu each, every grant
// fsynced before it is answered) on a manager that already holds 10,000
// leases from now (what the ledger held before calendars: the same store
// size), then on a fresh manager with 10,000 windows booked ahead
// instead, in the same run. x_leases is the rate with the windows ÷ the
// rate with the leases (goal ≥ 0.8: booking ahead must not slow today's
// reservations down).
//
//	go test -run '^$' -bench 'DurableCalendar' -benchtime 5000x ./daemon/
func BenchmarkDurableCalendar(b *testing.B) {
	rate := func(windows bool) float64 {
		dir := b.TempDir()
		cfg := durableConfig(b, dir)
		cfg.Reservations.MaxWindow = 24 * time.Hour
		m, err := daemon.Start(cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer m.Stop()
		cls := dialDurableClients(b, m.Addr(), durableClients)
		defer closeDurableClients(b, cls)
		// Windows of one cpu, an hour each, begin every minute over the
		// next week: many distinct instants on the calendar. Or as many
		// leases of one cpu from now, committed for a day.
		var seq atomic.Int64
		base := time.Now().Add(time.Hour).Truncate(time.Minute)
		runDurableClients(b, cls, 10_000, func(ctx context.Context, c *client.Client) error {
			i := seq.Add(1)
			req := &wire.ReserveRequest{Amounts: oneCPU, Commit: true, LeaseMs: uint64(24 * time.Hour / time.Millisecond)}
			if windows {
				req.LeaseMs, req.BeginUnixMs, req.DurationMs = 0, base.Add(time.Duration(i%(7*24*60))*time.Minute).UnixMilli(), uint64(time.Hour/time.Millisecond)
			}
			r, _, err := c.Reserve(ctx, req)
			if err == nil && r.Window != windows {
				err = fmt.Errorf("window %v, want %v: %v", r.Window, windows, r)
			}
			return err
		})
		el := runDurableClients(b, cls, b.N, func(ctx context.Context, c *client.Client) error {
			_, err := reserveOneCPU(ctx, c)
			return err
		})
		return float64(b.N) / el.Seconds()
	}
	leases := rate(false)
	windows := rate(true)
	b.ReportMetric(leases, "leases_reservations/s")
	b.ReportMetric(windows, "windows_reservations/s")
	b.ReportMetric(windows/leases, "x_leases")
}
