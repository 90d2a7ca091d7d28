package linux_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/enidnet/enid/linux"
)

// TestTeardownPodRemovesRulesOfKnownAddresses: when a pod's veth is gone
// before its teardown, and something still makes its address look live to
// the sweep (here a host route of enid's protocol; in life, a veth the
// kernel is still destroying), the rules of the addresses the caller names
// are removed anyway.
func TestTeardownPodRemovesRulesOfKnownAddresses(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	spec := e.podSpec(t, 0, 30)
	res, _, err := e.dp.EnsurePod(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	ip := spec.IPv4
	withH(t, e.tp.NodeNS, func(h *netlink.Handle) error {
		l, err := h.LinkByName(res.HostVeth)
		if err != nil {
			return err
		}
		if err := h.LinkDel(l); err != nil {
			return err
		}
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		// Keeps the address "live" for the sweep.
		return h.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(32, 32)},
			Table: unix.RT_TABLE_MAIN, Protocol: linux.Proto, Scope: netlink.SCOPE_LINK})
	})
	if _, err := e.dp.TeardownPod(ctx, spec.Key, spec.NetNS, spec.IPv4, spec.IPv6); err != nil {
		t.Fatal(err)
	}
	withH(t, e.tp.NodeNS, func(h *netlink.Handle) error {
		rules, err := h.RuleList(netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, r := range rules {
			for _, n := range []*net.IPNet{r.Src, r.Dst} {
				if n != nil && netip.MustParseAddr(n.IP.String()) == ip && r.Protocol == linux.Proto {
					t.Errorf("rule for %s left after teardown: prio %d", ip, r.Priority)
				}
			}
		}
		return nil
	})
}
