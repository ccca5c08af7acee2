package transfer

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-msgio/pbio"

	"github.com/gridmgr/gridmgr/wire"
)

// exitConn is a stream whose client side is r and whose server side
// writes go to w, or fail if broken.
type exitConn struct {
	r      io.Reader
	w      bytes.Buffer
	broken bool
}

func (c *exitConn) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c *exitConn) Write(p []byte) (int, error) {
	if c.broken {
		return 0, errors.New("stream reset")
	}
	return c.w.Write(p)
}
func (c *exitConn) SetReadDeadline(time.Time) error  { return nil }
func (c *exitConn) SetWriteDeadline(time.Time) error { return nil }

// brokenAfter reads r, then fails as a reset stream instead of ending.
func brokenAfter(r []byte) io.Reader {
	return io.MultiReader(bytes.NewReader(r), iotestErr{})
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errors.New("stream reset") }

type panicWriter struct{}

func (panicWriter) Write([]byte) (int, error) { panic("the disk writer panicked") }

// Every exit of serve — offers refused before anything is claimed, the
// hash busy, no slot, a partial file that cannot be opened, an accept
// that cannot be sent, a short or broken stream, a bad hash, more bytes
// than offered, a disk error, a commit that fails, a panic, a bundle
// stored meanwhile, success, stored already — gives back the upload slot
// and the hash's claim (and settles the partial file: kept for a resume
// or deleted), whatever it answers.
func TestEveryExitReleases(t *testing.T) {
	st, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const maxSize = 1 << 20
	newData := func(n int) ([]byte, string) {
		data := make([]byte, n)
		rand.Read(data)
		sum := sha256.Sum256(data)
		return data, hex.EncodeToString(sum[:])
	}
	offer := func(sha string, size int, res string) []byte {
		return frame(&wire.BundleOffer{Sha256: sha, Size: int64(size), Reservation: res})
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	// claims is what the store has claimed.
	claims := func() []string {
		st.mu.Lock()
		defer st.mu.Unlock()
		var out []string
		for h := range st.active {
			out = append(out, h)
		}
		return out
	}

	type exit struct {
		name string
		// set prepares the case: the client's side of the stream, the
		// server's changes; undo (if any) runs after the checks.
		set func(srv *Server, c *exitConn) (undo func())
		// what serve should answer: the code of a refused offer, or of
		// an upload not stored; none: accepted (and stored if stored).
		refused, notStored wire.ErrorReply_Code
		stored             bool
		clean              bool
		// the partial upload of sha left for a resume: its length, or 0
		// for none.
		sha     *string
		partial int64
		// held is what the test itself holds while serve runs: one slot,
		// one hash claim.
		heldSlots  int
		heldClaims int
	}
	var (
		shortSHA, brokenSHA, trailSHA, badSHA, moreSHA, diskSHA, commitSHA, panicSHA, okSHA string
		dataOK                                                                              []byte
	)
	exits := []exit{
		{name: "empty stream", refused: wire.ErrorReply_CODE_BAD_REQUEST, clean: true,
			set: func(_ *Server, c *exitConn) func() { c.r = bytes.NewReader(nil); return nil }},
		{name: "offer cut short", refused: wire.ErrorReply_CODE_BAD_REQUEST, clean: true,
			set: func(_ *Server, c *exitConn) func() {
				_, sha := newData(10)
				o := offer(sha, 10, "r1")
				c.r = bytes.NewReader(o[:len(o)-3])
				return nil
			}},
		{name: "not a sha256", refused: wire.ErrorReply_CODE_BAD_REQUEST, clean: true,
			set: func(_ *Server, c *exitConn) func() { c.r = bytes.NewReader(offer("zz", 10, "r1")); return nil }},
		{name: "size over the limit", refused: wire.ErrorReply_CODE_REFUSED, clean: true,
			set: func(_ *Server, c *exitConn) func() {
				_, sha := newData(10)
				c.r = bytes.NewReader(offer(sha, maxSize+1, "r1"))
				return nil
			}},
		{name: "holder check refused", refused: wire.ErrorReply_CODE_FORBIDDEN, clean: true,
			set: func(_ *Server, c *exitConn) func() {
				data, sha := newData(10)
				c.r = bytes.NewReader(cat(offer(sha, len(data), "no"), data))
				return nil
			}},
		{name: "being uploaded", refused: wire.ErrorReply_CODE_UNAVAILABLE, clean: true, heldClaims: 1,
			set: func(_ *Server, c *exitConn) func() {
				data, sha := newData(10)
				if err := st.begin(sha, 10, limits{}); err != nil {
					t.Fatal(err)
				}
				c.r = bytes.NewReader(cat(offer(sha, len(data), "r1"), data))
				return func() { st.done(sha) }
			}},
		{name: "no upload slot", refused: wire.ErrorReply_CODE_OVERLOADED, clean: true, heldSlots: 1,
			set: func(srv *Server, c *exitConn) func() {
				srv.MaxUploads = 1
				if !srv.enter() {
					t.Fatal("no slot")
				}
				data, sha := newData(10)
				c.r = bytes.NewReader(cat(offer(sha, len(data), "r1"), data))
				return srv.leave
			}},
		{name: "store full", refused: wire.ErrorReply_CODE_REFUSED, clean: true,
			set: func(srv *Server, c *exitConn) func() {
				srv.MaxStore = 1000
				data, sha := newData(2000)
				c.r = bytes.NewReader(cat(offer(sha, len(data), "r1"), data))
				return nil
			}},
		{name: "partial file cannot be opened", refused: wire.ErrorReply_CODE_UNAVAILABLE, clean: true,
			set: func(_ *Server, c *exitConn) func() {
				data, sha := newData(10)
				if err := os.Mkdir(st.partialPath(sha), 0o755); err != nil {
					t.Fatal(err)
				}
				c.r = bytes.NewReader(cat(offer(sha, len(data), "r1"), data))
				return func() { os.Remove(st.partialPath(sha)) }
			}},
		{name: "accept cannot be sent",
			set: func(_ *Server, c *exitConn) func() {
				data, sha := newData(10)
				c.r, c.broken = bytes.NewReader(cat(offer(sha, len(data), "r1"), data)), true
				return nil
			}},
		{name: "stream ends short", sha: &shortSHA, partial: 1000,
			set: func(_ *Server, c *exitConn) func() {
				data, sha := newData(3000)
				shortSHA = sha
				c.r = bytes.NewReader(cat(offer(sha, len(data), "r1"), data[:1000]))
				return nil
			}},
		{name: "stream breaks", sha: &brokenSHA, partial: 1500,
			set: func(_ *Server, c *exitConn) func() {
				data, sha := newData(3000)
				brokenSHA = sha
				c.r = brokenAfter(cat(offer(sha, len(data), "r1"), data[:1500]))
				return nil
			}},
		{name: "stream breaks after the bytes", sha: &trailSHA, partial: 3000,
			set: func(_ *Server, c *exitConn) func() {
				data, sha := newData(3000)
				trailSHA = sha
				c.r = brokenAfter(cat(offer(sha, len(data), "r1"), data))
				return nil
			}},
		{name: "bad hash", notStored: wire.ErrorReply_CODE_BAD_REQUEST, clean: true, sha: &badSHA,
			set: func(_ *Server, c *exitConn) func() {
				data, _ := newData(3000)
				_, other := newData(3000)
				badSHA = other
				c.r = bytes.NewReader(cat(offer(other, len(data), "r1"), data))
				return nil
			}},
		{name: "more bytes than offered", notStored: wire.ErrorReply_CODE_BAD_REQUEST, clean: true, sha: &moreSHA,
			set: func(_ *Server, c *exitConn) func() {
				data, sha := newData(3000)
				moreSHA = sha
				c.r = bytes.NewReader(cat(offer(sha, len(data), "r1"), data, []byte("more")))
				return nil
			}},
		{name: "disk error", notStored: wire.ErrorReply_CODE_UNAVAILABLE, clean: true, sha: &diskSHA,
			set: func(srv *Server, c *exitConn) func() {
				srv.wrapWrite = func(w io.Writer) io.Writer { return &failAfter{w: w, n: 1000} }
				data, sha := newData(3000)
				diskSHA = sha
				c.r = bytes.NewReader(cat(offer(sha, len(data), "r1"), data))
				return nil
			}},
		{name: "commit fails", notStored: wire.ErrorReply_CODE_UNAVAILABLE, clean: true, sha: &commitSHA,
			set: func(_ *Server, c *exitConn) func() {
				data, sha := newData(3000)
				commitSHA = sha
				// A directory where the bundle goes: the rename fails.
				if err := os.Mkdir(st.bundlePath(sha), 0o755); err != nil {
					t.Fatal(err)
				}
				c.r = bytes.NewReader(cat(offer(sha, len(data), "r1"), data))
				return func() { os.Remove(st.bundlePath(sha)) }
			}},
		{name: "panic", sha: &panicSHA, partial: 0,
			set: func(srv *Server, c *exitConn) func() {
				srv.wrapWrite = func(io.Writer) io.Writer { return panicWriter{} }
				data, sha := newData(3000)
				panicSHA = sha
				c.r = bytes.NewReader(cat(offer(sha, len(data), "r1"), data))
				return nil
			}},
		{name: "stored meanwhile", stored: true, clean: true,
			set: func(srv *Server, c *exitConn) func() {
				data, sha := newData(3000)
				// The store is full enough to ask InUse, which runs after
				// the check for a stored bundle and before the claim:
				// another upload stores it then.
				srv.MaxStore = 1 << 30
				srv.InUse = func() map[string]bool {
					if err := os.WriteFile(st.bundlePath(sha), data, 0o644); err != nil {
						t.Error(err)
					}
					return nil
				}
				c.r = bytes.NewReader(cat(offer(sha, len(data), "r1"), data))
				return func() { os.Remove(st.bundlePath(sha)) }
			}},
		{name: "success", stored: true, clean: true, sha: &okSHA,
			set: func(_ *Server, c *exitConn) func() {
				data, sha := newData(3000)
				okSHA, dataOK = sha, data
				c.r = bytes.NewReader(cat(offer(sha, len(data), "r1"), data))
				return nil
			}},
		{name: "stored already", stored: true, clean: true,
			set: func(_ *Server, c *exitConn) func() {
				c.r = bytes.NewReader(cat(offer(okSHA, len(dataOK), "r1"), dataOK))
				return nil
			}},
	}
	for _, x := range exits {
		var out outcome
		srv := &Server{
			Store: st, MaxSize: maxSize, LimitName: "apps.max_bundle_size",
			Check: func(_ context.Context, _, res string) error {
				if res == "no" {
					return Refuse(wire.ErrorReply_CODE_FORBIDDEN, "not yours")
				}
				return nil
			},
			onDone: func(o outcome) { out = o },
		}
		c := &exitConn{}
		undo := x.set(srv, c)
		clean := srv.serve(c, "12D3KooWexits")

		if clean != x.clean {
			t.Errorf("%s: serve says clean=%v, want %v (outcome %+v)", x.name, clean, x.clean, out)
		}
		rd := pbio.NewDelimitedReader(bufio.NewReader(&c.w), MaxFrame)
		var acc wire.BundleAccept
		switch err := rd.ReadMsg(&acc); {
		case c.broken:
		case err != nil:
			t.Errorf("%s: no BundleAccept: %v", x.name, err)
		case acc.Error.GetCode() != x.refused:
			t.Errorf("%s: accept %v, want the offer refused with %v", x.name, &acc, x.refused)
		case x.refused == 0 && x.clean:
			var sd wire.BundleStored
			if err := rd.ReadMsg(&sd); err != nil {
				t.Errorf("%s: no BundleStored: %v", x.name, err)
			} else if sd.Error.GetCode() != x.notStored || x.stored != (sd.Error == nil) {
				t.Errorf("%s: stored %v, want the error code %v", x.name, &sd, x.notStored)
			}
		}
		if x.name == "panic" && (out.err == nil || !strings.HasPrefix(out.err.Error(), "panic")) {
			t.Errorf("%s: outcome %+v, want the panic", x.name, out)
		}
		if x.sha != nil {
			if n := st.PartialSize(*x.sha); n != x.partial {
				t.Errorf("%s: a partial upload of %d bytes left, want %d", x.name, n, x.partial)
			}
			if out.kept != (x.partial > 0) {
				t.Errorf("%s: outcome says kept=%v with %d bytes left", x.name, out.kept, x.partial)
			}
		}

		// What serve took, it gave back: the test's own holdings only.
		srv.mu.Lock()
		slots := srv.active
		srv.mu.Unlock()
		if slots != x.heldSlots || len(claims()) != x.heldClaims {
			t.Errorf("%s: %d upload slots and hash claims %v held after serve, want %d and %d (the test's)",
				x.name, slots, claims(), x.heldSlots, x.heldClaims)
		}
		if undo != nil {
			undo()
		}
		srv.mu.Lock()
		slots = srv.active
		srv.mu.Unlock()
		if slots != 0 || len(claims()) != 0 {
			t.Fatalf("%s: %d upload slots and hash claims %v held at the end", x.name, slots, claims())
		}
	}
	if _, ok := st.Path(okSHA); !ok {
		t.Error("the bundle of the upload that succeeded is not stored")
	}
}
