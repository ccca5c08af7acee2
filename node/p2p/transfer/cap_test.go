package transfer

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-msgio/pbio"

	"github.com/gridmgr/gridmgr/wire"
)

// inUse is a set of bundles instances use, safe for concurrent use.
type inUse struct {
	mu  sync.Mutex
	set map[string]bool
}

func (u *inUse) add(sha string) {
	u.mu.Lock()
	if u.set == nil {
		u.set = map[string]bool{}
	}
	u.set[sha] = true
	u.mu.Unlock()
}

func (u *inUse) get() map[string]bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.set)
}

// put writes a complete bundle of size bytes named c×64, dated at.
func put(t *testing.T, s *Store, c string, size int, at time.Time) string {
	t.Helper()
	sha := strings.Repeat(c, 64)
	p := s.bundlePath(sha)
	if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(p, at, at)
	return sha
}

// stored lists the bundles' names (their first hex digit) and the
// partial uploads' ("p" and the digit), sorted.
func stored(t *testing.T, s *Store) string {
	t.Helper()
	var out []string
	for _, c := range contents(t, s) {
		if h, ok := strings.CutPrefix(c, "partial/"); ok {
			out = append(out, "p"+h[:1])
		} else {
			out = append(out, c[:1])
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// To make room the store evicts what no one needs, oldest first: unused
// bundles and idle partial uploads; never a bundle in use or held, and
// nothing for an offer it refuses anyway.
func TestEvictionOrder(t *testing.T) {
	clk := newClock()
	s, _ := OpenStore(t.TempDir(), StoreOptions{Now: clk.Now})
	t0 := clk.Now().Add(-time.Hour)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	put(t, s, "a", 100, at(0)) // unused, the oldest
	b := put(t, s, "b", 100, at(1))
	p := s.partialPath(strings.Repeat("f", 64)) // an idle partial upload
	os.WriteFile(p, make([]byte, 100), 0o644)
	os.Chtimes(p, at(2), at(2))
	put(t, s, "c", 100, at(3))
	d := put(t, s, "d", 100, at(4))
	put(t, s, "e", 100, at(5))
	used := &inUse{}
	used.add(b)
	release := s.Hold(d) // being installed from (and used: dated now)
	l := limits{maxStore: 600, storeName: "apps.max_store_bytes", inUse: used.get}
	if got := stored(t, s); got != "a b c d e pf" {
		t.Fatalf("store %q", got)
	}

	// 600 held; 250 more: a, the partial upload and c go (300 freed).
	if err := s.begin(strings.Repeat("1", 64), 250, l); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, s); got != "b d e" {
		t.Fatalf("after evicting for 250 bytes: %q, want b d e", got)
	}
	// 300 stored + 250 being written; 350 more would fit once that
	// upload is done (b and d: 200 kept): overloaded, e not evicted.
	err := s.begin(strings.Repeat("2", 64), 350, l)
	var full *storeFullError
	if !errors.As(err, &full) || !full.transient() {
		t.Fatalf("begin: %v, want a transient store-full refusal", err)
	}
	// 450 + the 200 kept will never fit: refused for good.
	err = s.begin(strings.Repeat("2", 64), 450, l)
	if !errors.As(err, &full) || full.transient() {
		t.Fatalf("begin: %v, want a lasting store-full refusal", err)
	}
	if got := stored(t, s); got != "b d e" {
		t.Fatalf("refused offers evicted: %q", got)
	}
	s.done(strings.Repeat("1", 64))
	// 400: e goes; b (in use) and d (held) stay.
	if err := s.begin(strings.Repeat("3", 64), 400, l); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, s); got != "b d" {
		t.Fatalf("after evicting for 400 bytes: %q, want b d", got)
	}
	s.done(strings.Repeat("3", 64))
	// Released, d is unused: it goes for 500; b never does.
	release()
	release() // once is enough; twice is harmless
	if err := s.begin(strings.Repeat("4", 64), 500, l); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, s); got != "b" {
		t.Fatalf("after evicting for 500 bytes: %q, want b", got)
	}
	s.done(strings.Repeat("4", 64))
	if err := s.begin(strings.Repeat("5", 64), 501, l); !errors.As(err, &full) {
		t.Fatalf("begin: %v, want the bundle in use kept and the offer refused", err)
	}
	if got := stored(t, s); got != "b" {
		t.Fatalf("store %q, want b", got)
	}
}

