package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// chartsDir is where the charts of a run whose JSON goes to out are
// written: /tmp/x.json -> /tmp/x.charts, beside the figures they draw.
func chartsDir(out string) string {
	return strings.TrimSuffix(out, filepath.Ext(out)) + ".charts"
}

// chartGroup is the series drawn on one chart.
type chartGroup struct {
	title  string
	kind   SeriesKind
	unit   string
	series []Series
}

// chartGroups gathers the series of rs by chart title, kind and unit, in
// the order they first appear; series without samples are left out, so a
// skipped scenario draws nothing.
func chartGroups(rs []Result) []*chartGroup {
	var groups []*chartGroup
	for _, r := range rs {
		for _, s := range r.Series {
			if len(s.X) == 0 {
				continue
			}
			title := s.Chart
			if title == "" {
				title = r.Scenario
			}
			i := slices.IndexFunc(groups, func(g *chartGroup) bool {
				return g.title == title && g.kind == s.Kind && g.unit == s.Unit
			})
			if i < 0 {
				groups = append(groups, &chartGroup{title: title, kind: s.Kind, unit: s.Unit})
				i = len(groups) - 1
			}
			groups[i].series = append(groups[i].series, s)
		}
	}
	return groups
}

// writeCharts draws one SVG per chart group of rs into dir and returns the
// files written. SVG because it diffs as text and GitHub renders it in
// docs/benchmarks.md.
func writeCharts(dir string, rs []Result) ([]string, error) {
	groups := chartGroups(rs)
	if len(groups) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	var errs []error
	taken := map[string]bool{}
	for _, g := range groups {
		b, err := g.render()
		if err != nil {
			errs = append(errs, fmt.Errorf("chart %q: %w", g.title, err))
			continue
		}
		path := filepath.Join(dir, g.fileName(taken)+".svg")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			errs = append(errs, err)
			continue
		}
		files = append(files, path)
	}
	return files, errors.Join(errs...)
}

// fileName is the chart's file name without extension: its title slugged,
// and for a curve its unit too (one chart per unit), so that the docs can
// link a chart by a name that does not depend on the other charts of the
// run; a clash (two kinds under one title) takes the kind as a suffix.
func (g *chartGroup) fileName(taken map[string]bool) string {
	name := slug(g.title)
	if g.kind == Curve && g.unit != "" {
		name += "-" + slug(g.unit)
	}
	for i := 0; taken[name]; i++ {
		name = slug(fmt.Sprintf("%s %s %s", name, g.kind, g.unit))
		if i > 0 {
			name += fmt.Sprint(i)
		}
	}
	taken[name] = true
	return name
}

// slug keeps the letters and digits of s, lowercased, with one '-'
// between runs of them: "vs reference plugins: ADD" -> "vs-reference-plugins-add".
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
			continue
		}
		dash = true
	}
	if b.Len() == 0 {
		return "chart"
	}
	return b.String()
}

// palette is Okabe and Ito's, which stays apart for the colour-blind and
// in greyscale; a chart with more lines than colours repeats them dashed.
var palette = [...]color.RGBA{
	{0, 114, 178, 255},   // blue
	{213, 94, 0, 255},    // vermillion
	{0, 158, 115, 255},   // bluish green
	{204, 121, 167, 255}, // reddish purple
	{230, 159, 0, 255},   // orange
	{86, 180, 233, 255},  // sky blue
	{0, 0, 0, 255},       // black
}

// Chart geometry: the plot above, its legend in a strip below it, where
// it can hide no line whatever the data.
const (
	chartWidth  = 7 * vg.Inch
	chartHeight = 4 * vg.Inch
)

