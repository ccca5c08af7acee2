package transfer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gridmgr/gridmgr/wire"
)

// The uploads offered without their hash (ProtocolTrailer): the client
// sends the bytes, then their sha256 in a BundleTrailer.

const testID = "0123456789abcdef0123456789abcdef"

func openTrailer(t *testing.T, e *env) *raw {
	t.Helper()
	return openProto(t, e, ProtocolTrailer)
}

// storesOnly checks that the store holds the bundle sha with data, and
// nothing else.
func storesOnly(t *testing.T, e *env, sha string, data []byte) {
	t.Helper()
	p, ok := e.store.Path(sha)
	if !ok {
		t.Fatalf("bundle %s not stored", sha)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
		t.Fatal("stored bytes differ")
	}
	if c := contents(t, e.store); len(c) != 1 {
		t.Fatalf("store holds %v, want the bundle only", c)
	}
}

func shaOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// trailerUpload offers data under id, sends it and the trailer sha, and
// returns the server's last answer.
func trailerUpload(t *testing.T, e *env, id string, data []byte, sha string) *wire.BundleStored {
	t.Helper()
	r := openTrailer(t, e)
	if acc := r.offer(t, &wire.BundleOffer{UploadId: id, Size: int64(len(data)), Reservation: "r1"}); acc.Error != nil || acc.Offset != 0 {
		t.Fatalf("accept %v", acc)
	}
	r.write(t, data)
	r.send(t, &wire.BundleTrailer{Sha256: sha})
	return r.stored(t)
}

func TestTrailerRoundTrip(t *testing.T) {
	e := newEnv(t, nil)
	file, data, sha := randomFile(t, 3<<20+5)
	r, err := SendResult(ctx(t), e.ch, e.sh.ID(), file, "r1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.SHA256 != sha || r.Offset != 0 || r.Sent != int64(len(data)) {
		t.Fatalf("result %+v", r)
	}
	o := e.outcome(t)
	if o.err != nil || !strings.HasPrefix(o.key, "up-") || o.sha != sha {
		t.Fatalf("outcome %+v, want an upload without the hash first, stored", o)
	}
	storesOnly(t, e, sha, data)
}

// A new client and an old manager (only Protocol): the hash goes first,
// as before.
func TestTrailerOldManager(t *testing.T) {
	e := newEnv(t, nil)
	e.sh.RemoveStreamHandler(ProtocolTrailer)
	e.sh.RemoveStreamHandler(ProtocolZstd)
	ch := newHost(t) // connected after: told the manager's protocols
	if err := ch.Connect(ctx(t), peer.AddrInfo{ID: e.sh.ID(), Addrs: e.sh.Addrs()}); err != nil {
		t.Fatal(err)
	}
	file, data, sha := randomFile(t, 1<<20)
	r, err := SendResult(ctx(t), ch, e.sh.ID(), file, "r1", nil)
	if err != nil || r.SHA256 != sha || r.Sent != int64(len(data)) {
		t.Fatalf("%+v, %v", r, err)
	}
	if o := e.outcome(t); o.key != sha {
		t.Fatalf("outcome %+v, want the hash-first offer", o)
	}
}

// A trailer that does not name the bytes' hash: refused, nothing kept.
func TestTrailerWrongHash(t *testing.T) {
	e := newEnv(t, nil)
	_, data, _ := randomFile(t, 1<<20)
	for _, tc := range []struct{ name, sha, words string }{
		{"another hash", shaOf([]byte("something else")), "not to the trailer's"},
		{"last byte wrong", shaOf(append(bytes.Clone(data[:len(data)-1]), data[len(data)-1]^1)), "not to the trailer's"},
		{"not a hash", "xyz", "not a sha256"},
		{"empty", "", "not a sha256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := trailerUpload(t, e, testID, data, tc.sha)
			if s.Error == nil || s.Error.Code != wire.ErrorReply_CODE_BAD_REQUEST || !strings.Contains(s.Error.Message, tc.words) {
				t.Fatalf("stored %v, want a refusal saying %q", s, tc.words)
			}
			if o := e.outcome(t); o.err == nil || o.kept {
				t.Fatalf("outcome %+v", o)
			}
			e.assertEmpty(t)
		})
	}
}

