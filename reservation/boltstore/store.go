package boltstore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	berrors "go.etcd.io/bbolt/errors"

	"github.com/gridmgr/gridmgr/internal/boltfile"

	"github.com/gridmgr/gridmgr/reservation"
)

// Format is the layout version this package reads and writes.
const Format = "1"

// DefaultTimeout is how long Open waits for the file's lock when
// Options.Timeout is zero.
const DefaultTimeout = 2 * time.Second

// Bucket and key names of the layout (see the package documentation).
var (
	bucketReservations = []byte("reservations")
	keyNextSeq         = []byte("next_seq")
)

// Options tune Open. The zero value is what a manager uses.
type Options struct {
	// Timeout is how long Open waits for the lock on a file another Store
	// (in this or another process) holds open; 0 means DefaultTimeout.
	Timeout time.Duration
}

// Store is a reservation.Store in a bbolt file. Safe for concurrent use.
type Store struct {
	path string

	mu      sync.Mutex // guards nextSeq and closed, and orders Writes
	db      *bolt.DB
	nextSeq uint64 // as stored
	closed  bool
}

var _ reservation.Store = (*Store)(nil)

// Open opens the reservation store at path, creating the file (mode 0600)
// and its buckets if it does not exist. It fails after opts.Timeout if
// another Store holds the file, and refuses a file that is not a
// reservation store of format 1.
func Open(path string, opts Options) (*Store, error) {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      timeout,
		NoSync:       false,
		FreelistType: bolt.FreelistMapType,
		// The freelist is rebuilt at open rather than written with every
		// commit (as etcd does): fewer pages per commit.
		NoFreelistSync: true,
		// Reserve address space up front so that a growing file does not
		// remap (which blocks writers) every few megabytes.
		InitialMmapSize: 256 << 20,
	})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("reservation store %s is in use by another process (its lock was not free after %v; is another manager running on this data dir?): %w", path, timeout, err)
		}
		return nil, fmt.Errorf("reservation store %s: open: %w", path, err)
	}
	s := &Store{path: path, db: db}
	if err := s.init(); err != nil {
		db.Close()
		return nil, s.errorf("%w", err)
	}
	return s, nil
}

// init checks the layout, creating it in a new file, and reads next_seq.
func (s *Store) init() error {
	fresh := false
	err := s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(boltfile.Meta) == nil {
			fresh = true
			return nil
		}
		return s.check(tx)
	})
	if err != nil {
		return err
	}
	if !fresh {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(boltfile.Meta) != nil { // cannot happen: we hold the lock
			return s.check(tx)
		}
		if err := boltfile.Create(tx, "a reservation store", Format, bucketReservations); err != nil {
			return err
		}
		s.nextSeq = 0
		return nil
	})
}

// check verifies the layout of an existing store and reads next_seq.
func (s *Store) check(tx *bolt.Tx) error {
	meta := tx.Bucket(boltfile.Meta)
	f := meta.Get(boltfile.FormatKey)
	if f == nil {
		return fmt.Errorf("bucket %q has no %q key: not a reservation store, or a damaged one", boltfile.Meta, boltfile.FormatKey)
	}
	if !bytes.Equal(f, []byte(Format)) {
		return fmt.Errorf("format %q, but this program reads only format %q: it was written by another version of the manager", f, Format)
	}
	if tx.Bucket(bucketReservations) == nil {
		return fmt.Errorf("bucket %q is missing: the store is damaged", bucketReservations)
	}
	n, err := s.readSeq(meta)
	if err != nil {
		return err
	}
	s.nextSeq = n
	return nil
}

