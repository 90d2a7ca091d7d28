package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// Result is what one scenario measured: the figures, the target it is held
// to, and any broken invariant (which fails the run; a missed target does
// not).
type Result struct {
	// Scenario is the short name ("warm-add", "cold-burst", ...).
	Scenario string `json:"scenario"`
	// Setup states the size and the cloud latency model.
	Setup string `json:"setup"`
	// Figures are the measured values, in table order.
	Figures []Figure `json:"figures"`
	// Target states what the figures are held to ("" when none).
	Target string `json:"target,omitempty"`
	// Met is nil when the target was not assessed (skipped, or no target).
	Met *bool `json:"met,omitempty"`
	// Skipped says why the scenario did not run ("" when it ran).
	Skipped string `json:"skipped,omitempty"`
	// Broken lists invariant violations: an IP bound twice, a pod never
	// Ready, the simulator's Check failing. Any entry fails the run.
	Broken []string `json:"broken,omitempty"`
	// Notes explain the figures (what the bound is made of, why a target
	// was missed).
	Notes []string `json:"notes,omitempty"`
	// Elapsed is the wall time the scenario took.
	Elapsed Seconds `json:"elapsedSeconds"`
	// Series are raw samples behind the figures, kept so that a reader
	// can see the whole distribution and not only its percentiles; the
	// harness draws them (bench/chart.go). Nil when the scenario keeps none.
	Series []Series `json:"series,omitempty"`
}

// SeriesKind says what a Series' numbers are, and so how it is drawn.
type SeriesKind string

const (
	// CDF: X holds latency samples in Unit, in any order; drawn as the
	// fraction of samples at or below each latency.
	CDF SeriesKind = "cdf"
	// Timeline: X holds, for each pod, the time in seconds (Unit "s")
	// from the start (a burst's entries written) to its Ready status; a
	// pod never Ready is left out. Drawn as the pods Ready over time.
	Timeline SeriesKind = "timeline"
	// Curve: X is the number of pods on the node and Y[i] a figure in
	// Unit at X[i] (len(Y) == len(X)). Drawn as a line through the points,
	// one chart per Chart and Unit.
	Curve SeriesKind = "curve"
)

// Series is one named list of samples. Series of a run that share Chart,
// Kind and Unit (across results: the reference plugins' rows) are drawn on
// one chart, one line each.
type Series struct {
	// Name is the line's name in the legend ("enid-cni", "round 3").
	Name string `json:"name"`
	// Chart is the chart's title, and its file name once slugged; "" is
	// the result's Scenario.
	Chart string     `json:"chart,omitempty"`
	Kind  SeriesKind `json:"kind"`
	// Unit is that of X for CDF and Timeline, of Y for Curve.
	Unit string    `json:"unit"`
	X    []float64 `json:"x"`
	// Y is set for Curve only.
	Y []float64 `json:"y,omitempty"`
	// Bound, when not 0, is the lower bound (in X's unit) that the
	// samples are held to, such as a burst's API bound; drawn as a
	// vertical line.
	Bound float64 `json:"bound,omitempty"`
}

// msOf is d in milliseconds, to the microsecond (the figures' precision).
func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// millis is ds in milliseconds (msOf), in the order given.
func millis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = msOf(d)
	}
	return out
}

// Figure is one measured value.
type Figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// Unit is "ms", "s", "MiB", "calls", "x" (a ratio), ... .
	Unit string `json:"unit"`
}

// Seconds is a duration written as seconds in JSON.
type Seconds time.Duration

// MarshalJSON writes the duration in seconds.
func (s Seconds) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(s).Seconds())
}

func (r *Result) add(name string, v float64, unit string) {
	r.Figures = append(r.Figures, Figure{Name: name, Value: v, Unit: unit})
}

func (r *Result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

func (r *Result) broken(format string, args ...any) {
	r.Broken = append(r.Broken, fmt.Sprintf(format, args...))
}

func (r *Result) judge(target string, met bool) {
	r.Target = target
	r.Met = &met
}

func (f Figure) String() string {
	switch {
	case f.Unit == "x":
		return fmt.Sprintf("%s %.2fx", f.Name, f.Value)
	case f.Value == float64(int64(f.Value)) && f.Value < 1e9:
		return strings.TrimSpace(fmt.Sprintf("%s %d %s", f.Name, int64(f.Value), f.Unit))
	case f.Value >= 100:
		return strings.TrimSpace(fmt.Sprintf("%s %.0f %s", f.Name, f.Value, f.Unit))
	case f.Value >= 10:
		return strings.TrimSpace(fmt.Sprintf("%s %.1f %s", f.Name, f.Value, f.Unit))
	default:
		return strings.TrimSpace(fmt.Sprintf("%s %.3g %s", f.Name, f.Value, f.Unit))
	}
}

// renderTable writes the results as one Markdown table.
func renderTable(w io.Writer, rs []Result) {
	fmt.Fprintln(w, "| scenario | setup | measured | target | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range rs {
		var figs []string
		for _, f := range r.Figures {
			figs = append(figs, f.String())
		}
		verdict := "-"
		switch {
		case r.Skipped != "":
			verdict = "skipped: " + r.Skipped
		case len(r.Broken) > 0:
			verdict = "**BROKEN**: " + strings.Join(r.Broken, "; ")
		case r.Met != nil && *r.Met:
			verdict = "met"
		case r.Met != nil:
			verdict = "**missed**"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.Scenario, cell(r.Setup), cell(strings.Join(figs, "; ")), cell(r.Target), cell(verdict))
	}
	var notes []string
	for _, r := range rs {
		for _, n := range r.Notes {
			notes = append(notes, fmt.Sprintf("- %s: %s", r.Scenario, n))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, strings.Join(notes, "\n"))
	}
}

func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ")
}

// Report is the JSON the harness writes.
type Report struct {
	Command string   `json:"command"`
	Machine Machine  `json:"machine"`
	Quick   bool     `json:"quick"`
	Started string   `json:"started"`
	Results []Result `json:"results"`
}

// Machine describes where the run happened.
type Machine struct {
	NProc     int    `json:"nproc"`
	CPU       string `json:"cpu"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"goVersion"`
	Root      bool   `json:"root"`
}

func (m Machine) String() string {
	return fmt.Sprintf("%d x %s, Linux %s, %s", m.NProc, m.CPU, m.Kernel, m.GoVersion)
}

func writeJSON(path string, rep Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// figureValues returns the values of the figure name over the runs rs,
// sorted (for medians and extremes of repeated runs).
func figureValues(rs []Result, name string) []float64 {
	var vs []float64
	for _, x := range rs {
		for _, f := range x.Figures {
			if f.Name == name {
				vs = append(vs, f.Value)
			}
		}
	}
	slices.Sort(vs)
	return vs
}
