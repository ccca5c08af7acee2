package deploy

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const testManifest = `name = "t"
version = "1"
[install]
files = [{ from = "bin/run", mode = "0755" }]
[run]
command = ["bin/run"]
`

// appDir makes a directory with a manifest and the file it places.
func appDir(t *testing.T) string {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.MkdirAll(filepath.Join(dir, "etc"), 0o755)
	os.WriteFile(filepath.Join(dir, ManifestName), []byte(testManifest), 0o644)
	os.WriteFile(filepath.Join(dir, "bin", "run"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "etc", "conf"), bytes.Repeat([]byte("x"), 5000), 0o600)
	return dir
}

// appDirWithProgram is appDir with etc/big, the first 3 MiB of this
// test's executable (bytes that compress as a program's do), which it
// also returns.
func appDirWithProgram(t *testing.T) (string, []byte) {
	t.Helper()
	dir := appDir(t)
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe = exe[:min(len(exe), 3<<20)]
	if err := os.WriteFile(filepath.Join(dir, "etc", "big"), exe, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, exe
}

func open(t *testing.T, data []byte, lim Limits) (*Bundle, error) {
	t.Helper()
	return Open(bytes.NewReader(data), int64(len(data)), lim)
}

// TestPackOpenExtract: a packed directory opens, extracts byte for byte
// with its modes, and packing it again gives the same bytes (the sha256
// names the content).
func TestPackOpenExtract(t *testing.T) {
	dir := appDir(t)
	var a, b bytes.Buffer
	if _, err := Pack(dir, &a); err != nil {
		t.Fatal(err)
	}
	if _, err := Pack(dir, &b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("packing the same files twice gave different bytes")
	}
	bun, err := open(t, a.Bytes(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if bun.Manifest.Name != "t" || len(bun.Files) != 5 || bun.Expanded != int64(len(testManifest)+18+5000) || len(bun.SHA256) != 64 {
		t.Fatalf("bundle: %+v", bun)
	}
	out := t.TempDir()
	if n, err := bun.ExtractTo(out); err != nil || n != bun.Expanded {
		t.Fatalf("extract: %d bytes, %v", n, err)
	}
	for _, name := range []string{ManifestName, "bin/run", "etc/conf"} {
		want, _ := os.ReadFile(filepath.Join(dir, name))
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s differs after extraction: %v", name, err)
		}
		ws, _ := os.Stat(filepath.Join(dir, name))
		gs, _ := os.Stat(filepath.Join(out, name))
		if gs.Mode().Perm() != ws.Mode().Perm() {
			t.Errorf("%s: mode %v, want %v", name, gs.Mode().Perm(), ws.Mode().Perm())
		}
	}
}

// A bundle Pack and PackProgram make is a plain zip archive: the standard
// library's reader (its own inflate, no decompressor of ours) reads every
// entry back, byte for byte, checksums included; and what the standard
// library's writer deflates, Open reads. Files that compress (text, an
// executable) are deflated, not stored.
func TestBundlesAreStandardZip(t *testing.T) {
	dir, exe := appDirWithProgram(t)
	var packed bytes.Buffer
	if _, err := Pack(dir, &packed); err != nil {
		t.Fatal(err)
	}
	prog, err := PackProgram(ProgramBundle{Name: "p", Source: filepath.Join(dir, "etc", "big")})
	if err != nil {
		t.Fatal(err)
	}
	for what, data := range map[string][]byte{"Pack": packed.Bytes(), "PackProgram": prog} {
		zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatalf("%s: archive/zip: %v", what, err)
		}
		found := false
		for _, f := range zr.File {
			if strings.HasSuffix(f.Name, "/") {
				continue
			}
			rc, err := f.Open()
			if err != nil {
				t.Fatalf("%s: %s: %v", what, f.Name, err)
			}
			var got bytes.Buffer
			_, err = got.ReadFrom(rc) // archive/zip checks the CRC-32 at the end
			rc.Close()
			if err != nil {
				t.Fatalf("%s: %s: %v", what, f.Name, err)
			}
			if bytes.Equal(got.Bytes(), exe) {
				found = true
				if f.Method != zip.Deflate || f.CompressedSize64 > f.UncompressedSize64*3/4 {
					t.Errorf("%s: %s: method %d, %d bytes from %d: want it deflated", what, f.Name, f.Method, f.CompressedSize64, f.UncompressedSize64)
				}
			}
		}
		if !found {
			t.Errorf("%s: the executable's bytes are not in the archive as they were", what)
		}
	}
	// The standard library's own deflate, read by Open and extracted.
	var std bytes.Buffer
	zw := zip.NewWriter(&std)
	for _, e := range []struct {
		name string
		data []byte
	}{{ManifestName, []byte(testManifest)}, {"bin/run", exe}} {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Deflate})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(e.data)
	}
	zw.Close()
	bun, err := open(t, std.Bytes(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if _, err := bun.ExtractTo(out); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(out, "bin", "run")); !bytes.Equal(got, exe) {
		t.Error("a file the standard library deflated reads back differently")
	}
}

