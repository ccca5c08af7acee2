package transfer

import (
	"bufio"
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/wire"
)

// fakeConn is a stream whose client side is the bytes in r; what the
// server writes goes to w.
type fakeConn struct {
	r *bytes.Reader
	w bytes.Buffer
}

func (c *fakeConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *fakeConn) Write(p []byte) (int, error)      { return c.w.Write(p) }
func (c *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }

func frame(m proto.Message) []byte {
	var b bytes.Buffer
	pbio.NewDelimitedWriter(&b).WriteMsg(m)
	return b.Bytes()
}

// FuzzOffer feeds arbitrary bytes to the server as the client's side of
// a stream, the first frame being the offer: it must not panic, must
// answer with a BundleAccept (a refusal with a code and words, unless the
// offer was valid), and must store nothing.
func FuzzOffer(f *testing.F) {
	sha := strings.Repeat("ab", 32)
	f.Add(frame(&wire.BundleOffer{Sha256: sha, Size: 10, Reservation: "r1"}))
	f.Add(append(frame(&wire.BundleOffer{Sha256: sha, Size: 4, Reservation: "r1"}), "abcd"...))
	f.Add(frame(&wire.BundleOffer{Sha256: sha, Size: 1 << 40, Reservation: "r1"}))
	f.Add(frame(&wire.BundleOffer{Sha256: "zz", Size: 10, Reservation: "no"}))
	f.Add(frame(&wire.BundleOffer{Sha256: sha, Size: 10, Reservation: "no"}))
	f.Add(frame(&wire.BundleStored{Sha256: sha}))
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Add([]byte{0x80, 0x80, 0x04}) // a 64 KiB frame, cut short
	f.Add([]byte{3, 0x0a, 0x05, 'a'})
	// Offers without the hash, which follows the bytes.
	id := strings.Repeat("0f", 16)
	up := func(size int64, rest ...[]byte) []byte {
		b := frame(&wire.BundleOffer{UploadId: id, Size: size, Reservation: "r1"})
		for _, r := range rest {
			b = append(b, r...)
		}
		return b
	}
	f.Add(up(4, []byte("abcd"), frame(&wire.BundleTrailer{Sha256: sha})))
	f.Add(up(4, []byte("abcd"), frame(&wire.BundleTrailer{Sha256: "nope"})))
	f.Add(up(4, []byte("abcd")))
	f.Add(up(4, []byte("ab")))
	f.Add(up(4, []byte("abcdef"), frame(&wire.BundleTrailer{Sha256: sha})))
	f.Add(up(4, []byte("abcd"), frame(&wire.BundleTrailer{Sha256: sha}), []byte("x")))
	f.Add(up(4, []byte("abcd"), []byte{0xff, 0xff, 0xff, 0x7f}))
	f.Add(frame(&wire.BundleOffer{UploadId: "short", Size: 4, Reservation: "r1"}))
	f.Add(frame(&wire.BundleOffer{Sha256: sha, UploadId: id, Size: 4, Reservation: "r1"}))

	st, err := OpenStore(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	var last outcome
	srv := &Server{
		Store: st, MaxSize: 1 << 20, LimitName: "apps.max_bundle_size", MaxPartial: 4 << 20,
		Check: func(_ context.Context, _, res string) error {
			if res == "no" {
				return Refuse(wire.ErrorReply_CODE_FORBIDDEN, "not yours")
			}
			return nil
		},
		onDone: func(o outcome) { last = o },
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &fakeConn{r: bytes.NewReader(data)}
		srv.serve(c, "12D3KooWfuzz")
		if last.err != nil && strings.HasPrefix(last.err.Error(), "panic") {
			t.Fatalf("server panicked: %v", last.err)
		}
		rd := pbio.NewDelimitedReader(bufio.NewReader(&c.w), MaxFrame)
		var acc wire.BundleAccept
		if err := rd.ReadMsg(&acc); err != nil {
			t.Fatalf("no BundleAccept in answer (%v); outcome %+v", err, last)
		}
		if e := acc.Error; e != nil {
			if e.Code == wire.ErrorReply_CODE_UNSPECIFIED || e.Message == "" {
				t.Fatalf("refusal without a code or words: %v", e)
			}
			if last.offset != -1 {
				t.Fatalf("refused, yet accepted at %d", last.offset)
			}
		} else if acc.Offset < 0 || acc.Offset > srv.MaxSize {
			t.Fatalf("accepted offset %d", acc.Offset)
		}
		var stored wire.BundleStored
		if err := rd.ReadMsg(&stored); err == nil && stored.Error == nil {
			t.Fatalf("stored %q from fuzz bytes", stored.Sha256)
		}
		if l, _ := st.List(); len(l) != 0 {
			t.Fatalf("stored %v", l)
		}
		st.mu.Lock()
		claimed := len(st.active)
		st.mu.Unlock()
		if claimed != 0 || srv.active != 0 {
			t.Fatalf("%d hashes and %d upload slots left claimed", claimed, srv.active)
		}
	})
}
