package transfer

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
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
	h := sha256.New()
	h.Write([]byte("gridmgr upload id\x00"))
	h.Write([]byte(id.host + "\x00" + id.path + "\x00"))
	var b [8]byte
	for _, v := range []uint64{id.dev, id.ino, uint64(id.size), uint64(id.mtime), uint64(id.ctime)} {
		binary.BigEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// hashCache remembers, in this process, the sha256 of the files Send
// sent, by fileID: Send of the same unchanged file again (a job's
// bundle, sent for each attempt) offers the hash first, and a manager
// that has the bundle is sent nothing.
//
// A file changed within the file system clock's granularity of its
// stat could keep the same times; such a file is not remembered: only
// files whose last change is at least racyAge older than the moment
// the hash was taken (the entry's time) — git's "racy" rule.
type hashCache struct {
	mu sync.Mutex
	m  map[fileID]string
}

const (
	racyAge       = 2 * time.Second
	hashCacheSize = 1024
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
	defer c.mu.Unlock()
	return c.m[id.key()]
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
}

// key is id without the fields that are not its identity.
func (id fileID) key() fileID {
	id.changed, id.seen = time.Time{}, time.Time{}
	return id
}
