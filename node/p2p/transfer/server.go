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
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/wire"
)

// Protocol is the libp2p protocol id of the bundle stream.
const Protocol = "/gridmgr/bundle/1.0.0"

// ProtocolTrailer is the same stream on a server that also takes offers
// without the sha256, the hash following the bytes in a BundleTrailer.
// The server serves both ids with the same Handle; a client that opens
// this one knows the server takes such offers.
const ProtocolTrailer = "/gridmgr/bundle/1.1.0"

// ProtocolZstd is ProtocolTrailer on a manager that installs bundles
// whose files are compressed with Zstandard (zip method 93). Send gives a
// manager that does not speak it (one before this version) the bundle
// recompressed with deflate (Result.Deflated).
const ProtocolZstd = "/gridmgr/bundle/1.2.0"

const (
	// MaxFrame bounds one BundleOffer, BundleAccept or BundleStored frame.
	MaxFrame = 64 << 10
	// maxReservation bounds the reservation id in an offer.
	maxReservation = 256

	DefaultIdle       = 30 * time.Second
	DefaultMaxUploads = 4
)

// Server receives bundles on Protocol into Store. Set its fields before
// the first Handle and do not change them after.
type Server struct {
	Store *Store
	// MaxSize is the largest bundle accepted, bytes (from the properties
	// file); required > 0, or every offer is refused.
	MaxSize int64
	// LimitName names MaxSize's setting in refusals, e.g.
	// "apps.max_bundle_size".
	LimitName string
	// Check says whether peer holds reservation; nil refuses every offer.
	// Its error is the offer's refusal: a *RemoteError chooses the code
	// (Refuse makes one), any other error is CODE_FORBIDDEN with its text.
	Check func(ctx context.Context, peer, reservation string) error
	// Idle is how long a stream may send nothing before it is reset (its
	// partial upload kept for a resume). Default DefaultIdle.
	Idle time.Duration
	// MaxUploads bounds the uploads received at once; default
	// DefaultMaxUploads. More are refused with CODE_OVERLOADED.
	MaxUploads int
	// MaxPartial bounds the bytes of partial uploads, those being written
	// (counted at their full size) and those kept for a resume; idle ones
	// are evicted oldest first to make room. Default 4×MaxSize.
	MaxPartial int64
	// MaxStore bounds the bytes the Store holds: complete bundles and
	// partial uploads (those being written counted at their full size).
	// An offer that would pass it first evicts, oldest first, idle
	// partial uploads and the complete bundles InUse does not name and
	// no Store.Hold holds; if it still would not fit it is refused,
	// naming StoreLimitName: CODE_OVERLOADED if it would fit once the
	// other uploads under way are done, else CODE_REFUSED. 0: no bound.
	MaxStore int64
	// StoreLimitName names MaxStore's setting in refusals, e.g.
	// "apps.max_store_bytes".
	StoreLimitName string
	// InUse gives the bundles instances use: never evicted. nil: no
	// complete bundle is evicted, only partial uploads. It is called
	// with the store's lock held: it must not call the Store.
	InUse func() map[string]bool
	Log   *slog.Logger

	mu     sync.Mutex
	active int

	// Arriving, if set, is asked at the start of an upload sent from its
	// first byte, of size bytes, for what follows its bytes as they
	// arrive (the manager unpacks them early); nil: nothing does.
	Arriving func(size int64) Arrival

	onDone    func(outcome)             // sees each stream's outcome (tests)
	wrapWrite func(io.Writer) io.Writer // wraps the partial file's writer (tests: disk errors)
}

// RemoteError is an ErrorReply as a Go error: what Send returns when the
// manager refused or failed a bundle, and what Check returns to refuse an
// offer with a code of its choice.
type RemoteError struct {
	Code    wire.ErrorReply_Code
	Message string
}

