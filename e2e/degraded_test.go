package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/testbed/cnirun"
)

// degradedPool keeps a warm pool of at least 6 idle addresses.
const degradedPool = `pool:
  minIdle: 6
  maxIdle: 12
  batch: 6
  releaseDelay: 1s
  cooldown: 300ms
`

// outage runs DESIGN.md invariant 9 end to end: a warm node, then the
// cloud is made unusable (settings) for `lasting`: 5 pods still get idle
// addresses through real CNI ADDs, `enid status` says DEGRADED while
// `--ready` still passes; then the cloud is back: the pool converges, no
// address was handed out twice, and the leak check passes.
func outage(t *testing.T, settings ecssim.Settings, lasting time.Duration) {
	n := newNode(t, nodeOptions{extraConfig: degradedPool, addTimeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	n.startAgent()
	n.waitReady(30 * time.Second)
	waitFor(t, 60*time.Second, "a warm pool", func() (bool, string) {
		a, err := n.agentFile()
		if err != nil {
			return false, err.Error()
		}
		return a.Pool.Idle >= 6 && len(n.statuses()) == 0, fmt.Sprintf("pool %+v", a.Pool)
	})
	time.Sleep(time.Second) // let the warm-up's last round end

	n.sn.Sim.SetSettings(settings)
	start := time.Now()
	pods := make([]*pod, 5)
	for i := range pods {
		pods[i] = n.newPod(fmt.Sprintf("d%d", i))
		t0 := time.Now()
		if _, err := n.add(ctx, pods[i]); err != nil {
			t.Fatalf("ADD %s during the outage: %v", pods[i].Name, err)
		}
		t.Logf("ADD %s during the outage: %s", pods[i].Name, time.Since(t0).Round(time.Millisecond))
	}
	waitFor(t, lasting, "enid status to say DEGRADED", func() (bool, string) {
		_, out, _ := n.enid(ctx, "status", "--run-dir", n.runDir)
		return strings.Contains(out, "DEGRADED:  cloud unreachable since") && strings.Contains(out, "idle addresses"), out
	})
	if code, out, stderr := n.enid(ctx, "status", "--run-dir", n.runDir, "--ready"); code != 0 {
		t.Errorf("enid status --ready during the outage: exit %d\n%s%s", code, out, stderr)
	}
	n.checkBindings(pods)
	if rest := lasting - time.Since(start); rest > 0 {
		time.Sleep(rest)
	}
	t.Logf("outage lasted %s", time.Since(start).Round(time.Millisecond))

	n.sn.Sim.SetSettings(ecssim.Settings{})
	waitFor(t, 2*time.Minute, "degraded mode to end", func() (bool, string) {
		a, err := n.agentFile()
		if err != nil {
			return false, err.Error()
		}
		return a.Degraded == nil && a.Ready, fmt.Sprintf("ready %v, reason %q", a.Ready, a.Reason)
	})
	n.checkBindings(pods)
	n.delAll(ctx, pods)
	n.waitSettled(6, 12, 90*time.Second)
}

// TestDegradedFrozenCloud: every API call hangs (the simulator answers
// after 10 minutes; the agent's client gives up each attempt at 10 s).
func TestDegradedFrozenCloud(t *testing.T) {
	outage(t, ecssim.Settings{Latency: ecssim.Latency{Fixed: 10 * time.Minute}}, 40*time.Second)
}

// TestDegradedUnavailableCloud: every API call is answered 503
// ServiceUnavailable, as an API that is down behind its load balancer.
// (The simulator cannot stop listening and come back on the same port;
// refused connections are classified like 503s, as cloud.ErrUnavailable.)
func TestDegradedUnavailableCloud(t *testing.T) {
	outage(t, ecssim.Settings{Faults: ecssim.Faults{Rate: 1, Codes: []string{"ServiceUnavailable"}}}, 15*time.Second)
}

// TestDegradedThrottledCloud: every API call is throttled, for 15 s (the
// issue's "a minute", shortened to what the suite affords).
func TestDegradedThrottledCloud(t *testing.T) {
	outage(t, ecssim.Settings{Faults: ecssim.Faults{Rate: 1, Codes: []string{"Throttling.User"}}}, 15*time.Second)
}

// TestNodeNetNSRefused: a CNI ADD whose CNI_NETNS names the node's
// namespace (the one the agent's datapath is configured with; here the
// simulated node's, never the machine's) fails with the agent's reason
// netns-refused, the node namespace's routes are unchanged, and `enid
// plan` agrees with the agent (no setup planned for it).
func TestNodeNetNSRefused(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool, addTimeout: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n.startAgent()
	n.waitReady(30 * time.Second)
	// The pool's ENI is configured first (its device's routes are enid's
	// doing, not the pod's): take the picture after that.
	waitFor(t, 30*time.Second, "a warm pool", func() (bool, string) {
		a, err := n.agentFile()
		return err == nil && a.Pool.Idle >= 2, fmt.Sprintf("%+v %v", a.Pool, err)
	})
	time.Sleep(time.Second)
	before := nodeRoutes(t, n.sn.NodeNS())
	p := &pod{Pod: cnirun.Pod{ContainerID: strings.Repeat("ab", 32), NetNS: n.sn.NodeNS(), IfName: "eth0",
		Namespace: "default", Name: "evil", UID: "uid-evil"}, cleanup: func() {}}
	_, err := n.add(ctx, p)
	if err == nil || !strings.Contains(err.Error(), "netns-refused") || !strings.Contains(err.Error(), "node's own network namespace") {
		t.Fatalf("ADD into the node namespace: %v, want a netns-refused failure", err)
	}
	if after := nodeRoutes(t, n.sn.NodeNS()); after != before {
		t.Errorf("node routes changed:\nbefore %s\nafter  %s", before, after)
	}
	// `enid plan` shows what the agent does: nothing for the refused
	// entry (it failed at once), not a setup the agent will never run.
	waitFor(t, 30*time.Second, "enid plan empty with the refused entry", func() (bool, string) {
		code, out, stderr := n.plan(ctx, "--detailed-exitcode")
		return code == 0, fmt.Sprintf("exit %d:\n%s%s", code, out, stderr)
	})
	if err := n.rt.Del(ctx, p.Pod); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if after := nodeRoutes(t, n.sn.NodeNS()); after != before {
		t.Errorf("node routes changed after DEL:\nbefore %s\nafter  %s", before, after)
	}
}

// nodeRoutes renders every route and address of the namespace.
func nodeRoutes(t *testing.T, path string) string {
	t.Helper()
	h := nsHandle(t, path)
	defer h.Close()
	var b strings.Builder
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		fmt.Fprintf(&b, "route %s; ", r)
	}
	addrs, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		fmt.Fprintf(&b, "addr %s; ", (*net.IPNet)(a.IPNet))
	}
	return b.String()
}
