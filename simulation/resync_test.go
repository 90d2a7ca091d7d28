package simulation

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
)

// TestFleetResyncsSpread: a fleet that joins at one instant does not
// resync at one instant ever after. Each agent takes its routine full
// observation after 75-100% of resyncPeriod, a share drawn anew each
// time, and on time (not at its next heartbeat): so within a few periods
// the fleet's describes spread out, and no node goes longer than the
// period without one. Before d0708fc, with the production heartbeat of
// 2 s, all 50 nodes took theirs within the same 5 s, every period, and
// with no heartbeat none resynced at all (the resync was found due on
// heartbeat ticks only).
func TestFleetResyncsSpread(t *testing.T) {
	const nodes = 50
	resync := desired.DefaultResyncPeriod
	var at map[int][]time.Duration
	synctest.Test(t, func(t *testing.T) {
		w, cleanup, err := setup(Config{Seed: 1, Nodes: nodes, Profile: ecssim.ProfileFast, AccountQPS: 1000,
			Heartbeat: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer cleanup()
		at = map[int][]time.Duration{}
		w.onCall = func(n *node, action, outcome string) {
			if action == "DescribeVSwitches" && outcome == "ok" {
				at[n.idx] = append(at[n.idx], w.clk.Now().Sub(Start))
			}
		}
		for _, n := range w.nodes {
			if err := n.join(); err != nil {
				t.Fatal(err)
			}
			n.newPod("p1")
		}
		w.loop(Start.Add(20 * time.Minute))
		w.quiesce()
		if len(w.violations) > 0 {
			t.Fatalf("invariants broken: %v", w.violations)
		}
	})
	var all []time.Duration
	for i := range nodes {
		ts := at[i]
		if len(ts) < 8 {
			t.Fatalf("node %d took %d full observations in 20 minutes: want one at least every %v", i, len(ts), resync)
		}
		for j := 1; j < len(ts); j++ {
			if gap := ts[j] - ts[j-1]; gap > resync+time.Second {
				t.Errorf("node %d: %v between full observations at %v and %v: more than resyncPeriod %v", i, gap, ts[j-1], ts[j], resync)
			}
		}
		for _, x := range ts {
			if x > 10*time.Minute {
				all = append(all, x)
			}
		}
	}
	// After five periods, the most full observations in any 5 s window.
	slices.Sort(all)
	most, first := 0, 0
	for i := range all {
		for all[i]-all[first] > 5*time.Second {
			first++
		}
		most = max(most, i-first+1)
	}
	t.Logf("%d full observations after minute 10; at most %d in any 5 s", len(all), most)
	if most > nodes/2 {
		t.Fatalf("%d of %d nodes took a full observation within 5 s of each other after minute 10: the fleet still resyncs in bursts", most, nodes)
	}
}
