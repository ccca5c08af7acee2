package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio/pbio"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// stallInterval is the heartbeat interval of the stalled-peer scenario:
// short enough that the 250 ms write deadline of inline writes shows
// (a heartbeat after a stalled write comes more than half an interval
// late), long enough that a shared 2-core machine's own hiccups stay
// under the 150 ms (half an interval) that makes a relation suspect. At
// 150 ms the test failed when it ran beside the web UI's browser tests
// (headless chromium takes a core): gaps of 265 ms with nothing stalled.
const stallInterval = 300 * time.Millisecond

// eventLog records a manager's relation events.
type eventLog struct {
	mu  sync.Mutex
	evs []node.Event
}

func (l *eventLog) add(e node.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, e)
	l.mu.Unlock()
}

// bad lists the events within [since, until] that show a relation other
// than with skip turning suspect or down.
func (l *eventLog) bad(since, until time.Time, skip string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.evs {
		if !e.At.Before(since) && !e.At.After(until) && e.Peer != skip && (e.State == relations.Suspect || e.State == relations.Down) {
			out = append(out, fmt.Sprintf("%s %s: %s", e.Name, e.State, e.What))
		}
	}
	return out
}

// meshPeer is a raw libp2p host speaking the mesh protocol by hand as an
// inferior of one manager: it says hello, reads the welcome and sends a
// heartbeat every interval.
type meshPeer struct {
	h    host.Host
	s    network.Stream
	r    pbio.ReadCloser
	wmu  sync.Mutex
	w    pbio.Writer
	seq  uint64
	name string
}

// join opens a mesh stream from h to the manager at addr and completes
// the handshake.
func join(h host.Host, addr, name string) (*meshPeer, error) {
	m, err := ma.NewMultiaddr(addr)
	if err != nil {
		return nil, err
	}
	ai, err := peer.AddrInfoFromP2pAddr(m)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Connect(ctx, *ai); err != nil {
		return nil, err
	}
	s, err := h.NewStream(ctx, ai.ID, p2p.MeshProtocol)
	if err != nil {
		return nil, err
	}
	p := &meshPeer{h: h, s: s, r: pbio.NewDelimitedReader(s, p2p.DefaultMaxFrame), w: pbio.NewDelimitedWriter(s), name: name}
	if err := p.send(&wire.Envelope{Body: &wire.Envelope_Hello{Hello: &wire.Hello{
		ProtocolVersion: node.ProtocolVersion, Name: name, Role: wire.Role_ROLE_INFERIOR}}}); err != nil {
		return nil, err
	}
	_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
	env := new(wire.Envelope)
	if err := p.r.ReadMsg(env); err != nil {
		return nil, fmt.Errorf("%s: reading the welcome: %w", name, err)
	}
	if env.GetWelcome() == nil {
		return nil, fmt.Errorf("%s: got %T, want a welcome", name, env.Body)
	}
	_ = s.SetReadDeadline(time.Time{})
	return p, nil
}

func (p *meshPeer) send(env *wire.Envelope) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.w.WriteMsg(env)
}

func (p *meshPeer) beat() error {
	p.seq++
	return p.send(&wire.Envelope{Body: &wire.Envelope_Heartbeat{Heartbeat: &wire.Heartbeat{
		Seq: p.seq, IntervalMs: uint32(stallInterval / time.Millisecond)}}})
}

// probe is a healthy inferior that logs when each heartbeat of its
// superior arrives.
type probe struct {
	*meshPeer
	mu    sync.Mutex
	beats []time.Time
}

func startProbe(t testing.TB, addr, name string, stop <-chan struct{}) *probe {
	mp, err := join(rawHost(t), addr, name)
	if err != nil {
		t.Fatal(err)
	}
	p := &probe{meshPeer: mp}
	go func() { // reader: every frame, as fast as it comes
		for {
			env := new(wire.Envelope)
			if err := p.r.ReadMsg(env); err != nil {
				return
			}
			if env.GetHeartbeat() != nil {
				p.mu.Lock()
				p.beats = append(p.beats, time.Now())
				p.mu.Unlock()
			}
		}
	}()
	go func() { // heartbeats of its own, so that the manager keeps it
		tick := time.NewTicker(stallInterval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if p.beat() != nil {
					return
				}
			}
		}
	}()
	return p
}

