package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/node/render"
	"github.com/gridmgr/gridmgr/sim"
)

func cmdSim(c *cli, args []string) error {
	fs := c.newFlags("sim", "[SCENARIO.toml] [flags]",
		"Simulate a grid in this process: the production manager code, thousands to a\n"+
			"million managers, over a simulated network with a virtual clock. A run is\n"+
			"deterministic from its seed. It prints progress on stderr every few seconds\n"+
			"(--quiet: only a last line), then a table of figures; --out DIR also writes\n"+
			"figures.csv and SVG plots there.\n\n"+
			"Before it starts it estimates the memory the run needs (about 8 KB per\n"+
			"manager, measured) and refuses a run that the memory available\n"+
			"(MemAvailable in /proc/meminfo) cannot hold. On Linux, where the kernel\n"+
			"gives transparent huge pages only on request (its \"madvise\" mode), it\n"+
			"asks for them for its heap: a large run spends less time on TLB misses.\n\n"+
			"Without a scenario file it runs the common case: build a tree of --managers\n"+
			"with --fanout, one whole-grid query from a leaf, kill --kill percent at\n"+
			"random and wait until the tree has healed, then measure the grid at rest.\n"+
			"Scenario files (grid, hosts, network model, timeline of actions) are\n"+
			"documented with examples in sim/scenarios/README.md.\n\n"+
			"--sweep runs the scenario once per value, e.g. --sweep managers=1k,10k,100k,\n"+
			"and plots each figure against it beside the analytic model.")
	managers := countVar(fs, "managers", 0, 1, sim.MaxManagers, "managers in the grid (default 10000 without a file; with a file, overrides grid.managers)")
	fanout := countVar(fs, "fanout", 16, 1, 10000, "inferiors per manager (no file)")
	shape := fs.String("shape", "balanced", "balanced or random (no file)")
	kill := fs.Float64("kill", 1, "percent of managers killed at once after the query (no file)")
	regions := countVar(fs, "regions", 1, 1, 100, "regions the managers are spread over, 100ms apart (no file)")
	rest := fs.duration("rest", 10*time.Second, 0, time.Hour, "how long to measure the grid at rest at the end (no file)")
	seed := fs.Uint64("seed", 0, "random seed (default: the file's, or 1)")
	out := fs.String("out", "", "directory to write figures.csv and the SVG plots to (created if missing)")
	sweep := fs.String("sweep", "", "run once per value and plot the figures against it: managers=1k,10k,... or percent=1,5,10")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr, only the last one")
	metavars["managers"], metavars["fanout"], metavars["kill"], metavars["regions"] = "N", "N", "PERCENT", "N"
	metavars["seed"], metavars["out"], metavars["sweep"], metavars["shape"] = "N", "DIR", "PARAM=V1,V2,…", "SHAPE"
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var sc *sim.Scenario
	if len(pos) == 1 {
		for _, f := range []string{"fanout", "shape", "kill", "regions", "rest"} {
			if set[f] {
				return usageErr("--%s shapes the scenario run without a file; with %s, change the file instead\n%s", f, pos[0], fs.seeHelp())
			}
		}
		data, err := os.ReadFile(pos[0])
		if err != nil {
			return usageErr("cannot read the scenario: %s", plainError(err))
		}
		if sc, err = sim.Parse(pos[0], data); err != nil {
			return usageErr("%s", err)
		}
		if set["managers"] {
			if *managers < 1 || *managers > sim.MaxManagers {
				return usageErr("--managers must be between 1 and %d (the largest grid measured), got %d", sim.MaxManagers, *managers)
			}
			sc.Grid.Managers = *managers
		}
	} else {
		n := *managers
		if !set["managers"] {
			n = 10000
		}
		switch {
		case n < 1 || n > sim.MaxManagers:
			return usageErr("--managers must be between 1 and %d (the largest grid measured), got %d", sim.MaxManagers, n)
		case *fanout < 1 || *fanout > 10000:
			return usageErr("--fanout must be between 1 and 10000, got %d", *fanout)
		case *shape != "balanced" && *shape != "random":
			return usageErr("--shape must be balanced or random, got %q", text.QuoteShort(*shape))
		case !(*kill >= 0 && *kill <= 100):
			return usageErr("--kill must be a percent between 0 and 100, got %v", *kill)
		case *regions < 1 || *regions > 100:
			return usageErr("--regions must be between 1 and 100, got %d", *regions)
		case *rest < 0 || *rest > time.Hour:
			return usageErr("--rest must be between 0 and 1h, got %v", *rest)
		}
		sc = sim.Quick(sim.QuickOptions{Managers: n, Fanout: *fanout, Shape: *shape, Kill: *kill, Regions: *regions, Seed: 1, Rest: *rest})
	}
	if set["seed"] {
		sc.Seed = *seed
	}
	var param string
	var values []float64
	if *sweep != "" {
		if param, values, err = sim.ParseSweep(*sweep); err != nil {
			return usageErr("--sweep: %s", err)
		}
		if param == "managers" && set["managers"] {
			return usageErr("--managers and --sweep managers=… both set the grid's size; give one")
		}
		if param == "percent" && set["kill"] {
			return usageErr("--kill and --sweep percent=… both set the percent killed; give one")
		}
		for _, v := range values {
			if _, err := sim.Vary(sc, param, v); err != nil {
				return usageErr("--sweep: %s", err)
			}
		}
	}
	// The largest run decides what memory is needed (a sweep of sizes
	// does not run the scenario's own).
	est := sim.EstimateSweep(sc, param, values)
	avail, availErr := memAvailable(meminfoPath)
	if availErr == nil && est.Need > avail {
		return fmt.Errorf("not enough memory: %d managers need about %s (%s), and %s is available (MemAvailable in %s); "+
			"run fewer managers, or free memory", est.Managers, render.Bytes(est.Need), est, render.Bytes(avail), meminfoPath)
	}
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return fmt.Errorf("--out: %s", plainError(err))
		}
	}
	limit, restore := tuneGC(est, avail)
	defer restore()
	var progress io.Writer = c.stderr
	if *quiet {
		progress = nil
	}
	opt := sim.Options{Progress: progress, Wall: time.Now, MeasureHeap: true, HugePages: true}
	if limit > 0 {
		// Past this the collector has less than the quarter of the live
		// heap it needs: stop with a message rather than thrash.
		opt.MaxLive = uint64(float64(limit) / 1.25)
	}
	if !*quiet {
		mem := render.Bytes(avail) + " available"
		if availErr != nil {
			mem = "memory available unknown (" + plainError(availErr) + ")"
		}
		use := ""
		if limit > 0 {
			use = fmt.Sprintf("; it may take up to %s (GOMEMLIMIT) to collect less often", render.Bytes(limit))
		}
		fmt.Fprintf(c.stderr, "sim: needs at least %s of memory (%s to run well), %s%s\n", render.Bytes(est.Need), render.Bytes(est.Good), mem, use)
	}

	// A run stopped for memory says what the estimate was.
	memErr := func(err error) error {
		if errors.Is(err, sim.ErrMemory) {
			return fmt.Errorf("%w; the estimate was %s (%s): this scenario holds more than the model says", err, render.Bytes(est.Need), est)
		}
		return err
	}
	if param == "" {
		res, err := runSim(c, sc, opt)
		if err != nil {
			return memErr(err)
		}
		if *out != "" {
			if err := writeSimOut(c, *out, res); err != nil {
				return err
			}
		}
		return violations(res)
	}
	var points []sim.SweepPoint
	var bad error
	for _, v := range values {
		vsc, _ := sim.Vary(sc, param, v)
		fmt.Fprintf(c.stdout, "\n== %s = %s\n", param, fmtNum(v))
		res, err := runSim(c, vsc, opt)
		if err != nil {
			return memErr(err)
		}
		bad = errors.Join(bad, violations(res))
		points = append(points, sim.SweepPoint{X: v, Figures: res.Figures})
	}
	if *out != "" {
		f, err := os.Create(filepath.Join(*out, "figures-sweep.csv"))
		if err != nil {
			return err
		}
		err = errors.Join(sim.WriteSweepCSV(f, param, points), f.Close())
		if err != nil {
			return err
		}
		label := map[string]string{"managers": "managers", "percent": "percent of managers killed"}[param]
		names, err := sim.WriteSweepPlots(*out, label, param == "managers", points)
		if err != nil {
			return fmt.Errorf("plots: %w", err)
		}
		fmt.Fprintf(c.stdout, "\nwrote %s and %d plots to %s\n", "figures-sweep.csv", len(names), *out)
	}
	return bad
}

