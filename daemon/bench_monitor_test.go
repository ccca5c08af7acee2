package daemon_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/wire"
)

// BenchmarkScrape10kReservations times one GET /metrics on a manager that
// holds 10,000 reservations (goal < 50 ms), and reports it beside the time
// of one in-process status request in the same run (the floor of any
// scrape that asks the Core).
//
//	go test -run XXX -bench Scrape10k -benchtime 20x ./daemon/
func BenchmarkScrape10kReservations(b *testing.B) {
	cfg := config.Default()
	cfg.Name = "scrape"
	cfg.DataDir = filepath.Join(b.TempDir(), "d")
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.HTTPListen = "127.0.0.1:0"
	cfg.CPUs = 65536
	cfg.Reservations.MaxLive = 20_000
	cfg.LogLevel = "error"
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	m, err := daemon.Start(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Stop()
	ctx := context.Background()
	for i := range 10_000 {
		rep, err := m.Driver.Request(ctx, &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
			RequestId: "r" + strconv.Itoa(i), Commit: true, LeaseMs: 3_600_000, Amounts: []*wire.Amount{{Kind: "cpus", N: 1}}}}})
		if err != nil || rep.GetReservationReply() == nil {
			b.Fatalf("reserve %d: %v %v", i, rep, err)
		}
	}
	url := "http://" + m.HTTPAddr() + "/metrics"
	get := func() {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatal(resp.Status)
		}
	}
	get() // warm
	var scrape, status, listing time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		get()
		scrape += time.Since(t0)
		t1 := time.Now()
		if _, err := m.Driver.Request(ctx, &wire.Envelope{Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}}); err != nil {
			b.Fatal(err)
		}
		status += time.Since(t1)
		t2 := time.Now()
		if _, err := m.Driver.Request(ctx, &wire.Envelope{Body: &wire.Envelope_ReservationsRequest{ReservationsRequest: &wire.ReservationsRequest{Limit: 1}}}); err != nil {
			b.Fatal(err)
		}
		listing += time.Since(t2)
	}
	b.ReportMetric(float64(scrape.Microseconds())/float64(b.N)/1000, "scrape-ms")
	b.ReportMetric(float64(status.Microseconds())/float64(b.N)/1000, "status-ms")
	b.ReportMetric(float64(listing.Microseconds())/float64(b.N)/1000, "ledger-ms")
}
