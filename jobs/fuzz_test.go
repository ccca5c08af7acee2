package jobs

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/wire"

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

// FuzzSubmit: any bytes a client sends as the jobs of a submit are
// checked (CheckSpec) and either refused with an error or queued, never
// a panic; what is queued runs through a Tick.
func FuzzSubmit(f *testing.F) {
	good, _ := proto.Marshal(testSpec("a", 0, 1))
	f.Add(good)
	bad := testSpec("a", 0, 1)
	bad.Inputs = []*wire.JobFile{{Path: "../x", Sha256: strings.Repeat("c", 64)}}
	b, _ := proto.Marshal(bad)
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		sp := &wire.JobSpec{}
		if err := proto.Unmarshal(data, sp); err != nil {
			return
		}
		q := New(Config{Self: "gm0"})
		now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
		c, _, err := q.Submit(now, Submission{RequestID: "r", User: "u", Owner: "p", Jobs: []*wire.JobSpec{sp}})
		if err != nil {
			if len(q.jobs) != 0 {
				t.Fatalf("refused (%v) but queued %d", err, len(q.jobs))
			}
			return
		}
		if c == "" || len(q.jobs) != 1 {
			t.Fatalf("queued %q, %d jobs", c, len(q.jobs))
		}
		q.Tick(now)
		q.Ready()
	})
}
