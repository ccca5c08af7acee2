package deploy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const killManifest = `name = "k"
version = "1"
class = "kc"
[install]
files = [{ from = "bin/run", to = "bin/run", mode = "0755" }, { from = "etc/conf", to = "conf/app.conf" }]
dirs = ["in"]
ports = ["http", "admin"]
[shared]
dirs = ["cache"]
files = [{ from = "etc/conf", to = "shared.conf", mode = "0600" }]
[run]
command = ["bin/run"]
`

// killedAt is what installStep panics with to stop an installation
// where a kill -9 would.
type killedAt string

// An installation stopped at each of its steps (as by a kill -9: nothing
// of it undone then) is undone when the executor opens again: the
// instance is not listed, no uid is given out, and the applications'
// directory is as it was before. The steps are those of the batched
// journal records (several changes announced by one sync, then made).
func TestInstallKilledAtEachStep(t *testing.T) {
	steps := []string{"recorded", "placed", "acquired", "class placed", "instance recorded", "manifest written", "before the record"}
	t.Cleanup(func() { installStep = func(string) {} })
	for _, step := range steps {
		env := newExecEnv(t)
		sha := env.add(t, killManifest)
		before := env.digest(t)
		reached := false
		installStep = func(s string) {
			if s == step {
				reached = true
				panic(killedAt(s))
			}
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(killedAt); !ok {
						panic(r)
					}
				}
			}()
			_, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice"}, sha)
			t.Errorf("%s: the installation went through: %v", step, err)
		}()
		installStep = func(string) {}
		if !reached {
			t.Fatalf("step %q was never reached", step)
		}
		if d := env.digest(t); d == before {
			t.Fatalf("%s: the killed installation changed nothing (the test stops too early)", step)
		}
		env.open(t) // the restart
		if ids := env.ex.ids(func(*Record) bool { return true }); len(ids) != 0 {
			t.Errorf("%s: instances %v after the restart", step, ids)
		}
		if uids := env.ex.host.Shares().UIDs(); len(uids) != 0 {
			t.Errorf("%s: uids still given out: %v", step, uids)
		}
		if env.digest(t) != before {
			t.Errorf("%s: the host was not restored", step)
		}
	}
}

// A bundle whose bytes do not hash to the sha256 it is installed by is
// refused, and nothing is written — unless the executor is told its
// bundles were checked as they arrived (the manager's store), when it
// does not hash them again; a hostile archive is refused either way.
func TestInstallChecksTheBundlesHash(t *testing.T) {
	for _, checked := range []bool{false, true} {
		env := newExecEnv(t)
		env.ex.o.BundleChecked = checked
		sha := env.add(t, killManifest)
		// Another bundle's bytes under sha's name.
		other := env.add(t, strings.Replace(killManifest, `version = "1"`, `version = "2"`, 1))
		data, err := os.ReadFile(env.bundles[other])
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "swapped.gapp")
		os.WriteFile(p, data, 0o644)
		env.bundles[sha] = p
		before := env.digest(t)
		ai, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice"}, sha)
		if !checked {
			if err == nil || !strings.Contains(err.Error(), "bad bundle") || !strings.Contains(err.Error(), "hashes to") {
				t.Fatalf("unchecked: a bundle whose bytes are not its name installed: %v, %v", ai, err)
			}
			if env.digest(t) != before {
				t.Fatal("unchecked: the refused bundle wrote something")
			}
		} else if err != nil {
			t.Fatalf("checked: %v", err)
		}

		// Hostile archives, under their own names.
		for name, data := range map[string][]byte{
			"zip slip": craft(t, append(good, entry{"../evil", 0o644, nil})...),
			"symlink":  craft(t, append(good, entry{"link", fs.ModeSymlink | 0o777, []byte("/etc/passwd")})...),
		} {
			b, err := Open(bytes.NewReader(data), int64(len(data)), Limits{})
			if err == nil {
				t.Fatalf("%s: opened: %v", name, b.Files)
			}
			h := sha256.Sum256(data)
			sum := hex.EncodeToString(h[:])
			p := filepath.Join(t.TempDir(), sum+".gapp")
			os.WriteFile(p, data, 0o644)
			env.bundles[sum] = p
			before := env.digest(t)
			if _, err := env.ex.Install(Grant{Reservation: "gm1-2-aaaaaa", Holder: "alice"}, sum); err == nil || !strings.Contains(err.Error(), "bad bundle") {
				t.Errorf("checked=%v %s: %v", checked, name, err)
			}
			if env.digest(t) != before {
				t.Errorf("checked=%v %s: the refused bundle wrote something", checked, name)
			}
		}
	}
}
