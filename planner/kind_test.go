package planner_test

import (
	"testing"

	"github.com/enidnet/enid/planner"
)

func TestActionKinds(t *testing.T) {
	for _, tc := range []struct {
		kind               planner.ActionKind
		symbol             rune
		cloud, destructive bool
	}{
		{planner.CreateENI, '+', true, false},
		{planner.AttachENI, '+', true, false},
		{planner.AssignIPs, '+', true, false},
		{planner.UnassignIPs, '-', true, true},
		{planner.DetachENI, '-', true, true},
		{planner.DeleteENI, '-', true, true},
		{planner.ConfigureENI, '~', false, false},
		{planner.SetupPod, '+', false, false},
		{planner.TeardownPod, '-', false, true},
		{planner.MoveENI, '+', false, false},
		{planner.ReturnENI, '-', false, true},
		{planner.PublishStatus, '~', false, false},
		{planner.UpdateENI, '~', true, false},
	} {
		if got := tc.kind.Symbol(); got != tc.symbol {
			t.Errorf("%s.Symbol() = %q, want %q", tc.kind, got, tc.symbol)
		}
		if got := tc.kind.Cloud(); got != tc.cloud {
			t.Errorf("%s.Cloud() = %v, want %v", tc.kind, got, tc.cloud)
		}
		if got := tc.kind.Destructive(); got != tc.destructive {
			t.Errorf("%s.Destructive() = %v, want %v", tc.kind, got, tc.destructive)
		}
	}
}

// TestDeterministic: the same inputs give the same plan, byte for byte.
func TestDeterministic(t *testing.T) {
	d, o := benchState(300, false)
	a, _ := planner.Make(d, o, planner.Options{Now: start}).JSON()
	for range 5 {
		b, _ := planner.Make(d, o, planner.Options{Now: start}).JSON()
		if string(a) != string(b) {
			t.Fatal("two plans of the same inputs differ")
		}
	}
}
