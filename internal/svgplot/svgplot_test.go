package svgplot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"image/color"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestWritesWellFormedSVG: a plot with every kind of line, labels that
// need escaping and a log axis is one well-formed SVG document with its
// title, labels, legend and a path per line.
func TestWritesWellFormedSVG(t *testing.T) {
	p := New(`latency <p99> & "mean"`, "managers", "ms", 16*Centimeter, 10*Centimeter)
	p.X.Log = true
	for i, l := range []Line{
		{Label: "measured (mean)", Points: []XY{{100, 1}, {1000, 2}, {10000, 4}}, Dots: true},
		{Label: "model", Points: []XY{{100, 1.5}, {10000, 3}}, Dashed: true, Color: color.RGBA{0, 114, 178, 255}},
	} {
		if err := p.Add(l); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
	}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(&b)
	var texts []string
	paths, circles := 0, 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			switch tok.Name.Local {
			case "path":
				paths++
			case "circle":
				circles++
			}
		case xml.CharData:
			if s := strings.TrimSpace(string(tok)); s != "" {
				texts = append(texts, s)
			}
		}
	}
	for _, want := range []string{`latency <p99> & "mean"`, "managers", "ms", "measured (mean)", "model", "100", "1000", "10000"} {
		if !slices.Contains(texts, want) {
			t.Errorf("no text %q in %q", want, texts)
		}
	}
	if circles != 3 {
		t.Errorf("%d circles, want one per point of the dotted line", circles)
	}
	if paths < 4 {
		t.Errorf("%d paths: want at least the two lines and their legend", paths)
	}
}

// TestRefusesNotFinite: a NaN or infinite point is an error, not a
// broken file.
func TestRefusesNotFinite(t *testing.T) {
	p := New("t", "x", "y", 100, 100)
	for _, pt := range []XY{{math.NaN(), 1}, {1, math.Inf(1)}} {
		if err := p.Add(Line{Points: []XY{{0, 0}, pt}}); !errors.Is(err, ErrNotFinite) {
			t.Errorf("%v: %v, want ErrNotFinite", pt, err)
		}
	}
}

// TestTicks: round values inside the range, about five of them, and on a
// log axis the powers of ten (with 2 and 5 over a short range). A range
// of one value still draws.
func TestTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   []float64
	}{
		{0, 1, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
		{0, 1050, []float64{0, 200, 400, 600, 800, 1000}},
		{1, 10, []float64{2, 4, 6, 8, 10}},
	} {
		if got := linearTicks(tc.lo, tc.hi); !slices.Equal(got, tc.want) {
			t.Errorf("linearTicks(%v, %v) = %v, want %v", tc.lo, tc.hi, got, tc.want)
		}
	}
	if got, want := logTicks(100, 1000), []float64{100, 200, 500, 1000}; !slices.Equal(got, want) {
		t.Errorf("logTicks(100, 1000) = %v, want %v", got, want)
	}
	if got, want := logTicks(1000, 1e6), []float64{1000, 10000, 100000, 1e6}; !slices.Equal(got, want) {
		t.Errorf("logTicks(1000, 1e6) = %v, want %v", got, want)
	}
	p := New("one", "x", "y", 100, 100)
	p.Add(Line{Points: []XY{{5, 5}}})
	if err := p.Write(io.Discard); err != nil {
		t.Error(err)
	}
}
