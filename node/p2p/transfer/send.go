package transfer

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/deploy"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/wire"
)

// Progress sees how many of a bundle's total bytes the manager has: first
// the offset it accepted, then after every write, increasing, ending at
// total.
type Progress func(sent, total int64)

// Result is what one Send did.
type Result struct {
	SHA256 string
	Size   int64
	// Offset is where the manager asked the bytes to start: Size if it
	// had the bundle already, more than 0 if it resumed an earlier
	// interrupted upload.
	Offset int64
	// Sent is the raw bytes sent.
	Sent int64
	// Deflated: the manager does not speak ProtocolZstd (it runs a
	// version that reads no Zstandard), so it was sent a copy of the
	// bundle with its Zstandard files deflated (deploy's WriteDeflated:
	// the bundle a client of its version packs), and SHA256 and Size are
	// that copy's. Install it by this SHA256.
	Deflated bool

	name string // the file sent
}

// title names the bundle in messages: its hash, or the file's name while
// the hash is not known yet.
func (r *Result) title() string {
	if r.SHA256 != "" {
		return short(r.SHA256)
	}
	return r.name
}

// hashFile is the sha256 of f, from its start.
func hashFile(f *os.File) (string, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	hs := sha256.New()
	if _, err := io.CopyBuffer(hs, f, make([]byte, copyBuf)); err != nil {
		return "", fmt.Errorf("hash %s: %w", f.Name(), err)
	}
	return hex.EncodeToString(hs.Sum(nil)), nil
}

// String says what was done in words.
func (r Result) String() string {
	switch {
	case r.Offset == r.Size:
		return fmt.Sprintf("bundle %s (%s) was stored already; nothing sent", short(r.SHA256), text.Bytes(uint64(r.Size)))
	case r.Offset > 0:
		return fmt.Sprintf("bundle %s (%s) stored; resumed at %s, sent %s", short(r.SHA256),
			text.Bytes(uint64(r.Size)), text.Bytes(uint64(r.Offset)), text.Bytes(uint64(r.Sent)))
	}
	s := fmt.Sprintf("bundle %s (%s) stored", short(r.SHA256), text.Bytes(uint64(r.Size)))
	if r.Deflated {
		s += ", deflated for a manager that reads no Zstandard"
	}
	return s
}

// How long Send waits for the manager: between writes or for an answer
// (SendIdle), and for BundleStored once every byte was sent (it syncs
// the file to disk first: StoreWait). The ctx's deadline, if sooner,
// wins.
var (
	SendIdle  = 30 * time.Second
	StoreWait = 2 * time.Minute
)

// Send sends the bundle file to the manager to (h must be able to reach
// it: connected, or its addresses in h's peerstore) for reservation, and
// returns its sha256 once the manager has stored it. Only the bytes the
// manager lacks are sent: none if it has the bundle and Send knows the
// file's hash already (see SendOptions.SHA256), the rest if an earlier
// Send of the same unchanged file was interrupted. A refusal or failure on
// the manager's side is a *RemoteError. progress may be nil.
func Send(ctx context.Context, h host.Host, to peer.ID, file, reservation string, progress Progress) (sha string, err error) {
	r, err := SendResult(ctx, h, to, file, reservation, progress)
	return r.SHA256, err
}

// SendResult is Send, saying what it did.
func SendResult(ctx context.Context, h host.Host, to peer.ID, file, reservation string, progress Progress) (Result, error) {
	return SendWith(ctx, h, to, file, reservation, SendOptions{Progress: progress})
}

// SendOptions tune SendWith; the zero value is Send's behaviour.
type SendOptions struct {
	// SHA256 is the file's sha256 (hex), if the caller knows it: the
	// offer names it, and a manager that has the bundle already is sent
	// nothing. The manager checks it against the bytes.
	//
	// Without it, Send looks the file up in the hashes it computed
	// before in this process (by path, device, inode, size, modification
	// and change times; only for files unchanged for 2 seconds before
	// they were hashed). If it is not there and the manager speaks
	// ProtocolTrailer, Send does not read the file before sending it: it
	// hashes the bytes while they go and sends the hash after them, and
	// the manager stores them only if its own hash agrees. An old manager
	// is offered the hash first, computed then.
	//
	// To a manager that reads no Zstandard (Result.Deflated), the offer
	// names the deflated copy's hash, computed as above; this one is not
	// used.
	SHA256 string
	// Progress may be nil.
	Progress Progress
}

