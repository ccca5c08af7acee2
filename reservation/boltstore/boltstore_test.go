package boltstore

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/gridmgr/gridmgr/reservation"
)

var tag = reservation.Tag("12D3KooWTestPeer")

func id(name string, seq uint64) string { return reservation.FormatID(name, seq, tag) }

// rec returns a record with every field set, derived from i only. Times
// come from time.Unix(...).UTC(): no monotonic reading and the location a
// JSON round trip gives back, so reflect.DeepEqual compares them.
func rec(rid string, i int) reservation.Reservation {
	t0 := time.Unix(1_700_000_000+int64(i), int64(i)*1000+7).UTC()
	return reservation.Reservation{
		ID:     rid,
		Holder: reservation.Holder{Peer: "12D3KooWTestPeer", User: "user" + strconv.Itoa(i%7)},
		Amounts: []reservation.Amount{
			{Kind: reservation.CPUs, N: int64(1 + i%16)},
			{Kind: "gpus", N: 2},
			{Kind: reservation.Mem, N: int64(i+1) << 30},
		},
		State:     reservation.Committed,
		Created:   t0,
		Updated:   t0.Add(time.Second),
		Expires:   t0.Add(5 * time.Minute),
		Lease:     5 * time.Minute,
		RequestID: fmt.Sprintf("req-%d", i),
		Group:     fmt.Sprintf("grp-%d", i/4),
		Reason:    "test ünïcode \"quoted\"",
		Ops: []reservation.OpRecord{
			{RequestID: fmt.Sprintf("c-%d", i), Op: reservation.OpCommit, State: reservation.Committed, Expires: t0.Add(time.Minute)},
			{RequestID: fmt.Sprintf("r-%d", i), Op: reservation.OpRenew, State: reservation.Committed, Expires: t0.Add(5 * time.Minute)},
		},
	}
}

func upsert(r reservation.Reservation) reservation.Change {
	return reservation.Change{ID: r.ID, Rec: &r}
}

func del(rid string) reservation.Change { return reservation.Change{ID: rid} }

func open(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(path, Options{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func load(t testing.TB, s *Store) reservation.Snapshot {
	t.Helper()
	snap, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func write(t testing.TB, s *Store, b reservation.Batch) {
	t.Helper()
	if err := s.Write(b); err != nil {
		t.Fatal(err)
	}
}

func sortRecs(rs []reservation.Reservation) []reservation.Reservation {
	slices.SortFunc(rs, func(a, b reservation.Reservation) int { return strings.Compare(a.ID, b.ID) })
	return rs
}

func checkSnap(t *testing.T, got reservation.Snapshot, want []reservation.Reservation, seq uint64) {
	t.Helper()
	want = sortRecs(slices.Clone(want))
	if len(got.Records) != len(want) {
		t.Fatalf("loaded %d records, want %d", len(got.Records), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got.Records[i], want[i]) {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, got.Records[i], want[i])
		}
	}
	if got.NextSeq != seq {
		t.Fatalf("NextSeq %d, want %d", got.NextSeq, seq)
	}
}

// txid is the id of the last committed write transaction.
func txid(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.db.View(func(tx *bolt.Tx) error { n = tx.ID(); return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reservations.db")
	s := open(t, path)
	checkSnap(t, load(t, s), nil, 0)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("file mode %v, want 0600", m)
	}
}

func TestRoundTrip(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "reservations.db"))
	var want []reservation.Reservation
	var b reservation.Batch
	for i := 5; i >= 1; i-- { // written out of order; loaded sorted
		r := rec(id("gm1", uint64(i)), i)
		want = append(want, r)
		b.Changes = append(b.Changes, upsert(r))
	}
	// A record with zero times, no ops and no optional fields.
	bare := reservation.Reservation{ID: id("gm1", 6), Holder: reservation.Holder{Peer: "p"},
		Amounts: []reservation.Amount{{Kind: reservation.CPUs, N: 1}}, State: reservation.Held}
	want = append(want, bare)
	b.Changes = append(b.Changes, upsert(bare))
	b.NextSeq = 7
	write(t, s, b)
	checkSnap(t, load(t, s), want, 7)
}

func TestUpdateAndDelete(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "reservations.db"))
	r1, r2, r3 := rec(id("gm1", 1), 1), rec(id("gm1", 2), 2), rec(id("gm1", 3), 3)
	write(t, s, reservation.Batch{Changes: []reservation.Change{upsert(r1), upsert(r2), upsert(r3)}, NextSeq: 4})

	r2b := r2.Clone()
	r2b.State = reservation.Released
	r2b.Ops = append(r2b.Ops, reservation.OpRecord{RequestID: "rel", Op: reservation.OpRelease, State: reservation.Released, Expires: r2.Expires})
	write(t, s, reservation.Batch{Changes: []reservation.Change{
		upsert(r2b),
		del(r1.ID),
		del(id("gm1", 99)), // never stored: deleting it is not an error
	}, NextSeq: 4})
	checkSnap(t, load(t, s), []reservation.Reservation{r2b, r3}, 4)

	// Upsert and delete of one ID in one batch: the last change wins.
	write(t, s, reservation.Batch{Changes: []reservation.Change{upsert(r1), del(r1.ID), del(r3.ID), upsert(r3)}, NextSeq: 4})
	checkSnap(t, load(t, s), []reservation.Reservation{r2b, r3}, 4)
}