func (p *probe) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.beats)
}

// gaps are the times between consecutive heartbeats that arrived within
// [from, to].
func (p *probe) gaps(from, to time.Time) []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []time.Duration
	for i := 1; i < len(p.beats); i++ {
		if !p.beats[i-1].Before(from) && !p.beats[i].After(to) {
			out = append(out, p.beats[i].Sub(p.beats[i-1]))
		}
	}
	return out
}

// stall is a peer that stops reading: it says hello as an inferior, reads
// the welcome, asks for many status replies and never reads again, while
// its heartbeats keep the relation up. When the manager cuts it, it joins
// again and stalls again, until stop. It returns how many times it was
// cut.
func stall(t testing.TB, h host.Host, addr string, stop <-chan struct{}) (cuts int, largest int) {
	for {
		p, err := join(h, addr, "staller")
		if err != nil {
			select {
			case <-stop:
				return cuts, largest
			default:
				t.Error(err)
				return cuts, largest
			}
		}
		id := uint64(0)
		ask := func(n int) error {
			for range n {
				id++
				if err := p.send(&wire.Envelope{Id: id, Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}}); err != nil {
					return err
				}
			}
			return nil
		}
		// A few replies read, to learn their size; then 150 unread:
		// several times the stream's 256 KiB window.
		if err := ask(1); err != nil {
			t.Error(err)
			return cuts, largest
		}
		for {
			env := new(wire.Envelope)
			if err := p.r.ReadMsg(env); err != nil {
				t.Errorf("reading a status reply: %v", err)
				return cuts, largest
			}
			if sr := env.GetStatusReply(); sr != nil {
				largest = max(largest, proto.Size(env))
				break
			}
		}
		err = ask(150)
		tick := time.NewTicker(stallInterval)
		for err == nil {
			select {
			case <-stop:
				tick.Stop()
				p.s.Reset()
				return cuts, largest
			case <-tick.C:
				if err = p.beat(); err == nil {
					err = ask(10)
				}
			}
		}
		tick.Stop()
		if !errors.Is(err, network.ErrReset) {
			t.Errorf("staller: %v", err)
			return cuts, largest
		}
		cuts++
		p.s.Reset()
	}
}

// stallResult is what the stalled-peer scenario measured.
type stallResult struct {
	gaps      []time.Duration // between heartbeats at the healthy probes
	cuts      int             // times the manager cut the stalled peer
	replySize int             // bytes of one status reply
	bad       []string        // suspect or down relations other than the stalled one
	durable   []time.Duration // how long each reservation and audited command took to answer (slow disk)
	errs      []string        // their errors
}

// slowStorage is a disk that takes delay per write: each write reaches
// the manager's real storage only after delay, off the manager's loop (a
// node.Storage must not block), and the next only after the previous was
// reported, as the Applier asks.
type slowStorage struct {
	inner node.Storage
	delay time.Duration
}

func (s slowStorage) Write(w node.Write) {
	go func() {
		time.Sleep(s.delay) // the slowness being simulated
		s.inner.Write(w)
	}()
}

// durableWork reserves at m and runs audited admin commands (drain,
// undrain) one after another until stop, recording how long each answer
// took: each waits for a write of the slow disk.
func durableWork(t testing.TB, addr string, key crypto.PrivKey, stop <-chan struct{}, res *stallResult) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	c, err := client.DialNew(ctx, addr, p2p.ClientHostOptions{Key: key})
	cancel()
	if err != nil {
		res.errs = append(res.errs, "dial: "+err.Error())
		return
	}
	defer c.Close()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		start := time.Now()
		var err error
		switch i % 3 {
		case 0:
			_, _, err = c.Reserve(ctx, &wire.ReserveRequest{Amounts: []*wire.Amount{{Kind: "cpus", N: 1}}})
		case 1:
			var rep *wire.AdminReply
			if rep, err = c.Admin(ctx, "drain"); err == nil && !rep.Ok {
				err = errors.New(rep.Output)
			}
		case 2:
			var rep *wire.AdminReply
			if rep, err = c.Admin(ctx, "undrain"); err == nil && !rep.Ok {
				err = errors.New(rep.Output)
			}
		}
		cancel()
		if err != nil {
			res.errs = append(res.errs, err.Error())
			return
		}
		res.durable = append(res.durable, time.Since(start))
	}
}

