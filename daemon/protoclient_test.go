package daemon_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/wire"
)

// buildProtoclient builds examples/protoclient, the client made from
// wire/gridmgr.proto alone, as a module of its own (GOWORK=off). It skips
// the test when the example's dependencies cannot be had (no go command,
// no module cache and no proxy); a build that fails for any other reason
// fails the test.
func buildProtoclient(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		if goBin, err = exec.LookPath(filepath.Join(os.Getenv("GOROOT"), "bin", "go")); err != nil {
			t.Skip("skipping: no go command to build examples/protoclient with")
		}
	}
	dir, err := filepath.Abs(filepath.Join("..", "examples", "protoclient"))
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
	dl := exec.Command(goBin, "mod", "download")
	dl.Dir, dl.Env = dir, env
	if out, err := dl.CombinedOutput(); err != nil {
		t.Skipf("skipping: the dependencies of examples/protoclient cannot be downloaded here (go mod download: %v)\n%s", err, out)
	}
	bin := filepath.Join(t.TempDir(), "protoclient")
	build := exec.Command(goBin, "build", "-o", bin, ".")
	build.Dir, build.Env = dir, env
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build in examples/protoclient: %v\n%s", err, out)
	}
	return bin
}

// TestClientFromProtoAlone runs the example client, which knows gridmgr
// only through its .proto file and docs/wire.md, against real managers on
// loopback: it enters at leaf, whose superior top has the best offer (more
// free cpus), so it queries through leaf, reserves one cpu at top over a
// session of its own, retries the reservation with the same request id,
// and releases it. top's ledger must then hold exactly that one
// reservation, released, in the client's name.
func TestClientFromProtoAlone(t *testing.T) {
	bin := buildProtoclient(t)
	start := func(name string, cpus int, superior *daemon.Manager) *daemon.Manager {
		cfg := config.Default()
		cfg.Name = name
		cfg.DataDir = t.TempDir()
		cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
		cfg.CPUs = cpus
		cfg.Memory = 8 << 30
		cfg.HeartbeatInterval = 100 * time.Millisecond
		cfg.RetryInitial = 50 * time.Millisecond
		if superior != nil {
			pa, err := peeraddr.ParsePeerMaddr(superior.Addr())
			if err != nil {
				t.Fatal(err)
			}
			cfg.Superiors = []peeraddr.PeerAddrs{pa}
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		m, err := daemon.Start(cfg, testLogger(t).With("at", name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Stop)
		return m
	}
	top := start("top", 8, nil)
	leaf := start("leaf", 2, top)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ask := func(m *daemon.Manager, body *wire.Envelope) *wire.Envelope {
		t.Helper()
		rep, err := m.Driver.Request(ctx, body)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	status := &wire.Envelope{Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}}
	for up := false; !up; {
		rels := ask(leaf, status).GetStatusReply().GetRelations()
		up = len(rels) == 1 && rels[0].State == wire.RelationState_RELATION_STATE_UP
		if !up {
			if ctx.Err() != nil {
				t.Fatal("leaf never joined top")
			}
			time.Sleep(20 * time.Millisecond) // polling a real network, not timing
		}
	}

	cmd := exec.CommandContext(ctx, bin, "-timeout", "30s", leaf.Addr())
	out, err := cmd.CombinedOutput()
	t.Logf("protoclient %s:\n%s", leaf.Addr(), out)
	if err != nil {
		t.Fatalf("protoclient failed: %v", err)
	}
	text := string(out)
	for _, want := range []string{
		"manager leaf " + leaf.Host.PeerID() + " (gridmgr " + config.Version + "), 1 relation(s)",
		"query: 2 offer(s), 2 matched, 2 manager(s) visited, 0 missing",
		"offer 1: top " + top.Host.PeerID() + " cpus_free=8/8",
		"offer 2: leaf " + leaf.Host.PeerID() + " cpus_free=2/2",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	client := regexp.MustCompile(`(?m)^client peer (\S+)$`).FindStringSubmatch(text)
	reserved := regexp.MustCompile(`(?m)^reserved (top-\S+) at top: cpus 1, RESERVATION_STATE_HELD until `).FindStringSubmatch(text)
	if client == nil || reserved == nil {
		t.Fatalf("output lacks the client's peer id or the reservation held at top")
	}
	id := reserved[1]
	for _, want := range []string{
		fmt.Sprintf("retry: %s (retry=true)", id),
		fmt.Sprintf("released %s: RESERVATION_STATE_RELEASED (released by its holder)", id),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}

	// top's side: one reservation (the retry made none), released, held by
	// the client's peer id, and every cpu free again; none at leaf.
	list := ask(top, &wire.Envelope{Body: &wire.Envelope_ReservationsRequest{
		ReservationsRequest: &wire.ReservationsRequest{All: true}}}).GetReservationsReply()
	if list == nil || len(list.Reservations) != 1 {
		t.Fatalf("top lists %v, want exactly reservation %s", list, id)
	}
	r := list.Reservations[0]
	if r.Id != id || r.State != wire.ReservationState_RESERVATION_STATE_RELEASED || r.HolderPeer != client[1] || r.User != "protoclient" {
		t.Errorf("top has %s %s held by %s (user %q), want %s released, held by %s (user protoclient)",
			r.Id, r.State, r.HolderPeer, r.User, id, client[1])
	}
	if list.Live != 0 {
		t.Errorf("%d live reservations at top after the release", list.Live)
	}
	for _, u := range list.Usage {
		if u.Kind == "cpus" && (u.Used != 0 || u.Capacity != 8) {
			t.Errorf("cpus at top: %d of %d used after the release", u.Used, u.Capacity)
		}
	}
	if n := len(ask(leaf, &wire.Envelope{Body: &wire.Envelope_ReservationsRequest{
		ReservationsRequest: &wire.ReservationsRequest{All: true}}}).GetReservationsReply().GetReservations()); n != 0 {
		t.Errorf("leaf has %d reservations, want none", n)
	}
}
