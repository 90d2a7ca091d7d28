package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/enidnet/enid/linux/linuxtest"
	"github.com/enidnet/enid/reconcile/status"
)

// exclusivePool keeps one spare ENI; each pod takes a whole one.
const exclusivePool = `pool:
  minIdle: 1
  maxIdle: 1
  releaseDelay: 1s
  cooldown: 300ms
`

// TestExclusiveENI runs exclusive-ENI mode end to end: three pods (all the
// simulated instance can hold) each get a whole ENI moved into their
// netns, reachable from the VPC and from each other; they survive an agent
// SIGKILL and restart unchanged; after DEL of all, the ENIs come back to
// the node and the pool shrinks to one spare ENI with nothing left behind.
func TestExclusiveENI(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: exclusivePool, exclusive: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pods := []*pod{n.newPod("e0"), n.newPod("e1"), n.newPod("e2")}
	n.startAgent()
	ips := n.addAll(ctx, pods)
	n.checkExclusive(pods, ips)
	for i, p := range pods {
		if err := linuxtest.Ping(ctx, n.sn.Topology.VPCNS, ips[i]); err != nil {
			t.Errorf("vpc -> %s: %v", p.Name, err)
		}
		j := (i + 1) % len(pods)
		if err := linuxtest.Ping(ctx, p.NetNS, ips[j]); err != nil {
			t.Errorf("%s -> %s: %v", p.Name, pods[j].Name, err)
		}
		if err := n.rt.Check(ctx, p.Pod); err != nil {
			t.Errorf("CHECK %s: %v", p.Name, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	n.agent.kill()
	n.startAgent()
	n.waitReady(30 * time.Second)
	waitFor(t, 10*time.Second, "plan empty after the restart", func() (bool, string) {
		code, out, stderr := n.plan(ctx, "--detailed-exitcode")
		return code == 0, fmt.Sprintf("exit %d\n%s%s", code, out, stderr)
	})
	n.checkExclusive(pods, ips)

	n.delAll(ctx, pods)
	n.waitSettled(1, 1, 60*time.Second)
}

// checkExclusive checks each pod is Ready in exclusive mode with the
// address it got at ADD, which is the primary address of the ENI its
// status names, held inside its netns, and that no ENI serves two pods.
func (n *node) checkExclusive(pods []*pod, ips []netip.Addr) {
	n.t.Helper()
	primary := map[string]netip.Addr{}
	for _, e := range n.owned(n.sn.Sim.Dump()) {
		primary[e.ID] = e.PrimaryIP
	}
	byENI := map[string]string{}
	for i, p := range pods {
		st, err := status.NewStore(n.runDir+"/status").Read(p.ContainerID, p.IfName)
		if err != nil || st.Phase != status.Ready || !st.Exclusive || len(st.IPs) == 0 {
			n.t.Errorf("pod %s: status %+v (err %v), want Ready, exclusive", p.Name, st, err)
			continue
		}
		ip := st.IPs[0].Address.Addr()
		if ip != ips[i] {
			n.t.Errorf("pod %s: status says %s, ADD returned %s", p.Name, ip, ips[i])
		}
		if primary[st.ENIID] != ip {
			n.t.Errorf("pod %s: %s, but its ENI %s has primary %s", p.Name, ip, st.ENIID, primary[st.ENIID])
		}
		if other := byENI[st.ENIID]; other != "" {
			n.t.Errorf("ENI %s serves pods %s and %s", st.ENIID, other, p.Name)
		}
		byENI[st.ENIID] = p.Name
		if got := n.podAddrs(p.NetNS); !slices.Contains(got, ip) {
			n.t.Errorf("pod %s: addresses in its netns %v, want %s among them", p.Name, got, ip)
		}
	}
}
