package sim

import (
	"os"
	"testing"
	"time"
)

// TestPlots draws a small run's plots and a sweep's, and checks they are
// SVG files with content. GRIDMGR_PLOT_PNG=DIR draws PNGs there instead,
// to look at.
func TestPlots(t *testing.T) {
	dir := t.TempDir()
	if d := os.Getenv("GRIDMGR_PLOT_PNG"); d != "" {
		dir, plotExt = d, ".png"
		defer func() { plotExt = ".svg" }()
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
}
