package transfer

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/wire"
)

// newHost is a libp2p host on loopback only.
func newHost(tb testing.TB) host.Host {
	tb.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
		libp2p.DisableRelay(), libp2p.DisableMetrics())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.Close() })
	return h
}

type env struct {
	srv      *Server
	store    *Store
	sh, ch   host.Host // the manager's and the client's
	outcomes chan outcome
}

// newEnv is a manager serving bundles (MaxSize 16 MB, Check accepting
// reservation "r1" only) and a client host connected to it; set adjusts
// the server before it serves.
func newEnv(tb testing.TB, set func(*Server)) *env {
	tb.Helper()
	return newEnvOn(tb, newHost(tb), newHost(tb), set)
}

// newEnvOn is newEnv between the hosts sh (the manager) and ch.
func newEnvOn(tb testing.TB, sh, ch host.Host, set func(*Server)) *env {
	tb.Helper()
	return newEnvStore(tb, sh, ch, StoreOptions{}, set)
}

// newEnvStore is newEnvOn with a store opened with o.
func newEnvStore(tb testing.TB, sh, ch host.Host, o StoreOptions, set func(*Server)) *env {
	tb.Helper()
	st, err := OpenStore(tb.TempDir(), o)
	if err != nil {
		tb.Fatal(err)
	}
	return newEnvWith(tb, sh, ch, st, set)
}

// newEnvWith is newEnvOn serving the store st.
func newEnvWith(tb testing.TB, sh, ch host.Host, st *Store, set func(*Server)) *env {
	tb.Helper()
	e := &env{store: st, sh: sh, ch: ch, outcomes: make(chan outcome, 16)}
	e.srv = &Server{
		Store:     st,
		MaxSize:   16 << 20,
		LimitName: "apps.max_bundle_size",
		Check: func(ctx context.Context, p, res string) error {
			if res != "r1" {
				return Refuse(wire.ErrorReply_CODE_FORBIDDEN, "reservation %s is not held by %s", res, p[:8])
			}
			return nil
		},
		onDone: func(o outcome) {
			select {
			case e.outcomes <- o:
			default:
			}
		},
	}
	if set != nil {
		set(e.srv)
	}
	e.sh.SetStreamHandler(Protocol, e.srv.Handle)
	e.sh.SetStreamHandler(ProtocolTrailer, e.srv.Handle)
	e.sh.SetStreamHandler(ProtocolZstd, e.srv.Handle)
	if err := e.ch.Connect(context.Background(), peer.AddrInfo{ID: e.sh.ID(), Addrs: e.sh.Addrs()}); err != nil {
		tb.Fatal(err)
	}
	return e
}

// outcome waits for the server's account of the next stream.
func (e *env) outcome(t *testing.T) outcome {
	t.Helper()
	select {
	case o := <-e.outcomes:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not finish the stream")
		return outcome{}
	}
}

// assertNothingStored checks the store has no bundle.
func (e *env) assertNothingStored(t *testing.T) {
	t.Helper()
	l, err := e.store.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(l) != 0 {
		t.Fatalf("stored %v, want nothing", l)
	}
}

