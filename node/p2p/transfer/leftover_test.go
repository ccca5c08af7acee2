package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

// clock is a virtual clock for a Store: it moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// contents lists the files in the store's DIR and DIR/partial, as
// "NAME" and "partial/NAME".
func contents(t testing.TB, s *Store) []string {
	t.Helper()
	var out []string
	for _, d := range []string{s.dir, s.partial} {
		des, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, de := range des {
			if d == s.dir && de.Name() == "partial" {
				continue
			}
			out = append(out, strings.TrimPrefix(filepath.Join(d, de.Name()), s.dir+"/"))
		}
	}
	return out
}

// assertEmpty checks nothing stays in DIR or DIR/partial.
func (e *env) assertEmpty(t *testing.T) {
	t.Helper()
	if c := contents(t, e.store); len(c) != 0 {
		t.Fatalf("the store holds %v, want nothing", c)
	}
}

// failAfter is a writer that takes n bytes, then fails as a full disk.
type failAfter struct {
	w io.Writer
	n int
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		k, _ := f.w.Write(p[:f.n])
		f.n = 0
		return k, fmt.Errorf("write partial upload: %w", syscall.ENOSPC)
	}
	f.n -= len(p)
	return f.w.Write(p)
}

// Every way an upload can be refused or abandoned (beyond PartialAge)
// leaves nothing in DIR or DIR/partial.
func TestRefusedUploadsLeaveNothing(t *testing.T) {
	offer := func(sha string, size int, res string) *wire.BundleOffer {
		return &wire.BundleOffer{Sha256: sha, Size: int64(size), Reservation: res}
	}
	t.Run("size over the limit", func(t *testing.T) {
		e := newEnv(t, func(s *Server) { s.MaxSize = 100 << 10 })
		file, _, _ := randomFile(t, 100<<10+1)
		_, err := Send(ctx(t), e.ch, e.sh.ID(), file, "r1", nil)
		remote(t, err, wire.ErrorReply_CODE_REFUSED, "apps.max_bundle_size")
		e.outcome(t)
		e.assertEmpty(t)
	})
	t.Run("holder check refused", func(t *testing.T) {
		e := newEnv(t, nil)
		file, _, _ := randomFile(t, 10<<10)
		_, err := Send(ctx(t), e.ch, e.sh.ID(), file, "r2", nil)
		remote(t, err, wire.ErrorReply_CODE_FORBIDDEN, "not held")
		e.outcome(t)
		e.assertEmpty(t)
	})
	t.Run("hash mismatch at the end", func(t *testing.T) {
		e := newEnv(t, nil)
		_, data, _ := randomFile(t, 300<<10)
		_, _, other := randomFile(t, 300<<10)
		r := openRaw(t, e)
		if acc := r.offer(t, offer(other, len(data), "r1")); acc.Error != nil {
			t.Fatal(acc.Error)
		}
		r.write(t, data)
		if s := r.stored(t); s.Error == nil {
			t.Fatal("stored")
		}
		e.outcome(t)
		e.assertEmpty(t)
	})
	t.Run("hash mismatch after a resume", func(t *testing.T) {
		// The half kept from a first attempt is proven wrong with the
		// rest: both go.
		e := newEnv(t, nil)
		_, data, _ := randomFile(t, 300<<10)
		_, _, other := randomFile(t, 300<<10)
		r := openRaw(t, e)
		r.offer(t, offer(other, len(data), "r1"))
		r.write(t, data[:100<<10])
		r.st.CloseWrite() // the stream ends short: an interruption
		if o := e.outcome(t); !o.kept {
			t.Fatalf("outcome %+v, want the partial upload kept", o)
		}
		r = openRaw(t, e)
		acc := r.offer(t, offer(other, len(data), "r1"))
		if acc.Error != nil || acc.Offset != 100<<10 {
			t.Fatalf("accept %v, want a resume at %d", acc, 100<<10)
		}
		r.write(t, data[acc.Offset:])
		if s := r.stored(t); s.Error == nil {
			t.Fatal("stored")
		}
		e.outcome(t)
		e.assertEmpty(t)
	})
	t.Run("more bytes than offered", func(t *testing.T) {
		e := newEnv(t, nil)
		_, data, sha := randomFile(t, 100<<10)
		r := openRaw(t, e)
		r.offer(t, offer(sha, len(data), "r1"))
		r.write(t, append(data, "more"...))
		if s := r.stored(t); s.Error == nil {
			t.Fatal("stored")
		}
		e.outcome(t)
		e.assertEmpty(t)
	})
	t.Run("disk error while writing", func(t *testing.T) {
		var mended atomic.Bool
		e := newEnv(t, func(s *Server) {
			s.wrapWrite = func(w io.Writer) io.Writer {
				if mended.Load() {
					return w
				}
				return &failAfter{w: w, n: 64 << 10}
			}
		})
		file, _, _ := randomFile(t, 1<<20)
		// The manager answers at once; the client stops sending and
		// says why (not a timeout).
		start := time.Now()
		_, err := Send(ctx(t), e.ch, e.sh.ID(), file, "r1", nil)
		remote(t, err, wire.ErrorReply_CODE_UNAVAILABLE, "cannot write the bundle", "no space left on device", "nothing was kept")
		if d := time.Since(start); d > SendIdle/2 {
			t.Errorf("the client took %v to learn of the refusal", d)
		}
		o := e.outcome(t)
		if o.err == nil || !strings.Contains(o.err.Error(), "cannot write the bundle") ||
			!strings.Contains(o.err.Error(), "no space left on device") || o.kept {
			t.Fatalf("outcome %+v, want the disk's error and nothing kept", o)
		}
		e.assertEmpty(t)
		// The hash and the slot are free: the disk mended, it goes in.
		mended.Store(true)
		if _, err := Send(ctx(t), e.ch, e.sh.ID(), file, "r1", nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("store full", func(t *testing.T) {
		e := newEnv(t, func(s *Server) { s.MaxStore = 100 << 10 })
		file, _, _ := randomFile(t, 100<<10+1)
		_, err := Send(ctx(t), e.ch, e.sh.ID(), file, "r1", nil)
		remote(t, err, wire.ErrorReply_CODE_REFUSED, "the bundle store holds at most")
		e.outcome(t)
		e.assertEmpty(t)
	})
	t.Run("gone before the first byte", func(t *testing.T) {
		e := newEnv(t, nil)
		_, data, sha := randomFile(t, 100<<10)
		r := openRaw(t, e)
		r.offer(t, offer(sha, len(data), "r1"))
		r.st.Reset()
		if o := e.outcome(t); o.kept {
			t.Fatalf("outcome %+v: an empty partial upload kept", o)
		}
		e.assertEmpty(t)
	})
	t.Run("gone for good", func(t *testing.T) {
		clk := newClock()
		e := newEnvStore(t, newHost(t), newHost(t), StoreOptions{Now: clk.Now}, nil)
		_, data, sha := randomFile(t, 100<<10)
		r := openRaw(t, e)
		r.offer(t, offer(sha, len(data), "r1"))
		r.write(t, data[:1000])
		r.st.CloseWrite()
		e.outcome(t)
		if e.store.PartialSize(sha) != 1000 {
			t.Fatalf("partial upload of %d bytes, want the 1000 sent kept for a resume", e.store.PartialSize(sha))
		}
		clk.Add(DefaultPartialAge + time.Second)
		// The next offer of another bundle clears it.
		file, _, other := randomFile(t, 10)
		if _, err := Send(ctx(t), e.ch, e.sh.ID(), file, "r1", nil); err != nil {
			t.Fatal(err)
		}
		e.outcome(t)
		if c := contents(t, e.store); len(c) != 1 || c[0] != other+bundleExt {
			t.Fatalf("the store holds %v, want only the bundle sent since", c)
		}
	})
}

// A partial upload is deleted once PartialAge has passed since its last
// write, and not before; the upload being written is never touched, and
// OpenStore deletes the old ones too.
func TestAbandonedPartialAge(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	s, err := OpenStore(dir, StoreOptions{PartialAge: 10 * time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	sha := func(c string) string { return strings.Repeat(c, 64) }
	write := func(h string, at time.Time) string {
		p := s.partialPath(h)
		if err := os.WriteFile(p, make([]byte, 100), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, at, at)
		return p
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	t0 := clk.Now()
	old := write(sha("1"), t0)
	fresh := write(sha("2"), t0.Add(5*time.Minute))
	writing := write(sha("3"), t0)
	if err := s.begin(sha("3"), 100, limits{}); err != nil { // being written from now on
		t.Fatal(err)
	}
	clk.Add(10 * time.Minute) // old is exactly 10 minutes old: kept
	if err := s.begin(sha("a"), 1, limits{}); err != nil {
		t.Fatal(err)
	}
	s.done(sha("a"))
	if !exists(old) || !exists(fresh) {
		t.Fatal("a partial upload deleted before its age passed")
	}
	clk.Add(time.Second)
	if err := s.begin(sha("a"), 1, limits{}); err != nil {
		t.Fatal(err)
	}
	s.done(sha("a"))
	if exists(old) {
		t.Error("a partial upload untouched for longer than PartialAge kept")
	}
	if !exists(fresh) {
		t.Error("a partial upload 5 minutes old deleted")
	}
	if !exists(writing) {
		t.Error("the partial upload being written deleted")
	}
	// The owner of an old partial upload that comes back resumes it.
	own := write(sha("4"), t0)
	if err := s.begin(sha("4"), 200, limits{}); err != nil {
		t.Fatal(err)
	}
	if !exists(own) {
		t.Error("the old partial upload of the hash offered deleted under its owner")
	}
	s.done(sha("4"))
	s.done(sha("3"))

	// Reopened later: the old ones go, the young ones stay.
	clk.Add(5 * time.Minute) // fresh is now 10m1s old
	young := write(sha("5"), clk.Now().Add(-time.Minute))
	if _, err := OpenStore(dir, StoreOptions{PartialAge: 10 * time.Minute, Now: clk.Now}); err != nil {
		t.Fatal(err)
	}
	if exists(fresh) || exists(writing) || exists(own) {
		t.Errorf("OpenStore kept old partial uploads: %v", contents(t, s))
	}
	if !exists(young) {
		t.Error("OpenStore deleted a young partial upload")
	}
}

// An upload cut short resumes after a disconnect shorter than
// PartialAge, though other uploads came and went (and swept the
// partial uploads) meanwhile.
func TestResumeAfterShortDisconnect(t *testing.T) {
	clk := newClock()
	e := newEnvStore(t, newHost(t), newHost(t), StoreOptions{PartialAge: time.Hour, Now: clk.Now}, nil)
	file, data, sha := randomFile(t, 1<<20)
	r := openRaw(t, e)
	if acc := r.offer(t, &wire.BundleOffer{Sha256: sha, Size: int64(len(data)), Reservation: "r1"}); acc.Error != nil {
		t.Fatal(acc.Error)
	}
	r.write(t, data[:300<<10])
	r.st.CloseWrite()
	if o := e.outcome(t); !o.kept || o.received != 300<<10 {
		t.Fatalf("outcome %+v, want 300 KiB kept", o)
	}
	clk.Add(59 * time.Minute)
	other, _, _ := randomFile(t, 10<<10)
	if _, err := Send(ctx(t), e.ch, e.sh.ID(), other, "r1", nil); err != nil {
		t.Fatal(err)
	}
	e.outcome(t)
	res, err := SendWith(ctx(t), e.ch, e.sh.ID(), file, "r1", SendOptions{SHA256: sha})
	if err != nil {
		t.Fatal(err)
	}
	if res.Offset != 300<<10 || res.Sent != int64(len(data))-300<<10 {
		t.Fatalf("result %+v, want a resume at 300 KiB", res)
	}
	if _, ok := e.store.Path(sha); !ok {
		t.Fatal("not stored")
	}
}

// A refused holder check writes and deletes nothing, even when a partial
// upload of the hash exists (it is someone else's).
func TestRefusedCheckKeepsOthersPartial(t *testing.T) {
	var ended atomic.Bool
	e := newEnv(t, func(s *Server) {
		s.Check = func(context.Context, string, string) error {
			if ended.Load() {
				return errors.New("reservation r1 has ended")
			}
			return nil
		}
	})
	_, data, sha := randomFile(t, 100<<10)
	r := openRaw(t, e)
	r.offer(t, &wire.BundleOffer{Sha256: sha, Size: int64(len(data)), Reservation: "r1"})
	r.write(t, data[:1000])
	r.st.CloseWrite()
	e.outcome(t)
	ended.Store(true)
	r = openRaw(t, e)
	if acc := r.offer(t, &wire.BundleOffer{Sha256: sha, Size: int64(len(data)), Reservation: "r1"}); acc.Error == nil {
		t.Fatal("accepted")
	}
	e.outcome(t)
	if e.store.PartialSize(sha) != 1000 {
		t.Fatalf("partial upload of %d bytes, want the holder's 1000 untouched by a refused peer", e.store.PartialSize(sha))
	}
}
