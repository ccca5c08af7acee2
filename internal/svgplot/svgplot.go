package svgplot

import (
	"bufio"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// Sizes, in points (1/72 inch).
const (
	Centimeter = 72 / 2.54

	titleSize = 12.0
	labelSize = 10.0
	tickSize  = 9.0
	pad       = 8.0
	tickLen   = 4.0
	lineWidth = 1.5
	dotRadius = 2.5
	// charWidth is a character's width, as a fraction of the font's size,
	// for layout: a little more than Times's average, so that labels
	// are never cut.
	charWidth = 0.55
)

// XY is a point.
type XY struct{ X, Y float64 }

// Axis is one axis: its label and range. Min and Max are set by Add to
// the data's range and may be changed before drawing.
type Axis struct {
	Label    string
	Min, Max float64
	// Log draws the axis on a log scale (x only): ticks at 1, 2, 5
	// times the powers of ten, or at the powers alone over many.
	Log bool
	// Label formats a tick; nil writes the value as %g.
	Tick func(v float64, ticks []float64) string
}

// Line is one line of a plot.
type Line struct {
	Label  string
	Points []XY
	Color  color.Color
	Dashed bool
	// Dots marks each point with a circle.
	Dots bool
}

// Plot is one plot.
type Plot struct {
	Title string
	X, Y  Axis
	// Width and Height of the plot, legend excluded (the legend, if any,
	// widens the file).
	Width, Height float64

	lines []Line
	empty bool
}

// New returns an empty plot of the size given, in points.
func New(title, x, y string, width, height float64) *Plot {
	return &Plot{Title: title, X: Axis{Label: x}, Y: Axis{Label: y}, Width: width, Height: height, empty: true}
}

// ErrNotFinite: a point is NaN or infinite.
var ErrNotFinite = errors.New("svgplot: NaN or infinite data point")

// Add adds a line and widens the axes to its points.
func (p *Plot) Add(l Line) error {
	for _, pt := range l.Points {
		if math.IsNaN(pt.X) || math.IsNaN(pt.Y) || math.IsInf(pt.X, 0) || math.IsInf(pt.Y, 0) {
			return ErrNotFinite
		}
	}
	for _, pt := range l.Points {
		if p.empty {
			p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = pt.X, pt.X, pt.Y, pt.Y
			p.empty = false
			continue
		}
		p.X.Min, p.X.Max = min(p.X.Min, pt.X), max(p.X.Max, pt.X)
		p.Y.Min, p.Y.Max = min(p.Y.Min, pt.Y), max(p.Y.Max, pt.Y)
	}
	p.lines = append(p.lines, l)
	return nil
}

// Save writes the plot to file as SVG.
func (p *Plot) Save(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := p.Write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// textWidth estimates the width of s at size.
func textWidth(s string, size float64) float64 {
	return float64(len([]rune(s))) * size * charWidth
}

// Write writes the plot as an SVG document.
func (p *Plot) Write(w io.Writer) error {
	xlo, xhi := span(p.X.Min, p.X.Max, p.X.Log)
	ylo, yhi := span(p.Y.Min, p.Y.Max, false)
	var xt []float64
	if p.X.Log {
		xt = logTicks(xlo, xhi)
	} else {
		xt = linearTicks(xlo, xhi)
	}
	yt := linearTicks(ylo, yhi)
	label := func(a Axis, v float64, ticks []float64) string {
		if a.Tick != nil {
			return a.Tick(v, ticks)
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	ytw := 0.0
	for _, v := range yt {
		ytw = max(ytw, textWidth(label(p.Y, v, yt), tickSize))
	}

	// The legend's width, and the file's.
	lw := 0.0
	for _, l := range p.lines {
		if l.Label != "" {
			lw = max(lw, 24+4+textWidth(l.Label, labelSize))
		}
	}
	width := p.Width
	if lw > 0 {
		width += lw + 2*pad
	}

	// The data's area.
	left := pad + labelSize + pad + ytw + 4 + tickLen
	right := p.Width - pad - textWidth(label(p.X, xt[len(xt)-1], xt), tickSize)/2
	top := pad + titleSize + pad
	bottom := p.Height - pad - labelSize - 6 - tickSize - 4 - tickLen
	px := func(x float64) float64 {
		if p.X.Log {
			x, xlo, xhi := math.Log10(x), math.Log10(xlo), math.Log10(xhi)
			return left + (x-xlo)/(xhi-xlo)*(right-left)
		}
		return left + (x-xlo)/(xhi-xlo)*(right-left)
	}
	py := func(y float64) float64 { return bottom - (y-ylo)/(yhi-ylo)*(bottom-top) }

	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "<?xml version=\"1.0\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%spt\" height=\"%spt\" viewBox=\"0 0 %s %s\" font-family=\"Liberation Serif, Times New Roman, Times, serif\">\n",
		num(width), num(p.Height), num(width), num(p.Height))
	fmt.Fprintf(b, "<rect width=\"%s\" height=\"%s\" fill=\"white\"/>\n", num(width), num(p.Height))
	// Title and axis labels.
	fmt.Fprintf(b, "<text x=\"%s\" y=\"%s\" font-size=\"%s\" text-anchor=\"middle\">%s</text>\n", num(p.Width/2), num(pad+titleSize), num(titleSize), esc(p.Title))
	fmt.Fprintf(b, "<text x=\"%s\" y=\"%s\" font-size=\"%s\" text-anchor=\"middle\">%s</text>\n", num((left+right)/2), num(p.Height-pad), num(labelSize), esc(p.X.Label))
	fmt.Fprintf(b, "<text transform=\"translate(%s %s) rotate(-90)\" font-size=\"%s\" text-anchor=\"middle\">%s</text>\n", num(pad+labelSize), num((top+bottom)/2), num(labelSize), esc(p.Y.Label))

	// Grid lines, ticks and their labels.
	b.WriteString("<g stroke=\"#d3d3d3\" stroke-width=\"0.5\">\n")
	for _, v := range xt {
		fmt.Fprintf(b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\"/>\n", num(px(v)), num(top), num(px(v)), num(bottom))
	}
	for _, v := range yt {
		fmt.Fprintf(b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\"/>\n", num(left), num(py(v)), num(right), num(py(v)))
	}
	b.WriteString("</g>\n<g stroke=\"black\" stroke-width=\"0.5\" fill=\"none\">\n")
	fmt.Fprintf(b, "<path d=\"M%s %sH%s\"/>\n<path d=\"M%s %sV%s\"/>\n", num(left), num(bottom+tickLen), num(right), num(left-tickLen), num(bottom), num(top))
	for _, v := range xt {
		fmt.Fprintf(b, "<path d=\"M%s %sv%s\"/>\n", num(px(v)), num(bottom+tickLen), num(tickLen))
	}
	for _, v := range yt {
		fmt.Fprintf(b, "<path d=\"M%s %sh%s\"/>\n", num(left-2*tickLen), num(py(v)), num(tickLen))
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(b, "<g font-size=\"%s\" text-anchor=\"middle\">\n", num(tickSize))
	for _, v := range xt {
		fmt.Fprintf(b, "<text x=\"%s\" y=\"%s\">%s</text>\n", num(px(v)), num(bottom+2*tickLen+4+tickSize), esc(label(p.X, v, xt)))
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(b, "<g font-size=\"%s\" text-anchor=\"end\">\n", num(tickSize))
	for _, v := range yt {
		fmt.Fprintf(b, "<text x=\"%s\" y=\"%s\">%s</text>\n", num(left-2*tickLen-4), num(py(v)+tickSize/3), esc(label(p.Y, v, yt)))
	}
	b.WriteString("</g>\n")

	// The lines, clipped to the data's area.
	fmt.Fprintf(b, "<clipPath id=\"data\"><rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"%s\"/></clipPath>\n<g clip-path=\"url(#data)\">\n",
		num(left-dotRadius), num(top-dotRadius), num(right-left+2*dotRadius), num(bottom-top+2*dotRadius))
	for _, l := range p.lines {
		c := rgb(l.Color)
		dash := ""
		if l.Dashed {
			dash = " stroke-dasharray=\"5 3\""
		}
		var d strings.Builder
		for i, pt := range l.Points {
			if p.X.Log && pt.X <= 0 {
				continue
			}
			if i == 0 || d.Len() == 0 {
				d.WriteString("M")
			} else {
				d.WriteString("L")
			}
			d.WriteString(num(px(pt.X)) + " " + num(py(pt.Y)))
		}
		fmt.Fprintf(b, "<path d=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" stroke-linejoin=\"round\"%s/>\n", d.String(), c, num(lineWidth), dash)
		if l.Dots {
			for _, pt := range l.Points {
				if p.X.Log && pt.X <= 0 {
					continue
				}
				fmt.Fprintf(b, "<circle cx=\"%s\" cy=\"%s\" r=\"%s\" fill=\"none\" stroke=\"%s\"/>\n", num(px(pt.X)), num(py(pt.Y)), num(dotRadius), c)
			}
		}
	}
	b.WriteString("</g>\n")

	// The legend, to the right of the plot, from the top of the data.
	if lw > 0 {
		x := p.Width + pad
		y := top
		fmt.Fprintf(b, "<g font-size=\"%s\">\n", num(labelSize))
		for _, l := range p.lines {
			if l.Label == "" {
				continue
			}
			dash := ""
			if l.Dashed {
				dash = " stroke-dasharray=\"5 3\""
			}
			fmt.Fprintf(b, "<path d=\"M%s %sh24\" stroke=\"%s\" stroke-width=\"%s\"%s/>\n", num(x), num(y+labelSize/2), rgb(l.Color), num(lineWidth), dash)
			fmt.Fprintf(b, "<text x=\"%s\" y=\"%s\">%s</text>\n", num(x+28), num(y+labelSize*0.85), esc(l.Label))
			y += labelSize * 1.5
		}
		b.WriteString("</g>\n")
	}
	b.WriteString("</svg>\n")
	return b.Flush()
}

// span is the range drawn for [lo, hi]: widened if empty (one value, or
// no data).
func span(lo, hi float64, log bool) (float64, float64) {
	if log {
		lo = max(lo, math.SmallestNonzeroFloat64)
		if hi <= lo {
			return lo / 10, lo * 10
		}
		return lo, hi
	}
	if hi > lo {
		return lo, hi
	}
	if lo == 0 {
		return 0, 1
	}
	d := math.Abs(lo) / 10
	return lo - d, hi + d
}

// linearTicks returns about five round values (1, 2 or 5 times a power of
// ten apart) in [lo, hi].
func linearTicks(lo, hi float64) []float64 {
	raw := (hi - lo) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	switch r := raw / mag; {
	case r >= 7:
		step = 10 * mag
	case r >= 3:
		step = 5 * mag
	case r >= 1.5:
		step = 2 * mag
	}
	// k*step carries the float error of the product (0.6000000000000001):
	// written with step's decimals and read back, it is the round value.
	dec := max(0, int(-math.Floor(math.Log10(step))))
	var out []float64
	for k := math.Ceil(lo/step - 1e-9); k*step <= hi+step*1e-9; k++ {
		v, _ := strconv.ParseFloat(strconv.FormatFloat(k*step, 'f', dec, 64), 64)
		out = append(out, v)
	}
	if len(out) == 0 {
		out = []float64{lo, hi}
	}
	return out
}

// logTicks returns powers of ten in [lo, hi], with 2 and 5 times them
// when the range has fewer than three.
func logTicks(lo, hi float64) []float64 {
	var pow []float64
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi*(1+1e-9); e++ {
		pow = append(pow, math.Pow(10, e))
	}
	var out []float64
	for _, v := range pow {
		for _, m := range []float64{1, 2, 5} {
			if m > 1 && len(pow) > 3 {
				break
			}
			if t := v * m; t >= lo*(1-1e-9) && t <= hi*(1+1e-9) {
				out = append(out, t)
			}
		}
	}
	if len(out) < 2 {
		out = []float64{lo, hi}
	}
	return out
}

// num writes a coordinate with at most two decimals.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

// rgb writes a colour as #rrggbb (black if nil).
func rgb(c color.Color) string {
	if c == nil {
		return "#000000"
	}
	r, g, b, _ := c.RGBA()
	return fmt.Sprintf("#%02x%02x%02x", r>>8, g>>8, b>>8)
}

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\"", "&quot;")

func esc(s string) string { return escaper.Replace(s) }