func randomFile(tb testing.TB, size int) (path string, data []byte, sha string) {
	tb.Helper()
	data = make([]byte, size)
	rand.Read(data)
	path = filepath.Join(tb.TempDir(), "app.zip")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tb.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return path, data, hex.EncodeToString(sum[:])
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestRoundTripAndAgain(t *testing.T) {
	e := newEnv(t, nil)
	file, data, want := randomFile(t, 3<<20+17)
	var seen []int64
	r, err := SendResult(ctx(t), e.ch, e.sh.ID(), file, "r1", func(sent, total int64) {
		if total != int64(len(data)) {
			t.Errorf("progress total %d, want %d", total, len(data))
		}
		seen = append(seen, sent)
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.SHA256 != want || r.Offset != 0 || r.Sent != int64(len(data)) {
		t.Fatalf("result %+v, want sha %s, offset 0, all sent", r, want)
	}
	p, ok := e.store.Path(want)
	if !ok {
		t.Fatal("not stored under its hash")
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
		t.Fatal("stored bytes differ")
	}
	if _, err := os.Stat(e.store.partialPath(want)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("partial file left behind: %v", err)
	}
	// progress: increasing, from 0, ending at the total
	if len(seen) < 3 || seen[0] != 0 || seen[len(seen)-1] != int64(len(data)) {
		t.Fatalf("progress %v", seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Fatalf("progress not increasing: %v", seen)
		}
	}

	// Again, by its hash: nothing to send, and it says so.
	seen = nil
	r, err = SendWith(ctx(t), e.ch, e.sh.ID(), file, "r1", SendOptions{SHA256: want, Progress: func(sent, total int64) { seen = append(seen, sent) }})
	if err != nil {
		t.Fatal(err)
	}
	if r.Offset != r.Size || r.Sent != 0 {
		t.Fatalf("second send %+v, want offset == size, nothing sent", r)
	}
	if !strings.Contains(r.String(), "nothing sent") {
		t.Errorf("result says %q", r)
	}
	if len(seen) != 1 || seen[0] != r.Size {
		t.Errorf("progress of the second send %v, want [%d]", seen, r.Size)
	}
	if l, _ := e.store.List(); len(l) != 1 || l[0].SHA256 != want || l[0].Size != int64(len(data)) {
		t.Fatalf("store lists %v", l)
	}
}

// raw is a hand-driven client stream, to misbehave.
type raw struct {
	st network.Stream
	bw *bufio.Writer
	w  pbio.Writer
	r  pbio.Reader
}

func openRaw(t *testing.T, e *env) *raw {
	t.Helper()
	return openProto(t, e, Protocol)
}

// openProto opens a stream of protocol proto to the manager, to speak
// by hand.
func openProto(t *testing.T, e *env, proto protocol.ID) *raw {
	t.Helper()
	st, err := e.ch.NewStream(ctx(t), e.sh.ID(), proto)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.SetDeadline(time.Now().Add(20 * time.Second))
	bw := bufio.NewWriter(st)
	return &raw{st: st, bw: bw, w: pbio.NewDelimitedWriter(bw), r: pbio.NewDelimitedReader(bufio.NewReader(st), MaxFrame)}
}

func (r *raw) send(t *testing.T, m proto.Message) {
	t.Helper()
	if err := r.w.WriteMsg(m); err != nil {
		t.Fatal(err)
	}
	if err := r.bw.Flush(); err != nil {
		t.Fatal(err)
	}
}

func (r *raw) offer(t *testing.T, o *wire.BundleOffer) *wire.BundleAccept {
	t.Helper()
	r.send(t, o)
	var acc wire.BundleAccept
	if err := r.r.ReadMsg(&acc); err != nil {
		t.Fatalf("reading the accept: %v", err)
	}
	return &acc
}

func (r *raw) write(t *testing.T, b []byte) {
	t.Helper()
	if _, err := r.st.Write(b); err != nil {
		t.Fatal(err)
	}
}

func (r *raw) stored(t *testing.T) *wire.BundleStored {
	t.Helper()
	if err := r.st.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	var s wire.BundleStored
	if err := r.r.ReadMsg(&s); err != nil {
		t.Fatalf("reading BundleStored: %v", err)
	}
	return &s
}

func TestResume(t *testing.T) {
	e := newEnv(t, nil)
	file, data, sha := randomFile(t, 4<<20)
	half := len(data) / 2

	// A client that sends half the bytes, then breaks the stream.
	r := openRaw(t, e)
	if acc := r.offer(t, &wire.BundleOffer{Sha256: sha, Size: int64(len(data)), Reservation: "r1"}); acc.Error != nil || acc.Offset != 0 {
		t.Fatalf("accept %v", acc)
	}
	r.write(t, data[:half])
	time.Sleep(100 * time.Millisecond) // let the bytes arrive before the reset
	r.st.Reset()
	o := e.outcome(t)
	if o.err == nil || !o.kept {
		t.Fatalf("outcome %+v, want an interrupted upload kept", o)
	}
	if _, ok := e.store.Path(sha); ok {
		t.Fatal("a half upload was stored")
	}
	have := e.store.PartialSize(sha)
	if have <= 0 || have > int64(half) {
		t.Fatalf("partial upload has %d bytes, want 1..%d", have, half)
	}

	res, err := SendWith(ctx(t), e.ch, e.sh.ID(), file, "r1", SendOptions{SHA256: sha})
	if err != nil {
		t.Fatal(err)
	}
	if res.Offset != have || res.Sent != int64(len(data))-have {
		t.Fatalf("resumed %+v, want offset %d (the partial upload)", res, have)
	}
	if o := e.outcome(t); o.offset != have || o.err != nil {
		t.Fatalf("server accepted offset %d (err %v), want %d", o.offset, o.err, have)
	}
	p, ok := e.store.Path(sha)
	if !ok {
		t.Fatal("not stored after the resume")
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
		t.Fatal("resumed bundle differs")
	}
	if e.store.PartialSize(sha) != 0 {
		t.Error("partial file left behind")
	}
}

// A partial upload that is not the bundle's (someone lied about the hash
// and then broke off) costs the honest client one retry, not a failure.
func TestResumeOverForeignPartial(t *testing.T) {
	e := newEnv(t, nil)
	file, data, sha := randomFile(t, 1<<20)
	if err := os.WriteFile(e.store.partialPath(sha), make([]byte, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := SendWith(ctx(t), e.ch, e.sh.ID(), file, "r1", SendOptions{SHA256: sha})
	if err != nil {
		t.Fatal(err)
	}
	if o := e.outcome(t); o.offset != 1000 || o.err == nil {
		t.Fatalf("first attempt %+v, want resumed at 1000 and refused", o)
	}
	if res.Offset != 0 || res.Sent != int64(len(data)) {
		t.Fatalf("result %+v, want everything sent again", res)
	}
	p, _ := e.store.Path(sha)
	if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
		t.Fatal("stored bytes differ")
	}
}

func remote(t *testing.T, err error, code wire.ErrorReply_Code, words ...string) {
	t.Helper()
	var re *RemoteError
	if !errors.As(err, &re) {
		t.Fatalf("error %v (%T), want a RemoteError %s", err, err, code)
	}
	if re.Code != code {
		t.Fatalf("error %v, want code %s", err, code)
	}
	for _, w := range words {
		if !strings.Contains(re.Error(), w) {
			t.Errorf("error %q does not say %q", re.Error(), w)
		}
	}
}

func TestRefusals(t *testing.T) {
	// Each refusal on the offer leaves nothing, not even a partial file.
	t.Run("over the limit", func(t *testing.T) {
		e := newEnv(t, func(s *Server) { s.MaxSize = 1 << 20 })
		file, _, _ := randomFile(t, 1<<20+1)
		_, err := Send(ctx(t), e.ch, e.sh.ID(), file, "r1", nil)
		remote(t, err, wire.ErrorReply_CODE_REFUSED, "the bundle is 1.0 MiB", "accepts at most 1.0 MiB", "(apps.max_bundle_size)")
		e.assertNothingStored(t)
	})
	offers := []struct {
		name  string
		offer *wire.BundleOffer
		code  wire.ErrorReply_Code
		words string
	}{
		{"bad hash text", &wire.BundleOffer{Sha256: "not-a-hash", Size: 10, Reservation: "r1"}, wire.ErrorReply_CODE_BAD_REQUEST, `"not-a-hash" is not a sha256`},
		{"upper-case hash", &wire.BundleOffer{Sha256: strings.Repeat("AB", 32), Size: 10, Reservation: "r1"}, wire.ErrorReply_CODE_BAD_REQUEST, "lowercase hex"},
		{"no size", &wire.BundleOffer{Sha256: strings.Repeat("ab", 32), Size: 0, Reservation: "r1"}, wire.ErrorReply_CODE_BAD_REQUEST, "more than 0 bytes"},
		{"negative size", &wire.BundleOffer{Sha256: strings.Repeat("ab", 32), Size: -5, Reservation: "r1"}, wire.ErrorReply_CODE_BAD_REQUEST, "not -5"},
		{"no reservation", &wire.BundleOffer{Sha256: strings.Repeat("ab", 32), Size: 10}, wire.ErrorReply_CODE_BAD_REQUEST, "names no reservation"},
		{"not ours", &wire.BundleOffer{Sha256: strings.Repeat("ab", 32), Size: 10, Reservation: "r2"}, wire.ErrorReply_CODE_FORBIDDEN, "reservation r2 is not held"},
	}
	for _, c := range offers {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, nil)
			acc := openRaw(t, e).offer(t, c.offer)
			if acc.Error == nil {
				t.Fatalf("accepted: %v", acc)
			}
			remote(t, &RemoteError{acc.Error.Code, acc.Error.Message}, c.code, c.words)
			e.assertNothingStored(t)
			if e.store.PartialSize(c.offer.Sha256) != 0 {
				t.Error("partial file written for a refused offer")
			}
		})
	}
	t.Run("check fails with a plain error", func(t *testing.T) {
		e := newEnv(t, func(s *Server) {
			s.Check = func(context.Context, string, string) error { return errors.New("reservation r1 has expired") }
		})
		file, _, _ := randomFile(t, 1000)
		_, err := Send(ctx(t), e.ch, e.sh.ID(), file, "r1", nil)
		remote(t, err, wire.ErrorReply_CODE_FORBIDDEN, "forbidden: reservation r1 has expired")
		e.assertNothingStored(t)
	})
	t.Run("lying about the hash", func(t *testing.T) {
		e := newEnv(t, nil)
		_, data, _ := randomFile(t, 300<<10)
		_, _, other := randomFile(t, 300<<10)
		r := openRaw(t, e)
		if acc := r.offer(t, &wire.BundleOffer{Sha256: other, Size: int64(len(data)), Reservation: "r1"}); acc.Error != nil {
			t.Fatal(acc.Error)
		}
		r.write(t, data)
		s := r.stored(t)
		if s.Error == nil {
			t.Fatal("stored bytes that hash differently")
		}
		remote(t, &RemoteError{s.Error.Code, s.Error.Message}, wire.ErrorReply_CODE_BAD_REQUEST, "hash to", "nothing was stored")
		e.outcome(t)
		e.assertNothingStored(t)
		if e.store.PartialSize(other) != 0 {
			t.Error("partial file of a mismatched upload kept")
		}
	})
	t.Run("more bytes than offered", func(t *testing.T) {
		e := newEnv(t, nil)
		_, data, sha := randomFile(t, 100<<10)
		r := openRaw(t, e)
		if acc := r.offer(t, &wire.BundleOffer{Sha256: sha, Size: int64(len(data)), Reservation: "r1"}); acc.Error != nil {
			t.Fatal(acc.Error)
		}
		r.write(t, data)
		r.write(t, []byte("and some more"))
		s := r.stored(t)
		if s.Error == nil {
			t.Fatal("stored an upload longer than offered")
		}
		remote(t, &RemoteError{s.Error.Code, s.Error.Message}, wire.ErrorReply_CODE_BAD_REQUEST, "more than the 102400 bytes")
		e.outcome(t)
		e.assertNothingStored(t)
		if e.store.PartialSize(sha) != 0 {
			t.Error("partial file kept")
		}
	})
	t.Run("stalled client", func(t *testing.T) {
		e := newEnv(t, func(s *Server) { s.Idle = 200 * time.Millisecond })
		_, data, sha := randomFile(t, 100<<10)
		r := openRaw(t, e)
		if acc := r.offer(t, &wire.BundleOffer{Sha256: sha, Size: int64(len(data)), Reservation: "r1"}); acc.Error != nil {
			t.Fatal(acc.Error)
		}
		r.write(t, data[:1000])
		start := time.Now()
		o := e.outcome(t) // and then nothing
		if !isTimeout(o.err) || !o.kept || o.received != 1000 {
			t.Fatalf("outcome %+v, want a stall with 1000 bytes kept", o)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("stall noticed after %v, Idle is 200ms", d)
		}
		var s wire.BundleStored
		if err := r.r.ReadMsg(&s); err == nil {
			t.Fatal("a stalled stream got an answer, want a reset")
		}
		e.assertNothingStored(t)
		if e.store.PartialSize(sha) != 1000 {
			t.Errorf("partial file has %d bytes, want the 1000 received kept for a resume", e.store.PartialSize(sha))
		}
	})
	t.Run("stalled before the offer", func(t *testing.T) {
		e := newEnv(t, func(s *Server) { s.Idle = 200 * time.Millisecond })
		r := openRaw(t, e)
		r.write(t, []byte{5, 1}) // a frame cut short
		if o := e.outcome(t); !isTimeout(o.err) {
			t.Fatalf("outcome %+v, want a stall", o)
		}
	})
	t.Run("not configured", func(t *testing.T) {
		e := newEnv(t, func(s *Server) { s.MaxSize = 0 })
		file, _, _ := randomFile(t, 1000)
		_, err := Send(ctx(t), e.ch, e.sh.ID(), file, "r1", nil)
		remote(t, err, wire.ErrorReply_CODE_UNAVAILABLE, "does not accept bundles (apps.max_bundle_size is not set)")
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestSameHashAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	file, data, sha := randomFile(t, 8<<20)
	other := newHost(t)
	if err := other.Connect(ctx(t), peer.AddrInfo{ID: e.sh.ID(), Addrs: e.sh.Addrs()}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, h := range []host.Host{e.ch, other} {
		wg.Go(func() { _, errs[i] = Send(ctx(t), h, e.sh.ID(), file, "r1", nil) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
			continue
		}
		var re *RemoteError
		if !errors.As(err, &re) || !re.Retryable() || !strings.Contains(re.Message, "being uploaded") {
			t.Fatalf("error %v, want success or a retryable \"being uploaded\"", err)
		}
		// The retry, by its hash, finds it stored.
		r, err := SendWith(ctx(t), e.ch, e.sh.ID(), file, "r1", SendOptions{SHA256: sha})
		if err != nil || r.Sent != 0 {
			t.Fatalf("retry: %+v, %v", r, err)
		}
		ok++
	}
	t.Logf("results: %v", errs)
	if l, _ := e.store.List(); len(l) != 1 || l[0].SHA256 != sha || l[0].Size != int64(len(data)) {
		t.Fatalf("store lists %v, want the one bundle", l)
	}
}

// While one stream writes a hash, another offer of it is refused at once
// (deterministic: the first is held mid-way).
func TestBeingUploaded(t *testing.T) {
	e := newEnv(t, func(s *Server) { s.MaxUploads = 1 })
	file, data, sha := randomFile(t, 100<<10)
	r := openRaw(t, e)
	if acc := r.offer(t, &wire.BundleOffer{Sha256: sha, Size: int64(len(data)), Reservation: "r1"}); acc.Error != nil {
		t.Fatal(acc.Error)
	}
	_, err := SendWith(ctx(t), e.ch, e.sh.ID(), file, "r1", SendOptions{SHA256: sha})
	remote(t, err, wire.ErrorReply_CODE_UNAVAILABLE, "being uploaded", "try again")
	e.outcome(t)

	// Another hash while the one upload slot is taken: overloaded.
	file2, _, _ := randomFile(t, 1000)
	_, err = Send(ctx(t), e.ch, e.sh.ID(), file2, "r1", nil)
	remote(t, err, wire.ErrorReply_CODE_OVERLOADED, "try again later")
	e.outcome(t)

	r.write(t, data)
	if s := r.stored(t); s.Error != nil || s.Sha256 != sha {
		t.Fatalf("stored %v", s)
	}
	if _, err := Send(ctx(t), e.ch, e.sh.ID(), file2, "r1", nil); err != nil {
		t.Fatal(err)
	}
}

func TestContextCancel(t *testing.T) {
	e := newEnv(t, func(s *Server) { s.Idle = 5 * time.Second })
	file, _, _ := randomFile(t, 4<<20)
	c, cancel := context.WithCancel(context.Background())
	_, err := Send(c, e.ch, e.sh.ID(), file, "r1", func(sent, total int64) {
		if sent > 0 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want canceled", err)
	}
	// What arrived is kept for a resume; nothing, if the reset came
	// first (an empty partial upload is of no use).
	o := e.outcome(t)
	var have int64
	if fi, err := os.Stat(e.store.partialPath(o.key)); err == nil {
		have = fi.Size()
	}
	if o.kept != (o.received > 0) || have != o.received {
		t.Fatalf("outcome %+v, partial upload of %d bytes: want what arrived kept", o, have)
	}
	e.assertNothingStored(t)
}
