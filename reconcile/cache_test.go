package reconcile

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// TestNeedsRefreshInTransit: an ENI in an asynchronous transition asks for
// a full observation every transitRefresh, or its end would go unseen until
// the next resync (a crash mid-attach left it so).
func TestNeedsRefreshInTransit(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		status observed.ENIStatus
		after  time.Duration
		want   bool
	}{
		{"in use, fresh", observed.ENIInUse, transitRefresh, false},
		{"available, fresh", observed.ENIAvailable, transitRefresh, false},
		{"attaching, just observed", observed.ENIAttaching, transitRefresh / 2, false},
		{"attaching", observed.ENIAttaching, transitRefresh, true},
		{"detaching", observed.ENIDetaching, transitRefresh, true},
		{"deleting", observed.ENIDeleting, transitRefresh, true},
		{"in use, resync due", observed.ENIInUse, time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c cache
			c.replace(observed.State{At: t0, Complete: true, ENIs: []observed.ENI{{ID: "eni-1", Status: tc.status}}})
			if got := c.needsRefresh(t0.Add(tc.after), time.Minute); got != tc.want {
				t.Errorf("needsRefresh %s after a full observation = %v, want %v", tc.after, got, tc.want)
			}
		})
	}
}

// TestRefreshAfterConflict: a cloud action refused because the cloud's
// state was not what the cache said asks for a full observation at once
// (markDirty) and for another once describes have caught up
// (confirmRefresh after the refusal), even when this agent acted again in
// between: the first may be as stale as the one that misled the action.
func TestRefreshAfterConflict(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var c cache
	c.replace(observed.State{At: t0, Complete: true})
	c.noteCloudAction(t0)
	c.noteConflict(t0)
	c.markDirty()
	if !c.needsRefresh(t0, time.Hour) {
		t.Fatal("no full observation due right after a conflict")
	}
	// The observation right after it, then another action of the agent.
	c.replace(observed.State{At: t0.Add(100 * time.Millisecond), Complete: true})
	c.noteCloudAction(t0.Add(time.Second))
	if c.needsRefresh(t0.Add(confirmRefresh-time.Millisecond), time.Hour) {
		t.Error("a full observation due before describes caught up with the conflict")
	}
	if !c.needsRefresh(t0.Add(confirmRefresh), time.Hour) {
		t.Errorf("no full observation due %v after the conflict: the one after it may have been stale", confirmRefresh)
	}
	if at, ok := c.refreshAt(time.Hour); !ok || !at.Equal(t0.Add(confirmRefresh)) {
		t.Errorf("refreshAt = %v, %v: want %v (the loop wakes then)", at, ok, t0.Add(confirmRefresh))
	}
	// Once one was taken after that, the conflict asks for nothing more
	// (the action at 1s asks for its own confirmation, confirmRefresh
	// after this observation: the rule that was there before).
	c.replace(observed.State{At: t0.Add(confirmRefresh), Complete: true})
	if at, ok := c.refreshAt(time.Hour); !ok || !at.Equal(t0.Add(2*confirmRefresh)) {
		t.Errorf("refreshAt after the observation that settled the conflict = %v, %v: want %v (the action's confirmation alone)", at, ok, t0.Add(2*confirmRefresh))
	}
}

// TestReplaceNodeKeepsHostRoutes: a read of the node namespace alone
// cannot see an exclusive pod's host routes (they are in its namespace);
// the cache keeps those of the last full observation, or the planner would
// set every exclusive pod up again after each node read.
func TestReplaceNodeKeepsHostRoutes(t *testing.T) {
	key := observed.AttachmentKey{ContainerID: "c1", IfName: "eth0"}
	routes := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("192.168.0.1/32")}
	var c cache
	c.replace(observed.State{Complete: true, Node: observed.Node{Pods: []observed.PodNet{
		{Key: key, Exclusive: true, HostRoutes: routes, Healthy: true}}}})
	c.replaceNode(observed.Node{Pods: []observed.PodNet{{Key: key, Exclusive: true, Healthy: true}}})
	st, _ := c.snapshot()
	if len(st.Node.Pods) != 1 || !slices.Equal(st.Node.Pods[0].HostRoutes, routes) {
		t.Errorf("pods after a node read: %+v, want c1 with host routes %v", st.Node.Pods, routes)
	}
}

// TestTallyHandsNothingOut: the heartbeat and the metrics count the
// published statuses after every pass, while the pass's actions edit the
// cache; a count that took a snapshot would make each of those edits copy
// its list again (a thousand pods' worth per edit). The count is right,
// and an edit after it finds its list still owned.
func TestTallyHandsNothingOut(t *testing.T) {
	var st observed.State
	for i := range 100 {
		k := observed.AttachmentKey{ContainerID: fmt.Sprintf("c%03d", i), IfName: "eth0"}
		st.Node.Pods = append(st.Node.Pods, observed.PodNet{Key: k, Healthy: true})
		st.Node.Published = append(st.Node.Published, observed.Binding{Key: k, Phase: planner.PhaseReady})
	}
	st.Node.Published[0].Phase = planner.PhasePending
	st.ENIs = []observed.ENI{{ID: "eni-1", InstanceID: "i-1", Status: observed.ENIInUse, Tags: map[string]string{observed.TagManagedBy: observed.TagManagedByValue, observed.TagOwner: "i-1"}}}
	var c cache
	c.replace(st)
	k := observed.AttachmentKey{ContainerID: "c999", IfName: "eth0"}
	setup := planner.Action{Kind: planner.SetupPod, Pod: &planner.PodTarget{Key: k}}
	c.before(setup) // the first edit copies the pods
	owned := &c.fx.Peek().Node.Pods[0]
	phases, enis := c.tally("i-1")
	if phases[status.Ready] != 99 || phases[status.Pending] != 1 || enis != 1 {
		t.Errorf("tally: %v and %d ENIs: want 99 Ready, 1 Pending, 1 ENI", phases, enis)
	}
	c.apply(setup, planner.Result{HostVeth: "v"})
	if &c.fx.Peek().Node.Pods[0] != owned {
		t.Error("the edit after a tally copied the pods again: the tally handed the state out")
	}
}
