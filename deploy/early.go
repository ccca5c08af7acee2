// Early unpacking: a bundle's Zstandard files decoded while its bytes
// still arrive, so that installing it writes them instead of decoding
// them then.

package deploy

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
)

// EarlyCache holds what early unpacking decoded, by the sha256 the
// bundle was stored as, for the installation that follows its upload.
// Begin starts one for an upload, Take hands it to an installation. The
// bytes it holds (those that arrived and those decoded) are bounded by
// its budget; what is not taken within EarlyTTL is dropped. Safe for
// concurrent use.
type EarlyCache struct {
	mu     sync.Mutex
	budget int64 // bytes it may hold
	held   int64
	ready  map[string]*Early
	ttl    time.Duration
	hits   int // files installations wrote from it (Hits)
}

// EarlyTTL is how long an early unpacking waits for its installation.
const EarlyTTL = 30 * time.Second

// NewEarlyCache is a cache that holds at most budget bytes.
func NewEarlyCache(budget int64) *EarlyCache {
	return &EarlyCache{budget: budget, ready: map[string]*Early{}, ttl: EarlyTTL}
}

// Hits is how many files installations have written from what the
// cache decoded early (each placement counts).
func (c *EarlyCache) Hits() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits
}

// charge takes n bytes of the budget; false: there are not that many.
func (c *EarlyCache) charge(n int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held+n > c.budget {
		return false
	}
	c.held += n
	return true
}

func (c *EarlyCache) refund(n int64) {
	c.mu.Lock()
	c.held -= n
	c.mu.Unlock()
}

// Held is the bytes the cache holds now.
func (c *EarlyCache) Held() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held
}

// Begin starts unpacking an upload of size bytes from its first byte:
// give it each run of bytes as it is written (Bytes) and then how it
// ended (End). It returns nil if the budget cannot hold the upload's
// bytes.
func (c *EarlyCache) Begin(size int64) *Early {
	if c == nil || size <= 0 || !c.charge(size) {
		return nil
	}
	e := &Early{c: c, buf: make([]byte, 0, size), charged: size, bufCharge: size, entries: map[uint64]*earlyEntry{}}
	e.cond = sync.NewCond(&e.mu)
	go e.run()
	return e
}

// Take hands the early unpacking of bundle sha to the caller, who must
// Release it; nil if there is none (any more).
func (c *EarlyCache) Take(sha string) *Early {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.ready[sha]
	delete(c.ready, sha)
	return e
}

// keep holds e for the installation of sha, for the cache's ttl.
func (c *EarlyCache) keep(sha string, e *Early) {
	c.mu.Lock()
	if old := c.ready[sha]; old != nil {
		c.mu.Unlock()
		e.Release() // one is enough
		return
	}
	c.ready[sha] = e
	c.mu.Unlock()
	time.AfterFunc(c.ttl, func() {
		c.mu.Lock()
		mine := c.ready[sha] == e
		if mine {
			delete(c.ready, sha)
		}
		c.mu.Unlock()
		if mine {
			e.Release()
		}
	})
}

// Early is the early unpacking of one upload. Its decoder reads the
// bundle's local file headers in the order they arrive and decodes each
// Zstandard file packed as gridmgr packs it (independent frames, each
// with its size: the frames an installation decodes in parallel) with
// the installation's own decoder and bounds. It stops, keeping what it
// decoded, at anything else it cannot find its way past (a file whose
// end only its data descriptor says, other frames, more than the budget,
// damaged data): the installation decodes the rest itself. An
// installation uses a decoded file only if the archive's central
// directory says the same of it — where its data starts, its method, its
// compressed and uncompressed sizes and its CRC-32 — so it writes
// exactly what decoding the file itself would have.
type Early struct {
	c    *EarlyCache
	mu   sync.Mutex
	cond *sync.Cond
	buf  []byte // the bytes that arrived
	// ended: no more bytes will arrive; released: no one will use what
	// it decodes.
	ended, released bool
	charged         int64 // of c's budget
	bufCharge       int64 // of charged, for buf
	// The decoder has looked at every file whose data starts before pos;
	// done: it decodes no more.
	pos     uint64
	done    bool
	entries map[uint64]*earlyEntry // by where the file's data starts
}

