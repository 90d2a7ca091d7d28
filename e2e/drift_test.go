package e2e

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/enidnet/enid/linux"
)

// TestNodeDriftRepaired: a pod's host route and its "from" rule are deleted
// by hand in the node namespace; the agent, told by its netlink watch,
// restores each well within a second (the resync is 2 minutes away) and
// calls the cloud for none of it.
func TestNodeDriftRepaired(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := n.newPod("d0")
	n.startAgent()
	n.waitReady(30 * time.Second)
	ip := n.addAll(ctx, []*pod{p})[0]
	// The pool settles first, so that no cloud call of its own comes
	// during the repairs.
	waitFor(t, 20*time.Second, "pool within its bounds", func() (bool, string) {
		a, err := n.agentFile()
		if err != nil {
			return false, err.Error()
		}
		return a.Pool.Idle >= 2 && a.Pool.Idle <= 6 && a.Pool.Used == 1, fmt.Sprintf("pool %+v", a.Pool)
	})
	n.sn.Sim.ResetCounters()

	host := &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(32, 32)}
	withNode := func(fn func(h *netlink.Handle) error) {
		t.Helper()
		h := nsHandle(t, n.sn.NodeNS())
		defer h.Close()
		if err := fn(h); err != nil {
			t.Fatal(err)
		}
	}
	hasRule := func() bool {
		found := false
		withNode(func(h *netlink.Handle) error {
			rules, err := h.RuleList(netlink.FAMILY_V4)
			for _, r := range rules {
				found = found || (r.Protocol == linux.Proto && r.Priority == linux.PrioFromPod && r.Src != nil && r.Src.String() == host.String())
			}
			return err
		})
		return found
	}
	hasRoute := func() bool { return len(n.nodeKernel().hostRoutes[ip]) > 0 }
	// repaired waits (polling, with a deadline) for has to hold again.
	repaired := func(what string, has func() bool) {
		t.Helper()
		start := time.Now()
		for !has() {
			if time.Since(start) > time.Second {
				t.Fatalf("%s not repaired within 1s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("%s repaired in %s", what, time.Since(start).Round(time.Millisecond))
	}
	if !hasRoute() || !hasRule() {
		t.Fatalf("pod %s has no host route or rule after ADD: %+v", ip, n.nodeKernel())
	}

	withNode(func(h *netlink.Handle) error {
		routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: linux.Proto}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if r.Dst != nil && r.Dst.String() == host.String() {
				return h.RouteDel(&r)
			}
		}
		return fmt.Errorf("no host route to %s", ip)
	})
	repaired("host route", hasRoute)

	withNode(func(h *netlink.Handle) error {
		r := netlink.NewRule()
		r.Priority, r.Src, r.Protocol, r.Family = linux.PrioFromPod, host, linux.Proto, unix.AF_INET
		return h.RuleDel(r)
	})
	repaired("from rule", hasRule)

	if c := n.sn.Sim.Counters(); len(c) > 0 {
		t.Errorf("the repairs called the cloud: %v", c)
	}
	n.delAll(ctx, []*pod{p})
	n.waitSettled(2, 6, 20*time.Second)
}
