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

	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node"
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
// only through its .proto file and docs/wire.md, against a real manager
// on loopback: it queries, reserves one cpu, retries the reservation with
// the same request id, and releases it. The manager's ledger must then
// hold exactly that one reservation, released, in the client's name.
func TestClientFromProtoAlone(t *testing.T) {
	bin := buildProtoclient(t)
	cfg := node.DefaultConfig()
	cfg.Name = "solo"
	cfg.DataDir = t.TempDir()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.CPUs = 4
	cfg.Memory = 8 << 30
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := daemon.Start(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-timeout", "30s", m.Addr())
	out, err := cmd.CombinedOutput()
	t.Logf("protoclient %s:\n%s", m.Addr(), out)
	if err != nil {
		t.Fatalf("protoclient failed: %v", err)
	}
	text := string(out)
	for _, want := range []string{
		"manager solo " + m.Host.PeerID() + " (gridmgr " + node.Version + "), 0 relation(s)",
		"query: 1 offer(s), 1 matched, 1 manager(s) visited, 0 missing",
		"offer 1: solo " + m.Host.PeerID() + " cpus_free=4/4",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	client := regexp.MustCompile(`(?m)^client peer (\S+)$`).FindStringSubmatch(text)
	reserved := regexp.MustCompile(`(?m)^reserved (\S+) at solo: cpus 1, RESERVATION_STATE_HELD until `).FindStringSubmatch(text)
	if client == nil || reserved == nil {
		t.Fatalf("output lacks the client's peer id or the held reservation")
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

	// The manager's side: one reservation (the retry made none), released,
	// held by the client's peer id, and every cpu free again.
	rep, err := m.Driver.Request(ctx, &wire.Envelope{Body: &wire.Envelope_ReservationsRequest{
		ReservationsRequest: &wire.ReservationsRequest{All: true}}})
	if err != nil {
		t.Fatal(err)
	}
	list := rep.GetReservationsReply()
	if list == nil || len(list.Reservations) != 1 {
		t.Fatalf("the manager lists %v, want exactly reservation %s", list, id)
	}
	r := list.Reservations[0]
	if r.Id != id || r.State != wire.ReservationState_RESERVATION_STATE_RELEASED || r.HolderPeer != client[1] || r.User != "protoclient" {
		t.Errorf("the manager has %s %s held by %s (user %q), want %s released, held by %s (user protoclient)",
			r.Id, r.State, r.HolderPeer, r.User, id, client[1])
	}
	if list.Live != 0 {
		t.Errorf("%d live reservations after the release", list.Live)
	}
	for _, u := range list.Usage {
		if u.Kind == "cpus" && (u.Used != 0 || u.Capacity != 4) {
			t.Errorf("cpus: %d of %d used after the release", u.Used, u.Capacity)
		}
	}
}
