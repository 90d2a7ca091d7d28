package linux_test

import (
	"net"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/enidnet/enid/linux"
)

// TestKernelFiltersRouteDumpByDevice: the kernel answers a route dump
// asked with strict checking for one device with that device's routes
// alone (Linux 4.20 and later), which keeps a pod's setup from listing a
// route per pod on the node. The filter is asked of the kernel only (no
// filter mask for the device), so a kernel that ignored it would answer
// every pod's route and fail the test.
func TestKernelFiltersRouteDumpByDevice(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	var veths []string
	for h := 40; h < 43; h++ {
		res, _, err := e.dp.EnsurePod(ctx, e.podSpec(t, 0, h))
		if err != nil {
			t.Fatal(err)
		}
		veths = append(veths, res.HostVeth)
	}
	withH(t, e.tp.NodeNS, func(h *netlink.Handle) error {
		if err := h.SetStrictCheck(true); err != nil {
			t.Skipf("kernel without strict netlink checking: %v", err)
		}
		l, err := h.LinkByName(veths[1])
		if err != nil {
			return err
		}
		routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: linux.Proto, LinkIndex: l.Attrs().Index},
			netlink.RT_FILTER_TABLE)
		if err != nil {
			return err
		}
		if len(routes) != 1 || routes[0].LinkIndex != l.Attrs().Index {
			t.Errorf("the dump for %s answered %d routes: %v", veths[1], len(routes), routes)
		}
		return nil
	})
}

// TestSetupTakesOverARouteElsewhere: a route to the pod's address through
// another device (what an earlier holder left) is not listed by a setup,
// which lists its own device's routes only: the setup's route replaces it,
// and the binding counts as new (its conntrack entries go).
func TestSetupTakesOverARouteElsewhere(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	s := e.podSpec(t, 0, 44)
	withH(t, e.tp.NodeNS, func(h *netlink.Handle) error {
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := h.LinkSetUp(lo); err != nil {
			return err
		}
		return h.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: &net.IPNet{IP: s.IPv4.AsSlice(), Mask: net.CIDRMask(32, 32)},
			Table: unix.RT_TABLE_MAIN, Scope: netlink.SCOPE_LINK, Protocol: linux.Proto})
	})
	res, ch, err := e.dp.EnsurePod(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	withH(t, e.tp.NodeNS, func(h *netlink.Handle) error {
		hv, err := h.LinkByName(res.HostVeth)
		if err != nil {
			return err
		}
		routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN, Dst: &net.IPNet{IP: s.IPv4.AsSlice(), Mask: net.CIDRMask(32, 32)}},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
		if err != nil {
			return err
		}
		if len(routes) != 1 || routes[0].LinkIndex != hv.Attrs().Index {
			t.Errorf("routes to %s after setup: %v, want one through %s (changes %v)", s.IPv4, routes, res.HostVeth, ch)
		}
		return nil
	})
}