// SendWith is SendResult with options.
func SendWith(ctx context.Context, h host.Host, to peer.ID, file, reservation string, o SendOptions) (Result, error) {
	f, err := os.Open(file)
	if err != nil {
		return Result{}, err
	}
	src := &source{f: f}
	defer src.close()
	fi, err := f.Stat()
	if err != nil {
		return Result{}, err
	}
	if !fi.Mode().IsRegular() {
		return Result{}, fmt.Errorf("%s is not a regular file: a bundle is a zip file", file)
	}
	size := fi.Size()
	if size == 0 {
		return Result{}, fmt.Errorf("%s is empty: a bundle is a zip file", file)
	}
	if o.SHA256 != "" && !ValidSHA(o.SHA256) {
		return Result{}, fmt.Errorf("%q is not a sha256 (64 lowercase hex digits)", text.Clip(o.SHA256, maxQuoted))
	}
	id := identify(file, fi)
	src.id = id
	sha := o.SHA256
	if sha == "" {
		sha = hashes.get(id)
	}
	r := Result{SHA256: sha, Size: size, name: file}
	err = r.attempt(ctx, h, to, src, reservation, o.Progress)
	var re *RemoteError
	if r.Offset > 0 && errors.As(err, &re) && re.Code == wire.ErrorReply_CODE_BAD_REQUEST {
		// The earlier part the manager kept was not ours (it discarded
		// it when the hash did not match): once more from the start.
		r.Sent = 0
		err = r.attempt(ctx, h, to, src, reservation, o.Progress)
	}
	if err == nil && (o.SHA256 == "" || r.Deflated) && !src.lazy {
		hashes.put(src.id, r.SHA256)
	}
	if err == nil && r.Deflated && src.orig != "" {
		deflatedCopies.put(src.orig, copyID{sha: r.SHA256, size: r.Size})
	}
	return r, err
}

// deflateFor makes r send src deflated, for a manager that reads no
// Zstandard, if src holds Zstandard files. When the original's hash is
// known and a copy of it was sent before (in this process), the offer
// names the copy's hash and size, and the copy is made only if the
// manager lacks it (src.lazy): a job staged many times to an older
// manager costs one deflate and one upload, as it costs one upload to a
// current one.
func (r *Result) deflateFor(src *source) error {
	src.orig = r.SHA256
	if c, ok := deflatedCopies.get(src.orig); ok && src.orig != "" {
		r.Deflated, r.SHA256, r.Size, src.lazy = true, c.sha, c.size, true
		return nil
	}
	ok, err := src.deflate()
	if err != nil || !ok {
		return err
	}
	fi, err := src.f.Stat()
	if err != nil {
		return err
	}
	r.Deflated, r.SHA256, r.Size = true, hashes.get(src.id), fi.Size()
	return nil
}

// copyID names a deflated copy: its hash and size.
type copyID struct {
	sha  string
	size int64
}

// copyCache maps the sha256 of a Zstandard bundle to that of its
// deflated copy (WriteDeflated's bytes are a function of the bundle's,
// so the content hash is the key). It keeps at most maxCopies entries.
type copyCache struct {
	mu sync.Mutex
	m  map[string]copyID
}

const maxCopies = 256

var deflatedCopies = &copyCache{m: map[string]copyID{}}

func (c *copyCache) get(sha string) (copyID, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[sha]
	return v, ok
}

func (c *copyCache) put(sha string, v copyID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[sha]; !ok && len(c.m) >= maxCopies {
		for k := range c.m { // any one: a miss costs a deflate and an upload
			delete(c.m, k)
			break
		}
	}
	c.m[sha] = v
}

// source is the file a Send reads: the caller's, or the deflated copy
// of it made for a manager that reads no Zstandard (unlinked at once).
type source struct {
	f    *os.File
	id   fileID
	temp bool   // f is the deflated copy
	orig string // the original's sha256, when known, once deflateFor ran
	lazy bool   // offered as a copy sent before, not made yet
}

func (s *source) close() {
	s.f.Close()
	if s.temp {
		os.Remove(s.f.Name())
	}
}

// deflateAgain makes the copy that a lazy offer named, of size bytes.
func (s *source) deflateAgain(size int64) error {
	s.lazy = false
	name := s.f.Name()
	ok, err := s.deflate()
	if err == nil && !ok {
		err = errors.New("it holds no Zstandard file any more")
	}
	if err != nil {
		return fmt.Errorf("deflating %s again: %w", name, err)
	}
	if fi, err := s.f.Stat(); err != nil || fi.Size() != size {
		return fmt.Errorf("deflating %s again gave another copy than before (did it change while being sent?)", name)
	}
	return nil
}