func (r stallResult) p(q float64) time.Duration {
	g := slices.Clone(r.gaps)
	slices.Sort(g)
	if len(g) == 0 {
		return 0
	}
	return g[min(len(g)-1, int(q*float64(len(g))))]
}

// stalledPeerScenario runs a manager M (heartbeat interval 150 ms) with a
// superior and two inferiors (real managers) and two probes (raw
// inferiors that log M's heartbeats), then for window a peer that stops
// reading while it asks M for status replies. With slowDisk, M's disk
// takes that long per write, and a client keeps making M write
// (reservations, audited admin commands) meanwhile. It measures the
// heartbeats at the probes and collects the relation events of every
// manager.
func stalledPeerScenario(t testing.TB, window, slowDisk time.Duration) stallResult {
	dir := t.TempDir()
	logs := map[string]*eventLog{}
	adminKey, err := p2p.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	mk := func(name string, sup *daemon.Manager) *daemon.Manager {
		cfg := config.Default()
		cfg.Name = name
		cfg.DataDir = filepath.Join(dir, name)
		cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
		cfg.HeartbeatInterval = stallInterval
		cfg.CPUs = 1000
		cfg.Admins = []string{p2p.PeerIDOf(adminKey)}
		if sup != nil {
			cfg.Superiors = []peeraddr.PeerAddrs{{Peer: sup.Host.PeerID(), Addrs: sup.Host.Addrs()}}
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		l := &eventLog{}
		logs[name] = l
		opts := daemon.StartOptions{OnEvent: l.add}
		if name == "m" && slowDisk > 0 {
			opts.WrapStorage = func(s node.Storage) node.Storage { return slowStorage{s, slowDisk} }
		}
		m, err := daemon.Start(cfg, testLogger(t).With("at", name), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Stop)
		return m
	}
	sup := mk("sup", nil)
	m := mk("m", sup)
	mk("i1", m)
	mk("i2", m)
	stop := make(chan struct{})
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
		}
	}()
	probes := []*probe{startProbe(t, m.Addr(), "p1", stop), startProbe(t, m.Addr(), "p2", stop)}

	// Everything up, and the probes hear M.
	deadline := time.Now().Add(30 * time.Second)
	for {
		up := 0
		if st, err := status(m); err == nil {
			for _, r := range st.Relations {
				if r.State == wire.RelationState_RELATION_STATE_UP {
					up++
				}
			}
		}
		if up == 5 && probes[0].count() >= 5 && probes[1].count() >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the grid did not come up: %d of 5 relations of m up", up)
		}
		time.Sleep(20 * time.Millisecond) // polling a real network, not timing
	}

	var res stallResult
	sh := rawHost(t)
	t0 := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		res.cuts, res.replySize = stall(t, sh, m.Addr(), stop)
	}()
	worked := make(chan struct{})
	go func() {
		defer close(worked)
		if slowDisk > 0 {
			durableWork(t, m.Addr(), adminKey, stop, &res)
		}
	}()
	time.Sleep(window) // the length of the measurement, not a wait for a condition
	t1 := time.Now()
	close(stop)
	stopped = true
	<-done
	<-worked
	for _, p := range probes {
		res.gaps = append(res.gaps, p.gaps(t0, t1)...)
	}
	staller := sh.ID().String()
	for _, name := range []string{"m", "sup", "i1", "i2"} {
		for _, b := range logs[name].bad(t0, t1, staller) {
			res.bad = append(res.bad, name+" saw "+b)
		}
	}
	return res
}

