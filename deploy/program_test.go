package deploy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// addBytes makes the bundle data uploadable.
func (env *execEnv) addBytes(t *testing.T, data []byte) string {
	t.Helper()
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	p := filepath.Join(t.TempDir(), sha+".gapp")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	env.bundles[sha] = p
	return sha
}

// programDir is a program's directory: an executable, a data file, a
// file that is not executable, and an empty directory.
func programDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.MkdirAll(filepath.Join(dir, "lib", "data"), 0o700)
	os.MkdirAll(filepath.Join(dir, "cache"), 0o755)
	os.WriteFile(filepath.Join(dir, "bin", "tool"), []byte("#!/bin/sh\necho tool\n"), 0o700)
	os.WriteFile(filepath.Join(dir, "lib", "data", "table.txt"), []byte("7 seven\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "app.toml"), []byte("not the manifest: a file of the program\n"), 0o644)
	return dir
}

// The bundle of a directory: the same bytes twice (and after the modes'
// and times' noise changes), an app.toml as promised, every file placed
// with 0755 or 0644, the program's own app.toml kept as a file of it.
func TestProgramBundleOfADirectory(t *testing.T) {
	dir := programDir(t)
	opts := ProgramBundle{Name: "tool", Source: dir, Executable: "bin/tool"}
	a, err := PackProgram(opts)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(dir, "bin", "tool"), 0o755)
	os.Chmod(filepath.Join(dir, "lib", "data", "table.txt"), 0o640)
	os.Chtimes(filepath.Join(dir, "bin", "tool"), fixedTime, fixedTime.AddDate(1, 0, 0))
	b, err := PackProgram(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("the same program packed twice gave different bytes")
	}
	bn, err := open(t, a, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	m := bn.Manifest
	if m.Name != "tool" || m.Network != "host" || !m.Run.Args || !m.Run.Env || m.Run.Restart != "never" ||
		strings.Join(m.Run.Command, " ") != "bin/tool" || strings.Join(m.Install.Dirs, " ") != "in out cache" ||
		strings.Join(m.Data.In, " ") != "in" || strings.Join(m.Data.Out, " ") != "out" {
		t.Fatalf("manifest %+v", m)
	}
	placed := map[string]string{}
	for _, p := range m.Install.Files {
		placed[p.To] = p.From + " " + p.Mode
	}
	want := map[string]string{
		"app.toml":           "files/app.toml 0644",
		"bin/tool":           "files/bin/tool 0755",
		"lib/data/table.txt": "files/lib/data/table.txt 0644",
	}
	if len(placed) != len(want) {
		t.Fatalf("placed %v", placed)
	}
	for k, v := range want {
		if placed[k] != v {
			t.Fatalf("placed %v, want %v", placed, want)
		}
	}
	// A different input, a different bundle.
	os.WriteFile(filepath.Join(dir, "lib", "data", "table.txt"), []byte("8 eight\n"), 0o600)
	if c, err := PackProgram(opts); err != nil || bytes.Equal(a, c) {
		t.Fatalf("changed content, same bundle (%v)", err)
	}
}

// What PackProgram refuses, each time naming what and where.
func TestProgramBundleRefuses(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(outside, []byte("secret"), 0o600)
	cases := []struct {
		name  string
		setup func(dir string) ProgramBundle
		want  string
	}{
		{"symlink out of the dir", func(dir string) ProgramBundle {
			os.Symlink(outside, filepath.Join(dir, "lib", "secret"))
			return ProgramBundle{Name: "p", Source: dir, Executable: "bin/tool"}
		}, `"lib/secret" is a symbolic link`},
		{"symlink inside the dir", func(dir string) ProgramBundle {
			os.Symlink("tool", filepath.Join(dir, "bin", "again"))
			return ProgramBundle{Name: "p", Source: dir, Executable: "bin/tool"}
		}, `"bin/again" is a symbolic link`},
		{"executable a symlink out", func(dir string) ProgramBundle {
			os.Symlink("/bin/sh", filepath.Join(dir, "sh"))
			return ProgramBundle{Name: "p", Source: dir, Executable: "sh"}
		}, `"sh" is a symbolic link`},
		{"source a symlink", func(dir string) ProgramBundle {
			l := filepath.Join(t.TempDir(), "link")
			os.Symlink(dir, l)
			return ProgramBundle{Name: "p", Source: l, Executable: "bin/tool"}
		}, "it is a symbolic link"},
		{"a pipe", func(dir string) ProgramBundle {
			syscall.Mkfifo(filepath.Join(dir, "lib", "fifo"), 0o644)
			return ProgramBundle{Name: "p", Source: dir, Executable: "bin/tool"}
		}, `"lib/fifo" is not a regular file or a directory`},
		{"executable escaping", func(dir string) ProgramBundle {
			return ProgramBundle{Name: "p", Source: dir, Executable: "../secret"}
		}, `executable "../secret": must be relative`},
		{"executable absolute", func(dir string) ProgramBundle {
			return ProgramBundle{Name: "p", Source: dir, Executable: "/bin/sh"}
		}, `executable "/bin/sh": must be relative`},
		{"executable missing", func(dir string) ProgramBundle {
			return ProgramBundle{Name: "p", Source: dir, Executable: "bin/none"}
		}, `executable "bin/none" is not a file in it`},
		{"executable a directory", func(dir string) ProgramBundle {
			return ProgramBundle{Name: "p", Source: dir, Executable: "lib"}
		}, `executable "lib" is not a file in it`},
		{"no executable", func(dir string) ProgramBundle {
			return ProgramBundle{Name: "p", Source: dir}
		}, "no executable"},
		{"bad name", func(dir string) ProgramBundle {
			return ProgramBundle{Name: "Bad Name", Source: dir, Executable: "bin/tool"}
		}, `name "Bad Name"`},
		{"bad network", func(dir string) ProgramBundle {
			return ProgramBundle{Name: "p", Source: dir, Executable: "bin/tool", Network: "bridge"}
		}, `network "bridge"`},
		{"out dir escaping", func(dir string) ProgramBundle {
			return ProgramBundle{Name: "p", Source: dir, Executable: "bin/tool", OutDir: "../out"}
		}, `out directory "../out"`},
		{"a file where out must be", func(dir string) ProgramBundle {
			os.WriteFile(filepath.Join(dir, "results"), nil, 0o644)
			return ProgramBundle{Name: "p", Source: dir, Executable: "bin/tool", OutDir: "results/final"}
		}, `"results" is a file where the install makes the directory results/final`},
		{"a backslash in a name", func(dir string) ProgramBundle {
			os.WriteFile(filepath.Join(dir, `a\b`), nil, 0o644)
			return ProgramBundle{Name: "p", Source: dir, Executable: "bin/tool"}
		}, "backslash"},
		{"a newline in a name", func(dir string) ProgramBundle {
			os.WriteFile(filepath.Join(dir, "a\nb"), nil, 0o644)
			return ProgramBundle{Name: "p", Source: dir, Executable: "bin/tool"}
		}, "control character"},
		{"too many files", func(dir string) ProgramBundle {
			return ProgramBundle{Name: "p", Source: dir, Executable: "bin/tool", Limits: Limits{MaxFiles: 3}}
		}, "more than 3 files and directories"},
		{"too many bytes", func(dir string) ProgramBundle {
			return ProgramBundle{Name: "p", Source: dir, Executable: "bin/tool", Limits: Limits{MaxExpanded: 10}}
		}, "more than 10 bytes"},
		{"single file, other executable", func(dir string) ProgramBundle {
			return ProgramBundle{Name: "p", Source: filepath.Join(dir, "bin", "tool"), Executable: "other"}
		}, `executable "other": for a single file`},
		{"single file a symlink", func(dir string) ProgramBundle {
			os.Symlink("/bin/true", filepath.Join(dir, "true"))
			return ProgramBundle{Name: "p", Source: filepath.Join(dir, "true")}
		}, "it is a symbolic link"},
		{"a device", func(dir string) ProgramBundle {
			return ProgramBundle{Name: "p", Source: "/dev/null"}
		}, "not a regular file or a directory"},
		{"no source", func(dir string) ProgramBundle {
			return ProgramBundle{Name: "p"}
		}, "no source"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := programDir(t)
			data, err := PackProgram(c.setup(dir))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v (%d bytes), want an error with %q", err, len(data), c.want)
			}
		})
	}
}

