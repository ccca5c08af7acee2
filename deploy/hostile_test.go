package deploy

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/deploy/deploytest"
)

// A hostile application's every hook tries to write, overwrite, chmod
// and hard-link outside its instance — in /tmp, /var/tmp, /dev/shm, a
// world-writable and a root-owned directory, the data dir — and to read
// the manager's key. None of it reaches the host: the digest of every
// such place before the install equals the one after the removal (and
// the application did run at every hook: its reports say so).
func TestHostileAppLeavesTheHostAsItWas(t *testing.T) {
	env := &execEnv{dir: filepath.Join(t.TempDir(), "apps"), bundles: map[string]string{}}
	data := filepath.Dir(env.dir)
	env.opts = func(o *ExecutorOptions) { o.Hide = []string{data} }
	env.open(t)
	canRun(t, env.ex)
	targets, watch := deploytest.Host(t, data)
	watch = append(watch, data) // no manager here writes beside the executor
	digest := func() string {
		d, err := Digest(watch...)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	sha := env.addDir(t, deploytest.App(t, targets, data, 0))
	// Another tenant's instance, which mallory must not see.
	if _, err := env.ex.Install(Grant{Reservation: "gm1-9-aaaaaa", Holder: "alice"}, env.add(t, execManifest)); err != nil {
		t.Fatal(err)
	}
	before := digest()
	a, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "mallory", CPUs: 1, Mem: 128 << 20}, sha)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.ex.Start(a.Id); err != nil {
		t.Fatal(err)
	}
	if out, code, err := env.ex.Exec(a.Id, "again", nil); err != nil || code != 0 {
		t.Fatalf("operation: %q %d %v", out, code, err)
	}
	if st, err := env.ex.Status(a.Id); err != nil || st.Values["answer"] != "42" {
		t.Fatalf("values: %+v %v", st, err)
	}
	waitFor(t, "the run step's report", func() bool {
		data, _, err := env.ex.Get(a.Id, "out/report-run", 0, 0)
		return err == nil && strings.Contains(string(data), "done run")
	})
	for _, step := range []string{"install", "run", "op", "values"} {
		report, _, err := env.ex.Get(a.Id, "out/report-"+step, 0, 0)
		if err != nil || !strings.Contains(string(report), "done "+step) {
			t.Fatalf("the %s step did not run: %q %v", step, report, err)
		}
		for _, b := range deploytest.Breaches(string(report)) {
			t.Errorf("%s step: %s", step, b)
		}
	}
	if _, err := env.ex.Remove(a.Id); err != nil {
		t.Fatal(err)
	}
	if after := digest(); after != before {
		t.Fatal("a place outside the instance changed")
	}
}

// The documented pattern works with a data dir only root can enter
// (mode 0700, the default): the application's own program, bin/x, runs
// directly, as its instance's uid, from its instance directory.
func TestProgramOfTheBundleRuns(t *testing.T) {
	env := newExecEnv(t)
	canRun(t, env.ex)
	os.Chmod(filepath.Dir(env.dir), 0o700)
	app := t.TempDir()
	os.WriteFile(filepath.Join(app, ManifestName), []byte(`name = "direct"
version = "1"
[install]
files = [{ from = "bin/x", mode = "0755" }]
dirs = ["out"]
commands = [["bin/x", "installed"]]
[run]
command = ["bin/x", "ran"]
[data]
out = ["out"]
`), 0o644)
	os.MkdirAll(filepath.Join(app, "bin"), 0o755)
	os.WriteFile(filepath.Join(app, "bin", "x"), []byte("#!/bin/sh\necho \"$1 as $(id -u) in $PWD\" > out/$1\n"), 0o755)
	a, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice"}, env.addDir(t, app))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.ex.Start(a.Id); err != nil {
		t.Fatal(err)
	}
	dir := env.ex.host.InstanceDir(a.Id)
	for _, step := range []string{"installed", "ran"} {
		waitFor(t, step, func() bool {
			data, _, err := env.ex.Get(a.Id, "out/"+step, 0, 0)
			return err == nil && string(data) == fmt.Sprintf("%s as %d in %s\n", step, a.Uid, dir)
		})
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 || st.Sys() == nil {
		t.Fatalf("the instance's directory: %v %v", st, err)
	}
}