func TestPackRefuses(t *testing.T) {
	dir := appDir(t)
	os.Symlink("/etc/passwd", filepath.Join(dir, "etc", "link"))
	if _, err := Pack(dir, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("symlink packed: %v", err)
	}
	dir = appDir(t)
	os.Remove(filepath.Join(dir, "bin", "run"))
	if _, err := Pack(dir, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "does not hold: bin/run") {
		t.Errorf("missing placed file: %v", err)
	}
	dir = appDir(t)
	os.WriteFile(filepath.Join(dir, ManifestName), []byte("name = \"t\"\n"), 0o644)
	if _, err := Pack(dir, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "app.toml: version: missing") {
		t.Errorf("bad manifest: %v", err)
	}
}

type entry struct {
	name string
	mode fs.FileMode
	body []byte
}

// craft writes a zip by hand, as an attacker would.
func craft(t *testing.T, es ...entry) []byte {
	return craftWith(t, zip.Deflate, nil, es...)
}

// craftWith is a zip archive of es, each compressed with method, whose
// compressor is c (nil: the library's own).
func craftWith(t testing.TB, method uint16, c zip.Compressor, es ...entry) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	if c != nil {
		zw.RegisterCompressor(method, c)
	}
	for _, e := range es {
		h := &zip.FileHeader{Name: e.name, Method: method}
		h.SetMode(e.mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(e.body)
	}
	zw.Close()
	return buf.Bytes()
}

var good = []entry{{ManifestName, 0o644, []byte(testManifest)}, {"bin/run", 0o755, []byte("x")}}

// TestOpenRefuses: every hostile or broken bundle is refused with
// ErrBadBundle and a message naming the entry, before anything is
// written.
func TestOpenRefuses(t *testing.T) {
	zeros := bytes.Repeat([]byte{0}, 4<<20)
	// One entry of 1 MiB placed a thousand times: a 3 KiB manifest.
	var places strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&places, "{ from = \"blob\", to = \"copy%d\" },\n", i)
	}
	manyPlaces := "name = \"t\"\nversion = \"1\"\n[install]\nfiles = [\n" + places.String() + "]\n[run]\ncommand = [\"copy0\"]\n"
	noise := make([]byte, 1<<20) // does not compress
	rand.NewChaCha8([32]byte{1}).Read(noise)
	// Twenty files of exactly 1 MiB (each one under the old per-file
	// check), zeros all.
	mib := bytes.Repeat([]byte{0}, 1<<20)
	many := append([]entry{}, good...)
	for i := range 20 {
		many = append(many, entry{fmt.Sprintf("f%d", i), 0o644, mib})
	}
	// A small file of zeros is no bomb.
	small := craft(t, append(good, entry{"sparse", 0o644, make([]byte, 60<<10)})...)
	if _, err := open(t, small, Limits{}); err != nil {
		t.Errorf("a 60 KiB file of zeros: %v", err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		lim  Limits
		want string
	}{
		{"zip slip", craft(t, append(good, entry{"../evil", 0o644, nil})...), Limits{}, `entry "../evil": must be relative`},
		{"deep slip", craft(t, append(good, entry{"a/../../evil", 0o644, nil})...), Limits{}, `entry "a/../../evil"`},
		{"absolute", craft(t, append(good, entry{"/etc/cron.d/x", 0o644, nil})...), Limits{}, `entry "/etc/cron.d/x": must be relative`},
		{"backslash", craft(t, append(good, entry{`a\..\..\x`, 0o644, nil})...), Limits{}, "backslash"},
		{"symlink", craft(t, append(good, entry{"link", fs.ModeSymlink | 0o777, []byte("/etc/passwd")})...), Limits{}, `entry "link" is a symbolic link`},
		{"device", craft(t, append(good, entry{"dev", fs.ModeDevice | 0o644, nil})...), Limits{}, `entry "dev" is not a regular file`},
		{"setuid", craft(t, append(good, entry{"su", fs.ModeSetuid | 0o755, nil})...), Limits{}, `entry "su" is not a regular file`},
		{"duplicate", craft(t, append(good, entry{"bin/run", 0o644, nil})...), Limits{}, `entry "bin/run" appears twice`},
		{"file in a file", craft(t, append(good, entry{"bin/run/x", 0o644, nil})...), Limits{}, `is inside "bin/run", which is a file`},
		{"bomb", craft(t, append(good, entry{"zeros", 0o644, zeros})...), Limits{MaxRatio: 100}, `entry "zeros" expands 4194304 bytes`},
		{"too big", craft(t, append(good, entry{"big", 0o644, zeros})...), Limits{MaxExpanded: 1 << 20}, "more than 1048576 bytes"},
		{"too many", craft(t, append(good, entry{"a", 0o644, nil}, entry{"b", 0o644, nil})...), Limits{MaxFiles: 3}, "4 entries; the limit is 3"},
		{"no manifest", craft(t, entry{"bin/run", 0o755, nil}), Limits{}, "no app.toml at the root"},
		{"bad manifest", craft(t, entry{ManifestName, 0o644, []byte("name = 1")}), Limits{}, "app.toml"},
		{"placed file missing", craft(t, entry{ManifestName, 0o644, []byte(testManifest)}), Limits{}, "does not hold: bin/run"},
		{"not a zip", []byte("hello"), Limits{}, "not a zip archive"},
		{"one entry placed 1000 times", craft(t, entry{ManifestName, 0o644, []byte(manyPlaces)}, entry{"blob", 0o644, noise}), Limits{}, "would write 1048576000 bytes: more than 200 times"},
		{"placed past the limit", craft(t, entry{ManifestName, 0o644, []byte(manyPlaces)}, entry{"blob", 0o644, noise}), Limits{MaxExpanded: 100 << 20}, "the manifest places 1048576000 bytes, more than 104857600"},
		{"many 1 MiB files", craft(t, many...), Limits{}, "more than 200 times"},
		{"a 100 KiB bomb", craft(t, append(good, entry{"z", 0o644, make([]byte, 100<<10)})...), Limits{}, `entry "z" expands 102400 bytes`},
	} {
		_, err := open(t, tc.data, tc.lim)
		if !errors.Is(err, ErrBadBundle) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q", tc.name, err, tc.want)
		}
	}
}

