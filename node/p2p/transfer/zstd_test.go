package transfer

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gridmgr/gridmgr/deploy"
)

// zstdApp packs an application directory twice: with Zstandard (the
// file to send) and deflated (what a client of an older version packs).
func zstdApp(t *testing.T) (file string, zstd, deflated []byte) {
	t.Helper()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.WriteFile(filepath.Join(dir, deploy.ManifestName), []byte("name = \"z\"\nversion = \"1\"\n[install]\nfiles = [{ from = \"bin/run\", mode = \"0755\" }]\n[run]\ncommand = [\"bin/run\"]\n"), 0o644)
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "bin", "run"), exe[:min(len(exe), 3<<20)], 0o755)
	var z, d bytes.Buffer
	if _, err := deploy.PackWith(dir, &z, deploy.PackOptions{Zstd: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := deploy.Pack(dir, &d); err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(t.TempDir(), "z.gapp")
	if err := os.WriteFile(file, z.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file, z.Bytes(), d.Bytes()
}

func shaHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// older makes e's manager one of an earlier version: it serves only the
// given bundle protocols. The client host is connected again so that it
// learns them.
func older(t *testing.T, e *env, keep ...string) {
	t.Helper()
	for _, p := range []string{Protocol, ProtocolTrailer, ProtocolZstd} {
		if !strings.Contains(strings.Join(keep, " "), p) {
			e.sh.RemoveStreamHandler(protocol.ID(p))
		}
	}
	e.ch = newHost(t)
	if err := e.ch.Connect(ctx(t), peer.AddrInfo{ID: e.sh.ID(), Addrs: e.sh.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

// noTemp points the temporary directory at an empty one, so that what
// Send leaves there shows.
func noTemp(t *testing.T) func() {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	return func() {
		t.Helper()
		if des, _ := os.ReadDir(tmp); len(des) != 0 {
			t.Errorf("Send left %d files in the temporary directory (%s…)", len(des), des[0].Name())
		}
	}
}

// A manager that speaks bundle protocol 1.2.0 is sent the Zstandard
// bundle as it is.
func TestZstdToCurrentManager(t *testing.T) {
	e := newEnv(t, nil)
	file, z, _ := zstdApp(t)
	r, err := SendResult(ctx(t), e.ch, e.sh.ID(), file, "r1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Deflated || r.SHA256 != shaHex(z) {
		t.Fatalf("result %+v, want the Zstandard bundle as it is", r)
	}
	storesOnly(t, e, shaHex(z), z)
}

// A manager before 1.2.0 (1.1.0, or 1.0.0 which wants the hash first)
// is sent, and stores, exactly the bundle a client of its version packs,
// and Send says so; the copy is never in the temporary directory, so a
// sender killed mid-way leaves nothing there.
func TestZstdToOlderManager(t *testing.T) {
	for _, protos := range [][]string{{Protocol, ProtocolTrailer}, {Protocol}} {
		t.Run(protos[len(protos)-1], func(t *testing.T) {
			left := noTemp(t)
			e := newEnv(t, nil)
			older(t, e, protos...)
			file, _, d := zstdApp(t)
			r, err := SendResult(ctx(t), e.ch, e.sh.ID(), file, "r1", func(sent, total int64) {
				if des, _ := os.ReadDir(os.Getenv("TMPDIR")); len(des) != 0 {
					t.Errorf("the copy is in the temporary directory while it is sent: a sender killed now would leave it (%s)", des[0].Name())
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if !r.Deflated || r.SHA256 != shaHex(d) || r.Size != int64(len(d)) || r.Sent != int64(len(d)) {
				t.Fatalf("result %+v, want the deflated bundle (%s, %d bytes)", r, short(shaHex(d)), len(d))
			}
			if !strings.Contains(r.String(), "deflated for a manager that reads no Zstandard") {
				t.Errorf("result says %q", r.String())
			}
			storesOnly(t, e, shaHex(d), d)
			left()
		})
	}
}

// A Send to an older manager cut short mid-way resumes where it stopped
// (the deflated copy is the same bytes, under the same upload id), and
// the manager stores the deflated bundle whole.
func TestZstdToOlderManagerResumes(t *testing.T) {
	left := noTemp(t)
	e := newEnv(t, nil)
	older(t, e, Protocol, ProtocolTrailer)
	file, _, d := zstdApp(t)
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := SendResult(c, e.ch, e.sh.ID(), file, "r1", func(sent, total int64) {
		if sent > total/2 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want canceled", err)
	}
	if o := e.outcome(t); !o.kept {
		t.Fatalf("outcome %+v, want the part kept", o)
	}
	r, err := SendResult(ctx(t), e.ch, e.sh.ID(), file, "r1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Deflated || r.Offset == 0 || r.Offset+r.Sent != int64(len(d)) || r.SHA256 != shaHex(d) {
		t.Fatalf("result %+v, want a resume of the deflated bundle", r)
	}
	storesOnly(t, e, shaHex(d), d)
	left()
}

// A Zstandard bundle that cannot be deflated (an entry whose window is
// larger than a manager reads) is not sent to an older manager: the
// error names the entry and says why, and nothing is stored or left.
func TestZstdToOlderManagerHostile(t *testing.T) {
	left := noTemp(t)
	e := newEnv(t, nil)
	older(t, e, Protocol, ProtocolTrailer)
	file, z, _ := zstdApp(t)
	bad := wideWindow(t, z, "bin/run")
	os.WriteFile(file, bad, 0o644)
	_, err := SendResult(ctx(t), e.ch, e.sh.ID(), file, "r1", nil)
	if err == nil || !strings.Contains(err.Error(), "reads no Zstandard") || !strings.Contains(err.Error(), `entry "bin/run"`) {
		t.Fatalf("error %v, want one naming the entry", err)
	}
	t.Log(err)
	e.assertNothingStored(t)
	left()
}

// wideWindow is bundle z with entry name compressed again as one
// Zstandard stream whose first frame asks a 64 MiB window (a manager
// reads 8 MiB at most; Pack writes frames with no window descriptor);
// the other entries are copied as they are.
func wideWindow(t *testing.T, z []byte, name string) []byte {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(z), int64(len(z)))
	if err != nil {
		t.Fatal(err)
	}
	zr.RegisterDecompressor(zstd.ZipMethodWinZip, zstd.ZipDecompressor())
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	zw.RegisterCompressor(zstd.ZipMethodWinZip, zstd.ZipCompressor(zstd.WithEncoderConcurrency(1)))
	found := false
	for _, f := range zr.File {
		if f.Name != name {
			if err := zw.Copy(f); err != nil {
				t.Fatal(err)
			}
			continue
		}
		found = true
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		h := f.FileHeader
		w, err := zw.CreateHeader(&h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(body)
	}
	if err := zw.Close(); err != nil || !found {
		t.Fatalf("%s: %v (found %v)", name, err, found)
	}
	b := out.Bytes()
	// Make the frame ask a 64 MiB window: the frame header's window
	// descriptor follows the magic number and the descriptor byte.
	zr, err = zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	var off int64 = -1
	for _, f := range zr.File {
		if f.Name == name {
			off, _ = f.DataOffset()
		}
	}
	if off < 0 || !bytes.Equal(b[off:off+4], []byte{0x28, 0xb5, 0x2f, 0xfd}) || b[off+4]&0x20 != 0 {
		t.Fatalf("%s is not a Zstandard frame with a window descriptor", name)
	}
	b[off+5] = 16 << 3 // window 2^(10+16): 64 MiB
	return b
}

// What is not a bundle at all goes to an older manager as it is: its
// refusal, at install, says what is wrong.
func TestZstdToOlderManagerNotABundle(t *testing.T) {
	e := newEnv(t, nil)
	older(t, e, Protocol, ProtocolTrailer)
	file, data, sha := randomFile(t, 1<<20)
	r, err := SendResult(ctx(t), e.ch, e.sh.ID(), file, "r1", nil)
	if err != nil || r.Deflated || r.SHA256 != sha {
		t.Fatalf("%+v %v", r, err)
	}
	storesOnly(t, e, sha, data)
}

// A bundle offered by its hash (as the job layer does) to an older
// manager: the first Send deflates and uploads it; the next ones offer
// the copy's hash without deflating, and send nothing while the manager
// has it; once it has dropped it, the copy is made again and sent.
func TestZstdToOlderManagerByHash(t *testing.T) {
	left := noTemp(t)
	e := newEnv(t, nil)
	older(t, e, Protocol, ProtocolTrailer)
	file, z, d := zstdApp(t)
	send := func() Result {
		t.Helper()
		r, err := SendWith(ctx(t), e.ch, e.sh.ID(), file, "r1", SendOptions{SHA256: shaHex(z)})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Deflated || r.SHA256 != shaHex(d) || r.Size != int64(len(d)) {
			t.Fatalf("result %+v, want the deflated bundle", r)
		}
		e.outcome(t)
		return r
	}
	if r := send(); r.Offset != 0 || r.Sent != int64(len(d)) {
		t.Fatalf("first: %+v, want everything sent", r)
	}
	if r := send(); r.Offset != r.Size || r.Sent != 0 {
		t.Fatalf("again: %+v, want nothing sent", r)
	}
	if err := e.store.Remove(shaHex(d)); err != nil {
		t.Fatal(err)
	}
	if r := send(); r.Offset != 0 || r.Sent != int64(len(d)) {
		t.Fatalf("after the manager dropped it: %+v, want everything sent", r)
	}
	storesOnly(t, e, shaHex(d), d)
	left()
}

// The hash a caller gives is checked when the bundle goes to an older
// manager as a copy (the manager checks only the copy's): a wrong one is
// refused before anything is sent, and no copy is remembered under it.
func TestZstdToOlderManagerWrongHash(t *testing.T) {
	e := newEnv(t, nil)
	older(t, e, Protocol, ProtocolTrailer)
	file, _, _ := zstdApp(t)
	wrong := shaHex([]byte("another bundle"))
	_, err := SendWith(ctx(t), e.ch, e.sh.ID(), file, "r1", SendOptions{SHA256: wrong})
	if err == nil || !strings.Contains(err.Error(), "not to the "+short(wrong)+" given") {
		t.Fatalf("error %v, want the hash mismatch named", err)
	}
	t.Log(err)
	if _, ok := deflatedCopies.get(wrong); ok {
		t.Fatal("a copy was remembered under the wrong hash")
	}
	e.assertNothingStored(t)
}
