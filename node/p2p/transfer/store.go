package transfer

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gridmgr/gridmgr/internal/atomicfile"
	"github.com/gridmgr/gridmgr/internal/text"
)

const (
	bundleExt  = ".gapp"
	partialExt = ".part"
	tempExt    = ".tmp"
	copyBuf    = 256 << 10 // bytes per read/write while copying a bundle
)

// Store is a content-addressed directory of bundles:
//
//	DIR/<sha256hex>.gapp             a complete, checked bundle
//	DIR/partial/<sha256hex>.part     an upload not finished yet (kept for a resume)
//	DIR/partial/*.tmp                Add's copy in progress (removed by OpenStore)
//
// A bundle is written once under its hash and never changed; several
// instances may use the same one. Only one upload of a hash writes at a
// time. A bundle's modification time is when it was last stored or used
// (an offer of it, Hold): eviction goes oldest first. A partial upload
// not written for PartialAge is abandoned and deleted. Store is safe for
// concurrent use.
type Store struct {
	dir, partial string
	age          time.Duration    // StoreOptions.PartialAge
	now          func() time.Time // StoreOptions.Now

	mu     sync.Mutex
	cond   *sync.Cond       // on mu: an upload ended
	active map[string]int64 // hash → offered size, of the uploads writing now
	holds  map[string]int   // hash → Holds not released
}

// DefaultPartialAge is how long a partial upload is kept for a resume
// after its last write.
const DefaultPartialAge = time.Hour

// StoreOptions tune a Store; the zero value is the default.
type StoreOptions struct {
	// PartialAge: a partial upload not written for this long (and not
	// being written) is abandoned: deleted at the next offer of another
	// bundle, or when the store is opened. Default DefaultPartialAge.
	PartialAge time.Duration
	// Now is the store's clock (tests give a virtual one): the age of
	// partial uploads, and the time a bundle is stored or used. Default
	// time.Now.
	Now func() time.Time
}

// Entry is one stored bundle.
type Entry struct {
	SHA256  string
	Size    int64
	ModTime time.Time
}

