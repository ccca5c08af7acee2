// Package store keeps a submit manager's job queue (package jobs) durable
// in its data dir: the job records and the cluster counter in a bbolt
// file, and a spool of the files jobs take in (blobs, named by their
// sha256) and bring back (each job's results).
//
// # On-disk layout
//
//	DIR/jobs.db      bbolt, mode 0600:
//	                   jobs  key: job id ("gm152.17[3]"); value: wire.JobRecord
//	                         (protobuf); the record's info.id equals its key
//	                   meta  "format" = "1" (internal/boltfile; others are refused)
//	                         "next"   = 8-byte big-endian uint64, the cluster
//	                                    counter (absent: 0); it only grows
//	DIR/spool/blobs/SHA256              a complete blob, content checked
//	DIR/spool/blobs/tmp/SHA256.part     an upload under way (resumable)
//	DIR/spool/jobs/JOBDIR/try-N/        what try N fetched: stdout, stderr, out/...
//	DIR/spool/jobs/JOBDIR/results/      the accepted try's files (renamed try-N)
//	DIR/spool/jobs/JOBDIR/accepted      N of the accepted try
//
// JOBDIR is JobDirName(job id): "gm152.17[3]" is "gm152.17%5B3%5D".
//
// # Writing: group commit
//
// Write hands its records to one writer goroutine, which takes every
// Write queued while the previous transaction was committing and commits
// them in one bbolt transaction (one fsync pass: bbolt syncs the data
// pages, then the meta page). A commit costs about the same for 16 records
// as for 64, so N concurrent submissions cost one commit, not N. When the
// last group held more than one Write, the writer lingers (a quarter of
// the last commit's time, at most 1 ms, ending as soon as the queue holds
// the last group's size more) for those callers to come back; without
// it, busy submitters split into two alternating half-size groups. A lone
// writer never waits.
//
// bbolt's DB.Batch was measured against this loop on the same load
// (BenchmarkSubmit32DBBatch, 32 submitters): it commits when a timer
// (MaxBatchDelay) fires, so its rate hangs on a delay tuned to the disk
// (in submits per raw fdatasync, which the benchmark reports because the
// test disk's own rate varies 1,000-4,000/s: ~0.6-1.9 at the default
// 10 ms, 1.3-4.1 at 1 ms, 0.3-0.7 at 200 µs, against 3.2-5.7 for the
// loop), and it re-runs a failed function
// alone, which turns a failed disk into a per-Write error. The loop needs
// no tuning and fails a group as a whole.
//
// Saves are applied in the order the Writes arrived (a later save of a
// job wins), forgets after the saves of the same Write. If a commit fails,
// every Write in it fails and the Store refuses all later Writes: after a
// failed fsync the disk cannot be trusted to hold what it was given, so
// the manager must stop and restart from what Load reads.
//
// # Loading
//
// Load returns the counter and every record. A record that does not decode
// (or whose id is not its key) does not stop it: it is skipped, left in
// the file, and named in a *CorruptError returned along with the rest.
//
// # The spool
//
// PutPiece takes an upload (JobRequest OP_BLOB) piece by piece, in order;
// the stored length is the offset to resume from, after a crash too (a
// piece that was acknowledged but lost in a crash makes the next piece a
// gap, answered with a *ResumeError saying where to resume). The last
// piece hashes the whole file; only content that matches its name becomes
// a blob, fsynced and renamed into place, its directory fsynced. Uploads
// are bounded per blob (Options.MaxBlobBytes, 1 GiB) and in total
// (Options.MaxSpoolBytes, 20 GiB, blobs and partial uploads; results do
// not count). GC removes the blobs no live job names and abandoned
// uploads, once they are older than Options.Grace (a day).
//
// Results: the runtime fetches try N of a job into TryDir(job, N); Accept
// makes that try the job's results (durably: marker, rename, dir fsync),
// drops the other tries and lists the files with their sha256; a try
// that fetched nothing is accepted as no files (a failed job's last try
// may never have run), and a repeated Accept (after a crash at any step)
// does the same again. ResultFile opens
// one of them through an os.Root: no path, "..", absolute path or symlink
// reaches outside the results.
//
// # What the caller must do
//
//   - Open one Store per data dir; a second Open of the same dir fails
//     after Options.Timeout (2 s) saying it is in use.
//   - Load once at start and give it to jobs.Queue.Load; log a
//     *CorruptError, stop on any other error.
//   - For each jobs.Ready: Write its Saves and Next (and the jobs of its
//     ActForget acts as forget) and wait for nil before answering the
//     submits it holds or starting its acts. Write from many goroutines
//     is fine (that is what group commit is for), but Readys must be
//     written in order when they save the same job: the later Write must
//     start after the earlier returned.
//   - ActForget: Write the job in forget first, then ForgetJob, so that a
//     crash in between leaves a spool dir without a record (harmless) and
//     never a record without its results.
//   - Stop the manager when Write fails: the store refuses writes after a
//     failed commit.
//   - Call GC now and then with the sha256 of every blob (bundle and
//     inputs) a job not ended still names, and GCJobs with the ids of
//     every job the queue holds (after Load, before new submits).
//   - Close on exit; it waits for the Writes in flight.
package store