// A client that sends more or fewer bytes than it offered stores
// nothing.
func TestTrailerLiesAboutSize(t *testing.T) {
	e := newEnv(t, nil)
	_, data, sha := randomFile(t, 256<<10)
	t.Run("more", func(t *testing.T) {
		r := openTrailer(t, e)
		r.offer(t, &wire.BundleOffer{UploadId: testID, Size: int64(len(data)), Reservation: "r1"})
		r.write(t, data)
		r.write(t, []byte("extra"))
		r.send(t, &wire.BundleTrailer{Sha256: sha})
		s := r.stored(t)
		if s.Error == nil || s.Error.Code != wire.ErrorReply_CODE_BAD_REQUEST {
			t.Fatalf("stored %v, want a refusal", s)
		}
		e.outcome(t)
		e.assertEmpty(t)
	})
	t.Run("more after the trailer", func(t *testing.T) {
		r := openTrailer(t, e)
		r.offer(t, &wire.BundleOffer{UploadId: testID, Size: int64(len(data)), Reservation: "r1"})
		r.write(t, data)
		r.send(t, &wire.BundleTrailer{Sha256: sha})
		r.write(t, []byte("x"))
		s := r.stored(t)
		if s.Error == nil || !strings.Contains(s.Error.Message, "more than") {
			t.Fatalf("stored %v, want a refusal", s)
		}
		e.outcome(t)
		e.assertEmpty(t)
	})
	t.Run("fewer", func(t *testing.T) {
		short := data[:len(data)-100]
		r := openTrailer(t, e)
		r.offer(t, &wire.BundleOffer{UploadId: testID, Size: int64(len(data)), Reservation: "r1"})
		r.write(t, short)
		r.send(t, &wire.BundleTrailer{Sha256: shaOf(short)})
		_ = r.st.CloseWrite()
		var s wire.BundleStored
		if err := r.r.ReadMsg(&s); err == nil {
			t.Fatalf("stored %v, want the stream reset (cut short)", &s)
		}
		if o := e.outcome(t); o.err == nil {
			t.Fatalf("outcome %+v", o)
		}
		e.assertNothingStored(t)
	})
}

// Bytes and no trailer: refused, but the bytes are kept; a resume that
// sends only the trailer stores them.
func TestTrailerMissing(t *testing.T) {
	e := newEnv(t, nil)
	_, data, sha := randomFile(t, 256<<10)
	r := openTrailer(t, e)
	r.offer(t, &wire.BundleOffer{UploadId: testID, Size: int64(len(data)), Reservation: "r1"})
	r.write(t, data)
	if s := r.stored(t); s.Error == nil || !strings.Contains(s.Error.Message, "without their sha256") {
		t.Fatalf("stored %v", s)
	}
	if o := e.outcome(t); !o.kept {
		t.Fatalf("outcome %+v, want the bytes kept", o)
	}
	r = openTrailer(t, e)
	if acc := r.offer(t, &wire.BundleOffer{UploadId: testID, Size: int64(len(data)), Reservation: "r1"}); acc.Offset != int64(len(data)) {
		t.Fatalf("accept %v, want all the bytes had", acc)
	}
	r.send(t, &wire.BundleTrailer{Sha256: sha})
	if s := r.stored(t); s.Error != nil || s.Sha256 != sha {
		t.Fatalf("stored %v", s)
	}
}

func TestTrailerBadOffer(t *testing.T) {
	e := newEnv(t, nil)
	for _, id := range []string{"", "short", strings.Repeat("A", 32), strings.Repeat("a", 65)} {
		r := openTrailer(t, e)
		acc := r.offer(t, &wire.BundleOffer{UploadId: id, Size: 10, Reservation: "r1"})
		if acc.Error == nil || acc.Error.Code != wire.ErrorReply_CODE_BAD_REQUEST {
			t.Fatalf("id %q: accept %v, want a refusal", id, acc)
		}
		e.outcome(t)
	}
	e.assertEmpty(t)
}