func fmtNum(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%g", v)
}

// runSim runs one scenario and prints its table and what it cost; a last
// line on stderr says it is over (even with --quiet).
func runSim(c *cli, sc *sim.Scenario, opt sim.Options) (*sim.Result, error) {
	fmt.Fprintf(c.stdout, "scenario: %s — %d managers, seed %d\n", orDash(sc.Name), sc.Grid.Managers, sc.Seed)
	start := time.Now()
	res, err := sim.Run(sc, opt)
	if err != nil {
		fmt.Fprintf(c.stderr, "sim: failed after %s of wall time; peak RSS %s\n", text.FormatDuration(time.Since(start).Round(time.Second)), render.Bytes(peakRSS()))
		return nil, err
	}
	fmt.Fprintf(c.stderr, "sim: done: %s of virtual time, %d events in %s of wall time; peak RSS %s\n",
		text.FormatDuration(res.Virtual.Round(time.Millisecond)), res.Steps, text.FormatDuration(res.Wall.Round(100*time.Millisecond)), render.Bytes(peakRSS()))
	fmt.Fprintln(c.stdout)
	if err := sim.WriteTable(c.stdout, res.Figures); err != nil {
		return nil, err
	}
	for _, n := range res.Notes {
		fmt.Fprintf(c.stdout, "note: %s\n", n)
	}
	rss := peakRSS()
	wall := res.Wall.Round(100 * time.Millisecond)
	if res.Wall < time.Second {
		wall = res.Wall.Round(time.Millisecond)
	}
	n := uint64(sc.Grid.Managers)
	fmt.Fprintf(c.stdout, "\n%s of virtual time in %s of wall time; %d events (%.0f per second); peak RSS of the process so far %s (%s per manager); live heap at the end %s (%s per manager), at most %s\n",
		text.FormatDuration(res.Virtual.Round(time.Millisecond)), text.FormatDuration(wall), res.Steps, float64(res.Steps)/res.Wall.Seconds(),
		render.Bytes(rss), render.Bytes(rss/n), render.Bytes(res.LiveHeap), render.Bytes(res.LiveHeap/n), render.Bytes(res.PeakLive))
	if res.HugePagesResident > 0 {
		fmt.Fprintf(c.stdout, "%s of the memory resident at the end in huge pages\n", render.Bytes(res.HugePagesResident))
	}
	return res, nil
}