// render draws the group as an SVG document.
func (g *chartGroup) render() ([]byte, error) {
	p := plot.New()
	sans := font.Font{Typeface: "Liberation", Variant: "Sans"}
	p.Title.Text = g.title
	p.Title.TextStyle.Font = font.From(sans, 13)
	p.Title.Padding = vg.Points(6)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sans, 11)
		a.Tick.Label.Font = font.From(sans, 9)
		a.Tick.Marker = linearTicks{}
	}
	grid := plotter.NewGrid()
	grid.Vertical.Color = color.Gray{Y: 225}
	grid.Horizontal.Color = color.Gray{Y: 225}
	p.Add(grid)
	legend := plot.NewLegend()
	legend.TextStyle.Font = font.From(sans, 10)
	legend.Top, legend.Left = true, true

	var lines []*plotter.Line
	var err error
	switch g.kind {
	case CDF:
		lines, err = g.cdf(p)
	case Timeline:
		lines, err = g.timeline(p)
	case Curve:
		lines, err = g.curve(p)
	default:
		return nil, fmt.Errorf("unknown series kind %q", g.kind)
	}
	if err != nil {
		return nil, err
	}
	for i, l := range lines {
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.5)
		if i >= len(palette) {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(l)
		legend.Add(g.legendName(i), l)
	}
	bounds := g.bounds()
	for _, b := range bounds {
		l, err := plotter.NewLine(plotter.XYs{{X: b, Y: p.Y.Min}, {X: b, Y: p.Y.Max}})
		if err != nil {
			return nil, err
		}
		l.Color = color.Gray{Y: 60}
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		p.Add(l)
		legend.Add(fmt.Sprintf("lower bound %s %s", trimFloat(b), g.unit), l)
	}

	// One legend row per entry, below the plot.
	rows := len(lines) + len(bounds)
	rowHeight := legend.TextStyle.Rectangle("Mg").Max.Y + vg.Points(3)
	legend.Padding = vg.Points(3)
	strip := vg.Length(rows)*rowHeight + vg.Points(12)
	c := vgsvg.New(chartWidth, chartHeight+strip)
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	// A margin on the right and at the top: gonum draws to the canvas'
	// edge, where the last tick label and the lines' ends were cut.
	plotC := draw.Crop(dc, vg.Points(4), -vg.Points(16), strip, -vg.Points(6))
	p.Draw(plotC)
	// Under the plot's data area: the y axis' width is the plot's left
	// margin there.
	legendC := draw.Crop(dc, p.DataCanvas(plotC).Min.X, 0, 0, 0)
	legendC.Max.Y = dc.Min.Y + strip - vg.Points(4)
	legend.Draw(legendC)
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// legendName is series i's legend entry: its name, and for a CDF how many
// samples it holds (a p99 of 50 samples is not one of 5,000), for a
// timeline how many pods were Ready and when the last was.
func (g *chartGroup) legendName(i int) string {
	s := g.series[i]
	switch g.kind {
	case CDF:
		return fmt.Sprintf("%s (n=%d)", s.Name, len(s.X))
	case Timeline:
		return fmt.Sprintf("%s: %d Ready, the last at %.2f %s", s.Name, len(s.X), slices.Max(s.X), g.unit)
	}
	return s.Name
}

// bounds are the distinct bounds of the group's series.
func (g *chartGroup) bounds() []float64 {
	var bs []float64
	for _, s := range g.series {
		if s.Bound != 0 && !slices.Contains(bs, s.Bound) {
			bs = append(bs, s.Bound)
		}
	}
	slices.Sort(bs)
	return bs
}

