package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/internal/boltfile"
	"github.com/gridmgr/gridmgr/wire"
)

// Format is the layout version of jobs.db this package reads and writes.
const Format = "1"

// Defaults of Options.
const (
	DefaultTimeout       = 2 * time.Second
	DefaultMaxBlobBytes  = 1 << 30
	DefaultMaxSpoolBytes = 20 << 30
	DefaultGrace         = 24 * time.Hour
	// maxGroup bounds how many Writes one transaction takes.
	maxGroup = 4096
	// maxLinger bounds how long the writer waits for a group to fill.
	maxLinger = time.Millisecond
)

// Bucket and key names of the layout (see the package documentation).
var (
	bucketJobs = []byte("jobs")
	keyNext    = []byte("next")
)

// Options tune Open. The zero value is what a manager uses.
type Options struct {
	// Timeout is how long Open waits for the lock on a jobs.db another
	// Store holds; 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxBlobBytes bounds one blob of the spool; 0 means 1 GiB.
	MaxBlobBytes int64
	// MaxSpoolBytes bounds the blobs and partial uploads of the spool
	// together; 0 means 20 GiB.
	MaxSpoolBytes int64
	// Grace is how old a partial upload, or a blob no job names, must be
	// before GC removes it; 0 means a day.
	Grace time.Duration
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxBlobBytes <= 0 {
		o.MaxBlobBytes = DefaultMaxBlobBytes
	}
	if o.MaxSpoolBytes <= 0 {
		o.MaxSpoolBytes = DefaultMaxSpoolBytes
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	return o
}

// Store is a submit manager's durable job queue: the job records and
// cluster counter in DIR/jobs.db, the blobs and results in DIR/spool.
// Safe for concurrent use.
type Store struct {
	dir  string
	path string // jobs.db
	opts Options
	db   *bolt.DB

	mu      sync.Mutex
	kick    chan struct{} // wakes the writer: queue grew, or closed
	queue   []*request
	closed  bool
	broken  error // a failed commit: every later Write fails with it
	stats   Stats
	written chan struct{} // closed when the writer has ended

	sp spool
}

// Stats counts what the writer did since Open.
type Stats struct {
	Writes  uint64 // Write calls made durable (or failed) by the writer
	Commits uint64 // transactions committed (each one fsync of jobs.db)
	Failed  uint64 // transactions that failed
}

type kv struct {
	key, val []byte
}

// request is one Write waiting for the writer.
type request struct {
	puts   []kv
	next   uint64
	forget []string
	done   chan error
}

// Open opens (creating when missing) the job store in dir with the
// default Options.
func Open(dir string) (*Store, error) { return OpenWith(dir, Options{}) }

// OpenWith opens (creating when missing) the job store in dir: dir/jobs.db
// (mode 0600) and dir/spool. It fails after opts.Timeout if another Store
// holds jobs.db, and refuses a file that is not a job store of Format.
func OpenWith(dir string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("job store %s: %w", dir, err)
	}
	path := filepath.Join(dir, "jobs.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        opts.Timeout,
		FreelistType:   bolt.FreelistMapType,
		NoFreelistSync: true,
		// Reserve address space so that a growing file rarely remaps,
		// which blocks the writer.
		InitialMmapSize: 256 << 20,
	})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("job store %s is in use by another process (its lock was not free after %v; is another manager running on this data dir?): %w", path, opts.Timeout, err)
		}
		return nil, fmt.Errorf("job store %s: open: %w", path, err)
	}
	s := &Store{dir: dir, path: path, opts: opts, db: db, written: make(chan struct{})}
	s.kick = make(chan struct{}, 1)
	if err := s.init(); err != nil {
		db.Close()
		return nil, s.errorf("%w", err)
	}
	if err := s.sp.open(filepath.Join(dir, "spool"), opts); err != nil {
		db.Close()
		return nil, err
	}
	go s.writer()
	return s, nil
}

func (s *Store) errorf(format string, args ...any) error {
	return fmt.Errorf("job store %s: "+format, append([]any{s.path}, args...)...)
}

// init checks the layout, creating it in a new file.
func (s *Store) init() error {
	fresh := false
	if err := s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(boltfile.Meta) == nil {
			fresh = true
			return nil
		}
		return check(tx)
	}); err != nil || !fresh {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return boltfile.Create(tx, "a job store", Format, bucketJobs)
	})
}

