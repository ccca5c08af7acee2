package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// TestAppPackCheck packs the example manifest with its files, checks the
// bundle, and tries the mistakes a user makes.
func TestAppPackCheck(t *testing.T) {
	dir := t.TempDir()
	app := filepath.Join(dir, "hello")
	os.MkdirAll(filepath.Join(app, "bin"), 0o755)
	os.MkdirAll(filepath.Join(app, "etc"), 0o755)
	manifest, err := os.ReadFile("../../deploy/examples/hello/app.toml")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(app, "app.toml"), manifest, 0o644)
	os.WriteFile(filepath.Join(app, "bin", "hello"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(app, "etc", "greeting.txt"), []byte("hello\n"), 0o644)
	bundle := filepath.Join(dir, "hello.gapp")

	code, out, errOut := run(t, "app", "pack", app, "-o", bundle)
	packOut := out
	if code != exitOK || !strings.Contains(out, "packed hello 1.0.0 (class web): 3 files") || !strings.Contains(out, "sha256 ") {
		t.Fatalf("pack: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = run(t, "app", "check", bundle)
	if code != exitOK || !strings.Contains(out, "hello 1.0.0 (class web): ok") || !strings.Contains(out, "operations reload, greet") {
		t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
	}
	// Zstandard is the default: every file of the bundle is method 93,
	// and --zstd gives the same bytes. --deflate: the same files,
	// another compression, another bundle, which checks as well and any
	// zip tool reads.
	methods := func(file string) map[uint16]int {
		zr, err := zip.OpenReader(file)
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		m := map[uint16]int{}
		for _, f := range zr.File {
			if !strings.HasSuffix(f.Name, "/") {
				m[f.Method]++
			}
		}
		return m
	}
	if m := methods(bundle); m[93] != 3 || len(m) != 1 || !strings.Contains(packOut, "bundle (Zstandard)") || !strings.Contains(out, "bundle, Zstandard)") {
		t.Fatalf("default pack: methods %v\n%s%s", m, packOut, out)
	}
	zbundle := filepath.Join(dir, "hello-zstd.gapp")
	if code, _, errOut := run(t, "app", "pack", "--zstd", app, "-o", zbundle); code != exitOK {
		t.Fatalf("pack --zstd: exit %d\n%s", code, errOut)
	}
	if a, b := mustRead(t, bundle), mustRead(t, zbundle); !bytes.Equal(a, b) {
		t.Fatal("pack --zstd differs from the default")
	}
	os.Remove(zbundle)
	dbundle := filepath.Join(dir, "hello-deflate.gapp")
	code, dout, errOut := run(t, "app", "pack", "--deflate", app, "-o", dbundle)
	if code != exitOK || !strings.Contains(dout, "packed hello 1.0.0 (class web): 3 files") || !strings.Contains(dout, "bundle (deflated)") || dout == packOut {
		t.Fatalf("pack --deflate: exit %d\n%s%s", code, dout, errOut)
	}
	if m := methods(dbundle); m[zip.Deflate] != 3 || len(m) != 1 {
		t.Fatalf("pack --deflate: methods %v", m)
	}
	if code, dout, errOut = run(t, "app", "check", dbundle); code != exitOK || !strings.Contains(dout, "hello 1.0.0 (class web): ok") || !strings.Contains(dout, "bundle, deflated)") {
		t.Fatalf("check of the --deflate bundle: exit %d\n%s%s", code, dout, errOut)
	}
	os.Remove(dbundle)
	if code, _, errOut := run(t, "app", "pack", "--deflate", "--zstd", app, "-o", dbundle); code != exitUsage || !strings.Contains(errOut, "choose one compression") {
		t.Fatalf("pack --deflate --zstd: exit %d, %q", code, errOut)
	}

	// A bundle whose file is compressed in a way a manager does not read
	// (bzip2, which zip tools write): check reads every file, and says.
	odd := filepath.Join(dir, "odd.gapp")
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	zw.RegisterCompressor(12, func(w io.Writer) (io.WriteCloser, error) { return nopWriteCloser{w}, nil })
	for _, e := range []struct {
		name   string
		method uint16
		body   []byte
	}{{"app.toml", zip.Deflate, manifest}, {"bin/hello", 12, []byte("#!/bin/sh\n")}, {"etc/greeting.txt", zip.Deflate, []byte("hi\n")}} {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: e.method})
		w.Write(e.body)
	}
	zw.Close()
	os.WriteFile(odd, buf.Bytes(), 0o644)
	if code, _, errOut := run(t, "app", "check", odd); code != exitUsage || !strings.Contains(errOut, `entry "bin/hello" is compressed with zip method 12, which a manager does not read`) {
		t.Errorf("check of a bzip2 entry: exit %d, %q", code, errOut)
	}
	os.Remove(odd)

	os.Symlink("/etc/passwd", filepath.Join(app, "etc", "passwd"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"app"}, "say what to do: pack, check"},
		{[]string{"app", "pak"}, `unknown subcommand "pak" (did you mean "pack"?)`},
		{[]string{"app", "pack", app, "-o", bundle}, "is a symbolic link"},
		{[]string{"app", "check", filepath.Join(app, "app.toml")}, "not a zip archive"},
		{[]string{"app", "check", filepath.Join(dir, "none.gapp")}, "cannot read the bundle"},
		{[]string{"app", "pack"}, "say which directory to pack"},
	} {
		code, _, errOut := run(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	os.Remove(filepath.Join(app, "etc", "passwd"))
	if code, _, errOut := run(t, "app", "pack", app, "-o", bundle); code != exitUsage || !strings.Contains(errOut, "exists; not overwriting") {
		t.Errorf("overwrite: exit %d, %s", code, errOut)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("a failed pack left files behind: %v", entries)
	}
}

// What a stranger reads from `gridmgr app …`: every subcommand's errors
// carry its own name, what is missing is said before which manager, pack
// names the flag that would help, and the help lists keep their columns
// apart.
func TestAppMessages(t *testing.T) {
	dir := t.TempDir()
	app := filepath.Join(dir, "x")
	os.MkdirAll(app, 0o755)
	writeFile(t, app, "app.toml", "name = \"x\"\nversion = \"1\"\n[install]\nfiles = [{ from = \"run\" }]\n[run]\ncommand = [\"/bin/sh\", \"run\"]\n")
	writeFile(t, app, "run", "sleep 1\n")
	bundle := filepath.Join(dir, "x.gapp")
	if code, _, errOut := run(t, "app", "pack", app, "-o", bundle); code != exitOK {
		t.Fatalf("pack: %s", errOut)
	}
	notZip := writeFile(t, dir, "notzip.gapp", "hello\n")
	t.Chdir(dir) // pack without -o writes x-1.gapp here
	if code, _, errOut := run(t, "app", "pack", app); code != exitOK {
		t.Fatalf("pack: %s", errOut)
	}

	for _, tc := range []struct {
		args []string
		want string // the whole first line of stderr
	}{
		{[]string{"app", "pack", app, "-o", bundle}, "gridmgr app pack: " + bundle + " exists; not overwriting it (remove it first, or name another file with -o)"},
		{[]string{"app", "pack", app}, "gridmgr app pack: x-1.gapp exists; not overwriting it (remove it first, or name another file with -o FILE)"},
		{[]string{"app", "pack", app, "-o", filepath.Join(dir, "nodir", "x.gapp")}, "gridmgr app pack: cannot write " + filepath.Join(dir, "nodir", "x.gapp") + ": there is no directory " + filepath.Join(dir, "nodir")},
		{[]string{"app", "pack", filepath.Join(dir, "none")}, "gridmgr app pack: cannot read " + filepath.Join(dir, "none") + ": no such file or directory"},
		{[]string{"app", "pack", bundle}, "gridmgr app pack: " + bundle + " is not a directory: give the application's directory (its app.toml and files)"},
		{[]string{"app", "pack"}, "gridmgr app pack: say which directory to pack"},
		{[]string{"app", "check"}, "gridmgr app check: say which bundle to check"},
		{[]string{"app", "check", notZip}, "gridmgr app check: " + notZip + ": not a zip archive (a bundle is one: gridmgr app pack makes it)"},
		{[]string{"app", "check", filepath.Join(dir, "none.gapp")}, "gridmgr app check: cannot read the bundle " + filepath.Join(dir, "none.gapp") + ": no such file or directory"},
		{[]string{"app", "check", app}, "gridmgr app check: " + app + " is a directory: give a bundle ('gridmgr app pack " + app + "' makes one of it)"},
		{[]string{"app", "install"}, "gridmgr app install: give the reservation number (gridmgr reserve printed it) and the bundle file (gridmgr app pack wrote it)"},
		{[]string{"app", "install", bundle, "gm1-1-abcdef"}, `gridmgr app install: "` + bundle + `" is not a reservation number; give RESERVATION then BUNDLE`},
		{[]string{"app", "install", "gm1-1-abcdef", notZip}, "gridmgr app install: " + notZip + ": not a zip archive (a bundle is one: gridmgr app pack makes it)"},
		{[]string{"app", "start"}, "gridmgr app start: give one instance (RESERVATION.APP, as 'gridmgr app list' shows)"},
		{[]string{"app", "stop", "hello"}, `gridmgr app stop: "hello" is not an instance name: write RESERVATION.APP, e.g. gm160-7-abcdef.hello`},
		{[]string{"app", "pause"}, "gridmgr app pause: give one instance (RESERVATION.APP, as 'gridmgr app list' shows)"},
		{[]string{"app", "resume", "a", "b"}, `gridmgr app resume: unexpected argument "b"`},
		{[]string{"app", "status"}, "gridmgr app status: give one instance (RESERVATION.APP, as 'gridmgr app list' shows)"},
		{[]string{"app", "logs"}, "gridmgr app logs: give one instance (RESERVATION.APP, as 'gridmgr app list' shows)"},
		{[]string{"app", "logs", "gm1-1-abcdef.x", "--tail", "-1"}, "gridmgr app logs: --tail \"-1\": out of range: want 0 to 100k (k: thousands, M: millions)"},
		{[]string{"app", "idle"}, "gridmgr app idle: give one instance (RESERVATION.APP, as 'gridmgr app list' shows)"},
		{[]string{"app", "exec-op", "gm1-1-abcdef.x"}, "gridmgr app exec-op: give the instance (RESERVATION.APP) and the operation ('gridmgr app status' lists its operations)"},
		{[]string{"app", "put", "gm1-1-abcdef.x"}, "gridmgr app put: give the instance (RESERVATION.APP), the local file and the path to write in the application"},
		{[]string{"app", "put", "gm1-1-abcdef.x", filepath.Join(dir, "none"), "in/x"}, "gridmgr app put: cannot read " + filepath.Join(dir, "none") + ": no such file or directory"},
		{[]string{"app", "get", "gm1-1-abcdef.x", "-"}, "gridmgr app get: give the instance (RESERVATION.APP), the local file to write ('-': standard output) and the path to read in the application"},
		{[]string{"app", "remove"}, "gridmgr app remove: give one instance (RESERVATION.APP, as 'gridmgr app list' shows)"},
		{[]string{"app", "list"}, "gridmgr app list: which manager? give -n ADDR (full multiaddr with /p2p/<peer id>) or -d DATA_DIR"},
		{[]string{"app", "list", "--all", "--grid", "-d", dir}, "gridmgr app list: --all and --grid are exclusive: --grid is every manager, --all those under the one given"},
		{[]string{"app", "start", "gm1-1-abcdef.x"}, "gridmgr app start: which manager? give -n ADDR (full multiaddr with /p2p/<peer id>) or -d DATA_DIR"},
		{[]string{"app", "--json", "list"}, "gridmgr app: name the subcommand first, then its flags: gridmgr app list --json"},
		{[]string{"app", "strat"}, `gridmgr app: unknown subcommand "strat" (did you mean "start"?); subcommands: pack, check, install, start, stop, pause, resume, status, logs, idle, exec-op, put, get, remove, list`},
	} {
		code, out, errOut := run(t, tc.args...)
		first, _, _ := strings.Cut(errOut, "\n")
		if code != exitUsage || out != "" || first != tc.want {
			t.Errorf("%v: exit %d\n got %s\nwant %s", tc.args, code, first, tc.want)
		}
		if m := internals.FindString(errOut); m != "" {
			t.Errorf("%v: %q reaches the user:\n%s", tc.args, m, errOut)
		}
	}

	// The lists keep their columns apart: the subcommand, its arguments,
	// what it does.
	_, help, _ := run(t, "help")
	if !strings.Contains(help, "  app           SUBCOMMAND …  ") {
		t.Errorf("gridmgr help's app line:\n%s", help)
	}
	_, usage, _ := run(t, "app", "-h")
	for _, s := range appCommands {
		line := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(s.name) + `  +` + regexp.QuoteMeta(s.args) + `  +` + regexp.QuoteMeta(s.summary) + `$`)
		if !line.MatchString(usage) {
			t.Errorf("app -h does not list %s as its own columns:\n%s", s.name, usage)
		}
	}
	if code, out, _ := run(t, "app", "help", "pack"); code != exitOK || !strings.HasPrefix(out, "Usage: gridmgr app pack DIR [-o FILE]") {
		t.Errorf("app help pack: exit %d\n%s", code, out)
	}
}

