package jobs

import (
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/internal/tomlpos"
)

var flowNow = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

const goodFlow = `name = "analysis"

[nodes.prepare]
job = "prepare/job.toml"
retries = 2
pre = ["scripts/fetch.sh", "--quick"]

[nodes.compute]
after = ["prepare"]
program = "bin/compute"
count = 50
args = ["${INDEX}"]
outputs = ["part-${INDEX}.txt"]
begin = "+1h"

[nodes.gather]
after = ["compute"]
job = "gather.toml"
post = ["scripts/check.sh"]
`

func TestParseFlow(t *testing.T) {
	f, err := ParseFlow("flow.toml", []byte(goodFlow), flowNow)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range f.Nodes {
		names = append(names, n.Name)
	}
	if f.Name != "analysis" || strings.Join(names, ",") != "prepare,compute,gather" {
		t.Fatalf("flow %q nodes %v", f.Name, names)
	}
	p, c, g := f.Nodes[0], f.Nodes[1], f.Nodes[2]
	if p.JobFile != "prepare/job.toml" || p.JobLine != 4 || p.Retries != 2 || strings.Join(p.Pre, " ") != "scripts/fetch.sh --quick" || p.Job != nil {
		t.Fatalf("prepare %+v", p)
	}
	if c.Job == nil || c.Job.Name != "compute" || c.Job.Count != 50 || c.Retries != -1 || !c.Job.Begin.Equal(flowNow.Add(time.Hour)) {
		t.Fatalf("compute %+v %+v", c, c.Job)
	}
	if g.JobFile != "gather.toml" || strings.Join(g.Post, " ") != "scripts/check.sh" || strings.Join(g.After, ",") != "compute" {
		t.Fatalf("gather %+v", g)
	}
	if e := f.Err(g, "open gather.toml: no such file").Error(); e != "flow.toml:18: nodes.gather.job: open gather.toml: no such file" {
		t.Fatalf("Err: %q", e)
	}
}

func TestParseFlowErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[nodes.a]\njob = \"a.toml\"\nafter = [\"b\"]\n[nodes.b]\njob = \"b.toml\"\nafter = [\"c\"]\n[nodes.c]\njob = \"c.toml\"\nafter = [\"a\"]\n",
			"flow.toml:9: nodes.c.after: a cycle: c → b → a → c"},
		{"[nodes.a]\njob = \"a.toml\"\nafter = [\"prep\"]\n[nodes.prepare]\njob = \"p.toml\"\n",
			`flow.toml:3: nodes.a.after: "prep" is not a node of this workflow (did you mean "prepare"?)`},
		{"[nodes.a]\njob = \"a.toml\"\nafter = [\"a\"]\n", "flow.toml:3: nodes.a.after: a node cannot come after itself"},
		{"[nodes.a]\njob = \"a.toml\"\nprogram = \"x\"\n", "flow.toml:2: nodes.a.job: give either job"},
		{"[nodes.a]\nafter = []\n", "flow.toml:1: nodes.a: no job"},
		{"[nodes.a]\njob = \"/etc/a.toml\"\n", "flow.toml:2: nodes.a.job: \"/etc/a.toml\": must be relative to the workflow file's directory"},
		{"[nodes.a]\nprogram = \"x\"\ncpus = 0\n", "flow.toml:3: nodes.a.cpus: must be between 1"},
		{"[nodes.a]\nprogram = \"x\"\ncpuz = 2\n", "flow.toml:3: nodes.a.cpuz: unknown key (did you mean \"cpus\"?)"},
		{"[nodes.a]\njob = \"a.toml\"\nretries = 1000\n", "flow.toml:3: nodes.a.retries: must be between 0 and 100"},
		{"[nodes.a]\njob = \"a.toml\"\npre = [\"../x.sh\"]\n", "flow.toml:3: nodes.a.pre: \"../x.sh\": must stay inside the workflow file's directory"},
		{"[nodes.a]\njob = \"a.toml\"\npost = []\n", "flow.toml:3: nodes.a.post: empty"},
		{"[nodes.Bad]\njob = \"a.toml\"\n", "flow.toml:1: nodes.Bad: \"Bad\" is not a node name"},
		{"name = \"x\"\n", "flow.toml: nodes: no nodes"},
		{"nodes = 3\n", "flow.toml:1: nodes: want a table"},
		{"[nodes.a]\njob = \"a.toml\"\n[nodes.a.env]\nX = 1\n", "flow.toml:4: nodes.a.env: want a table of strings"},
		{"[nodes.a\n", "flow.toml:1: invalid TOML"},
	} {
		_, err := ParseFlow("flow.toml", []byte(tc.src), flowNow)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %s", tc.src, err, tc.want)
		}
	}
}

// FuzzParseFlow: any bytes are a workflow or errors naming the file and
// never a panic; an accepted workflow has known, acyclic dependencies, in
// order, and paths inside its directory.
func FuzzParseFlow(f *testing.F) {
	for _, s := range []string{goodFlow, "[nodes.a]\njob = \"a.toml\"\nafter = [\"a\"]\n", "[nodes.a]\nprogram = \"x\"\n[nodes.b]\nafter=[\"a\"]\nprogram=\"y\"\n",
		"nodes = { a = { job = \"x\" }, b = { job = \"y\", after = [\"a\"] } }\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fl, err := ParseFlow("flow.toml", data, flowNow)
		if err != nil {
			es, ok := err.(tomlpos.Errors)
			if !ok || len(es) == 0 {
				t.Fatalf("error %T: %v", err, err)
			}
			for _, e := range es {
				if !strings.HasPrefix(e.Error(), "flow.toml") {
					t.Fatalf("an error does not name the file: %q", e.Error())
				}
			}
			return
		}
		seen := map[string]bool{}
		for _, n := range fl.Nodes {
			for _, a := range n.After {
				if !seen[a] {
					t.Fatalf("node %s comes before %s, which it is after", n.Name, a)
				}
			}
			seen[n.Name] = true
			if (n.Job == nil) == (n.JobFile == "") {
				t.Fatalf("node %s: job file %q and inline %v", n.Name, n.JobFile, n.Job != nil)
			}
			if n.JobFile != "" && checkPath(n.JobFile, false) != "" {
				t.Fatalf("job file %q", n.JobFile)
			}
			for _, c := range [][]string{n.Pre, n.Post} {
				if len(c) > 0 && checkPath(c[0], false) != "" {
					t.Fatalf("command %q", c)
				}
			}
		}
	})
}