// Two reservations' instances have uids of their own, and a class's
// shared setup a third, owning what it made; instances may read it but
// not change it.
func TestTenantsHaveUIDsOfTheirOwn(t *testing.T) {
	env := newExecEnv(t)
	canRun(t, env.ex)
	app := t.TempDir()
	os.WriteFile(filepath.Join(app, ManifestName), []byte(`name = "tenant"
version = "1"
class = "tenants"
[install]
dirs = ["out"]
[shared]
dirs = ["cache"]
commands = [["/bin/sh", "-c", "echo made by $(id -u) > cache/shared.txt"]]
[run]
command = ["/bin/sh", "-c", "sleep 1000"]
[[operation]]
name = "try"
command = ["/bin/sh", "-c", "cat ${CLASS_DIR}/cache/shared.txt; echo changed > ${CLASS_DIR}/cache/shared.txt || echo refused; id -u"]
[data]
out = ["out"]
`), 0o644)
	sha := env.addDir(t, app)
	a, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice"}, sha)
	if err != nil {
		t.Fatal(err)
	}
	b, err := env.ex.Install(Grant{Reservation: "gm1-2-aaaaaa", Holder: "bob"}, sha)
	if err != nil {
		t.Fatal(err)
	}
	ra, rb := env.ex.get(a.Id), env.ex.get(b.Id)
	if ra.UID == rb.UID || ra.ClassUID != rb.ClassUID || ra.ClassUID == ra.UID || ra.ClassUID == rb.UID || ra.UID == 0 {
		t.Fatalf("uids: a %d, b %d, class %d/%d", ra.UID, rb.UID, ra.ClassUID, rb.ClassUID)
	}
	for _, id := range []string{a.Id, b.Id} {
		out, _, err := env.ex.Exec(id, "try", nil)
		want := fmt.Sprintf("made by %d\nrefused\n%d\n", ra.ClassUID, env.ex.get(id).UID)
		if err != nil || !strings.Contains(string(out), "made by") || !strings.HasSuffix(string(out), fmt.Sprintf("refused\n%d\n", env.ex.get(id).UID)) {
			t.Fatalf("%s: %q %v, want %q", id, out, err, want)
		}
	}
	// A second instance on a's reservation shares a's uid; a third
	// reservation after a's went gets a's uid back.
	if _, err := env.ex.Remove(a.Id); err != nil {
		t.Fatal(err)
	}
	c, err := env.ex.Install(Grant{Reservation: "gm1-3-aaaaaa", Holder: "carol"}, sha)
	if err != nil {
		t.Fatal(err)
	}
	if env.ex.get(c.Id).UID != ra.UID {
		t.Fatalf("a's uid %d was not given again (got %d)", ra.UID, env.ex.get(c.Id).UID)
	}
	_ = time.Second
}

// Disk: an install that would place more than the reservation's disk is
// refused before anything is written; an application that writes past
// its limit while running is stopped, says why, and may not start again
// until it holds less.
func TestDiskLimit(t *testing.T) {
	env := &execEnv{dir: filepath.Join(t.TempDir(), "apps"), bundles: map[string]string{}}
	changed := make(chan struct{}, 10)
	env.opts = func(o *ExecutorOptions) {
		o.MaxInstanceBytes, o.DiskCheck = 64<<20, 50*time.Millisecond
		o.Changed = func() { changed <- struct{}{} }
	}
	env.open(t)
	canRun(t, env.ex)
	app := t.TempDir()
	os.MkdirAll(filepath.Join(app, "bin"), 0o755)
	noise := make([]byte, 3<<20) // does not compress
	rand.NewChaCha8([32]byte{2}).Read(noise)
	os.WriteFile(filepath.Join(app, "bin", "blob"), noise, 0o644)
	var places strings.Builder
	for i := range 10 {
		fmt.Fprintf(&places, "{ from = \"bin/blob\", to = \"copy%d\" },", i)
	}
	os.WriteFile(filepath.Join(app, ManifestName), []byte(`name = "filler"
version = "1"
[install]
files = [`+places.String()+`]
dirs = ["out"]
[run]
command = ["/bin/sh", "-c", "dd if=/dev/zero of=out/fill bs=1M count=$MIB 2>/dev/null; sleep 1000"]
[install.env]
MIB = "40"
`), 0o644)
	sha := env.addDir(t, app)
	before := env.digest(t)
	// 10 placements of 3 MiB = 30 MiB: over 16 MiB of disk tokens.
	_, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice", Disk: 16 << 20}, sha)
	if err == nil || !strings.Contains(err.Error(), "would place 30.0 MiB, more than the 16.0 MiB") || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("install over the disk reserved: %v", err)
	}
	if env.digest(t) != before {
		t.Fatal("a refused install wrote")
	}
	// 30 MiB placed, 40 MiB written: past 64 MiB (apps.max_instance_bytes).
	a, err := env.ex.Install(Grant{Reservation: "gm1-2-aaaaaa", Holder: "alice"}, sha)
	if err != nil {
		t.Fatal(err)
	}
	if a.DiskLimit != 64<<20 || a.DiskBytes < 30<<20 {
		t.Fatalf("disk %d of %d", a.DiskBytes, a.DiskLimit)
	}
	if _, err := env.ex.Start(a.Id); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(20 * time.Second):
		t.Fatal("an instance past its disk limit was not stopped")
	}
	st, err := env.ex.Status(a.Id)
	if err != nil || st.State != "stopped" || !strings.Contains(st.LastExit, "more than the 64.0 MiB it may") || st.DiskBytes <= 64<<20 {
		t.Fatalf("after passing its limit: %+v %v", st, err)
	}
	if _, err := env.ex.Start(a.Id); err == nil || !strings.Contains(err.Error(), "make room first") {
		t.Fatalf("started again past its limit: %v", err)
	}
	if env.ex.get(a.Id).Started {
		t.Fatal("it would be restarted at the next start of the manager")
	}
	if _, err := env.ex.Remove(a.Id); err != nil {
		t.Fatal(err)
	}
	if env.digest(t) != before {
		t.Fatal("the host differs after the removal")
	}
}