// A cut upload resumes from where the manager stopped.
func TestTrailerResume(t *testing.T) {
	e := newEnv(t, nil)
	file, data, sha := randomFile(t, 2<<20)
	id := fileIDOf(t, file).upload()
	r := openTrailer(t, e)
	r.offer(t, &wire.BundleOffer{UploadId: id, Size: int64(len(data)), Reservation: "r1"})
	r.write(t, data[:1<<20])
	_ = r.st.CloseWrite() // cut: no more bytes, no trailer
	if o := e.outcome(t); !o.kept || o.received != 1<<20 {
		t.Fatalf("outcome %+v, want 1 MiB kept", o)
	}
	res, err := SendResult(ctx(t), e.ch, e.sh.ID(), file, "r1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Offset != 1<<20 || res.Sent != 1<<20 || res.SHA256 != sha {
		t.Fatalf("result %+v, want a resume at 1 MiB", res)
	}
	storesOnly(t, e, sha, data)
}

func fileIDOf(t *testing.T, file string) fileID {
	t.Helper()
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	return identify(file, fi)
}

// A cut stream resumed with another file under the same upload id: the
// manager's hash covers the first file's part and the second's rest, so
// the trailer does not match: refused, nothing stored, the part
// dropped. Send then sends the whole file again, and it is stored.
func TestTrailerResumeWithAnotherFile(t *testing.T) {
	e := newEnv(t, nil)
	_, a, _ := randomFile(t, 1<<20)
	file, b, shaB := randomFile(t, 1<<20)
	id := fileIDOf(t, file).upload()

	r := openTrailer(t, e)
	r.offer(t, &wire.BundleOffer{UploadId: id, Size: int64(len(a)), Reservation: "r1"})
	r.write(t, a[:300<<10])
	_ = r.st.CloseWrite()
	if o := e.outcome(t); !o.kept {
		t.Fatalf("outcome %+v", o)
	}

	// By hand: the rest of b and b's hash.
	r = openTrailer(t, e)
	acc := r.offer(t, &wire.BundleOffer{UploadId: id, Size: int64(len(b)), Reservation: "r1"})
	if acc.Offset != 300<<10 {
		t.Fatalf("accept %v", acc)
	}
	r.write(t, b[300<<10:])
	r.send(t, &wire.BundleTrailer{Sha256: shaB})
	if s := r.stored(t); s.Error == nil || s.Error.Code != wire.ErrorReply_CODE_BAD_REQUEST {
		t.Fatalf("stored %v, want a refusal", s)
	}
	e.outcome(t)
	e.assertEmpty(t)

	// By Send, over a part of a again.
	r = openTrailer(t, e)
	r.offer(t, &wire.BundleOffer{UploadId: id, Size: int64(len(a)), Reservation: "r1"})
	r.write(t, a[:300<<10])
	_ = r.st.CloseWrite()
	e.outcome(t)
	res, err := SendResult(ctx(t), e.ch, e.sh.ID(), file, "r1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := e.outcome(t); o.offset != 300<<10 || o.err == nil {
		t.Fatalf("first attempt %+v, want a resume refused", o)
	}
	if res.Offset != 0 || res.Sent != int64(len(b)) || res.SHA256 != shaB {
		t.Fatalf("result %+v, want b sent whole again", res)
	}
	storesOnly(t, e, shaB, b)
}

