package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/observed"
)

// TestPodMTUFromENI (issue 26 item 6): with eni.mtu unset, a pod gets its
// ENI's MTU as the node sees the device: 1500 at first; once the ENI's
// device carries 8500 (jumbo frames), the next pod's interface and host
// veth get 8500, and the running pod keeps its own.
func TestPodMTUFromENI(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool + "resyncPeriod: 1s\n"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n.startAgent()
	n.waitReady(30 * time.Second)
	p0 := n.newPod("mtu0")
	n.addAll(ctx, []*pod{p0})
	mtuIn := func(ns, name string) int {
		h := nsHandle(t, ns)
		defer h.Close()
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatalf("%s in %s: %v", name, ns, err)
		}
		return l.Attrs().MTU
	}
	if got := mtuIn(p0.NetNS, "eth0"); got != 1500 {
		t.Fatalf("first pod's MTU %d, want the ENI's 1500", got)
	}
	// Jumbo frames on the ENI: its device now says 8500.
	owned := n.owned(n.sn.Sim.Dump())
	if len(owned) != 1 {
		t.Fatalf("owned ENIs %d, want 1", len(owned))
	}
	dev, err := n.sn.Topology.NodeName(owned[0].MAC)
	if err != nil {
		t.Fatal(err)
	}
	h := nsHandle(t, n.sn.Topology.NodeNS)
	l, err := h.LinkByName(dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetMTU(l, 8500); err != nil {
		t.Fatal(err)
	}
	h.Close()
	time.Sleep(1500 * time.Millisecond) // past a resync: the agent sees the device's MTU
	p1 := n.newPod("mtu1")
	n.addAll(ctx, []*pod{p1})
	waitFor(t, 5*time.Second, "second pod at the ENI's MTU", func() (bool, string) {
		got, host := mtuIn(p1.NetNS, "eth0"), mtuIn(n.sn.Topology.NodeNS, linux.HostVethName(observed.AttachmentKey{ContainerID: p1.ContainerID, IfName: p1.IfName}))
		return got == 8500 && host == 8500, fmt.Sprintf("pod %d, host veth %d", got, host)
	})
	if got := mtuIn(p0.NetNS, "eth0"); got != 1500 {
		t.Errorf("running pod's MTU changed to %d", got)
	}
	n.delAll(ctx, []*pod{p0, p1})
}
