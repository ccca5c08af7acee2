package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/wire"
)

// The machine's disk sets the pace, so each benchmark measures, in the
// same run and directory, the raw rate of 1-byte write + fdatasync for as
// long as the submissions took, and reports submits/fsync: durable
// submissions per raw fsync. A bbolt commit costs two syncs (data pages,
// then the meta page), so one submit per commit would be about 0.5;
// anything above that is what group commit buys.

const submitters = 32

// submitRecord is a job as a submit leaves it, about 1 KB encoded.
func submitRecord(id string) *wire.JobRecord {
	r := &wire.JobRecord{
		RequestId: "req-0123456789abcdef",
		Spec: &wire.JobSpec{
			Name: "render", BundleSha256: strings.Repeat("ab", 32), App: "render",
			Args: []string{"--frames", "1-100", "--quality", "high", "--scene", "scenes/city-night.blend"},
			Env:  map[string]string{"OMP_NUM_THREADS": "4", "RENDER_MODE": "final", "LANG": "C.UTF-8"},
			Cpus: 4000, Mem: 8 << 30, RuntimeMs: 3600_000,
			Requirement: `arch == "amd64" && mem >= 8Gi && has(attrs.gpu)`,
			Rank:        "-load",
			Outputs:     []string{"frames.tar", "log.txt"},
			OutputDir:   "/home/alice/renders/city-night/output-directory",
		},
		Info: &wire.JobInfo{Id: id, Cluster: id, Name: "render", User: "alice", OwnerPeer: "12D3KooWabcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH", State: wire.JobState_JOB_STATE_IDLE, SubmittedUnixMs: time.Now().UnixMilli()},
	}
	for i := range 8 {
		r.Spec.Inputs = append(r.Spec.Inputs, &wire.JobFile{Path: fmt.Sprintf("in/part-%d.dat", i), Sha256: strings.Repeat(fmt.Sprint(i), 64), Size: 1 << 20, Mode: 0o644})
	}
	r.Info.Log = []*wire.JobLogEntry{{TimeUnixMs: r.Info.SubmittedUnixMs, Type: "submitted", Detail: "1 job"}}
	return r
}

// fdatasyncRate writes 1 byte and fdatasyncs it in a loop in dir for d,
// and returns syncs/s.
func fdatasyncRate(b *testing.B, dir string, d time.Duration) float64 {
	f, err := os.OpenFile(filepath.Join(dir, "fsync.probe"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	one := []byte{1}
	n := 0
	start := time.Now()
	for time.Since(start) < d || n < 10 {
		if _, err := f.WriteAt(one, int64(n%4096)); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds()
}

// runSubmits runs b.N submits from 32 goroutines with submit, then the
// fsync probe for as long, and reports the rates.
func runSubmits(b *testing.B, dir string, submit func(r *wire.JobRecord) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range submitters {
		wg.Go(func() {
			r := submitRecord("")
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				r.Info.Id = fmt.Sprintf("gm.%d", i) // clusters as the queue numbers them
				r.Info.Cluster = r.Info.Id
				if err := submit(r); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	b.StopTimer()
	submits := float64(b.N) / took.Seconds()
	fsyncs := fdatasyncRate(b, dir, took)
	b.ReportMetric(submits, "submits/s")
	b.ReportMetric(fsyncs, "fsyncs/s")
	b.ReportMetric(submits/fsyncs, "submits/fsync")
}

// BenchmarkSubmit32: 32 goroutines each Write one ~1 KB record at a time.
func BenchmarkSubmit32(b *testing.B) {
	dir := b.TempDir()
	s, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if n := proto.Size(submitRecord("gm1.1")); n < 900 || n > 1300 {
		b.Fatalf("record is %d bytes, want about 1 KB", n)
	}
	first := lastTx(b, s)
	runSubmits(b, dir, func(r *wire.JobRecord) error {
		return s.Write([]*wire.JobRecord{r}, 0, nil)
	})
	st := s.Stats()
	b.ReportMetric(float64(st.Writes)/float64(max(st.Commits, 1)), "writes/commit")
	b.ReportMetric(float64(lastTx(b, s)-first), "commits")
}

// BenchmarkSubmit32DBBatch is the same load through bbolt's DB.Batch (the
// alternative to Store's writer loop), on the same file, with bbolt's
// default MaxBatchDelay (10 ms) and shorter ones: DB.Batch commits when
// its timer fires (or MaxBatchSize, 1000, is reached), so its throughput
// hangs on a delay tuned to the disk.
func BenchmarkSubmit32DBBatch(b *testing.B) {
	for _, delay := range []time.Duration{10 * time.Millisecond, time.Millisecond, 200 * time.Microsecond} {
		b.Run("delay="+delay.String(), func(b *testing.B) {
			dir := b.TempDir()
			s, err := Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			s.db.MaxBatchDelay = delay
			first := lastTx(b, s)
			runSubmits(b, dir, func(r *wire.JobRecord) error {
				k := []byte(r.Info.Id)
				v, err := proto.Marshal(r)
				if err != nil {
					return err
				}
				return s.db.Batch(func(tx *bolt.Tx) error {
					return tx.Bucket(bucketJobs).Put(k, v)
				})
			})
			b.ReportMetric(float64(b.N)/float64(max(lastTx(b, s)-first, 1)), "writes/commit")
		})
	}
}

// lastTx is the id of the last committed write transaction.
func lastTx(b *testing.B, s *Store) int {
	var id int
	if err := s.db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil }); err != nil {
		b.Fatal(err)
	}
	return id
}
