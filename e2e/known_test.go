package e2e

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/reconcile/status"
)

// Tests of known product issues: each fails until its fix lands, so each
// skips unless -known-issues is given. docs/testing.md lists them.

// knownIssues runs the tests of known product issues instead of skipping them.
var knownIssues = flag.Bool("known-issues", false, "run the tests of known issues (they fail until fixed)") //nolint:gochecknoglobals // a test flag

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

// TestVSwitchNearlyExhausted: 30 pods on a node whose only vSwitch is a
// /27 (27 free addresses). Each address the vSwitch still has should go to
// a pod, and the pods left over should be told the vSwitch is exhausted.
//
// The planner caps assignments by the vSwitch's free addresses (ECS refuses
// a whole assign it cannot fill), and the agent counts what it takes
// between observations.
func TestVSwitchNearlyExhausted(t *testing.T) {
	sim := ecssim.Config{Zones: []string{"cn-hangzhou-h"}, VSwitches: []ecssim.VSwitchConfig{
		{ID: "vsw-small", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.0.0/27")}}}
	n := newNode(t, nodeOptions{extraConfig: testPool, sim: sim, addTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n.startAgent()
	n.waitReady(30 * time.Second)
	pods := make([]*pod, 30)
	for i := range pods {
		pods[i] = n.newPod(fmt.Sprintf("x%d", i))
	}
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() { _, errs[i] = n.add(ctx, p) })
	}
	wg.Wait()
	var served []*pod
	for i, err := range errs {
		if err == nil {
			served = append(served, pods[i])
			continue
		}
		st, rerr := status.NewStore(filepath.Join(n.runDir, "status")).Read(pods[i].ContainerID, pods[i].IfName)
		if rerr != nil || st.ReasonCode != "vswitch-exhausted" {
			t.Errorf("pod %s not served: status %s %q (%s), want reason vswitch-exhausted", pods[i].Name, st.Phase, st.Reason, st.ReasonCode)
		}
	}
	if free := n.sn.Sim.Dump().VSwitches[0].AvailableIPs; free != 0 {
		t.Errorf("%d pods served, %d not, while the vSwitch still has %d free addresses", len(served), len(pods)-len(served), free)
	}
	n.checkBindings(served)
}
