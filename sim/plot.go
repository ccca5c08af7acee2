package sim

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gridmgr/gridmgr/internal/svgplot"
)

// plotExt is the plots' format, by extension: SVG only (internal/svgplot
// says why).
var plotExt = ".svg"

// cdfPoints bounds the points of a CDF line.
const cdfPoints = 400

// Plot sizes.
const (
	plotW = 16 * svgplot.Centimeter
	plotH = 10 * svgplot.Centimeter
)

// palette is a colour-blind-safe set (Okabe–Ito).
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255}, color.RGBA{213, 94, 0, 255}, color.RGBA{0, 158, 115, 255},
	color.RGBA{204, 121, 167, 255}, color.RGBA{230, 159, 0, 255}, color.RGBA{86, 180, 233, 255},
}

// WritePlots draws a run's figures as SVG files in dir and returns their
// names: the latency distribution of each query and reservation action
// (as a CDF), and the timeline (managers up, messages per second by kind).
func WritePlots(dir string, res *Result) ([]string, error) {
	var out []string
	// CDFs of latencies, one line per action.
	for _, metric := range []string{"query latency", "reservation latency"} {
		p := newPlot(strings.ToUpper(metric[:1])+metric[1:]+" (CDF)", metric+" (ms, virtual)", "fraction of requests")
		lines := 0
		for _, f := range res.Figures {
			if f.Metric != metric || len(f.samples) < 2 {
				continue
			}
			s := slices.Clone(f.samples)
			slices.Sort(s)
			// At most cdfPoints points: a CDF of 100,000 samples drawn
			// point by point makes a megabyte of SVG and no finer curve.
			step := max(1, len(s)/cdfPoints)
			var pts []svgplot.XY
			for i := 0; i < len(s); i += step {
				pts = append(pts, svgplot.XY{X: s[i], Y: float64(i+1) / float64(len(s))})
			}
			if last := len(s) - 1; last%step != 0 {
				pts = append(pts, svgplot.XY{X: s[last], Y: 1})
			}
			if err := addLine(p, fmt.Sprintf("%d: %s", f.Action, f.Label), pts, lines, false); err != nil {
				return nil, err
			}
			lines++
		}
		if lines == 0 {
			continue
		}
		p.Y.Min, p.Y.Max = 0, 1
		name := strings.ReplaceAll(metric, " ", "-") + "-cdf" + plotExt
		if err := save(p, filepath.Join(dir, name)); err != nil {
			return nil, err
		}
		out = append(out, name)
	}
	if len(res.Timeline) > 1 {
		p := newPlot("Messages delivered per second, by kind", "virtual time (s)", "messages per second")
		for k := range numKinds {
			pts := make([]svgplot.XY, len(res.Timeline))
			any := false
			for i, s := range res.Timeline {
				pts[i] = svgplot.XY{X: s.At.Seconds(), Y: float64(s.Messages[k])}
				any = any || s.Messages[k] > 0
			}
			if any {
				if err := addLine(p, kindNames[k], pts, int(k), false); err != nil {
					return nil, err
				}
			}
		}
		p.Y.Min = 0
		p.Y.Max *= 1.05
		if err := save(p, filepath.Join(dir, "messages"+plotExt)); err != nil {
			return nil, err
		}
		// Managers running, and those of them a partition cuts off from
		// the rest (they run, but the rest of the grid cannot reach them):
		// a line of running managers alone is flat through a partition.
		up := newPlot("Managers running and reachable", "virtual time (s)", "managers")
		run := make([]svgplot.XY, len(res.Timeline))
		reach := make([]svgplot.XY, len(res.Timeline))
		cut := false
		for i, s := range res.Timeline {
			run[i] = svgplot.XY{X: s.At.Seconds(), Y: float64(s.Up)}
			reach[i] = svgplot.XY{X: s.At.Seconds(), Y: float64(s.Up - s.Cut)}
			cut = cut || s.Cut > 0
		}
		if err := addLine(up, "running", run, 0, false); err != nil {
			return nil, err
		}
		if cut {
			if err := addLine(up, "running, not cut off", reach, 1, false); err != nil {
				return nil, err
			}
		}
		up.Y.Min = 0
		up.Y.Max = float64(res.Scenario.Grid.Managers) * 1.05
		if err := save(up, filepath.Join(dir, "managers-up"+plotExt)); err != nil {
			return nil, err
		}
		out = append(out, "messages"+plotExt, "managers-up"+plotExt)
	}
	return out, nil
}

func newPlot(title, x, y string) *svgplot.Plot {
	p := svgplot.New(title, x, y, plotW, plotH)
	p.X.Tick, p.Y.Tick = plainTick, plainTick
	return p
}

