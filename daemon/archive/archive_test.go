package archive

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/internal/boltfile"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/wire"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// ev returns an event of peer at t0 + sec seconds.
func ev(peer string, seq uint64, sec int) *wire.Event {
	return &wire.Event{
		Version: 1, Kind: wire.EventKind_EVENT_KIND_RESERVATION, Type: "held",
		Manager: "m-" + peer, Peer: peer, TimeUnixMs: t0.Add(time.Duration(sec) * time.Second).UnixMilli(), Seq: seq,
		Body: &wire.Event_Reservation{Reservation: &wire.ReservationChange{
			Id: fmt.Sprintf("%s-%d", peer, seq), User: "alice", Amounts: []*wire.Amount{{Kind: "cpus", N: int64(seq % 8)}},
		}},
	}
}

// clock is a settable Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func open(t testing.TB, path string, opts Options) *Archive {
	t.Helper()
	a, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func all(t testing.TB, a *Archive) []*wire.Event {
	t.Helper()
	evs, more, err := a.Query(time.Time{}, time.Time{}, nil, 0)
	if err != nil || more != 0 {
		t.Fatalf("Query: %d more, %v", more, err)
	}
	return evs
}

// ids renders events as peer/seq@sec for comparisons.
func ids(evs []*wire.Event) string {
	var s []string
	for _, e := range evs {
		s = append(s, fmt.Sprintf("%s/%d@%d", e.GetPeer(), e.GetSeq(), (e.GetTimeUnixMs()-t0.UnixMilli())/1000))
	}
	return strings.Join(s, " ")
}

func TestPersistAndOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.db")
	a, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Out of order, across batches, with peers that compare as strings
	// ("p" < "p\x00" < "pa") and a time before 1970.
	neg := ev("z", 1, 0)
	neg.TimeUnixMs = -5000
	if err := a.Append([]*wire.Event{ev("pa", 1, 3), ev("p", 2, 1), ev("p\x00", 1, 1), nil}); err != nil {
		t.Fatal(err)
	}
	if err := a.Append([]*wire.Event{ev("p", 1, 1), neg, ev("b", 9, 2)}); err != nil {
		t.Fatal(err)
	}
	if err := a.Append(nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := a.Query(time.Time{}, time.Time{}, nil, 0); err == nil {
		t.Error("Query after Close works")
	}
	if err := a.Append([]*wire.Event{ev("x", 1, 1)}); err == nil {
		t.Error("Append after Close works")
	}

	a = open(t, path, Options{})
	if a.Len() != 6 {
		t.Fatalf("Len after reopen = %d, want 6", a.Len())
	}
	got := all(t, a)
	want := fmt.Sprintf("z/1@%d p/1@1 p/2@1 p\x00/1@1 b/9@2 pa/1@3", (-5000-t0.UnixMilli())/1000)
	if ids(got) != want {
		t.Fatalf("order:\n got %q\nwant %q", ids(got), want)
	}
	if !proto.Equal(got[5], ev("pa", 1, 3)) {
		t.Errorf("event changed in storage: %v", got[5])
	}
}

