package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gridmgr/gridmgr/jobs"
	"github.com/gridmgr/gridmgr/wire"
)

// spool is DIR/spool: blobs/<sha256>, blobs/tmp/<sha256>.part and
// jobs/<job>/{try-N,results,accepted}.
type spool struct {
	dir   string
	blobs string
	tmp   string
	jobs  string
	opts  Options

	mu    sync.Mutex
	used  int64               // bytes of blobs and parts
	locks map[string]*keyLock // "blob/SHA" or "job/DIR" → its lock
}

// keyLock is held while one blob's upload, or one job's dir, is changed.
type keyLock struct {
	sync.Mutex
	refs int // holders and waiters; 0: removed from the map
}

func (sp *spool) open(dir string, opts Options) error {
	sp.dir, sp.opts = dir, opts
	sp.blobs = filepath.Join(dir, "blobs")
	sp.tmp = filepath.Join(sp.blobs, "tmp")
	sp.jobs = filepath.Join(dir, "jobs")
	sp.locks = make(map[string]*keyLock)
	for _, d := range []string{sp.tmp, sp.jobs} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("job spool: %w", err)
		}
	}
	for _, d := range []string{sp.blobs, sp.tmp} {
		es, err := os.ReadDir(d)
		if err != nil {
			return fmt.Errorf("job spool: %w", err)
		}
		for _, e := range es {
			if !e.Type().IsRegular() {
				continue
			}
			if fi, err := e.Info(); err == nil {
				sp.used += fi.Size()
			}
		}
	}
	return nil
}

// lock takes key's lock and returns its release.
func (sp *spool) lock(key string) func() {
	sp.mu.Lock()
	l := sp.locks[key]
	if l == nil {
		l = new(keyLock)
		sp.locks[key] = l
	}
	l.refs++
	sp.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		sp.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(sp.locks, key)
		}
		sp.mu.Unlock()
	}
}

func (sp *spool) addUsed(n int64) {
	sp.mu.Lock()
	sp.used += n
	sp.mu.Unlock()
}

// SpoolUsed is how many bytes the blobs and partial uploads take.
func (s *Store) SpoolUsed() int64 {
	s.sp.mu.Lock()
	defer s.sp.mu.Unlock()
	return s.sp.used
}

func checkSHA(sha string) error {
	if len(sha) != 64 {
		return fmt.Errorf("sha256 %.80q is %d characters, want 64 lowercase hex digits", sha, len(sha))
	}
	for i := 0; i < len(sha); i++ {
		if c := sha[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return fmt.Errorf("sha256 %q has %q at %d, want lowercase hex digits", sha, c, i)
		}
	}
	return nil
}

// Has says whether the blob sha is complete in the spool.
func (s *Store) Has(sha string) bool {
	if checkSHA(sha) != nil {
		return false
	}
	fi, err := os.Lstat(filepath.Join(s.sp.blobs, sha))
	return err == nil && fi.Mode().IsRegular()
}

// BlobPath is where the complete blob sha is (whether or not it is there
// yet); "" for a sha that is not 64 lowercase hex digits.
func (s *Store) BlobPath(sha string) string {
	if checkSHA(sha) != nil {
		return ""
	}
	return filepath.Join(s.sp.blobs, sha)
}

