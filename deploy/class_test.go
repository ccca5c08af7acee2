package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClassRule: two instances of one class; the shared setup is done by
// the first, stays while either remains, and is undone with the last,
// leaving the host as it was. The counts survive a reopen (a restart).
func TestClassRule(t *testing.T) {
	root, digest := host(t)
	classDir := filepath.Join(root, "apps", "classes", "web")
	before := digest()
	state := t.TempDir()
	classes, err := OpenClasses(filepath.Join(state, "classes.json"))
	if err != nil {
		t.Fatal(err)
	}
	cj, _ := OpenJournal(filepath.Join(state, "class-web.journal"))
	setup := func() {
		for _, d := range []string{filepath.Join(root, "apps"), filepath.Join(root, "apps", "classes")} {
			if err := cj.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := cj.MkdirTree(classDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := cj.WriteFile(filepath.Join(classDir, "cache"), strings.NewReader("shared"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, inst := range []string{"i1", "i2"} {
		first, err := classes.Acquire("web", inst)
		if err != nil || first != (i == 0) {
			t.Fatalf("acquire %s: first %v, %v", inst, first, err)
		}
		if first {
			setup()
		}
	}
	if first, _ := classes.Acquire("web", "i2"); first {
		t.Fatal("acquiring twice counted twice")
	}
	classes, err = OpenClasses(filepath.Join(state, "classes.json")) // a restart
	if err != nil || len(classes.Users("web")) != 2 {
		t.Fatalf("after reopen: %v, %v", classes.Users("web"), err)
	}
	if last, err := classes.Release("web", "i1"); err != nil || last {
		t.Fatalf("release i1: last %v, %v", last, err)
	}
	if _, err := os.Stat(filepath.Join(classDir, "cache")); err != nil {
		t.Fatal("the shared setup went while i2 still uses it")
	}
	last, err := classes.Release("web", "i2")
	if err != nil || !last {
		t.Fatalf("release i2: last %v, %v", last, err)
	}
	if n, err := cj.Undo(nil); err != nil || n != 4 {
		t.Fatalf("undo of the class setup: %d, %v", n, err)
	}
	if digest() != before {
		t.Fatal("the host differs after the last instance of the class")
	}
	if last, _ := classes.Release("web", "i2"); last {
		t.Fatal("releasing again said last again")
	}
}