func check(tx *bolt.Tx) error {
	f := tx.Bucket(boltfile.Meta).Get(boltfile.FormatKey)
	if f == nil {
		return fmt.Errorf("bucket %q has no %q key: not a job store, or a damaged one", boltfile.Meta, boltfile.FormatKey)
	}
	if !bytes.Equal(f, []byte(Format)) {
		return fmt.Errorf("format %q, but this program reads only format %q: it was written by another version of the manager", f, Format)
	}
	if tx.Bucket(bucketJobs) == nil {
		return fmt.Errorf("bucket %q is missing: the store is damaged", bucketJobs)
	}
	return nil
}

// Dir is the directory the store is in.
func (s *Store) Dir() string { return s.dir }

// Corrupt is a stored record Load could not use.
type Corrupt struct {
	Key  string // the job id it is stored under
	Size int
	Err  error
}

// CorruptError lists the records Load skipped. Load returns it with
// everything else it read: the caller logs it and goes on.
type CorruptError struct {
	Path    string
	Records []Corrupt
}

func (e *CorruptError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "job store %s: %d records skipped (left in the file):", e.Path, len(e.Records))
	for _, c := range e.Records {
		fmt.Fprintf(&b, " %q (%d bytes): %v;", c.Key, c.Size, c.Err)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Load returns the stored cluster counter and every job record, in key
// order. A record that does not decode, or whose info.id is not its key,
// is skipped and named in a *CorruptError, returned together with next
// and the other records; any other error means nothing was read.
func (s *Store) Load() (next uint64, recs []*wire.JobRecord, err error) {
	var bad []Corrupt
	err = s.db.View(func(tx *bolt.Tx) error {
		if err := check(tx); err != nil {
			return err
		}
		if v := tx.Bucket(boltfile.Meta).Get(keyNext); v != nil {
			if len(v) != 8 {
				return fmt.Errorf("meta %q is %d bytes, want 8 (big-endian uint64): the store is damaged", keyNext, len(v))
			}
			next = binary.BigEndian.Uint64(v)
		}
		return tx.Bucket(bucketJobs).ForEach(func(k, v []byte) error {
			if v == nil {
				bad = append(bad, Corrupt{Key: string(k), Err: errors.New("a nested bucket, not a record")})
				return nil
			}
			r := new(wire.JobRecord)
			if err := proto.Unmarshal(v, r); err != nil {
				bad = append(bad, Corrupt{Key: string(k), Size: len(v), Err: fmt.Errorf("does not decode: %w", err)})
				return nil
			}
			if id := r.GetInfo().GetId(); id != string(k) {
				bad = append(bad, Corrupt{Key: string(k), Size: len(v), Err: fmt.Errorf("holds job %q: key and id differ", id)})
				return nil
			}
			recs = append(recs, r)
			return nil
		})
	})
	if err != nil {
		return 0, nil, s.errorf("load: %w", err)
	}
	if len(bad) > 0 {
		return next, recs, &CorruptError{Path: s.path, Records: bad}
	}
	return next, recs, nil
}

// ErrClosed is returned by a Store's methods after Close.
var ErrClosed = errors.New("job store is closed")

// Write stores saves (each under its info.id; a later save of the same id,
// in this call or a later one, wins), raises the stored cluster counter to
// next (a smaller next leaves it alone) and deletes the records of forget
// (after saves). When it returns nil all of it is on disk (fsynced); on an
// error none of it is. Concurrent Writes are committed together, in the
// order they arrived, in one transaction: a failed transaction fails every
// Write in it, and the store then refuses every later Write (the disk
// could not be trusted to hold what was acknowledged).
func (s *Store) Write(saves []*wire.JobRecord, next uint64, forget []string) error {
	r := &request{next: next, forget: forget, done: make(chan error, 1)}
	r.puts = make([]kv, 0, len(saves))
	for i, rec := range saves {
		id := rec.GetInfo().GetId()
		if id == "" {
			return s.errorf("write: save %d has no info.id", i)
		}
		if len(id) > bolt.MaxKeySize {
			return s.errorf("write: job id %.40q... is %d bytes, the limit is %d", id, len(id), bolt.MaxKeySize)
		}
		v, err := proto.Marshal(rec)
		if err != nil {
			return s.errorf("write: encode job %q: %w", id, err)
		}
		r.puts = append(r.puts, kv{[]byte(id), v})
	}
	for i, id := range forget {
		if id == "" || len(id) > bolt.MaxKeySize {
			return s.errorf("write: forget %d: bad job id %.40q", i, id)
		}
	}
	if len(r.puts) == 0 && len(forget) == 0 && next == 0 {
		return nil
	}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return s.errorf("write: %w", ErrClosed)
	case s.broken != nil:
		s.mu.Unlock()
		return s.errorf("write refused: an earlier commit failed: %w", s.broken)
	}
	s.queue = append(s.queue, r)
	s.mu.Unlock()
	s.wake()
	return <-r.done
}