type earlyEntry struct {
	csize   uint64   // the compressed bytes it took
	size    uint64   // decoded
	crc     uint32   // of what it decoded
	frames  [][]byte // what it decoded, frame by frame
	skipped bool     // a frame was passed over: the file is not kept
	// described: a data descriptor follows the data, saying descCRC.
	described bool
	descCRC   uint32
}

// Bytes adds what arrived next. It copies p and does not block.
func (e *Early) Bytes(p []byte) {
	if e == nil {
		return
	}
	e.mu.Lock()
	if !e.ended && len(e.buf)+len(p) <= cap(e.buf) {
		e.buf = append(e.buf, p...)
	} else {
		e.ended = true // more than offered: the upload fails anyway
	}
	e.cond.Broadcast()
	e.mu.Unlock()
}

// End says the upload ended: stored as sha, or not stored ("").
func (e *Early) End(sha string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.ended = true
	e.cond.Broadcast()
	e.mu.Unlock()
	if sha == "" {
		e.Release()
		return
	}
	e.c.keep(sha, e)
}

// Release drops what e holds, once its decoder has stopped (it stops
// at the end of the frame it decodes).
func (e *Early) Release() {
	if e == nil {
		return
	}
	e.mu.Lock()
	if e.released {
		e.mu.Unlock()
		return
	}
	e.released, e.ended = true, true
	e.cond.Broadcast()
	for !e.done {
		e.cond.Wait()
	}
	n, entries := e.charged, e.entries
	e.charged, e.bufCharge, e.entries, e.buf = 0, 0, nil, nil
	e.mu.Unlock()
	for _, ent := range entries {
		for _, b := range ent.frames {
			putOut(b)
		}
	}
	e.c.refund(n)
}

// data is what the decoder decoded of f, frame by frame, if the archive
// says the same of f as the bytes the decoder read; nil otherwise. It
// waits until the decoder has looked at f. What it returns is the
// caller's to read until it releases e.
func (e *Early) data(f *zip.File) [][]byte {
	if e == nil || f.Method != zipZstd {
		return nil
	}
	off, err := f.DataOffset()
	if err != nil || off < 0 {
		return nil
	}
	e.mu.Lock()
	for !e.done && !e.released && e.pos <= uint64(off) {
		e.cond.Wait()
	}
	ent := e.entries[uint64(off)]
	e.mu.Unlock()
	if ent == nil || ent.csize != f.CompressedSize64 || ent.size != f.UncompressedSize64 || ent.crc != f.CRC32 {
		return nil
	}
	// archive/zip reads the data descriptor after the data if the
	// central directory says there is one, and checks its CRC-32 too.
	if f.Flags&0x8 != 0 && (!ent.described || ent.descCRC != f.CRC32) {
		return nil
	}
	e.c.mu.Lock()
	e.c.hits++
	e.c.mu.Unlock()
	return ent.frames
}

// arrived reads the bytes as they arrive, from off: it waits for them,
// and is at its end (io.EOF) once the upload ended or e was released.
type arrived struct {
	e   *Early
	off int
}

func (a *arrived) Read(p []byte) (int, error) {
	e := a.e
	e.mu.Lock()
	defer e.mu.Unlock()
	for !e.released && a.off >= len(e.buf) && !e.ended {
		e.cond.Wait()
	}
	if e.released || a.off >= len(e.buf) {
		return 0, io.EOF
	}
	n := copy(p, e.buf[a.off:])
	a.off += n
	return n, nil
}

// errStop: the decoder cannot go on (nothing is wrong with the upload).
var errStop = errors.New("early unpacking stops")

