package transfer

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/libp2p/go-msgio/pbio"

	"github.com/gridmgr/gridmgr/wire"
)

// choppy reads r in pieces of random sizes, as a stream gives them.
type choppy struct {
	r   io.Reader
	rnd *rand.Rand
}

func (c *choppy) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1+c.rnd.IntN(min(len(p), 100<<10))]
	}
	return c.r.Read(p)
}

// The server reads a bundle on one goroutine and hashes and writes it on
// another, many buffers in flight: each way that can go wrong with
// several buffers under way is still refused or kept as promised — a
// hash wrong only in the last byte (nothing stored, nothing kept), a
// stream cut in the middle (exactly the bytes received kept, and a
// resume completes them), the disk failing in the middle (refused,
// nothing kept, the rest not read), the writer panicking (the stream
// fails, the manager does not) — and a bundle that arrives in pieces of
// every size is stored byte for byte.
func TestPipelinedReceive(t *testing.T) {
	const size = 3<<20 + 12345 // more than the buffers in flight
	rnd := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rnd.Uint32())
	}
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	offer := frame(&wire.BundleOffer{Sha256: sha, Size: size, Reservation: "r1"})

	type result struct {
		clean  bool
		acc    *wire.BundleAccept
		stored *wire.BundleStored // nil: none sent
		out    outcome
	}
	serve := func(st *Store, in io.Reader, wrap func(io.Writer) io.Writer) result {
		t.Helper()
		r := result{acc: new(wire.BundleAccept)}
		srv := &Server{Store: st, MaxSize: 8 << 20, wrapWrite: wrap,
			Check:  func(context.Context, string, string) error { return nil },
			onDone: func(o outcome) { r.out = o }}
		c := &exitConn{r: &choppy{r: in, rnd: rnd}}
		r.clean = srv.serve(c, "12D3KooWpipe")
		rd := pbio.NewDelimitedReader(bufio.NewReader(&c.w), MaxFrame)
		if err := rd.ReadMsg(r.acc); err != nil {
			t.Fatalf("no BundleAccept: %v", err)
		}
		var sd wire.BundleStored
		if rd.ReadMsg(&sd) == nil {
			r.stored = &sd
		}
		srv.mu.Lock()
		defer srv.mu.Unlock()
		if srv.active != 0 || len(st.active) != 0 {
			t.Fatalf("the upload slot or the hash's claim is still held (outcome %+v)", r.out)
		}
		return r
	}
	newStore := func() *Store {
		st, err := OpenStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	assertEmpty := func(t *testing.T, st *Store) {
		t.Helper()
		if c := contents(t, st); len(c) != 0 {
			t.Fatalf("the store holds %v, want nothing", c)
		}
	}

	t.Run("hash wrong in the last byte", func(t *testing.T) {
		st := newStore()
		bad := bytes.Clone(data)
		bad[size-1] ^= 1
		r := serve(st, bytes.NewReader(cat(offer, bad)), nil)
		if r.stored == nil || r.stored.Error.GetCode() != wire.ErrorReply_CODE_BAD_REQUEST || !strings.Contains(r.stored.Error.GetMessage(), "hash to") {
			t.Fatalf("answered %v", r.stored)
		}
		assertEmpty(t, st)
	})

	t.Run("cut in the middle, then resumed", func(t *testing.T) {
		st := newStore()
		const cut = 2<<20 + 777
		r := serve(st, brokenAfter(cat(offer, data[:cut])), nil)
		if r.clean || r.stored != nil {
			t.Fatalf("a broken stream was answered: clean=%v %v", r.clean, r.stored)
		}
		kept, err := os.ReadFile(st.partialPath(sha))
		if err != nil || !bytes.Equal(kept, data[:cut]) {
			t.Fatalf("kept %d bytes (%v), want the %d received", len(kept), err, cut)
		}
		if _, ok := st.Path(sha); ok {
			t.Fatal("stored from half the bytes")
		}
		r = serve(st, bytes.NewReader(cat(offer, data[cut:])), nil)
		if r.acc.Offset != cut || r.stored == nil || r.stored.Error != nil {
			t.Fatalf("resume: accepted at %d, answered %v", r.acc.Offset, r.stored)
		}
		p, _ := st.Path(sha)
		if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
			t.Fatal("the resumed bundle is not the bytes sent")
		}
	})

	t.Run("disk fails in the middle", func(t *testing.T) {
		st := newStore()
		r := serve(st, bytes.NewReader(cat(offer, data)), func(w io.Writer) io.Writer { return &failAfter{w: w, n: 1 << 20} })
		if r.stored == nil || r.stored.Error.GetCode() != wire.ErrorReply_CODE_UNAVAILABLE {
			t.Fatalf("answered %v", r.stored)
		}
		if r.out.received >= size {
			t.Errorf("read all %d bytes after the disk failed at 1 MiB", r.out.received)
		}
		assertEmpty(t, st)
	})

	t.Run("writer panics", func(t *testing.T) {
		st := newStore()
		r := serve(st, bytes.NewReader(cat(offer, data)), func(w io.Writer) io.Writer { return &panicAfter{w: w, n: 1 << 20} })
		if r.clean || r.out.err == nil || !strings.HasPrefix(r.out.err.Error(), "panic") {
			t.Fatalf("clean=%v outcome %+v, want the panic", r.clean, r.out)
		}
		if _, ok := st.Path(sha); ok {
			t.Fatal("stored")
		}
	})

	t.Run("in pieces of every size", func(t *testing.T) {
		st := newStore()
		r := serve(st, bytes.NewReader(cat(offer, data)), nil)
		if r.stored == nil || r.stored.Error != nil || r.out.received != size {
			t.Fatalf("answered %v, received %d", r.stored, r.out.received)
		}
		p, _ := st.Path(sha)
		if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
			t.Fatal("the stored bundle is not the bytes sent")
		}
	})
}

// panicAfter panics once n bytes were written.
type panicAfter struct {
	w io.Writer
	n int
}

func (p *panicAfter) Write(b []byte) (int, error) {
	if len(b) > p.n {
		panic("the disk writer panicked")
	}
	p.n -= len(b)
	return p.w.Write(b)
}