// save writes p into file, as SVG (the format by its extension), with its
// legend outside the data, to the right: a legend drawn over the plot
// hides the lines wherever it is put.
func save(p *svgplot.Plot, file string) error {
	if ext := strings.ToLower(filepath.Ext(file)); ext != ".svg" {
		return fmt.Errorf("%s: plots are drawn as SVG only", file)
	}
	return p.Save(file)
}

// plainTick labels ticks as numbers are written, not as a float's
// digits: "500k" and "1.5M" on an axis that goes past 10,000, "20" and
// "0.5" below, never "500000.00".
func plainTick(v float64, ticks []float64) string {
	top := 0.0
	for _, t := range ticks {
		top = max(top, math.Abs(t))
	}
	return tickLabel(v, top >= 10000)
}

// tickLabel writes v with at most four significant digits, in SI units
// (k, M, G) if si.
func tickLabel(v float64, si bool) string {
	unit := ""
	if si {
		for _, u := range []struct {
			s string
			f float64
		}{{"G", 1e9}, {"M", 1e6}, {"k", 1e3}} {
			if math.Abs(v) >= u.f {
				v, unit = v/u.f, u.s
				break
			}
		}
	}
	return strconv.FormatFloat(roundSig(v, 4), 'f', -1, 64) + unit
}

// roundSig rounds v to n significant digits (a tick's value carries the
// float error of its computation: 0.30000000000000004).
func roundSig(v float64, n int) float64 {
	if v == 0 {
		return 0
	}
	scale := math.Pow(10, float64(n)-math.Ceil(math.Log10(math.Abs(v))))
	return math.Round(v*scale) / scale
}

// addLine adds a line; dashed lines are models. A line of a few points
// marks them.
func addLine(p *svgplot.Plot, label string, pts []svgplot.XY, i int, dashed bool) error {
	return p.Add(svgplot.Line{Label: label, Points: pts, Color: palette[i%len(palette)], Dashed: dashed, Dots: !dashed && len(pts) <= 12})
}

// SweepPoint is one run of a sweep: the value swept and its figures.
type SweepPoint struct {
	X       float64
	Figures []Figure
}

// WriteSweepPlots draws, for each figure that has more than one value
// across the sweep, its mean and p99 against the swept value, with the
// analytic model dashed beside them where there is one. xLabel names the
// swept value; logX draws it on a log scale (managers). It returns the
// file names.
func WriteSweepPlots(dir, xLabel string, logX bool, points []SweepPoint) ([]string, error) {
	type key struct {
		action int
		metric string
	}
	var keys []key
	find := func(figs []Figure, k key) (Figure, bool) {
		for _, f := range figs {
			if f.Action == k.action && f.Metric == k.metric {
				return f, true
			}
		}
		return Figure{}, false
	}
	for _, f := range points[0].Figures {
		if f.Action == 0 || f.Unit == "1=yes" || f.Unit == "" && !strings.Contains(f.Metric, "per") && !strings.Contains(f.Metric, "visited") {
			continue
		}
		keys = append(keys, key{f.Action, f.Metric})
	}
	var out []string
	for _, k := range keys {
		var mean, p99, model []svgplot.XY
		var unit, label string
		for _, pt := range points {
			f, ok := find(pt.Figures, k)
			if !ok || math.IsNaN(f.Mean) {
				continue
			}
			unit, label = f.Unit, f.Label
			mean = append(mean, svgplot.XY{X: pt.X, Y: f.Mean})
			if f.N > 1 {
				p99 = append(p99, svgplot.XY{X: pt.X, Y: f.P99})
			}
			if !math.IsNaN(f.Model) {
				model = append(model, svgplot.XY{X: pt.X, Y: f.Model})
			}
		}
		if len(mean) < 2 || flat(mean) && len(model) == 0 {
			continue // nothing to see: one point, or the same value throughout
		}
		y := k.metric
		if unit != "" && unit != "fraction" {
			y += " (" + unit + ")"
		}
		p := newPlot(fmt.Sprintf("%s — action %d (%s)", k.metric, k.action, label), xLabel, y)
		p.X.Log = logX
		if err := addLine(p, "measured (mean)", mean, 0, false); err != nil {
			return nil, err
		}
		if len(p99) >= 2 {
			if err := addLine(p, "measured (p99)", p99, 1, false); err != nil {
				return nil, err
			}
		}
		if len(model) >= 2 {
			if err := addLine(p, "model", model, 2, true); err != nil {
				return nil, err
			}
		}
		p.Y.Min = 0
		p.Y.Max *= 1.05
		name := fmt.Sprintf("sweep-%d-%s%s", k.action, slug(k.metric), plotExt)
		if err := save(p, filepath.Join(dir, name)); err != nil {
			return nil, err
		}
		out = append(out, name)
	}
	return out, nil
}

// flat reports whether every point has the same value.
func flat(pts []svgplot.XY) bool {
	for _, p := range pts {
		if p.Y != pts[0].Y {
			return false
		}
	}
	return true
}

// slug makes a metric name a file name.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(s) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}