func status(m *daemon.Manager) (*wire.StatusReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rep, err := m.Driver.Request(ctx, &wire.Envelope{Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}})
	if err != nil {
		return nil, err
	}
	if rep.GetStatusReply() == nil {
		return nil, fmt.Errorf("status: got %T", rep.Body)
	}
	return rep.GetStatusReply(), nil
}

// A peer that stops reading (its window full) and a disk that takes 5 s
// per write do not delay M's heartbeats to its other relations: at two
// healthy inferiors the 99th percentile gap between heartbeats stays
// within half an interval of the interval, and no relation but the
// stalled one turns suspect or down, at M or at its superior and
// inferiors. The stalled peer is cut (its window is full, then its queue
// or the write deadline) and comes back to stall again, again and again;
// meanwhile a client's reservations and audited admin commands are each
// answered only once their write is done, 5 s later.
func TestStalledPeerDoesNotDelayHeartbeats(t *testing.T) {
	const window, slowDisk = 11 * time.Second, 5 * time.Second
	res := stalledPeerScenario(t, window, slowDisk)
	t.Logf("status reply %d bytes; stalled peer cut %d times; %d heartbeat gaps: p50 %v p99 %v max %v",
		res.replySize, res.cuts, len(res.gaps), res.p(0.5), res.p(0.99), res.p(1))
	if res.cuts == 0 {
		t.Fatal("the stalled peer was never cut: it did not stall M's writes (replies too small?)")
	}
	if len(res.gaps) < 10 {
		t.Fatalf("only %d heartbeat gaps measured", len(res.gaps))
	}
	// A silence longer than 1.5 intervals is a missed heartbeat
	// (relations.Liveness): the gap may exceed the interval by half of it.
	if p99 := res.p(0.99); p99 > stallInterval*3/2 {
		t.Errorf("p99 gap between heartbeats %v > 1.5 × the interval %v: healthy peers would count a missed heartbeat", p99, stallInterval)
	}
	if len(res.bad) > 0 {
		t.Errorf("relations other than the stalled peer's turned suspect or down:\n%s", strings.Join(res.bad, "\n"))
	}
	t.Logf("durable answers (each behind a 5 s write): %v; errors %v", res.durable, res.errs)
	if len(res.errs) > 0 {
		t.Errorf("reservations or admin commands failed: %v", res.errs)
	}
	if len(res.durable) < 2 {
		t.Errorf("%d durable answers in %v: the slow disk was not exercised", len(res.durable), window)
	}
	for _, d := range res.durable {
		if d < slowDisk {
			t.Errorf("an answer came after %v, before the %v write it depends on", d, slowDisk)
		}
	}
	// Two probes hear M every interval for the whole window: fewer gaps
	// than that means heartbeats were lost or late.
	if want := 2 * int(window/stallInterval) * 8 / 10; len(res.gaps) < want {
		t.Errorf("%d heartbeat gaps measured at the probes, want at least %d", len(res.gaps), want)
	}
}

// BenchmarkStalledPeerHeartbeats reports the heartbeat gaps at healthy
// relations while one peer of the same manager stops reading, over the
// heartbeat interval (goal: p99 ≤ 2, a delay of at most one interval; the
// test holds it to 1.5, below which no heartbeat counts as missed).
//
//	go test -run '^$' -bench StalledPeerHeartbeats -benchtime 1x ./daemon/
func BenchmarkStalledPeerHeartbeats(b *testing.B) {
	var gaps []time.Duration
	cuts := 0
	for range b.N {
		res := stalledPeerScenario(b, 6*time.Second, 0)
		gaps = append(gaps, res.gaps...)
		cuts += res.cuts
	}
	res := stallResult{gaps: gaps}
	b.ReportMetric(float64(res.p(0.5))/float64(stallInterval), "p50-gap/interval")
	b.ReportMetric(float64(res.p(0.99))/float64(stallInterval), "p99-gap/interval")
	b.ReportMetric(float64(res.p(1))/float64(stallInterval), "max-gap/interval")
	b.ReportMetric(float64(cuts)/float64(b.N), "cuts/run")
}
