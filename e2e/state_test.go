package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestRestartWithoutAgentState: the agent keeps no private database. With
// eight pods running it is SIGKILLed, its state dir (planner memory) and
// every published status are deleted, and it is started again: it finds
// every binding again from the entries, the cloud and the kernel,
// republishes the same addresses, and converges to an empty plan.
func TestRestartWithoutAgentState(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pods := make([]*pod, 8)
	for i := range pods {
		pods[i] = n.newPod(fmt.Sprintf("s%d", i))
	}
	n.startAgent()
	ips := n.addAll(ctx, pods)
	n.agent.kill()
	if err := os.RemoveAll(n.stateDir); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(n.runDir + "/status"); err != nil {
		t.Fatal(err)
	}
	n.startAgent() // as after a crash that took /var/lib/enid and the statuses
	n.waitReady(30 * time.Second)
	waitFor(t, 10*time.Second, "an empty plan", func() (bool, string) {
		code, out, e := n.plan(ctx, "--detailed-exitcode")
		return code == 0, out + e
	})
	n.checkBindings(pods)
	for i, p := range pods {
		st, err := n.statusOf(p)
		if err != nil || len(st.IPs) == 0 || st.IPs[0].Address.Addr() != ips[i] {
			t.Errorf("pod %s had %s; after the restart its status lists %v (err %v)", p.Name, ips[i], st.IPs, err)
		}
	}
	n.delAll(ctx, pods)
	n.waitSettled(2, 6, 60*time.Second)
}
