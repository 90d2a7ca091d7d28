package planner_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/planner/plannertest"
)

// start is the time every script begins at.
var start = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

// TestScripts runs planner/testdata/*: each file builds a world in the
// compact text form (plannertest.World.Exec, docs/plan.md), plans, applies,
// and compares the rendered output with the expected text. Update the
// expectations with -rewrite.
func TestScripts(t *testing.T) {
	sc := loadSchema(t)
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		w := plannertest.New(start, observed.Instance{})
		var last planner.Plan
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out := run(t, w, &last, d)
			if d.Cmd != "plan" && d.Cmd != "converge" {
				return out
			}
			// Every plan a script makes must match docs/plan.schema.json.
			b, err := json.Marshal(last)
			if err != nil {
				t.Fatalf("marshal plan: %v", err)
			}
			if errs := sc.Validate(b); len(errs) > 0 {
				t.Errorf("%s: plan JSON does not match the schema:\n%s", d.Pos, strings.Join(errs, "\n"))
			}
			// And every action must say what its kind needs (docs/plan.md).
			if err := last.Validate(); err != nil {
				t.Errorf("%s: invalid plan:\n%v", d.Pos, err)
			}
			return out
		})
	})
}

func run(t *testing.T, w *plannertest.World, last *planner.Plan, d *datadriven.TestData) string {
	t.Helper()
	var out strings.Builder
	body := func() {
		for _, l := range strings.Split(d.Input, "\n") {
			if err := w.Exec(l); err != nil {
				d.Fatalf(t, "%s: %v", l, err)
			}
		}
	}
	violations := func() {
		for _, v := range w.Violations {
			out.WriteString("VIOLATION " + v + "\n")
		}
		w.Violations = nil
	}
	switch d.Cmd {
	case "world":
		body()
		return "ok"
	case "plan":
		body()
		*last = w.Plan()
		// The agent persists the memory of every pass, executed or not.
		w.Memory = last.Memory
		out.WriteString(last.Render())
		if d.HasArg("statuses") {
			out.WriteString(statusLines(last.Statuses))
		}
		if d.HasArg("backoffs") {
			out.WriteString(backoffLines(last.Memory))
		}
		if d.HasArg("prefixes") {
			for _, a := range last.Actions {
				if a.Kind == planner.MoveENI {
					fmt.Fprintf(&out, "MoveENI %s prefix=%v gateway=%v prefixV6=%v gatewayV6=%v\n", a.Target, a.Prefix, a.Gateway, a.PrefixV6, a.GatewayV6)
				}
			}
		}
		if d.HasArg("tokens") {
			for _, a := range last.Actions {
				if a.Kind == planner.CreateENI {
					fmt.Fprintf(&out, "token %d %s %s\n", a.ID, a.Kind, a.ClientToken)
				}
			}
		}
		if d.HasArg("urgent") {
			// Cloud and node actions apart: the cloud's say what waits
			// under throttling, the node's what starts first.
			cloud, node := "", ""
			for _, a := range last.Actions {
				switch {
				case a.Urgent && a.Kind.Cloud():
					cloud += " " + strconv.Itoa(a.ID)
				case a.Urgent:
					node += " " + strconv.Itoa(a.ID)
				}
			}
			out.WriteString("urgent:" + cloud + "\n")
			out.WriteString("urgent on the pod path:" + node + "\n")
		}
		if d.HasArg("json") {
			b, err := last.JSON()
			if err != nil {
				d.Fatalf(t, "json: %v", err)
			}
			out.Write(b)
			out.WriteString("\n")
		}
	case "apply":
		n := len(last.Actions)
		if d.HasArg("n") {
			d.ScanArgs(t, "n", &n)
		}
		errs := w.ApplyN(*last, n)
		fmt.Fprintf(&out, "applied %d of %d actions\n", min(n, len(last.Actions)), len(last.Actions))
		for _, e := range errs {
			out.WriteString("error: " + e.Error() + "\n")
		}
		violations()
		if d.HasArg("state") {
			out.WriteString(w.Dump())
		}
	case "converge":
		body()
		max := 10
		if d.HasArg("max") {
			d.ScanArgs(t, "max", &max)
		}
		rounds, p, errs := w.Converge(max)
		*last = p
		fmt.Fprintf(&out, "rounds %d\n", rounds)
		for _, e := range errs {
			out.WriteString("error: " + e.Error() + "\n")
		}
		violations()
		if !p.Empty() {
			out.WriteString(p.Render())
		}
		out.WriteString(w.Dump())
	case "outcome":
		out.WriteString(outcome(t, w, *last, d))
	case "state":
		out.WriteString(w.Dump())
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	return out.String()
}

// outcome reports how action id of the last plan ended, as the executor
// reports it, and has the world's memory learn from it
// (planner.Memory.Learn), at the world's time:
//
//	outcome id=N [class=C] [vswitch=ID] [no-addresses] [groups-refused] [definite]
//
// with the error's text as input (none: the action succeeded). vswitch
// defaults to the action's own (the executor names an assign's ENI's). It
// prints what the memory learned.
func outcome(t *testing.T, w *plannertest.World, last planner.Plan, d *datadriven.TestData) string {
	t.Helper()
	var id int
	d.ScanArgs(t, "id", &id)
	if id < 0 || id >= len(last.Actions) {
		d.Fatalf(t, "no action %d in the last plan (%d actions)", id, len(last.Actions))
	}
	o := planner.Outcome{Action: last.Actions[id], Err: strings.TrimSpace(d.Input), At: w.Now, VSwitchID: last.Actions[id].VSwitchID}
	if o.Failed() {
		var class string
		d.ScanArgs(t, "class", &class)
		o.Class = planner.FailureClass(class)
	}
	d.MaybeScanArgs(t, "vswitch", &o.VSwitchID)
	o.NoAddresses, o.GroupsRefused, o.Definite = d.HasArg("no-addresses"), d.HasArg("groups-refused"), d.HasArg("definite")
	var ls []planner.Lesson
	w.Memory, ls = w.Memory.Learn([]planner.Outcome{o}, w.Now)
	if len(ls) == 0 {
		return "learned nothing\n"
	}
	var out strings.Builder
	for _, l := range ls {
		fmt.Fprintf(&out, "learned %s %s", l.Kind, l.Key)
		if !l.Until.IsZero() {
			out.WriteString(" until " + l.Until.UTC().Format("15:04:05.000"))
		}
		out.WriteString("\n")
	}
	return out.String()
}

// statusLines renders a plan's statuses, one a line.
func statusLines(l []planner.PodStatus) string {
	var out strings.Builder
	for _, s := range l {
		fmt.Fprintf(&out, "status %s %s %s", s.Key, s.Phase, s.ReasonCode)
		if s.Reason != "" {
			out.WriteString(": " + s.Reason)
		}
		out.WriteString("\n")
	}
	return out.String()
}

// backoffLines renders what the memory backs off (Memory.Backoffs), by key.
func backoffLines(m planner.Memory) string {
	var lines []string
	for k, b := range m.Backoffs {
		lines = append(lines, fmt.Sprintf("backoff %s failures=%d until=%s class=%s\n", k, b.Failures, b.Until.UTC().Format("15:04:05.000"), b.Class))
	}
	slices.Sort(lines)
	if len(lines) == 0 {
		return "no backoffs\n"
	}
	return strings.Join(lines, "")
}
