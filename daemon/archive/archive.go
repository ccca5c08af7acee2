package archive

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	berrors "go.etcd.io/bbolt/errors"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/internal/boltfile"

	"github.com/gridmgr/gridmgr/wire"
)

// Format is the layout version this package reads and writes.
const Format = "1"

// DefaultTimeout is how long Open waits for the file's lock.
const DefaultTimeout = 2 * time.Second

// Pruning thresholds of Append (see the package documentation).
const (
	// pruneEvery is how many events Append stores between prunings.
	pruneEvery = 1000
	// pruneBatch is how many keys one pass of a pruning collects before
	// deleting them.
	pruneBatch = 10000
)

// Bucket and key names of the layout.
var (
	bucketEvents = []byte("events")
)

// Options set retention. The zero value keeps every event.
type Options struct {
	// MaxAge: events whose time is older than Now() - MaxAge are deleted
	// (and not stored nor returned). 0: no bound by age.
	MaxAge time.Duration
	// MaxEvents: beyond this many events, the oldest are deleted. 0: no
	// bound by number.
	MaxEvents int
	// Now is the clock retention reads; nil: time.Now.
	Now func() time.Time
}

// Archive is an event archive in a bbolt file. Safe for concurrent use.
type Archive struct {
	path string
	db   *bolt.DB
	opts Options

	mu         sync.Mutex // serializes Append, Prune and Close; guards the fields below
	closed     bool
	sincePrune int // events stored since the last pruning

	n   atomic.Int64  // events stored
	bad atomic.Uint64 // undecodable records Query skipped
}

// Open opens the archive at path, creating the file (mode 0600) and its
// buckets if it does not exist. It fails after DefaultTimeout if another
// Archive holds the file, and refuses a file that is not an event archive
// of format 1. Negative MaxAge or MaxEvents are taken as 0.
func Open(path string, opts Options) (*Archive, error) {
	opts.MaxAge = max(opts.MaxAge, 0)
	opts.MaxEvents = max(opts.MaxEvents, 0)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        DefaultTimeout,
		FreelistType:   bolt.FreelistMapType,
		NoFreelistSync: true,
		// An archive grows, and mostly at its end: reserve address space
		// so that it does not remap (which blocks writers) every few MB.
		InitialMmapSize: 256 << 20,
	})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("event archive %s is in use by another process (its lock was not free after %v): %w", path, DefaultTimeout, err)
		}
		return nil, fmt.Errorf("event archive %s: open: %w", path, err)
	}
	a := &Archive{path: path, db: db, opts: opts}
	if err := a.init(); err != nil {
		db.Close()
		return nil, a.errorf("%w", err)
	}
	return a, nil
}

// init checks the layout, creating it in a new file, and counts the
// stored events.
func (a *Archive) init() error {
	return a.db.Update(func(tx *bolt.Tx) error {
		if meta := tx.Bucket(boltfile.Meta); meta != nil {
			f := meta.Get(boltfile.FormatKey)
			if f == nil {
				return fmt.Errorf("bucket %q has no %q key: not an event archive, or a damaged one", boltfile.Meta, boltfile.FormatKey)
			}
			if !bytes.Equal(f, []byte(Format)) {
				return fmt.Errorf("format %q, but this program reads only format %q", f, Format)
			}
			b := tx.Bucket(bucketEvents)
			if b == nil {
				return fmt.Errorf("bucket %q is missing: the archive is damaged", bucketEvents)
			}
			a.n.Store(int64(b.Stats().KeyN))
			return nil
		}
		if err := boltfile.Create(tx, "an event archive", Format, bucketEvents); err != nil {
			return err
		}
		return nil
	})
}

func (a *Archive) errorf(format string, args ...any) error {
	return fmt.Errorf("event archive %s: "+format, append([]any{a.path}, args...)...)
}

// Path returns the file the archive is in.
func (a *Archive) Path() string { return a.path }

// Len returns the number of events stored.
func (a *Archive) Len() int { return int(a.n.Load()) }

// BadRecords returns how many undecodable records Queries have skipped
// since Open (a record skipped by two Queries counts twice).
func (a *Archive) BadRecords() uint64 { return a.bad.Load() }

// timeKey returns the 8-byte, order-preserving form of a time in ms.
func timeKey(ms int64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], uint64(ms)^(1<<63))
	return k[:]
}

// keyTime returns the time in ms of a key, and false if the key is too
// short to hold one.
func keyTime(k []byte) (int64, bool) {
	if len(k) < 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(k[:8]) ^ (1 << 63)), true
}

// eventKey returns the key of ev (see the package documentation).
func eventKey(ev *wire.Event) []byte {
	peer := ev.GetPeer()
	k := make([]byte, 0, 8+len(peer)+2+8)
	k = append(k, timeKey(ev.GetTimeUnixMs())...)
	for i := 0; i < len(peer); i++ {
		k = append(k, peer[i])
		if peer[i] == 0 {
			k = append(k, 0xFF)
		}
	}
	k = append(k, 0, 1)
	return binary.BigEndian.AppendUint64(k, ev.GetSeq())
}

// ceilMs returns the first whole millisecond at or after t.
func ceilMs(t time.Time) int64 {
	ms := t.UnixMilli()
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}

// cutoff returns the first time in ms that retention by age keeps, and
// false if there is no bound by age.
func (a *Archive) cutoff() (int64, bool) {
	if a.opts.MaxAge <= 0 {
		return 0, false
	}
	return ceilMs(a.opts.Now().Add(-a.opts.MaxAge)), true
}

