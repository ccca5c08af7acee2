package deploy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gridmgr/gridmgr/wire"
)

// startManifest lets a start add args and env; its program appends
// them to out/runs, then fails (MODE=fail) or stays.
const startManifest = `name = "runs"
version = "1"
[install]
files = [{ from = "bin/x", mode = "0755" }]
dirs = ["out"]
ports = ["http"]
[install.env]
FIXED = "by the manifest"
[run]
command = ["bin/x", "first"]
args = true
env = true
restart = "on-failure"
max_restarts = 2
stop_grace = "1s"
[data]
out = ["out"]
`

func (env *execEnv) startApp(t *testing.T, manifest string) *wire.AppInstance {
	t.Helper()
	app := t.TempDir()
	os.WriteFile(filepath.Join(app, ManifestName), []byte(manifest), 0o644)
	os.MkdirAll(filepath.Join(app, "bin"), 0o755)
	os.WriteFile(filepath.Join(app, "bin", "x"), []byte(`#!/bin/sh
{ printf '%s|' "$@"; printf '%s %s\n' "$MODE" "$FIXED"; } >> out/runs
[ "$MODE" = fail ] && exit 1
exec sleep 1000
`), 0o755)
	a, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice"}, env.addDir(t, app))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (env *execEnv) runs(t *testing.T, id string) []string {
	data, _, _ := env.ex.Get(id, "out/runs", 0, 0)
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

// Every refusal of what a start adds: a BAD_REQUEST that says what, and
// nothing recorded or started.
func TestStartArgsRefused(t *testing.T) {
	env := newExecEnv(t)
	canRun(t, env.ex)
	fixed, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice"}, env.add(t, execManifest))
	if err != nil {
		t.Fatal(err)
	}
	a := env.startApp(t, strings.Replace(startManifest, `name = "runs"`, `name = "open"`, 1))
	many := make([]string, MaxStartArgs+1)
	manyEnv := map[string]string{}
	for i := range MaxStartEnv + 1 {
		manyEnv[fmt.Sprintf("V%d", i)] = "x"
	}
	cases := []struct {
		name string
		id   string
		args []string
		env  map[string]string
		want string
	}{
		{"args on a fixed command", fixed.Id, []string{"x"}, nil, "loop's app.toml fixes its run command: it takes no arguments at start (its [run] would say args = true)"},
		{"env on a fixed command", fixed.Id, nil, map[string]string{"A": "1"}, "a start may not add variables (its [run] would say env = true)"},
		{"PATH", a.Id, nil, map[string]string{"PATH": "/tmp"}, "PATH is the manager's to set"},
		{"HOME", a.Id, nil, map[string]string{"HOME": "/"}, "HOME is the manager's to set"},
		{"INSTANCE_DIR", a.Id, nil, map[string]string{"INSTANCE_DIR": "/"}, "INSTANCE_DIR is the manager's"},
		{"GRIDMGR_", a.Id, nil, map[string]string{"GRIDMGR_INSTANCE": "other"}, "GRIDMGR_INSTANCE is the manager's"},
		{"PORT_", a.Id, nil, map[string]string{"PORT_HTTP": "1"}, "PORT_HTTP is the manager's"},
		{"LD_PRELOAD", a.Id, nil, map[string]string{"LD_PRELOAD": "/tmp/x.so"}, "LD_PRELOAD is the manager's"},
		{"the manifest's", a.Id, nil, map[string]string{"FIXED": "changed"}, "FIXED is set by open's app.toml"},
		{"lower case", a.Id, nil, map[string]string{"path": "/tmp"}, `environment variable "path": a name is upper-case`},
		{"digit first", a.Id, nil, map[string]string{"1X": "y"}, `"1X": a name is upper-case`},
		{"equals in a name", a.Id, nil, map[string]string{"A=B": "y"}, `"A=B": a name`},
		{"empty name", a.Id, nil, map[string]string{"": "y"}, "environment variable empty: a name"},
		{"NUL in an arg", a.Id, []string{"ok", "a\x00b"}, nil, "argument 2 holds a NUL byte"},
		{"NUL in a value", a.Id, nil, map[string]string{"A": "a\x00b"}, "environment variable A holds a NUL byte"},
		{"bad UTF-8", a.Id, []string{"\xff"}, nil, "argument 1 is not valid UTF-8"},
		{"unknown variable", a.Id, []string{"${HOME}/x"}, nil, `argument 1: "${HOME}" is not known`},
		{"unknown variable in env", a.Id, nil, map[string]string{"A": "${SECRET}"}, `environment variable A: "${SECRET}" is not known`},
		{"too many args", a.Id, many, nil, "257 arguments, at most 256"},
		{"too many variables", a.Id, nil, manyEnv, "65 environment variables, at most 64"},
		{"too many bytes", a.Id, []string{strings.Repeat("x", MaxStartBytes)}, nil, "bytes, at most 65536"},
		{"too many bytes once substituted", a.Id, []string{strings.Repeat("${INSTANCE_DIR}", MaxStartBytes/len("${INSTANCE_DIR}")-1)}, nil, "once ${...} are substituted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := env.ex.StartWith(c.id, c.args, c.env)
			var de *Error
			if !errors.As(err, &de) || de.Code != wire.ErrorReply_CODE_BAD_REQUEST || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a BAD_REQUEST with %q", err, c.want)
			}
			if !strings.HasPrefix(err.Error(), "starting "+c.id+": ") {
				t.Fatalf("%v does not name the instance", err)
			}
			if r := env.ex.get(c.id); r.Args != nil || r.Env != nil || r.Started {
				t.Fatalf("a refused start changed the record: %+v", r)
			}
			if st, _ := env.ex.Status(c.id); st.State != "installed" {
				t.Fatalf("a refused start ran it: %s", st.State)
			}
		})
	}
	// Without anything added, both start.
	if _, err := env.ex.Start(fixed.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := env.ex.StartWith(a.Id, nil, map[string]string{}); err != nil {
		t.Fatal(err)
	}
}