func FuzzOpenBundle(f *testing.F) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range good {
		w, _ := zw.Create(e.name)
		w.Write(e.body)
	}
	zw.Close()
	f.Add(buf.Bytes())
	// The same entries compressed with Zstandard (gridmgr app pack --zstd).
	f.Add(craftZstd(f, 1<<20, good...))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Open(bytes.NewReader(data), int64(len(data)), Limits{MaxFiles: 100, MaxExpanded: 1 << 20})
		if err != nil {
			return
		}
		// What opens extracts inside its directory, within its limits.
		dir := t.TempDir()
		n, err := b.ExtractTo(dir)
		if err == nil && n != b.Expanded {
			t.Fatalf("extracted %d bytes, declared %d", n, b.Expanded)
		}
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type()&fs.ModeSymlink != 0 {
				t.Fatalf("a link was written: %s", p)
			}
			return nil
		})
		// What installs can be sent to an older manager: its deflated
		// copy opens with the same files and no Zstandard, and installs
		// to the same bytes.
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := b.WriteDeflated(&out); err != nil {
			t.Fatalf("a bundle that extracts could not be deflated: %v", err)
		}
		d, err := Open(bytes.NewReader(out.Bytes()), int64(out.Len()), Limits{MaxFiles: 100, MaxExpanded: 1 << 20})
		if err != nil {
			t.Fatalf("its deflated copy does not open: %v", err)
		}
		if HasZstd(bytes.NewReader(out.Bytes()), int64(out.Len())) || !slices.Equal(d.Files, b.Files) {
			t.Fatalf("the deflated copy holds %v, not %v", d.Files, b.Files)
		}
		dir2 := t.TempDir()
		if _, err := d.ExtractTo(dir2); err != nil {
			t.Fatalf("its deflated copy does not extract: %v", err)
		}
		for _, e := range b.Files {
			if e.Dir {
				continue
			}
			x, _ := os.ReadFile(filepath.Join(dir, e.Name))
			y, _ := os.ReadFile(filepath.Join(dir2, e.Name))
			if !bytes.Equal(x, y) {
				t.Fatalf("%s differs in the deflated copy", e.Name)
			}
		}
	})
}
