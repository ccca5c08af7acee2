package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/wire"
)

// siblings starts a root and two managers under it; the two are not
// relations of each other, so what one asks the other goes as a client.
func siblings(t *testing.T) (a, b *Manager) {
	t.Helper()
	root := internalManager(t, "root", nil, "")
	up := root.Host.Addrs()[0] + "/p2p/" + root.Host.PeerID()
	a = internalManager(t, "a", nil, up)
	b = internalManager(t, "b", nil, up)
	deadline := time.Now().Add(30 * time.Second)
	for !root.Host.IsManager(a.Host.PeerID()) || !root.Host.IsManager(b.Host.PeerID()) {
		if time.Now().After(deadline) {
			t.Fatal("a and b did not join the root")
		}
		time.Sleep(10 * time.Millisecond) // polling a real network, not timing
	}
	if a.Host.IsManager(b.Host.PeerID()) {
		t.Fatal("a and b are relations")
	}
	return a, b
}

// A manager that asks another, not its relation, as a client (the job
// runtime, the web UI) drops the connection when it is done with it, so
// that the event bus does not gossip over it: but only when its last
// session and upload to that manager is done. The demo's 20-job array
// stalled on this: a job's session that closed took its neighbours'
// sessions and uploads to the same manager down with the connection
// ("sent go away"), and jobs that asked at once ran over the manager's own
// limit of client streams to one peer ("cannot reserve outbound stream").
func TestClientSessionsToOneManagerShareItsConnection(t *testing.T) {
	a, b := siblings(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := jobDialer{m: a}
	pa := peeraddr.PeerAddrs{Peer: b.Host.PeerID(), Addrs: b.Host.Addrs()}
	open := func() *client.Client {
		t.Helper()
		conn, err := d.Open(ctx, pa)
		if err != nil {
			t.Fatal(err)
		}
		return client.New(conn, d)
	}
	status := func(c *client.Client, who string) error {
		st, err := c.Status(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", who, err)
		}
		if st.Name != "b" {
			return fmt.Errorf("%s: status of %q, want b", who, st.Name)
		}
		return nil
	}

	// One session ends while another is open: the other goes on.
	c1, c2 := open(), open()
	if err := status(c1, "first session"); err != nil {
		t.Fatal(err)
	}
	c1.Close()
	if err := status(c2, "second session, after the first closed"); err != nil {
		t.Fatal(err)
	}
	// An upload outlives a session that opens and closes while it runs.
	res, _, err := c2.Reserve(ctx, &wire.ReserveRequest{RequestId: "r1", Commit: true, LeaseMs: 600_000,
		Amounts: []*wire.Amount{{Kind: "cpus", N: 1}, {Kind: "mem", N: 64 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	during := false
	if _, err := d.SendBundle(ctx, b.Host.PeerID(), packBundle(t), res.Id, func(sent, total int64) {
		if !during {
			during = true
			c := open()
			if err := status(c, "a session during the upload"); err != nil {
				t.Error(err)
			}
			c.Close()
		}
	}); err != nil {
		t.Fatalf("upload while a session closed: %v", err)
	}
	if !during {
		t.Fatal("the upload reported no progress")
	}

	// Many at once, more than the manager's own limit of client streams
	// to one peer: each waits for a place, none fails.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 24 {
		wg.Go(func() {
			for j := range 5 {
				conn, err := d.Open(ctx, pa)
				if err != nil {
					errs <- fmt.Errorf("session %d.%d: %w", i, j, err)
					return
				}
				c := client.New(conn, d)
				err = status(c, fmt.Sprintf("session %d.%d", i, j))
				c.Close()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Done with b: the connection goes, as before.
	deadline := time.Now().Add(10 * time.Second)
	for len(a.Host.LibP2P().Network().ConnsToPeer(b.Host.LibP2P().ID())) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("a kept its connection to b after its last session closed")
		}
		time.Sleep(10 * time.Millisecond) // polling a real network, not timing
	}
}

// The job runtime offers a job's bundle by its sha256 (a blob of the job
// spool is named by it), so a manager that has the bundle already (the
// job before on that manager) is sent nothing: here the blob's bytes are
// changed after the first upload, and the second still names the first
// bundle, as the bytes were never read.
func TestJobBundleOfferedByHash(t *testing.T) {
	a, b := siblings(t)
	if a.jobs == nil {
		t.Fatal("a has no job runtime")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := jobDialer{m: a}
	conn, err := d.Open(ctx, peeraddr.PeerAddrs{Peer: b.Host.PeerID(), Addrs: b.Host.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(conn, d)
	defer c.Close()
	res, _, err := c.Reserve(ctx, &wire.ReserveRequest{RequestId: "r1", Commit: true, LeaseMs: 600_000,
		Amounts: []*wire.Amount{{Kind: "cpus", N: 1}, {Kind: "mem", N: 64 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(packBundle(t))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	if _, err := a.jobs.st.PutPiece(sha, int64(len(data)), 0, data); err != nil {
		t.Fatal(err)
	}
	blob := a.jobs.st.BlobPath(sha)
	if got, err := d.SendBundle(ctx, b.Host.PeerID(), blob, res.Id, nil); err != nil || got != sha {
		t.Fatalf("first upload: %s, %v; want %s", got, err, sha)
	}
	other := bytes.Clone(data)
	other[len(other)/2] ^= 0xff
	if err := os.WriteFile(blob, other, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := d.SendBundle(ctx, b.Host.PeerID(), blob, res.Id, nil)
	if err != nil || got != sha {
		t.Fatalf("second upload: %s, %v; want %s, offered by its name and not sent", got, err, sha)
	}
}
