package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/node/p2p/events"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/reservation/boltstore"
	"github.com/gridmgr/gridmgr/wire"
)

// Durable reservations: every grant and every release is acknowledged
// only after the ledger change is fsynced (node.Driver group-commits the
// changes that queue up while one write is in flight). The machine is
// noisy, so the rate is reported against the disk's own single-fsync
// commit rate, measured in the same run on the same directory just before
// the timer starts and again just after it stops (fsyncBaseline):
// x_fsync = reservations/s ÷ fsync_commits/s (goal ≥ 5:
// group commit must buy at least five reservations per fsync's worth of
// time). Each also reports the CPU time the whole process (manager and
// clients alike: the clients run in it) spent per reservation, from
// getrusage around the timed part (cpu_us/grant), and how many
// reservation changes one store write carried on average (grants/commit).
// BenchmarkDurableReservations(Proc) also measure, after the timed part,
// the rate of bare libp2p round trips with the same 32 clients
// (transportCeiling): transport_x_fsync is the x_fsync no protocol over
// this transport could beat on this machine, x_transport the share of it
// the manager reaches.
//
//	go test -run '^$' -bench 'Durable' -benchtime 20000x ./daemon/
//	go test -run '^$' -bench 'ReservationsMemory' -benchtime 20000x ./daemon/

// durableClients is how many concurrent client sessions drive a benchmark.
const durableClients = 32

// durableFsyncOps is how many append+fsync commits measure the baseline.
const durableFsyncOps = 200

// durableOpTimeout bounds one request; nothing here should come near it.
const durableOpTimeout = 30 * time.Second

// durableConfig is a manager on loopback with a data dir in dir and
// capacities that never refuse: a refusal in these benchmarks is a bug.
func durableConfig(b testing.TB, dir string) config.Config {
	cfg := config.Default()
	cfg.Name = "bench"
	cfg.DataDir = dir
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.CPUs = 65536 // the most a properties file may declare: b.N up to 65536 one-cpu holds
	cfg.Memory = 1 << 50
	cfg.Reservations = reservation.Limits{
		MaxLive: 10_000_000,
		// Holds must not lapse during a run, or the live count at the end
		// would not be b.N.
		HoldTimeout: time.Hour,
	}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	return cfg
}

