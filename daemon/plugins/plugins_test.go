package plugins

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
)

// Tests are deliberately not parallel: writing an executable while another
// goroutine forks can make exec fail with ETXTBSY (golang/go#22315).

// writePlugin writes a plugin script named Prefix+name into dir.
func writePlugin(t *testing.T, dir, name, body string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, Prefix+name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func script(lines ...string) string {
	return "#!/bin/sh\n" + strings.Join(lines, "\n") + "\n"
}

// gone reports whether pid no longer runs (absent, or a zombie waiting for
// a reaper that is not us).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		t.Fatalf("pid file %q: %v", b, err)
	}
	return pid
}

func TestValidName(t *testing.T) {
	good := []string{"a", "status", "disk-usage", "x1", "0", "a-", strings.Repeat("a", 64)}
	bad := []string{"", "../x", "a/b", "-x", "X", "Abc", "a.b", ".", "..", "a b", "a_b", "é", strings.Repeat("a", 65), "a\x00"}
	for _, n := range good {
		if !ValidName(n) {
			t.Errorf("ValidName(%q) = false, want true", n)
		}
	}
	for _, n := range bad {
		if ValidName(n) {
			t.Errorf("ValidName(%q) = true, want false", n)
		}
	}
}

func TestRunArgsAndStdin(t *testing.T) {
	dir := t.TempDir()
	path := writePlugin(t, dir, "echo", script(`echo "args: $*"`, `echo "argc: $#"`, `cat`), 0o755)
	r := Runner{Dir: dir}

	got, err := r.Lookup("echo")
	if err != nil || got != path {
		t.Fatalf("Lookup = %q, %v; want %q", got, err, path)
	}
	res, err := r.Run(context.Background(), "echo", []string{"one", "two words", "$HOME;*"}, []byte(`{"id":"m1"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := "args: one two words $HOME;*\nargc: 3\n{\"id\":\"m1\"}"
	if res.Output != want || res.ExitCode != 0 || res.TimedOut {
		t.Fatalf("Run = %+v, want output %q, exit 0", res, want)
	}
	if res.Duration <= 0 {
		t.Errorf("Duration = %v", res.Duration)
	}
}

func TestArgv0AndWorkingDir(t *testing.T) {
	dir := t.TempDir()
	path := writePlugin(t, dir, "where", script(`echo "$0"`, `pwd -P`), 0o755)
	res, err := Runner{Dir: dir}.Run(context.Background(), "where", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(dir)
	if want := path + "\n" + real + "\n"; res.Output != want {
		t.Fatalf("output %q, want %q", res.Output, want)
	}
}

func TestRelativeDir(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "plugins")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := writePlugin(t, dir, "rel", script(`pwd -P`), 0o755)
	t.Chdir(parent)
	r := Runner{Dir: "plugins"}
	got, err := r.Lookup("rel")
	if err != nil || got != path {
		t.Fatalf("Lookup = %q, %v; want %q", got, err, path)
	}
	res, err := r.Run(context.Background(), "rel", nil, nil)
	real, _ := filepath.EvalSymlinks(dir)
	if err != nil || res.Output != real+"\n" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
}

func TestDroppedInLater(t *testing.T) {
	dir := t.TempDir()
	r := Runner{Dir: dir}
	_, err := r.Lookup("late")
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Lookup before: %v, want ErrNotFound", err)
	}
	if full := filepath.Join(dir, Prefix+"late"); !strings.Contains(err.Error(), full) {
		t.Errorf("error %q does not name %s", err, full)
	}
	if _, err := r.Run(context.Background(), "late", nil, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Run before: %v, want ErrNotFound", err)
	}
	writePlugin(t, dir, "late", script(`echo here`), 0o755)
	res, err := r.Run(context.Background(), "late", nil, nil)
	if err != nil || res.Output != "here\n" {
		t.Fatalf("Run after: %+v, %v", res, err)
	}
	if err := os.Remove(filepath.Join(dir, Prefix+"late")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Lookup("late"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Lookup after removal: %v, want ErrNotFound", err)
	}
}

func TestLookupErrors(t *testing.T) {
	dir := t.TempDir()
	writePlugin(t, dir, "noexec", script(`echo no`), 0o644)
	if err := os.Mkdir(filepath.Join(dir, Prefix+"adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	target := writePlugin(t, dir, "target", script(`echo via link`), 0o755)
	mustSymlink(t, target, filepath.Join(dir, Prefix+"link"))
	mustSymlink(t, filepath.Join(dir, Prefix+"noexec"), filepath.Join(dir, Prefix+"linknoexec"))
	mustSymlink(t, filepath.Join(dir, Prefix+"adir"), filepath.Join(dir, Prefix+"linkdir"))
	mustSymlink(t, filepath.Join(dir, "nowhere"), filepath.Join(dir, Prefix+"dangling"))
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	r := Runner{Dir: dir}
	cases := []struct {
		r    Runner
		name string
		want error
	}{
		{r, "noexec", ErrNotExecutable},
		{r, "adir", ErrNotExecutable},
		{r, "linknoexec", ErrNotExecutable},
		{r, "linkdir", ErrNotExecutable},
		{r, "dangling", ErrNotFound},
		{r, "missing", ErrNotFound},
		{r, "../x", ErrBadName},
		{r, "a/b", ErrBadName},
		{r, "-x", ErrBadName},
		{r, "X", ErrBadName},
		{r, "", ErrBadName},
		{r, strings.Repeat("a", 65), ErrBadName},
		{Runner{}, "target", ErrNoDir},
		{Runner{Dir: filepath.Join(dir, "nonexistent")}, "target", ErrNotFound},
		{Runner{Dir: notDir}, "target", ErrNotFound},
	}
	for _, c := range cases {
		p, err := c.r.Lookup(c.name)
		if !errors.Is(err, c.want) || p != "" {
			t.Errorf("Lookup(%q) in %q = %q, %v; want %v", c.name, c.r.Dir, p, err, c.want)
		}
		res, err := c.r.Run(context.Background(), c.name, nil, nil)
		if !errors.Is(err, c.want) || res != (Result{}) {
			t.Errorf("Run(%q) in %q = %+v, %v; want %v", c.name, c.r.Dir, res, err, c.want)
		}
	}
	if _, err := (Runner{}).Lookup("x"); err.Error() != "plugins_dir is not set" {
		t.Errorf("ErrNoDir message %q", err)
	}

	// A symlink to an executable is followed; the link path is returned.
	p, err := r.Lookup("link")
	if err != nil || p != filepath.Join(dir, Prefix+"link") {
		t.Fatalf("Lookup(link) = %q, %v", p, err)
	}
	res, err := r.Run(context.Background(), "link", nil, nil)
	if err != nil || res.Output != "via link\n" {
		t.Fatalf("Run(link) = %+v, %v", res, err)
	}
}

func mustSymlink(t *testing.T, oldname, newname string) {
	t.Helper()
	if err := os.Symlink(oldname, newname); err != nil {
		t.Fatal(err)
	}
}

func TestStartFailure(t *testing.T) {
	dir := t.TempDir()
	writePlugin(t, dir, "garbage", "this is not a script\x00\x01\n", 0o755)
	_, err := Runner{Dir: dir}.Run(context.Background(), "garbage", nil, nil)
	if err == nil || errors.Is(err, ErrTimeout) || errors.Is(err, ErrNotFound) {
		t.Fatalf("Run = %v, want a start error", err)
	}
}

func TestNonZeroExit(t *testing.T) {
	dir := t.TempDir()
	writePlugin(t, dir, "fail", script(`echo out`, `echo "went wrong" >&2`, `exit 3`), 0o755)
	writePlugin(t, dir, "sig", script(`echo bye`, `kill -TERM $$`, `sleep 5`), 0o755)
	r := Runner{Dir: dir}

	res, err := r.Run(context.Background(), "fail", nil, nil)
	if err != nil {
		t.Fatalf("non-zero exit must not be an error: %v", err)
	}
	if res.ExitCode != 3 || res.Output != "out\nwent wrong\n" || res.TimedOut {
		t.Fatalf("Run = %+v", res)
	}

	res, err = r.Run(context.Background(), "sig", nil, nil)
	if err != nil || res.ExitCode != 128+int(syscall.SIGTERM) || res.Output != "bye\n" {
		t.Fatalf("Run(sig) = %+v, %v", res, err)
	}
}

func TestOutputTruncation(t *testing.T) {
	dir := t.TempDir()
	writePlugin(t, dir, "chatty", script(`i=0`, `while [ $i -lt 50 ]; do echo 0123456789; i=$((i+1)); done`), 0o755)
	writePlugin(t, dir, "runes", script(`printf 'ééé'`), 0o755)
	writePlugin(t, dir, "flood", script(`head -c 3000000 /dev/zero | tr '\0' x`, `echo done >&2`), 0o755)

	res, err := Runner{Dir: dir, MaxOutput: 100}.Run(context.Background(), "chatty", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("0123456789\n", 9) + "0\n… (output truncated at 100 bytes)"
	if res.Output != want {
		t.Fatalf("output %q\nwant %q", res.Output, want)
	}

	// Not cut in the middle of a rune.
	res, err = Runner{Dir: dir, MaxOutput: 5}.Run(context.Background(), "runes", nil, nil)
	if err != nil || res.Output != "éé\n… (output truncated at 5 bytes)" {
		t.Fatalf("Run(runes) = %q, %v", res.Output, err)
	}
	// Exactly at the limit: nothing dropped, no marker.
	res, err = Runner{Dir: dir, MaxOutput: 6}.Run(context.Background(), "runes", nil, nil)
	if err != nil || res.Output != "ééé" {
		t.Fatalf("Run(runes, 6) = %q, %v", res.Output, err)
	}

	// Far more than a pipe buffer: the plugin must not block, the default
	// cap applies.
	start := time.Now()
	res, err = Runner{Dir: dir}.Run(context.Background(), "flood", nil, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run(flood) = %v, exit %d", err, res.ExitCode)
	}
	want = strings.Repeat("x", DefaultMaxOutput) + "\n… (output truncated at 65536 bytes)"
	if res.Output != want {
		t.Fatalf("Run(flood): output of %d bytes, head %q tail %q", len(res.Output), res.Output[:20], res.Output[len(res.Output)-50:])
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("flood took %v", d)
	}
}

func TestInvalidUTF8(t *testing.T) {
	dir := t.TempDir()
	writePlugin(t, dir, "bin", script(`printf 'a\377\376b\n'`, `printf 'c\300\n' >&2`), 0o755)
	res, err := Runner{Dir: dir}.Run(context.Background(), "bin", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(res.Output) {
		t.Fatalf("output not valid UTF-8: %q", res.Output)
	}
	if want := "a\uFFFDb\nc\uFFFD\n"; res.Output != want {
		t.Fatalf("output %q, want %q", res.Output, want)
	}
}

func TestEnvironmentDoesNotLeak(t *testing.T) {
	t.Setenv("GRIDMGR_LEAK_CHECK", "secret-value")
	dir := t.TempDir()
	writePlugin(t, dir, "env", script(`env`), 0o755)
	res, err := Runner{Dir: dir}.Run(context.Background(), "env", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Output, "GRIDMGR_LEAK_CHECK") || strings.Contains(res.Output, "secret-value") {
		t.Fatalf("manager environment leaked:\n%s", res.Output)
	}
	t.Logf("plugin environment:\n%s", res.Output)
	for _, want := range []string{"PATH=/usr/local/bin:/usr/bin:/bin\n", "GRIDMGR_PLUGIN=env\n"} {
		if !strings.Contains(res.Output, want) {
			t.Errorf("environment lacks %q:\n%s", want, res.Output)
		}
	}
	if strings.Contains(res.Output, "HOME=") {
		t.Errorf("HOME leaked:\n%s", res.Output)
	}
}

func TestLargeStdinNotRead(t *testing.T) {
	dir := t.TempDir()
	writePlugin(t, dir, "deaf", script(`echo ignored`), 0o755)
	start := time.Now()
	res, err := Runner{Dir: dir, Timeout: 5 * time.Second}.Run(context.Background(), "deaf", nil, make([]byte, 4<<20))
	if err != nil || res.Output != "ignored\n" || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestTimeoutKillsGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "pid")
	writePlugin(t, dir, "hang", script(`sleep 30 &`, `echo $! > "$1"`, `echo started`, `sleep 30`), 0o755)

	const timeout = 700 * time.Millisecond
	start := time.Now()
	res, err := Runner{Dir: dir, Timeout: timeout}.Run(context.Background(), "hang", []string{pidFile}, nil)
	elapsed := time.Since(start)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if !strings.Contains(err.Error(), timeout.String()) {
		t.Errorf("error %q does not name the limit", err)
	}
	if elapsed < timeout || elapsed > timeout+time.Second {
		t.Errorf("Run returned after %v, timeout %v", elapsed, timeout)
	}
	if !res.TimedOut || res.ExitCode != -1 || res.Output != "started\n" {
		t.Fatalf("Result = %+v", res)
	}
	waitGone(t, readPid(t, pidFile))
}

func TestBackgroundChildKilledAfterExit(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The background sleep keeps stdout open after the plugin exits.
	writePlugin(t, dir, "bg", script(`sleep 30 &`, `echo $! > "$1"`, `echo ok`), 0o755)
	start := time.Now()
	res, err := Runner{Dir: dir, Timeout: 10 * time.Second}.Run(context.Background(), "bg", []string{pidFile}, nil)
	if err != nil || res.ExitCode != 0 || res.Output != "ok\n" || res.TimedOut {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Run took %v", d)
	}
	waitGone(t, readPid(t, pidFile))
}

func TestEscapedGrandchildDoesNotHang(t *testing.T) {
	if _, err := os.Stat("/usr/bin/setsid"); err != nil {
		t.Skip("no setsid")
	}
	dir := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "pid")
	// setsid moves the sleep out of the plugin's process group; it keeps
	// the output pipe open and is out of Run's reach.
	// The pid is written after setsid, so the escape is complete before the
	// plugin exits.
	writePlugin(t, dir, "escape", script(
		`/usr/bin/setsid sh -c 'echo $$ > "$1"; exec sleep 30' sh "$1" &`,
		`while [ ! -s "$1" ]; do sleep 0.01; done`,
		`echo ok`), 0o755)
	start := time.Now()
	res, err := Runner{Dir: dir, Timeout: 10 * time.Second}.Run(context.Background(), "escape", []string{pidFile}, nil)
	if pid := readPid(t, pidFile); pid > 0 {
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	}
	if err != nil || res.ExitCode != 0 || res.Output != "ok\n" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	// The pipe never reaches EOF: Run gives up on it after drainGrace.
	if d := time.Since(start); d < drainGrace || d > drainGrace+time.Second {
		t.Errorf("Run took %v, want about %v", d, drainGrace)
	}
}

func TestContextCancel(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "pid")
	writePlugin(t, dir, "slow", script(`sleep 30 &`, `echo $! > "$1"`, `echo waiting`, `sleep 30`), 0o755)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	res, err := Runner{Dir: dir, Timeout: 20 * time.Second}.Run(ctx, "slow", []string{pidFile}, nil)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Run returned after %v", d)
	}
	if res.TimedOut || res.ExitCode != -1 || res.Output != "waiting\n" {
		t.Fatalf("Result = %+v", res)
	}
	waitGone(t, readPid(t, pidFile))

	// Already cancelled: nothing is started.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err := (Runner{Dir: dir}).Run(ctx, "slow", []string{pidFile}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestList(t *testing.T) {
	dir := t.TempDir()
	writePlugin(t, dir, "zeta", script(`true`), 0o755)
	writePlugin(t, dir, "alpha", script(`true`), 0o700)
	writePlugin(t, dir, "mid-2", script(`true`), 0o755)
	writePlugin(t, dir, "noexec", script(`true`), 0o644)
	writePlugin(t, dir, "Upper", script(`true`), 0o755)
	writePlugin(t, dir, "dot.ted", script(`true`), 0o755)
	if err := os.Mkdir(filepath.Join(dir, Prefix+"dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, filepath.Join(dir, Prefix+"zeta"), filepath.Join(dir, Prefix+"link"))
	mustSymlink(t, filepath.Join(dir, "nowhere"), filepath.Join(dir, Prefix+"dangling"))
	if err := os.WriteFile(filepath.Join(dir, "other-tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, Prefix), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	got := Runner{Dir: dir}.List()
	want := []string{"alpha", "link", "mid-2", "zeta"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("List = %q, want %q", got, want)
	}
	if got := (Runner{}).List(); len(got) != 0 {
		t.Errorf("List with no dir = %q", got)
	}
	if got := (Runner{Dir: filepath.Join(dir, "missing")}).List(); len(got) != 0 {
		t.Errorf("List with missing dir = %q", got)
	}
	if got := (Runner{Dir: t.TempDir()}).List(); len(got) != 0 {
		t.Errorf("List with empty dir = %q", got)
	}
}

func TestConcurrentRuns(t *testing.T) {
	dir := t.TempDir()
	writePlugin(t, dir, "id", script(`echo "$1"`, `cat`), 0o755)
	r := Runner{Dir: dir}
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			arg := strconv.Itoa(i)
			res, err := r.Run(context.Background(), "id", []string{arg}, []byte("in"+arg))
			if err == nil && res.Output != arg+"\nin"+arg {
				err = fmt.Errorf("run %d: output %q", i, res.Output)
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