func TestNextSeqNeverDecreases(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "reservations.db"))
	r1 := rec(id("gm1", 1), 1)
	write(t, s, reservation.Batch{Changes: []reservation.Change{upsert(r1)}, NextSeq: 10})
	checkSnap(t, load(t, s), []reservation.Reservation{r1}, 10)

	// A lower NextSeq with changes: the changes are written, the seq is not.
	r2 := rec(id("gm1", 2), 2)
	write(t, s, reservation.Batch{Changes: []reservation.Change{upsert(r2)}, NextSeq: 5})
	checkSnap(t, load(t, s), []reservation.Reservation{r1, r2}, 10)

	// Empty batches that do not raise the seq: no transaction at all.
	tx0 := txid(t, s)
	write(t, s, reservation.Batch{NextSeq: 3})
	write(t, s, reservation.Batch{NextSeq: 10})
	write(t, s, reservation.Batch{})
	if tx := txid(t, s); tx != tx0 {
		t.Errorf("empty batches committed %d transactions, want none", tx-tx0)
	}
	// An empty batch that raises it: one transaction.
	write(t, s, reservation.Batch{NextSeq: 11})
	if tx := txid(t, s); tx != tx0+1 {
		t.Errorf("seq-only batch committed %d transactions, want 1", tx-tx0)
	}
	checkSnap(t, load(t, s), []reservation.Reservation{r1, r2}, 11)

	// Also across a reopen (the cached seq is read back at Open).
	path := s.Path()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	write(t, s, reservation.Batch{NextSeq: 2})
	checkSnap(t, load(t, s), []reservation.Reservation{r1, r2}, 11)
}

func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reservations.db")
	s := open(t, path)
	var want []reservation.Reservation
	for i := 1; i <= 50; i++ {
		r := rec(id("gm1", uint64(i)), i)
		want = append(want, r)
		write(t, s, reservation.Batch{Changes: []reservation.Change{upsert(r)}, NextSeq: uint64(i + 1)})
	}
	write(t, s, reservation.Batch{Changes: []reservation.Change{del(want[0].ID)}, NextSeq: 51})
	want = want[1:]
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Load(); err == nil {
		t.Error("Load after Close succeeded")
	}
	if err := s.Write(reservation.Batch{NextSeq: 100}); err == nil || !errors.Is(err, berrors.ErrDatabaseNotOpen) {
		t.Errorf("Write after Close: %v, want ErrDatabaseNotOpen", err)
	}

	s = open(t, path)
	checkSnap(t, load(t, s), want, 51)
}

// poke writes v under key in bucket of the bbolt file at path, behind the
// store's back.
func poke(t *testing.T, path, bucket, key string, v []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(bucket))
		if err != nil {
			return err
		}
		if v == nil {
			return b.Delete([]byte(key))
		}
		return b.Put([]byte(key), v)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCorruptRecord(t *testing.T) {
	good := rec(id("gm1", 1), 1)
	other := rec(id("gm1", 3), 3)
	otherJSON := fmt.Sprintf(`{"id":%q,"state":2}`, other.ID)
	for _, tc := range []struct {
		name, key, value, want string
	}{
		{"garbage", id("gm1", 2), "\x00\xffnot json", "does not decode"},
		{"truncated", id("gm1", 2), `{"id":"` + id("gm1", 2) + `","state":`, "does not decode"},
		{"wrong type", id("gm1", 2), `{"id":"` + id("gm1", 2) + `","state":"held"}`, "does not decode"},
		{"trailing", id("gm1", 2), `{"id":"` + id("gm1", 2) + `"} x`, "does not decode"},
		{"key differs from ID", id("gm1", 2), otherJSON, "key and ID differ"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "reservations.db")
			s := open(t, path)
			write(t, s, reservation.Batch{Changes: []reservation.Change{upsert(good)}, NextSeq: 4})
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			poke(t, path, "reservations", tc.key, []byte(tc.value))
			s = open(t, path)
			_, err := s.Load()
			if err == nil {
				t.Fatal("Load of a corrupted store succeeded")
			}
			for _, w := range []string{path, strconv.Quote(tc.key), tc.want} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			t.Logf("error: %v", err)
		})
	}
}

