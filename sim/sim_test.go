package sim

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func parseFile(t *testing.T, path string) *Scenario {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Parse(path, data)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func csvOf(t *testing.T, res *Result) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteCSV(&b, res.Figures); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// figure returns the mean of the metric of action idx.
func figure(t *testing.T, res *Result, idx int, metric string) Figure {
	t.Helper()
	for _, f := range res.Figures {
		if f.Action == idx && f.Metric == metric {
			return f
		}
	}
	t.Fatalf("no figure %q for action %d", metric, idx)
	return Figure{}
}

// TestDeterministic: the same scenario and seed give the same figures,
// byte for byte, over a run that exercises every kind of action (WAN
// jitter and loss, streams, kills, partition, churn, admin --all,
// rewiring); another seed gives others.
func TestDeterministic(t *testing.T) {
	sc := parseFile(t, "testdata/everything.toml")
	runs := make([]string, 2)
	for i := range runs {
		sc := parseFile(t, "testdata/everything.toml")
		res, err := Run(sc, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Violations) > 0 {
			t.Fatalf("invariants broken: %v", res.Violations)
		}
		runs[i] = csvOf(t, res)
	}
	if runs[0] != runs[1] {
		t.Fatalf("two runs of one seed differ:\n%s\n---\n%s", runs[0], runs[1])
	}
	sc.Seed++
	res, err := Run(sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if csvOf(t, res) == runs[0] {
		t.Fatal("another seed gave the same figures: the seed is not used")
	}
	t.Logf("\n%s", runs[0])
}

// TestFiguresMatchModel: on a grid without jitter or loss, what the code
// does is what the analytic model says: the whole-grid query visits every
// manager with 2 × (N − 1) messages in the phased walk's critical-path
// time, heartbeats cost 2 × relations / interval, and killing a leaf's
// superior heals within misses × interval plus a few round trips.
func TestFiguresMatchModel(t *testing.T) {
	sc := Quick(QuickOptions{Managers: 3000, Fanout: 8, Shape: "balanced", Kill: 2, Regions: 3, Seed: 5, Rest: 5 * 1e9})
	res, err := Run(sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) > 0 {
		t.Fatalf("invariants broken: %v", res.Violations)
	}
	if f := figure(t, res, 2, "managers visited"); f.Mean != 3000 {
		t.Errorf("whole-grid query visited %v managers, want 3000", f.Mean)
	}
	if f := figure(t, res, 2, "mesh messages per query"); f.Mean != f.Model {
		t.Errorf("whole-grid query took %v messages, model %v", f.Mean, f.Model)
	}
	if f := figure(t, res, 2, "query latency"); f.Mean < f.Model || f.Mean > f.Model*1.05+1 {
		t.Errorf("query latency %vms, model %vms", f.Mean, f.Model)
	}
	if f := figure(t, res, 3, "healed"); f.Mean != 1 {
		t.Errorf("not healed after the kill")
	}
	if f := figure(t, res, 3, "reconverge time"); f.Mean > f.Model+1 {
		t.Errorf("reconverged in %vs, model %vs", f.Mean, f.Model)
	}
	if f := figure(t, res, 4, "heartbeats per manager per second"); f.Mean < f.Model*0.98 || f.Mean > f.Model*1.02 {
		t.Errorf("heartbeats %v per manager per second, model %v", f.Mean, f.Model)
	}
}

// TestShippedScenariosParse: every scenario under scenarios/ is valid.
func TestShippedScenariosParse(t *testing.T) {
	files, _ := filepath.Glob("scenarios/*.toml")
	if len(files) < 3 {
		t.Fatalf("want the three shipped scenarios, found %v", files)
	}
	for _, f := range files {
		parseFile(t, f)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[grid]\nmanagers = 0\n", "x.toml:2: grid.managers: must be between 1"},
		{"[grid]\nmanagrs = 10\n", `x.toml:2: grid.managrs: unknown key (did you mean "managers"?)`},
		{"[grid]\nmanagers = 10\n[[action]]\ndo = \"qury\"\n", `x.toml:4: action[1].do: unknown action "qury" (did you mean "query"?)`},
		{"[grid]\nmanagers = 10\n[[action]]\ndo = \"kill\"\n", "kill takes exactly one of name, subtree, region, percent"},
		{"[grid]\nmanagers = 10\n[[action]]\ndo = \"kill\"\nname = \"m10\"\n", `x.toml:5: action[1].name: "m10" is not a manager: managers are named m0 to m9`},
		{"[grid]\nmanagers = 10\n[[action]]\ndo = \"rest\"\nfor = \"1s\"\nrate = 5\n", "x.toml:6: action[1].rate: rest does not take rate"},
		{"[grid]\nmanagers = 10\n[[action]]\ndo = \"query\"\nbudget = \"soon\"\n", `"soon" is not a duration`},
		{"[grid]\nmanagers = 10\n[network]\nregions = [\"eu\"]\n[[action]]\ndo = \"partition\"\nregion = \"us\"\n", `action[1].region: no region "us"`},
		{"[grid]\nmanagers = 10\n[grid.config]\n\"heartbeat.interval\" = \"fast\"\n", "grid.config.heartbeat.interval"},
		{"[grid\n", "x.toml:2: invalid TOML"},
		{"[grid]\nmanagers = 10\n[[action]]\ndo = \"query\"\nrate = 10\n", "rate and for go together"},
	} {
		_, err := Parse("x.toml", []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %s", tc.src, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("scenarios/*.toml")
	more, _ := filepath.Glob("testdata/*.toml")
	for _, p := range append(files, more...) {
		data, _ := os.ReadFile(p)
		f.Add(data)
	}
	f.Add([]byte("[grid]\nmanagers = 3\n[[action]]\ndo = \"query\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := Parse("fuzz.toml", data)
		if err != nil {
			if strings.Contains(err.Error(), "\n") && !strings.Contains(err.Error(), "fuzz.toml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		// A valid scenario must be one Run accepts: run a tiny one.
		if sc.Grid.Managers <= 50 && len(sc.Actions) <= 3 {
			for _, a := range sc.Actions {
				if a.For.D() > 1e10 || a.Rate > 100 || a.Count > 100 || a.Within.D() > 1e10 || a.At.D() > 1e10 || a.Budget.D() > 1e10 {
					return
				}
			}
			if _, err := Run(sc, Options{}); err != nil {
				t.Fatalf("valid scenario failed to run: %v", err)
			}
		}
	})
}

// TestKillsAndRestarts: a subtree, a region and one named manager killed
// in turn, each healing; the restarted ones settle again.
func TestKillsAndRestarts(t *testing.T) {
	src := `
seed = 9
[grid]
managers = 600
fanout = 5
[network]
regions = ["a", "b"]
[[action]]
do = "settle"
[[action]]
do = "kill"
subtree = "m3"
[[action]]
do = "restart"
[[action]]
do = "kill"
region = "b"
[[action]]
do = "kill"
name = "m1"
[[action]]
do = "restart"
name = "m1"
[[action]]
do = "query"
requirement = "true"
from = "root"
want = 1000
`
	sc, err := Parse("kills.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The one note allowed: the root's answer names its two dead
	// inferiors (it remembers them for a while) as missing.
	if len(res.Violations) > 0 || len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "did not answer: down") {
		t.Fatalf("violations %v, notes %v", res.Violations, res.Notes)
	}
	for _, idx := range []int{2, 3, 4, 5, 6} {
		if f := figure(t, res, idx, "healed"); f.Mean != 1 {
			t.Errorf("action %d did not heal", idx)
		}
	}
	// Fan-out 5, 600 managers: m1..m5, then m6..m30, m31..m155, and
	// m156..m599 under m31..m119. m3's subtree: 1 + 5 + 25 + 125 = 156.
	if f := figure(t, res, 2, "managers killed"); f.Mean != 156 {
		t.Errorf("subtree of m3: %v killed, want 156", f.Mean)
	}
	// The root's inferiors m1..m5 are dealt to regions a, b in turn:
	// region b holds the subtrees of m2 (156) and m4 (1 + 5 + 25 + 69).
	if f := figure(t, res, 4, "managers killed"); f.Mean != 256 {
		t.Errorf("region b: %v killed, want 256", f.Mean)
	}
	// Then 600 − 256 = 344 managers live; the query from the root sees
	// them all, and says m2 and m4 are missing.
	if f := figure(t, res, 7, "managers visited"); f.Mean != 344 {
		t.Errorf("query visited %v, want 344", f.Mean)
	}
	if f := figure(t, res, 7, "partial answers"); f.Mean != 1 {
		t.Errorf("the answer should be partial (m2 and m4 down), got %v", f.Mean)
	}
}

// TestModelsFollowTheWalk: a query limited by up and down visits the
// managers its model says, with the model's messages and latency; an
// admin --all from a leaf floods up and down in the model's time; a
// hierarchy with second superiors has no model (the walk climbs to
// both), rather than the tree's.
func TestModelsFollowTheWalk(t *testing.T) {
	src := `
seed = 4
[grid]
managers = 800
fanout = 6
[network]
regions = ["a", "b", "c"]
[[action]]
do = "settle"
[[action]]
do = "query"
from = "leaf"
want = 1000000
up = 1
down = 2
count = 5
[[action]]
do = "query"
from = "m300"
want = 1000000
up = 2
count = 1
[[action]]
do = "query"
from = "leaf"
want = 1000000
down = 0
count = 1
[[action]]
do = "admin"
from = "leaf"
command = "status"
all = true
`
	sc, err := Parse("limited.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(sc, Options{})
	if err != nil || len(res.Violations) > 0 {
		t.Fatalf("%v %v", err, res.Violations)
	}
	if len(res.Notes) > 0 {
		t.Errorf("notes: %v", res.Notes)
	}
	for _, idx := range []int{2, 3, 4} {
		v := figure(t, res, idx, "managers visited")
		m := figure(t, res, idx, "mesh messages per query")
		l := figure(t, res, idx, "query latency")
		if math.IsNaN(v.Model) || v.Mean != v.Model || m.Mean != m.Model || v.Mean >= 800 {
			t.Errorf("action %d: visited %v (model %v), messages %v (model %v)", idx, v.Mean, v.Model, m.Mean, m.Model)
		}
		if l.Mean < l.Model || l.Mean > l.Model*1.05+1 {
			t.Errorf("action %d: latency %vms, model %vms", idx, l.Mean, l.Model)
		}
	}
	// down = 0, up = 255 from a leaf: its ancestors only.
	if v := figure(t, res, 4, "managers visited"); v.Mean > 6 {
		t.Errorf("down = 0 visited %v managers: more than the leaf and its ancestors", v.Mean)
	}
	a := figure(t, res, 5, "answered in")
	if got := figure(t, res, 5, "managers that answered"); got.Mean != 800 || got.Model != 800 {
		t.Errorf("--all from a leaf: %v answered, model %v", got.Mean, got.Model)
	}
	if a.Mean < a.Model || a.Mean > a.Model*1.05+1 {
		t.Errorf("--all from a leaf answered in %vms, model %vms", a.Mean, a.Model)
	}

	// Second superiors: no model.
	sc, _ = Parse("dag.toml", []byte(strings.Replace(src, "fanout = 6", "fanout = 6\nsecond_superior = 0.3", 1)))
	res, err = Run(sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []Figure{figure(t, res, 2, "query latency"), figure(t, res, 2, "managers visited"), figure(t, res, 5, "answered in")} {
		if !math.IsNaN(f.Model) {
			t.Errorf("with second superiors, %s has a model (%v)", f.Metric, f.Model)
		}
	}
}

// TestRejoinWithinModel: after a partition heals, the managers cut off
// rejoin within the model's bound (their next redial after the heal),
// whether the cut was shorter than the failure detector's span, or
// lasted long enough for one redial, or several, to hang in it.
func TestRejoinWithinModel(t *testing.T) {
	for _, wait := range []string{"1s", "5s", "30s"} {
		src := `
seed = 6
[grid]
managers = 300
fanout = 5
[network]
regions = ["a", "b"]
jitter = 0.1
[[action]]
do = "settle"
[[action]]
do = "partition"
region = "b"
within = "1ms"
[[action]]
do = "wait"
for = "` + wait + `"
[[action]]
do = "heal"
`
		sc, err := Parse("cut.toml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(sc, Options{})
		if err != nil || len(res.Violations) > 0 {
			t.Fatalf("%v %v", err, res.Violations)
		}
		f := figure(t, res, 4, "rejoin time")
		if h := figure(t, res, 4, "healed"); h.Mean != 1 || f.Mean > f.Model {
			t.Errorf("cut + %s: rejoined in %vs (healed %v), bound %vs; notes %v", wait, f.Mean, h.Mean, f.Model, res.Notes)
		}
		t.Logf("cut + %s: rejoin %vs, bound %vs", wait, f.Mean, f.Model)
	}
}