// Two applications on one reservation of 1 cpu and 128 MiB share it:
// busy, together they use at most 1.1 cpus; filling memory, together
// they are killed past 128 MiB.
func TestLimitsAreTheReservations(t *testing.T) {
	env := newExecEnv(t)
	canRun(t, env.ex)
	g := Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice", CPUs: 1, Mem: 128 << 20}
	install := func(name, run string) string {
		app := t.TempDir()
		os.WriteFile(filepath.Join(app, ManifestName), []byte(fmt.Sprintf("name = %q\nversion = \"1\"\n[run]\ncommand = [\"/bin/sh\", \"-c\", %q]\n", name, run)), 0o644)
		a, err := env.ex.Install(g, env.addDir(t, app))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.ex.Start(a.Id); err != nil {
			t.Fatal(err)
		}
		return a.Id
	}
	spin := "for i in 1 2 3 4; do (while :; do :; done) & done; wait"
	ids := []string{install("spin-a", spin), install("spin-b", spin)}
	cpu := func() float64 {
		var sum float64
		for _, id := range ids {
			st, _ := env.ex.Status(id)
			sum += st.CpuSeconds
		}
		return sum
	}
	time.Sleep(300 * time.Millisecond)
	a, start := cpu(), time.Now()
	time.Sleep(2 * time.Second)
	used := (cpu() - a) / time.Since(start).Seconds()
	t.Logf("two applications of 4 busy loops on 1 cpu reserved used %.2f cpus", used)
	if used > 1.1 || used < 0.3 {
		t.Fatalf("used %.2f cpus on a 1-cpu reservation", used)
	}
	for _, id := range ids {
		env.ex.Remove(id)
	}
	// 100 MiB each in /dev/shm (charged to the reservation's memory).
	fill := "dd if=/dev/zero of=/dev/shm/fill bs=1M count=100 2>/dev/null || exit 1; sleep 1000"
	ids = []string{install("fill-a", fill)}
	waitFor(t, "the first to fill", func() bool { st, _ := env.ex.Status(ids[0]); return st.MemBytes >= 90<<20 })
	ids = append(ids, install("fill-b", fill))
	waitFor(t, "an oom kill", func() bool {
		for _, id := range ids {
			if st, _ := env.ex.Status(id); st.State == "oom-killed" && st.LastExit == "oom-killed" {
				return true
			}
		}
		return false
	})
	var total int64
	for _, id := range ids {
		st, _ := env.ex.Status(id)
		total += st.MemBytes
	}
	if total > 128<<20 {
		t.Fatalf("together %d bytes, past the reservation's 128 MiB", total)
	}
}

