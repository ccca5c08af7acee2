package deploy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// A Zstandard entry as Pack writes it is a run of independent frames,
// each holding zstdFrame bytes of the file (the last one the rest), each
// with its size in its header. Several frames can then be decoded at
// once, one per core (on two cores a file of 10 MB extracts in about 0.6
// of the time: BenchmarkExtractZstd), and compressed at once too. Any
// Zstandard decoder reads such an entry as one stream: concatenated
// frames are the format's own. It costs about 1 % in size (each frame
// starts without the previous one's history).
//
// Reading, parZstd decodes the frames it can split off the stream (see
// nextFrame) on up to parWorkers goroutines, in order; at the first frame
// of another shape (written by another packer, cut short, or hostile) it
// hands the rest of the stream, from that frame on, to the streaming
// decoder, which reads everything a manager read before and refuses what
// it refused, in the same words. A split-off frame whose data is damaged,
// or that holds another size than its header says, is refused as
// damaged. archive/zip checks the bytes that come out (their number and
// CRC-32) either way.
const (
	// zstdFrame is how much of a file each frame Pack writes holds.
	zstdFrame = 1 << 20
	// parFrame bounds the frames decoded in parallel: a frame that says
	// it holds more goes to the streaming decoder. Its bytes, and the
	// frame's own, are in memory while it is decoded.
	parFrame = 2 << 20
	// parSlack is how many more bytes than its content a frame split
	// off may take (block headers, incompressible blocks stored as they
	// are, the checksum); a frame that takes more is not split.
	parSlack = 64 << 10
	// zstdMagic starts every Zstandard frame (little-endian).
	zstdMagic = 0xFD2FB528
	// maxBlock is the largest block a frame may hold (RFC 8878 §3.1.1.2.3).
	maxBlock = 128 << 10
)

// framedEncoders are the encoders Pack's frames are written with: one
// goroutine each, a bounded window (Single_Segment frames of zstdFrame
// bytes need no more than that anyway), the same bytes for the same file.
var framedEncoders = sync.Pool{New: func() any {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(maxZstdWindow))
	if err != nil {
		panic(err) // only for bad options, which are constant
	}
	return e
}}

// framedZstd is the zip compressor of Zstandard entries: independent
// frames of zstdFrame bytes, compressed on up to parWorkers goroutines at
// once and written in order.
func framedZstd(w io.Writer) (io.WriteCloser, error) {
	return &frameWriter{w: w, workers: parWorkers()}, nil
}

// frameWriter writes what it is given as frames of zstdFrame bytes.
type frameWriter struct {
	w       io.Writer
	buf     []byte            // the next frame's bytes, fewer than zstdFrame
	ahead   []chan compressed // frames being compressed, in order
	free    [][]byte          // buffers of frames written
	workers int
	frames  int
	err     error
}

type compressed struct{ in, out []byte }

func (f *frameWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && f.err == nil {
		// Grown as the file comes: a small file takes a small buffer.
		k := min(len(p), zstdFrame-len(f.buf))
		f.buf, p = append(f.buf, p[:k]...), p[k:]
		if len(f.buf) == zstdFrame {
			f.frame()
		}
	}
	if f.err != nil {
		return 0, f.err
	}
	return n, nil
}

// frame starts compressing the buffered bytes as one frame, once fewer
// than workers frames are being compressed.
func (f *frameWriter) frame() {
	if len(f.ahead) >= max(f.workers, 1) {
		f.writeOne()
	}
	ch := make(chan compressed, 1)
	f.ahead = append(f.ahead, ch)
	go func(in []byte) {
		e := framedEncoders.Get().(*zstd.Encoder)
		out := e.EncodeAll(in, nil)
		framedEncoders.Put(e)
		ch <- compressed{in, out}
	}(f.buf)
	f.frames++
	f.buf = nil
	if n := len(f.free); n > 0 {
		f.buf, f.free = f.free[n-1][:0], f.free[:n-1]
	}
}

// writeOne writes the oldest frame being compressed, once it is.
func (f *frameWriter) writeOne() {
	c := <-f.ahead[0]
	f.ahead = f.ahead[1:]
	f.free = append(f.free, c.in)
	if f.err == nil {
		_, f.err = f.w.Write(c.out)
	}
}