// A use (an offer of a stored bundle, Hold) makes a bundle the newest:
// the least recently used goes first.
func TestEvictionLeastRecentlyUsed(t *testing.T) {
	clk := newClock()
	e := newEnvStore(t, newHost(t), newHost(t), StoreOptions{Now: clk.Now}, func(s *Server) {
		s.MaxStore = 250 << 10
		s.StoreLimitName = "apps.max_store_bytes"
		s.InUse = func() map[string]bool { return nil }
	})
	send := func(file string) Result {
		t.Helper()
		sha, _ := Hash(file)
		r, err := SendWith(ctx(t), e.ch, e.sh.ID(), file, "r1", SendOptions{SHA256: sha})
		if err != nil {
			t.Fatal(err)
		}
		e.outcome(t)
		clk.Add(time.Minute)
		return r
	}
	fx, _, x := randomFile(t, 100<<10)
	fy, _, y := randomFile(t, 100<<10)
	fz, _, z := randomFile(t, 100<<10)
	send(fx)
	send(fy)
	if r := send(fx); r.Sent != 0 { // x used again: y is now the oldest
		t.Fatalf("%+v, want x stored already", r)
	}
	send(fz) // 300 KiB > 250 KiB: one goes
	if _, ok := e.store.Path(y); ok {
		t.Error("the least recently used bundle kept")
	}
	if _, ok := e.store.Path(x); !ok {
		t.Error("a bundle used again evicted before an older one")
	}
	if _, ok := e.store.Path(z); !ok {
		t.Error("the bundle just sent is not stored")
	}
	// Hold is a use too: x is older than z, held once it is the newest.
	e.store.Hold(x)()
	clk.Add(time.Minute)
	fw, _, w := randomFile(t, 100<<10)
	send(fw)
	if _, ok := e.store.Path(z); ok {
		t.Error("z kept, x evicted: Hold did not count as a use")
	}
	if _, ok := e.store.Path(x); !ok {
		t.Error("x evicted")
	}
	if _, ok := e.store.Path(w); !ok {
		t.Error("w not stored")
	}
}

// The refusals say what is full, by how much, and what to do.
func TestStoreFullRefusal(t *testing.T) {
	used := &inUse{}
	e := newEnv(t, func(s *Server) {
		s.MaxStore = 1 << 20
		s.StoreLimitName = "apps.max_store_bytes"
		s.InUse = used.get
		s.MaxUploads = 2
	})
	fa, _, a := randomFile(t, 600<<10)
	if _, err := Send(ctx(t), e.ch, e.sh.ID(), fa, "r1", nil); err != nil {
		t.Fatal(err)
	}
	e.outcome(t)
	used.add(a)

	// Too big for the store whatever it holds.
	big, _, _ := randomFile(t, 1<<20+1)
	_, err := Send(ctx(t), e.ch, e.sh.ID(), big, "r1", nil)
	remote(t, err, wire.ErrorReply_CODE_REFUSED, "the bundle is 1048577 bytes", "holds at most 1048576 bytes in all (apps.max_store_bytes)",
		"raise apps.max_store_bytes")
	e.outcome(t)

	// Beside the bundle in use it does not fit.
	fb, _, _ := randomFile(t, 500<<10)
	_, err = Send(ctx(t), e.ch, e.sh.ID(), fb, "r1", nil)
	remote(t, err, wire.ErrorReply_CODE_REFUSED, "the bundle store is full", "this 500.0 KiB bundle does not fit in 1.0 MiB (apps.max_store_bytes)",
		"beside 600.0 KiB of bundles that instances use", "gridmgr app remove", "raise apps.max_store_bytes")
	var re *RemoteError
	if errors.As(err, &re) && re.Retryable() {
		t.Error("a lasting refusal says retry")
	}
	e.outcome(t)

	// An upload under way holds 300 KiB: 200 KiB fits once it is done.
	_, data, sha := randomFile(t, 300<<10)
	r := openRaw(t, e)
	if acc := r.offer(t, &wire.BundleOffer{Sha256: sha, Size: int64(len(data)), Reservation: "r1"}); acc.Error != nil {
		t.Fatal(acc.Error)
	}
	fc, _, _ := randomFile(t, 200<<10)
	_, err = Send(ctx(t), e.ch, e.sh.ID(), fc, "r1", nil)
	remote(t, err, wire.ErrorReply_CODE_OVERLOADED, "this 200.0 KiB bundle does not fit in 1.0 MiB (apps.max_store_bytes)",
		"and 300.0 KiB of other uploads under way", "try again once those uploads are done")
	if errors.As(err, &re) && !re.Retryable() {
		t.Error("a passing refusal does not say retry")
	}
	e.outcome(t)
	r.write(t, data)
	if s := r.stored(t); s.Error != nil {
		t.Fatal(s.Error)
	}
	e.outcome(t)
	if got := contents(t, e.store); len(got) != 2 {
		t.Fatalf("the store holds %v, want the two bundles sent", got)
	}
	// No InUse: the manager keeps every bundle, and says so.
	e2 := newEnv(t, func(s *Server) { s.MaxStore = 1 << 20 })
	if _, err := Send(ctx(t), e2.ch, e2.sh.ID(), fa, "r1", nil); err != nil {
		t.Fatal(err)
	}
	e2.outcome(t)
	_, err = Send(ctx(t), e2.ch, e2.sh.ID(), fb, "r1", nil)
	remote(t, err, wire.ErrorReply_CODE_REFUSED, "600.0 KiB of stored bundles (this manager does not evict bundles)")
}

