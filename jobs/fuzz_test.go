package jobs

import (
	"strings"
	"testing"

	"github.com/gridmgr/gridmgr/internal/tomlpos"
)

// FuzzParse: any bytes are a description or errors naming the file,
// never a panic; what is accepted names only paths inside its
// directories, at every index.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		complete,
		`program = "x"`,
		"program = \"x\"\ncount = 3\nargs = [\"${INDEX}\", \"${NAME}\"]\noutputs = [\"o-${INDEX}\"]\n",
		"program = \"x\"\nbegin = \"+2h\"\ndeadline = 2026-12-01T00:00:00Z\n",
		"program = \"x\"\nbegin = 2026-12-01\n",
		"program = \"x\"\nrequirement = '''\ncpus >\n'''\n",
		"program = \"../x\"\ninputs = [\"${INDEX\"]\n",
		"[env]\nA = \"${NAME}\"\n[tokens]\ngpus = 1\n",
		"program = \n",
		"\ufeffprogram = \"x\"\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse("job.toml", data)
		if err != nil {
			es, ok := err.(tomlpos.Errors)
			if !ok || len(es) == 0 {
				t.Fatalf("error %T, not tomlpos.Errors: %v", err, err)
			}
			for _, e := range es {
				if e.File != "job.toml" || !strings.HasPrefix(e.Error(), "job.toml") {
					t.Fatalf("an error does not name the file: %q", e.Error())
				}
			}
			return
		}
		if d.Count < 1 || d.Count > MaxCount || d.CPUs < 1 || d.Memory < MinSize || d.Runtime < MinRuntime || d.LostAfter < MinLostAfter {
			t.Fatalf("accepted out of range: %+v", d)
		}
		if checkPath(d.Program, false) != "" || checkPath(d.OutputDir, false) != "" {
			t.Fatalf("accepted program %q, output_dir %q", d.Program, d.OutputDir)
		}
		for _, i := range []int{0, d.Count - 1} {
			p := d.Expand(i)
			for _, in := range p.Inputs {
				if checkPath(in, false) != "" || strings.Contains(in, "${") {
					t.Fatalf("accepted input %q at index %d", in, i)
				}
			}
			for _, out := range p.Outputs {
				if checkPath(out, true) != "" || strings.Contains(out, "${") {
					t.Fatalf("accepted output %q at index %d", out, i)
				}
			}
			if checkPath(p.ResultDir, false) != "" {
				t.Fatalf("result dir %q", p.ResultDir)
			}
		}
	})
}
