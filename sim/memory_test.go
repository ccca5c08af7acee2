package sim

import (
	"errors"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMemoryModel measures the largest live heap of the common scenario
// (a collection every virtual second: Options.TraceHeap) and compares it
// with the model. GRIDMGR_SIM_MEASURE=1000,10000,100000 measures those
// sizes instead (or a scenario file: scenarios/load-10k.toml) and prints
// what the model's constants are fitted to.
func TestMemoryModel(t *testing.T) {
	runs := []string{"1000", "10000"}
	env := os.Getenv("GRIDMGR_SIM_MEASURE")
	measure := env != ""
	if measure {
		runs = strings.Split(env, ",")
	}
	for _, what := range runs {
		var sc *Scenario
		if strings.HasSuffix(what, ".toml") {
			sc = parseFile(t, what)
		} else {
			n, err := strconv.Atoi(what)
			if err != nil {
				t.Fatal(err)
			}
			// The common scenario; at rest for 1s only by default (the
			// heap does not grow at rest, and -race makes 10s cost).
			rest := time.Second
			if measure {
				rest = 10 * time.Second
			}
			sc = Quick(QuickOptions{Managers: n, Fanout: 16, Shape: "balanced", Kill: 1, Regions: 1, Seed: 1, Rest: rest})
		}
		est := EstimateMemory(sc)
		res, err := Run(sc, Options{TraceHeap: true, MeasureHeap: true})
		if err != nil {
			t.Fatal(err)
		}
		n := sc.Grid.Managers
		off := float64(est.Live)/float64(res.PeakLive) - 1
		t.Logf("%s: %d managers, %d requests: peak live %d B (%.0f B/manager), live at the end %d B; model %d B (%+.1f%%)",
			what, n, est.Requests, res.PeakLive, float64(res.PeakLive)/float64(n), res.LiveHeap, est.Live, 100*off)
		// The stated error (EstimateMemory's doc).
		if math.Abs(off) > 0.10 {
			t.Errorf("%s: the model says %d B, %+.1f%% off the %d B measured: more than 10%%", what, est.Live, 100*off, res.PeakLive)
		}
	}
}

// TestMaxLiveStops: a run whose live heap outgrows Options.MaxLive stops
// with ErrMemory, saying where, instead of going on.
func TestMaxLiveStops(t *testing.T) {
	sc := Quick(QuickOptions{Managers: 500, Fanout: 8, Shape: "balanced", Kill: 1, Seed: 1, Rest: 5 * time.Second})
	_, err := Run(sc, Options{MaxLive: 1 << 20, TraceHeap: true})
	if !errors.Is(err, ErrMemory) || !strings.Contains(err.Error(), "the live heap is ") {
		t.Fatalf("got %v, want ErrMemory", err)
	}
	t.Log(err)
}

// A sweep needs what its largest run needs; a sweep of sizes does not
// run the scenario's own size.
func TestEstimateSweep(t *testing.T) {
	sc := Quick(QuickOptions{Managers: 50_000, Fanout: 16, Shape: "balanced", Kill: 1, Regions: 1, Seed: 1})
	own := EstimateMemory(sc)
	if got := EstimateSweep(sc, "", nil); got != own {
		t.Errorf("no sweep: %+v, want %+v", got, own)
	}
	small, _ := Vary(sc, "managers", 1000)
	if got, want := EstimateSweep(sc, "managers", []float64{100, 1000}), EstimateMemory(small); got != want {
		t.Errorf("sizes below the scenario's: %+v, want the largest of them %+v", got, want)
	}
	big, _ := Vary(sc, "managers", 200_000)
	if got, want := EstimateSweep(sc, "managers", []float64{1000, 200_000, 0}), EstimateMemory(big); got != want {
		t.Errorf("a larger size: %+v, want %+v", got, want)
	}
	if got := EstimateSweep(sc, "percent", []float64{1, 50}); got != own {
		t.Errorf("percent: %+v, want the scenario's own %+v", got, own)
	}
}

// TestHeapLimit checks the room the docs promise the collector: half the
// live heap, at least 512 MiB and at most 2.5 GiB, and the runtime's own.
func TestHeapLimit(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct{ live, room uint64 }{
		{100 * mib, 512 * mib},
		{1024 * mib, 512 * mib},
		{2048 * mib, 1024 * mib},
		{5120 * mib, 2560 * mib},
		{8192 * mib, 2560 * mib},
	} {
		if got := heapLimit(c.live); got != c.live+c.room+heapOverhead {
			t.Errorf("heapLimit(%d MiB) = %d MiB, want %d MiB of room and %d MiB for the runtime", c.live/mib, got/mib, c.room/mib, heapOverhead/mib)
		}
	}
}
