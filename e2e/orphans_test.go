package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Pod rules whose veth vanished with its netns before any teardown: the
// agent must still remove them. Both were leaks found by this suite.

// TestDeleteWhileStoppedNetnsGone: pods are deleted while the agent is
// stopped and the runtime then removes their network namespaces (which
// takes the veths and host routes with them). The restarted agent must
// leave no pod rule behind.
//
// Observe finds attachments by their labelled host veth, so with the veth
// gone nothing is torn down; the agent sweeps orphaned pod rules after every
// full observation (linux.Datapath.Sweep), which is what this test proves.
func TestDeleteWhileStoppedNetnsGone(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods := []*pod{n.newPod("g0"), n.newPod("g1")}
	n.startAgent()
	n.waitReady(30 * time.Second)
	n.addAll(ctx, pods)
	n.agent.stop(t)
	n.delAll(ctx, pods) // DEL at once (agent stopped), then the netns go
	// The kernel destroys a namespace asynchronously: wait until the veths
	// have gone with them.
	waitFor(t, 20*time.Second, "veths gone with their netns", func() (bool, string) {
		k := n.nodeKernel()
		return len(k.veths) == 0, fmt.Sprintf("veths %v", k.veths)
	})
	n.startAgent()
	n.waitReady(30 * time.Second)
	n.waitSettled(2, 6, 20*time.Second)
}

// TestNetnsGoneBeforeDel: a pod sandbox dies and its network namespace goes
// before the runtime's DEL (the kernel takes the veth and host routes), the
// agent running. After DEL no pod rule may be left.
//
// With a full observation between the netns going and the DEL (here
// resyncPeriod 1s and a 3s gap) the attachment is no longer observed; the
// sweep after that observation removes its rules.
func TestNetnsGoneBeforeDel(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool + "resyncPeriod: 1s\n"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods := []*pod{n.newPod("x0"), n.newPod("x1")}
	n.startAgent()
	n.waitReady(30 * time.Second)
	n.addAll(ctx, pods)
	for _, p := range pods {
		if err := n.sn.Topology.DeletePodNS(p.NetNS); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, "veths gone with their netns", func() (bool, string) {
		k := n.nodeKernel()
		return len(k.veths) == 0, fmt.Sprintf("veths %v", k.veths)
	})
	time.Sleep(3 * time.Second) // past a full resync
	n.delAll(ctx, pods)
	n.waitSettled(2, 6, 20*time.Second)
}