// OpenStore opens (creating it if needed) the bundle store in dir, with
// opts (at most one; none: the defaults). Copies Add left behind by a
// crash are removed, and partial uploads older than PartialAge; younger
// ones are kept for a resume.
func OpenStore(dir string, opts ...StoreOptions) (*Store, error) {
	var o StoreOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.PartialAge <= 0 {
		o.PartialAge = DefaultPartialAge
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Store{dir: dir, partial: filepath.Join(dir, "partial"), age: o.PartialAge, now: o.Now,
		active: make(map[string]int64), holds: make(map[string]int)}
	s.cond = sync.NewCond(&s.mu)
	if err := os.MkdirAll(s.partial, 0o755); err != nil {
		return nil, fmt.Errorf("bundle store: %w", err)
	}
	tmps, _ := filepath.Glob(filepath.Join(s.partial, "*"+tempExt))
	for _, t := range tmps {
		os.Remove(t)
	}
	s.mu.Lock()
	s.scanPartial("")
	s.mu.Unlock()
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// ValidSHA says whether sha is a bundle name: 64 lowercase hex digits.
func ValidSHA(sha string) bool {
	if len(sha) != 64 {
		return false
	}
	for i := 0; i < len(sha); i++ {
		c := sha[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func (s *Store) bundlePath(sha string) string  { return filepath.Join(s.dir, sha+bundleExt) }
func (s *Store) partialPath(sha string) string { return filepath.Join(s.partial, sha+partialExt) }

// Path is the path of the stored bundle sha, and whether it is there.
func (s *Store) Path(sha string) (string, bool) {
	if !ValidSHA(sha) {
		return "", false
	}
	p := s.bundlePath(sha)
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return "", false
	}
	return p, true
}

// size is the size of the stored bundle sha, or -1 if it is not stored.
func (s *Store) size(sha string) int64 {
	fi, err := os.Stat(s.bundlePath(sha))
	if err != nil || !fi.Mode().IsRegular() {
		return -1
	}
	return fi.Size()
}

// Add stores the local file (hashing it while copying) and returns its
// sha256. A bundle already stored is left as it is.
func (s *Store) Add(file string) (sha string, err error) {
	in, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(s.partial, "add-*"+tempExt)
	if err != nil {
		return "", fmt.Errorf("bundle store: %w", err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name()) // gone already once renamed
	}()
	h := sha256.New()
	if _, err := io.CopyBuffer(io.MultiWriter(tmp, h), in, make([]byte, copyBuf)); err != nil {
		return "", fmt.Errorf("copy %s into the bundle store: %w", file, err)
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("bundle store: %w", err)
	}
	sha = hex.EncodeToString(h.Sum(nil))

	// An upload of the same bytes may be under way: wait for it, so that
	// two renames of one hash never race.
	s.mu.Lock()
	for {
		if _, busy := s.active[sha]; !busy {
			break
		}
		s.cond.Wait()
	}
	s.active[sha] = 0
	s.mu.Unlock()
	defer s.done(sha)
	if _, ok := s.Path(sha); ok {
		return sha, nil
	}
	if err := s.commit(tmp, sha); err != nil {
		return "", err
	}
	return sha, nil
}

// commit renames f, synced and checked, to the bundle sha, dates it now
// (stored: the newest, evicted last) and makes the rename durable. f is
// closed.
func (s *Store) commit(f *os.File, sha string) error {
	if err := f.Close(); err != nil {
		return fmt.Errorf("bundle store: %w", err)
	}
	if err := os.Rename(f.Name(), s.bundlePath(sha)); err != nil {
		return fmt.Errorf("bundle store: %w", err)
	}
	s.touch(sha)
	if err := atomicfile.SyncDir(s.dir); err != nil {
		return fmt.Errorf("bundle store: %w", err)
	}
	return atomicfile.SyncDir(s.partial)
}

// touch dates the stored bundle sha now: it was used (evicted last).
func (s *Store) touch(sha string) {
	if ValidSHA(sha) {
		t := s.now()
		_ = os.Chtimes(s.bundlePath(sha), t, t) // not stored: nothing to date
	}
}

// Hold keeps the bundle sha from being evicted until release is called
// (once or more), and counts as a use of it. Hold a bundle while
// installing from it: until the instance exists, InUse does not name it.
// Remove does not look at holds.
func (s *Store) Hold(sha string) (release func()) {
	s.mu.Lock()
	s.holds[sha]++
	s.mu.Unlock()
	s.touch(sha)
	return sync.OnceFunc(func() {
		s.mu.Lock()
		if s.holds[sha]--; s.holds[sha] <= 0 {
			delete(s.holds, sha)
		}
		s.mu.Unlock()
	})
}

// Remove deletes the stored bundle sha (and any partial upload of it not
// being written now). The caller removes only bundles no instance uses.
func (s *Store) Remove(sha string) error {
	if !ValidSHA(sha) {
		return fmt.Errorf("%q is not a bundle's sha256 (64 lowercase hex digits)", text.Clip(sha, maxQuoted))
	}
	s.mu.Lock()
	if _, busy := s.active[sha]; !busy {
		os.Remove(s.partialPath(sha))
	}
	s.mu.Unlock()
	if err := os.Remove(s.bundlePath(sha)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("bundle %s is not stored: %w", short(sha), fs.ErrNotExist)
		}
		return err
	}
	return atomicfile.SyncDir(s.dir)
}

// List is every stored bundle, by hash.
func (s *Store) List() ([]Entry, error) {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, de := range des {
		sha, ok := strings.CutSuffix(de.Name(), bundleExt)
		if !ok || !ValidSHA(sha) || !de.Type().IsRegular() {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, Entry{SHA256: sha, Size: fi.Size(), ModTime: fi.ModTime()})
	}
	return out, nil
}

// PartialSize is the length of the partial upload of sha kept from an
// earlier attempt, 0 if there is none.
func (s *Store) PartialSize(sha string) int64 {
	if !ValidSHA(sha) {
		return 0
	}
	fi, err := os.Stat(s.partialPath(sha))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// errBusy: another upload of the same hash is writing.
var errBusy = errors.New("being uploaded")

// overloadError: the partial bytes would exceed the limit.
type overloadError struct{ inUse, limit int64 }

func (e *overloadError) Error() string {
	return fmt.Sprintf("this manager is receiving other bundles (%s of partial uploads, at most %s); try again later",
		text.Bytes(uint64(e.inUse)), text.Bytes(uint64(e.limit)))
}

// storeFullError: the bundle would take the store past its limit even
// after evicting all it may.
type storeFullError struct {
	size      int64  // the bundle offered
	kept      int64  // bytes of bundles that may not be evicted
	uploading int64  // bytes of the other uploads being written
	limit     int64  // the store's bound
	name      string // its setting
	inUse     bool   // kept bundles are those instances use (else: all)
}

// transient says whether the bundle would fit once the other uploads
// are done.
func (e *storeFullError) transient() bool {
	return e.uploading > 0 && e.size+e.kept <= e.limit
}

func (e *storeFullError) Error() string {
	b := func(n int64) string { return text.Bytes(uint64(n)) }
	if e.size > e.limit {
		size, limit := b(e.size), b(e.limit)
		if size == limit { // rounded alike: say which is more
			size, limit = fmt.Sprintf("%d bytes", e.size), fmt.Sprintf("%d bytes", e.limit)
		}
		return fmt.Sprintf("the bundle is %s; the bundle store holds at most %s in all (%s): raise %s to upload it",
			size, limit, e.name, e.name)
	}
	kept := "bundles that instances use or are installing from"
	if !e.inUse {
		kept = "stored bundles (this manager does not evict bundles)"
	}
	msg := fmt.Sprintf("the bundle store is full: this %s bundle does not fit in %s (%s) beside %s of %s",
		b(e.size), b(e.limit), e.name, b(e.kept), kept)
	if e.uploading > 0 {
		msg += fmt.Sprintf(" and %s of other uploads under way", b(e.uploading))
	}
	if e.transient() {
		return msg + "; try again once those uploads are done"
	}
	return msg + fmt.Sprintf("; remove the applications no longer needed (gridmgr app remove) or raise %s", e.name)
}

// limits are what begin must keep the store within; zero bounds are no
// bound.
type limits struct {
	maxPartial int64                  // bytes of partial uploads
	maxStore   int64                  // bytes of bundles and partial uploads
	storeName  string                 // maxStore's setting, for refusals
	inUse      func() map[string]bool // bundles never evicted; nil: none is evicted
}

// file is a bundle or a partial upload that begin may evict.
type file struct {
	path string
	size int64
	mod  time.Time
}

func oldestFirst(fs []file) {
	slices.SortFunc(fs, func(a, b file) int {
		if c := a.mod.Compare(b.mod); c != 0 {
			return c
		}
		return strings.Compare(a.path, b.path)
	})
}

func sum(fs []file) (n int64) {
	for _, f := range fs {
		n += f.size
	}
	return n
}

// scanPartial deletes the partial uploads not written for s.age (but
// keep's and those being written) and returns the others that are not
// being written: the idle ones. s.mu is held.
func (s *Store) scanPartial(keep string) []file {
	des, _ := os.ReadDir(s.partial)
	cutoff := s.now().Add(-s.age)
	var idle []file
	for _, de := range des {
		h, ok := strings.CutSuffix(de.Name(), partialExt)
		if !ok || h == keep {
			continue
		}
		if _, busy := s.active[h]; busy {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		p := filepath.Join(s.partial, de.Name())
		if fi.ModTime().Before(cutoff) && os.Remove(p) == nil {
			continue // abandoned
		}
		idle = append(idle, file{p, fi.Size(), fi.ModTime()})
	}
	return idle
}

// begin claims sha for one upload of size bytes, within l: the uploads
// writing now count at their full size, idle partial files at their
// length, complete bundles at theirs. Partial uploads abandoned (older
// than PartialAge) are deleted first. To make room it evicts, oldest
// first, idle partial uploads of other hashes (for maxPartial), then
// those and the complete bundles that l.inUse does not name and no Hold
// holds (for maxStore); it evicts nothing for an offer it refuses
// anyway. done releases the claim.
func (s *Store) begin(sha string, size int64, l limits) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, busy := s.active[sha]; busy {
		return errBusy
	}
	var uploading int64 // the other uploads writing now
	for _, sz := range s.active {
		uploading += sz
	}
	idle := s.scanPartial(sha) // its own partial upload counts in size
	partialBytes := size + uploading + sum(idle)

	var (
		unused      []file // complete bundles that may be evicted
		bundleBytes int64
		kept        int64 // complete bundles that may not
	)
	if l.maxStore > 0 {
		var used map[string]bool
		if l.inUse != nil {
			used = l.inUse()
		}
		des, _ := os.ReadDir(s.dir)
		for _, de := range des {
			h, ok := strings.CutSuffix(de.Name(), bundleExt)
			if !ok || !de.Type().IsRegular() {
				continue
			}
			fi, err := de.Info()
			if err != nil {
				continue
			}
			bundleBytes += fi.Size()
			_, busy := s.active[h]
			if l.inUse == nil || used[h] || s.holds[h] > 0 || busy || h == sha || !ValidSHA(h) {
				kept += fi.Size()
				continue
			}
			unused = append(unused, file{filepath.Join(s.dir, de.Name()), fi.Size(), fi.ModTime()})
		}
	}
	total := bundleBytes + partialBytes
	overPartial := func() bool { return l.maxPartial > 0 && partialBytes > l.maxPartial }
	overStore := func() bool { return l.maxStore > 0 && total > l.maxStore }
	full := func() error {
		return &storeFullError{size: size, kept: kept, uploading: uploading, limit: l.maxStore, name: l.storeName, inUse: l.inUse != nil}
	}

	// Refused whatever is evicted: evict nothing.
	if l.maxPartial > 0 && partialBytes-sum(idle) > l.maxPartial {
		return &overloadError{partialBytes - size, l.maxPartial}
	}
	if l.maxStore > 0 && total-sum(idle)-sum(unused) > l.maxStore {
		return full()
	}
	// evict removes files oldest first while over says so and returns
	// those left.
	evict := func(fs []file, over func() bool) (left []file) {
		oldestFirst(fs)
		for i, f := range fs {
			if !over() {
				return append(left, fs[i:]...)
			}
			if os.Remove(f.path) != nil {
				left = append(left, f) // still there: still counted
				continue
			}
			total -= f.size
			if strings.HasSuffix(f.path, partialExt) {
				partialBytes -= f.size
			}
		}
		return left
	}
	idle = evict(idle, overPartial)
	if overPartial() {
		return &overloadError{partialBytes - size, l.maxPartial}
	}
	evict(append(idle, unused...), overStore)
	if overStore() {
		return full()
	}
	s.active[sha] = size
	return nil
}

func (s *Store) done(sha string) {
	s.mu.Lock()
	delete(s.active, sha)
	s.cond.Broadcast()
	s.mu.Unlock()
}

// Hash is the sha256 of file, hex.
func Hash(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, f, make([]byte, copyBuf)); err != nil {
		return "", fmt.Errorf("hash %s: %w", file, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// short is the first 12 hex digits of a hash, as messages name a bundle.
func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// maxQuoted bounds a string from the wire quoted in a message.
const maxQuoted = 80
