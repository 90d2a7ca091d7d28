package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
)

// TestVSwitchNearlyExhausted: 30 pods on a node whose only vSwitch is a
// /27 (27 free addresses). Each address the vSwitch still has should go to
// a pod, and the pods left over should be told the vSwitch is exhausted.
//
// The planner caps assignments by the vSwitch's free addresses (ECS refuses
// a whole assign it cannot fill), the agent counts what it takes between
// observations, and the refusals name the vSwitch even when every ENI slot
// is taken. Refusals while the vSwitch has room fail it; ip-limit instead
// of vswitch-exhausted is an intermittent known issue, reported as a skip.
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
	free := n.sn.Sim.Dump().VSwitches[0].AvailableIPs
	var served, refused []*pod
	var ipLimit []string // pods refused with ip-limit
	for i, err := range errs {
		if err == nil {
			served = append(served, pods[i])
			continue
		}
		refused = append(refused, pods[i])
		// The answer to this ADD; the entry stays until DEL, and the agent
		// may serve it later when an address frees up.
		switch {
		case strings.Contains(err.Error(), "vswitch-exhausted"):
		case strings.Contains(err.Error(), "(ip-limit)"):
			ipLimit = append(ipLimit, pods[i].Name)
		default:
			t.Errorf("ADD %s: %v, want the reason vswitch-exhausted", pods[i].Name, err)
		}
	}
	t.Logf("%d pods served, %d refused, %d addresses left in the vSwitch", len(served), len(refused), free)
	for i, err := range errs {
		if err != nil {
			t.Logf("first refusal: %s: %v", pods[i].Name, err)
			break
		}
	}
	if len(refused) > 0 && free != 0 {
		t.Errorf("%d pods refused as vswitch-exhausted while the vSwitch still has %d free addresses", len(refused), free)
	}
	// Kubelet deletes the sandboxes whose ADD failed.
	n.delAll(ctx, refused)
	n.checkBindings(served)
	n.delAll(ctx, served)
	n.waitSettled(2, 6, 30*time.Second)
	if len(ipLimit) > 0 {
		t.Errorf("pods %v were refused with ip-limit while %d pods were served and the vSwitch was empty; want vswitch-exhausted", ipLimit, len(served))
	}
}
