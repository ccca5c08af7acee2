package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// host is a little host: a directory with files an installation may
// touch, and the digest of the paths it may touch.
func host(t *testing.T) (root string, digest func() string) {
	root = t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc", "app.conf"), []byte("old config\n"), 0o640)
	os.WriteFile(filepath.Join(root, "etc", "other"), []byte("untouched\n"), 0o644)
	return root, func() string {
		d, err := Digest(filepath.Join(root, "etc"), filepath.Join(root, "apps"))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
}

// install makes every kind of change, stopping after n of them (a crash)
// when n >= 0.
func install(t *testing.T, j *Journal, root string, n int) {
	steps := []func() error{
		func() error { return j.Mkdir(filepath.Join(root, "apps"), 0o755) },
		func() error { return j.MkdirTree(filepath.Join(root, "apps", "i1"), 0o755) },
		func() error {
			return j.WriteFile(filepath.Join(root, "apps", "i1", "run"), strings.NewReader("#!/bin/sh\n"), 0o755)
		},
		func() error {
			// The application writes in its own directory: not recorded.
			return os.WriteFile(filepath.Join(root, "apps", "i1", "log"), []byte("started\n"), 0o644)
		},
		func() error {
			return j.WriteFile(filepath.Join(root, "etc", "app.conf"), strings.NewReader("new config\n"), 0o600)
		},
		func() error {
			return j.WriteFile(filepath.Join(root, "etc", "new.conf"), strings.NewReader("x"), 0o644)
		},
		func() error { return j.Record("port", "40123") },
		func() error { return j.Mkdir(filepath.Join(root, "etc"), 0o755) }, // there already: not ours
	}
	for i, s := range steps {
		if n >= 0 && i == n {
			return
		}
		if err := s(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
}

// TestJournalRoundTrip: install, then undo, leaves every touched path as
// it was, the replaced file byte for byte with its mode; the port
// allocation goes to the caller's undo.
func TestJournalRoundTrip(t *testing.T) {
	root, digest := host(t)
	before := digest()
	j, err := OpenJournal(filepath.Join(t.TempDir(), "journal"))
	if err != nil {
		t.Fatal(err)
	}
	install(t, j, root, -1)
	if digest() == before {
		t.Fatal("the installation changed nothing")
	}
	if got, _ := os.ReadFile(filepath.Join(root, "etc", "app.conf")); string(got) != "new config\n" {
		t.Fatalf("app.conf = %q", got)
	}
	var released []string
	n, err := j.Undo(func(kind, value string) error { released = append(released, kind+" "+value); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if n != 6 || len(released) != 1 || released[0] != "port 40123" {
		t.Errorf("undid %d changes, released %v", n, released)
	}
	if digest() != before {
		t.Fatal("after undo the host differs from before the installation")
	}
	if len(j.Changes()) != 0 {
		t.Errorf("journal not empty: %v", j.Changes())
	}
}

// TestJournalCrash: a crash after any number of steps — the journal
// reopened from disk, as after a restart — still undoes to the original,
// also with a torn last record and a leftover temporary file.
func TestJournalCrash(t *testing.T) {
	for n := 0; n <= 8; n++ {
		root, digest := host(t)
		before := digest()
		path := filepath.Join(t.TempDir(), "journal")
		j, err := OpenJournal(path)
		if err != nil {
			t.Fatal(err)
		}
		install(t, j, root, n)
		j.Close()
		// The crash tore the next record and left a half-written file.
		f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		f.WriteString(`{"op":"create","pa`)
		f.Close()
		// A half-written temporary file: Undo removes it when the replace
		// that writes it was recorded (after 4 steps); before, it is not
		// the journal's, and the test clears it.
		os.WriteFile(filepath.Join(root, "etc", "app.conf.gridmgr-new"), []byte("half"), 0o600)
		j, err = OpenJournal(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.Undo(func(string, string) error { return nil }); err != nil {
			t.Fatalf("after %d steps: %v", n, err)
		}
		os.Remove(filepath.Join(root, "etc", "app.conf.gridmgr-new")) // unrecorded debris is not the journal's
		if digest() != before {
			t.Errorf("crash after %d steps: the host differs after undo", n)
		}
	}
}

// TestJournalUndoStopsAndResumes: an undo that fails keeps what is left
// recorded, and a second undo finishes it.
func TestJournalUndoStopsAndResumes(t *testing.T) {
	root, digest := host(t)
	before := digest()
	j, _ := OpenJournal(filepath.Join(t.TempDir(), "journal"))
	install(t, j, root, -1)
	fail := true
	_, err := j.Undo(func(string, string) error {
		if fail {
			return os.ErrPermission
		}
		return nil
	})
	// The newest change (the port) failed to undo: all six stay recorded.
	if err == nil || len(j.Changes()) != 6 {
		t.Fatalf("failed undo: %v, %d changes left", err, len(j.Changes()))
	}
	fail = false
	j2, err := OpenJournal(j.path) // as after a restart
	if err != nil {
		t.Fatal(err)
	}
	if len(j2.Changes()) != 6 {
		t.Fatalf("reopened: %d changes", len(j2.Changes()))
	}
	if _, err := j2.Undo(func(string, string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if digest() != before {
		t.Fatal("host differs after the resumed undo")
	}
}

func TestDigestSeesChanges(t *testing.T) {
	root, digest := host(t)
	a := digest()
	os.Chmod(filepath.Join(root, "etc", "other"), 0o600)
	b := digest()
	os.WriteFile(filepath.Join(root, "etc", "other"), []byte("untouched!"), 0o600)
	c := digest()
	if a == b || b == c {
		t.Error("the digest missed a mode or content change")
	}
}