// PutPiece stores data at offset of the blob sha of size bytes and
// returns how many bytes of it are stored (size: complete). Pieces come in
// order: offset must be what is stored; a piece before it is a retry and
// must match the stored bytes. A gap is an error that says where to resume
// (errors.As *ResumeError). The last piece checks the whole content
// against sha (a mismatch deletes the upload) and makes the blob durable
// before PutPiece returns. A blob already complete takes any piece and
// returns size.
func (s *Store) PutPiece(sha string, size, offset int64, data []byte) (stored int64, err error) {
	sp := &s.sp
	if err := checkSHA(sha); err != nil {
		return 0, fmt.Errorf("blob: %w", err)
	}
	switch {
	case size < 0 || offset < 0:
		return 0, fmt.Errorf("blob %s: size %d and offset %d must not be negative", sha, size, offset)
	case size > sp.opts.MaxBlobBytes:
		return 0, fmt.Errorf("blob %s: size %d bytes is over this manager's limit of %d bytes per file", sha, size, sp.opts.MaxBlobBytes)
	case offset+int64(len(data)) > size:
		return 0, fmt.Errorf("blob %s: piece of %d bytes at offset %d ends past the size %d", sha, len(data), offset, size)
	}
	defer sp.lock("blob/" + sha)()

	final := filepath.Join(sp.blobs, sha)
	if fi, err := os.Stat(final); err == nil {
		if fi.Size() != size {
			return 0, fmt.Errorf("blob %s: stored with %d bytes, but this upload says %d", sha, fi.Size(), size)
		}
		return size, nil
	}
	part := filepath.Join(sp.tmp, sha+".part")
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return 0, fmt.Errorf("blob %s: %w", sha, err)
	}
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("blob %s: %w", sha, err)
	}
	have := fi.Size()
	if have > size {
		f.Close()
		f = nil
		s.dropPart(part, have)
		return 0, &ResumeError{SHA: sha, Offset: 0, Why: fmt.Sprintf("the partial upload has %d bytes, more than the size %d (a different size was sent before); it was deleted", have, size)}
	}
	if offset > have {
		return have, &ResumeError{SHA: sha, Offset: have, Why: fmt.Sprintf("piece at offset %d leaves a gap", offset)}
	}
	// A retry: what overlaps must be what is stored.
	if overlap := min(have-offset, int64(len(data))); overlap > 0 {
		old := make([]byte, overlap)
		if _, err := f.ReadAt(old, offset); err != nil {
			return have, fmt.Errorf("blob %s: read stored bytes at %d: %w", sha, offset, err)
		}
		if !bytes.Equal(old, data[:overlap]) {
			f.Close()
			f = nil
			s.dropPart(part, have)
			return 0, &ResumeError{SHA: sha, Offset: 0, Why: fmt.Sprintf("piece at offset %d differs from the bytes stored there; the partial upload was deleted", offset)}
		}
		data = data[overlap:]
		offset += overlap
	}
	if n := int64(len(data)); n > 0 {
		sp.mu.Lock()
		ok := sp.used+n <= sp.opts.MaxSpoolBytes
		if ok {
			sp.used += n
		}
		used := sp.used
		sp.mu.Unlock()
		if !ok {
			return have, fmt.Errorf("blob %s: the spool is full (%d bytes used of %d); try again when jobs have ended and their files are collected", sha, used, sp.opts.MaxSpoolBytes)
		}
		w, err := f.WriteAt(data, offset)
		have += int64(w)
		if err != nil {
			sp.addUsed(int64(w) - n)
			return have, fmt.Errorf("blob %s: write at %d: %w", sha, offset, err)
		}
	}
	if have < size {
		return have, nil
	}
	// Complete: check, sync, publish.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return have, fmt.Errorf("blob %s: %w", sha, err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return have, fmt.Errorf("blob %s: read back: %w", sha, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha {
		f.Close()
		f = nil
		s.dropPart(part, have)
		return 0, fmt.Errorf("blob %s: the %d bytes received hash to sha256 %s; the upload was deleted, send the file again from offset 0", sha, size, got)
	}
	if err := f.Sync(); err != nil {
		return have, fmt.Errorf("blob %s: fsync: %w", sha, err)
	}
	if err := f.Close(); err != nil {
		f = nil
		return have, fmt.Errorf("blob %s: close: %w", sha, err)
	}
	f = nil
	if err := os.Rename(part, final); err != nil {
		return have, fmt.Errorf("blob %s: %w", sha, err)
	}
	if err := syncDir(sp.blobs); err != nil {
		return have, fmt.Errorf("blob %s: %w", sha, err)
	}
	return size, nil
}

// ResumeError says that an upload must go on from Offset.
type ResumeError struct {
	SHA    string
	Offset int64
	Why    string
}

func (e *ResumeError) Error() string {
	return fmt.Sprintf("blob %s: %s; send again from offset %d", e.SHA, e.Why, e.Offset)
}