// A restart on failure, a re-adoption by a restarted manager and a
// restart after the host's (Reconcile) run with the last start's args
// and env; a start without them runs the command alone.
func TestStartArgsKeptForRestarts(t *testing.T) {
	env := newExecEnv(t)
	canRun(t, env.ex)
	a := env.startApp(t, startManifest)
	args := []string{"--index", "7", "${INSTANCE}", "$(id)"}
	line := "first|--index|7|" + a.Id + "|$(id)|"
	if _, err := env.ex.StartWith(a.Id, args, map[string]string{"MODE": "fail"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three runs", func() bool { return len(env.runs(t, a.Id)) == 3 })
	waitFor(t, "it to fail", func() bool { st, _ := env.ex.Status(a.Id); return st.State == "failed" })
	for _, l := range env.runs(t, a.Id) {
		if l != line+"fail by the manifest" {
			t.Fatalf("runs %q", env.runs(t, a.Id))
		}
	}
	// (Its supervisor may outlive the failure by a moment: until it
	// exits, a start is refused as "running already".)
	var err error
	waitFor(t, "a start after the failure", func() bool {
		_, err = env.ex.StartWith(a.Id, args, map[string]string{"MODE": "stay"})
		return err == nil || !strings.Contains(err.Error(), "running already")
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a fourth run", func() bool { return len(env.runs(t, a.Id)) == 4 })

	env.open(t) // the manager restarts: the record is read back, the process re-adopted
	r := env.ex.get(a.Id)
	if strings.Join(r.Args, " ") != strings.Join(args, " ") || len(r.Env) != 1 || r.Env["MODE"] != "stay" {
		t.Fatalf("record read back: %q %v", r.Args, r.Env)
	}
	if st, _ := env.ex.Status(a.Id); st.State != "running" {
		t.Fatalf("not re-adopted: %s", st.State)
	}
	// The host restarts: its processes are gone, it should run.
	if err := env.ex.run.Stop(a.Id); err != nil {
		t.Fatal(err)
	}
	env.ex.Reconcile([]string{"gm1-1-aaaaaa"})
	waitFor(t, "a run after the host's restart", func() bool { return len(env.runs(t, a.Id)) == 5 })
	if got := env.runs(t, a.Id)[4]; got != line+"stay by the manifest" {
		t.Fatalf("after the host's restart it ran %q", got)
	}
	// A start without args: the command alone, and the record says so.
	if _, err := env.ex.Stop(a.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := env.ex.Start(a.Id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a run without args", func() bool { return len(env.runs(t, a.Id)) == 6 })
	if got := env.runs(t, a.Id)[5]; got != "first| by the manifest" {
		t.Fatalf("without args it ran %q", got)
	}
	if r := env.ex.get(a.Id); r.Args != nil || r.Env != nil {
		t.Fatalf("the record kept %q %v", r.Args, r.Env)
	}
	data, _ := os.ReadFile(env.ex.recordPath(a.Id))
	if strings.Contains(string(data), `"args"`) || strings.Contains(string(data), `"env"`) {
		t.Fatalf("the record file kept them: %s", data)
	}
}