func (s *Store) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// queued says how many Writes wait, and whether the store is closing.
func (s *Store) queued() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue), s.closed
}

// writer commits what Writes queue, all of it at once, until Close.
//
// Linger: when the last transaction held more than one Write, its callers
// are likely to Write again at once (a busy submit path), but they arrive
// just after the next transaction has started, and the groups split in
// two halves that alternate. So before committing, the writer waits a
// little (at most a quarter of the last commit's time, and maxLinger) for
// the queue to reach what it holds plus the last group; it stops waiting
// as soon as it does. A lone writer (groups of one) never waits.
func (s *Store) writer() {
	defer close(s.written)
	var group []*request
	var last int // Writes in the last transaction
	var took time.Duration
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		n, closed := s.queued()
		if n == 0 {
			if closed {
				return
			}
			<-s.kick
			continue
		}
		if last > 1 && !closed {
			target := min(n+last, maxGroup)
			timer.Reset(min(took/4, maxLinger))
		linger:
			for n < target && !closed {
				select {
				case <-s.kick:
					n, closed = s.queued()
				case <-timer.C:
					break linger
				}
			}
			timer.Stop()
		}
		s.mu.Lock()
		n = min(len(s.queue), maxGroup)
		group = append(group[:0], s.queue[:n]...)
		rest := copy(s.queue, s.queue[n:])
		clear(s.queue[rest:])
		s.queue = s.queue[:rest]
		broken := s.broken
		s.mu.Unlock()

		err := broken
		if err == nil {
			start := time.Now()
			err = s.commit(group)
			took = time.Since(start)
		}
		last = len(group)
		s.mu.Lock()
		s.stats.Writes += uint64(len(group))
		if err != nil {
			if s.broken == nil {
				s.broken = err
			}
			s.stats.Failed++
			err = s.errorf("write (with %d others in one transaction): %w", len(group)-1, err)
		} else {
			s.stats.Commits++
		}
		s.mu.Unlock()
		for _, r := range group {
			r.done <- err
		}
		clear(group)
	}
}

func (s *Store) commit(group []*request) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		jb := tx.Bucket(bucketJobs)
		meta := tx.Bucket(boltfile.Meta)
		if jb == nil || meta == nil {
			return fmt.Errorf("bucket %q or %q is missing: the store is damaged", bucketJobs, boltfile.Meta)
		}
		var next uint64
		for _, r := range group {
			next = max(next, r.next)
			for _, p := range r.puts {
				if err := jb.Put(p.key, p.val); err != nil {
					return fmt.Errorf("put job %q: %w", p.key, err)
				}
			}
			for _, id := range r.forget {
				if err := jb.Delete([]byte(id)); err != nil {
					return fmt.Errorf("delete job %q: %w", id, err)
				}
			}
		}
		if next > 0 {
			var old uint64
			if v := meta.Get(keyNext); len(v) == 8 {
				old = binary.BigEndian.Uint64(v)
			}
			if next > old {
				var v [8]byte
				binary.BigEndian.PutUint64(v[:], next)
				if err := meta.Put(keyNext, v[:]); err != nil {
					return fmt.Errorf("put %q: %w", keyNext, err)
				}
			}
		}
		return nil
	})
}

// Stats returns what the writer did since Open.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Close waits for the Writes already made to be committed, then closes
// jobs.db. Later Writes fail with ErrClosed; Close may be called again.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.wake()
	<-s.written
	if err := s.db.Close(); err != nil {
		return s.errorf("close: %w", err)
	}
	return nil
}