// Close writes the last frames: the rest of the file, or an empty frame
// for an empty file (a stream holds at least one).
func (f *frameWriter) Close() error {
	if f.err == nil && (len(f.buf) > 0 || f.frames == 0) {
		f.frame()
	}
	for len(f.ahead) > 0 {
		f.writeOne()
	}
	return f.err
}

// zstdStream is the streaming decoder: one goroutine, within
// maxZstdWindow. It reads every Zstandard stream a manager reads.
var zstdStream = zstd.ZipDecompressor(zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow), zstd.WithDecoderMaxMemory(maxZstdWindow*2))

// frameDecoders decode one split-off frame each (DecodeAll): the
// streaming decoder's window bound, and no more than parFrame bytes out.
var frameDecoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow), zstd.WithDecoderMaxMemory(parFrame))
	if err != nil {
		panic(err) // only for bad options, which are constant
	}
	return d
}}

// parWorkers is how many frames of one entry are decoded at once.
func parWorkers() int { return min(runtime.GOMAXPROCS(0), 4) }

// newZstdReader is the zip decompressor of Zstandard entries: r is the
// entry's compressed bytes.
func newZstdReader(r io.Reader) io.ReadCloser {
	p := &parZstd{br: bufio.NewReaderSize(r, bufFor(r)), workers: parWorkers()}
	if p.workers < 2 {
		p.end, p.rest = true, zstdStream(p.br) // nothing to gain from splitting
	}
	return p
}

// parZstd decodes frames split off br in parallel and the rest of the
// stream, from the first frame it does not split on, with the streaming
// decoder.
type parZstd struct {
	br      *bufio.Reader
	workers int
	ahead   []chan decoded // frames being decoded, in order
	cur     []byte         // what is left of the frame being read
	whole   []byte         // the frame cur is the end of
	rest    io.ReadCloser  // the streaming decoder, once it has taken over
	end     bool           // no more frames to split off: br is at its end, or rest has it
	err     error
}

type decoded struct {
	b   []byte
	err error
}

func (p *parZstd) Read(b []byte) (int, error) {
	for len(p.cur) == 0 {
		if p.err != nil {
			return 0, p.err
		}
		p.split()
		if len(p.ahead) == 0 {
			if p.rest != nil {
				return p.rest.Read(b)
			}
			return 0, io.EOF
		}
		d := <-p.ahead[0]
		p.ahead = p.ahead[1:]
		if d.err != nil {
			p.err = d.err
			return 0, d.err
		}
		p.cur, p.whole = d.b, d.b
	}
	n := copy(b, p.cur)
	p.cur = p.cur[n:]
	if len(p.cur) == 0 {
		putBuf(p.whole) // read to its end: nothing refers to it any more
		p.cur, p.whole = nil, nil
	}
	return n, nil
}

// Buffers of frames of more than poolMin bytes (raw and decoded) are
// kept for the next frame, of this entry or another: a frame of 1 MiB
// took two fresh ones, cleared by the runtime, a third of the CPU time
// of decoding it. Smaller frames (small files) take what they need.
const poolMin = 128 << 10

var frameBufs sync.Pool // of *[]byte, each of cap parFrame + parSlack

func getBuf(need int) []byte {
	if need > parFrame+parSlack {
		return make([]byte, 0, need)
	}
	if b, ok := frameBufs.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, parFrame+parSlack)
}

// putBuf keeps b's array for getBuf if it is one of its size.
func putBuf(b []byte) {
	if cap(b) == parFrame+parSlack {
		b = b[:0]
		frameBufs.Put(&b)
	}
}

// split starts decoding frames until workers are under way or there are
// no more to split off.
func (p *parZstd) split() {
	for !p.end && len(p.ahead) < p.workers {
		raw, size, err := nextFrame(p.br)
		switch {
		case err == io.EOF && len(raw) == 0:
			p.end = true
		case err == errNotSplit || err == io.EOF || err == io.ErrUnexpectedEOF:
			// From this frame on, the stream is the streaming decoder's,
			// which says what is wrong with it, if anything.
			p.end = true
			p.rest = zstdStream(io.MultiReader(bytes.NewReader(raw), p.br))
		case err != nil:
			p.end, p.err = true, err // the disk's
		default:
			ch := make(chan decoded, 1)
			p.ahead = append(p.ahead, ch)
			go decodeFrame(raw, size, ch)
		}
	}
}

