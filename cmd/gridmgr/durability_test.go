package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/wire"
)

// durProc is one `gridmgr run` process of the durability test.
type durProc struct {
	cmd  *exec.Cmd
	log  *syncBuf
	done chan struct{} // closed when the process has exited
	err  error         // its Wait error, once done is closed
}

// startManager starts `gridmgr run -c conf` (with env added to the
// test's environment) and waits until it has written a fresh addr file in
// dataDir (the caller removes any stale one first).
func startManager(t *testing.T, bin, conf, dataDir string, env ...string) (*durProc, string) {
	t.Helper()
	p := &durProc{cmd: exec.Command(bin, "run", "-c", conf), log: &syncBuf{}, done: make(chan struct{})}
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if addr, err := daemon.ReadAddrFile(dataDir); err == nil {
			return p, addr
		}
		select {
		case <-p.done:
			t.Fatalf("gridmgr run exited before writing its addr file: %v\n%s", p.err, p.log.String())
		case <-time.After(20 * time.Millisecond): // polling a real process
		}
		if time.Now().After(deadline) {
			t.Fatalf("no addr file in %s after 20s\n%s", dataDir, p.log.String())
		}
	}
}

// durAck is one reservation acknowledged to a client before the kill.
type durAck struct {
	req *wire.ReserveRequest
	res *wire.Reservation
}

// durWorker is one client identity sending reservation requests, one at a
// time.
type durWorker struct {
	key   crypto.PrivKey
	peer  string
	acked []durAck
	lost  *wire.ReserveRequest // in flight when the connection died: its fate is unknown
	err   error                // what ended the loop
	early bool                 // err came before the kill
}

func cpusOf(as []*wire.Amount) int64 {
	var n int64
	for _, a := range as {
		if a.Kind == "cpus" {
			n += a.N
		}
	}
	return n
}

func sameAmounts(a, b []*wire.Amount) bool {
	return slices.EqualFunc(a, b, func(x, y *wire.Amount) bool { return x.Kind == y.Kind && x.N == y.N })
}

func wantState(req *wire.ReserveRequest) wire.ReservationState {
	if req.Commit {
		return wire.ReservationState_RESERVATION_STATE_COMMITTED
	}
	return wire.ReservationState_RESERVATION_STATE_HELD
}

// A manager killed with SIGKILL while eight clients reserve as fast as they
// can loses none of the reservations it acknowledged: after a restart on
// the same data dir every one is there with its id, amounts and state, the
// ledger's usage adds up, the only extras are requests whose answer the
// kill swallowed, and a retry of any request (acknowledged or lost) gets
// the original reservation: exactly once across the crash.
func TestKill9KeepsReservations(t *testing.T) { kill9KeepsReservations(t, 0) }

// The same, but the manager kills itself with SIGKILL at the worst moment
// of a group commit: right after its Nth reservation write (N random) is
// synced, before it answers any request of that write
// (daemon.KillAfterWritesEnv). The batch is on disk and nobody was told:
// there must be at least one reservation nobody was told about, each one
// a request whose answer the kill swallowed, and a retry must find it.
func TestKill9BetweenWriteAndAnswer(t *testing.T) {
	kill9KeepsReservations(t, 40+rand.IntN(160))
}