func TestDuplicatesStoredOnce(t *testing.T) {
	a := open(t, filepath.Join(t.TempDir(), "events.db"), Options{})
	first := ev("p", 1, 1)
	dup := ev("p", 1, 1)
	dup.Type = "committed" // a different event under the same key: the first stays
	if err := a.Append([]*wire.Event{first, ev("p", 2, 1), first}); err != nil {
		t.Fatal(err)
	}
	if err := a.Append([]*wire.Event{dup, ev("p", 1, 2), ev("q", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	if a.Len() != 4 {
		t.Fatalf("Len = %d, want 4", a.Len())
	}
	got := all(t, a)
	if ids(got) != "p/1@1 p/2@1 q/1@1 p/1@2" {
		t.Fatalf("stored %q", ids(got))
	}
	if got[0].GetType() != "held" {
		t.Errorf("a duplicate replaced the first copy: %v", got[0])
	}
}

func TestQueryRangeLimitFilter(t *testing.T) {
	a := open(t, filepath.Join(t.TempDir(), "events.db"), Options{})
	var batch []*wire.Event
	for i := range 20 {
		batch = append(batch, ev("p", uint64(i+1), i))
	}
	if err := a.Append(batch); err != nil {
		t.Fatal(err)
	}
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	odd := func(e *wire.Event) bool { return e.GetSeq()%2 == 1 }
	cases := []struct {
		since, until time.Time
		match        func(*wire.Event) bool
		limit        int
		want         string
		more         int
	}{
		{time.Time{}, time.Time{}, nil, 3, "p/1@0 p/2@1 p/3@2", 17},
		{at(5), at(8), nil, 0, "p/6@5 p/7@6 p/8@7", 0}, // since inclusive, until exclusive
		{at(5), at(8), nil, 2, "p/6@5 p/7@6", 1},
		{at(5).Add(time.Microsecond), time.Time{}, nil, 2, "p/7@6 p/8@7", 12},
		{at(18), at(18).Add(time.Microsecond), nil, 0, "p/19@18", 0},
		{time.Time{}, at(6), odd, 0, "p/1@0 p/3@2 p/5@4", 0},
		{at(10), time.Time{}, odd, 2, "p/11@10 p/13@12", 3},
		{at(30), time.Time{}, nil, 0, "", 0},
		{at(8), at(5), nil, 0, "", 0},
	}
	for i, c := range cases {
		got, more, err := a.Query(c.since, c.until, c.match, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		if ids(got) != c.want || more != c.more {
			t.Errorf("case %d: %q, %d more; want %q, %d more", i, ids(got), more, c.want, c.more)
		}
	}

	// With a compiled CEL filter, as the manager answers EventsRequest.
	mixed := []*wire.Event{
		{Kind: wire.EventKind_EVENT_KIND_UTILIZATION, Type: "sample", Manager: "gm1", Peer: "u1", Seq: 1, TimeUnixMs: at(30).UnixMilli(),
			Body: &wire.Event_Utilization{Utilization: &wire.Utilization{CpuUtil: 0.9}}},
		{Kind: wire.EventKind_EVENT_KIND_UTILIZATION, Type: "sample", Manager: "gm1", Peer: "u1", Seq: 2, TimeUnixMs: at(31).UnixMilli(),
			Body: &wire.Event_Utilization{Utilization: &wire.Utilization{CpuUtil: 0.1}}},
	}
	if err := a.Append(mixed); err != nil {
		t.Fatal(err)
	}
	f, err := query.CompileEventFilter(`event.kind == "utilization" && event.utilization.cpu_util > 0.5`)
	if err != nil {
		t.Fatal(err)
	}
	match := func(e *wire.Event) bool { ok, err := f.Match(e); return ok && err == nil }
	got, more, err := a.Query(time.Time{}, time.Time{}, match, 10)
	if err != nil || more != 0 || len(got) != 1 || got[0].GetSeq() != 1 || got[0].GetPeer() != "u1" {
		t.Fatalf("filtered query: %q, %d more, %v", ids(got), more, err)
	}
}

func TestRetentionByAge(t *testing.T) {
	clk := &clock{t: t0.Add(10 * time.Second)}
	path := filepath.Join(t.TempDir(), "events.db")
	a := open(t, path, Options{MaxAge: 5 * time.Second, Now: clk.Now})
	var batch []*wire.Event
	for i := range 10 {
		batch = append(batch, ev("p", uint64(i+1), i+1)) // at 1..10 s
	}
	if err := a.Append(batch); err != nil {
		t.Fatal(err)
	}
	// Events older than 5 s (before 5 s) are not stored.
	if a.Len() != 6 {
		t.Fatalf("Len = %d, want 6 (events at 5..10 s)", a.Len())
	}
	clk.Set(t0.Add(13 * time.Second))
	// Query hides what Prune has not deleted yet.
	if got := ids(all(t, a)); got != "p/8@8 p/9@9 p/10@10" {
		t.Fatalf("Query after the clock moved: %q", got)
	}
	n, err := a.Prune()
	if err != nil || n != 3 || a.Len() != 3 {
		t.Fatalf("Prune = %d, %v; Len %d; want 3 deleted, 3 left", n, err, a.Len())
	}
	if n, err := a.Prune(); err != nil || n != 0 {
		t.Fatalf("second Prune = %d, %v", n, err)
	}
	a.Close()

	// Without a bound, reopened, everything left is there; with a far
	// later clock, all goes.
	b := open(t, path, Options{})
	if b.Len() != 3 {
		t.Fatalf("Len after reopen = %d", b.Len())
	}
	b.Close()
	clk.Set(t0.Add(time.Hour))
	c := open(t, path, Options{MaxAge: time.Minute, Now: clk.Now})
	if n, err := c.Prune(); err != nil || n != 3 || c.Len() != 0 {
		t.Fatalf("Prune = %d, %v; Len %d", n, err, c.Len())
	}
}

// Append prunes by age on its own after pruneEvery events.
func TestAppendPrunesByAge(t *testing.T) {
	clk := &clock{t: t0}
	a := open(t, filepath.Join(t.TempDir(), "events.db"), Options{MaxAge: time.Minute, Now: clk.Now})
	seq := uint64(0)
	appendN := func(n int) {
		var batch []*wire.Event
		for range n {
			seq++
			e := ev("p", seq, 0)
			e.TimeUnixMs = clk.Now().UnixMilli()
			batch = append(batch, e)
		}
		if err := a.Append(batch); err != nil {
			t.Fatal(err)
		}
	}
	appendN(600)
	clk.Set(t0.Add(2 * time.Minute))
	appendN(100)
	if a.Len() != 700 {
		t.Fatalf("Len = %d, want 700 (no pruning yet)", a.Len())
	}
	appendN(300) // 1000 since the last pruning
	if a.Len() != 400 {
		t.Fatalf("Len = %d, want 400 (the first 600 pruned)", a.Len())
	}
}

func TestRetentionByCount(t *testing.T) {
	a := open(t, filepath.Join(t.TempDir(), "events.db"), Options{MaxEvents: 100})
	for b := range 10 {
		var batch []*wire.Event
		for i := range 25 {
			batch = append(batch, ev("p", uint64(b*25+i+1), b*25+i))
		}
		if err := a.Append(batch); err != nil {
			t.Fatal(err)
		}
		if a.Len() > 110 {
			t.Fatalf("Len = %d after batch %d: more than MaxEvents + 10%%", a.Len(), b)
		}
	}
	if _, err := a.Prune(); err != nil {
		t.Fatal(err)
	}
	got := all(t, a)
	if a.Len() != 100 || len(got) != 100 || got[0].GetSeq() != 151 || got[99].GetSeq() != 250 {
		t.Fatalf("Len %d, %d events from %d to %d; want the newest 100 (151..250)", a.Len(), len(got), got[0].GetSeq(), got[len(got)-1].GetSeq())
	}
}

// A record that does not decode is skipped and counted.
func TestBadRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.db")
	a := open(t, path, Options{})
	if err := a.Append([]*wire.Event{ev("p", 1, 1), ev("p", 2, 2), ev("p", 3, 3)}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		if err := b.Put(eventKey(ev("p", 2, 2)), []byte{0xff, 0xff, 0xff}); err != nil {
			return err
		}
		_, err := b.CreateBucket(eventKey(ev("q", 1, 2))) // a nested bucket where a record should be
		return err
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	a = open(t, path, Options{})
	got := all(t, a)
	if ids(got) != "p/1@1 p/3@3" || a.BadRecords() != 2 {
		t.Fatalf("Query = %q, %d bad; want p/1 and p/3, 2 bad", ids(got), a.BadRecords())
	}
}

func TestRefusesForeignFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("reservations")); return err })
	db.Close()
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "not an event archive") {
		t.Fatalf("Open of a foreign file: %v", err)
	}
	db, _ = bolt.Open(path, 0o600, nil)
	db.Update(func(tx *bolt.Tx) error {
		m, err := tx.CreateBucket(boltfile.Meta)
		if err != nil {
			return err
		}
		return m.Put(boltfile.FormatKey, []byte("2"))
	})
	db.Close()
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), `format "2"`) {
		t.Fatalf("Open of format 2: %v", err)
	}
}

