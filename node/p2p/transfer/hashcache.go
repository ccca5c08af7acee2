package transfer

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// fileID is what Send knows of a file without reading it: where it is
// and what the file system says of it. Any write to the file changes
// its change time (which no user can set), so an unchanged fileID means
// unchanged bytes, except for a write within the file system clock's
// granularity of the stat: see hashCache.
type fileID struct {
	host, path   string
	dev, ino     uint64
	size         int64
	mtime, ctime int64     // ns since 1970
	known        bool      // dev, ino and ctime are known (a Unix stat)
	changed      time.Time // the later of mtime and ctime
	seen         time.Time // when the file was stat'ed, before it was read
}

func identify(path string, fi fs.FileInfo) fileID {
	id := fileID{path: path, size: fi.Size(), mtime: fi.ModTime().UnixNano(), seen: statNow()}
	if abs, err := filepath.Abs(path); err == nil {
		id.path = abs
	}
	id.host, _ = os.Hostname()
	id.changed = fi.ModTime()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino, id.known = uint64(st.Dev), uint64(st.Ino), true
		id.ctime = st.Ctim.Nano()
		if c := time.Unix(0, id.ctime); c.After(id.changed) {
			id.changed = c
		}
	}
	return id
}

// upload is the upload id Send offers for the file without its hash: a
// digest of its fileID, so that Send of the same unchanged file after an
// interruption (in this process or another) resumes where the manager
// stopped, and a file changed since starts anew. Two clients (or two
// files) that happen to share one id cost a retry, never a wrong bundle:
// the manager stores the bytes only if their hash is the trailer's.
func (id fileID) upload() string {
	return id.digest("gridmgr upload id")[:32]
}

// digest is a hex sha256 of id's identity, under a domain.
func (id fileID) digest(domain string) string {
	h := sha256.New()
	h.Write([]byte(domain + "\x00"))
	h.Write([]byte(id.host + "\x00" + id.path + "\x00"))
	var b [8]byte
	for _, v := range []uint64{id.dev, id.ino, uint64(id.size), uint64(id.mtime), uint64(id.ctime)} {
		binary.BigEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// hashCache remembers the sha256 of the files Send sent, by fileID: Send
// of the same unchanged file again (a job's bundle, sent for each
// attempt; a retried gridmgr app install) offers the hash first, and a
// manager that has the bundle is sent nothing. It lives in this process,
// and in HashCacheFile if that is set.
//
// A file changed within the file system clock's granularity of its
// stat could keep the same times; such a file is not remembered: only
// files whose last change is at least racyAge older than the moment
// the hash was taken (the entry's time) — git's "racy" rule.
type hashCache struct {
	mu sync.Mutex
	m  map[fileID]string
}

// HashCacheFile, if not "", is a file where Send keeps the hashes it
// remembers between processes (the CLI sets it in the user's cache
// directory): lines "KEY SHA256", KEY a digest of the file's identity,
// at most hashCacheSize, rewritten whole (temporary file, rename) at each
// new entry. Errors reading or writing it only cost a remembered hash.
var HashCacheFile string

const (
	racyAge       = 2 * time.Second
	hashCacheSize = 256
)

var (
	hashes  = &hashCache{}
	statNow = time.Now // when identify stat'ed a file (tests move it)
)

func (c *hashCache) get(id fileID) string {
	if !id.known {
		return ""
	}
	c.mu.Lock()
	sha := c.m[id.key()]
	c.mu.Unlock()
	if sha == "" && HashCacheFile != "" {
		sha = readCacheFile(HashCacheFile)[id.digest(cacheDomain)]
	}
	return sha
}

const cacheDomain = "gridmgr hash cache"

// readCacheFile is the entries of the hash cache file f, by key; and
// their keys in the file's order.
func readCacheFile(f string) map[string]string {
	m, _ := readCacheLines(f)
	return m
}

func readCacheLines(f string) (map[string]string, []string) {
	b, err := os.ReadFile(f)
	if err != nil {
		return nil, nil
	}
	m := make(map[string]string)
	var order []string
	for _, line := range strings.Split(string(b), "\n") {
		k, sha, ok := strings.Cut(line, " ")
		if !ok || len(k) != 64 || !ValidSHA(sha) {
			continue
		}
		if _, dup := m[k]; !dup {
			order = append(order, k)
		}
		m[k] = sha
	}
	return m, order
}

// writeCacheFile adds key → sha to the cache file f, dropping the oldest
// entries past hashCacheSize.
func writeCacheFile(f, key, sha string) {
	m, order := readCacheLines(f)
	if m == nil {
		m = make(map[string]string)
	}
	if _, had := m[key]; had {
		order = slices.DeleteFunc(order, func(k string) bool { return k == key })
	}
	m[key] = sha
	order = append(order, key)
	if len(order) > hashCacheSize {
		order = order[len(order)-hashCacheSize:]
	}
	var b strings.Builder
	for _, k := range order {
		b.WriteString(k + " " + m[k] + "\n")
	}
	if os.MkdirAll(filepath.Dir(f), 0o700) != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(f), ".bundle-hashes-*")
	if err != nil {
		return
	}
	_, err = tmp.WriteString(b.String())
	if cerr := tmp.Close(); err == nil && cerr == nil {
		err = os.Rename(tmp.Name(), f)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
}

// put remembers sha for id, the hash of the bytes read after id was
// taken: if the file had not changed for racyAge then. A write after
// that gives the file a later change time, so another fileID.
func (c *hashCache) put(id fileID, sha string) {
	if !id.known || !ValidSHA(sha) || id.seen.Sub(id.changed) < racyAge {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= hashCacheSize {
		c.m = make(map[fileID]string) // simplest bound: start over
	}
	c.m[id.key()] = sha
	if HashCacheFile != "" {
		writeCacheFile(HashCacheFile, id.digest(cacheDomain), sha)
	}
}

// key is id without the fields that are not its identity.
func (id fileID) key() fileID {
	id.changed, id.seen = time.Time{}, time.Time{}
	return id
}
