package deploy

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// compressible is n bytes that compress about as a program does: words
// from a small vocabulary, in a random order.
func compressible(n int, seed byte) []byte {
	r := rand.New(rand.NewChaCha8([32]byte{seed}))
	words := make([][]byte, 512)
	for i := range words {
		w := make([]byte, 3+r.IntN(9))
		for j := range w {
			w[j] = byte('a' + r.IntN(26))
		}
		words[i] = w
	}
	var b bytes.Buffer
	for b.Len() < n {
		b.Write(words[r.IntN(len(words))])
		b.WriteByte(" \n\x00\x01"[r.IntN(4)])
	}
	return b.Bytes()[:n]
}

// framedStream is data compressed as Pack compresses a file.
func framedStream(t testing.TB, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w, _ := framedZstd(&b)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// streamed is data compressed as one streaming frame with a window
// descriptor (not Single_Segment), as other packers write it.
func streamed(t testing.TB, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	e, _ := zstd.NewWriter(&b, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
	e.Write(data)
	e.Flush() // the header before the size is known: a window descriptor
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if b.Bytes()[4]&0x20 != 0 {
		t.Fatal("the streaming encoder wrote a Single_Segment frame")
	}
	return b.Bytes()
}

// frames splits a stream with nextFrame: the content size of each frame
// split off, and what is left from the first frame it does not split.
func frames(t testing.TB, s []byte) (sizes []int, rest []byte) {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(s))
	off := 0
	for {
		raw, size, err := nextFrame(br)
		if err == io.EOF && len(raw) == 0 {
			return sizes, nil
		}
		if err != nil {
			return sizes, s[off:]
		}
		if !bytes.Equal(raw, s[off:off+len(raw)]) {
			t.Fatalf("frame %d: its bytes are not the stream's", len(sizes))
		}
		off += len(raw)
		sizes = append(sizes, size)
	}
}

// readPar reads a stream with the installer's decoder: what it decodes,
// and whether the streaming decoder took over.
func readPar(s []byte) ([]byte, bool, error) {
	p := &parZstd{br: bufio.NewReader(bytes.NewReader(s)), workers: 2}
	got, err := io.ReadAll(io.LimitReader(p, readLimit))
	took := p.rest != nil
	p.Close()
	return got, took, err
}

// readStream reads a stream with the streaming decoder alone.
func readStream(s []byte) ([]byte, error) {
	rc := zstdStream(bytes.NewReader(s))
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, readLimit))
}

// readLimit bounds what readPar and readStream read: more than any test
// stream holds, few enough that a fuzzed stream of blocks that repeat a
// byte does not take the fuzzer's time.
const readLimit = 4 << 20

// Pack writes a Zstandard file as frames of 1 MiB, each with its size,
// that the installer decodes in parallel (the streaming decoder never
// takes over), to the same bytes as the streaming decoder does.
func TestPackedFramesSplit(t *testing.T) {
	data := compressible(3<<20+512<<10, 1)
	s := framedStream(t, data)
	sizes, rest := frames(t, s)
	if want := []int{1 << 20, 1 << 20, 1 << 20, 512 << 10}; !equalInts(sizes, want) || rest != nil {
		t.Fatalf("frames of %v (%d bytes not split), want %v", sizes, len(rest), want)
	}
	got, took, err := readPar(s)
	if err != nil || !bytes.Equal(got, data) || took {
		t.Fatalf("parallel: %d bytes, equal %v, the streaming decoder took over %v: %v", len(got), bytes.Equal(got, data), took, err)
	}
	if got, err := readStream(s); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("streaming: equal %v, %v", bytes.Equal(got, data), err)
	}
	t.Logf("%d bytes in %d frames: %d bytes; one streaming frame: %d", len(data), len(sizes), len(s), len(streamed(t, data)))

	// An empty file is one empty frame, which is not split off.
	empty := framedStream(t, nil)
	if got, _, err := readPar(empty); err != nil || len(got) != 0 {
		t.Fatalf("empty: %q %v", got, err)
	}
	// Packed, the same file extracts through Open, with its CRC-32.
	b, err := open(t, craftWith(t, zipZstd, framedZstd, append(good, entry{"big", 0o644, data})...), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if _, err := b.ExtractTo(out); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(out, "big")); !bytes.Equal(got, data) {
		t.Fatal("big differs after extraction")
	}
}

