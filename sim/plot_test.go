package sim

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestPlots draws a small run's plots and a sweep's, and checks they are
// SVG files with content. GRIDMGR_PLOT_DIR=DIR draws them there, to look
// at.
func TestPlots(t *testing.T) {
	dir := t.TempDir()
	if d := os.Getenv("GRIDMGR_PLOT_DIR"); d != "" {
		dir = d
	}
	var points []SweepPoint
	for _, n := range []int{100, 300, 1000} {
		sc := Quick(QuickOptions{Managers: n, Fanout: 8, Shape: "balanced", Kill: 2, Regions: 3, Seed: 1, Rest: 2 * time.Second})
		sc.Actions = append(sc.Actions, Action{Do: "query", Requirement: "cpus_free >= 1", Want: 3, Rate: 50, For: Duration(2 * time.Second)})
		sc.Defaults()
		res, err := Run(sc, Options{})
		if err != nil {
			t.Fatal(err)
		}
		points = append(points, SweepPoint{X: float64(n), Figures: res.Figures})
		if n == 1000 {
			names, err := WritePlots(dir, res)
			if err != nil {
				t.Fatal(err)
			}
			if len(names) != 3 {
				t.Errorf("plots %v, want the latency CDF, messages and managers up", names)
			}
		}
	}
	names, err := WriteSweepPlots(dir, "managers", true, points)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 4 {
		t.Errorf("sweep plots %v: want one per figure that varies", names)
	}
	for _, n := range names {
		data, err := os.ReadFile(dir + "/" + n)
		if err != nil || len(data) < 1000 {
			t.Errorf("%s: %d bytes, %v", n, len(data), err)
		}
		if plotExt == ".svg" && string(data[:5]) != "<?xml" && string(data[:4]) != "<svg" {
			t.Errorf("%s is not SVG: %q", n, data[:20])
		}
	}
	t.Log(names)

	// A partition: the managers-up plot shows those cut off, not only
	// those running (a flat line through a cut told nothing).
	cutSc, err := Parse("cut.toml", []byte(`
[grid]
managers = 200
[network]
regions = ["a", "b"]
[[action]]
do = "settle"
[[action]]
do = "wait"
for = "2s"
[[action]]
do = "partition"
region = "b"
[[action]]
do = "heal"
[[action]]
do = "wait"
for = "3s"
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(cutSc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cutDir := filepath.Join(dir, "cut")
	os.MkdirAll(cutDir, 0o755)
	if _, err := WritePlots(cutDir, res); err != nil {
		t.Fatal(err)
	}
	if plotExt == ".svg" {
		data, _ := os.ReadFile(filepath.Join(cutDir, "managers-up.svg"))
		if !strings.Contains(string(data), "not cut off") {
			t.Error("managers-up.svg has no line of the managers not cut off")
		}
		// Ticks as numbers are written, never a float's digits.
		for _, n := range names {
			data, _ := os.ReadFile(filepath.Join(dir, n))
			if regexp.MustCompile(`>-?[0-9]+\.00<`).Match(data) {
				t.Errorf("%s: a tick reads like %q", n, regexp.MustCompile(`>-?[0-9]+\.00<`).Find(data))
			}
		}
	}
}

func TestTickLabels(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		si   bool
		want string
	}{
		{500000, true, "500k"}, {1.5e6, true, "1.5M"}, {0, true, "0"}, {2500, true, "2.5k"},
		{20, false, "20"}, {0.30000000000000004, false, "0.3"}, {5000, false, "5000"}, {1e9, true, "1G"},
	} {
		if got := tickLabel(tc.v, tc.si); got != tc.want {
			t.Errorf("tickLabel(%v, %v) = %q, want %q", tc.v, tc.si, got, tc.want)
		}
	}
}
