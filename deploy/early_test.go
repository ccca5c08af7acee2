package deploy

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// arrive feeds bundle to a new early unpacking of c, in runs of random
// sizes as an upload writes them, and ends it as stored; it returns the
// sha256 it is kept under (nil Early: the budget refused it).
func arrive(t testing.TB, c *EarlyCache, bundle []byte, seed uint64) string {
	t.Helper()
	e := c.Begin(int64(len(bundle)))
	sum := sha256.Sum256(bundle)
	sha := hex.EncodeToString(sum[:])
	if e == nil {
		return sha
	}
	r := rand.New(rand.NewPCG(seed, 1))
	for p := bundle; len(p) > 0; {
		n := min(len(p), 1+r.IntN(70000))
		e.Bytes(p[:n])
		p = p[n:]
	}
	e.End(sha)
	return sha
}

// extractBoth extracts bundle without early unpacking and with one fed
// the same bytes (from c); it returns the two outcomes (the digest of
// what was written, or the error) and how many files were taken from
// what was decoded early.
func extractBoth(t testing.TB, c *EarlyCache, bundle []byte) (plain, early string, hits int) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "out") // the same for both: Digest hashes its name
	outcome := func(e *Early) string {
		defer e.Release()
		b, err := Open(bytes.NewReader(bundle), int64(len(bundle)), Limits{})
		if err != nil {
			return "open: " + err.Error()
		}
		b.early = e
		os.RemoveAll(dir)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := b.ExtractTo(dir); err != nil {
			return "extract: " + strings.ReplaceAll(err.Error(), dir, "DIR")
		}
		d, err := Digest(dir)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	plain = outcome(nil)
	sha := arrive(t, c, bundle, uint64(len(bundle)))
	c.mu.Lock()
	before := c.hits
	c.mu.Unlock()
	early = outcome(c.Take(sha))
	c.mu.Lock()
	hits = c.hits - before
	c.mu.Unlock()
	return plain, early, hits
}