// A program packed alone (a script with a shebang, run directly as
// bin/NAME) installs, starts with arguments and environment that reach
// it word for word — shell metacharacters too — and writes its result
// where app get reads it.
func TestProgramBundleStartsWithArgs(t *testing.T) {
	env := newExecEnv(t)
	canRun(t, env.ex)
	src := filepath.Join(t.TempDir(), "job.sh")
	os.WriteFile(src, []byte(`#!/bin/sh
out=$3
{ for a in "$@"; do printf '[%s]\n' "$a"; done
  printf 'JOB_INDEX=%s\n' "$JOB_INDEX"
  printf 'PWD=%s\n' "$PWD"
  printf 'ARGV0=%s\n' "$0"; } > "$out"
`), 0o644) // not executable here: PackProgram makes it so
	data, err := PackProgram(ProgramBundle{Name: "job", Source: src, Executable: "job.sh"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice"}, env.addBytes(t, data))
	if err != nil {
		t.Fatal(err)
	}
	hostile := []string{"; touch out/pwned #", "$(touch out/pwned)", "`touch out/pwned`", "*", "$HOME", "a b\tc", "'\"", "|", ""}
	args := append([]string{"--index", "7", "out/result-7.txt", "${INSTANCE}"}, hostile...)
	if _, err := env.ex.StartWith(a.Id, args, map[string]string{"JOB_INDEX": "7 ; $(x)"}); err != nil {
		t.Fatal(err)
	}
	dir := env.ex.host.InstanceDir(a.Id)
	want := "[--index]\n[7]\n[out/result-7.txt]\n[" + a.Id + "]\n"
	for _, h := range hostile {
		want += "[" + h + "]\n"
	}
	want += "JOB_INDEX=7 ; $(x)\nPWD=" + dir + "\nARGV0=" + dir + "/bin/job\n"
	var got []byte
	waitFor(t, "out/result-7.txt", func() bool {
		got, _, err = env.ex.Get(a.Id, "out/result-7.txt", 0, 0)
		return err == nil && len(got) >= len(want)
	})
	if string(got) != want {
		t.Fatalf("the program wrote\n%s\nwant\n%s", got, want)
	}
	if _, _, err := env.ex.Get(a.Id, "out/pwned", 0, 0); err == nil {
		t.Fatal("an argument was given to a shell")
	}
	if r := env.ex.get(a.Id); strings.Join(r.Args, "\x00") != strings.Join(args, "\x00") || r.Env["JOB_INDEX"] != "7 ; $(x)" {
		t.Fatalf("recorded %q %v", r.Args, r.Env)
	}
}

// A directory with a Go-built executable: installed, run as its path
// inside the directory, reading a file of its own and writing its
// result from its arguments.
func TestProgramBundleOfAGoProgramStarts(t *testing.T) {
	env := newExecEnv(t)
	canRun(t, env.ex)
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the program")
	}
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "main.go"), []byte(`package main

import (
	"os"
	"strings"
)

func main() {
	table, err := os.ReadFile("lib/data/table.txt")
	if err != nil {
		panic(err)
	}
	out := os.Args[len(os.Args)-1]
	msg := strings.Join(os.Args[1:len(os.Args)-1], ",") + " " + os.Getenv("MODE") + " " + string(table)
	if err := os.WriteFile(out, []byte(msg), 0o644); err != nil {
		panic(err)
	}
}
`), 0o644)
	os.WriteFile(filepath.Join(src, "go.mod"), []byte("module prog\n\ngo 1.22\n"), 0o644)
	dir := programDir(t)
	build := exec.Command(gobin, "build", "-o", filepath.Join(dir, "bin", "prog"), ".")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	data, err := PackProgram(ProgramBundle{Name: "prog", Source: dir, Executable: "bin/prog", Network: "none", OutDir: "results"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := env.ex.Install(Grant{Reservation: "gm1-1-aaaaaa", Holder: "alice"}, env.addBytes(t, data))
	if err != nil {
		t.Fatal(err)
	}
	if a.Network != "none" {
		t.Fatalf("network %q", a.Network)
	}
	if _, err := env.ex.StartWith(a.Id, []string{"a", "b c", "results/r.txt"}, map[string]string{"MODE": "fast"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "results/r.txt", func() bool {
		got, _, err := env.ex.Get(a.Id, "results/r.txt", 0, 0)
		return err == nil && string(got) == "a,b c fast 7 seven\n"
	})
}
