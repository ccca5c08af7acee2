package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func shaOf(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func put(t *testing.T, s *Store, sha string, size, off int64, data []byte, want int64) {
	t.Helper()
	got, err := s.PutPiece(sha, size, off, data)
	if err != nil || got != want {
		t.Fatalf("PutPiece(%d bytes at %d) = %d, %v; want %d", len(data), off, got, err, want)
	}
}

// An upload interrupted by a crash (no Close) goes on from what is stored
// after reopen; retries of stored pieces are fine; a gap says where to
// resume.
func TestBlobUploadResumes(t *testing.T) {
	dir := t.TempDir()
	content := bytes.Repeat([]byte("0123456789abcdef"), 1000) // 16000 bytes
	sha := shaOf(content)
	size := int64(len(content))
	s := open(t, dir)
	put(t, s, sha, size, 0, content[:5000], 5000)
	put(t, s, sha, size, 0, content[:3000], 5000)        // a retry, inside
	put(t, s, sha, size, 4000, content[4000:7000], 7000) // a retry that goes on
	if s.Has(sha) {
		t.Fatal("Has before the upload is complete")
	}
	// "Crash": another Store on a copy of the dir, the first never closed.
	dir2 := t.TempDir()
	copyFile(t, filepath.Join(dir, "jobs.db"), filepath.Join(dir2, "jobs.db"))
	os.MkdirAll(filepath.Join(dir2, "spool/blobs/tmp"), 0o700)
	copyFile(t, filepath.Join(dir, "spool/blobs/tmp", sha+".part"), filepath.Join(dir2, "spool/blobs/tmp", sha+".part"))
	s2 := open(t, dir2)
	if u := s2.SpoolUsed(); u != 7000 {
		t.Fatalf("SpoolUsed after reopen = %d, want 7000", u)
	}
	_, err := s2.PutPiece(sha, size, 9000, content[9000:10000])
	var re *ResumeError
	if !errors.As(err, &re) || re.Offset != 7000 || !strings.Contains(err.Error(), "from offset 7000") {
		t.Fatalf("a gap: %v; want a ResumeError at 7000", err)
	}
	put(t, s2, sha, size, 7000, content[7000:], size)
	if !s2.Has(sha) {
		t.Fatal("not Has after the last piece")
	}
	b, err := os.ReadFile(s2.BlobPath(sha))
	if err != nil || !bytes.Equal(b, content) {
		t.Fatalf("blob: %v, equal %v", err, bytes.Equal(b, content))
	}
	if _, err := os.Stat(filepath.Join(dir2, "spool/blobs/tmp", sha+".part")); !os.IsNotExist(err) {
		t.Fatalf("part left: %v", err)
	}
	put(t, s2, sha, size, 0, content[:10], size) // complete: any piece is fine
	if s2.BlobPath("../../etc/passwd") != "" || s2.Has("../x") {
		t.Fatal("a bad sha names a path")
	}
}

func TestBlobHashMismatch(t *testing.T) {
	s := open(t, t.TempDir())
	content := []byte("hello, grid")
	wrong := shaOf([]byte("something else"))
	_, err := s.PutPiece(wrong, int64(len(content)), 0, content)
	if err == nil || !strings.Contains(err.Error(), "hash to sha256 "+shaOf(content)) || !strings.Contains(err.Error(), "deleted") {
		t.Fatalf("mismatch: %v", err)
	}
	if s.Has(wrong) || s.SpoolUsed() != 0 {
		t.Fatalf("mismatch kept: Has %v, used %d", s.Has(wrong), s.SpoolUsed())
	}
	// A retry whose bytes differ from those stored restarts the upload.
	sha := shaOf(content)
	put(t, s, sha, int64(len(content)), 0, content[:5], 5)
	if _, err := s.PutPiece(sha, int64(len(content)), 0, []byte("HELLO")); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Fatalf("differing retry: %v", err)
	}
	put(t, s, sha, int64(len(content)), 0, content, int64(len(content)))
}

func TestSpoolBounds(t *testing.T) {
	s, err := OpenWith(t.TempDir(), Options{MaxBlobBytes: 100, MaxSpoolBytes: 150})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := bytes.Repeat([]byte{'a'}, 100)
	if _, err := s.PutPiece(shaOf(a), 101, 0, a); err == nil || !strings.Contains(err.Error(), "limit of 100 bytes per file") {
		t.Fatalf("over the blob bound: %v", err)
	}
	put(t, s, shaOf(a), 100, 0, a, 100)
	b := bytes.Repeat([]byte{'b'}, 100)
	if _, err := s.PutPiece(shaOf(b), 100, 0, b); err == nil || !strings.Contains(err.Error(), "spool is full") {
		t.Fatalf("over the spool bound: %v", err)
	}
	// GC: a recent blob survives; an old one not kept goes, an old part too.
	if n, err := s.GC(nil); n != 0 || err != nil {
		t.Fatalf("GC of a fresh blob: %d, %v", n, err)
	}
	old := time.Now().Add(-25 * time.Hour)
	put(t, s, shaOf(b), 100, 0, b[:40], 40)
	os.Chtimes(s.BlobPath(shaOf(a)), old, old)
	os.Chtimes(filepath.Join(s.sp.tmp, shaOf(b)+".part"), old, old)
	if n, err := s.GC(map[string]bool{shaOf(a): true}); n != 1 || err != nil || !s.Has(shaOf(a)) {
		t.Fatalf("GC keeping a: %d, %v", n, err)
	}
	if n, err := s.GC(nil); n != 1 || err != nil || s.Has(shaOf(a)) || s.SpoolUsed() != 0 {
		t.Fatalf("GC: %d, %v, used %d", n, err, s.SpoolUsed())
	}
}

