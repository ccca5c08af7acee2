package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/wire"
)

// patent is the six-manager tree: child → superior.
var patent = [][2]string{
	{"gm152", ""}, {"gm154", "gm152"}, {"gm156", "gm152"},
	{"gm160", "gm154"}, {"gm162", "gm154"}, {"gm164", "gm156"},
}

const wantTree = "gm152(gm154(gm160,gm162),gm156(gm164))"

type tlog struct {
	t  testing.TB
	mu *sync.Mutex
}

func (w tlog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlog{t, &sync.Mutex{}}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// freePorts finds n free loopback TCP ports.
func freePorts(t testing.TB, n int) []int {
	var ls []net.Listener
	var out []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

// grid is six managers with fixed loopback ports and pre-made identities.
type grid struct {
	t    testing.TB
	cfgs map[string]config.Config
	ids  map[string]string
	mgrs map[string]*daemon.Manager
	mu   sync.Mutex
}

func newGrid(t testing.TB) *grid {
	g := &grid{t: t, cfgs: map[string]config.Config{}, ids: map[string]string{}, mgrs: map[string]*daemon.Manager{}}
	ports := freePorts(t, len(patent))
	addr := map[string]string{}
	for i, e := range patent {
		name := e[0]
		dir := filepath.Join(t.TempDir(), name)
		key, err := p2p.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		if err := p2p.WriteIdentity(filepath.Join(dir, "identity.key"), key); err != nil {
			t.Fatal(err)
		}
		g.ids[name] = p2p.PeerIDOf(key)
		addr[name] = fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", ports[i])
		cfg := config.Default()
		cfg.Name = name
		cfg.DataDir = dir
		cfg.Listen = []string{addr[name]}
		cfg.HeartbeatInterval = 100 * time.Millisecond
		cfg.RetryInitial = 50 * time.Millisecond
		cfg.RetryMax = 500 * time.Millisecond
		if e[1] != "" {
			cfg.Superiors = []peeraddr.PeerAddrs{{Peer: g.ids[e[1]], Addrs: []string{addr[e[1]]}}}
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		g.cfgs[name] = cfg
	}
	t.Cleanup(g.stopAll)
	return g
}

func (g *grid) start(name string) *daemon.Manager {
	g.t.Helper()
	m, err := daemon.Start(g.cfgs[name], testLogger(g.t).With("at", name))
	if err != nil {
		g.t.Fatalf("start %s: %v", name, err)
	}
	g.mu.Lock()
	g.mgrs[name] = m
	g.mu.Unlock()
	return m
}

func (g *grid) stop(name string) {
	g.mu.Lock()
	m := g.mgrs[name]
	delete(g.mgrs, name)
	g.mu.Unlock()
	if m != nil {
		m.Stop()
	}
}

func (g *grid) stopAll() {
	for _, e := range patent {
		g.stop(e[0])
	}
}

// tree asks a manager in-process for its subtree.
func (g *grid) tree(name string) string {
	g.mu.Lock()
	m := g.mgrs[name]
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rep, err := m.Driver.Request(ctx, &wire.Envelope{Body: &wire.Envelope_TreeRequest{TreeRequest: &wire.TreeRequest{BudgetMs: 1000}}})
	if err != nil {
		return "error: " + err.Error()
	}
	return renderTree(rep.GetTreeReply().GetRoot())
}

func (g *grid) waitTree(name, want string, within time.Duration) {
	g.t.Helper()
	deadline := time.Now().Add(within)
	var got string
	for time.Now().Before(deadline) {
		if got = g.tree(name); got == want {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling a real network, not timing
	}
	g.t.Fatalf("tree under %s = %s, want %s", name, got, want)
}

func renderTree(n *wire.TreeNode) string {
	if n == nil {
		return "<nil>"
	}
	s := n.Name
	if n.Incomplete != "" {
		s += "[" + n.Incomplete + "]"
	} else if n.State != wire.RelationState_RELATION_STATE_UP {
		s += "[" + n.State.String() + "]"
	}
	if len(n.Children) > 0 {
		var cs []string
		for _, c := range n.Children {
			cs = append(cs, renderTree(c))
		}
		s += "(" + strings.Join(cs, ",") + ")"
	}
	return s
}

func TestSixManagersFormTree(t *testing.T) {
	g := newGrid(t)
	// Leaves first: every manager but the leaves starts after those that
	// dial it, so the retry path is exercised.
	for i := len(patent) - 1; i >= 0; i-- {
		g.start(patent[i][0])
	}
	g.waitTree("gm152", wantTree, 30*time.Second)

	// A CLI-style client reaches any manager and gets the same answer.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dialClient(t, ctx, g.mgrs["gm160"].Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Name != "gm160" || len(st.Ancestors) != 2 || st.Ancestors[0].Name != "gm154" || st.Ancestors[1].Name != "gm152" {
		t.Fatalf("gm160 status: name %s ancestors %v", st.Name, st.Ancestors)
	}
	ping, err := c.Ping(ctx, "gm154")
	if err != nil || ping.Name != "gm154" || ping.RttUs == 0 {
		t.Fatalf("ping gm154 via gm160: %v %v", ping, err)
	}
	// Connection-manager protection on both sides of a relation.
	h160, h154 := g.mgrs["gm160"].Host.LibP2P(), g.mgrs["gm154"].Host.LibP2P()
	if !h160.ConnManager().IsProtected(h154.ID(), "superior") {
		t.Error("gm160 does not protect its superior gm154")
	}
	if !h154.ConnManager().IsProtected(h160.ID(), "inferior") {
		t.Error("gm154 does not protect its inferior gm160")
	}
}

func TestRestartKeepsPeerIDAndRejoins(t *testing.T) {
	g := newGrid(t)
	for _, e := range patent {
		g.start(e[0])
	}
	g.waitTree("gm152", wantTree, 30*time.Second)
	before := g.mgrs["gm154"].Host.PeerID()
	// gm154 says goodbye as it stops: its inferiors move to gm152 at once.
	g.stop("gm154")
	g.waitTree("gm152", "gm152(gm156(gm164),gm160,gm162)", 10*time.Second)
	m := g.start("gm154")
	if m.Host.PeerID() != before {
		t.Fatalf("peer id changed across restart: %s → %s", before, m.Host.PeerID())
	}
	// It rejoins gm152; gm160 and gm162 stay where they are (the default,
	// prefer_configured_superior = false).
	g.waitTree("gm152", "gm152(gm154,gm156(gm164),gm160,gm162)", 30*time.Second)

	// gm160 saved its new superior; a restart keeps it there, although
	// its properties file still names gm154.
	sv, err := daemon.ReadRelations(filepath.Join(g.cfgs["gm160"].DataDir, daemon.RelationsFile))
	if err != nil || sv == nil || len(sv.Superiors) != 1 || sv.Superiors[0].Name != "gm152" || sv.Superiors[0].Origin != "adopted" {
		t.Fatalf("gm160's saved relations: %+v, %v; want gm152, adopted", sv, err)
	}
	g.stop("gm160")
	g.start("gm160")
	g.waitTree("gm152", "gm152(gm154,gm156(gm164),gm160,gm162)", 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dialClient(t, ctx, g.mgrs["gm160"].Addr(), p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Relations) != 1 || st.Relations[0].Name != "gm152" || st.Relations[0].Origin != "adopted" {
		t.Fatalf("gm160 after restart: %+v", st.Relations)
	}
}

func TestDataDirLocked(t *testing.T) {
	g := newGrid(t)
	g.start("gm152")
	_, err := daemon.Start(g.cfgs["gm152"], nil)
	if !errors.Is(err, daemon.ErrDataDirInUse) {
		t.Fatalf("second manager on the same data dir: %v", err)
	}
}

// rawHost is a bare libp2p host for sending hand-made frames.
func rawHost(t testing.TB) host.Host {
	h, err := libp2p.New(libp2p.NoListenAddrs, libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(noise.ID, noise.New), libp2p.Muxer(yamux.ID, yamux.DefaultTransport), libp2p.DisableRelay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func openStream(t testing.TB, h host.Host, addr string, proto string) network.Stream {
	m, _ := ma.NewMultiaddr(addr)
	ai, err := peer.AddrInfoFromP2pAddr(m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Connect(ctx, *ai); err != nil {
		t.Fatal(err)
	}
	s, err := h.NewStream(ctx, ai.ID, p2p.MeshProtocol)
	if proto == "client" {
		s, err = h.NewStream(ctx, ai.ID, p2p.ClientProtocol)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// expectReset reads until the stream fails and checks it was reset, not
// closed cleanly, within a few seconds.
func expectReset(t *testing.T, s network.Stream, what string) {
	t.Helper()
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.ReadAll(s)
	if !errors.Is(err, network.ErrReset) {
		t.Fatalf("%s: stream ended with %v, want a reset", what, err)
	}
}

func TestBadFramesResetStreamAndManagerKeepsServing(t *testing.T) {
	g := newGrid(t)
	// This test is about bad frames, not failure detection: slow
	// heartbeats keep a loaded CI machine (race detector, packages in
	// parallel) from reparenting anyone, so any change of the tree below
	// is the bad frames' doing.
	for name, cfg := range g.cfgs {
		cfg.HeartbeatInterval = time.Second
		g.cfgs[name] = cfg
	}
	for _, e := range patent {
		g.start(e[0])
	}
	g.waitTree("gm152", wantTree, 30*time.Second)
	target := g.mgrs["gm154"].Addr()
	h := rawHost(t)

	cases := []struct {
		name, proto string
		frame       []byte
	}{
		// length 6, then bytes that are not a protobuf Envelope
		{"garbage mesh frame", "mesh", []byte{0x06, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		// a length of 100 MiB, over the 4 MiB limit
		{"oversized mesh frame", "mesh", []byte{0x80, 0x80, 0x80, 0x32, 0x01, 0x02}},
		{"garbage client frame", "client", []byte{0x03, 0x0a, 0xff, 0xff}},
		{"oversized client frame", "client", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}},
		// a varint that never ends
		{"endless varint", "mesh", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		// What protobuf-go refuses and the generated decoder the streams
		// use would take without wire/internal/vtutf8's checks (codec.go):
		// a query whose requirement is not UTF-8,
		{"invalid UTF-8 in a client request", "client", invalidUTF8Query(t)},
		// an id whose varint overflows 64 bits,
		{"overflowing varint", "client", frameOf(append([]byte{0x08}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f))},
		// a field number past 2^29-1 that cut to 32 bits is id (1),
		{"field number out of range", "mesh", frameOf(append(uvarint((1<<32+1)<<3), 0x05))},
		// and a tree reply nested 20,000 deep (protobuf-go stops at 10,000).
		{"nesting too deep", "mesh", frameOf(deepTreeReply(20_000))},
	}
	for _, tc := range cases {
		s := openStream(t, h, target, tc.proto)
		if _, err := s.Write(tc.frame); err != nil {
			t.Fatalf("%s: write: %v", tc.name, err)
		}
		expectReset(t, s, tc.name)
		// gm154 keeps serving its relations and clients.
		if got := g.tree("gm152"); got != wantTree {
			t.Fatalf("after %s the tree is %s", tc.name, got)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dialClient(t, ctx, target, p2p.ClientHostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if st, err := c.Status(ctx); err != nil || st.Name != "gm154" {
		t.Fatalf("gm154 status after bad frames: %v %v", st, err)
	}
	// The client library refuses to send a string that is not UTF-8 and
	// says which; its session goes on.
	_, err = c.Query(ctx, &wire.QueryRequest{Requirement: "cpus >= 1 || 'x\xff' == ''"})
	if !errors.Is(err, wire.ErrInvalidUTF8) || !strings.Contains(err.Error(), "QueryRequest.requirement is not valid UTF-8") {
		t.Fatalf("query with a bad string: %v", err)
	}
	if st, err := c.Status(ctx); err != nil || st.Name != "gm154" {
		t.Fatalf("gm154 status after a refused request: %v %v", st, err)
	}
	// A well-formed hello with an oversized name is refused by the Core
	// and the stream closed.
	s := openStream(t, h, target, "mesh")
	hello := &wire.Envelope{Body: &wire.Envelope_Hello{Hello: &wire.Hello{ProtocolVersion: 1, Name: strings.Repeat("n", 500), Role: wire.Role_ROLE_INFERIOR}}}
	writeFrame(t, s, hello)
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(s); err != nil && !errors.Is(err, network.ErrReset) {
		t.Fatalf("bad hello: %v", err)
	}
	if got := g.tree("gm152"); got != wantTree {
		t.Fatalf("after a bad hello the tree is %s", got)
	}
}

func writeFrame(t testing.TB, s network.Stream, env *wire.Envelope) {
	t.Helper()
	b, err := protoMarshal(env)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(append(uvarint(uint64(len(b))), b...)); err != nil {
		t.Fatal(err)
	}
}

// frameOf frames body as a stream does: its length, then it.
func frameOf(body []byte) []byte { return append(uvarint(uint64(len(body))), body...) }

// invalidUTF8Query is a framed client query whose requirement holds a byte
// that is not UTF-8.
func invalidUTF8Query(t testing.TB) []byte {
	b, err := protoMarshal(&wire.Envelope{Id: 7, Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{Requirement: "cpus >= 1 || 'MARK' == ''"}}})
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), "MARK")
	b[i+1] = 0xff
	return frameOf(b)
}

// deepTreeReply is an Envelope with a tree reply whose root has depth-1
// generations of only children below it, in wire form.
func deepTreeReply(depth int) []byte {
	node := []byte{0x12, 0x01, 'n'} // TreeNode.name
	for i := 1; i < depth; i++ {
		node = append(append([]byte{0x3a}, uvarint(uint64(len(node)))...), node...) // children (7)
	}
	reply := append(append([]byte{0x0a}, uvarint(uint64(len(node)))...), node...) // TreeReply.root (1)
	num := (&wire.Envelope{}).ProtoReflect().Descriptor().Fields().ByName("tree_reply").Number()
	return append(append(uvarint(uint64(num)<<3|2), uvarint(uint64(len(reply)))...), reply...)
}

func uvarint(x uint64) []byte {
	var out []byte
	for x >= 0x80 {
		out = append(out, byte(x)|0x80)
		x >>= 7
	}
	return append(out, byte(x))
}

func TestPrivateNetworkKey(t *testing.T) {
	dir := t.TempDir()
	pskPath := filepath.Join(dir, "swarm.key")
	if err := p2p.WritePSK(pskPath); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(pskPath); fi.Mode().Perm() != 0o600 {
		t.Fatalf("psk file mode %v", fi.Mode().Perm())
	}
	cfg := config.Default()
	cfg.Name = "private"
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.PrivateNetworkKey = pskPath
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := daemon.Start(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	// Without the key the handshake never completes: the dial fails at
	// its deadline.
	short, cancelShort := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelShort()
	if c, err := dialClient(t, short, m.Addr(), p2p.ClientHostOptions{}); err == nil {
		c.Close()
		t.Fatal("a client without the pre-shared key connected")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	psk, err := p2p.ReadPSK(pskPath)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dialClient(t, ctx, m.Addr(), p2p.ClientHostOptions{PSK: psk})
	if err != nil {
		t.Fatalf("client with the key: %v", err)
	}
	defer c.Close()
	if _, err := c.Status(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestIdentityFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "id.key")
	k1, created, err := p2p.LoadOrCreateIdentity(path)
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", fi.Mode().Perm(), err)
	}
	k2, created, err := p2p.LoadOrCreateIdentity(path)
	if err != nil || created || p2p.PeerIDOf(k1) != p2p.PeerIDOf(k2) {
		t.Fatalf("reload: created=%v err=%v ids %s %s", created, err, p2p.PeerIDOf(k1), p2p.PeerIDOf(k2))
	}
	if err := p2p.WriteIdentity(path, k1); err == nil {
		t.Fatal("WriteIdentity overwrote an existing key")
	}
	bad := filepath.Join(t.TempDir(), "bad.key")
	os.WriteFile(bad, []byte("not a key\n"), 0o600)
	if _, err := p2p.ReadIdentity(bad); !errors.Is(err, p2p.ErrKey) {
		t.Fatalf("garbage key file: %v", err)
	}
}