func (s *Store) readSeq(meta *bolt.Bucket) (uint64, error) {
	v := meta.Get(keyNextSeq)
	if v == nil {
		return 0, nil
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("meta %q is %d bytes, want 8 (big-endian uint64): the store is damaged", keyNextSeq, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func (s *Store) errorf(format string, args ...any) error {
	return fmt.Errorf("reservation store %s: "+format, append([]any{s.path}, args...)...)
}

// Path returns the file the store is in.
func (s *Store) Path() string { return s.path }

// Load returns every stored record, sorted by ID, and the stored next
// sequence number. A record that does not decode, or whose ID is not its
// key, is an error naming the file and the key.
func (s *Store) Load() (reservation.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return reservation.Snapshot{}, s.errorf("load: %w", berrors.ErrDatabaseNotOpen)
	}
	var snap reservation.Snapshot
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketReservations)
		if b == nil {
			return fmt.Errorf("bucket %q is missing: the store is damaged", bucketReservations)
		}
		err := b.ForEach(func(k, v []byte) error {
			if v == nil {
				return fmt.Errorf("key %q in bucket %q is a nested bucket, not a record", k, bucketReservations)
			}
			var r reservation.Reservation
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("record %q does not decode (%d bytes): %w", k, len(v), err)
			}
			if r.ID != string(k) {
				return fmt.Errorf("record %q holds reservation ID %q: key and ID differ", k, r.ID)
			}
			snap.Records = append(snap.Records, r)
			return nil
		})
		if err != nil {
			return err
		}
		meta := tx.Bucket(boltfile.Meta)
		if meta == nil {
			return fmt.Errorf("bucket %q is missing: the store is damaged", boltfile.Meta)
		}
		snap.NextSeq, err = s.readSeq(meta)
		return err
	})
	if err != nil {
		return reservation.Snapshot{}, s.errorf("load: %w", err)
	}
	// bbolt iterates in byte order of the keys, which is string order of
	// the IDs; sort anyway so the promise does not hang on that.
	if !sort.SliceIsSorted(snap.Records, func(i, j int) bool { return snap.Records[i].ID < snap.Records[j].ID }) {
		sort.Slice(snap.Records, func(i, j int) bool { return snap.Records[i].ID < snap.Records[j].ID })
	}
	return snap, nil
}

// Write stores b in one transaction, fsynced before it returns: every
// change (upsert when Rec != nil, delete when nil), and NextSeq if it is
// larger than the stored one. An empty batch that does not raise NextSeq
// touches nothing. On error nothing of b is stored.
func (s *Store) Write(b reservation.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.errorf("write: %w", berrors.ErrDatabaseNotOpen)
	}
	raise := b.NextSeq > s.nextSeq
	if len(b.Changes) == 0 && !raise {
		return nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		rb := tx.Bucket(bucketReservations)
		if rb == nil {
			return fmt.Errorf("bucket %q is missing: the store is damaged", bucketReservations)
		}
		for i, c := range b.Changes {
			if c.ID == "" {
				return fmt.Errorf("change %d has no ID", i)
			}
			if c.Rec == nil {
				if err := rb.Delete([]byte(c.ID)); err != nil {
					return fmt.Errorf("delete %q: %w", c.ID, err)
				}
				continue
			}
			if c.Rec.ID != c.ID {
				return fmt.Errorf("change %d is for %q but holds reservation %q", i, c.ID, c.Rec.ID)
			}
			v, err := json.Marshal(c.Rec)
			if err != nil {
				return fmt.Errorf("encode %q: %w", c.ID, err)
			}
			if err := rb.Put([]byte(c.ID), v); err != nil {
				return fmt.Errorf("put %q: %w", c.ID, err)
			}
		}
		if raise {
			var v [8]byte
			binary.BigEndian.PutUint64(v[:], b.NextSeq)
			if err := tx.Bucket(boltfile.Meta).Put(keyNextSeq, v[:]); err != nil {
				return fmt.Errorf("%q: %w", keyNextSeq, err)
			}
		}
		return nil
	})
	if err != nil {
		return s.errorf("write: %w", err)
	}
	if raise {
		s.nextSeq = b.NextSeq
	}
	return nil
}

// Close closes the file. Later calls of any method return an error;
// Close itself may be called again.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.db.Close(); err != nil {
		return s.errorf("close: %w", err)
	}
	return nil
}
