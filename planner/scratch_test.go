package planner_test

import (
	"encoding/json"
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