// run is the decoder.
func (e *Early) run() {
	defer func() {
		e.mu.Lock()
		e.done = true
		e.buf = nil // the installation reads the stored file
		e.c.refund(e.bufCharge)
		e.charged -= e.bufCharge
		e.bufCharge = 0
		e.cond.Broadcast()
		e.mu.Unlock()
	}()
	br := bufio.NewReaderSize(&arrived{e: e}, 64<<10)
	var pos uint64 // bytes of the stream consumed
	skip := func(n uint64) error {
		k, err := br.Discard(int(n))
		pos += uint64(k)
		if err != nil {
			return errStop
		}
		return nil
	}
	advance := func() { // every file whose data starts before pos is looked at
		e.mu.Lock()
		e.pos = pos
		e.cond.Broadcast()
		e.mu.Unlock()
	}
	for {
		advance()
		var h [30]byte
		if _, err := io.ReadFull(br, h[:4]); err != nil {
			return
		}
		if binary.LittleEndian.Uint32(h[:]) != 0x04034b50 { // the central directory, or not a zip
			return
		}
		if _, err := io.ReadFull(br, h[4:]); err != nil {
			return
		}
		pos += 30
		flags, method := binary.LittleEndian.Uint16(h[6:]), binary.LittleEndian.Uint16(h[8:])
		csize := uint64(binary.LittleEndian.Uint32(h[18:]))
		if skip(uint64(binary.LittleEndian.Uint16(h[26:]))+uint64(binary.LittleEndian.Uint16(h[28:]))) != nil {
			return
		}
		start := pos
		described := flags&0x8 != 0
		switch {
		case flags&0x1 != 0 || csize == 0xffffffff: // encrypted, or zip64 sizes
			return
		case method == zipZstd:
			ent, err := e.frames(br, &pos)
			if err != nil || !described && ent.csize != csize {
				return
			}
			if described {
				if ent.descCRC, err = e.descriptor(br, &pos, ent.csize); err != nil {
					return
				}
				ent.described = true
			}
			e.mu.Lock()
			if !e.released && !ent.skipped {
				e.entries[start] = ent
			}
			e.mu.Unlock()
		case !described:
			if skip(csize) != nil {
				return
			}
		default: // its end is only in its data descriptor
			return
		}
	}
}

// frames decodes the frames of one file, from br (at *pos), until the
// next bytes are not a frame; each must be one the installation decodes
// on its own (nextFrame), within the budget.
func (e *Early) frames(br *bufio.Reader, pos *uint64) (*earlyEntry, error) {
	ent := &earlyEntry{}
	fail := func() (*earlyEntry, error) {
		for _, b := range ent.frames {
			putOut(b)
		}
		return nil, errStop
	}
	for {
		magic, err := br.Peek(4)
		if err != nil || binary.LittleEndian.Uint32(magic) != zstdMagic {
			break
		}
		raw, size, err := nextFrame(br)
		*pos += uint64(len(raw))
		ent.csize += uint64(len(raw))
		if err == errNotSplit {
			// Decoded by the installation's streaming decoder: passed
			// over here, and the file not kept.
			n, err := skipFrame(raw, br)
			*pos += uint64(n - len(raw))
			ent.csize += uint64(n - len(raw))
			if err != nil {
				return fail()
			}
			ent.skipped = true
			continue
		}
		if err != nil {
			return fail()
		}
		if ent.skipped {
			putBuf(raw)
			continue
		}
		if !e.c.charge(int64(size)) {
			putBuf(raw)
			return fail()
		}
		e.mu.Lock()
		if e.released {
			e.mu.Unlock()
			e.c.refund(int64(size))
			putBuf(raw)
			return fail()
		}
		e.charged += int64(size)
		e.mu.Unlock()
		d := frameDecoders.Get().(*zstd.Decoder)
		out, err := d.DecodeAll(raw, getOut(size))
		frameDecoders.Put(d)
		putBuf(raw)
		if err != nil || len(out) != size {
			return fail()
		}
		ent.frames = append(ent.frames, out)
		ent.size += uint64(size)
		ent.crc = crc32.Update(ent.crc, crc32.IEEETable, out)
	}
	if ent.csize == 0 {
		return nil, errStop
	}
	if ent.skipped {
		for _, b := range ent.frames {
			putOut(b)
		}
		ent.frames = nil
	}
	return ent, nil
}