func (s *Store) dropPart(part string, size int64) {
	if os.Remove(part) == nil {
		s.sp.addUsed(-size)
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// GC removes the blobs not in keep (by sha) and the partial uploads,
// both only when not written for Options.Grace (a blob just uploaded for
// a job not yet submitted is kept). It returns how many files it removed.
func (s *Store) GC(keep map[string]bool) (removed int, err error) {
	sp := &s.sp
	cutoff := time.Now().Add(-sp.opts.Grace)
	var errs []error
	try := func(dir, name, sha string) {
		defer sp.lock("blob/" + sha)()
		p := filepath.Join(dir, name)
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || !fi.ModTime().Before(cutoff) {
			return
		}
		if err := os.Remove(p); err != nil {
			errs = append(errs, err)
			return
		}
		sp.addUsed(-fi.Size())
		removed++
	}
	es, err := os.ReadDir(sp.blobs)
	if err != nil {
		return 0, fmt.Errorf("job spool gc: %w", err)
	}
	for _, e := range es {
		if checkSHA(e.Name()) == nil && !keep[e.Name()] {
			try(sp.blobs, e.Name(), e.Name())
		}
	}
	es, err = os.ReadDir(sp.tmp)
	if err != nil {
		return removed, fmt.Errorf("job spool gc: %w", err)
	}
	for _, e := range es {
		if sha, ok := strings.CutSuffix(e.Name(), ".part"); ok && checkSHA(sha) == nil {
			try(sp.tmp, e.Name(), sha)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("job spool gc: %w", err)
	}
	return removed, nil
}

// JobDirName is the name of job's directory under spool/jobs: the id with
// every byte but [A-Za-z0-9_-] and a '.' not in front written %XX, so that
// "gm152.17[3]" is "gm152.17%5B3%5D".
func JobDirName(job string) string {
	var b strings.Builder
	for i := 0; i < len(job); i++ {
		c := job[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' && i > 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func (s *Store) jobDir(job string) (string, error) {
	if job == "" || len(job) > 255/3 {
		return "", fmt.Errorf("job id %.40q: empty or longer than %d bytes", job, 255/3)
	}
	return filepath.Join(s.sp.jobs, JobDirName(job)), nil
}

func tryName(try uint32) string { return "try-" + strconv.FormatUint(uint64(try), 10) }

// TryDir creates (if missing) and returns the directory that try of job
// fetches its results into: stdout, stderr and out/....
func (s *Store) TryDir(job string, try uint32) (string, error) {
	jd, err := s.jobDir(job)
	if err != nil {
		return "", fmt.Errorf("try dir: %w", err)
	}
	defer s.sp.lock("job/" + jd)()
	d := filepath.Join(jd, tryName(try))
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("try dir of job %s: %w", job, err)
	}
	return d, nil
}

// Accept makes what try of job fetched the job's results
// (spool/jobs/<job>/results), durably, removes its other tries' dirs and
// returns the result files (paths relative to the results dir, with
// sha256 and size; what is not a regular file or directory is left out).
// A try that fetched nothing (no TryDir: it failed before it ran) is
// accepted as no files. Repeated after it succeeded, or after a crash at
// any step, it does the same and returns the same.
func (s *Store) Accept(job string, try uint32) ([]*wire.JobFile, error) {
	jd, err := s.jobDir(job)
	if err != nil {
		return nil, fmt.Errorf("accept: %w", err)
	}
	defer s.sp.lock("job/" + jd)()
	fail := func(err error) ([]*wire.JobFile, error) {
		return nil, fmt.Errorf("accept try %d of job %s: %w", try, job, err)
	}
	td := filepath.Join(jd, tryName(try))
	results := filepath.Join(jd, "results")
	marker := filepath.Join(jd, "accepted")
	if _, err := os.Lstat(td); err == nil {
		// Mark first: once try-N is renamed, the marker is what says
		// whose results these are.
		if err := writeSynced(jd, "accepted", []byte(strconv.FormatUint(uint64(try), 10))); err != nil {
			return fail(err)
		}
		if err := os.RemoveAll(results); err != nil {
			return fail(err)
		}
		if err := os.Rename(td, results); err != nil {
			return fail(err)
		}
		if err := syncDir(jd); err != nil {
			return fail(err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fail(err)
	} else {
		// No try-N: accepted before (the marker says N), or it fetched
		// nothing (a try that failed before it ran): no files.
		if m, err := os.ReadFile(marker); err != nil || string(m) != strconv.FormatUint(uint64(try), 10) {
			if err := os.MkdirAll(jd, 0o700); err != nil {
				return fail(err)
			}
			if err := writeSynced(jd, "accepted", []byte(strconv.FormatUint(uint64(try), 10))); err != nil {
				return fail(err)
			}
			if err := os.RemoveAll(results); err != nil {
				return fail(err)
			}
		}
		if _, err := os.Lstat(results); errors.Is(err, fs.ErrNotExist) {
			if err := os.Mkdir(results, 0o700); err != nil {
				return fail(err)
			}
			if err := syncDir(jd); err != nil {
				return fail(err)
			}
		}
	}
	es, err := os.ReadDir(jd)
	if err != nil {
		return fail(err)
	}
	for _, e := range es {
		if strings.HasPrefix(e.Name(), "try-") {
			if err := os.RemoveAll(filepath.Join(jd, e.Name())); err != nil {
				return fail(err)
			}
		}
	}
	files, err := listFiles(results)
	if err != nil {
		return fail(err)
	}
	return files, nil
}

// writeSynced writes dir/name atomically and durably.
func writeSynced(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

// listFiles hashes the regular files under dir, walking through an
// os.Root so that no symlink leads out of it.
func listFiles(dir string) ([]*wire.JobFile, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var files []*wire.JobFile
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		files = append(files, &wire.JobFile{Path: p, Sha256: hex.EncodeToString(h.Sum(nil)), Size: n})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list results in %s: %w", dir, err)
	}
	return files, nil
}

// ResultFile opens path (as jobs.CheckPath allows: "stdout", "out/a.txt")
// of job's accepted results for reading. Nothing outside the results dir
// can be reached, not through "..", nor an absolute path, nor a symlink;
// only regular files are opened.
func (s *Store) ResultFile(job, path string) (*os.File, error) {
	fail := func(err error) (*os.File, error) {
		return nil, fmt.Errorf("result %q of job %s: %w", path, job, err)
	}
	if err := jobs.CheckPath(path); err != nil {
		return fail(err)
	}
	jd, err := s.jobDir(job)
	if err != nil {
		return fail(err)
	}
	root, err := os.OpenRoot(filepath.Join(jd, "results"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fail(fmt.Errorf("the job has no results kept here: %w", fs.ErrNotExist))
		}
		return fail(err)
	}
	defer root.Close()
	// Accept lists no symlink, so none is opened, not even one that
	// stays inside (os.Root follows those). Were it swapped between the
	// Lstat and the open, the Root still keeps the open inside.
	if fi, err := root.Lstat(path); err != nil {
		return fail(err)
	} else if fi.Mode()&fs.ModeSymlink != 0 {
		return fail(errors.New("a symlink, not a result file"))
	}
	f, err := root.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fail(err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fail(err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return fail(fmt.Errorf("not a regular file (mode %v)", fi.Mode()))
	}
	return f, nil
}

// ForgetJob removes job's spool directory (tries and results). Remove
// the job's record (Write's forget) first: a crash between the two must
// leave a directory without a record, not a record without its results.
func (s *Store) ForgetJob(job string) error {
	jd, err := s.jobDir(job)
	if err != nil {
		return fmt.Errorf("forget: %w", err)
	}
	defer s.sp.lock("job/" + jd)()
	if err := os.RemoveAll(jd); err != nil {
		return fmt.Errorf("forget job %s: %w", job, err)
	}
	return nil
}

// GCJobs removes the spool dirs of jobs not in live (by job id): those
// left by a crash between a forget Write and ForgetJob. It returns how
// many it removed.
func (s *Store) GCJobs(live map[string]bool) (removed int, err error) {
	keep := make(map[string]bool, len(live))
	for id := range live {
		keep[JobDirName(id)] = true
	}
	es, err := os.ReadDir(s.sp.jobs)
	if err != nil {
		return 0, fmt.Errorf("job spool gc: %w", err)
	}
	var errs []error
	for _, e := range es {
		if keep[e.Name()] {
			continue
		}
		jd := filepath.Join(s.sp.jobs, e.Name())
		unlock := s.sp.lock("job/" + jd)
		if err := os.RemoveAll(jd); err != nil {
			errs = append(errs, err)
		} else {
			removed++
		}
		unlock()
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("job spool gc: %w", err)
	}
	return removed, nil
}