func TestConcurrent(t *testing.T) {
	a := open(t, filepath.Join(t.TempDir(), "events.db"), Options{MaxEvents: 500})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 4 {
		wg.Go(func() {
			peer := fmt.Sprintf("w%d", w)
			for b := range 20 {
				var batch []*wire.Event
				for i := range 20 {
					batch = append(batch, ev(peer, uint64(b*20+i+1), b))
				}
				if err := a.Append(batch); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for range 50 {
				evs, _, err := a.Query(time.Time{}, time.Time{}, func(e *wire.Event) bool { return e.GetSeq()%3 == 0 }, 50)
				if err != nil {
					errs <- err
					return
				}
				for i := 1; i < len(evs); i++ {
					if evs[i].GetTimeUnixMs() < evs[i-1].GetTimeUnixMs() {
						errs <- errors.New("query out of time order")
						return
					}
				}
				_ = a.Len()
			}
		})
	}
	wg.Go(func() {
		for range 10 {
			if _, err := a.Prune(); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, err := a.Prune(); err != nil {
		t.Fatal(err)
	}
	if n := len(all(t, a)); n != 500 || a.Len() != 500 {
		t.Fatalf("%d events, Len %d; want 500", n, a.Len())
	}
}

func TestSecondOpenTimesOut(t *testing.T) {
	if testing.Short() {
		t.Skip("waits DefaultTimeout")
	}
	path := filepath.Join(t.TempDir(), "events.db")
	open(t, path, Options{})
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Open: %v", err)
	}
}

func BenchmarkAppend(b *testing.B) {
	a := open(b, filepath.Join(b.TempDir(), "events.db"), Options{MaxEvents: 100000})
	seq := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		batch := make([]*wire.Event, 100)
		for i := range batch {
			seq++
			batch[i] = ev("12D3KooWbench", seq, int(seq/100))
		}
		if err := a.Append(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "events/s")
}
