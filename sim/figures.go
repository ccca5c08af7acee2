package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gridmgr/gridmgr/config"
)

// Figure is one measured quantity of one action, summarised over its
// samples (one per query, per manager, ... or a single value).
type Figure struct {
	Action int    // 1-based index in the timeline; 0: the whole run
	Label  string // the action's label, or what it does
	Metric string
	Unit   string
	N      int
	Mean   float64
	P50    float64
	P90    float64
	P99    float64
	Max    float64
	// Model is the analytic expectation of the mean, NaN where there is
	// none: query latency = the round trip along the critical path of the
	// walk, as far as up and down let it go (walkModel); managers visited
	// = those it reaches, messages per query = 2 × (visited − 1); an
	// admin --all's = the flood's round trip to the farthest manager
	// (floodModel); reconvergence = the failure detector's span,
	// (heartbeat.misses + ½) × heartbeat.interval; heartbeats per manager
	// = 2 × relations / interval / managers. The rejoin time's is a bound
	// (rejoinModel), said in a note.
	Model float64

	samples []float64
}

func (r *runner) base() config.Config { return r.nodeAt(0).Config() }

func (r *runner) fig(idx int, a *Action, metric, unit string, xs []float64, model *float64) Figure {
	label := "run"
	if a != nil {
		label = a.Label
		if label == "" {
			label = a.Do
		}
	}
	f := Figure{Action: idx, Label: label, Metric: metric, Unit: unit, N: len(xs), Model: math.NaN(), samples: xs}
	if model != nil {
		f.Model = *model
	}
	if len(xs) == 0 {
		f.Mean, f.P50, f.P90, f.P99, f.Max = math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()
		return f
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	f.Mean = mean(s)
	f.P50, f.P90, f.P99 = pct(s, 50), pct(s, 90), pct(s, 99)
	f.Max = s[len(s)-1]
	return f
}

func mean(xs []float64) float64 {
	var t float64
	for _, x := range xs {
		t += x
	}
	return t / float64(len(xs))
}

// pct is the nearest-rank percentile of sorted s.
func pct(s []float64, p float64) float64 {
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(k, len(s)-1))]
}

// num formats a figure: four significant digits, "" for none.
func num(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// csvHeader and csvRow are a figure as a line of CSV.
var csvHeader = []string{"action", "label", "metric", "unit", "n", "mean", "p50", "p90", "p99", "max", "model"}

func csvRow(f Figure) []string {
	return []string{strconv.Itoa(f.Action), f.Label, f.Metric, f.Unit, strconv.Itoa(f.N),
		num(f.Mean), num(f.P50), num(f.P90), num(f.P99), num(f.Max), num(f.Model)}
}

// WriteCSV writes the figures as CSV, one per line, with a header.
func WriteCSV(w io.Writer, figs []Figure) error {
	cw := csv.NewWriter(w)
	cw.Write(csvHeader)
	for _, f := range figs {
		cw.Write(csvRow(f))
	}
	cw.Flush()
	return cw.Error()
}

// WriteTable writes the figures as an aligned table: single values in
// the mean column alone, distributions with their percentiles.
func WriteTable(w io.Writer, figs []Figure) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tACTION\tFIGURE\tN\tMEAN\tP50\tP90\tP99\tMAX\tMODEL")
	for _, f := range figs {
		metric := f.Metric
		if f.Unit != "" && f.Unit != "fraction" && !strings.HasPrefix(f.Unit, "1=") {
			metric += " (" + f.Unit + ")"
		}
		mean := num(f.Mean)
		if f.Unit == "fraction" && !math.IsNaN(f.Mean) {
			mean = strconv.FormatFloat(100*f.Mean, 'f', 1, 64) + "%"
		}
		if f.Unit == "1=yes" {
			mean = map[bool]string{true: "yes", false: "no"}[f.Mean == 1]
		}
		if f.N <= 1 {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t\t\t\t\t%s\n", f.Action, f.Label, metric, "", mean, num(f.Model))
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Action, f.Label, metric, f.N, mean,
			num(f.P50), num(f.P90), num(f.P99), num(f.Max), num(f.Model))
	}
	return tw.Flush()
}