// kill9KeepsReservations runs the kill -9 test: killed by the test at a
// random number of acknowledgements (killAfterWrites 0), or by itself
// right after write killAfterWrites.
func kill9KeepsReservations(t *testing.T, killAfterWrites int) {
	if testing.Short() {
		t.Skip("builds the binary and kills a running manager")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	conf := filepath.Join(dir, "durable.toml")
	props := fmt.Sprintf(`name = "durable"
data_dir = %q
listen = ["/ip4/127.0.0.1/tcp/0"]
log_level = "info"

[resources]
cpus = 60000
memory = "1TiB"

[reservations]
hold_timeout = "10m"
lease = "1h"
`, dataDir)
	if err := os.WriteFile(conf, []byte(props), 0o600); err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	var env []string
	if killAfterWrites > 0 {
		env = append(env, fmt.Sprintf("%s=%d", daemon.KillAfterWritesEnv, killAfterWrites))
	}
	proc, addr := startManager(t, bin, conf, dataDir, env...)
	t.Logf("manager up at %s in %v", addr, time.Since(t0).Round(time.Millisecond))

	// Eight client identities, each with its own session.
	const nWorkers = 8
	workers := make([]*durWorker, nWorkers)
	clients := make([]*client.Client, nWorkers)
	for i := range workers {
		key, err := p2p.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		workers[i] = &durWorker{key: key, peer: p2p.PeerIDOf(key)}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := client.DialNew(ctx, addr, p2p.ClientHostOptions{Key: key})
		cancel()
		if err != nil {
			t.Fatalf("dial %s: %v\n%s", addr, err, proc.log.String())
		}
		clients[i] = c
		defer c.Close()
	}

	var killed atomic.Bool
	// A manager that kills itself does so at no moment the test knows:
	// every error then counts as after the kill (an answer instead of a
	// lost connection still fails, below).
	killed.Store(killAfterWrites > 0)
	var nAcked atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i, w := range workers {
		wg.Go(func() {
			for n := 0; ; n++ {
				req := &wire.ReserveRequest{
					RequestId: fmt.Sprintf("w%d-r%d", i, n),
					User:      fmt.Sprintf("user%d", i),
					Amounts:   []*wire.Amount{{Kind: "cpus", N: int64(1 + n%3)}},
				}
				if n%2 == 0 {
					req.Commit, req.LeaseMs = true, uint64(time.Hour/time.Millisecond)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				res, retry, err := clients[i].Reserve(ctx, req)
				cancel()
				if err != nil {
					w.lost, w.err, w.early = req, err, !killed.Load()
					return
				}
				if retry || res.GetState() != wantState(req) || !sameAmounts(res.GetAmounts(), req.Amounts) {
					w.err, w.early = fmt.Errorf("request %s answered %v (retry %v)", req.RequestId, res, retry), true
					return
				}
				w.acked = append(w.acked, durAck{req: req, res: res})
				nAcked.Add(1)
			}
		})
	}

	// Kill once a random number between 200 and 3,000 are acknowledged
	// (a listing after the restart shows at most 5,000), or after 20 s.
	minAcked := 200
	if killAfterWrites == 0 {
		target := int64(200 + rand.IntN(2800))
		for wait := time.Now().Add(20 * time.Second); nAcked.Load() < target && time.Now().Before(wait); {
			time.Sleep(time.Millisecond) // polling the workers
		}
		killed.Store(true)
		if err := proc.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-proc.done
	} else {
		minAcked = 1 // the answers of the writes before the last may still have been in the pipe
		select {
		case <-proc.done:
		case <-time.After(60 * time.Second):
			t.Fatalf("the manager did not kill itself after write %d within 60s\n%s", killAfterWrites, proc.log.String())
		}
		var ee *exec.ExitError
		if !errors.As(proc.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("the manager ended with %v, not by SIGKILL after write %d\n%s", proc.err, killAfterWrites, proc.log.String())
		}
	}
	ackedAtKill := nAcked.Load()
	ran := time.Since(start)
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(15 * time.Second):
		t.Fatal("clients did not notice the kill within 15s")
	}

	acked := 0
	lostReqs := 0
	var nCommitted int
	for i, w := range workers {
		if w.early {
			t.Fatalf("client %d failed before the kill: %v\n%s", i, w.err, proc.log.String())
		}
		var re *client.RemoteError
		if errors.As(w.err, &re) {
			t.Fatalf("client %d got an answer, not a lost connection, at the kill: %v", i, w.err)
		}
		acked += len(w.acked)
		if w.lost != nil {
			lostReqs++
		}
		for _, a := range w.acked {
			if a.req.Commit {
				nCommitted++
			}
		}
	}
	if acked < minAcked {
		t.Fatalf("only %d reservations acknowledged before the kill (want at least %d)\n%s", acked, minAcked, proc.log.String())
	}
	t.Logf("killed after %v: %d acknowledged (%d when the kill was decided; %d committed, %d held; %.0f/s), %d requests in flight",
		ran.Round(time.Millisecond), acked, ackedAtKill, nCommitted, acked-nCommitted, float64(acked)/ran.Seconds(), lostReqs)

	// Restart on the same properties file. The killed process left its addr
	// file behind; the kernel released its lock.
	if err := os.Remove(filepath.Join(dataDir, daemon.AddrFile)); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	t1 := time.Now()
	proc, addr = startManager(t, bin, conf, dataDir)
	t.Logf("restarted at %s in %v", addr, time.Since(t1).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type listing struct {
		byID map[string]*wire.Reservation
		live int
		cpus int64 // sum over live reservations
		used int64 // the ledger's cpus usage
	}
	list := func() listing {
		t.Helper()
		// A fresh session per listing: a manager resets a session whose
		// reply outgrows the stream window more than 250 ms after its
		// previous reply (the write deadline of channel.send is moved only
		// after the write), and a listing of hundreds of reservations does.
		checker, err := client.DialNew(ctx, addr, p2p.ClientHostOptions{MaxFrame: 256 << 20})
		if err != nil {
			t.Fatalf("dial after restart: %v\n%s", err, proc.log.String())
		}
		defer checker.Close()
		rep, err := checker.Reservations(ctx, true, false)
		if err != nil {
			t.Fatalf("reservations after restart: %v\n%s", err, proc.log.String())
		}
		l := listing{byID: make(map[string]*wire.Reservation), used: -1}
		for _, r := range rep.Reservations {
			if l.byID[r.Id] != nil {
				t.Errorf("reservation %s listed twice", r.Id)
			}
			l.byID[r.Id] = r
			switch r.State {
			case wire.ReservationState_RESERVATION_STATE_HELD, wire.ReservationState_RESERVATION_STATE_COMMITTED:
				l.live++
				l.cpus += cpusOf(r.Amounts)
			default:
				t.Errorf("reservation %s is %v (%s) after the restart; nothing should have ended", r.Id, r.State, r.Reason)
			}
		}
		for _, u := range rep.Usage {
			if u.Kind == "cpus" {
				l.used = u.Used
			}
		}
		if int(rep.Live) != l.live {
			t.Errorf("the ledger says %d live, the listing has %d", rep.Live, l.live)
		}
		if l.used != l.cpus {
			t.Errorf("the ledger's cpus usage is %d, the live reservations add up to %d", l.used, l.cpus)
		}
		return l
	}
	before := list()

	// Every acknowledged reservation is there, as acknowledged.
	ackedIDs := make(map[string]bool, acked)
	missing := 0
	for _, w := range workers {
		for _, a := range w.acked {
			ackedIDs[a.res.Id] = true
			r := before.byID[a.res.Id]
			switch {
			case r == nil:
				missing++
				if missing <= 10 {
					t.Errorf("acknowledged reservation %s (request %s) is gone after the kill", a.res.Id, a.req.RequestId)
				}
			case r.HolderPeer != w.peer || r.User != a.req.User || !sameAmounts(r.Amounts, a.req.Amounts) || r.State != a.res.State:
				t.Errorf("reservation %s after the restart: holder %s user %q amounts %v state %v; acknowledged holder %s user %q amounts %v state %v",
					r.Id, r.HolderPeer, r.User, r.Amounts, r.State, w.peer, a.req.User, a.req.Amounts, a.res.State)
			case a.req.Commit && r.LeaseMs != a.res.LeaseMs:
				t.Errorf("lease %s after the restart: %d ms, acknowledged %d ms", r.Id, r.LeaseMs, a.res.LeaseMs)
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged reservations lost in the kill\n%s", missing, acked, proc.log.String())
	}
	if len(ackedIDs) != acked {
		t.Fatalf("%d acknowledgements name only %d distinct reservations", acked, len(ackedIDs))
	}
	if before.live < acked {
		t.Fatalf("%d live after the restart, fewer than the %d acknowledged", before.live, acked)
	}
	extras := make(map[string]*wire.Reservation)
	for id, r := range before.byID {
		if !ackedIDs[id] {
			extras[id] = r
		}
	}
	if len(extras) > lostReqs {
		t.Fatalf("%d reservations nobody was told about, but only %d requests were in flight", len(extras), lostReqs)
	}
	if killAfterWrites > 0 && len(extras) == 0 {
		t.Fatalf("killed right after write %d, yet every reservation on disk was acknowledged: the write's answers left before it was reported", killAfterWrites)
	}
	t.Logf("after the restart: %d live (%d acknowledged + %d written but unanswered), cpus used %d",
		before.live, acked, len(extras), before.used)

	// Retries from the same identities, with the same request ids: the
	// original answer, and nothing new.
	for i, w := range workers {
		c, err := client.DialNew(ctx, addr, p2p.ClientHostOptions{Key: w.key})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	type sampled struct {
		w int
		a durAck
	}
	var all []sampled
	for i, w := range workers {
		for _, a := range w.acked {
			all = append(all, sampled{i, a})
		}
	}
	rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for _, s := range all[:min(20, len(all))] {
		res, retry, err := clients[s.w].Reserve(ctx, s.a.req)
		if err != nil {
			t.Fatalf("retry of %s: %v", s.a.req.RequestId, err)
		}
		if !retry || res.Id != s.a.res.Id || res.State != s.a.res.State {
			t.Errorf("retry of %s after the restart: %s %v retry=%v; want %s %v retry=true",
				s.a.req.RequestId, res.Id, res.State, retry, s.a.res.Id, s.a.res.State)
		}
	}
	if after := list(); after.live != before.live || after.used != before.used {
		t.Fatalf("retries of acknowledged requests changed the ledger: %d live, %d cpus; before %d, %d",
			after.live, after.used, before.live, before.used)
	}

	// The requests whose answer was lost: a retry either finds the extra
	// reservation the kill hid from its client, or makes it now.
	explained, fresh := 0, 0
	for i, w := range workers {
		if w.lost == nil {
			continue
		}
		res, retry, err := clients[i].Reserve(ctx, w.lost)
		if err != nil {
			t.Fatalf("retry of the lost %s: %v", w.lost.RequestId, err)
		}
		if res.State != wantState(w.lost) || !sameAmounts(res.Amounts, w.lost.Amounts) || res.HolderPeer != w.peer {
			t.Errorf("retry of the lost %s: %v", w.lost.RequestId, res)
		}
		if retry {
			if extras[res.Id] == nil {
				t.Errorf("retry of the lost %s found %s, which is not one of the unanswered extras", w.lost.RequestId, res.Id)
			}
			delete(extras, res.Id)
			explained++
		} else {
			if before.byID[res.Id] != nil {
				t.Errorf("the lost %s was granted anew as %s, an id already in use", w.lost.RequestId, res.Id)
			}
			fresh++
		}
	}
	for id := range extras {
		t.Errorf("reservation %s after the restart matches no request", id)
	}
	if after := list(); after.live != before.live+fresh {
		t.Fatalf("after retrying the %d lost requests: %d live, want %d (%d before + %d made now)",
			lostReqs, after.live, before.live+fresh, before.live, fresh)
	}
	t.Logf("retries: 20 acknowledged requests got their original reservation; of %d lost requests %d had been written (retry=true), %d were granted now",
		lostReqs, explained, fresh)

	// A clean stop.
	t2 := time.Now()
	if err := proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-proc.done:
		if proc.err != nil {
			t.Fatalf("gridmgr exited with %v after SIGTERM\n%s", proc.err, proc.log.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("gridmgr did not exit within 10s of SIGTERM\n%s", proc.log.String())
	}
	if _, err := os.Stat(filepath.Join(dataDir, daemon.AddrFile)); !os.IsNotExist(err) {
		t.Errorf("gridmgr left its addr file behind after SIGTERM")
	}
	t.Logf("SIGTERM: exit 0 in %v; whole test %v", time.Since(t2).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
}
