package planner_test

import (
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/enidnet/enid/planner"
)

// TestDetachHoldsNothingOfThePlan: a plan cuts its statuses, their routes,
// its pod targets and its dependency lists from arrays its actions share
// (one array each, not one allocation per action). An action the executor
// keeps past its pass must not keep those arrays alive (a node that took
// 5,000 entries at once kept hundreds of plans' status arrays, 1.7 GB):
// Detach copies what it points to, equal in value, sharing no memory with
// the plan.
func TestDetachHoldsNothingOfThePlan(t *testing.T) {
	d, o := benchState(60, false) // a burst: a setup and a status per pod
	p := planner.Make(d, o, planner.Options{Now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	inStatuses := func(s *planner.PodStatus) bool {
		if len(p.Statuses) == 0 {
			return false
		}
		lo := uintptr(unsafe.Pointer(&p.Statuses[0]))
		hi := lo + uintptr(len(p.Statuses))*unsafe.Sizeof(p.Statuses[0])
		at := uintptr(unsafe.Pointer(s))
		return at >= lo && at < hi
	}
	shared, setups, publishes := 0, 0, 0
	for _, a := range p.Actions {
		c := a.Detach()
		if diff := cmp.Diff(a, c, cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})); diff != "" {
			t.Fatalf("%s %s: Detach changed the action (-plan +detached):\n%s", a.Kind, a.Target, diff)
		}
		if len(a.DependsOn) > 0 && &a.DependsOn[0] == &c.DependsOn[0] {
			t.Errorf("%s %s: the detached dependency list is the plan's", a.Kind, a.Target)
		}
		if a.Pod != nil {
			setups++
			if c.Pod == a.Pod {
				t.Errorf("%s %s: the detached pod target is the plan's", a.Kind, a.Target)
			}
		}
		if a.Status != nil {
			publishes++
			if inStatuses(a.Status) {
				shared++
			}
			if c.Status == a.Status || inStatuses(c.Status) {
				t.Errorf("%s %s: the detached status is the plan's", a.Kind, a.Target)
			}
			if len(a.Status.Routes) > 0 && &a.Status.Routes[0] == &c.Status.Routes[0] {
				t.Errorf("%s %s: the detached status's routes are the plan's", a.Kind, a.Target)
			}
		}
	}
	// The test means something only if the plan shares: its statuses
	// point into Plan.Statuses.
	if setups == 0 || publishes == 0 || shared == 0 {
		t.Fatalf("%d setups, %d statuses, %d of them in Plan.Statuses: want a burst whose statuses the plan shares", setups, publishes, shared)
	}
}
