package jobs

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/internal/tomlpos"
)

// complete is a job file with every key; docs/jobs.md shows it too.
const complete = `name = "render"
program = "bin/render"
executable = "run.sh"
args = ["--frame", "${INDEX}", "--job", "${NAME}"]
count = 100
cpus = 2
memory = "512MiB"
disk = "1GiB"
tokens = { gpus = 1, "licenses.blender" = 1 }
runtime = "10m"
requirement = 'arch == "amd64" && mem >= 1*GiB'
rank = "cpus_free"
inputs = ["data/scene-${INDEX}.blend", "common/lib.dat"]
outputs = ["frame-${INDEX}.png", "log/${NAME}.txt"]
output_dir = "results/${NAME}"
max_retries = 3
success_exit_codes = [2, 0]
on_failure = "hold"
begin = 2026-12-01T02:00:00Z
deadline = "2026-12-02T02:00:00+01:00"
priority = -10
network = "none"
lost_after = "2m"

[env]
QUALITY = "high"
FRAME = "${INDEX}"
`

func TestCompleteFile(t *testing.T) {
	d, err := Parse("jobs/render.toml", []byte(complete))
	if err != nil {
		t.Fatal(err)
	}
	want := &Description{
		Name: "render", Program: "bin/render", Executable: "run.sh",
		Args:  []string{"--frame", "${INDEX}", "--job", "${NAME}"},
		Env:   map[string]string{"QUALITY": "high", "FRAME": "${INDEX}"},
		Count: 100, CPUs: 2, Memory: 512 << 20, Disk: 1 << 30,
		Tokens:      map[string]int64{"gpus": 1, "licenses.blender": 1},
		Runtime:     10 * time.Minute,
		Requirement: `arch == "amd64" && mem >= 1*GiB`, Rank: "cpus_free",
		Inputs:           []string{"data/scene-${INDEX}.blend", "common/lib.dat"},
		Outputs:          []string{"frame-${INDEX}.png", "log/${NAME}.txt"},
		OutputDir:        "results/render",
		MaxRetries:       3,
		SuccessExitCodes: []int{0, 2},
		OnFailure:        OnFailureHold,
		Begin:            time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC),
		Deadline:         time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC),
		Priority:         -10, Network: "none", LostAfter: 2 * time.Minute,
	}
	if !d.Deadline.Equal(want.Deadline) || !d.Begin.Equal(want.Begin) {
		t.Errorf("begin %v deadline %v, want %v %v", d.Begin, d.Deadline, want.Begin, want.Deadline)
	}
	d.Begin, d.Deadline, want.Begin, want.Deadline = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("parsed\n%+v\nwant\n%+v", d, want)
	}
	n := d.Need()
	if n.CPUs != 2 || n.Mem != 512<<20 || len(n.Tokens) != 3 || n.Tokens[0].Kind != "disk" || n.Tokens[0].N != 1024 ||
		n.Tokens[1].Kind != "gpus" || n.Tokens[2].Kind != "licenses.blender" {
		t.Errorf("need %+v", n)
	}
	if got := n.And(d.Requirement); !strings.HasPrefix(got, `(arch == "amd64" && mem >= 1*GiB) && cpus_free >= 2 && mem_free >= 536870912 && tokens["disk"] >= 1024 && tokens["gpus"] >= 1`) {
		t.Errorf("requirement %s", got)
	}
}

