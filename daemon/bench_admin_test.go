package daemon_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/wire"
)

// BenchmarkAdminAll1000 sends `set heartbeat.misses 3` with --all from the
// root of a 1,000-manager tree (fan-out 8, mocknet hosts in this process;
// the root's peer id is in every manager's admins) and waits until all
// 1,000 answers are collected at the root, against one gossipsub publish
// from the root reaching all 999 other hosts, on the same hosts and
// connections, in the same run (goal ≤ 3). gossipsub is set up as in
// BenchmarkGridQuery1000 (unsigned, content ids, tree neighbours in the
// mesh), and delivery only: no answers come back.
//
//	go test -run '^$' -bench AdminAll1000 -benchtime 20x ./daemon/
func BenchmarkAdminAll1000(b *testing.B) {
	const n = 1000
	ctx := context.Background()
	var got, round atomic.Int64
	done := make(chan struct{}, 1)
	var topics []*pubsub.Topic
	var rootID string
	g := startGridOf(b, n, func(hosts []host.Host) {
		rootID = hosts[0].ID().String()
		topics = joinGossip(b, ctx, hosts, func(int) {
			if got.Add(1) == round.Load()*(n-1) {
				done <- struct{}{}
			}
		}).topics
	}, func(i int, cfg *config.Config) { cfg.Admins = []string{rootID} })
	defer g.stop()
	seq := 0
	publish := func() time.Duration {
		seq++
		round.Add(1)
		t0 := time.Now()
		if err := topics[0].Publish(ctx, []byte(fmt.Sprintf("set heartbeat.misses 3 #%d", seq))); err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			b.Fatalf("publish %d reached %d of %d hosts", seq, got.Load()-(round.Load()-1)*(n-1), n-1)
		}
		return time.Since(t0)
	}
	time.Sleep(5 * time.Second) // gossipsub meshes form (1 s heartbeats)
	publish()

	all := func() time.Duration {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		t0 := time.Now()
		rep, err := g.drivers[0].Request(actx, &wire.Envelope{Body: &wire.Envelope_AdminRequest{AdminRequest: &wire.AdminRequest{
			Command: "set heartbeat.misses 3", All: true, BudgetMs: 25000,
		}}})
		d := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		ar := rep.GetAdminReply()
		if ar == nil || len(ar.Replies) != n || len(ar.Missing) != 0 {
			b.Fatalf("--all: %d answers, missing %v", len(ar.GetReplies()), ar.GetMissing())
		}
		for _, r := range ar.Replies {
			if !r.Ok {
				b.Fatalf("%s: %s", r.Name, r.Output)
			}
		}
		return d
	}
	all()
	var pubT, allT time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		allT += all()
		pubT += publish()
	}
	b.StopTimer()
	nn := float64(b.N)
	b.ReportMetric(float64(allT.Microseconds())/nn/1e3, "all-ms")
	b.ReportMetric(float64(pubT.Microseconds())/nn/1e3, "gossipsub-ms")
	b.ReportMetric(float64(allT)/float64(pubT), "ratio")
}