func TestJobDirName(t *testing.T) {
	for in, want := range map[string]string{
		"gm152.17[3]": "gm152.17%5B3%5D",
		"gm1.2":       "gm1.2",
		"..":          "%2E.",
		"a/b%":        "a%2Fb%25",
	} {
		if got := JobDirName(in); got != want {
			t.Errorf("JobDirName(%q) = %q, want %q", in, got, want)
		}
	}
}

func writeTry(t *testing.T, s *Store, job string, try uint32, files map[string]string) string {
	t.Helper()
	d, err := s.TryDir(job, try)
	if err != nil {
		t.Fatal(err)
	}
	for p, c := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(d, p)), 0o700)
		if err := os.WriteFile(filepath.Join(d, p), []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func TestAccept(t *testing.T) {
	s := open(t, t.TempDir())
	job := "gm152.17[3]"
	writeTry(t, s, job, 1, map[string]string{"stdout": "first"})
	writeTry(t, s, job, 2, map[string]string{"stdout": "out", "stderr": "", "out/a/b.txt": "b"})
	files, err := s.Accept(job, 2)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range files {
		got[f.Path] = f.Sha256
		if f.Path == "stdout" && f.Size != 3 {
			t.Errorf("stdout size %d", f.Size)
		}
	}
	if len(got) != 3 || got["stdout"] != shaOf([]byte("out")) || got["out/a/b.txt"] != shaOf([]byte("b")) || got["stderr"] != shaOf(nil) {
		t.Fatalf("Accept files: %v", got)
	}
	jd := filepath.Join(s.sp.jobs, JobDirName(job))
	if _, err := os.Stat(filepath.Join(jd, "try-1")); !os.IsNotExist(err) {
		t.Fatalf("try-1 left: %v", err)
	}
	// Again (a crash after the rename, the act redone): the same answer.
	again, err := s.Accept(job, 2)
	if err != nil || len(again) != 3 {
		t.Fatalf("repeated Accept: %d files, %v", len(again), err)
	}
	// A crash after the marker, before the rename: try-2 and the marker.
	writeTry(t, s, "gm9.1", 4, map[string]string{"stdout": "x"})
	os.MkdirAll(filepath.Join(s.sp.jobs, "gm9.1"), 0o700)
	os.WriteFile(filepath.Join(s.sp.jobs, "gm9.1", "accepted"), []byte("4"), 0o600)
	if files, err := s.Accept("gm9.1", 4); err != nil || len(files) != 1 {
		t.Fatalf("Accept after a crash before the rename: %v, %v", files, err)
	}
	// A try that fetched nothing (failed before it ran) has no files.
	if files, err := s.Accept("gm9.2", 3); err != nil || len(files) != 0 {
		t.Fatalf("Accept of a try that fetched nothing: %v, %v", files, err)
	}
	if files, err := s.Accept("gm9.2", 3); err != nil || len(files) != 0 {
		t.Fatalf("Accept again of a try that fetched nothing: %v, %v", files, err)
	}
	// GCJobs: the dirs of jobs no longer live go.
	if n, err := s.GCJobs(map[string]bool{job: true, "gm9.1": true}); n != 1 || err != nil {
		t.Fatalf("GCJobs: %d, %v; want gm9.2's dir removed", n, err)
	}
	if _, err := os.Stat(filepath.Join(s.sp.jobs, "gm9.2")); !os.IsNotExist(err) {
		t.Fatalf("gm9.2's dir left: %v", err)
	}
	f, err := s.ResultFile(job, "out/a/b.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "b" {
		t.Fatalf("ResultFile read %q", b)
	}
	if err := s.ForgetJob(job); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(jd); !os.IsNotExist(err) {
		t.Fatalf("job dir left: %v", err)
	}
	if _, err := s.ResultFile(job, "stdout"); err == nil || !strings.Contains(err.Error(), "no results kept here") {
		t.Fatalf("ResultFile of a forgotten job: %v", err)
	}
}

func TestResultFileEscapes(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("secret"), 0o600)
	job := "gm1.1"
	d := writeTry(t, s, job, 1, map[string]string{"stdout": "ok", "out/in.txt": "in"})
	os.Symlink(secret, filepath.Join(d, "out", "abs-link"))
	os.Symlink("../../../../../secret", filepath.Join(d, "out", "rel-link"))
	os.Symlink("in.txt", filepath.Join(d, "out", "inner-link"))
	os.Symlink(dir, filepath.Join(d, "out", "dir-link"))
	files, err := s.Accept(job, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.Contains(f.Path, "link") {
			t.Errorf("Accept listed the symlink %s", f.Path)
		}
	}
	if len(files) != 2 {
		t.Errorf("Accept listed %d files, want 2", len(files))
	}
	for _, p := range []string{"../secret", "/etc/passwd", secret, "out/../../secret", "out/abs-link", "out/rel-link", "out/inner-link", "out/dir-link/secret", "out", ""} {
		f, err := s.ResultFile(job, p)
		if err == nil {
			b, _ := io.ReadAll(f)
			f.Close()
			t.Errorf("ResultFile(%q) opened (%q)", p, b)
			continue
		}
		t.Logf("ResultFile(%q): %v", p, err)
	}
	if f, err := s.ResultFile(job, "out/in.txt"); err != nil {
		t.Error(err)
	} else {
		f.Close()
	}
}
