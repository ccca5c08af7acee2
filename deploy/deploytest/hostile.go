package deploytest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// HostileManifest runs bin/evil (a shell script run as a program, the way
// the documented bin/hello is) at every hook an application has: its
// class's shared setup, its install, its run, an operation ("again") and
// its values. The install step then sleeps INSTALL_SLEEP seconds (0 by
// default), for tests that kill the manager while it installs.
const HostileManifest = `name = "evil"
version = "1"
[install]
files = [{ from = "bin/evil", mode = "0755" }]
dirs = ["out"]
commands = [["bin/evil", "install"]]
[install.env]
INSTALL_SLEEP = "SLEEP"
[shared]
files = [{ from = "bin/evil", mode = "0755" }]
commands = [["bin/evil", "shared"]]
[run]
command = ["bin/evil", "run"]
stop_grace = "1s"
[[operation]]
name = "again"
command = ["bin/evil", "op"]
[values]
command = ["bin/evil", "values"]
[[values.value]]
name = "answer"
type = "int"
[data]
out = ["out"]
`

// evilScript tries, in every place of TARGETS, to write a new file,
// overwrite the victim, chmod it, hard-link it into its own directory and
// make a directory; it reads the manager's identity key and lists the
// manager's directories; it writes what worked to out/report-STEP (in its
// own directory, for the test to read).
const evilScript = `#!/bin/sh
step=$1
report=out/report-$step
[ -d out ] || report=/dev/null   # the shared setup runs in the class's directory
: > $report
for d in TARGETS; do
  echo "$step" > "$d/evil-$step" 2>/dev/null && echo "WROTE $d/evil-$step" >> $report
  echo "$step" > "$d/victim" 2>/dev/null && echo "OVERWROTE $d/victim" >> $report
  chmod 777 "$d/victim" 2>/dev/null && echo "CHMOD $d/victim" >> $report
  ln "$d/victim" "link-$step-$(echo $d | tr / _)" 2>/dev/null && echo "LINKED $d/victim" >> $report
  mkdir "$d/dir-$step" 2>/dev/null && echo "MKDIR $d/dir-$step" >> $report
done
cat DATA/identity.key >> $report 2>/dev/null && echo "READ the identity key" >> $report
for d in instances state run classes bundles logs; do
  for i in $(ls DATA/apps/$d 2>/dev/null); do
    [ "$i" = "$GRIDMGR_INSTANCE" ] || [ "$d/$i" = classes/evil ] || echo "SAW $d/$i" >> $report  # its own
  done
done
echo "done $step" >> $report
case $step in
  install) sleep "$INSTALL_SLEEP" ;;
  run) exec sleep 1000 ;;
  values) echo "answer 42" ;;
esac
`

// Steps are the hooks bin/evil runs at, and names in its reports.
var Steps = []string{"shared", "install", "run", "op", "values"}

// Host makes the places outside an instance a hostile application could
// try to write: a world-writable and a root-owned directory, a victim in
// /tmp, /var/tmp and /dev/shm, and, in the manager's data dir data, its
// identity key. It returns where the application is to aim (Targets) and
// the paths whose digest must not change (Watch, the data dir not among
// them: the manager writes there).
func Host(t *testing.T, data string) (targets, watch []string) {
	t.Helper()
	tag := fmt.Sprintf("gridmgr-hostile-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	base := filepath.Join("/var/lib", tag)
	mk := func(dir string, mode os.FileMode) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(dir, mode)
		os.WriteFile(filepath.Join(dir, "victim"), []byte("ours\n"), 0o666)
		os.Chmod(filepath.Join(dir, "victim"), 0o666)
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	mk(filepath.Join(base, "world-writable"), 0o1777)
	mk(filepath.Join(base, "root-owned"), 0o755)
	t.Cleanup(func() { os.RemoveAll(base) })
	targets = []string{filepath.Join(base, "world-writable"), filepath.Join(base, "root-owned"), data, filepath.Join(data, "apps"),
		filepath.Join(data, "apps", "instances"), "/etc", "/"}
	watch = []string{base, filepath.Join(data, "identity.key")}
	for _, shared := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
		mk(filepath.Join(shared, tag), 0o1777)
		targets = append(targets, shared, filepath.Join(shared, tag))
		watch = append(watch, filepath.Join(shared, tag), filepath.Join(shared, "victim"))
		for _, step := range Steps {
			watch = append(watch, filepath.Join(shared, "evil-"+step), filepath.Join(shared, "dir-"+step))
		}
	}
	if _, err := os.Stat(filepath.Join(data, "identity.key")); err != nil {
		if err := os.WriteFile(filepath.Join(data, "identity.key"), []byte("THE-SECRET-KEY\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return targets, watch
}

// App writes the hostile application into a new directory, aimed at
// targets and at the data dir data, its install step sleeping sleep
// seconds, and returns the directory (to pack).
func App(t *testing.T, targets []string, data string, sleep int) string {
	t.Helper()
	dir := t.TempDir()
	manifest := strings.Replace(HostileManifest, `"SLEEP"`, fmt.Sprintf("%q", fmt.Sprint(sleep)), 1)
	if err := os.WriteFile(filepath.Join(dir, "app.toml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	script := strings.ReplaceAll(strings.ReplaceAll(evilScript, "TARGETS", strings.Join(targets, " ")), "DATA", data)
	if err := os.WriteFile(filepath.Join(dir, "bin", "evil"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Breaches are the lines of a step's report that show a change outside
// the instance (writes to the application's own private /tmp, /var/tmp
// and /dev/shm are not).
func Breaches(report string) []string {
	var out []string
	for line := range strings.Lines(report) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "done ") {
			continue
		}
		private := false
		for _, p := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
			for _, ok := range []string{"WROTE " + p + "/evil-", "OVERWROTE " + p + "/victim", "CHMOD " + p + "/victim", "MKDIR " + p + "/dir-"} {
				if strings.HasPrefix(line, ok) {
					private = true
				}
			}
		}
		if !private {
			out = append(out, line)
		}
	}
	return out
}
