package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

const sharedManifest = `name = "web-a"
version = "1"
class = "web"
[install]
files = [{ from = "bin/run", to = "bin/run", mode = "0750" }, { from = "etc/conf", to = "conf/app.conf" }]
dirs = ["data", "logs"]
[shared]
dirs = ["cache"]
files = [{ from = "etc/conf", to = "shared.conf", mode = "0600" }]
[run]
command = ["bin/run"]
`

// testAlloc gives uids from 61800 up, as apps.uid_range would.
func testAlloc(used map[uint32]bool) (uint32, error) {
	for uid := uint32(61800); ; uid++ {
		if !used[uid] {
			return uid, nil
		}
	}
}

func bundleOf(t *testing.T, manifest string) *Bundle {
	t.Helper()
	dir := appDir(t)
	os.WriteFile(filepath.Join(dir, ManifestName), []byte(manifest), 0o644)
	var buf bytes.Buffer
	if _, err := Pack(dir, &buf); err != nil {
		t.Fatal(err)
	}
	b, err := Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInstallRemove: two instances of one class installed and removed in
// turn; the files land with their modes, the class's shared setup exists
// while either instance does, and removing both gives back a host whose
// digest equals the one before the first install.
func TestInstallRemove(t *testing.T) {
	h, err := OpenHost(filepath.Join(t.TempDir(), "apps"))
	if err != nil {
		t.Fatal(err)
	}
	digest := func() string {
		d, err := Digest(h.dir)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	before := digest()
	b := bundleOf(t, sharedManifest)
	for _, id := range []string{"i1", "i2"} {
		if _, err := h.Install(b, id, "r1", testAlloc); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(filepath.Join(h.InstanceDir("i1"), "bin", "run"))
	if err != nil || st.Mode().Perm() != 0o750 {
		t.Fatalf("bin/run: %v %v", st, err)
	}
	if got, _ := os.ReadFile(filepath.Join(h.InstanceDir("i2"), "conf", "app.conf")); len(got) != 5000 {
		t.Fatalf("conf/app.conf: %d bytes", len(got))
	}
	if _, err := h.Install(b, "i1", "r1", testAlloc); err == nil {
		t.Fatal("installed i1 twice")
	}
	// The application writes in its own directory; removal takes it too.
	os.WriteFile(filepath.Join(h.InstanceDir("i1"), "logs", "out"), []byte("running\n"), 0o644)

	if _, err := h.Remove("i1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h.ClassDir("web"), "shared.conf")); err != nil {
		t.Fatal("the class's shared setup went with the first of two instances")
	}
	n, err := h.Remove("i2")
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 { // i2: its directory, its reservation's and its class's references; the class: its directory
		t.Errorf("undid %d changes, want 4", n)
	}
	if digest() != before {
		t.Fatal("after removing both instances the host differs from before")
	}
	if ids, _ := h.Instances(); len(ids) != 0 {
		t.Errorf("instances left: %v", ids)
	}
	if n, err := h.Remove("i2"); err != nil || n != 0 {
		t.Errorf("removing again: %d, %v", n, err)
	}
}

// TestInstallInterrupted: an installation cut short at any point (the
// manager killed) is undone by Remove after a restart.
func TestInstallInterrupted(t *testing.T) {
	for stop := 1; stop <= 5; stop++ {
		dir := filepath.Join(t.TempDir(), "apps")
		h, _ := OpenHost(dir)
		before, _ := Digest(dir)
		// What Install does, cut after stop steps.
		j, _ := OpenJournal(h.journal("i1"))
		j.MkdirTree(h.InstanceDir("i1"), 0o755)
		if stop >= 2 {
			j.Record("tenant", "r1")
		}
		if stop >= 3 {
			h.shares.Acquire(ReservationKey("r1"), "i1", testAlloc)
			j.Record("class", "web")
		}
		if stop >= 4 {
			h.shares.Acquire(ClassKey("web"), "i1", testAlloc)
		}
		if stop >= 5 {
			cj, _ := OpenJournal(h.classJournal("web"))
			cj.MkdirTree(h.ClassDir("web"), 0o755)
			cj.Close()
		}
		j.Close()
		h, err := OpenHost(dir) // the restart
		if err != nil {
			t.Fatal(err)
		}
		if ids, _ := h.Instances(); len(ids) != 1 {
			t.Fatalf("stop %d: instances %v", stop, ids)
		}
		if _, err := h.Remove("i1"); err != nil {
			t.Fatalf("stop %d: %v", stop, err)
		}
		if after, _ := Digest(dir); after != before {
			t.Errorf("stop %d: the host differs after removing the interrupted install", stop)
		}
		if len(h.shares.UIDs()) != 0 {
			t.Errorf("stop %d: uids still given out: %v", stop, h.shares.UIDs())
		}
	}
}