func orDash(s string) string {
	if s == "" {
		return "(unnamed)"
	}
	return s
}

// violations turns broken invariants into the command's failure.
func violations(res *sim.Result) error {
	if len(res.Violations) == 0 {
		return nil
	}
	n := len(res.Violations)
	shown := res.Violations[:min(n, 10)]
	return fmt.Errorf("%d invariant(s) broken — this is a bug in gridmgr, please report it with the scenario and seed:\n  %s",
		n, strings.Join(shown, "\n  "))
}

func writeSimOut(c *cli, dir string, res *sim.Result) error {
	f, err := os.Create(filepath.Join(dir, "figures.csv"))
	if err != nil {
		return err
	}
	if err := errors.Join(sim.WriteCSV(f, res.Figures), f.Close()); err != nil {
		return err
	}
	names, err := sim.WritePlots(dir, res)
	if err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	fmt.Fprintf(c.stdout, "wrote %s to %s\n", strings.Join(append([]string{"figures.csv"}, names...), ", "), dir)
	return nil
}

// tuneGC trades memory for speed unless the user chose: a simulation
// allocates a great deal of short-lived garbage, and the default GOGC
// collects ten times as often as it needs to while far from the memory
// limit. The limit is three quarters of this machine's RAM, or more if
// the run needs more (est), but never more than is available (avail, 0
// if unknown). It returns the limit in force (0 if none) and what
// restores the settings (the command may run inside a test binary).
func tuneGC(est sim.MemoryEstimate, avail uint64) (uint64, func()) {
	pct, old := -2, int64(-2)
	if os.Getenv("GOGC") == "" {
		pct = debug.SetGCPercent(400)
	}
	limit := uint64(debug.SetMemoryLimit(-1))
	if os.Getenv("GOMEMLIMIT") == "" {
		var si syscall.Sysinfo_t
		if syscall.Sysinfo(&si) == nil && si.Totalram > 0 {
			limit = max(uint64(si.Totalram)*uint64(si.Unit)*3/4, est.Need)
			if avail > 0 {
				limit = min(limit, avail)
			}
			old = debug.SetMemoryLimit(int64(limit))
		}
	}
	if limit >= math.MaxInt64 {
		limit = 0
	}
	return limit, func() {
		if pct != -2 {
			debug.SetGCPercent(pct)
		}
		if old != -2 {
			debug.SetMemoryLimit(old)
		}
	}
}

// meminfoPath is where the memory available is read (a variable for the
// tests).
var meminfoPath = "/proc/meminfo"

// memAvailable reads MemAvailable from a /proc/meminfo file: the memory
// that can be given to a new process without swapping.
func memAvailable(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "MemAvailable:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			break
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("%s: no MemAvailable line in kB", path)
}

// peakRSS is the process's peak resident set size, in bytes.
func peakRSS() uint64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return uint64(ru.Maxrss) * 1024
}