// Right after a start, an instance's CPU use is its own program's: not
// what its install command burnt in the same cgroup before (it once
// showed "154.03 cpus now of 1 reserved").
func TestCPUUseRightAfterStart(t *testing.T) {
	env := newExecEnv(t)
	canRun(t, env.ex)
	app := t.TempDir()
	os.WriteFile(filepath.Join(app, ManifestName), []byte(`name = "burn"
version = "1"
[install]
commands = [["/bin/sh", "-c", "timeout 1 sh -c 'while :; do :; done'; exit 0"]]
[run]
command = ["/bin/sh", "-c", "sleep 1000"]
`), 0o644)
	a, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice", CPUs: 1}, env.addDir(t, app))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.ex.Start(a.Id); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		st, _ := env.ex.Status(a.Id)
		// The install burnt up to a second (less on a loaded machine).
		if st.CpuUtil > 1.1 || st.CpuSeconds < 0.1 {
			t.Fatalf("right after start: %.2f cpus now, %.2f s in all", st.CpuUtil, st.CpuSeconds)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// Put and get reach only the instance's own files, whatever links the
// application planted in its data directories (here planted as root, so
// even ones an application could not make): a symbolic link to a host
// file or directory is replaced by put and refused by get, never followed;
// a file with other names (a hard link of a host file) is refused by get
// and replaced, not written through, by put.
func TestPutGetFollowNoLink(t *testing.T) {
	env := newExecEnv(t)
	canRun(t, env.ex)
	a, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice"}, env.add(t, execManifest))
	if err != nil {
		t.Fatal(err)
	}
	dir := env.ex.host.InstanceDir(a.Id)
	host := filepath.Join(t.TempDir(), "host")
	os.MkdirAll(host, 0o755)
	victim := filepath.Join(host, "victim")
	os.WriteFile(victim, []byte("the host's\n"), 0o600)
	before, _ := Digest(host)
	// in/link → the host file; in/ln-dir → the host directory; in/hard
	// and out/hard: hard links of the host file; out/link → the host file.
	os.Symlink(victim, filepath.Join(dir, "in", "link"))
	os.Symlink(host, filepath.Join(dir, "in", "ln-dir"))
	os.Symlink(host, filepath.Join(dir, "out", "ln-dir"))
	os.Link(victim, filepath.Join(dir, "in", "hard"))
	os.Link(victim, filepath.Join(dir, "out", "hard"))
	os.Symlink(victim, filepath.Join(dir, "out", "link"))

	for _, p := range []string{"in/link", "in/hard"} {
		if err := env.ex.Put(a.Id, p, []byte("written by put\n")); err != nil {
			t.Fatalf("put %s: %v", p, err)
		}
		st, err := os.Lstat(filepath.Join(dir, p))
		if err != nil || !st.Mode().IsRegular() || st.Sys().(*syscall.Stat_t).Uid != a.Uid {
			t.Fatalf("put %s: %v %v", p, st, err)
		}
	}
	if err := env.ex.Put(a.Id, "in/ln-dir/new", []byte("x")); err == nil || !strings.Contains(err.Error(), "a link") {
		t.Fatalf("put through a linked directory: %v", err)
	}
	for _, p := range []string{"out/link", "out/ln-dir/victim"} {
		if _, _, err := env.ex.Get(a.Id, p, 0, 0); err == nil || !strings.Contains(err.Error(), "a link") {
			t.Fatalf("get %s: %v", p, err)
		}
	}
	if _, _, err := env.ex.Get(a.Id, "out/hard", 0, 0); err == nil || !strings.Contains(err.Error(), "hard links") {
		t.Fatalf("get of a file with another name: %v", err)
	}
	if after, _ := Digest(host); after != before {
		t.Fatal("the host's file changed")
	}
	if st, _ := os.Stat(victim); st.Sys().(*syscall.Stat_t).Uid != 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("the host's file was handed over: %v", st)
	}
}

// Installs and removals on many reservations at once: every reservation
// gets a uid no other live one has, and all come back.
func TestUIDsUnderConcurrentInstalls(t *testing.T) {
	env := newExecEnv(t)
	app := t.TempDir()
	os.WriteFile(filepath.Join(app, ManifestName), []byte("name = \"quiet\"\nversion = \"1\"\n[run]\ncommand = [\"/bin/true\"]\n"), 0o644)
	sha := env.addDir(t, app)
	const n = 12
	uids := make(chan uint32, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			a, err := env.ex.Install(Grant{Reservation: fmt.Sprintf("gm1-%d-aaaaaa", i+1), Holder: "alice"}, sha)
			if err != nil {
				errs <- err
				return
			}
			uids <- a.Uid
		}()
	}
	seen := map[uint32]bool{}
	for range n {
		select {
		case err := <-errs:
			t.Fatal(err)
		case uid := <-uids:
			if seen[uid] || uid < 61800 || uid > 61849 {
				t.Fatalf("uid %d given twice or out of the range (%v)", uid, seen)
			}
			seen[uid] = true
		}
	}
	done := make(chan error, n)
	for _, id := range env.ex.ids(func(*Record) bool { return true }) {
		go func() { _, err := env.ex.Remove(id); done <- err }()
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if left := env.ex.host.Shares().UIDs(); len(left) != 0 {
		t.Fatalf("uids still given out: %v", left)
	}
}