// The packer writes the same bytes however many frames it compresses at
// once, so a bundle's sha256 names its files on every machine: one core
// or four, written in one piece or a few bytes at a time.
func TestFramesSameOnEveryMachine(t *testing.T) {
	data := compressible(3<<20+12345, 9)
	pack := func(workers, chunk int) []byte {
		var b bytes.Buffer
		w := &frameWriter{w: &b, workers: workers}
		for p := data; len(p) > 0; {
			n := min(chunk, len(p))
			if _, err := w.Write(p[:n]); err != nil {
				t.Fatal(err)
			}
			p = p[n:]
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	want := pack(1, len(data))
	for _, c := range []struct{ workers, chunk int }{{2, len(data)}, {4, len(data)}, {4, 7777}, {3, 1 << 20}, {1, 100}} {
		if got := pack(c.workers, c.chunk); !bytes.Equal(got, want) {
			t.Fatalf("%d workers, writes of %d bytes: %d bytes, not the %d of one worker", c.workers, c.chunk, len(got), len(want))
		}
	}
	if got, _, err := readPar(want); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: equal %v, %v", bytes.Equal(got, data), err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A stream that mixes frames the installer splits off with others (a
// streaming frame with a window, a skippable frame) decodes to the same
// bytes: the streaming decoder takes over at the first frame not split,
// and reads the rest, split frames included.
func TestParZstdHandsOver(t *testing.T) {
	a, c, e := compressible(2<<20, 2), compressible(700<<10, 3), compressible(1<<20+1, 4)
	skip := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 0x184D2A53), 5)
	skip = append(skip, "hello"...)
	s := append(append(append(framedStream(t, a), streamed(t, c)...), skip...), framedStream(t, e)...)
	want := append(append(bytes.Clone(a), c...), e...)
	sizes, rest := frames(t, s)
	if len(sizes) != 2 || len(rest) == 0 {
		t.Fatalf("split %v before the streaming frame, want 2 frames", sizes)
	}
	got, took, err := readPar(s)
	if err != nil || !bytes.Equal(got, want) || !took {
		t.Fatalf("%d bytes of %d, equal %v, the streaming decoder took over %v: %v", len(got), len(want), bytes.Equal(got, want), took, err)
	}
}

// zstdEntry is a bundle (good's entries and one more) whose entry name
// holds data and is stored as compressed, the given Zstandard bytes: the
// CRC-32 and size are data's, as a packer that meant them would write.
func zstdEntry(t *testing.T, name string, data, compressed []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range good {
		w, _ := zw.Create(e.name)
		w.Write(e.body)
	}
	h := &zip.FileHeader{Name: name, Method: zipZstd, CompressedSize64: uint64(len(compressed)),
		UncompressedSize64: uint64(len(data)), CRC32: crc32.ChecksumIEEE(data)}
	h.SetMode(0o644)
	w, err := zw.CreateRaw(h)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(compressed)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Hostile or damaged frames in an entry the installer would decode in
// parallel: each is refused as the streaming decoder would refuse it,
// with ErrBadBundle naming the entry, by Verify and by extracting alike.
func TestParZstdHostile(t *testing.T) {
	data := compressible(3<<20, 5)
	s := framedStream(t, data)
	sizes, _ := frames(t, s)
	if len(sizes) != 3 {
		t.Fatalf("%d frames", len(sizes))
	}
	// Where each frame starts.
	var starts []int
	br := bufio.NewReader(bytes.NewReader(s))
	for off := 0; off < len(s); {
		starts = append(starts, off)
		raw, _, _ := nextFrame(br)
		off += len(raw)
	}

	damaged := bytes.Clone(s)
	for j := starts[1] + 64; j < starts[1]+128; j++ {
		damaged[j] ^= 0x5a
	}
	// The second frame's header says it holds one byte less than it does
	// (a 4-byte Frame_Content_Size follows the descriptor).
	short := bytes.Clone(s)
	if short[starts[1]+4]>>6 != 2 {
		t.Fatalf("frame descriptor %#x: not a 4-byte content size", short[starts[1]+4])
	}
	binary.LittleEndian.PutUint32(short[starts[1]+5:], 1<<20-1)
	// A frame that asks a 64 MiB window after two that are split off.
	wideFrame := streamed(t, compressible(100<<10, 6))
	wideFrame[5] = 16 << 3
	wide := append(bytes.Clone(s[:starts[2]]), wideFrame...)
	wideData := append(bytes.Clone(data[:2<<20]), compressible(100<<10, 6)...)

	for _, tc := range []struct {
		name       string
		data, comp []byte
		want       string
	}{
		{"damaged", data, damaged, `entry "big": its Zstandard data is damaged`},
		{"content size", data, short, `entry "big": its Zstandard data is damaged`},
		{"cut", data, s[:starts[2]+1000], `entry "big": its Zstandard data is damaged`},
		{"window", wideData, wide, `entry "big" is compressed with a Zstandard window of more than 8 MiB`},
		{"crc", append(bytes.Clone(data[:len(data)-1]), data[len(data)-1]^1), s, `entry "big" is damaged: its bytes do not match its CRC-32`},
		{"declared less", data[:1000], s, `entry "big" holds more than the 1000 bytes it declared`},
		{"declared more", append(bytes.Clone(data), 'x'), s, `entry "big": its Zstandard data is damaged: unexpected EOF`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refusedAlike(t, zstdEntry(t, "big", tc.data, tc.comp), Limits{MaxRatio: 1000}, tc.want)
		})
	}
}

// Closing the decoder before the end stops it: a read after Close
// fails, and it does not block on the frames still being decoded.
func TestParZstdClose(t *testing.T) {
	s := framedStream(t, compressible(5<<20, 7))
	p := &parZstd{br: bufio.NewReader(bytes.NewReader(s)), workers: 4}
	if _, err := io.ReadFull(p, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if len(p.ahead) != 3 {
		t.Fatalf("%d frames ahead, want 3 (4 workers, one read)", len(p.ahead))
	}
	p.Close()
	if n, err := p.Read(make([]byte, 10)); n != 0 || err == nil {
		t.Fatalf("read after Close: %d, %v", n, err)
	}
}

// FuzzParZstd: on any stream, the installer's decoder gives what the
// streaming decoder gives: the same bytes, or an error where it errs.
func FuzzParZstd(f *testing.F) {
	// Small frames, as the packer's but of 2 KB, so that the fuzzer runs
	// fast: nextFrame splits off any size up to parFrame.
	small := func(data []byte) []byte {
		e := framedEncoders.Get().(*zstd.Encoder)
		defer framedEncoders.Put(e)
		var out []byte
		for len(data) > 0 {
			n := min(len(data), 2000)
			out, data = e.EncodeAll(data[:n], out), data[n:]
		}
		return out
	}
	a := compressible(7000, 8)
	f.Add(small(a))
	f.Add(small(a[:100]))
	f.Add(append(small(a), streamed(f, a[:3000])...))
	f.Add(append(streamed(f, a[:3000]), small(a[:4000])...))
	f.Add(framedStream(f, nil))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x05, 0x01, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, s []byte) {
		got, _, perr := readPar(s)
		want, serr := readStream(s)
		if (perr == nil) != (serr == nil) {
			t.Fatalf("parallel: %v; streaming: %v", perr, serr)
		}
		if perr == nil && !bytes.Equal(got, want) {
			t.Fatalf("parallel gave %d bytes, streaming %d, not the same", len(got), len(want))
		}
	})
}

