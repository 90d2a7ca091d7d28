package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/linux/linuxtest"
)

// TestParallelPodsColdNode is acceptance 1: 30 pods added at once on a node
// whose pool is empty all become Ready with distinct addresses that the VPC
// and other pods reach; CHECK passes; after DEL of all, nothing is left in
// the kernel and the pool shrinks back inside its bounds in the cloud.
func TestParallelPodsColdNode(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const count = 30
	pods := make([]*pod, count)
	for i := range pods {
		pods[i] = n.newPod(fmt.Sprintf("p%d", i))
	}
	n.startAgent()
	// Cold: ADDs start with the agent, before its pool exists.
	start := time.Now()
	ips := n.addAll(ctx, pods)
	t.Logf("%d parallel ADDs on a cold node: %s", count, time.Since(start).Round(time.Millisecond))

	distinct := map[netip.Addr]bool{}
	for i, ip := range ips {
		if distinct[ip] {
			t.Errorf("pod %s got %s, already given to another pod", pods[i].Name, ip)
		}
		distinct[ip] = true
	}
	n.checkBindings(pods)
	if code, out, stderr := n.enid(ctx, "status", "--run-dir", n.runDir); code != 0 || !strings.Contains(out, fmt.Sprintf("%d Ready", count)) {
		t.Errorf("enid status: exit %d, want 0 and %d Ready:\n%s%s", code, count, out, stderr)
	}

	for i, p := range pods {
		if err := linuxtest.Ping(ctx, n.sn.Topology.VPCNS, ips[i]); err != nil {
			t.Errorf("vpc -> %s: %v", p.Name, err)
		}
		j := (i + 1) % count
		if err := linuxtest.Ping(ctx, p.NetNS, ips[j]); err != nil {
			t.Errorf("%s -> %s (%s): %v", p.Name, pods[j].Name, ips[j], err)
		}
		if err := n.rt.Check(ctx, p.Pod); err != nil {
			t.Errorf("CHECK %s: %v", p.Name, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	n.delAll(ctx, pods)
	n.waitSettled(2, 6, 60*time.Second)
}
