package deploy

import (
	"archive/zip"
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/gridmgr/gridmgr/wire"
)

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// craftZstd is craft with every entry compressed with Zstandard, whose
// window is window bytes.
func craftZstd(t testing.TB, window int, es ...entry) []byte {
	return craftWith(t, zipZstd, zstd.ZipCompressor(zstd.WithWindowSize(window), zstd.WithEncoderConcurrency(1)), es...)
}

// A bundle packed with Zstandard holds every file compressed with it,
// is the same bytes packed twice, opens, and extracts byte for byte; the
// library's own zip reader reads it too.
func TestZstdBundles(t *testing.T) {
	dir, _ := appDirWithProgram(t)
	var a, b, deflated bytes.Buffer
	for _, w := range []*bytes.Buffer{&a, &b} {
		if _, err := PackWith(dir, w, PackOptions{Zstd: true}); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("packing the same files twice with Zstandard gave different bytes")
	}
	if _, err := Pack(dir, &deflated); err != nil {
		t.Fatal(err)
	}
	t.Logf("bundle: %d bytes with Zstandard, %d deflated", a.Len(), deflated.Len())
	zr, err := zip.NewReader(bytes.NewReader(a.Bytes()), int64(a.Len()))
	if err != nil {
		t.Fatal(err)
	}
	zr.RegisterDecompressor(zipZstd, zstd.ZipDecompressor())
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		if f.Method != zipZstd {
			t.Errorf("%s: method %d, want %d (Zstandard)", f.Name, f.Method, zipZstd)
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		_, err = got.ReadFrom(rc) // archive/zip checks the CRC-32 at the end
		rc.Close()
		want, _ := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Name)))
		if err != nil || !bytes.Equal(got.Bytes(), want) {
			t.Errorf("%s read by archive/zip: %v, equal %v", f.Name, err, bytes.Equal(got.Bytes(), want))
		}
		if f.Name == "etc/big" && f.CompressedSize64 > f.UncompressedSize64*3/4 {
			t.Errorf("etc/big: %d bytes from %d: not compressed", f.CompressedSize64, f.UncompressedSize64)
		}
	}
	bun, err := open(t, a.Bytes(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if n, err := bun.ExtractTo(out); err != nil || n != bun.Expanded {
		t.Fatalf("extract: %d bytes of %d, %v", n, bun.Expanded, err)
	}
	for _, name := range []string{ManifestName, "bin/run", "etc/conf", "etc/big"} {
		want, _ := os.ReadFile(filepath.Join(dir, name))
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s differs after extraction: %v", name, err)
		}
	}
}

// Hostile Zstandard entries: a window larger than a manager reads (its
// decoder would hold it in memory), damaged data, and more bytes than
// the entry declares. Each fails with ErrBadBundle, naming the entry.
func TestZstdHostile(t *testing.T) {
	noise := make([]byte, 12<<20)
	rand.NewChaCha8([32]byte{2}).Read(noise[:6<<20])
	copy(noise[6<<20:], noise[:6<<20]) // matches 6 MiB back: a large window pays

	wide := craftZstd(t, 64<<20, append(good, entry{"wide", 0o644, noise})...)

	damaged := craftZstd(t, 1<<20, append(good, entry{"blob", 0o644, noise[:1<<20]})...)
	i := bytes.Index(damaged, noise[1000:1016]) // the stored block of the random bytes
	if i < 0 {
		t.Fatal("the random bytes are not in the archive as they were")
	}
	for j := i; j < i+64; j++ {
		damaged[j] ^= 0x5a
	}

	// An entry that declares 1,000 bytes and holds 4 MiB of zeros.
	var liar bytes.Buffer
	zw := zip.NewWriter(&liar)
	for _, e := range good {
		w, _ := zw.Create(e.name)
		w.Write(e.body)
	}
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	body := enc.EncodeAll(make([]byte, 4<<20), nil)
	w, err := zw.CreateRaw(&zip.FileHeader{Name: "zeros", Method: zipZstd, CompressedSize64: uint64(len(body)),
		UncompressedSize64: 1000, CRC32: crc32.ChecksumIEEE(make([]byte, 1000))})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(body)
	zw.Close()

	// An entry compressed with bzip2 (method 12): zip tools write it.
	var bz bytes.Buffer
	zw = zip.NewWriter(&bz)
	zw.RegisterCompressor(12, func(w io.Writer) (io.WriteCloser, error) { return nopCloser{w}, nil })
	for _, e := range append(good, entry{"bz", 0o644, []byte("not really bzip2")}) {
		method := zip.Deflate
		if e.name == "bz" {
			method = 12
		}
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: method})
		w.Write(e.body)
	}
	zw.Close()

	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"bzip2", bz.Bytes(), `entry "bz" is compressed with zip method 12, which a manager does not read`},
		{"window", wide, `entry "wide" is compressed with a Zstandard window of more than 8 MiB`},
		{"damaged", damaged, `entry "blob"`},
		{"liar", liar.Bytes(), `entry "zeros" holds more than the 1000 bytes it declared`},
	} {
		t.Run(tc.name, func(t *testing.T) { refusedAlike(t, tc.data, Limits{}, tc.want) })
	}
	// A manifest compressed with too large a window: refused by Open.
	if _, err := open(t, craftZstd(t, 64<<20, entry{ManifestName, 0o644, append([]byte(testManifest+"\n#"), noise...)}, good[1]), Limits{}); !errors.Is(err, ErrBadBundle) {
		t.Fatalf("a manifest with a 64 MiB window: %v", err)
	}
}