// BenchmarkExtractZstd extracts 10 MB of this test's executable from a
// bundle, interleaving the two forms of a Zstandard entry in the same
// run: "frames", as Pack writes it now (frames of 1 MiB that the
// installer decodes in parallel), and "one-frame", one streaming frame
// as Pack wrote it before (and other packers do), which the streaming
// decoder reads alone. ratio is frames' time over one-frame's; the
// sizes are the bundles'.
//
//	go test -run '^$' -bench ExtractZstd -benchtime 20x ./deploy/
func BenchmarkExtractZstd(b *testing.B) {
	exe, err := os.ReadFile(os.Args[0])
	if err != nil || len(exe) < 10<<20+4096 {
		b.Skipf("this test's executable holds %d bytes, not 10 MB: %v", len(exe), err)
	}
	data := exe[4096 : 4096+10<<20]
	forms := []struct {
		name   string
		bundle []byte
		t      time.Duration
	}{
		{"frames", craftWith(b, zipZstd, framedZstd, append(good, entry{"big", 0o644, data})...), 0},
		{"one-frame", craftZstd(b, maxZstdWindow, append(good, entry{"big", 0o644, data})...), 0},
	}
	for i := 0; i < b.N; i++ {
		for k := range forms {
			f := &forms[k]
			bun, err := Open(bytes.NewReader(f.bundle), int64(len(f.bundle)), Limits{})
			if err != nil {
				b.Fatal(err)
			}
			out := b.TempDir()
			t0 := time.Now()
			if _, err := bun.ExtractTo(out); err != nil {
				b.Fatal(err)
			}
			f.t += time.Since(t0)
			os.RemoveAll(out)
		}
	}
	for _, f := range forms {
		b.ReportMetric(float64(f.t.Nanoseconds())/1e6/float64(b.N), "ms/"+f.name)
		b.ReportMetric(float64(len(f.bundle))/1e6, "MB/"+f.name)
	}
	b.ReportMetric(float64(forms[0].t)/float64(forms[1].t), "ratio")
}