// Refuse is a *RemoteError for Check to return.
func Refuse(code wire.ErrorReply_Code, format string, args ...any) error {
	return &RemoteError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Error is the code in words, then the manager's message: "forbidden:
// reservation r1 is not yours", as client.RemoteError prints one.
func (e *RemoteError) Error() string {
	return codeText(e.Code) + ": " + e.Message
}

// Retryable says whether the same Send may succeed later unchanged: the
// manager was busy (another upload of the same bundle, too many uploads).
func (e *RemoteError) Retryable() bool {
	return e.Code == wire.ErrorReply_CODE_UNAVAILABLE || e.Code == wire.ErrorReply_CODE_OVERLOADED
}

func codeText(c wire.ErrorReply_Code) string {
	s := c.String()
	if len(s) > 5 && s[:5] == "CODE_" {
		s = s[5:]
	}
	b := []byte(s)
	for i, ch := range b {
		switch {
		case ch == '_':
			b[i] = ' '
		case 'A' <= ch && ch <= 'Z':
			b[i] = ch + 'a' - 'A'
		}
	}
	return string(b)
}

func (e *RemoteError) reply() *wire.ErrorReply {
	return &wire.ErrorReply{Code: e.Code, Message: e.Message}
}

func refusal(code wire.ErrorReply_Code, format string, args ...any) *RemoteError {
	return &RemoteError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// conn is what the server needs of a stream; Handle gives it a
// network.Stream, the fuzz target a fake.
type conn interface {
	io.Reader
	io.Writer
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// Handle serves one bundle stream. The caller registers it:
// host.SetStreamHandler(Protocol, srv.Handle).
func (s *Server) Handle(st network.Stream) {
	peer := st.Conn().RemotePeer().String()
	if s.serve(st, peer) {
		_ = st.Close()
	} else {
		_ = st.Reset()
	}
}

// outcome of one stream, for the log and the tests.
type outcome struct {
	offset   int64         // the offset accepted; -1 if refused
	received int64         // raw bytes received
	err      error         // nil: stored
	kept     bool          // a partial upload was kept for a resume
	sha      string        // the offered hash, if valid; or the trailer's
	key      string        // the upload's claim and partial file (Store.partialPath)
	recv     time.Duration // receiving (and hashing, writing) the bytes
	commit   time.Duration // the end: fsync, hash check, rename, directory fsync
}

// serve runs the protocol on c; false: the stream must be reset (it
// broke or stalled), true: closed.
func (s *Server) serve(c conn, peer string) (clean bool) {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	idle := s.Idle
	if idle <= 0 {
		idle = DefaultIdle
	}
	st := newStream(c, idle, log.With("peer", peer))
	defer func() {
		if r := recover(); r != nil { // never take the manager down with one stream
			st.log.Error("bundle stream: panic", "panic", r)
			st.out.err, clean = fmt.Errorf("panic: %v", r), false
		}
		if s.onDone != nil {
			s.onDone(st.out)
		}
	}()
	return st.finish(s.exchange(st, peer))
}

// stream is the server's side of one bundle stream: what it reads and
// writes through, its log, and the outcome it reports.
type stream struct {
	c    conn
	idle time.Duration
	ir   *idleReader
	br   *bufio.Reader
	bw   *bufio.Writer
	w    pbio.WriteCloser
	log  *slog.Logger
	out  outcome
}

func newStream(c conn, idle time.Duration, log *slog.Logger) *stream {
	ir := &idleReader{c: c, idle: idle}
	bw := bufio.NewWriterSize(c, 512)
	return &stream{c: c, idle: idle, ir: ir, br: bufio.NewReaderSize(ir, copyBuf), bw: bw,
		w: pbio.NewDelimitedWriter(bw), log: log, out: outcome{offset: -1}}
}

func (st *stream) send(m proto.Message) error {
	_ = st.c.SetWriteDeadline(time.Now().Add(st.idle))
	if err := st.w.WriteMsg(m); err != nil {
		return err
	}
	return st.bw.Flush()
}

// finish sends the last answers of the stream, once nothing is held any
// more; false (reset the stream): there are none, because the stream
// broke or stalled, or one could not be sent.
func (st *stream) finish(last []proto.Message) bool {
	if len(last) == 0 {
		return false
	}
	for _, m := range last {
		if st.send(m) != nil {
			return false
		}
	}
	return true
}

// refuse is the last answer to an offer refused: a BundleAccept with the
// error.
func (st *stream) refuse(e *RemoteError) []proto.Message {
	st.out.err = e
	st.log.Info("bundle refused", "sha256", st.out.sha, "code", e.Code.String(), "why", e.Message)
	return []proto.Message{&wire.BundleAccept{Error: e.reply()}}
}

// refuseStored is the last answer to an upload refused after its bytes:
// a BundleStored with the error.
func (st *stream) refuseStored(e *RemoteError) []proto.Message {
	st.out.err = e
	st.log.Info("bundle not stored", "code", e.Code.String(), "why", e.Message)
	return []proto.Message{&wire.BundleStored{Sha256: st.out.sha, Error: e.reply()}}
}

// exchange reads and checks the offer and, if the bundle must be sent,
// receives it; it returns the last answers, for serve to send (none: the
// stream is reset).
func (s *Server) exchange(st *stream, peer string) []proto.Message {
	var offer wire.BundleOffer
	if err := pbio.NewDelimitedReader(st.br, MaxFrame).ReadMsg(&offer); err != nil {
		if st.ir.err != nil && st.ir.err != io.EOF { // stalled or reset: no one to answer
			st.out.err = err
			return nil
		}
		switch {
		case errors.Is(err, io.ErrShortBuffer):
			return st.refuse(refusal(wire.ErrorReply_CODE_BAD_REQUEST, "the offer is longer than %d bytes", MaxFrame))
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return st.refuse(refusal(wire.ErrorReply_CODE_BAD_REQUEST, "the stream ended before a whole BundleOffer"))
		}
		return st.refuse(refusal(wire.ErrorReply_CODE_BAD_REQUEST, "the offer is not a BundleOffer: %v", err))
	}
	if e := s.checkOffer(&offer); e != nil {
		return st.refuse(e)
	}
	st.out.sha = offer.Sha256
	sha, size := offer.Sha256, offer.Size
	if sha != "" {
		st.log = st.log.With("sha256", short(sha), "size", size, "reservation", offer.Reservation)
	} else {
		st.log = st.log.With("upload", short(offer.UploadId), "size", size, "reservation", offer.Reservation)
	}

	ctx, cancel := context.WithTimeout(context.Background(), st.idle)
	err := s.Check(ctx, peer, offer.Reservation)
	cancel()
	if err != nil {
		var re *RemoteError
		if !errors.As(err, &re) {
			re = refusal(wire.ErrorReply_CODE_FORBIDDEN, "%s", err.Error())
		}
		return st.refuse(re)
	}

	if sha == "" { // the hash comes after the bytes
		return s.upload(st, "", uploadKey(offer.UploadId, size), size)
	}
	// Already stored: nothing to send.
	if e := s.stored(sha, size); e != nil {
		return st.refuse(e)
	}
	if s.Store.size(sha) == size {
		st.out.offset = size
		s.Store.touch(sha) // used again: evicted last
		st.log.Info("bundle already stored")
		return []proto.Message{&wire.BundleAccept{Offset: size}, &wire.BundleStored{Sha256: sha}}
	}
	return s.upload(st, sha, sha, size)
}

// uploadKey names an upload offered without its hash, in the Store's
// claims and partial files: the client's id and the size, so that a
// resume with another size starts over.
func uploadKey(id string, size int64) string {
	return fmt.Sprintf("up-%s-%d", id, size)
}

// ValidUploadID says whether id may name an upload: 32 to 64 lowercase
// hex digits.
func ValidUploadID(id string) bool {
	if len(id) < 32 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Arrival follows the bytes of one upload (Server.Arriving).
type Arrival interface {
	// Bytes is each run of the upload's bytes, in order, once written to
	// the partial file. It must not block or keep p.
	Bytes(p []byte)
	// End says the upload ended: stored as sha, or not ("", also when
	// it was cut short and kept for a resume). It is called once, before
	// the client is told.
	End(sha string)
}

// upload is what one stream holds while it receives a bundle — the
// hash's claim in the Store, an upload slot, the partial file — and what
// becomes of the file.
type upload struct {
	s       *Server
	st      *stream
	sha     string // offered; "" if it follows the bytes (a BundleTrailer)
	key     string // the claim and the partial file: sha, or uploadKey
	size    int64
	claimed bool      // the hash is claimed (Store.begin)
	slot    bool      // an upload slot is taken (enter)
	f       *os.File  // the partial file, once opened
	h       hash.Hash // of the bundle's bytes in f
	have    int64     // bytes in f
	fate    fate      // what release does with f
	arr     Arrival   // follows the bytes (Server.Arriving); nil: none
	stored  string    // the sha256 it was stored as
}

// fate is what becomes of an upload's partial file.
type fate uint8

const (
	// keepPartial: the client went away (or the stream broke): what
	// arrived is kept for a resume, if there is something and it is on
	// disk.
	keepPartial fate = iota
	// dropPartial: its bytes are proven wrong, or the disk failed.
	dropPartial
	// committed: Store.commit made it the bundle (and closed it).
	committed
)

// upload claims sha and an upload slot, receives the bundle and lets go
// of what it took in one place, u.release, on every exit (a panic
// included), before serve sends the last answer: a client told "stored",
// or told to send again, finds the hash and the slot free.
func (s *Server) upload(st *stream, sha, key string, size int64) []proto.Message {
	u := &upload{s: s, st: st, sha: sha, key: key, size: size}
	st.out.key = key
	defer u.release()
	if e := u.claim(); e != nil {
		return st.refuse(e)
	}
	return u.receive()
}

// claim claims the hash in the Store, then an upload slot; release lets
// go of what it took, also when it refuses.
func (u *upload) claim() *RemoteError {
	s, sha := u.s, u.key
	maxPartial := s.MaxPartial
	if maxPartial <= 0 {
		maxPartial = 4 * s.MaxSize
	}
	lim := limits{maxPartial: maxPartial, maxStore: s.MaxStore, storeName: s.storeLimitName(), inUse: s.InUse}
	if err := s.Store.begin(sha, u.size, lim); err != nil {
		var full *storeFullError
		switch {
		case errors.Is(err, errBusy) && u.sha == "":
			return refusal(wire.ErrorReply_CODE_UNAVAILABLE,
				"upload %s is being uploaded by another stream; try again when it is done", short(sha[len("up-"):]))
		case errors.Is(err, errBusy):
			return refusal(wire.ErrorReply_CODE_UNAVAILABLE,
				"bundle %s is being uploaded by another stream; try again when it is done", short(sha))
		case errors.As(err, &full) && !full.transient():
			return refusal(wire.ErrorReply_CODE_REFUSED, "%v", err)
		}
		return refusal(wire.ErrorReply_CODE_OVERLOADED, "%v", err)
	}
	u.claimed = true
	if !s.enter() {
		return refusal(wire.ErrorReply_CODE_OVERLOADED,
			"this manager is already receiving as many bundles as it takes at once (%d); try again later", s.maxUploads())
	}
	u.slot = true
	return nil
}

// release lets go of what u holds: the partial file as u.fate says, the
// slot, the hash's claim. It is the one place that does, and runs once.
func (u *upload) release() {
	if u.f != nil {
		switch u.fate {
		case keepPartial:
			serr := u.f.Sync()
			u.f.Close()
			u.st.out.kept = serr == nil && u.have > 0
			if !u.st.out.kept {
				os.Remove(u.f.Name())
			}
			u.st.log.Info("bundle upload interrupted", "have", u.have, "kept", u.st.out.kept, "err", u.st.out.err)
		case dropPartial:
			u.f.Close() // Store.commit may have closed it: no matter
			os.Remove(u.f.Name())
		case committed: // Store.commit closed it and made it the bundle
		}
	}
	if u.arr != nil {
		u.arr.End(u.stored)
	}
	if u.slot {
		u.s.leave()
	}
	if u.claimed {
		u.s.Store.done(u.key)
	}
}

// receive accepts the offer, from where an earlier attempt left off, and
// takes the bytes into the partial file, hashed as they arrive; if they
// are the bundle offered, it commits them to the Store. It says what
// becomes of the file in u.fate and returns the last answers (none: the
// stream broke, and the file is kept for a resume).
func (u *upload) receive() []proto.Message {
	s, st, sha, size := u.s, u.st, u.sha, u.size
	// Stored by an upload that ended between the check above and begin.
	if sha != "" && s.Store.size(sha) == size {
		st.out.offset = size
		return []proto.Message{&wire.BundleAccept{Offset: size}, &wire.BundleStored{Sha256: sha}}
	}

	f, h, offset, err := s.Store.openPartial(u.key, size)
	if err != nil {
		st.log.Error("bundle: partial file", "err", err)
		return st.refuse(refusal(wire.ErrorReply_CODE_UNAVAILABLE, "this manager cannot write the bundle: %v", err))
	}
	u.f, u.h, u.have = f, h, offset
	st.out.offset = offset
	if err := st.send(&wire.BundleAccept{Offset: offset}); err != nil {
		st.out.err = err
		return nil
	}
	st.log.Debug("bundle accepted", "offset", offset)
	if offset == 0 && s.Arriving != nil {
		u.arr = s.Arriving(size)
	}

	// The raw bytes, hashed as they arrive.
	t0 := time.Now()
	n, err, werr := u.take(io.LimitReader(st.br, size-offset))
	u.have = offset + n
	st.out.received, st.out.recv = n, time.Since(t0)
	if werr != nil {
		// The disk failed, not the client: what was written may be
		// short or wrong, and a full disk needs its room back.
		u.fate = dropPartial
		st.log.Error("bundle: write", "err", werr)
		return st.refuseStored(refusal(wire.ErrorReply_CODE_UNAVAILABLE,
			"this manager cannot write the bundle: %v; nothing was kept", werr))
	}
	if err == nil && n < size-offset {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		// Interrupted or stalled: keep what arrived for a resume (for
		// PartialAge, unless the client comes back).
		st.out.err = err
		return nil
	}
	if sha == "" {
		// The hash follows the bytes.
		var e *RemoteError
		if sha, e = u.trailer(); e != nil {
			return st.refuseStored(e)
		}
		if sha == "" {
			return nil // the stream broke: the bytes are kept for a resume
		}
		st.out.sha = sha
	}
	// The client ends its side after the bytes: anything more is a lie
	// about the size.
	var one [1]byte
	if k, err := io.ReadFull(st.br, one[:]); k > 0 {
		u.fate = dropPartial
		st.out.err = errors.New("more bytes than offered")
		return st.refuseStored(refusal(wire.ErrorReply_CODE_BAD_REQUEST,
			"the client sent more than the %d bytes it offered; nothing was stored", size))
	} else if err != io.EOF {
		st.out.err = err
		return nil
	}
	t1 := time.Now()
	if err := f.Sync(); err != nil {
		u.fate = dropPartial
		st.log.Error("bundle: sync", "err", err)
		return st.refuseStored(refusal(wire.ErrorReply_CODE_UNAVAILABLE, "this manager cannot write the bundle: %v", err))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha {
		u.fate = dropPartial
		said := "the offered"
		if u.sha == "" {
			said = "the trailer's"
		}
		return st.refuseStored(refusal(wire.ErrorReply_CODE_BAD_REQUEST,
			"the bytes received hash to %s, not to %s %s; nothing was stored (the partial upload was discarded: send the bundle again)",
			short(got), said, short(sha)))
	}
	if e := s.stored(sha, size); e != nil { // a sha256 collision, no less
		u.fate = dropPartial
		return st.refuseStored(e)
	}
	if err := s.Store.commit(f, sha); err != nil {
		u.fate = dropPartial
		st.log.Error("bundle: store", "err", err)
		return st.refuseStored(refusal(wire.ErrorReply_CODE_UNAVAILABLE, "this manager cannot store the bundle: %v", err))
	}
	u.fate, u.stored = committed, sha
	st.out.commit = time.Since(t1)
	st.log.Info("bundle stored", "received", n)
	return []proto.Message{&wire.BundleStored{Sha256: sha}}
}

// trailer reads the BundleTrailer after the bytes of an upload offered
// without its hash: the sha256 the client says they have. "" and no
// error: the stream broke or stalled (the bytes are kept for a resume).
// A trailer that is not one (more bytes than offered, most likely) or
// names no hash refuses the upload and drops the bytes; a stream that
// ends cleanly without one refuses it and keeps them.
func (u *upload) trailer() (string, *RemoteError) {
	st := u.st
	var tr wire.BundleTrailer
	if err := pbio.NewDelimitedReader(st.br, MaxFrame).ReadMsg(&tr); err != nil {
		if st.ir.err != nil && st.ir.err != io.EOF {
			st.out.err = err
			return "", nil
		}
		if errors.Is(err, io.EOF) {
			st.out.err = err
			return "", refusal(wire.ErrorReply_CODE_BAD_REQUEST,
				"the stream ended after the %d bytes without their sha256 (a BundleTrailer); send the bundle again to resume", u.size)
		}
		u.fate = dropPartial
		return "", refusal(wire.ErrorReply_CODE_BAD_REQUEST,
			"what followed the %d bytes offered is not a BundleTrailer (more bytes than offered?): %v; nothing was stored", u.size, err)
	}
	if !ValidSHA(tr.Sha256) {
		u.fate = dropPartial
		return "", refusal(wire.ErrorReply_CODE_BAD_REQUEST,
			"the trailer's %q is not a sha256 (64 lowercase hex digits); nothing was stored", text.Clip(tr.Sha256, maxQuoted))
	}
	return tr.Sha256, nil
}

// take copies r into the partial file and the hash, the file synced in
// the background meanwhile; werr is the file's first write error (the
// disk's, not the client's). The stream is read on this goroutine while
// another hashes and writes what was read (the two overlap: receiving a
// bundle costs about the larger of the two, not their sum); it returns
// once both are done, so n bytes are in the file and the hash, unless
// werr. A write error stops the reading at the next buffer.
func (u *upload) take(r io.Reader) (n int64, err, werr error) {
	sw := newSyncWriter(u.f)
	defer sw.stop()
	fw := io.Writer(sw)
	if u.s.wrapWrite != nil {
		fw = u.s.wrapWrite(sw)
	}
	const depth = 4 // buffers in flight
	full := make(chan []byte, depth)
	free := make(chan []byte, depth)
	for range depth {
		free <- make([]byte, copyBuf)
	}
	failed := make(chan struct{}) // closed at the first write error (or panic)
	done := make(chan struct{})
	var panicked any
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil { // re-raised on the stream's goroutine
				panicked = p
				close(failed)
			}
		}()
		for b := range full {
			if werr == nil {
				_, _ = u.h.Write(b)
				if _, e := fw.Write(b); e != nil {
					werr = e
					close(failed)
				} else if u.arr != nil {
					u.arr.Bytes(b)
				}
			}
			free <- b[:cap(b)]
		}
	}()
	for err == nil {
		var b []byte
		select {
		case b = <-free:
		case <-failed:
		}
		if b == nil {
			break // the disk failed: read no more
		}
		// A whole buffer per hand-off: the stream gives a frame or so
		// per Read.
		var k int
		k, err = io.ReadFull(r, b)
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		if k > 0 {
			n += int64(k)
			full <- b[:k]
		} else {
			free <- b
		}
	}
	close(full)
	<-done
	if panicked != nil {
		panic(panicked)
	}
	if err == io.EOF {
		err = nil
	}
	return n, err, werr
}

// checkOffer validates an offer's fields and the server's configuration.
func (s *Server) checkOffer(o *wire.BundleOffer) *RemoteError {
	switch {
	case s.Store == nil || s.MaxSize <= 0 || s.Check == nil:
		return refusal(wire.ErrorReply_CODE_UNAVAILABLE, "this manager does not accept bundles (%s is not set)", s.limitName())
	case o.Sha256 == "" && !ValidUploadID(o.UploadId):
		return refusal(wire.ErrorReply_CODE_BAD_REQUEST,
			"the offer names neither a sha256 nor an upload id (32 to 64 lowercase hex digits): %q", text.Clip(o.UploadId, maxQuoted))
	case o.Sha256 != "" && !ValidSHA(o.Sha256):
		return refusal(wire.ErrorReply_CODE_BAD_REQUEST, "%q is not a sha256 (64 lowercase hex digits)", text.Clip(o.Sha256, maxQuoted))
	case o.Size <= 0:
		return refusal(wire.ErrorReply_CODE_BAD_REQUEST, "the bundle's size must be more than 0 bytes, not %d", o.Size)
	case o.Size > s.MaxSize:
		return refusal(wire.ErrorReply_CODE_REFUSED, "the bundle is %s; this manager accepts at most %s (%s)",
			text.Bytes(uint64(o.Size)), text.Bytes(uint64(s.MaxSize)), s.limitName())
	case o.Reservation == "":
		return refusal(wire.ErrorReply_CODE_BAD_REQUEST, "the offer names no reservation")
	case len(o.Reservation) > maxReservation:
		return refusal(wire.ErrorReply_CODE_BAD_REQUEST, "the reservation id is %d bytes long; at most %d", len(o.Reservation), maxReservation)
	}
	return nil
}

// stored refuses an offer of a stored hash with another size: the hash
// decides the size, so the offer is wrong.
func (s *Server) stored(sha string, size int64) *RemoteError {
	if have := s.Store.size(sha); have >= 0 && have != size {
		return refusal(wire.ErrorReply_CODE_BAD_REQUEST,
			"bundle %s is stored with %d bytes, not the %d offered", short(sha), have, size)
	}
	return nil
}

func (s *Server) storeLimitName() string {
	if s.StoreLimitName == "" {
		return "the bundle store's limit"
	}
	return s.StoreLimitName
}

func (s *Server) limitName() string {
	if s.LimitName == "" {
		return "the bundle size limit"
	}
	return s.LimitName
}

func (s *Server) maxUploads() int {
	if s.MaxUploads <= 0 {
		return DefaultMaxUploads
	}
	return s.MaxUploads
}

func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active >= s.maxUploads() {
		return false
	}
	s.active++
	return true
}

func (s *Server) leave() {
	s.mu.Lock()
	s.active--
	s.mu.Unlock()
}

// openPartial opens the partial file of sha for appending and hashes what
// an earlier attempt left in it, so the hash covers the whole bundle. A
// partial file longer than size is not this bundle's: it starts over. A
// partial file that cannot be read is of no use: it is deleted.
func (s *Store) openPartial(sha string, size int64) (*os.File, hash.Hash, int64, error) {
	f, err := os.OpenFile(s.partialPath(sha), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("open the partial upload: %w", err)
	}
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, make([]byte, copyBuf))
	if err == nil && n > size {
		h.Reset()
		n = 0
		err = f.Truncate(0)
		if err == nil {
			_, err = f.Seek(0, io.SeekStart)
		}
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, nil, 0, fmt.Errorf("read the partial upload: %w", err)
	}
	return f, h, n, nil // f is at its end
}

// idleReader sets a read deadline idle from now before every read, so a
// stream that sends nothing for idle fails with a timeout.
type idleReader struct {
	c    conn
	idle time.Duration
	err  error // the first error read
}

func (r *idleReader) Read(p []byte) (int, error) {
	_ = r.c.SetReadDeadline(time.Now().Add(r.idle))
	n, err := r.c.Read(p)
	if err != nil && r.err == nil {
		r.err = err
	}
	return n, err
}

// syncEvery is how many bytes a syncWriter lets pile up before it starts
// writing them back in the background.
const syncEvery = 4 << 20

// syncWriter writes to a file and, every syncEvery bytes, starts the
// kernel writing it back to the disk in the background (writeBack), so
// that the disk writes while the network still receives and the final
// fsync, which alone makes the bytes durable, has only the tail to do.
type syncWriter struct {
	f       *os.File
	pending int64
	kick    chan struct{}
	done    chan struct{}
}

func newSyncWriter(f *os.File) *syncWriter {
	w := &syncWriter{f: f, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for range w.kick {
			writeBack(f) // an error shows at the final Sync
		}
	}()
	return w
}

func (w *syncWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.pending += int64(n)
	if w.pending >= syncEvery {
		w.pending = 0
		select {
		case w.kick <- struct{}{}:
		default: // one is running: the next will cover these bytes too
		}
	}
	return n, err
}

// stop waits for the background sync.
func (w *syncWriter) stop() {
	close(w.kick)
	<-w.done
}
