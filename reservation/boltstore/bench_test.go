package boltstore

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/reservation"
)

// The machine is noisy, so Write is reported against the disk's own
// single-fsync commit rate, measured in the same benchmark just before and
// just after (the rate over both probes: the shared disk's rate swings):
// x_fsync = records/s ÷ fsync commits/s. A bbolt commit costs two fsyncs
// (data pages, then the meta page), so batch=1 lands near 0.5; larger
// batches show what group commit buys. cpu_us/record is the process's CPU
// time (getrusage, user + system) per record written.

// fsyncBaselineOps is how many fsyncs measure the baseline in BenchmarkWrite.
const fsyncBaselineOps = 200

var fsyncRecord = make([]byte, 200)

// fsyncFile opens an append-only file in dir for the baseline.
func fsyncFile(tb testing.TB, dir string) *os.File {
	f, err := os.OpenFile(filepath.Join(dir, "fsync.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}

func fsyncOnce(tb testing.TB, f *os.File) {
	if _, err := f.Write(fsyncRecord); err != nil {
		tb.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		tb.Fatal(err)
	}
}

// fsyncRate runs n append+fsync commits in dir and returns commits/s.
func fsyncRate(tb testing.TB, dir string, n int) float64 {
	f := fsyncFile(tb, dir)
	fsyncOnce(tb, f) // allocate the first block outside the timing
	start := time.Now()
	for range n {
		fsyncOnce(tb, f)
	}
	return float64(n) / time.Since(start).Seconds()
}

// cpuTime is the CPU time (user + system) this process has used so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFsync is the baseline: append ~200 bytes to a file and fsync it.
func BenchmarkFsync(b *testing.B) {
	f := fsyncFile(b, b.TempDir())
	fsyncOnce(b, f)
	for b.Loop() {
		fsyncOnce(b, f)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// BenchmarkWrite writes batches of new records, one Write per op.
func BenchmarkWrite(b *testing.B) {
	for _, n := range []int{1, 32, 256} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			base := fsyncRate(b, dir, fsyncBaselineOps)
			s, err := Open(filepath.Join(dir, "reservations.db"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			batch := reservation.Batch{Changes: make([]reservation.Change, n)}
			recs := make([]reservation.Reservation, n)
			seq := uint64(1)
			cpu0 := cpuTime(b)
			for b.Loop() {
				for i := range n {
					recs[i] = rec(id("gm1", seq), int(seq))
					batch.Changes[i] = reservation.Change{ID: recs[i].ID, Rec: &recs[i]}
					seq++
				}
				batch.NextSeq = seq
				if err := s.Write(batch); err != nil {
					b.Fatal(err)
				}
			}
			cpu := cpuTime(b) - cpu0
			after := fsyncRate(b, dir, fsyncBaselineOps)
			base = 2 / (1/base + 1/after)
			perSec := float64(b.N*n) / b.Elapsed().Seconds()
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), "cpu_us/record")
			b.ReportMetric(perSec, "records/s")
			b.ReportMetric(perSec/base, "x_fsync")
			b.ReportMetric(base, "fsync_commits/s")
		})
	}
}