// BenchmarkPackZstd compresses 10 MB of this test's executable as Pack
// does now ("frames": frames of 1 MiB, compressed on up to four cores at
// once) and as it did before ("one-frame": one stream, on one core),
// interleaved in the same run; ratio is the first's time over the second's.
//
//	go test -run '^$' -bench PackZstd -benchtime 20x ./deploy/
func BenchmarkPackZstd(b *testing.B) {
	exe, err := os.ReadFile(os.Args[0])
	if err != nil || len(exe) < 10<<20+4096 {
		b.Skipf("this test's executable holds %d bytes, not 10 MB: %v", len(exe), err)
	}
	data := exe[4096 : 4096+10<<20]
	oneFrame := zstd.ZipCompressor(zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(maxZstdWindow))
	forms := []struct {
		name string
		c    func(io.Writer) (io.WriteCloser, error)
		t    time.Duration
	}{{"frames", framedZstd, 0}, {"one-frame", oneFrame, 0}}
	var out bytes.Buffer
	for i := 0; i < b.N; i++ {
		for k := range forms {
			f := &forms[k]
			out.Reset()
			t0 := time.Now()
			w, _ := f.c(&out)
			if _, err := w.Write(data); err != nil {
				b.Fatal(err)
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			f.t += time.Since(t0)
		}
	}
	for _, f := range forms {
		b.ReportMetric(float64(f.t.Nanoseconds())/1e6/float64(b.N), "ms/"+f.name)
	}
	b.ReportMetric(float64(forms[0].t)/float64(forms[1].t), "ratio")
}
