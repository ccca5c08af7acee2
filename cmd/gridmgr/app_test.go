package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
	if code != exitOK || !strings.Contains(out, "packed hello 1.0.0 (class web): 3 files") || !strings.Contains(out, "sha256 ") {
		t.Fatalf("pack: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = run(t, "app", "check", bundle)
	if code != exitOK || !strings.Contains(out, "hello 1.0.0 (class web): ok") || !strings.Contains(out, "operations reload, greet") {
		t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
	}

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