// Two offers racing for the last room: exactly one gets it.
func TestLastRoomRace(t *testing.T) {
	s, _ := OpenStore(t.TempDir())
	kept := put(t, s, "0", 600, time.Now())
	l := limits{maxStore: 1000, storeName: "apps.max_store_bytes", inUse: func() map[string]bool { return map[string]bool{kept: true} }}
	for i := range 200 {
		shas := [2]string{strings.Repeat("1", 64), strings.Repeat("2", 64)}
		var errs [2]error
		var wg sync.WaitGroup
		for j := range 2 {
			wg.Go(func() { errs[j] = s.begin(shas[j], 300, l) })
		}
		wg.Wait()
		won := 0
		for j, err := range errs {
			var full *storeFullError
			switch {
			case err == nil:
				won++
				s.done(shas[j])
			case !errors.As(err, &full) || !full.transient():
				t.Fatalf("round %d: %v, want a transient store-full refusal", i, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d offers got the last 400 bytes, want 1 (%v)", i, won, errs)
		}
	}
}

// bundleStream is one client's side of a whole upload: the offer, then
// the bytes.
func bundleStream(data []byte) (sha string, stream []byte) {
	sum := sha256.Sum256(data)
	sha = hex.EncodeToString(sum[:])
	return sha, append(frame(&wire.BundleOffer{Sha256: sha, Size: int64(len(data)), Reservation: "r1"}), data...)
}

// Many uploads at once, and eviction under them: the bytes on disk
// (bundles and partial uploads, listed again and again meanwhile) never
// pass the cap, a bundle in use is never evicted, and each refusal is
// the store's.
func TestConcurrentUploadsWithinCap(t *testing.T) {
	const limit = 1 << 20
	st, _ := OpenStore(t.TempDir())
	used := &inUse{}
	srv := &Server{Store: st, MaxSize: 300 << 10, MaxUploads: 64, MaxPartial: 2 * limit, MaxStore: limit,
		StoreLimitName: "apps.max_store_bytes", InUse: used.get,
		Check: func(context.Context, string, string) error { return nil }}

	var peak atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			// One snapshot: evictions happen under the store's lock, so
			// none frees room between the two listings for an upload to
			// take (that would count the room twice). Under it, files
			// only grow within what their upload claimed, move from
			// DIR/partial to DIR (listed first: never seen twice) or go.
			var n int64
			st.mu.Lock()
			for _, d := range []string{st.dir, st.partial} {
				des, _ := os.ReadDir(d)
				for _, de := range des {
					if fi, err := de.Info(); err == nil && fi.Mode().IsRegular() {
						n += fi.Size()
					}
				}
			}
			st.mu.Unlock()
			if n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ok      []string
		refused int
	)
	// In waves of 10 at once: the later ones find the store full of
	// unused bundles and must evict.
	for i := range 40 {
		if i%10 == 0 {
			wg.Wait()
		}
		wg.Go(func() {
			data := make([]byte, (50+i*37%250)<<10)
			rand.Read(data)
			sha, stream := bundleStream(data)
			if i%20 == 0 {
				used.add(sha) // to be installed: in use from the moment it is stored
			}
			c := &fakeConn{r: bytes.NewReader(stream)}
			srv.serve(c, fmt.Sprintf("peer%d", i))
			rd := pbio.NewDelimitedReader(bufio.NewReader(&c.w), MaxFrame)
			var acc wire.BundleAccept
			if err := rd.ReadMsg(&acc); err != nil {
				t.Errorf("upload %d: no answer: %v", i, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if e := acc.Error; e != nil {
				if !strings.Contains(e.Message, "apps.max_store_bytes") ||
					(e.Code != wire.ErrorReply_CODE_OVERLOADED && e.Code != wire.ErrorReply_CODE_REFUSED) {
					t.Errorf("upload %d refused: %v", i, e)
				}
				refused++
				return
			}
			var done wire.BundleStored
			if err := rd.ReadMsg(&done); err != nil || done.Error != nil {
				t.Errorf("upload %d: %v %v", i, done.Error, err)
				return
			}
			ok = append(ok, sha)
		})
	}
	wg.Wait()
	close(stop)
	<-watched
	t.Logf("%d stored, %d refused; at most %d bytes on disk (cap %d)", len(ok), refused, peak.Load(), limit)
	if p := peak.Load(); p > limit {
		t.Fatalf("%d bytes on disk, past the cap of %d", p, limit)
	}
	if len(ok) == 0 || refused == 0 {
		t.Fatalf("%d stored, %d refused: the test did not fill the store", len(ok), refused)
	}
	inUse := used.get()
	for _, sha := range ok {
		if _, there := st.Path(sha); inUse[sha] && !there {
			t.Errorf("bundle %s in use was evicted", short(sha))
		}
	}
	var total int64
	l, _ := st.List()
	for _, e := range l {
		total += e.Size
	}
	if total > limit {
		t.Fatalf("%d bytes stored, past the cap of %d", total, limit)
	}
	if c := contents(t, st); len(c) != len(l) {
		t.Fatalf("left behind: %v", c)
	}
	if len(l) >= len(ok) {
		t.Fatalf("%d bundles stored, all %d kept: nothing was evicted", len(ok), len(l))
	}
}
