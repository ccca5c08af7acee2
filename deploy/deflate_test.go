package deploy

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What an older manager is sent in place of a Zstandard bundle is the
// bundle a client of its own version packs: byte for byte what Pack and
// PackProgram write deflated, with the same sha256 every time.
func TestWriteDeflatedIsTheDeflatedPack(t *testing.T) {
	dir, _ := appDirWithProgram(t)
	os.MkdirAll(filepath.Join(dir, "empty", "dir"), 0o750)
	var z, d bytes.Buffer
	if _, err := PackWith(dir, &z, PackOptions{Zstd: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := Pack(dir, &d); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(t.TempDir(), "prog")
	exe, _ := os.ReadFile(os.Args[0])
	os.WriteFile(prog, exe[:min(len(exe), 2<<20)], 0o755)
	pz, err := PackProgram(ProgramBundle{Name: "prog", Source: prog, Zstd: true})
	if err != nil {
		t.Fatal(err)
	}
	pd, err := PackProgram(ProgramBundle{Name: "prog", Source: prog})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		zstd, want []byte
	}{{"Pack", z.Bytes(), d.Bytes()}, {"PackProgram", pz, pd}} {
		b, err := open(t, tc.zstd, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if !HasZstd(bytes.NewReader(tc.zstd), int64(len(tc.zstd))) || HasZstd(bytes.NewReader(tc.want), int64(len(tc.want))) {
			t.Fatalf("%s: HasZstd wrong", tc.name)
		}
		var out bytes.Buffer
		if err := b.WriteDeflated(&out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), tc.want) {
			t.Fatalf("%s: the deflated copy (%d bytes) is not what packing deflated gives (%d bytes)", tc.name, out.Len(), len(tc.want))
		}
	}
}

// A bundle mixing methods keeps its stored and deflated entries' bytes
// as they are and recompresses only the Zstandard ones; the result
// extracts to the same files.
func TestWriteDeflatedMixed(t *testing.T) {
	noise := make([]byte, 300<<10)
	rand.NewChaCha8([32]byte{7}).Read(noise)
	text := []byte(fmt.Sprintf("%x", noise[:60<<10])) // compresses, but not 200 times
	var buf bytes.Buffer
	zw := newZipWriter(&buf)
	for _, e := range []struct {
		name   string
		method uint16
		body   []byte
	}{{ManifestName, zip.Deflate, []byte(testManifest)}, {"bin/", zip.Store, nil}, {"bin/run", zipZstd, text}, {"noise", zip.Store, noise}, {"text", zip.Deflate, text}} {
		h := &zip.FileHeader{Name: e.name, Method: e.method, Modified: fixedTime}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(e.name, "/") {
			mode = os.ModeDir | 0o755
		}
		h.SetMode(mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(e.body)
	}
	zw.Close()
	b, err := open(t, buf.Bytes(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := b.WriteDeflated(&out); err != nil {
		t.Fatal(err)
	}
	back, err := open(t, out.Bytes(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]uint16{}
	for _, f := range back.zr.File {
		methods[f.Name] = f.Method
	}
	if methods["bin/run"] != zip.Deflate || methods["noise"] != zip.Store || methods["text"] != zip.Deflate || methods["bin/"] != zip.Store {
		t.Fatalf("methods after: %v", methods)
	}
	if !bytes.Contains(out.Bytes(), noise) {
		t.Fatal("the stored entry's bytes were not copied as they were")
	}
	a, c := t.TempDir(), t.TempDir()
	if _, err := b.ExtractTo(a); err != nil {
		t.Fatal(err)
	}
	if _, err := back.ExtractTo(c); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ManifestName, "bin/run", "noise", "text"} {
		x, _ := os.ReadFile(filepath.Join(a, name))
		y, err := os.ReadFile(filepath.Join(c, name))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs after the copy: %v", name, err)
		}
	}
	if st, err := os.Stat(filepath.Join(c, "bin/run")); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("bin/run: %v %v", st, err)
	}
}

// A hostile Zstandard entry (a window larger than a manager reads) is
// not recompressed: WriteDeflated fails naming it, as installing it would.
func TestWriteDeflatedHostile(t *testing.T) {
	noise := make([]byte, 12<<20)
	rand.NewChaCha8([32]byte{2}).Read(noise[:6<<20])
	copy(noise[6<<20:], noise[:6<<20])
	wide := craftZstd(t, 64<<20, append(good, entry{"wide", 0o644, noise})...)
	b, err := open(t, wide, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	err = b.WriteDeflated(&bytes.Buffer{})
	if !errors.Is(err, ErrBadBundle) || !strings.Contains(err.Error(), `entry "wide"`) {
		t.Fatalf("got %v", err)
	}
}
