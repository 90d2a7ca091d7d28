package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gonum.org/v1/plot"
)

// svgTexts parses b as XML, requires an <svg> root, and returns the text
// of its <text> elements (as a reader sees them: entities decoded).
func svgTexts(t *testing.T, b []byte) []string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	var texts []string
	depth, inText, root := 0, false, ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				root = tok.Name.Local
			}
			depth++
			inText = tok.Name.Local == "text"
			if inText {
				texts = append(texts, "")
			}
		case xml.EndElement:
			depth--
			inText = false
		case xml.CharData:
			if inText {
				texts[len(texts)-1] += string(tok)
			}
		}
	}
	if root != "svg" || depth != 0 {
		t.Fatalf("root element %q, depth %d at the end: not an SVG document", root, depth)
	}
	return texts
}

func TestChartsOfEachKind(t *testing.T) {
	rs := []Result{
		{Scenario: "vs reference: enid-cni", Series: []Series{
			{Name: "enid-cni", Chart: "ADD latency", Kind: CDF, Unit: "ms", X: []float64{0.9, 1.2, 250, 3}},
			{Name: "enid-cni", Chart: "DEL latency", Kind: CDF, Unit: "ms", X: []float64{2, 3, 4}},
		}},
		// Another row's series join the same charts.
		{Scenario: "vs reference: ptp", Series: []Series{
			{Name: "ptp+host-local", Chart: "ADD latency", Kind: CDF, Unit: "ms", X: []float64{5, 6, 7}},
			{Name: "ptp+host-local", Chart: "DEL latency", Kind: CDF, Unit: "ms", X: []float64{1, 2}},
		}},
		{Scenario: "cold burst", Series: []Series{
			{Name: "round 1", Kind: Timeline, Unit: "s", X: []float64{0.1, 0.2, 1.5, 1.6}, Bound: 1.3},
			{Name: "round 2", Kind: Timeline, Unit: "s", X: []float64{0.1, 1.7}, Bound: 1.3},
		}},
		{Scenario: "node scale", Series: []Series{
			{Name: "ADD p50", Kind: Curve, Unit: "ms", X: []float64{10, 100, 1000}, Y: []float64{9, 10, 11}},
			{Name: "ADD p99", Kind: Curve, Unit: "ms", X: []float64{1000, 10, 100}, Y: []float64{40, 20, 30}},
			{Name: "RSS", Kind: Curve, Unit: "MiB", X: []float64{10, 100, 1000}, Y: []float64{30, 40, 60}},
		}},
	}
	dir := t.TempDir()
	files, err := writeCharts(dir, rs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"add-latency.svg":    {"ADD latency", "enid-cni (n=4)", "ptp+host-local (n=3)", "latency (ms, log scale)", "fraction of samples at or below"},
		"del-latency.svg":    {"DEL latency", "enid-cni (n=3)", "ptp+host-local (n=2)", "latency (ms)", "fraction of samples at or below"},
		"cold-burst.svg":     {"cold burst", "round 1: 4 Ready, the last at 1.60 s", "round 2: 2 Ready, the last at 1.70 s", "lower bound 1.3 s", "time since the start (s)", "pods Ready"},
		"node-scale-ms.svg":  {"node scale", "ADD p50", "ADD p99", "pods on the node, log scale", "ms"},
		"node-scale-mib.svg": {"node scale", "RSS", "pods on the node, log scale", "MiB"},
	}
	var got []string
	for _, f := range files {
		got = append(got, filepath.Base(f))
	}
	var names []string
	for n := range want {
		names = append(names, n)
	}
	slices.Sort(got)
	slices.Sort(names)
	if diff := cmp.Diff(names, got); diff != "" {
		t.Fatalf("chart files (-want +got):\n%s", diff)
	}
	for name, texts := range want {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		have := svgTexts(t, b)
		for _, w := range texts {
			if !slices.Contains(have, w) {
				t.Errorf("%s has no text %q; it has %q", name, w, have)
			}
		}
		// The RSS line belongs on the MiB chart only, one chart per unit.
		if name == "node-scale-ms.svg" && slices.Contains(have, "RSS") {
			t.Errorf("%s draws RSS, whose unit is MiB", name)
		}
	}
	// The linear CDF (a range of 4x) must not be drawn on a log scale.
	b, _ := os.ReadFile(filepath.Join(dir, "del-latency.svg"))
	if slices.Contains(svgTexts(t, b), "latency (ms, log scale)") {
		t.Errorf("del-latency.svg is on a log scale for samples 1..4 ms")
	}
}

