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
// fsynced before it is answered) on a manager whose calendar is empty, then
// on a fresh manager with 10,000 windows already booked ahead, in the same
// run. x_empty is the rate with the windows ÷ the rate without (goal ≥
// 0.8: booking ahead must not slow today's reservations down).
//
//	go test -run '^$' -bench 'DurableCalendar' -benchtime 5000x ./daemon/
func BenchmarkDurableCalendar(b *testing.B) {
	rate := func(windows int) float64 {
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
		if windows > 0 {
			// Windows of one cpu, an hour each, begin every minute over the
			// next week: many distinct instants on the calendar.
			var seq atomic.Int64
			base := time.Now().Add(time.Hour).Truncate(time.Minute)
			runDurableClients(b, cls, windows, func(ctx context.Context, c *client.Client) error {
				i := seq.Add(1)
				begin := base.Add(time.Duration(i%(7*24*60)) * time.Minute)
				r, _, err := c.Reserve(ctx, &wire.ReserveRequest{Amounts: oneCPU, Commit: true,
					BeginUnixMs: begin.UnixMilli(), DurationMs: uint64(time.Hour / time.Millisecond)})
				if err == nil && !r.Window {
					err = fmt.Errorf("not a window: %v", r)
				}
				return err
			})
		}
		el := runDurableClients(b, cls, b.N, func(ctx context.Context, c *client.Client) error {
			_, err := reserveOneCPU(ctx, c)
			return err
		})
		return float64(b.N) / el.Seconds()
	}
	empty := rate(0)
	booked := rate(10_000)
	b.ReportMetric(empty, "empty_reservations/s")
	b.ReportMetric(booked, "booked_reservations/s")
	b.ReportMetric(booked/empty, "x_empty")
}