// Append stores evs in one transaction, fsynced before it returns. nil
// events, events already stored (same time, peer and seq) and events
// older than MaxAge are skipped. It prunes in the same transaction when
// due (see the package documentation). On error nothing of evs is stored.
func (a *Archive) Append(evs []*wire.Event) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return a.errorf("append: %w", berrors.ErrDatabaseNotOpen)
	}
	cut, byAge := a.cutoff()
	type rec struct{ k, v []byte }
	recs := make([]rec, 0, len(evs))
	for i, ev := range evs {
		if ev == nil || byAge && ev.GetTimeUnixMs() < cut {
			continue
		}
		v, err := proto.Marshal(ev)
		if err != nil {
			return a.errorf("append: encode event %d: %w", i, err)
		}
		recs = append(recs, rec{eventKey(ev), v})
	}
	if len(recs) == 0 {
		return nil
	}
	var added, deleted int
	pruned := false
	err := a.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		if b == nil {
			return fmt.Errorf("bucket %q is missing: the archive is damaged", bucketEvents)
		}
		for _, r := range recs {
			if b.Get(r.k) != nil {
				continue
			}
			if err := b.Put(r.k, r.v); err != nil {
				return fmt.Errorf("put: %w", err)
			}
			added++
		}
		n := int(a.n.Load()) + added
		over := a.opts.MaxEvents > 0 && n > a.opts.MaxEvents+a.opts.MaxEvents/10
		if over || a.sincePrune+added >= pruneEvery {
			pruned = true
			var err error
			deleted, err = a.prune(b, n)
			return err
		}
		return nil
	})
	if err != nil {
		return a.errorf("append: %w", err)
	}
	a.n.Add(int64(added - deleted))
	if pruned {
		a.sincePrune = 0
	} else {
		a.sincePrune += added
	}
	return nil
}

// Prune applies retention now and returns how many events it deleted.
func (a *Archive) Prune() (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return 0, a.errorf("prune: %w", berrors.ErrDatabaseNotOpen)
	}
	var deleted int
	err := a.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		if b == nil {
			return fmt.Errorf("bucket %q is missing: the archive is damaged", bucketEvents)
		}
		var err error
		deleted, err = a.prune(b, int(a.n.Load()))
		return err
	})
	if err != nil {
		return 0, a.errorf("prune: %w", err)
	}
	a.n.Add(int64(-deleted))
	a.sincePrune = 0
	return deleted, nil
}

// prune deletes from b, which holds n events, those older than the age
// cutoff and the oldest beyond MaxEvents, and returns how many it deleted.
func (a *Archive) prune(b *bolt.Bucket, n int) (int, error) {
	cut, byAge := a.cutoff()
	excess := 0
	if a.opts.MaxEvents > 0 {
		excess = max(n-a.opts.MaxEvents, 0)
	}
	if !byAge && excess == 0 {
		return 0, nil
	}
	deleted := 0
	for {
		// Collect a batch, then delete it: deleting under a cursor that
		// keeps iterating may skip keys.
		var keys [][]byte
		c := b.Cursor()
		for k, _ := c.First(); k != nil && len(keys) < pruneBatch; k, _ = c.Next() {
			t, ok := keyTime(k)
			old := byAge && (!ok || t < cut)
			if !old && deleted+len(keys) >= excess {
				break
			}
			keys = append(keys, bytes.Clone(k))
		}
		if len(keys) == 0 {
			return deleted, nil
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return deleted, fmt.Errorf("delete: %w", err)
			}
		}
		deleted += len(keys)
	}
}

// Query returns the stored events whose time is in [since, until) and
// for which match (nil: every event) returns true, oldest first, at most
// limit of them (limit <= 0: no bound), and the number of matching events
// beyond limit. A zero since or until is no bound; events older than
// MaxAge are not returned even if they are still stored. Query reads one
// consistent snapshot; it may run alongside Append and Prune. match is
// called from Query's goroutine, once per event in the range. Records
// that do not decode are skipped (see BadRecords).
func (a *Archive) Query(since, until time.Time, match func(*wire.Event) bool, limit int) (evs []*wire.Event, more int, err error) {
	var start []byte
	var from int64
	bounded := false
	if !since.IsZero() {
		from, bounded = ceilMs(since), true
	}
	if cut, ok := a.cutoff(); ok && (!bounded || cut > from) {
		from, bounded = cut, true
	}
	if bounded {
		start = timeKey(from)
	}
	var end []byte
	if !until.IsZero() {
		end = timeKey(ceilMs(until))
	}
	err = a.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		if b == nil {
			return fmt.Errorf("bucket %q is missing: the archive is damaged", bucketEvents)
		}
		c := b.Cursor()
		k, v := c.First()
		if start != nil {
			k, v = c.Seek(start)
		}
		for ; k != nil; k, v = c.Next() {
			if end != nil && bytes.Compare(k, end) >= 0 {
				break
			}
			if match == nil && limit > 0 && len(evs) >= limit {
				more++ // not decoded: counted as it would be returned
				continue
			}
			ev := new(wire.Event)
			if v == nil || proto.Unmarshal(v, ev) != nil {
				a.bad.Add(1)
				continue
			}
			if match != nil && !match(ev) {
				continue
			}
			if limit > 0 && len(evs) >= limit {
				more++
				continue
			}
			evs = append(evs, ev)
		}
		return nil
	})
	if err != nil {
		return nil, 0, a.errorf("query: %w", err)
	}
	return evs, more, nil
}

// Close closes the file, after the Queries under way end. Later calls of
// Append, Prune and Query return an error; Close itself may be called
// again.
func (a *Archive) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	if err := a.db.Close(); err != nil {
		return a.errorf("close: %w", err)
	}
	return nil
}
