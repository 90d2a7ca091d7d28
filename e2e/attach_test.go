package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
)

// TestKillDuringAttach: the agent is SIGKILLed right after it asked ECS to
// attach a new ENI (the attach takes a second). The restarted agent first
// sees that ENI Attaching, a transition it did not start and does not wait
// for; it must notice when the attach completes, configure the device and
// serve the pods waiting for it well before the next periodic resync
// (resyncPeriod 2m here).
func TestKillDuringAttach(t *testing.T) {
	sim := ecssim.Config{Delays: ecssim.Delays{Attach: time.Second}}
	n := newNode(t, nodeOptions{extraConfig: testPool + "resyncPeriod: 2m\n", sim: sim, addTimeout: 20 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods := make([]*pod, 4)
	for i := range pods {
		pods[i] = n.newPod(fmt.Sprintf("a%d", i))
	}
	n.startAgent()
	waitFor(t, 20*time.Second, "the first AttachNetworkInterface", func() (bool, string) {
		c := n.sn.Sim.Counters()["AttachNetworkInterface"]
		return c["ok"] > 0, fmt.Sprint(c)
	})
	n.agent.kill()
	attaching := 0
	for _, e := range n.owned(n.sn.Sim.Dump()) {
		if e.Status == "Attaching" {
			attaching++
		}
	}
	if attaching == 0 {
		t.Fatal("no owned ENI is Attaching after the kill: the test did not hit its window")
	}
	n.startAgent()
	start := time.Now()
	n.addAll(ctx, pods)
	t.Logf("pods Ready %s after the restart", time.Since(start).Round(time.Millisecond))
	n.checkBindings(pods)
	n.delAll(ctx, pods)
	n.waitSettled(2, 6, 30*time.Second)
}