// A scenario that kept no samples (skipped, or no series at all) draws
// nothing, and the directory is not even made.
func TestNoSamplesNoChart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "x.charts")
	files, err := writeCharts(dir, []Result{
		{Scenario: "warm ADD", Skipped: "needs root"},
		{Scenario: "cold burst", Series: []Series{{Name: "round 1", Kind: Timeline, Unit: "s"}}},
	})
	if err != nil || len(files) != 0 {
		t.Fatalf("writeCharts = %q, %v; want no file", files, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat %s: %v; want it absent", dir, err)
	}
}

// A curve whose X and Y differ in length is a harness bug: say so, and
// still draw the other charts.
func TestBadCurveIsAnError(t *testing.T) {
	dir := t.TempDir()
	files, err := writeCharts(dir, []Result{{Scenario: "s", Series: []Series{
		{Name: "bad", Kind: Curve, Unit: "ms", X: []float64{1, 2}, Y: []float64{1}},
		{Name: "ok", Kind: CDF, Unit: "ms", X: []float64{1, 2}},
	}}})
	if err == nil || !strings.Contains(err.Error(), "bad") {
		t.Errorf("err = %v, want one naming the series bad", err)
	}
	if len(files) != 1 || filepath.Base(files[0]) != "s.svg" {
		t.Errorf("files = %q, want the CDF s.svg", files)
	}
}

func TestSeriesJSONRoundTrip(t *testing.T) {
	in := Result{Scenario: "cold burst", Series: []Series{
		{Name: "round 1", Kind: Timeline, Unit: "s", X: []float64{0.25, 1.5}, Bound: 1.3},
		{Name: "RSS", Chart: "node scale", Kind: Curve, Unit: "MiB", X: []float64{10, 1000}, Y: []float64{30, 60}},
	}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	// The kinds are written as the words the docs use.
	for _, w := range []string{`"kind":"timeline"`, `"kind":"curve"`, `"bound":1.3`} {
		if !strings.Contains(string(b), w) {
			t.Errorf("JSON lacks %s: %s", w, b)
		}
	}
	var out struct {
		Series []Series `json:"series"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in.Series, out.Series); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	// A result without samples writes no series key at all.
	b, _ = json.Marshal(Result{Scenario: "planner"})
	if strings.Contains(string(b), "series") {
		t.Errorf("a result without series writes %s", b)
	}
}

func TestChartsDirAndSlug(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/tmp/x.json", "/tmp/x.charts"},
		{"bench-results.json", "bench-results.charts"},
		{"/tmp/noext", "/tmp/noext.charts"},
	} {
		if got := chartsDir(c.in); got != c.want {
			t.Errorf("chartsDir(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"vs reference plugins: ADD", "vs-reference-plugins-add"},
		{"prefix: cold burst", "prefix-cold-burst"},
		{"  --  ", "chart"},
	} {
		if got := slug(c.in); got != c.want {
			t.Errorf("slug(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestTicks(t *testing.T) {
	labels := func(ts []plot.Tick) []string {
		var ls []string
		for _, t := range ts {
			if t.Label != "" {
				ls = append(ls, t.Label)
			}
		}
		return ls
	}
	for _, c := range []struct {
		name   string
		ticker plot.Ticker
		lo, hi float64
		want   []string
	}{
		{"log, floor to p99", logTicks{}, 0.8, 250, []string{"1", "2", "5", "10", "20", "50", "100", "200"}},
		{"log, bounds on the edges", logTicks{}, 10, 1000, []string{"10", "20", "50", "100", "200", "500", "1000"}},
		{"linear, a burst", linearTicks{}, 0, 1.7, []string{"0.0", "0.5", "1.0", "1.5"}},
		{"linear, pods", linearTicks{}, 0, 64, []string{"0", "20", "40", "60"}},
		{"linear, one value", linearTicks{}, 3, 3, []string{"3"}},
	} {
		if diff := cmp.Diff(c.want, labels(c.ticker.Ticks(c.lo, c.hi))); diff != "" {
			t.Errorf("%s: labels (-want +got):\n%s", c.name, diff)
		}
	}
}