func TestBadSeq(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reservations.db")
	s := open(t, path)
	s.Close()
	poke(t, path, "meta", "next_seq", []byte{1, 2, 3})
	_, err := Open(path, Options{Timeout: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "next_seq") {
		t.Fatalf("Open with a 3-byte next_seq: %v", err)
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(t *testing.T, path string)
		errHas string
	}{
		{"format 2", func(t *testing.T, path string) {
			open(t, path).Close()
			poke(t, path, "meta", "format", []byte("2"))
		}, `format "2"`},
		{"no format", func(t *testing.T, path string) {
			open(t, path).Close()
			poke(t, path, "meta", "format", nil)
		}, `no "format" key`},
		{"foreign bbolt file", func(t *testing.T, path string) {
			poke(t, path, "something_else", "k", []byte("v"))
		}, "not a reservation store"},
		{"not bbolt", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte(strings.Repeat("this is not a bbolt file\n", 1000)), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "reservations.db")
			tc.setup(t, path)
			s, err := Open(path, Options{Timeout: 200 * time.Millisecond})
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("error %q does not name the file and %q", err, tc.errHas)
			}
			t.Logf("error: %v", err)
			// The refused file is closed: bbolt can lock it again at once.
			if tc.name != "not bbolt" {
				db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 100 * time.Millisecond})
				if err != nil {
					t.Fatalf("file still locked after a refused Open: %v", err)
				}
				db.Close()
			}
		})
	}
}

func TestInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reservations.db")
	s := open(t, path)
	start := time.Now()
	s2, err := Open(path, Options{Timeout: 300 * time.Millisecond})
	took := time.Since(start)
	if err == nil {
		s2.Close()
		t.Fatal("second Open of an open store succeeded")
	}
	want := "reservation store " + path + " is in use by another process"
	if !strings.Contains(err.Error(), want) || !errors.Is(err, berrors.ErrTimeout) {
		t.Errorf("error %q, want it to contain %q and wrap bbolt's ErrTimeout", err, want)
	}
	if took > 3*time.Second {
		t.Errorf("second Open took %v with a 300ms timeout", took)
	}
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)

	// Once the first is closed, the file opens.
	s.Close()
	s2, err = Open(path, Options{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
}

func TestBatchAtomic(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "reservations.db"))
	var first reservation.Batch
	for i := 1; i <= 100; i++ {
		first.Changes = append(first.Changes, upsert(rec(id("gm1", uint64(i)), i)))
	}
	first.NextSeq = 101
	write(t, s, first)

	// One batch: 200 new records, 50 deletes, 50 updates, a new seq.
	var b reservation.Batch
	want := map[string]*reservation.Reservation{}
	for i := 101; i <= 300; i++ {
		b.Changes = append(b.Changes, upsert(rec(id("gm1", uint64(i)), i)))
	}
	for i := 1; i <= 50; i++ {
		b.Changes = append(b.Changes, del(id("gm1", uint64(i))))
	}
	for i := 51; i <= 100; i++ {
		r := rec(id("gm1", uint64(i)), i)
		r.State = reservation.Expired
		b.Changes = append(b.Changes, upsert(r))
	}
	b.NextSeq = 301
	for _, c := range b.Changes {
		want[c.ID] = c.Rec
	}
	tx0 := txid(t, s)
	write(t, s, b)
	if tx := txid(t, s); tx != tx0+1 {
		t.Fatalf("a batch of %d changes took %d transactions, want 1", len(b.Changes), tx-tx0)
	}
	// All of it is visible in one read transaction.
	err := s.db.View(func(tx *bolt.Tx) error {
		rb := tx.Bucket([]byte("reservations"))
		for rid, r := range want {
			v := rb.Get([]byte(rid))
			if r == nil {
				if v != nil {
					return fmt.Errorf("deleted %s still there", rid)
				}
				continue
			}
			if v == nil {
				return fmt.Errorf("%s missing", rid)
			}
			if !strings.Contains(string(v), `"state":`+strconv.Itoa(int(r.State))) {
				return fmt.Errorf("%s has old content %s", rid, v)
			}
		}
		if n := rb.Stats().KeyN; n != 250 {
			return fmt.Errorf("%d records, want 250", n)
		}
		if v := tx.Bucket([]byte("meta")).Get([]byte("next_seq")); string(v) != "\x00\x00\x00\x00\x00\x00\x01\x2d" {
			return fmt.Errorf("next_seq %x, want 301", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A batch that fails half way leaves nothing behind.
	before := load(t, s)
	var bad reservation.Batch
	for i := 301; i <= 350; i++ {
		bad.Changes = append(bad.Changes, upsert(rec(id("gm1", uint64(i)), i)))
	}
	bad.Changes = append(bad.Changes, del(id("gm1", 60)))
	wrong := rec(id("gm1", 999), 999)
	bad.Changes = append(bad.Changes, reservation.Change{ID: id("gm1", 351), Rec: &wrong})
	bad.NextSeq = 400
	err = s.Write(bad)
	if err == nil || !strings.Contains(err.Error(), s.Path()) || !strings.Contains(err.Error(), id("gm1", 999)) {
		t.Fatalf("Write of a bad batch: %v", err)
	}
	t.Logf("bad batch: %v", err)
	checkSnap(t, load(t, s), before.Records, before.NextSeq)
	// And the cached seq did not move: a later seq-only batch below 400 is written.
	write(t, s, reservation.Batch{NextSeq: 302})
	if got := load(t, s).NextSeq; got != 302 {
		t.Fatalf("NextSeq %d after a failed batch and a raise to 302", got)
	}
}

// The crash test: a child process writes batches in a loop and prints
// "ack N" after each Write returns; the parent kills it with SIGKILL and
// checks that the store holds every acknowledged batch, intact, and
// exactly a prefix of the batches (each batch applied entirely or not at
// all). Batch i upserts keep-i and tmp-i, deletes tmp-(i-1) and sets
// NextSeq i+1. Three rounds on one file; each child resumes from the
// stored NextSeq.
//
// SIGKILL loses what the process holds, not what the kernel holds: this
// checks that bbolt's commits are atomic against a dying writer, not that
// they reach the platter (that is fsync's job, which NoSync=false keeps).

const childEnv = "BOLTSTORE_CHILD"

func crashBatch(i uint64) reservation.Batch {
	b := reservation.Batch{NextSeq: i + 1, Changes: []reservation.Change{
		upsert(rec(id("keep", i), int(i))),
		upsert(rec(id("tmp", i), int(i))),
	}}
	if i > 1 {
		b.Changes = append(b.Changes, del(id("tmp", i-1)))
	}
	return b
}

func crashChild(path string) {
	s, err := Open(path, Options{Timeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	snap, err := s.Load()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	deadline := time.Now().Add(20 * time.Second) // the parent kills us long before
	for i := max(1, snap.NextSeq); time.Now().Before(deadline); i++ {
		if err := s.Write(crashBatch(i)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stdout, "ack %d\n", i) // os.Stdout is unbuffered
	}
	os.Exit(3)
}

func TestCrash(t *testing.T) {
	if p := os.Getenv(childEnv); p != "" {
		crashChild(p)
		return
	}
	if testing.Short() {
		t.Skip("spawns processes")
	}
	path := filepath.Join(t.TempDir(), "reservations.db")
	var lastAck uint64
	for round := 1; round <= 3; round++ {
		killAfter := 20 + rand.IntN(40)
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrash$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+path)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acks, killed := 0, false
		sc := bufio.NewScanner(out)
		timer := time.AfterFunc(15*time.Second, func() { cmd.Process.Kill() })
		for sc.Scan() {
			f, ok := strings.CutPrefix(sc.Text(), "ack ")
			if !ok {
				continue
			}
			n, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				t.Fatalf("child printed %q", sc.Text())
			}
			if n != lastAck+1 {
				t.Fatalf("round %d: child acknowledged %d after %d", round, n, lastAck)
			}
			lastAck = n
			acks++
			if acks == killAfter && !killed {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				killed = true
			}
		}
		timer.Stop()
		err = cmd.Wait()
		if !killed {
			t.Fatalf("round %d: child ended after %d acks: %v\n%s", round, acks, err, stderr.String())
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child: %v, want killed\n%s", round, err, stderr.String())
		}

		s := open(t, path)
		snap := load(t, s)
		s.Close()
		// The store is batches 1..k for k = lastAck or lastAck+1 (one
		// batch may have committed after the last ack was printed).
		k := snap.NextSeq - 1
		if k != lastAck && k != lastAck+1 {
			t.Fatalf("round %d: stored NextSeq %d, last ack %d", round, snap.NextSeq, lastAck)
		}
		var want []reservation.Reservation
		for i := uint64(1); i <= k; i++ {
			want = append(want, rec(id("keep", i), int(i)))
		}
		want = append(want, rec(id("tmp", k), int(k)))
		checkSnap(t, snap, want, k+1)
		t.Logf("round %d: killed after %d acks (last %d); store holds batches 1..%d", round, acks, lastAck, k)
		lastAck = k
	}
}
