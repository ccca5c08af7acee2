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
	sha      string        // the offered hash, if valid
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
	log = log.With("peer", peer)
	idle := s.Idle
	if idle <= 0 {
		idle = DefaultIdle
	}
	out := outcome{offset: -1}
	defer func() {
		if r := recover(); r != nil { // never take the manager down with one stream
			log.Error("bundle stream: panic", "panic", r)
			out.err, clean = fmt.Errorf("panic: %v", r), false
		}
		if s.onDone != nil {
			s.onDone(out)
		}
	}()

	ir := &idleReader{c: c, idle: idle}
	br := bufio.NewReaderSize(ir, copyBuf)
	bw := bufio.NewWriterSize(c, 512)
	w := pbio.NewDelimitedWriter(bw)
	send := func(m proto.Message) error {
		_ = c.SetWriteDeadline(time.Now().Add(idle))
		if err := w.WriteMsg(m); err != nil {
			return err
		}
		return bw.Flush()
	}
	refuse := func(e *RemoteError) bool {
		out.err = e
		log.Info("bundle refused", "sha256", out.sha, "code", e.Code.String(), "why", e.Message)
		return send(&wire.BundleAccept{Error: e.reply()}) == nil
	}

	var offer wire.BundleOffer
	if err := pbio.NewDelimitedReader(br, MaxFrame).ReadMsg(&offer); err != nil {
		if ir.err != nil && ir.err != io.EOF { // stalled or reset: no one to answer
			out.err = err
			return false
		}
		switch {
		case errors.Is(err, io.ErrShortBuffer):
			return refuse(refusal(wire.ErrorReply_CODE_BAD_REQUEST, "the offer is longer than %d bytes", MaxFrame))
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return refuse(refusal(wire.ErrorReply_CODE_BAD_REQUEST, "the stream ended before a whole BundleOffer"))
		}
		return refuse(refusal(wire.ErrorReply_CODE_BAD_REQUEST, "the offer is not a BundleOffer: %v", err))
	}
	if e := s.checkOffer(&offer); e != nil {
		return refuse(e)
	}
	out.sha = offer.Sha256
	sha, size := offer.Sha256, offer.Size
	log = log.With("sha256", short(sha), "size", size, "reservation", offer.Reservation)

	ctx, cancel := context.WithTimeout(context.Background(), idle)
	err := s.Check(ctx, peer, offer.Reservation)
	cancel()
	if err != nil {
		var re *RemoteError
		if !errors.As(err, &re) {
			re = refusal(wire.ErrorReply_CODE_FORBIDDEN, "%s", err.Error())
		}
		return refuse(re)
	}

	// Already stored: nothing to send.
	if e := s.stored(sha, size); e != nil {
		return refuse(e)
	}
	if s.Store.size(sha) == size {
		out.offset = size
		s.Store.touch(sha) // used again: evicted last
		log.Info("bundle already stored")
		return send(&wire.BundleAccept{Offset: size}) == nil &&
			send(&wire.BundleStored{Sha256: sha}) == nil
	}

	maxPartial := s.MaxPartial
	if maxPartial <= 0 {
		maxPartial = 4 * s.MaxSize
	}
	lim := limits{maxPartial: maxPartial, maxStore: s.MaxStore, storeName: s.storeLimitName(), inUse: s.InUse}
	if err := s.Store.begin(sha, size, lim); err != nil {
		var full *storeFullError
		switch {
		case errors.Is(err, errBusy):
			return refuse(refusal(wire.ErrorReply_CODE_UNAVAILABLE,
				"bundle %s is being uploaded by another stream; try again when it is done", short(sha)))
		case errors.As(err, &full) && !full.transient():
			return refuse(refusal(wire.ErrorReply_CODE_REFUSED, "%v", err))
		}
		return refuse(refusal(wire.ErrorReply_CODE_OVERLOADED, "%v", err))
	}
	if !s.enter() {
		s.Store.done(sha)
		return refuse(refusal(wire.ErrorReply_CODE_OVERLOADED,
			"this manager is already receiving as many bundles as it takes at once (%d); try again later", s.maxUploads()))
	}
	// The slot and the hash are free again before the last answer, so a
	// client told "stored" finds them free.
	release := sync.OnceFunc(func() { s.leave(); s.Store.done(sha) })
	defer release()
	// A refusal after the bytes frees them first too: a client told to
	// send again must not find its own upload still holding the hash.
	refuseAfter := func(e *RemoteError) bool {
		release()
		return refuseStored(send, &out, log, e)
	}
	// Stored by an upload that ended between the check above and begin.
	if s.Store.size(sha) == size {
		out.offset = size
		return send(&wire.BundleAccept{Offset: size}) == nil &&
			send(&wire.BundleStored{Sha256: sha}) == nil
	}

	f, h, offset, err := s.Store.openPartial(sha, size)
	if err != nil {
		log.Error("bundle: partial file", "err", err)
		return refuse(refusal(wire.ErrorReply_CODE_UNAVAILABLE, "this manager cannot write the bundle: %v", err))
	}
	discard := func() {
		f.Close()
		os.Remove(f.Name())
	}
	out.offset = offset
	// keep closes f after the client went away, keeping what it holds
	// for a resume if there is something and it is on disk.
	keep := func(err error, have int64) bool {
		serr := f.Sync()
		f.Close()
		out.err, out.kept = err, serr == nil && have > 0
		if !out.kept {
			os.Remove(f.Name())
		}
		return false
	}
	if err := send(&wire.BundleAccept{Offset: offset}); err != nil {
		return keep(err, offset)
	}
	log.Debug("bundle accepted", "offset", offset)

	// The raw bytes, hashed as they arrive.
	t0 := time.Now()
	sw := newSyncWriter(f)
	fw := &errWriter{w: io.Writer(sw)}
	if s.wrapWrite != nil {
		fw.w = s.wrapWrite(sw)
	}
	n, err := io.CopyBuffer(io.MultiWriter(fw, h), io.LimitReader(br, size-offset), make([]byte, copyBuf))
	sw.stop()
	out.received, out.recv = n, time.Since(t0)
	if fw.err != nil {
		// The disk failed, not the client: what was written may be
		// short or wrong, and a full disk needs its room back.
		discard()
		log.Error("bundle: write", "err", fw.err)
		return refuseAfter(refusal(wire.ErrorReply_CODE_UNAVAILABLE,
			"this manager cannot write the bundle: %v; nothing was kept", fw.err))
	}
	if err == nil && n < size-offset {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		// Interrupted or stalled: keep what arrived for a resume (for
		// PartialAge, unless the client comes back).
		keep(err, offset+n)
		log.Info("bundle upload interrupted", "have", offset+n, "kept", out.kept, "err", err)
		return false
	}
	// The client ends its side after the bytes: anything more is a lie
	// about the size.
	var one [1]byte
	if k, err := io.ReadFull(br, one[:]); k > 0 {
		discard()
		out.err = errors.New("more bytes than offered")
		return refuseAfter(refusal(wire.ErrorReply_CODE_BAD_REQUEST,
			"the client sent more than the %d bytes it offered; nothing was stored", size))
	} else if err != io.EOF {
		return keep(err, size)
	}
	t1 := time.Now()
	if err := f.Sync(); err != nil {
		discard()
		log.Error("bundle: sync", "err", err)
		return refuseAfter(refusal(wire.ErrorReply_CODE_UNAVAILABLE, "this manager cannot write the bundle: %v", err))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha {
		discard()
		return refuseAfter(refusal(wire.ErrorReply_CODE_BAD_REQUEST,
			"the bytes received hash to %s, not to the offered %s; nothing was stored (the partial upload was discarded: send the bundle again)",
			short(got), short(sha)))
	}
	if err := s.Store.commit(f, sha); err != nil {
		os.Remove(f.Name())
		log.Error("bundle: store", "err", err)
		return refuseAfter(refusal(wire.ErrorReply_CODE_UNAVAILABLE, "this manager cannot store the bundle: %v", err))
	}
	out.commit = time.Since(t1)
	log.Info("bundle stored", "received", n)
	release()
	return send(&wire.BundleStored{Sha256: sha}) == nil
}

func refuseStored(send func(proto.Message) error, out *outcome, log *slog.Logger, e *RemoteError) bool {
	out.err = e
	log.Info("bundle not stored", "code", e.Code.String(), "why", e.Message)
	return send(&wire.BundleStored{Sha256: out.sha, Error: e.reply()}) == nil
}

// checkOffer validates an offer's fields and the server's configuration.
func (s *Server) checkOffer(o *wire.BundleOffer) *RemoteError {
	switch {
	case s.Store == nil || s.MaxSize <= 0 || s.Check == nil:
		return refusal(wire.ErrorReply_CODE_UNAVAILABLE, "this manager does not accept bundles (%s is not set)", s.limitName())
	case !ValidSHA(o.Sha256):
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

// errWriter keeps the first error of w: a write error is the disk's, not
// the client's.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil && e.err == nil {
		e.err = err
	}
	return n, err
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

// syncEvery is how many bytes a syncWriter lets pile up before it starts a
// background fsync.
const syncEvery = 4 << 20

// syncWriter writes to a file and, every syncEvery bytes, syncs it in the
// background, so that the disk writes while the network still receives
// and the final fsync has only the tail to do.
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
			_ = f.Sync() // an error shows again at the final Sync
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