// earlyBundle packs a directory of several files, as app pack does:
// one of 3.5 MiB (frames of 1 MiB), small ones, an empty one, a
// directory.
func earlyBundle(t testing.TB) []byte {
	t.Helper()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.MkdirAll(filepath.Join(dir, "etc", "empty"), 0o755)
	os.WriteFile(filepath.Join(dir, ManifestName), []byte(testManifest), 0o644)
	os.WriteFile(filepath.Join(dir, "bin", "run"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "etc", "big"), compressible(3<<20+1<<19, 3), 0o644)
	os.WriteFile(filepath.Join(dir, "etc", "none"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "etc", "conf"), bytes.Repeat([]byte("x"), 5000), 0o600)
	var buf bytes.Buffer
	if _, err := PackWith(dir, &buf, PackOptions{Zstd: true}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Files decoded as the bundle arrived are the files decoding it writes:
// for a bundle as app pack writes it (the files it decoded early are
// used), a deflated one (none are), one whose budget holds only part of
// it, and an upload that was not stored (nothing is kept). Nothing of the
// budget is held once released.
func TestEarlyIsExtraction(t *testing.T) {
	bundle := earlyBundle(t)
	c := NewEarlyCache(64 << 20)
	plain, early, hits := extractBoth(t, c, bundle)
	if plain != early || len(plain) != 64 {
		t.Fatalf("extracted %q; with early unpacking %q", plain, early)
	}
	// etc/big and etc/conf. The smallest files (app.toml, bin/run) are
	// frames with a window, the empty one a frame of no bytes: the
	// streaming decoder's, passed over early.
	if hits != 2 {
		t.Fatalf("%d files were taken from early unpacking", hits)
	}
	if c.Held() != 0 {
		t.Fatalf("%d bytes held after the release", c.Held())
	}

	deflated := craft(t, good...)
	if plain, early, hits := extractBoth(t, c, deflated); plain != early || hits != 0 {
		t.Fatalf("deflated: %q against %q, %d files early", plain, early, hits)
	}

	// Room for the bytes and two of etc/big's four frames: the decoder
	// stops there, and the installation decodes the rest itself.
	small := NewEarlyCache(int64(len(bundle)) + 2<<20)
	if p, e, hits := extractBoth(t, small, bundle); p != e || len(p) != 64 || hits != 0 {
		t.Fatalf("within a small budget: %q, %q, %d files early", p, e, hits)
	}
	if small.Held() != 0 {
		t.Fatalf("%d bytes held after the release", small.Held())
	}
	if NewEarlyCache(int64(len(bundle))-1).Begin(int64(len(bundle))) != nil {
		t.Fatal("began an upload larger than the budget")
	}

	e := c.Begin(int64(len(bundle)))
	e.Bytes(bundle[:len(bundle)/2])
	e.End("")
	if c.Held() != 0 || c.Take(hex.EncodeToString(make([]byte, 32))) != nil {
		t.Fatalf("an upload not stored left %d bytes", c.Held())
	}
}

// Bundles whose local headers say something other than their central
// directory, or whose frames are damaged: installing with early
// unpacking writes, or refuses, exactly what installing without does.
func TestEarlyHostile(t *testing.T) {
	bundle := earlyBundle(t)
	zr, err := zip.NewReader(bytes.NewReader(bundle), int64(len(bundle)))
	if err != nil {
		t.Fatal(err)
	}
	var big *zip.File
	for _, f := range zr.File {
		if f.Name == "etc/big" {
			big = f
		}
	}
	off, _ := big.DataOffset()
	mutate := func(f func(b []byte)) []byte {
		b := bytes.Clone(bundle)
		f(b)
		return b
	}
	cases := map[string][]byte{
		// A byte of the second frame's data.
		"damaged frame": mutate(func(b []byte) { b[off+1<<20/2] ^= 0x55 }),
		// The central directory's CRC-32 of etc/big.
		"central CRC": mutate(func(b []byte) {
			for j := bytes.LastIndex(b, []byte("PK\x01\x02")); j >= 0; j = bytes.LastIndex(b[:j], []byte("PK\x01\x02")) {
				if bytes.HasPrefix(b[j+46:], []byte("etc/big")) {
					b[j+16] ^= 1
					return
				}
			}
			t.Fatal("no central header for etc/big")
		}),
		// The local header of etc/big says its name is one byte longer:
		// its data starts elsewhere than the early decoder read it.
		"local name length": mutate(func(b []byte) {
			h := bytes.LastIndex(b[:off], []byte("PK\x03\x04"))
			b[h+26]++
		}),
		// The CRC-32 in etc/big's data descriptor, which archive/zip
		// checks against the central directory's.
		"descriptor CRC": mutate(func(b []byte) {
			d := int(off) + int(big.CompressedSize64)
			if !bytes.HasPrefix(b[d:], []byte("PK\x07\x08")) {
				t.Fatal("no data descriptor after etc/big")
			}
			b[d+4] ^= 1
		}),
		// A frame header after the first that says one byte less.
		"frame size": mutate(func(b []byte) {
			f := bytes.Index(b[off+4:], []byte{0x28, 0xb5, 0x2f, 0xfd})
			b[int(off)+4+f+5]--
		}),
	}
	c := NewEarlyCache(64 << 20)
	for name, b := range cases {
		plain, early, _ := extractBoth(t, c, b)
		if plain != early {
			t.Errorf("%s: extracted %q; with early unpacking %q", name, plain, early)
		}
		if len(plain) == 64 && name != "local name length" {
			t.Errorf("%s: the bundle extracted (the test broke nothing)", name)
		}
	}
	if c.Held() != 0 {
		t.Fatalf("%d bytes held after the releases", c.Held())
	}
}

// FuzzEarly: whatever the bytes of a bundle, early unpacking changes
// nothing of what extracting it writes or refuses.
func FuzzEarly(f *testing.F) {
	// Small frames, so that the fuzzer runs fast.
	small := func(w io.Writer) (io.WriteCloser, error) { return &smallFrames{w: w}, nil }
	body := compressible(12000, 4)
	seed := craftWith(f, zipZstd, small, append(good, entry{"etc/a", 0o644, body}, entry{"etc/b", 0o600, body[:10]})...)
	if _, _, hits := extractBoth(f, NewEarlyCache(1<<20), seed); hits != 1 {
		f.Fatalf("etc/a of the first seed was not decoded early (%d files were)", hits)
	}
	f.Add(seed)
	f.Add(craftWith(f, zipZstd, small, good...))
	f.Add(craftWith(f, zip.Deflate, nil, good...))
	c := NewEarlyCache(1 << 20)
	f.Fuzz(func(t *testing.T, bundle []byte) {
		if len(bundle) > 1<<20 {
			return
		}
		plain, early, _ := extractBoth(t, c, bundle)
		if plain != early {
			t.Fatalf("extracted %q; with early unpacking %q", plain, early)
		}
		if c.Held() != 0 {
			t.Fatalf("%d bytes held after the release", c.Held())
		}
	})
}

// smallFrames is the packer's compressor with frames of 5 KB (the
// encoder writes smaller ones with a window: not split off).
type smallFrames struct {
	w   io.Writer
	buf []byte
}

func (s *smallFrames) Write(p []byte) (int, error) {
	s.buf = append(s.buf, p...)
	return len(p), nil
}

func (s *smallFrames) Close() error {
	e := framedEncoders.Get().(*zstd.Encoder)
	defer framedEncoders.Put(e)
	var out []byte
	data := s.buf
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), 5000)
		out, data = e.EncodeAll(data[:n], out), data[n:]
	}
	_, err := s.w.Write(out)
	return err
}

// An early unpacking no installation takes is dropped after the cache's
// ttl (EarlyTTL, 30 s, in a manager), and its budget given back: a
// client that uploads and never installs holds nothing for good.
func TestEarlyDroppedAfterTTL(t *testing.T) {
	bundle := earlyBundle(t)
	c := NewEarlyCache(64 << 20)
	c.ttl = 20 * time.Millisecond
	sha := arrive(t, c, bundle, 1)
	if c.Held() == 0 {
		t.Fatal("the cache holds nothing of an upload just stored")
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Held() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still held 10 s after a ttl of 20 ms", c.Held())
		}
		time.Sleep(5 * time.Millisecond) // polling for the AfterFunc, not timing
	}
	if e := c.Take(sha); e != nil {
		e.Release()
		t.Fatal("an early unpacking could still be taken after its ttl")
	}
	// Taken before its ttl, it is the taker's: the ttl passing does not
	// release it under the installation.
	c.ttl = 20 * time.Millisecond
	sha = arrive(t, c, bundle, 2)
	e := c.Take(sha)
	if e == nil {
		t.Fatal("nothing to take right after the upload")
	}
	// Past the ttl. A late timer could only make this pass when it
	// should fail, never fail when it should pass.
	time.Sleep(60 * time.Millisecond)
	if c.Held() == 0 {
		t.Fatal("the ttl released an early unpacking an installation had taken")
	}
	e.Release()
	if c.Held() != 0 {
		t.Fatalf("%d bytes held after the installation released it", c.Held())
	}
}
