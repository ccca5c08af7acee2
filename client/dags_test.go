package client

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(p, "bin/") || strings.HasSuffix(p, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(full, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
}

// A workflow's programs are packed once however many nodes name them; a
// node's job file is read from inside the workflow's directory only, and
// one that is missing, escapes by a symbolic link or is not a job file
// is refused with the workflow file's line.
func TestPrepareFlowFile(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"bin/step":       "#!/bin/sh\nexit 0\n",
		"check.sh":       "#!/bin/sh\nexit 0\n",
		"sub/job.toml":   "name = \"sub\"\nprogram = \"run.sh\"\n",
		"sub/run.sh":     "#!/bin/sh\nexit 0\n",
		"flow.toml":      "[nodes.a]\nprogram = \"bin/step\"\n[nodes.b]\nafter = [\"a\"]\nprogram = \"bin/step\"\ncount = 3\npost = [\"check.sh\"]\n[nodes.c]\nafter = [\"a\"]\njob = \"sub/job.toml\"\nretries = 4\n",
		"missing.toml":   "[nodes.a]\nprogram = \"bin/step\"\n[nodes.b]\njob = \"nope.toml\"\n",
		"notjob.toml":    "[nodes.a]\njob = \"bin/step\"\n",
		"escape.toml":    "[nodes.a]\njob = \"link/job.toml\"\n",
		"outside/x.toml": "program = \"x\"\n",
	})
	outside := t.TempDir()
	writeTree(t, outside, map[string]string{"job.toml": "program = \"/bin/true\"\n"})
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	spec, blobs, cleanup, err := prepareFlowFile(filepath.Join(dir, "flow.toml"), "gm160", time.Now())
	defer cleanup()
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Nodes) != 3 || spec.Name != "flow" {
		t.Fatalf("spec %v", spec)
	}
	// bin/step once (a and b), check.sh, sub/run.sh
	if len(blobs) != 3 {
		var what []string
		for _, b := range blobs {
			what = append(what, b.what)
		}
		t.Fatalf("%d blobs: %v", len(blobs), what)
	}
	for _, n := range spec.Nodes {
		switch n.Name {
		case "b":
			if len(n.Jobs) != 3 || n.Post == nil || n.Post.Requirement != `name == "gm160"` || n.Post.Name != "b-post" {
				t.Fatalf("b: %v", n)
			}
		case "c":
			if n.Jobs[0].MaxRetries != 4 || n.Jobs[0].Name != "sub" || !strings.HasSuffix(n.Jobs[0].OutputDir, filepath.Join("sub", "results-sub")) {
				t.Fatalf("c: %v", n.Jobs[0])
			}
		}
	}
	for file, want := range map[string]string{
		"missing.toml": "missing.toml:4: nodes.b.job: nope.toml: ",
		"notjob.toml":  "bin/step:2: invalid TOML",
		"escape.toml":  "escape.toml:2: nodes.a.job: link/job.toml: ",
	} {
		_, _, cleanup, err := prepareFlowFile(filepath.Join(dir, file), "gm160", time.Now())
		cleanup()
		t.Logf("%s: %v", file, err)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", file, err, want)
		}
	}
}
