package planner_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
)

// TestScratchReuseChangesNoPlan plans states of different sizes and modes
// one after another, so that each plan reuses the working memory an earlier
// one left (planner/scratch.go), and checks that every plan is the one its
// state gave the first time. A scratch handed back with a pod state, an
// address index entry or a join of the previous plan still in it shows here
// as a plan that changes with what was planned before it.
func TestScratchReuseChangesNoPlan(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type state struct {
		name string
		d    desired.State
		o    observed.State
	}
	var states []state
	for _, s := range []struct {
		name string
		make func(int, bool) (desired.State, observed.State)
		n    int
		warm bool
	}{
		{"burst/1000", benchState, 1000, false},
		{"warm/10", benchState, 10, true},
		{"prefix burst/100", benchPrefixState, 100, false},
		{"warm/1000", benchState, 1000, true},
		{"burst/10", benchState, 10, false},
		{"prefix warm/300", benchPrefixState, 300, true},
	} {
		d, o := s.make(s.n, s.warm)
		states = append(states, state{s.name, d, o})
	}
	// Half of a warm node's pods deleted: kernel states and statuses
	// with no live entry, which the plan tears down.
	d, o := benchState(1000, true)
	d.Entries = d.Entries[:500]
	states = append(states, state{"warm/1000, half deleted", d, o})
	plan := func(s state) string {
		mem := planner.Make(s.d, s.o, planner.Options{Now: now}).Memory
		b, err := json.Marshal(planner.Make(s.d, s.o, planner.Options{Now: now, Memory: mem}))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	first := map[string]string{}
	// Forward, then backward: each state is planned after a larger one
	// and after a smaller one.
	order := []int{0, 1, 2, 3, 4, 5, 6, 6, 5, 4, 3, 2, 1, 0, 3, 6, 1, 5, 0, 6, 4, 2}
	for _, i := range order {
		s := states[i]
		got := plan(s)
		want, seen := first[s.name]
		if !seen {
			first[s.name] = got
			continue
		}
		if got != want {
			t.Fatalf("the plan of %s changed when planned again after other states (%d bytes, %d the first time)", s.name, len(got), len(want))
		}
	}
}

// TestRecycleBuildsInTheSpentPlan: a plan made with Options.Recycle is
// built in the spent plan's arrays when they are large enough, and
// nothing of the spent plan stays in them (a status or an action left
// there would keep its pod's strings and its plan's slabs alive for as
// long as the arrays are recycled). TestRandomWorlds checks that recycled
// plans are the plans built afresh.
func TestRecycleBuildsInTheSpentPlan(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d, o := benchState(1000, false)
	spent := planner.Make(d, o, planner.Options{Now: now})
	acts, sts := spent.Actions, spent.Statuses
	if len(acts) < 1000 || len(sts) < 1000 {
		t.Fatalf("a burst of 1,000 pods planned %d actions and %d statuses", len(acts), len(sts))
	}
	d, o = benchState(500, true)
	mem := planner.Make(d, o, planner.Options{Now: now}).Memory
	p := planner.Make(d, o, planner.Options{Now: now, Memory: mem, Recycle: spent})
	if !p.Empty() {
		t.Fatalf("the warm node is not converged:\n%s", p.Render())
	}
	if len(p.Statuses) >= len(sts) {
		t.Fatalf("the warm node has %d statuses, want fewer than the spent plan's %d", len(p.Statuses), len(sts))
	}
	if cap(p.Actions) != cap(acts) || cap(p.Actions) > 0 && &p.Actions[:1][0] != &acts[0] {
		t.Errorf("the plan's actions are not in the spent plan's array (cap %d, spent %d)", cap(p.Actions), cap(acts))
	}
	if len(p.Statuses) == 0 || &p.Statuses[0] != &sts[0] {
		t.Errorf("the plan's %d statuses are not in the spent plan's array", len(p.Statuses))
	}
	for i := range acts {
		if !reflect.ValueOf(acts[i]).IsZero() {
			t.Fatalf("action %d of the spent plan still in its array: %s %s", i, acts[i].Kind, acts[i].Target)
		}
	}
	for i := len(p.Statuses); i < len(sts); i++ {
		if !reflect.ValueOf(sts[i]).IsZero() {
			t.Fatalf("status %d of the spent plan still in its array: %s", i, sts[i].Key)
		}
	}
}