// skipFrame reads the rest of a Zstandard frame whose first bytes,
// already read off br, are read: its header, its blocks, its checksum,
// without decoding it. It returns the frame's length.
func skipFrame(read []byte, br *bufio.Reader) (int, error) {
	n := 0
	r := io.MultiReader(bytes.NewReader(read), br)
	var b [8]byte
	take := func(k int) ([]byte, error) {
		m, err := io.ReadFull(r, b[:k])
		n += m
		return b[:k], err
	}
	skip := func(k int) error {
		if have := len(read) - n; have > 0 {
			use := min(have, k)
			n, k = n+use, k-use
			r = io.MultiReader(bytes.NewReader(read[n:]), br)
		}
		m, err := br.Discard(k)
		n += m
		return err
	}
	h, err := take(5)
	if err != nil || binary.LittleEndian.Uint32(h) != zstdMagic {
		return n, errStop
	}
	desc := h[4]
	fcsFlag, single, reserved, checksum, dictFlag := desc>>6, desc>>5&1, desc>>3&1, desc>>2&1, desc&3
	if reserved != 0 {
		return n, errStop
	}
	fields := [4]int{0, 1, 2, 4}[dictFlag] + [4]int{0, 2, 4, 8}[fcsFlag]
	if single == 1 {
		fields += [4]int{1, 0, 0, 0}[fcsFlag]
	} else {
		fields++ // the window descriptor
	}
	if err := skip(fields); err != nil {
		return n, errStop
	}
	for last := false; !last; {
		bh, err := take(3)
		if err != nil {
			return n, errStop
		}
		v := int(bh[0]) | int(bh[1])<<8 | int(bh[2])<<16
		size := v >> 3
		last = v&1 == 1
		switch v >> 1 & 3 {
		case 1: // RLE
			size = 1
		case 3:
			return n, errStop
		}
		if v>>3 > maxBlock {
			return n, errStop
		}
		if err := skip(size); err != nil {
			return n, errStop
		}
	}
	if checksum == 1 {
		if err := skip(4); err != nil {
			return n, errStop
		}
	}
	return n, nil
}

// descriptor reads the data descriptor that follows a file's data: its
// signature if there is one, the CRC-32, and the two sizes in 4 bytes
// each, or 8 (zip64). The compressed size must be csize.
func (e *Early) descriptor(br *bufio.Reader, pos *uint64, csize uint64) (crc uint32, err error) {
	b, err := br.Peek(4)
	if err != nil {
		return 0, errStop
	}
	n := 0
	if binary.LittleEndian.Uint32(b) == 0x08074b50 {
		n = 4
	}
	b, err = br.Peek(n + 4 + 16)
	if err != nil && len(b) < n+12 {
		return 0, errStop
	}
	crc = binary.LittleEndian.Uint32(b[n:]) // what archive/zip checks
	d := b[n+4:]
	switch {
	case uint64(binary.LittleEndian.Uint32(d)) == csize && (len(d) < 16 || !isZip64(d, csize)):
		n += 12
	case len(d) >= 16 && binary.LittleEndian.Uint64(d) == csize:
		n += 20
	default:
		return 0, errStop
	}
	k, err := br.Discard(n)
	*pos += uint64(k)
	if err != nil {
		return 0, errStop
	}
	return crc, nil
}

// isZip64 reports whether d, the sizes of a data descriptor whose first
// 4 bytes read csize, are 8 bytes each: the next 4 bytes are then 0
// (csize < 4 GiB) and no signature follows the 4-byte form.
func isZip64(d []byte, csize uint64) bool {
	sig := binary.LittleEndian.Uint32(d[8:])
	return binary.LittleEndian.Uint32(d[4:]) == 0 && sig != 0x04034b50 && sig != 0x02014b50 &&
		binary.LittleEndian.Uint64(d) == csize
}

// Decoded frames of the packer's size (zstdFrame, all but a file's
// last) are kept for the next; others take what they need: what a
// decoder holds is what its budget counts. (Not zstdframes.go's
// frameBufs: those are of cap parFrame + parSlack, twice a frame's size,
// so that one pool serves raw and decoded frames a reader lets go of at
// once; an early decoder keeps its decoded frames until they are
// installed, and would hold twice what its budget counts.)
var outBufs sync.Pool // of *[]byte, each of cap zstdFrame

func getOut(size int) []byte {
	if size == zstdFrame {
		if b, ok := outBufs.Get().(*[]byte); ok {
			return (*b)[:0]
		}
	}
	return make([]byte, 0, size)
}

func putOut(b []byte) {
	if cap(b) == zstdFrame {
		b = b[:0]
		outBufs.Put(&b)
	}
}
