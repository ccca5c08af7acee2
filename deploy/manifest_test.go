package deploy

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestExampleManifest(t *testing.T) {
	data, err := os.ReadFile("examples/hello/app.toml")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse("app.toml", data)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "hello" || m.Class != "web" || len(m.Install.Files) != 2 || m.Install.Files[1].To != "etc/greeting.txt" ||
		m.Install.Files[1].Mode != "0644" || m.Run.StopGrace.D() != 5*time.Second || len(m.Operations) != 2 ||
		len(m.Values.Values) != 2 || m.Idle.Path != "/idle" || m.Health.Interval.D() != 10*time.Second {
		t.Errorf("parsed: %+v", m)
	}
}

func TestMinimalManifestDefaults(t *testing.T) {
	m, err := Parse("app.toml", []byte("name = \"x\"\nversion = \"1\"\n[run]\ncommand = [\"bin/x\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Class != "x" || m.Run.StopSignal != "SIGTERM" || m.Run.StopGrace.D() != 10*time.Second || m.Run.Restart != "never" {
		t.Errorf("defaults: %+v", m)
	}
}

func TestManifestErrors(t *testing.T) {
	base := "name = \"x\"\nversion = \"1\"\n[run]\ncommand = [\"bin/x\"]\n"
	for _, tc := range []struct{ src, want string }{
		{"version = \"1\"\n[run]\ncommand = [\"x\"]\n", "app.toml: name: missing"},
		{"name = \"X y\"\n" + base[11:], `app.toml:1: name: "X y": write lower-case`},
		{base + "[install]\nfiles = [{ from = \"../etc/passwd\" }]\n", "install.files[1].from: \"../etc/passwd\": must be relative and stay inside"},
		{base + "[install]\ndirs = [\"/etc\"]\n", "app.toml:6: install.dirs: \"/etc\": must be relative"},
		{base + "[install]\ndirs = [\"a/./b\"]\n", `write it as "a/b"`},
		{base + "[install]\nfiles = [{ from = \"x\", mode = \"4755\" }]\n", "install.files[1].mode: \"4755\": an octal mode up to 0777"},
		{base + "[install]\nprots = [\"http\"]\n", `app.toml:6: install.prots: unknown key (did you mean "ports"?)`},
		{base + "[install.env]\nGRIDMGR_X = \"1\"\n", "install.env.GRIDMGR_X: not a variable name"},
		{base + "[install.env]\nA = \"${PORT_WEB}\"\n", `"${PORT_WEB}" is not known`},
		{"name = \"x\"\nversion = \"1\"\n[run]\ncommand = []\n", "app.toml:4: run.command: missing"},
		{base + "stop_signal = \"SIGSTOP\"\n", "run.stop_signal: \"SIGSTOP\": one of SIGTERM"},
		{base + "max_restarts = 2\n", "only with restart = \"on-failure\""},
		{base + "nice = -5\n", "run.nice: must be between 0 and 19"},
		{base + "stop_grace = \"soon\"\n", "\"soon\" is not a duration"},
		{base + "[idle]\nport = \"http\"\npath = \"/idle\"\n", "idle.port: \"http\" is not one of install.ports"},
		{base + "[idle]\ncpu_below = 0.1\n", "idle.for: cpu_below needs for"},
		{base + "[idle]\ncommand = [\"a\"]\ncpu_below = 0.1\nfor = \"1m\"\n", "give one of command, port"},
		{base + "[health]\ncpu_below = 0.5\nfor = \"1m\"\n", "only an idle probe may be a CPU threshold"},
		{base + "[[operation]]\nname = \"stop\"\ncommand = [\"a\"]\n", "operation[1].name: \"stop\" is a built-in control"},
		{base + "[[operation]]\nname = \"a\"\ncommand = [\"a\"]\n[[operation]]\nname = \"a\"\ncommand = [\"b\"]\n", "app.toml:9: operation[2].name: operation \"a\" is defined twice"},
		{base + "[[values.value]]\nname = \"n\"\ntype = \"int\"\n", "values.command: missing"},
		{base + "[values]\ncommand = [\"s\"]\n[[values.value]]\nname = \"n\"\ntype = \"bool\"\n", "values.value[1].type: \"bool\": int, float or string"},
		{base + "[data]\nout = [\"..\"]\n", "data.out: \"..\""},
		{"name = \"x\"\n[run\n", "invalid TOML"},
		{"\xff", "not UTF-8"},
	} {
		_, err := Parse("app.toml", []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %s", tc.src, err, tc.want)
		}
	}
}

// Five mistakes of five kinds — an unknown key, a value of the wrong
// type, a bad duration, a value out of range, a path outside the app —
// are reported together, each as FILE:LINE: KEY:, in the order of their
// lines, and nothing that only follows from them (the command the
// misspelt key was meant to be is not "missing").
func TestManifestReportsEveryMistake(t *testing.T) {
	src := `name = "hello"
version = "1.0"

[install]
dirs = ["data", "../etc"]

[run]
comand = ["bin/hello"]
stop_grace = "a while"
nice = "low"

[[operation]]
name = "greet"
command = ["bin/hello", "greet"]

[[operation]]
name = "status"
command = "bin/hello status"
`
	_, err := Parse("app.toml", []byte(src))
	want := []string{
		`app.toml:5: install.dirs: "../etc": must be relative and stay inside the application's directory (no leading /, no ..)`,
		`app.toml:8: run.comand: unknown key (did you mean "command"?)`,
		`app.toml:9: run.stop_grace: "a while" is not a duration between 0 and 24h (write e.g. "150ms" or "2m")`,
		`app.toml:10: run.nice: want a whole number, not a string`,
		`app.toml:17: operation[2].name: "status" is a built-in control of every application; name the operation otherwise`,
		`app.toml:18: operation[2].command: want a list of strings, e.g. ["a", "b"], not a string`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Fatalf("got\n%v\nwant\n%s", err, strings.Join(want, "\n"))
	}

	// A syntax error stops the reading there, and says so.
	_, err = Parse("app.toml", []byte("name = \"x\"\nnice = \"low\"\n[run\ncommand = 1\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "app.toml:3: invalid TOML: ") || !strings.Contains(err.Error(), "nothing else was checked") ||
		strings.Contains(err.Error(), "\n") {
		t.Fatalf("syntax error: %v", err)
	}
}

func FuzzParseManifest(f *testing.F) {
	data, _ := os.ReadFile("examples/hello/app.toml")
	f.Add(data)
	f.Add([]byte("name = \"x\"\nversion = \"1\"\n[run]\ncommand = [\"bin/x\"]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse("app.toml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "app.toml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		// Whatever passes names only paths inside the app and a command.
		for _, p := range append(append(m.Install.Dirs, m.Data.In...), m.Data.Out...) {
			if checkPath(p) != "" {
				t.Fatalf("accepted path %q", p)
			}
		}
		for _, p := range m.Install.Files {
			if checkPath(p.From) != "" || checkPath(p.To) != "" {
				t.Fatalf("accepted file %+v", p)
			}
		}
		if len(m.Run.Command) == 0 || m.Run.Command[0] == "" {
			t.Fatal("accepted a manifest without a command")
		}
	})
}
