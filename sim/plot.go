package sim

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// plotExt is the plots' format, by extension (tests draw PNGs to look at).
var plotExt = ".svg"

// cdfPoints bounds the points of a CDF line.
const cdfPoints = 400

// Plot sizes.
const (
	plotW = 16 * vg.Centimeter
	plotH = 10 * vg.Centimeter
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
			var pts plotter.XYs
			for i := 0; i < len(s); i += step {
				pts = append(pts, plotter.XY{X: s[i], Y: float64(i+1) / float64(len(s))})
			}
			if last := len(s) - 1; last%step != 0 {
				pts = append(pts, plotter.XY{X: s[last], Y: 1})
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
			pts := make(plotter.XYs, len(res.Timeline))
			any := false
			for i, s := range res.Timeline {
				pts[i] = plotter.XY{X: s.At.Seconds(), Y: float64(s.Messages[k])}
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
		run := make(plotter.XYs, len(res.Timeline))
		reach := make(plotter.XYs, len(res.Timeline))
		cut := false
		for i, s := range res.Timeline {
			run[i] = plotter.XY{X: s.At.Seconds(), Y: float64(s.Up)}
			reach[i] = plotter.XY{X: s.At.Seconds(), Y: float64(s.Up - s.Cut)}
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

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.X.Tick.Marker = plainTicks{plot.DefaultTicks{}}
	p.Y.Tick.Marker = plainTicks{plot.DefaultTicks{}}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p
}

// save draws p into file (the format by its extension) with its legend
// outside the data, to the right: a legend drawn over the plot hides the
// lines wherever it is put.
func save(p *plot.Plot, file string) error {
	legend := p.Legend
	p.Legend = plot.NewLegend() // drawn apart, below
	lw := legend.Rectangle(draw.Canvas{}).Size().X
	pad := vg.Points(8)
	w := plotW
	if lw > 0 {
		w += lw + 2*pad
	}
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(file)), ".")
	c, err := draw.NewFormattedCanvas(w, plotH, format)
	if err != nil {
		return err
	}
	dc := draw.New(c)
	plotArea := dc
	plotArea.Max.X = dc.Min.X + plotW
	p.Draw(plotArea)
	if lw > 0 {
		data := p.DataCanvas(plotArea)
		lc := dc
		lc.Min.X, lc.Max.X = plotArea.Max.X+pad, dc.Max.X-pad
		lc.Max.Y = data.Max.Y
		legend.Draw(lc)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// plainTicks labels ticks as numbers are written, not as a float's
// digits: "500k" and "1.5M" on an axis that goes past 10,000, "20" and
// "0.5" below, never "500000.00".
type plainTicks struct{ plot.Ticker }

func (t plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := t.Ticker.Ticks(lo, hi)
	top := 0.0
	for _, tk := range ticks {
		if tk.Label != "" {
			top = max(top, math.Abs(tk.Value))
		}
	}
	for i, tk := range ticks {
		if tk.Label != "" {
			ticks[i].Label = tickLabel(tk.Value, top >= 10000)
		}
	}
	return ticks
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

// addLine adds a line; dashed lines are models.
func addLine(p *plot.Plot, label string, pts plotter.XYs, i int, dashed bool) error {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color = palette[i%len(palette)]
	l.Width = vg.Points(1.5)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	}
	p.Add(l)
	if !dashed && len(pts) <= 12 {
		s, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		s.Color = l.Color
		s.Shape = draw.CircleGlyph{}
		p.Add(s)
	}
	p.Legend.Add(label, l)
	return nil
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
		var mean, p99, model plotter.XYs
		var unit, label string
		for _, pt := range points {
			f, ok := find(pt.Figures, k)
			if !ok || math.IsNaN(f.Mean) {
				continue
			}
			unit, label = f.Unit, f.Label
			mean = append(mean, plotter.XY{X: pt.X, Y: f.Mean})
			if f.N > 1 {
				p99 = append(p99, plotter.XY{X: pt.X, Y: f.P99})
			}
			if !math.IsNaN(f.Model) {
				model = append(model, plotter.XY{X: pt.X, Y: f.Model})
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
		if logX {
			p.X.Scale = plot.LogScale{}
			p.X.Tick.Marker = plainTicks{plot.LogTicks{Prec: -1}}
		}
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
func flat(pts plotter.XYs) bool {
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
