package client_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/wire"
)

// startManager starts one real manager on loopback with plenty of one
// token kind to reserve.
func startManager(t *testing.T) *daemon.Manager {
	t.Helper()
	cfg := config.Default()
	cfg.Name = "solo"
	cfg.DataDir = t.TempDir()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.Tokens = map[string]int64{"slots": 100000}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := daemon.Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

// oneKeyStorm runs n clients at once, each with a client host of its own
// but all with the one key, as n CLI processes with the default client key
// are: each dials, queries and reserves one slot as `gridmgr reserve`
// does, within timeout. It returns the failures, by error text.
func oneKeyStorm(t *testing.T, addr string, n int, timeout time.Duration) map[string]int {
	t.Helper()
	key, err := p2p.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		failed = map[string]int{}
		wg     sync.WaitGroup
		start  = make(chan struct{})
	)
	for range n {
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			err := func() error {
				cl, err := client.DialNew(ctx, addr, p2p.ClientHostOptions{Key: key})
				if err != nil {
					return err
				}
				defer cl.Close()
				r := client.NewReserver(cl)
				defer r.Close()
				_, _, err = r.ReserveBest(ctx, &wire.QueryRequest{Requirement: "tokens.slots >= 1", Down: 255, Up: 255, Want: 1, Limit: 3},
					&wire.ReserveRequest{User: "storm", Amounts: []*wire.Amount{{Kind: "slots", N: 1}}})
				return err
			}()
			if err != nil {
				mu.Lock()
				failed[err.Error()]++
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	return failed
}

func describe(failed map[string]int) string {
	var b strings.Builder
	for _, e := range slices.Sorted(maps.Keys(failed)) {
		fmt.Fprintf(&b, "  %d× %s\n", failed[e], e)
	}
	return b.String()
}

// Fifty clients with one key at once, as fifty `gridmgr reserve` processes
// of a script with the default client key: every one gets its answer.
// libp2p's default allows one peer id 8 connections, and all fifty are one
// peer id.
func TestOneKeyFiftyClients(t *testing.T) {
	if testing.Short() {
		t.Skip("fifty libp2p clients")
	}
	m := startManager(t)
	failed := oneKeyStorm(t, m.Addr(), 50, 20*time.Second)
	total := 0
	for _, n := range failed {
		total += n
	}
	if total > 0 {
		t.Fatalf("%d of 50 clients with one key failed:\n%s", total, describe(failed))
	}
}
