package simulation

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
)

// TestBurstWakesOnlyForAHeldRound: a pod the warm pool serves costs the
// agent its entry's pass and the pass that learns its setup's outcome,
// and none at the end of the 30 ms coalescing window its entry opened:
// that window holds back a round that creates an ENI or that pods wait
// for, and this one held nothing. Before, every entry change brought that
// pass, a third of the passes per pod start at 1,000 pods on a node
// (docs/benchmarks.md, "No pass for an empty window"). A pod whose round
// creates an ENI still has it held, and released by a pass at the
// window's end (the second half).
func TestBurstWakesOnlyForAHeldRound(t *testing.T) {
	// A pool of four: the pod's address is there.
	passes := passesForOnePod(t, [2]int{4, 8})
	for _, p := range passes {
		if p >= 30*time.Millisecond {
			t.Errorf("a pass %v after the entry of a pod the pool served (passes at %v): nothing was held for the coalescing window to end", p, passes)
		}
	}
	// No pool: the pod's round creates an ENI, held for the window and
	// released by a pass at its end.
	passes = passesForOnePod(t, [2]int{0, 0})
	if !slices.Contains(passes, 30*time.Millisecond) {
		t.Errorf("passes at %v after the entry of a pod that needs an ENI: none at the end of its 30 ms window", passes)
	}
}

// passesForOnePod starts a node with the pool given (minIdle, maxIdle),
// lets it settle, writes one pod's entry and returns when, after the
// entry, the agent's passes ran (the first five seconds). The pod must be
// Ready by then.
func passesForOnePod(t *testing.T, pool [2]int) []time.Duration {
	var passes []time.Duration
	synctest.Test(t, func(t *testing.T) {
		w, cleanup, err := setup(Config{Seed: 1, Nodes: 1, Profile: ecssim.ProfileFast, AccountQPS: 1000, Heartbeat: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer cleanup()
		n := w.nodes[0]
		n.config = w.configYAML(pool, false)
		if err := n.join(); err != nil {
			t.Fatal(err)
		}
		w.loop(Start.Add(30 * time.Second)) // the pool fills, the node settles
		at, before := w.clk.Now(), passCount(t, n)
		n.newPod("p1")
		w.loopUntil(at.Add(5*time.Second), func() bool {
			for c := passCount(t, n); before < c; before++ {
				passes = append(passes, w.clk.Now().Sub(at))
			}
			return false
		})
		ready := w.stats.PodsReady
		w.quiesce()
		t.Logf("pool %v: passes after the entry, at %v", pool, passes)
		if ready < 1 {
			t.Fatalf("pool %v: the pod is not Ready 5 s after its entry", pool)
		}
		if len(w.violations) > 0 {
			t.Fatalf("invariants broken: %v", w.violations)
		}
	})
	return passes
}

// passCount reads the node's agent's enid_reconcile_passes_total.
func passCount(t *testing.T, n *node) int {
	t.Helper()
	mfs, err := n.cur.agent.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "enid_reconcile_passes_total" {
			return int(mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
	t.Fatal("no enid_reconcile_passes_total")
	return 0
}
