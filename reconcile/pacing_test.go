package reconcile

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
)

// fakeClock is a cloud.Clock whose time moves only when the test says;
// its sleeps end at once (time itself does not pass).
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- c.Now()
	return ch
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestExecutorUrgentFirst checks the executor's half of "urgent before
// optional" with the real client and simulator and an injected clock:
// while the client backs off after a throttled call, a plan's urgent
// AssignIPs (a waiting pod needs it) runs and its optional one (topping
// up the pool) is deferred; after the backoff, the optional one runs.
func TestExecutorUrgentFirst(t *testing.T) {
	rig := newExecutorRig(t)
	sim, cl, clk, vsw, x := rig.sim, rig.cl, rig.clk, rig.vsw, rig.x
	ctx := context.Background()
	var enis [2]observed.ENI
	for i := range enis {
		e, err := cl.CreateENI(ctx, cloud.CreateENIRequest{VSwitchID: vsw, SecurityGroups: []string{ecssim.DefaultSecurityGroup}})
		if err != nil {
			t.Fatal(err)
		}
		enis[i] = e
	}

	// One throttled call starts the client's backoff.
	sim.InjectFault(ecssim.Fault{Action: "AssignPrivateIpAddresses", Code: "Throttling.User"})
	if _, err := cl.AssignIPv4(cloud.WithPriority(ctx, cloud.Optional), enis[0].ID, 1, nil, ""); !errors.Is(err, cloud.ErrThrottled) {
		t.Fatalf("an optional call refused for throttling: got %v, want ErrThrottled returned at once", err)
	}
	until := cl.BackoffUntil()
	if !until.After(clk.Now()) {
		t.Fatalf("backoff until %v, not after now %v", until, clk.Now())
	}

	assign := func(i int, urgent bool) planner.Action {
		return planner.Action{ID: i, Kind: planner.AssignIPs, Target: enis[i].ID, ENIID: enis[i].ID, IPv4Count: 2, Urgent: urgent,
			ClientToken: "t-" + enis[i].ID + "-" + clk.Now().Format(time.RFC3339Nano)}
	}
	ips := func() [2]int {
		t.Helper()
		var n [2]int
		for i, e := range enis {
			got, err := cl.ListENIs(ctx, cloud.ENIFilter{IDs: []string{e.ID}})
			if err != nil || len(got) != 1 {
				t.Fatalf("list %s: %v (%d found)", e.ID, err, len(got))
			}
			n[i] = len(got[0].IPv4)
		}
		return n
	}
	before := ips()

	x.dispatch(ctx, planner.Plan{Actions: []planner.Action{assign(0, true), assign(1, false)}}, nil, false)
	x.wg.Wait()
	if got := ips(); got[0] != before[0]+2 || got[1] != before[1] {
		t.Fatalf("during the backoff: addresses %v, then %v: want the urgent assign (ENI 0) done and the optional one (ENI 1) deferred", before, got)
	}
	if d, ok := x.deferredUntil(); !ok || !d.Equal(until) {
		t.Fatalf("deferredUntil = %v, %v: want %v, true (the loop wakes when the backoff ends)", d, ok, until)
	}

	clk.advance(until.Sub(clk.Now()))
	x.dispatch(ctx, planner.Plan{Actions: []planner.Action{assign(1, false)}}, nil, false)
	x.wg.Wait()
	if got := ips(); got[1] != before[1]+2 {
		t.Fatalf("after the backoff: ENI 1 has %d addresses, want %d: the optional assign must run", got[1], before[1]+2)
	}
	if _, ok := x.deferredUntil(); ok {
		t.Fatal("nothing is deferred after the backoff, but deferredUntil says so")
	}
}