// Two clients upload the same bytes at once under their own ids (and a
// third offers their hash first): each is stored, one bundle is kept,
// nothing else.
func TestTrailerSameBytesAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	_, data, sha := randomFile(t, 1<<20)
	ids := []string{testID, strings.Repeat("f", 32)}
	var rs []*raw
	for _, id := range ids {
		r := openTrailer(t, e)
		if acc := r.offer(t, &wire.BundleOffer{UploadId: id, Size: int64(len(data)), Reservation: "r1"}); acc.Error != nil {
			t.Fatal(acc.Error)
		}
		rs = append(rs, r)
	}
	old := openRaw(t, e)
	if acc := old.offer(t, &wire.BundleOffer{Sha256: sha, Size: int64(len(data)), Reservation: "r1"}); acc.Error != nil {
		t.Fatal(acc.Error)
	}
	for _, r := range rs {
		r.write(t, data)
	}
	old.write(t, data)
	for _, r := range rs {
		r.send(t, &wire.BundleTrailer{Sha256: sha})
	}
	for _, r := range append(rs, old) {
		if s := r.stored(t); s.Error != nil || s.Sha256 != sha {
			t.Fatalf("stored %v", s)
		}
		e.outcome(t)
	}
	if c := contents(t, e.store); len(c) != 1 || c[0] != sha+bundleExt {
		t.Fatalf("store holds %v, want the one bundle", c)
	}

	// And by Send, from two files with the same bytes, at once.
	e2 := newEnv(t, nil)
	f1, _, _ := randomFile(t, 1)
	f2 := filepath.Join(t.TempDir(), "copy.zip")
	os.WriteFile(f1, data, 0o644)
	os.WriteFile(f2, data, 0o644)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, f := range []string{f1, f2} {
		wg.Go(func() { _, errs[i] = Send(ctx(t), e2.ch, e2.sh.ID(), f, "r1", nil) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if c := contents(t, e2.store); len(c) != 1 || c[0] != sha+bundleExt {
		t.Fatalf("store holds %v, want the one bundle", c)
	}
}

// blockAfter takes n bytes, then holds the next write until release is
// closed: the manager is stopped mid-upload, its partial file as a kill
// -9 would leave it.
type blockAfter struct {
	w       io.Writer
	n       int
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockAfter) Write(p []byte) (int, error) {
	if b.n <= 0 {
		b.once.Do(func() { close(b.reached) })
		<-b.release
		return 0, io.ErrClosedPipe
	}
	k := min(len(p), b.n)
	b.n -= k
	n, err := b.w.Write(p[:k])
	if err != nil || k < len(p) {
		return n, err
	}
	return n, nil
}

// The manager is killed (-9) mid-upload: a manager started on what it
// left resumes the upload; and if the part it left is wrong at its end
// (written but lost, as a power cut can), the resume is refused and Send
// sends the whole file again. Either way the bundle stored is the file.
func TestTrailerKilledManagerResume(t *testing.T) {
	for _, torn := range []bool{false, true} {
		name := "clean"
		if torn {
			name = "torn tail"
		}
		t.Run(name, func(t *testing.T) {
			blk := &blockAfter{n: 1 << 20, reached: make(chan struct{}), release: make(chan struct{})}
			e := newEnv(t, func(s *Server) {
				s.wrapWrite = func(w io.Writer) io.Writer { blk.w = w; return blk }
			})
			file, data, sha := randomFile(t, 3<<20)
			c, cancel := context.WithCancel(context.Background())
			sent := make(chan error, 1)
			go func() { _, err := Send(c, e.ch, e.sh.ID(), file, "r1", nil); sent <- err }()
			<-blk.reached

			// "kill -9": what is on disk now is what a new manager finds.
			dir := t.TempDir()
			copyTree(t, e.store.Dir(), dir)
			close(blk.release)
			cancel()
			<-sent
			e.outcome(t)

			parts, _ := filepath.Glob(filepath.Join(dir, "partial", "*"+partialExt))
			if len(parts) != 1 {
				t.Fatalf("partial files %v", parts)
			}
			fi, _ := os.Stat(parts[0])
			if fi.Size() != 1<<20 {
				t.Fatalf("partial file of %d bytes, want 1 MiB", fi.Size())
			}
			if torn {
				f, _ := os.OpenFile(parts[0], os.O_WRONLY, 0)
				f.WriteAt(make([]byte, 4096), fi.Size()-4096)
				f.Close()
			}
			st, err := OpenStore(dir)
			if err != nil {
				t.Fatal(err)
			}
			e2 := newEnvWith(t, newHost(t), newHost(t), st, nil)
			res, err := SendResult(ctx(t), e2.ch, e2.sh.ID(), file, "r1", nil)
			if err != nil {
				t.Fatal(err)
			}
			want := Result{SHA256: sha, Size: 3 << 20, Offset: 1 << 20, Sent: 2 << 20}
			if torn {
				want.Offset, want.Sent = 0, 3<<20
			}
			res.name = ""
			if res != want {
				t.Fatalf("result %+v, want %+v", res, want)
			}
			p, _ := st.Path(sha)
			if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
				t.Fatal("stored bytes differ")
			}
			if c := contents(t, st); len(c) != 1 {
				t.Fatalf("store holds %v", c)
			}
		})
	}
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if fi.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, fi.Mode())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The hashes Send remembers: a file unchanged for racyAge before it was
// read is offered by its hash the next time (nothing sent); a file just
// written is not remembered; a replaced file is not taken for the old.
func TestTrailerHashCache(t *testing.T) {
	e := newEnv(t, nil)
	file, data, sha := randomFile(t, 512<<10)
	send := func() Result {
		t.Helper()
		r, err := SendResult(ctx(t), e.ch, e.sh.ID(), file, "r1", nil)
		if err != nil || r.SHA256 != shaOf(mustRead(t, file)) {
			t.Fatalf("%+v, %v", r, err)
		}
		e.outcome(t)
		return r
	}
	// Just written: not remembered.
	send()
	if r := send(); r.Sent != int64(len(data)) {
		t.Fatalf("%+v, want a file just written sent again", r)
	}
	// Seen 3 s after it was written: remembered.
	statNow = func() time.Time { return time.Now().Add(3 * time.Second) }
	defer func() { statNow = time.Now }()
	send()
	if r := send(); r.Sent != 0 || r.Offset != r.Size || r.SHA256 != sha {
		t.Fatalf("%+v, want nothing sent", r)
	}
	// In another process, through HashCacheFile.
	HashCacheFile = filepath.Join(t.TempDir(), "cache", "bundle-hashes")
	defer func() { HashCacheFile = "" }()
	send()                // remembered in memory: written to the file
	hashes = &hashCache{} // a new process
	if r := send(); r.Sent != 0 || r.SHA256 != sha {
		t.Fatalf("%+v, want nothing sent (the hash read from the file)", r)
	}
	b, _ := os.ReadFile(HashCacheFile)
	if lines := strings.Count(string(b), "\n"); lines != 1 || !strings.Contains(string(b), " "+sha+"\n") {
		t.Fatalf("cache file %q", b)
	}
	// Replaced by another file of the same size: not the old hash.
	other := filepath.Join(t.TempDir(), "x")
	os.WriteFile(other, bytes.Repeat([]byte{7}, len(data)), 0o644)
	if err := os.Rename(other, file); err != nil {
		t.Fatal(err)
	}
	if r := send(); r.Sent != int64(len(data)) || r.SHA256 == sha {
		t.Fatalf("%+v, want the new file sent", r)
	}
}

func mustRead(t *testing.T, f string) []byte {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A part of the file's size kept under its upload id but not its bytes
// (all of them "received", the trailer lost): the resume sends only the
// trailer, is refused, and Send sends the whole file again.
func TestTrailerWholeForeignPart(t *testing.T) {
	e := newEnv(t, nil)
	file, data, sha := randomFile(t, 200<<10)
	key := uploadKey(fileIDOf(t, file).upload(), int64(len(data)))
	if err := os.WriteFile(e.store.partialPath(key), make([]byte, len(data)), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := SendResult(ctx(t), e.ch, e.sh.ID(), file, "r1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := e.outcome(t); o.offset != int64(len(data)) || o.err == nil {
		t.Fatalf("first attempt %+v, want everything held and refused", o)
	}
	if res.Offset != 0 || res.Sent != int64(len(data)) || res.SHA256 != sha {
		t.Fatalf("result %+v", res)
	}
	if c := contents(t, e.store); len(c) != 1 || c[0] != sha+bundleExt {
		t.Fatalf("store holds %v", c)
	}
}