// app list at a leaf of the demo grid, with an application installed at
// the root: the leaf alone finds nothing and says so, --all says it
// searched the leaf's subtree and that --grid would search the rest, and
// --grid climbs to the root and finds it, saying what it searched.
func TestAppListAllAndGrid(t *testing.T) {
	g := formedDemoGrid(t)
	root, leaf := g.mgrs["gm152"].Addr(), g.mgrs["gm160"].Addr()
	code, out, stderr := run(t, "reserve", "-n", leaf, "--at", "gm152", "--cpus", "1", "--mem", "64MiB", "--commit", "--json")
	if code != 0 {
		t.Fatalf("reserve: %s %s", out, stderr)
	}
	var res struct{ Id string }
	json.Unmarshal([]byte(out), &res)
	// No install commands: installed without root; it need not run.
	bundle := packApp(t, "name = \"quiet\"\nversion = \"1\"\n[install]\nfiles = [{ from = \"run.sh\" }]\n[run]\ncommand = [\"/bin/sh\", \"run.sh\"]\n", "sleep 1000\n")
	if code, out, stderr := run(t, "app", "install", "-n", leaf, res.Id, bundle); code != 0 {
		t.Fatalf("install: %s %s", out, stderr)
	}
	id := res.Id + ".quiet"
	t.Cleanup(func() { run(t, "app", "remove", "-n", root, id) })

	for _, tc := range []struct {
		args       []string
		want, not  string
		searchedOK string // the last line
	}{
		{[]string{"-n", leaf}, "no applications at this manager (--all looks in its subtree, --grid in the whole grid)\n", id, ""},
		{[]string{"-n", leaf, "--all"}, "no applications\n", id,
			"searched gm160's subtree: 1 manager (gm160); the managers above it are not searched: --grid searches the whole grid"},
		{[]string{"-n", leaf, "--grid"}, id, "",
			"searched the whole grid, from its root gm152: 6 managers (gm152, gm154, gm160, gm162, gm156, gm164)"},
		{[]string{"-n", g.mgrs["gm154"].Addr(), "--all"}, "no applications\n", id,
			"searched gm154's subtree: 3 managers (gm154, gm160, gm162); the managers above it are not searched: --grid searches the whole grid"},
		{[]string{"-n", root, "--all"}, id, "",
			"searched gm152's subtree: 6 managers (gm152, gm154, gm160, gm162, gm156, gm164), the whole grid (gm152 is a root)"},
	} {
		code, out, stderr := run(t, append([]string{"app", "list"}, tc.args...)...)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if code != 0 || !strings.Contains(out, tc.want) || (tc.not != "" && strings.Contains(out, tc.not)) ||
			(tc.searchedOK != "" && lines[len(lines)-1] != tc.searchedOK) {
			t.Errorf("app list %v: exit %d\n%s%s", tc.args, code, out, stderr)
		}
	}
	// In JSON, what was searched is the message.
	code, out, _ = run(t, "app", "list", "-n", leaf, "--grid", "--json")
	var rep struct {
		Instances []struct{ Id, Manager string }
		Message   string
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || len(rep.Instances) != 1 || rep.Instances[0].Id != id ||
		!strings.HasPrefix(rep.Message, "searched the whole grid, from its root gm152: 6 managers") {
		t.Errorf("app list --grid --json: exit %d %v\n%s", code, err, out)
	}
}

func mustRead(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