// wide says whether values spanning lo..hi read better on a log scale: a
// floor of 1 ms and a p99 of 200 ms would leave the floor a vertical line
// at the edge of a linear one.
// xScale puts p's x axis on a log scale when the group's x values span a
// wide range, and returns the smallest x value and what the axis label
// adds for the scale ("" for a linear one).
func (g *chartGroup) xScale(p *plot.Plot) (lo float64, label string) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range g.series {
		for _, v := range s.X {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if !wide(lo, hi) {
		return lo, ""
	}
	logAxis(&p.X)
	return lo, ", log scale"
}

func wide(lo, hi float64) bool {
	return lo > 0 && hi/lo >= 20
}

// logAxis puts a on a log scale (logTicks).
func logAxis(a *plot.Axis) {
	a.Scale = plot.LogScale{}
	a.Tick.Marker = logTicks{}
}

// logTicks labels 1, 2 and 5 times each power of ten, and marks the other
// integers between: gonum's LogTicks labels powers of ten only, which
// leaves a 1 to 250 ms axis with two numbers on it.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for k := math.Floor(math.Log10(lo)); k <= math.Ceil(math.Log10(hi)); k++ {
		for m := 1.0; m < 10; m++ {
			v := m * math.Pow(10, k)
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// linearTicks labels about six round values (steps of 1, 2 or 5 times a
// power of ten) and marks the halves between: gonum's default aims at
// three, too few to read a time off a burst's timeline.
type linearTicks struct{}

func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi <= lo {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', -1, 64)}}
	}
	raw := (hi - lo) / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	decimals := max(0, int(-math.Floor(math.Log10(step))))
	var ts []plot.Tick
	for i := math.Ceil(lo / step * 2); i <= math.Floor(hi/step*2); i++ {
		v := i * step / 2
		t := plot.Tick{Value: v}
		if math.Mod(i, 2) == 0 {
			t.Label = strconv.FormatFloat(v, 'f', decimals, 64)
		}
		ts = append(ts, t)
	}
	return ts
}

// fractionTicks label a CDF's fraction axis where percentiles are read:
// the quartiles and 0.9.
var fractionTicks = plot.ConstantTicks{
	{Value: 0, Label: "0"}, {Value: 0.1}, {Value: 0.2}, {Value: 0.25, Label: "0.25"}, {Value: 0.3}, {Value: 0.4},
	{Value: 0.5, Label: "0.5"}, {Value: 0.6}, {Value: 0.7}, {Value: 0.75, Label: "0.75"}, {Value: 0.8},
	{Value: 0.9, Label: "0.9"}, {Value: 1, Label: "1"},
}

// cdf draws each series as the fraction of its samples at or below each
// value: a step up at every sample.
func (g *chartGroup) cdf(p *plot.Plot) ([]*plotter.Line, error) {
	lo, scale := g.xScale(p)
	p.X.Label.Text = fmt.Sprintf("latency (%s%s)", g.unit, scale)
	p.Y.Label.Text = "fraction of samples at or below"
	var lines []*plotter.Line
	for _, s := range g.series {
		vs := slices.Clone(s.X)
		slices.Sort(vs)
		if scale != "" {
			// A log axis has no 0: a sample of 0 (below the clock's
			// resolution) is drawn at the smallest positive one.
			for i := range vs {
				vs[i] = math.Max(vs[i], lo)
			}
		}
		xys := plotter.XYs{{X: vs[0], Y: 0}}
		for i, v := range vs {
			xys = append(xys, plotter.XY{X: v, Y: float64(i+1) / float64(len(vs))})
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		l.StepStyle = plotter.PostStep
		lines = append(lines, l)
	}
	p.Y.Min, p.Y.Max = 0, 1
	p.Y.Tick.Marker = fractionTicks
	return lines, nil
}

// timeline draws each series as the pods Ready at each moment since the
// start: a step up when each pod became Ready.
func (g *chartGroup) timeline(p *plot.Plot) ([]*plotter.Line, error) {
	p.X.Label.Text = fmt.Sprintf("time since the start (%s)", g.unit)
	p.Y.Label.Text = "pods Ready"
	var lines []*plotter.Line
	for _, s := range g.series {
		ts := slices.Clone(s.X)
		slices.Sort(ts)
		xys := plotter.XYs{{X: 0, Y: 0}}
		for i, t := range ts {
			xys = append(xys, plotter.XY{X: t, Y: float64(i + 1)})
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		l.StepStyle = plotter.PostStep
		lines = append(lines, l)
	}
	// Room above the last pod and after it, so that the lines do not run
	// along the frame; the bound stays in view when every pod beat it.
	last, most := 0.0, 0
	for _, s := range g.series {
		last, most = math.Max(last, slices.Max(s.X)), max(most, len(s.X))
	}
	for _, b := range g.bounds() {
		last = math.Max(last, b)
	}
	p.X.Min, p.X.Max = 0, last*1.04
	p.Y.Min, p.Y.Max = 0, float64(most)*1.05
	return lines, nil
}

// curve draws each series as a line through its points, with a mark on
// each (the sizes measured are few, and a straight segment between them
// is not a measurement).
func (g *chartGroup) curve(p *plot.Plot) ([]*plotter.Line, error) {
	for _, s := range g.series {
		if len(s.Y) != len(s.X) {
			return nil, fmt.Errorf("%s: %d x values but %d y values", s.Name, len(s.X), len(s.Y))
		}
	}
	_, scale := g.xScale(p)
	p.X.Label.Text = "pods on the node" + scale
	p.Y.Label.Text = g.unit
	var lines []*plotter.Line
	for _, s := range g.series {
		xys := make(plotter.XYs, len(s.X))
		for i := range s.X {
			xys[i] = plotter.XY{X: s.X[i], Y: s.Y[i]}
		}
		slices.SortFunc(xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		lines = append(lines, l)
		pts, err := plotter.NewScatter(xys)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		pts.Color = palette[(len(lines)-1)%len(palette)]
		pts.Shape = draw.CircleGlyph{}
		pts.Radius = vg.Points(2.5)
		p.Add(pts)
	}
	// From 0, so that growth reads as a ratio of the height.
	p.Y.Min = math.Min(p.Y.Min, 0)
	return lines, nil
}

// trimFloat writes v with as few digits as it needs (1.3, not 1.300000).
func trimFloat(v float64) string {
	return fmt.Sprintf("%.4g", v)
}