func TestDefaults(t *testing.T) {
	d, err := Parse("/home/ann/jobs/frames.toml", []byte(`program = "render.gapp"`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Description{
		Name: "frames", Program: "render.gapp", Count: 1, CPUs: 1, Memory: 256 << 20,
		Runtime: time.Hour, OutputDir: "results-frames", SuccessExitCodes: []int{0},
		OnFailure: "fail", Network: "host", LostAfter: 5 * time.Minute,
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("parsed\n%+v\nwant\n%+v", d, want)
	}
	if n := d.Need(); n.Requirement() != "cpus_free >= 1 && mem_free >= 268435456" {
		t.Errorf("default need %s", n.Requirement())
	}
	d.Disk = 1<<20 + 1
	if n := d.Need(); len(n.Tokens) != 1 || n.Tokens[0].N != 2 {
		t.Errorf("disk of 1MiB+1 needs %+v", n.Tokens)
	}
	p := d.Expand(0)
	if p.ResultDir != "results-frames" || p.Args != nil || p.Env != nil {
		t.Errorf("single job's proc %+v", p)
	}
}

func TestExpand(t *testing.T) {
	d, err := Parse("render.toml", []byte(complete))
	if err != nil {
		t.Fatal(err)
	}
	p := d.Expand(42)
	want := Proc{
		Index:     42,
		Args:      []string{"--frame", "42", "--job", "render"},
		Env:       map[string]string{"QUALITY": "high", "FRAME": "42"},
		Inputs:    []string{"data/scene-42.blend", "common/lib.dat"},
		Outputs:   []string{"frame-42.png", "log/render.txt"},
		ResultDir: "results/render/42",
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("Expand(42) =\n%+v\nwant\n%+v", p, want)
	}
	// The description is not changed by expanding it.
	if d.Args[1] != "${INDEX}" || d.Env["FRAME"] != "${INDEX}" {
		t.Errorf("Expand changed the description: %+v", d)
	}
}

func TestRelativeTimes(t *testing.T) {
	src := []byte("program = \"x\"\nbegin = \"+2h\"\ndeadline = \"+1d\"\n")
	d, err := Parse("j.toml", src)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Begin.IsZero() || d.BeginIn != 2*time.Hour || d.DeadlineIn != 24*time.Hour {
		t.Errorf("unresolved: %v %v %v", d.Begin, d.BeginIn, d.DeadlineIn)
	}
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	d.Resolve(now)
	if !d.Begin.Equal(now.Add(2*time.Hour)) || !d.Deadline.Equal(now.Add(24*time.Hour)) || d.BeginIn != 0 || d.DeadlineIn != 0 {
		t.Errorf("resolved: %v %v", d.Begin, d.Deadline)
	}
	d, err = ParseAt("j.toml", src, now)
	if err != nil || !d.Begin.Equal(now.Add(2*time.Hour)) || !d.Deadline.Equal(now.Add(24*time.Hour)) {
		t.Errorf("ParseAt: %+v %v", d, err)
	}
	// ParseAt knows now: a deadline past, or before a relative begin.
	for _, tc := range []struct{ src, want string }{
		{"program = \"x\"\ndeadline = 2026-04-01T00:00:00Z\n", "j.toml:2: deadline: already past at the submission"},
		{"program = \"x\"\nbegin = \"+3d\"\ndeadline = 2026-05-02T00:00:00Z\n", "j.toml:3: deadline: not after begin"},
		{"program = \"x\"\nbegin = 2026-05-03T00:00:00Z\ndeadline = \"+1d\"\n", "j.toml:3: deadline: not after begin"},
	} {
		if _, err := ParseAt("j.toml", []byte(tc.src), now); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseAt(%q) = %v, want %q", tc.src, err, tc.want)
		}
		if _, err := Parse("j.toml", []byte(tc.src)); err != nil && strings.Contains(tc.src, "+") {
			t.Errorf("Parse(%q), which cannot tell, = %v", tc.src, err)
		}
	}
	if _, err := ParseAt("j.toml", src, time.Time{}); err == nil {
		t.Error("ParseAt took a zero now")
	}
}

func TestErrors(t *testing.T) {
	const p = "program = \"bin/x\"\n" // line 1; the key under test is on line 2
	for _, tc := range []struct{ src, want string }{
		// Decoding: syntax, unknown keys, types.
		{"program = \n", "j.toml:1: invalid TOML"},
		{p + "exectuable = \"a\"\n", `j.toml:2: exectuable: unknown key (did you mean "executable"?)`},
		{p + "count = \"10\"\n", "j.toml:2: count: want a whole number, not a string"},
		{p + "args = \"--x\"\n", "j.toml:2: args: want a list of strings"},
		{p + "cpus = 1.5\n", "j.toml:2: cpus: want a whole number"},
		{p + "memory = 512\n", "j.toml:2: memory: want a string"},
		// name, program, executable.
		{"name = \"Render\"\n" + p, "j.toml:1: name: \"Render\": write lower-case"},
		{"program = \"x\"\n", ""},
		{"count = 2\n", "j.toml: program: missing"},
		{p[:0] + "program = \"x\"\n", ""},
		{"program = \"/usr/bin/x\"\n", "j.toml:1: program: \"/usr/bin/x\": must be relative"},
		{"program = \"../x\"\n", "j.toml:1: program: \"../x\": must stay inside"},
		{"program = \"a/../../x\"\n", "j.toml:1: program: \"a/../../x\": must stay inside"},
		{"program = \"a//x\"\n", `j.toml:1: program: "a//x": write it as "a/x"`},
		{"program = \"bin/${INDEX}\"\n", ""}, // a file may be named so; no variables here
		{"program = \"C:x\"\n", "j.toml:1: program: \"C:x\": must be relative"},
		{"program = \"a\\\\b\"\n", "j.toml:1: program: \"a\\\\b\": holds a control character or a backslash"},
		{"program = \"app.gapp\"\nexecutable = \"run\"\n", "j.toml:2: executable: an app bundle runs its own"},
		{p + "executable = \"../run\"\n", "j.toml:2: executable: \"../run\": must stay inside"},
		// args, env.
		{p + "args = [\"${INDEX}\", \"${index}\"]\n", `j.toml:2: args[2]: "${index}" is not known`},
		{p + "args = [\"${INDEX\"]\n", `j.toml:2: args[1]: "${INDEX": a ${ without its }`},
		{p + "args = [\"a\\u0000b\"]\n", "j.toml:2: args[1]: holds a NUL byte"},
		{p + "env = { lower = \"x\" }\n", "j.toml:2: env.lower: not a variable name"},
		{p + "[env]\nA = \"1\"\nGRIDMGR_X = \"1\"\n", "j.toml:4: env.GRIDMGR_X: not a variable name"},
		{p + "[env]\nA = \"${HOME}\"\n", `j.toml:3: env.A: "${HOME}" is not known`},
		{p + "env = { A = 1 }\n", "j.toml:2: env: want a table of strings"},
		// Amounts.
		{p + "count = 0\n", "j.toml:2: count: must be between 1 and 100000, got 0"},
		{p + "count = 100001\n", "j.toml:2: count: must be between 1 and 100000"},
		{p + "cpus = 0\n", "j.toml:2: cpus: must be between 1 and 65536, got 0"},
		{p + "memory = \"12 parsecs\"\n", `j.toml:2: memory: "12 parsecs": unknown unit`},
		{p + "memory = \"1KiB\"\n", `j.toml:2: memory: "1KiB": must be between 1MiB and 1024TiB`},
		{p + "disk = \"\"\n", "j.toml:2: disk: empty: expected a number"},
		{p + "tokens = { cpus = 1 }\n", "j.toml:2: tokens.cpus: not a token kind"},
		{p + "tokens = { disk = 10 }\n", "j.toml:2: tokens.disk: not a token kind"},
		{p + "tokens = { gpus = 0 }\n", "j.toml:2: tokens.gpus: must be between 1 and"},
		{p + "[tokens]\ngpus = 1\n\"a b\" = 1\n", `j.toml:4: tokens.a b: not a token kind`},
		{p + "runtime = \"10\"\n", `j.toml:2: runtime: "10": missing unit`},
		{p + "runtime = \"8d\"\n", `j.toml:2: runtime: "8d": must be between 1s and 7d`},
		{p + "runtime = \"0s\"\n", `j.toml:2: runtime: "0s": must be between 1s and 7d`},
		// Expressions.
		{p + "requirement = 'cpu > 1'\n", "j.toml:2: requirement: undeclared reference to 'cpu' (did you mean 'cpus'?) (at column 1)"},
		{p + "requirement = 'cpus'\n", "j.toml:2: requirement: "},
		{p + "requirement = ''\n", "j.toml:2: requirement: empty"},
		{p + "rank = 'arch'\n", "j.toml:2: rank: a rank must be a number"},
		{p + "requirement = '''\ncpus > 1 &&\n  bogus'''\n", "j.toml:2: requirement: undeclared reference to 'bogus' (at line 2, column 3 of the expression)"},
		// Files.
		{p + "inputs = [\"a\", \"/etc/passwd\"]\n", `j.toml:2: inputs[2]: "/etc/passwd": must be relative to the job file's directory`},
		{p + "inputs = [\"../${INDEX}\"]\n", `j.toml:2: inputs[1]: "../${INDEX}": must stay inside`},
		{p + "inputs = [\"a/${JOB}\"]\n", `j.toml:2: inputs[1]: "${JOB}" is not known`},
		{p + "inputs = [\"a\", \"a\"]\n", `j.toml:2: inputs[2]: "a" is listed twice`},
		{p + "inputs = [\"./a\"]\n", `j.toml:2: inputs[1]: "./a": write it as "a"`},
		{p + "outputs = [\"out/a.png\"]\n", `j.toml:2: outputs[1]: "out/a.png": outputs are relative to the program's out/ directory already: write "a.png"`},
		{p + "outputs = [\"..\"]\n", `j.toml:2: outputs[1]: "..": must stay inside the program's out/ directory`},
		{p + "outputs = [\".\"]\n", `j.toml:2: outputs[1]: ".": names the directory itself`},
		{p + "count = 3\noutputs = [\"f-${INDEX}\", \"f-0\"]\n", `j.toml:3: outputs: "f-${INDEX}" and "f-0" are the same file for index 0`},
		{p + "outputs = [\"${NAME}\", \"j\"]\n", `j.toml:2: outputs: "${NAME}" and "j" are the same file for index 0`},
		{p + "output_dir = \"/tmp/r\"\n", `j.toml:2: output_dir: "/tmp/r": must be relative`},
		{p + "output_dir = \"r/${INDEX}\"\n", `j.toml:2: output_dir: "${INDEX}" is not known here`},
		{p + "output_dir = \"bin\"\n", `j.toml:2: output_dir: "bin" overlaps "bin/x"`},
		{p + "inputs = [\"r/a\"]\noutput_dir = \"r\"\n", `j.toml:3: output_dir: "r" overlaps "r/a"`},
		// Failures.
		{p + "max_retries = 101\n", "j.toml:2: max_retries: must be between 0 and 100"},
		{p + "max_retries = -1\n", "j.toml:2: max_retries: must be between 0 and 100"},
		{p + "success_exit_codes = []\n", "j.toml:2: success_exit_codes: empty"},
		{p + "success_exit_codes = [0, 256]\n", "j.toml:2: success_exit_codes: 256 is not an exit code"},
		{p + "success_exit_codes = [1, 1]\n", "j.toml:2: success_exit_codes: 1 is listed twice"},
		{p + "on_failure = \"retry\"\n", `j.toml:2: on_failure: "retry": "fail" (the default`},
		// Times.
		{p + "begin = 2026-12-01T02:00:00\n", "j.toml:2: begin: a date or time without its zone"},
		{p + "begin = 2026-12-01\n", "j.toml:2: begin: a date or time without its zone"},
		{p + "begin = \"tomorrow\"\n", `j.toml:2: begin: "tomorrow": give an RFC 3339 time`},
		{p + "begin = \"2026-12-01 02:00\"\n", `j.toml:2: begin: "2026-12-01 02:00": give an RFC 3339 time`},
		{p + "begin = 5\n", "j.toml:2: begin: give an RFC 3339 time"},
		{p + "begin = \"+2x\"\n", `j.toml:2: begin: "+2x": after + give a duration: unknown unit`},
		{p + "begin = \"+0s\"\n", `j.toml:2: begin: "+0s": after + give a duration above 0`},
		{p + "deadline = \"+400d\"\n", `j.toml:2: deadline: "+400d": after + give a duration above 0 and at most 366d`},
		{p + "begin = 2026-12-02T00:00:00Z\ndeadline = 2026-12-01T00:00:00Z\n", "j.toml:3: deadline: not after begin"},
		{p + "begin = \"+2h\"\ndeadline = \"+1h\"\n", "j.toml:3: deadline: not after begin"},
		// The rest.
		{p + "priority = 1001\n", "j.toml:2: priority: must be between -1000 and 1000"},
		{p + "network = \"bridge\"\n", `j.toml:2: network: "bridge": "host"`},
		{p + "lost_after = \"5s\"\n", `j.toml:2: lost_after: "5s": must be between 10s and 1d`},
	} {
		_, err := Parse("j.toml", []byte(tc.src))
		if tc.want == "" {
			if err != nil {
				t.Errorf("Parse(%q) = %v, want no error", tc.src, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q)\n = %v\nwant %q", tc.src, err, tc.want)
			continue
		}
		var es tomlpos.Errors
		if !asErrors(err, &es) {
			t.Errorf("Parse(%q) = %T, want tomlpos.Errors", tc.src, err)
		}
	}
}

func asErrors(err error, es *tomlpos.Errors) bool {
	e, ok := err.(tomlpos.Errors)
	*es = e
	return ok
}

// TestAllAtOnce: every problem of a file is reported, in the order of
// their lines, each naming the file, the line and the key.
func TestAllAtOnce(t *testing.T) {
	src := `name = "Bad Name"
program = "/abs"
count = 0
cpus = "two"
memory = "lots"
requirement = "nope >"
inputs = ["../x"]
outputs = ["${WHAT}"]
on_failure = "explode"
prioritty = 1
`
	_, err := Parse("j.toml", []byte(src))
	es, ok := err.(tomlpos.Errors)
	if !ok {
		t.Fatalf("error %T: %v", err, err)
	}
	want := []string{
		"j.toml:1: name:", "j.toml:2: program:", "j.toml:3: count:", "j.toml:4: cpus:",
		"j.toml:5: memory:", "j.toml:6: requirement:", "j.toml:7: inputs[1]:", "j.toml:8: outputs[1]:",
		"j.toml:9: on_failure:", "j.toml:10: prioritty: unknown key",
	}
	if len(es) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(es), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(es[i].Error(), w) {
			t.Errorf("error %d = %q, want it to start %q", i, es[i].Error(), w)
		}
	}
}

func TestLimits(t *testing.T) {
	p := "program = \"x\"\n"
	// The bounds themselves are accepted.
	for _, src := range []string{
		p + "count = 100000\ncpus = 65536\nmemory = \"1MiB\"\nruntime = \"7d\"\nlost_after = \"10s\"\nmax_retries = 100\npriority = -1000\n",
		p + "count = 1\nmemory = \"1024TiB\"\nruntime = \"1s\"\nlost_after = \"1d\"\npriority = 1000\nsuccess_exit_codes = [255]\n",
		p + "begin = \"+366d\"\n",
	} {
		if _, err := Parse("j.toml", []byte(src)); err != nil {
			t.Errorf("Parse(%q) = %v", src, err)
		}
	}
	// A file too large is refused whole.
	big := p + "# " + strings.Repeat("x", MaxFileSize) + "\n"
	if _, err := Parse("j.toml", []byte(big)); err == nil || !strings.Contains(err.Error(), "j.toml: file is too large") {
		t.Errorf("large file: %v", err)
	}
	if _, err := Parse("j.toml", []byte{0xff, '='}); err == nil || !strings.Contains(err.Error(), "not UTF-8") {
		t.Errorf("binary file: %v", err)
	}
	// Too many words, paths, variables.
	many := func(key string, n int, f func(i int) string) string {
		var b strings.Builder
		b.WriteString(p + key + " = [")
		for i := range n {
			b.WriteString(f(i) + ",")
		}
		b.WriteString("]\n")
		return b.String()
	}
	for _, tc := range []struct{ src, want string }{
		{many("args", maxArgs+1, func(int) string { return `"a"` }), "j.toml:2: args: at most 256 words"},
		{many("inputs", maxList+1, func(i int) string { return `"f` + strings.Repeat("x", i%7) + `"` }), "j.toml:2: inputs: at most 1000 paths"},
		{many("success_exit_codes", 257, func(i int) string { return "0" }), "j.toml:2: success_exit_codes: at most 256 codes"},
		{p + "args = [\"" + strings.Repeat("a", maxValue+1) + "\"]\n", "j.toml:2: args[1]: longer than 65536 bytes"},
		{p + "inputs = [\"" + strings.Repeat("a", maxPath+1) + "\"]\n", "j.toml:2: inputs[1]: \"aaa"},
	} {
		if _, err := Parse("j.toml", []byte(tc.src)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.60q…: %.300v, want %q", tc.src, err, tc.want)
		}
	}
	// At most tomlpos.MaxErrors problems are reported.
	var b strings.Builder
	b.WriteString(p + "inputs = [\n")
	for i := range 300 {
		b.WriteString("\"../bad" + strconv.Itoa(i) + "\",\n")
	}
	b.WriteString("]\n")
	if _, err := Parse("j.toml", []byte(b.String())); err == nil || len(err.(tomlpos.Errors)) != tomlpos.MaxErrors {
		t.Errorf("300 bad inputs: %d errors", len(err.(tomlpos.Errors)))
	}
}

func TestDefaultName(t *testing.T) {
	for file, want := range map[string]string{
		"render.toml":          "render",
		"/a/b/frames-2.toml":   "frames-2",
		"job":                  "job",
		"dir/Weird Name.toml":  "",
		"dir/2render.toml":     "",
		"C:\\jobs\\x.toml":     "",
		"":                     "",
		"jobs/a/render.toml":   "render",
		"jobs/a/render.toml.x": "",
	} {
		d, err := Parse(file, []byte(`program = "x"`))
		switch {
		case want == "" && (err == nil || !strings.Contains(err.Error(), ": name: missing, and the file's name")):
			t.Errorf("Parse(%q) = %v, want the name missing", file, err)
		case want != "" && (err != nil || d.Name != want):
			t.Errorf("Parse(%q) = %v, want name %q", file, err, want)
		}
	}
}