// deflate swaps s for a copy of the bundle with its Zstandard files
// deflated, if it has any, and reports whether it did. A file that is not
// a bundle deploy reads is left as it is: the manager's refusal will say
// what is wrong with it.
func (s *source) deflate() (bool, error) {
	fi, err := s.f.Stat()
	if err != nil {
		return false, err
	}
	if !deploy.HasZstd(s.f, fi.Size()) {
		return false, nil
	}
	b, err := deploy.Open(s.f, fi.Size(), deploy.Limits{})
	if err != nil {
		return false, nil // the manager says what is wrong with it
	}
	// The manager checks the copy's hash, not the original's: the hash
	// the caller gave (SendOptions.SHA256) is checked here instead, with
	// the one Open took, before a copy is remembered under it.
	if s.orig != "" && b.SHA256 != s.orig {
		return false, fmt.Errorf("its bytes hash to %s, not to the %s given", short(b.SHA256), short(s.orig))
	}
	tmp, err := os.CreateTemp("", "gridmgr-deflated-*.gapp")
	if err != nil {
		return false, err
	}
	// Unlinked at once, read through its descriptor: a sender killed
	// mid-way leaves no copy behind (close removes it where an open file
	// cannot be unlinked).
	_ = os.Remove(tmp.Name())
	keep := false
	defer func() {
		if !keep {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, copyBuf)
	if err := b.WriteDeflated(bw); err != nil {
		return false, err
	}
	if err := bw.Flush(); err != nil {
		return false, err
	}
	st, err := tmp.Stat()
	if err != nil {
		return false, err
	}
	keep = true
	s.f.Close()
	// Named after the caller's file, so that the copy of an unchanged
	// file resumes an upload cut short and is offered by its hash once
	// sent (it is the same bytes every time).
	s.f, s.id.path, s.id.size, s.temp = tmp, s.id.path+"\x00deflated", st.Size(), true
	return true, nil
}

// hashFirst makes Send offer the hash first, as to an old manager (the
// benchmark compares the two in one run).
var hashFirst bool

// attempt is one stream: offer, the bytes from the accepted offset, the
// answer.
func (r *Result) attempt(ctx context.Context, h host.Host, to peer.ID, src *source, reservation string, progress Progress) (err error) {
	st, err := h.NewStream(ctx, to, ProtocolZstd, ProtocolTrailer, Protocol)
	if err != nil {
		return fmt.Errorf("open a bundle stream to %s: %w", to.ShortString(), err)
	}
	if st.Protocol() != ProtocolZstd && !r.Deflated {
		// A manager before bundle protocol 1.2.0 reads no Zstandard.
		if err := r.deflateFor(src); err != nil {
			_ = st.Reset()
			return fmt.Errorf("the manager runs a version that reads no Zstandard (before bundle protocol 1.2.0), and %s could not be recompressed with deflate for it: %w", r.title(), err)
		}
	}
	f, id := src.f, src.id
	// trailer: the hash follows the bytes, computed while they go.
	trailer := r.SHA256 == "" && !hashFirst && st.Protocol() != Protocol
	stop := context.AfterFunc(ctx, func() { _ = st.Reset() })
	defer func() {
		stop()
		if err != nil {
			_ = st.Reset()
			if ctx.Err() != nil {
				err = fmt.Errorf("sending bundle %s: %w", r.title(), ctx.Err())
			}
		} else {
			_ = st.Close()
		}
	}()
	deadline := func(d time.Duration) time.Time {
		t := time.Now().Add(d)
		if dl, ok := ctx.Deadline(); ok && dl.Before(t) {
			return dl
		}
		return t
	}

	if r.SHA256 == "" && !trailer {
		// A manager that wants the hash first.
		if r.SHA256, err = hashFile(f); err != nil {
			return err
		}
	}
	offer := &wire.BundleOffer{Sha256: r.SHA256, Size: r.Size, Reservation: reservation}
	var hs hash.Hash
	if trailer {
		offer.UploadId = id.upload()
		hs = sha256.New()
	}

	bw := bufio.NewWriterSize(st, 512)
	w := pbio.NewDelimitedWriter(bw)
	_ = st.SetWriteDeadline(deadline(SendIdle))
	if err := w.WriteMsg(offer); err != nil {
		return fmt.Errorf("send the bundle offer: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("send the bundle offer: %w", err)
	}
	rd := pbio.NewDelimitedReader(bufio.NewReader(st), MaxFrame)
	read := func(m proto.Message, d time.Duration, what string) error {
		_ = st.SetReadDeadline(deadline(d))
		if err := rd.ReadMsg(m); err != nil {
			return fmt.Errorf("waiting for the manager's %s: %w", what, err)
		}
		return nil
	}

	var acc wire.BundleAccept
	if err := read(&acc, SendIdle, "answer to the offer"); err != nil {
		return err
	}
	if e := acc.Error; e != nil {
		return &RemoteError{Code: e.Code, Message: e.Message}
	}
	if acc.Offset < 0 || acc.Offset > offer.Size {
		return fmt.Errorf("the manager asked for the bytes from %d of %d", acc.Offset, offer.Size)
	}
	r.Offset = acc.Offset
	if progress != nil {
		progress(acc.Offset, offer.Size)
	}

	// The answer is read while the bytes go: a manager that cannot take
	// them (its disk failed) answers before the last one and stops
	// reading, and the copy stops at once instead of waiting for a full
	// window to time out. Meanwhile the write deadlines watch the
	// manager.
	type answer struct {
		m   *wire.BundleStored
		err error
	}
	answered := make(chan answer, 1)
	_ = st.SetReadDeadline(time.Time{})
	go func() {
		a := answer{m: new(wire.BundleStored)}
		a.err = rd.ReadMsg(a.m)
		answered <- a
		if a.err == nil && a.m.Error != nil {
			_ = st.Reset() // stop the copy: nothing more is read
		}
	}()
	// early is err, or the refusal that made the stream fail.
	early := func(err error) error {
		select {
		case a := <-answered: // sent before the goroutine's reset
			if a.err == nil && a.m.Error != nil {
				return &RemoteError{Code: a.m.Error.Code, Message: a.m.Error.Message}
			}
		default:
		}
		return err
	}
	if hs != nil && acc.Offset > 0 {
		// A resume: the hash covers the bytes the manager kept too.
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.CopyBuffer(hs, io.LimitReader(f, acc.Offset), make([]byte, copyBuf)); err != nil {
			return fmt.Errorf("hash %s: %w", f.Name(), err)
		}
	}
	if src.lazy && acc.Offset < offer.Size {
		// Offered by the hash a copy had before: the bytes are needed.
		if err := src.deflateAgain(r.Size); err != nil {
			return err
		}
		f = src.f
	}
	if acc.Offset < offer.Size {
		if _, err := f.Seek(acc.Offset, io.SeekStart); err != nil {
			return err
		}
		if err := r.copy(st, f, offer.Size-acc.Offset, hs, deadline, progress); err != nil {
			return early(err)
		}
	}
	if hs != nil {
		r.SHA256 = hex.EncodeToString(hs.Sum(nil))
		_ = st.SetWriteDeadline(deadline(SendIdle))
		if err := w.WriteMsg(&wire.BundleTrailer{Sha256: r.SHA256}); err != nil {
			return early(fmt.Errorf("sending bundle %s: %w", r.title(), err))
		}
		if err := bw.Flush(); err != nil {
			return early(fmt.Errorf("sending bundle %s: %w", r.title(), err))
		}
	}
	if err := st.CloseWrite(); err != nil {
		return early(fmt.Errorf("sending bundle %s: %w", r.title(), err))
	}

	_ = st.SetReadDeadline(deadline(StoreWait))
	a := <-answered
	if a.err != nil {
		return fmt.Errorf("waiting for the manager's confirmation: %w", a.err)
	}
	done := a.m
	if e := done.Error; e != nil {
		return &RemoteError{Code: e.Code, Message: e.Message}
	}
	if done.Sha256 != r.SHA256 {
		return fmt.Errorf("the manager stored %q, not bundle %s", text.Clip(done.Sha256, maxQuoted), r.title())
	}
	return nil
}

// copy writes n bytes of f to st, and to hs if not nil.
func (r *Result) copy(st network.Stream, f *os.File, n int64, hs hash.Hash, deadline func(time.Duration) time.Time, progress Progress) error {
	buf := make([]byte, copyBuf)
	for n > 0 {
		k, err := io.ReadFull(f, buf[:min(int64(len(buf)), n)])
		if err != nil {
			return fmt.Errorf("read %s: %w (did it change while being sent?)", f.Name(), err)
		}
		if hs != nil {
			hs.Write(buf[:k])
		}
		_ = st.SetWriteDeadline(deadline(SendIdle))
		if _, err := st.Write(buf[:k]); err != nil {
			return fmt.Errorf("sending bundle %s: %w after %d of %d bytes (send it again to resume)",
				r.title(), err, r.Offset+r.Sent, r.Size)
		}
		n -= int64(k)
		r.Sent += int64(k)
		if progress != nil {
			progress(r.Offset+r.Sent, r.Size)
		}
	}
	return nil
}