// decodeFrame decodes one frame that says it holds size bytes.
func decodeFrame(raw []byte, size int, ch chan<- decoded) {
	d := frameDecoders.Get().(*zstd.Decoder)
	var dst []byte
	if size > poolMin {
		dst = getBuf(size)
	} else {
		dst = make([]byte, 0, size)
	}
	out, err := d.DecodeAll(raw, dst)
	frameDecoders.Put(d)
	putBuf(raw)
	if err == nil && len(out) != size {
		err = fmt.Errorf("a frame holds %d bytes, not the %d its header says", len(out), size)
	}
	ch <- decoded{out, err}
}

// Close stops reading. Frames still being decoded finish on their own.
func (p *parZstd) Close() error {
	p.end, p.ahead, p.cur, p.whole = true, nil, nil, nil
	if p.err == nil {
		p.err = errors.New("zstd: reader closed")
	}
	if p.rest != nil {
		return p.rest.Close()
	}
	return nil
}

// errNotSplit: the frame at hand is not one nextFrame splits off.
var errNotSplit = errors.New("not a frame to split off")

// nextFrame reads the next frame off br if it is one to decode on its
// own: a Zstandard frame (not a skippable one), Single_Segment, with its
// content size in its header (0 < size ≤ parFrame), no dictionary, and
// blocks of the format's kinds and sizes taking at most size + parSlack
// bytes. It returns the frame's bytes and its content size. Otherwise it
// returns the bytes it read and errNotSplit, or the read error (io.EOF
// with no bytes: the stream's end); the bytes read are the start of
// what is left of the stream.
func nextFrame(br *bufio.Reader) (raw []byte, size int, err error) {
	take := func(n int) ([]byte, error) {
		start := len(raw)
		raw = slices.Grow(raw, n)[:start+n]
		k, err := io.ReadFull(br, raw[start:])
		raw = raw[:start+k]
		return raw[start:], err
	}
	h, err := take(5) // magic and frame header descriptor
	if err != nil {
		return raw, 0, err
	}
	desc := h[4]
	fcsFlag, single, reserved, checksum, dictFlag := desc>>6, desc>>5&1, desc>>3&1, desc>>2&1, desc&3
	if binary.LittleEndian.Uint32(h) != zstdMagic || single == 0 || reserved != 0 || dictFlag != 0 {
		return raw, 0, errNotSplit
	}
	fcsLen := [4]int{1, 2, 4, 8}[fcsFlag]
	f, err := take(fcsLen)
	if err != nil {
		return raw, 0, err
	}
	var fcs uint64
	for i := fcsLen - 1; i >= 0; i-- {
		fcs = fcs<<8 | uint64(f[i])
	}
	if fcsLen == 2 {
		fcs += 256
	}
	if fcs == 0 || fcs > parFrame {
		return raw, 0, errNotSplit
	}
	size = int(fcs)
	// Room for the frame as stored blocks (3 bytes of header a block of
	// 128 KiB, the checksum): compressed, it takes less.
	if need := size + 3*(size/maxBlock+1) + 8; need > poolMin {
		raw = append(getBuf(need), raw...)
	} else {
		raw = slices.Grow(raw, need)
	}
	for last := false; !last; {
		bh, err := take(3)
		if err != nil {
			return raw, 0, err
		}
		v := int(bh[0]) | int(bh[1])<<8 | int(bh[2])<<16
		n := v >> 3
		last = v&1 == 1
		switch v >> 1 & 3 {
		case 1: // RLE: one byte, repeated n times
			n = 1
		case 3: // reserved
			return raw, 0, errNotSplit
		}
		if v>>3 > maxBlock || len(raw)+n > size+parSlack {
			return raw, 0, errNotSplit
		}
		if _, err := take(n); err != nil {
			return raw, 0, err
		}
	}
	if checksum == 1 {
		if _, err := take(4); err != nil {
			return raw, 0, err
		}
	}
	return raw, size, nil
}
