package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/wire"
)

func rec(id string, state wire.JobState) *wire.JobRecord {
	return &wire.JobRecord{
		Spec: &wire.JobSpec{Name: "job", App: "sleep", Args: []string{"1"}, Cpus: 1000},
		Info: &wire.JobInfo{Id: id, Cluster: strings.TrimSuffix(id, "[0]"), State: state, User: "alice"},
	}
}

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func load(t *testing.T, s *Store) (uint64, map[string]*wire.JobRecord) {
	t.Helper()
	next, recs, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]*wire.JobRecord)
	for _, r := range recs {
		m[r.Info.Id] = r
	}
	return next, m
}

func TestWriteLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	a, b := rec("gm1.1", wire.JobState_JOB_STATE_IDLE), rec("gm1.2[0]", wire.JobState_JOB_STATE_IDLE)
	if err := s.Write([]*wire.JobRecord{a, b}, 2, nil); err != nil {
		t.Fatal(err)
	}
	a2 := rec("gm1.1", wire.JobState_JOB_STATE_RUNNING)
	// A smaller counter does not lower the stored one; forget after saves.
	if err := s.Write([]*wire.JobRecord{a2}, 1, []string{"gm1.2[0]"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Write([]*wire.JobRecord{a}, 0, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v, want ErrClosed", err)
	}
	s = open(t, dir)
	next, m := load(t, s)
	if next != 2 || len(m) != 1 || !proto.Equal(m["gm1.1"], a2) {
		t.Fatalf("loaded next %d, %v; want 2 and gm1.1 running", next, m)
	}
	if err := s.Write([]*wire.JobRecord{{Info: &wire.JobInfo{}}}, 0, nil); err == nil || !strings.Contains(err.Error(), "no info.id") {
		t.Fatalf("save without id: %v", err)
	}
}

func TestNotAJobStore(t *testing.T) {
	dir := t.TempDir()
	db, err := bolt.Open(filepath.Join(dir, "jobs.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("other")); return err })
	db.Close()
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "not a job store") {
		t.Fatalf("Open of a foreign file: %v", err)
	}
}

// Many goroutines write at once: every Write is durable when it returns,
// and they share transactions.
func TestGroupCommit(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	const G, N = 32, 20
	var wg sync.WaitGroup
	for g := range G {
		wg.Go(func() {
			for i := range N {
				id := fmt.Sprintf("gm%d.%d", g, i)
				if err := s.Write([]*wire.JobRecord{rec(id, wire.JobState_JOB_STATE_IDLE)}, uint64(g*N+i+1), nil); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// Later saves of the same id win, in call order.
	for i := range 3 {
		r := rec("gm0.0", wire.JobState_JOB_STATE_IDLE)
		r.Info.Tries = uint32(i)
		if err := s.Write([]*wire.JobRecord{r}, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	t.Logf("%d writes in %d commits", st.Writes, st.Commits)
	if st.Writes != G*N+3 || st.Commits >= st.Writes-3 || st.Failed != 0 {
		t.Fatalf("stats %+v: want %d writes in fewer commits", st, G*N+3)
	}
	// Reopen without Close (the writer is idle: everything acknowledged
	// must be in the file). bbolt's lock is per open file, so copy it.
	cp := t.TempDir()
	copyFile(t, filepath.Join(dir, "jobs.db"), filepath.Join(cp, "jobs.db"))
	s2 := open(t, cp)
	next, m := load(t, s2)
	if next != G*N || len(m) != G*N || m["gm0.0"].Info.Tries != 2 {
		t.Fatalf("after reopen: next %d, %d records (tries of gm0.0: %d); want %d, %d, 2", next, len(m), m["gm0.0"].GetInfo().GetTries(), G*N, G*N)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptRecordSkipped(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if err := s.Write([]*wire.JobRecord{rec("gm1.1", 1), rec("gm1.3", 1)}, 3, nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := bolt.Open(filepath.Join(dir, "jobs.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := proto.Marshal(rec("gm9.9", 1))
	db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketJobs)
		b.Put([]byte("gm1.2"), []byte{0xff, 0xff, 0xff})
		b.Put([]byte("gm1.4"), other)
		return nil
	})
	db.Close()
	s = open(t, dir)
	next, recs, err := s.Load()
	var ce *CorruptError
	if !errors.As(err, &ce) || len(ce.Records) != 2 || ce.Records[0].Key != "gm1.2" || ce.Records[1].Key != "gm1.4" {
		t.Fatalf("Load: %v; want a CorruptError naming gm1.2 and gm1.4", err)
	}
	t.Log(err)
	if !strings.Contains(err.Error(), `"gm1.2"`) || !strings.Contains(err.Error(), "jobs.db") {
		t.Fatalf("error %q does not name the key and the file", err)
	}
	if next != 3 || len(recs) != 2 || recs[0].Info.Id != "gm1.1" || recs[1].Info.Id != "gm1.3" {
		t.Fatalf("Load: next %d, %d records; want 3 and gm1.1, gm1.3", next, len(recs))
	}
}

func TestSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	open(t, dir)
	if _, err := OpenWith(dir, Options{Timeout: 50e6}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Open: %v", err)
	}
}

// A failed transaction fails every Write in it, and the store refuses
// Writes after it.
func TestFailedCommitFailsAll(t *testing.T) {
	s := open(t, t.TempDir())
	if err := s.Write([]*wire.JobRecord{rec("gm1.1", 1)}, 1, nil); err != nil {
		t.Fatal(err)
	}
	s.db.Close() // every commit from now on fails
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for i := range 8 {
		wg.Go(func() {
			if err := s.Write([]*wire.JobRecord{rec(fmt.Sprintf("gm2.%d", i), 1)}, 0, nil); err != nil {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed != 8 {
		t.Fatalf("%d of 8 Writes failed, want all", failed)
	}
	err := s.Write([]*wire.JobRecord{rec("gm3.1", 1)}, 0, nil)
	if err == nil || !strings.Contains(err.Error(), "an earlier commit failed") {
		t.Fatalf("Write after a failed commit: %v", err)
	}
	t.Log(err)
	if st := s.Stats(); st.Failed == 0 || st.Commits != 1 {
		t.Fatalf("stats %+v", st)
	}
}