// refusedAlike opens bundle data, which Open accepts (it reads only the
// manifest), and checks that extracting it fails with ErrBadBundle and
// a message holding want, and that Verify (gridmgr app check) says the
// same.
func refusedAlike(t *testing.T, data []byte, lim Limits, want string) {
	t.Helper()
	b, err := open(t, data, lim)
	if err != nil {
		t.Fatalf("Open: %v (it reads only the manifest)", err)
	}
	verr := b.Verify()
	_, err = b.ExtractTo(t.TempDir())
	if !errors.Is(err, ErrBadBundle) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want ErrBadBundle with %q", err, want)
	}
	if verr == nil || verr.Error() != err.Error() {
		t.Fatalf("Verify: %v; extracting: %v", verr, err)
	}
	t.Log(err)
}

// An executor installs and runs a bundle packed with Zstandard; one whose
// entry asks a window too large is refused as a bad bundle, and the host
// is as it was.
func TestExecutorInstallsZstd(t *testing.T) {
	env := newExecEnv(t)
	canRun(t, env.ex)
	keep := func(data []byte) string {
		b, err := Open(bytes.NewReader(data), int64(len(data)), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), b.SHA256+".gapp")
		os.WriteFile(p, data, 0o644)
		env.bundles[b.SHA256] = p
		return b.SHA256
	}
	dir := appDir(t)
	os.WriteFile(filepath.Join(dir, ManifestName), []byte(execManifest), 0o644)
	var buf bytes.Buffer
	if _, err := PackWith(dir, &buf, PackOptions{Zstd: true}); err != nil {
		t.Fatal(err)
	}
	before := env.digest(t)
	a, err := env.ex.Install(Grant{Reservation: "gm1-1-zstdzz", Holder: "alice", CPUs: 1, Mem: 64 << 20}, keep(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.ex.Start(a.Id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "healthy", func() bool { st, _ := env.ex.Status(a.Id); return st != nil && st.Health == "healthy" })
	if _, err := env.ex.Remove(a.Id); err != nil {
		t.Fatal(err)
	}

	noise := make([]byte, 10<<20)
	rand.NewChaCha8([32]byte{3}).Read(noise)
	wide := craftZstd(t, 64<<20, entry{ManifestName, 0o644, []byte(execManifest)}, entry{"bin/run", 0o755, noise})
	_, err = env.ex.Install(Grant{Reservation: "gm1-2-zstdzz", Holder: "alice", CPUs: 1, Mem: 64 << 20}, keep(wide))
	var de *Error
	if !errors.As(err, &de) || de.Code != wire.ErrorReply_CODE_BAD_REQUEST || !strings.Contains(err.Error(), `entry "bin/run" is compressed with a Zstandard window`) {
		t.Fatalf("a bundle with a 64 MiB window: %v; want a bad request naming the entry", err)
	}
	if after := env.digest(t); after != before {
		t.Fatal("the refused install left something behind")
	}
}