// durableFsyncRate appends ~200 bytes to a file in dir and fsyncs it, n
// times, and returns commits/s: the disk's single-fsync commit rate.
func durableFsyncRate(b *testing.B, dir string, n int) float64 {
	path := filepath.Join(dir, "fsync-probe.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(path)
	defer f.Close()
	rec := make([]byte, 200)
	once := func() {
		if _, err := f.Write(rec); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	once() // allocate the first block outside the timing
	start := time.Now()
	for range n {
		once()
	}
	return float64(n) / time.Since(start).Seconds()
}

// fsyncBaseline is the disk's single-fsync commit rate measured around
// the timed part of a benchmark: once just before, once just after (the
// disk is shared and its rate swings by several times within a minute;
// two probes that bracket the run follow it better than one).
type fsyncBaseline struct {
	b      *testing.B
	dir    string
	before float64
}

func startFsyncBaseline(b *testing.B, dir string) *fsyncBaseline {
	return &fsyncBaseline{b: b, dir: dir, before: durableFsyncRate(b, dir, durableFsyncOps)}
}

// end probes again and returns the rate over both probes (commits ÷ time).
func (f *fsyncBaseline) end() float64 {
	after := durableFsyncRate(f.b, f.dir, durableFsyncOps)
	return 2 / (1/f.before + 1/after)
}

// dialDurableClients opens n client sessions to addr, each on a client
// host of its own, and warms each up with a status round trip.
func dialDurableClients(b *testing.B, addr string, n int) []*client.Client {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cls := make([]*client.Client, 0, n)
	for range n {
		c, err := dialClient(b, ctx, addr, p2p.ClientHostOptions{})
		if err != nil {
			closeDurableClients(b, cls)
			b.Fatal(err)
		}
		cls = append(cls, c)
		if _, err := c.Status(ctx); err != nil {
			closeDurableClients(b, cls)
			b.Fatal(err)
		}
	}
	return cls
}

func closeDurableClients(b *testing.B, cls []*client.Client) {
	for _, c := range cls {
		if err := c.Close(); err != nil {
			b.Error(err)
		}
	}
}

// runDurableClients splits n operations across the clients, runs them
// concurrently (each client one request at a time, as fast as it can) and
// returns the wall time they took. op gets the client and a run context;
// the first error stops every client and fails the benchmark.
func runDurableClients(b *testing.B, cls []*client.Client, n int, op func(ctx context.Context, c *client.Client) error) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	b.ResetTimer()
	start := time.Now()
	for i, c := range cls {
		share := n / len(cls)
		if i < n%len(cls) {
			share++
		}
		if share == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range share {
				if ctx.Err() != nil {
					return
				}
				if err := op(ctx, c); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	return elapsed
}

// transportCeiling is how many request-reply round trips a second bare
// libp2p reaches on this machine with gridmgr's transport stack and the
// benchmark's shape: clients client hosts, each with one stream to one
// server host and one request of size bytes in flight, n round trips in
// all. No grant can be faster than the round trip that asks for it, so
// grants/s ÷ this (x_transport) is how much of the transport's own rate
// the manager keeps, and this ÷ the fsync rate (transport_x_fsync) the
// most that group commit could make x_fsync on this machine.
func transportCeiling(b *testing.B, clients, n, size int) float64 {
	srv := echoServer(b, size)
	streams := make([]network.Stream, clients)
	for i := range streams {
		streams[i] = echoStream(b, srv)
	}
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for i, s := range streams {
		share := n / clients
		if i < n%clients {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, size)
			for range share {
				if _, err := s.Write(buf); err != nil {
					failed.Store(err)
					return
				}
				if _, err := io.ReadFull(s, buf); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := failed.Load(); err != nil {
		b.Fatalf("transport ceiling: %v", err)
	}
	return float64(n) / elapsed.Seconds()
}

// reportTransport reports the transport's ceiling (transportCeiling)
// beside a benchmark's rate perSec and the disk's fsyncs.
func reportTransport(b *testing.B, perSec, fsyncs float64) {
	rt := transportCeiling(b, durableClients, max(b.N, 2000), transportRequestBytes)
	b.ReportMetric(rt, "transport_rt/s")
	b.ReportMetric(perSec/rt, "x_transport")
	b.ReportMetric(rt/fsyncs, "transport_x_fsync")
}

// transportRequestBytes is about the size of a reservation request's frame
// and of its answer's.
const transportRequestBytes = 128

// cpuTime is the CPU time (user + system) this process has used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// countingStorage counts the writes that reach the manager's storage and
// the reservation changes they carry.
type countingStorage struct {
	node.Storage
	writes, changes *atomic.Int64
}

func (s countingStorage) Write(w node.Write) {
	if !w.Reservations.Empty() {
		s.writes.Add(1)
		s.changes.Add(int64(len(w.Reservations.Changes)))
	}
	s.Storage.Write(w)
}

// durableManager starts a manager on dir whose store writes are counted.
func durableManager(b testing.TB, dir string) (m *daemon.Manager, writes, changes *atomic.Int64) {
	writes, changes = new(atomic.Int64), new(atomic.Int64)
	m, err := daemon.Start(durableConfig(b, dir), nil, daemon.StartOptions{
		WrapStorage: func(s node.Storage) node.Storage { return countingStorage{s, writes, changes} },
	})
	if err != nil {
		b.Fatal(err)
	}
	return m, writes, changes
}

// reportDurable reports the figures every durable benchmark prints: n
// operations of grants reservations each in elapsed, with cpu of process
// CPU time, against the fsync baseline.
func reportDurable(b *testing.B, unit string, n, grants int, elapsed, cpu time.Duration, fsyncs float64, writes, changes int64) {
	perSec := float64(n) / elapsed.Seconds()
	b.ReportMetric(perSec, unit)
	b.ReportMetric(fsyncs, "fsync_commits/s")
	b.ReportMetric(perSec/fsyncs, "x_fsync")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n*grants), "cpu_us/grant")
	if writes > 0 {
		b.ReportMetric(float64(changes)/float64(writes), "grants/commit")
	}
}

// reportEventMessages prints how many events went in one signed event
// message (a batch counts once) between two counts of the manager's bus.
func reportEventMessages(b *testing.B, before, after events.Stats) {
	if msgs := after.Messages - before.Messages; msgs > 0 {
		b.ReportMetric(float64(after.Published-before.Published)/float64(msgs), "events/msg")
	}
}

var oneCPU = []*wire.Amount{{Kind: reservation.CPUs, N: 1}}

// reserveOneCPU holds one cpu (no commit) and checks the answer.
func reserveOneCPU(ctx context.Context, c *client.Client) (*wire.Reservation, error) {
	ctx, cancel := context.WithTimeout(ctx, durableOpTimeout)
	defer cancel()
	r, retry, err := c.Reserve(ctx, &wire.ReserveRequest{Amounts: oneCPU})
	if err != nil {
		return nil, fmt.Errorf("reserve: %w", err)
	}
	if retry || r.GetId() == "" || r.State != wire.ReservationState_RESERVATION_STATE_HELD {
		return nil, fmt.Errorf("reserve: unexpected answer (retry %v): %v", retry, r)
	}
	return r, nil
}

// releaseReservation releases id and checks the answer.
func releaseReservation(ctx context.Context, c *client.Client, id string) error {
	ctx, cancel := context.WithTimeout(ctx, durableOpTimeout)
	defer cancel()
	r, retry, err := c.ReservationOp(ctx, wire.ReservationOpRequest_OP_RELEASE, id, 0, "")
	if err != nil {
		return fmt.Errorf("release %s: %w", id, err)
	}
	if retry || r.GetId() != id || r.State != wire.ReservationState_RESERVATION_STATE_RELEASED {
		return fmt.Errorf("release %s: unexpected answer (retry %v): %v", id, retry, r)
	}
	return nil
}

// liveReservations asks the manager at addr, over a session of its own,
// how many reservations are live (mine: the list itself stays empty, Live
// counts them all).
func liveReservations(b *testing.B, addr string) uint32 {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dialClient(b, ctx, addr, p2p.ClientHostOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rep, err := c.Reservations(ctx, false, true)
	if err != nil {
		b.Fatal(err)
	}
	return rep.Live
}

// storedLive opens the reservation store of a stopped manager and counts
// the live records in it: what a restart would restore.
func storedLive(b *testing.B, dir string) int {
	s, err := boltstore.Open(filepath.Join(dir, daemon.StoreFile), boltstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	snap, err := s.Load()
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, r := range snap.Records {
		if r.State.Live() {
			n++
		}
	}
	return n
}

// BenchmarkDurableReservations: 32 clients hold one cpu each per
// reservation, b.N reservations in all, against one manager whose ledger
// is a bbolt file on real disk. It checks at the end that the manager has
// b.N live reservations and that the store, reopened after Stop, has them
// too.
func BenchmarkDurableReservations(b *testing.B) {
	dir := b.TempDir()
	m, writes, changes := durableManager(b, dir)
	stopped := false
	defer func() {
		if !stopped {
			m.Stop()
		}
	}()
	addr := m.Addr()
	cls := dialDurableClients(b, addr, durableClients)
	defer closeDurableClients(b, cls)
	fsync := startFsyncBaseline(b, dir)

	writes.Store(0)
	changes.Store(0)
	ev0 := m.EventBusStats()
	cpu0 := cpuTime(b)
	elapsed := runDurableClients(b, cls, b.N, func(ctx context.Context, c *client.Client) error {
		_, err := reserveOneCPU(ctx, c)
		return err
	})
	cpu := cpuTime(b) - cpu0
	nw, nc := writes.Load(), changes.Load()
	fsyncs := fsync.end()
	reportEventMessages(b, ev0, m.EventBusStats())

	if live := liveReservations(b, addr); int(live) != b.N {
		b.Fatalf("the manager has %d live reservations after %d granted", live, b.N)
	}
	m.Stop()
	stopped = true
	if n := storedLive(b, dir); n != b.N {
		b.Fatalf("the store has %d live reservations after %d granted", n, b.N)
	}
	reportDurable(b, "reservations/s", b.N, 1, elapsed, cpu, fsyncs, nw, nc)
	reportTransport(b, float64(b.N)/elapsed.Seconds(), fsyncs)
}

// BenchmarkDurableReserveRelease: each op holds one cpu and releases the
// same reservation, two durable writes; 32 clients, b.N ops in all. The
// ledger must be empty of live reservations at the end.
// cpu_us/grant and grants/commit count the release as a grant too (two
// durable changes per op).
func BenchmarkDurableReserveRelease(b *testing.B) {
	dir := b.TempDir()
	m, writes, changes := durableManager(b, dir)
	defer m.Stop()
	addr := m.Addr()
	cls := dialDurableClients(b, addr, durableClients)
	defer closeDurableClients(b, cls)
	fsync := startFsyncBaseline(b, dir)

	writes.Store(0)
	changes.Store(0)
	cpu0 := cpuTime(b)
	elapsed := runDurableClients(b, cls, b.N, func(ctx context.Context, c *client.Client) error {
		r, err := reserveOneCPU(ctx, c)
		if err != nil {
			return err
		}
		return releaseReservation(ctx, c, r.Id)
	})
	cpu := cpuTime(b) - cpu0
	nw, nc := writes.Load(), changes.Load()
	fsyncs := fsync.end()

	if live := liveReservations(b, addr); live != 0 {
		b.Fatalf("the manager has %d live reservations after %d reserved and released", live, b.N)
	}
	reportDurable(b, "ops/s", b.N, 2, elapsed, cpu, fsyncs, nw, nc)
}

// startMemoryManager starts what Start does minus the data dir: a host and
// a driver with no Store, so that reservations stay in memory and replies
// wait for nothing. It returns the manager's full address and a stop.
func startMemoryManager(b *testing.B, cfg config.Config) (string, func()) {
	key, err := p2p.GenerateIdentity()
	if err != nil {
		b.Fatal(err)
	}
	h, err := p2p.New(p2p.Options{Key: key, Listen: cfg.Listen})
	if err != nil {
		b.Fatal(err)
	}
	d := node.NewDriver(cfg, h.PeerID(), h.Addrs(), h, nil, node.DriverOptions{})
	h.Attach(d)
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(ctx) }()
	stop := func() {
		cancel()
		if err := <-runErr; err != nil && !errors.Is(err, context.Canceled) {
			b.Error(err)
		}
		_ = h.Close()
	}
	full := h.FullAddrs()
	if len(full) == 0 {
		stop()
		b.Fatal("the memory manager has no address")
	}
	addr := full[0]
	for _, a := range full {
		if len(a) > 9 && a[:9] == "/ip4/127." {
			addr = a
			break
		}
	}
	return addr, stop
}

// BenchmarkReservationsMemory is BenchmarkDurableReservations with the
// driver's Store left nil: the same clients, network and Core, no disk.
// Its reservations/s is the ceiling durability is measured against.
func BenchmarkReservationsMemory(b *testing.B) {
	cfg := durableConfig(b, b.TempDir())
	addr, stop := startMemoryManager(b, cfg)
	defer stop()
	cls := dialDurableClients(b, addr, durableClients)
	defer closeDurableClients(b, cls)

	cpu0 := cpuTime(b)
	elapsed := runDurableClients(b, cls, b.N, func(ctx context.Context, c *client.Client) error {
		_, err := reserveOneCPU(ctx, c)
		return err
	})
	cpu := cpuTime(b) - cpu0

	if live := liveReservations(b, addr); int(live) != b.N {
		b.Fatalf("the manager has %d live reservations after %d granted", live, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "reservations/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu_us/grant")
}
