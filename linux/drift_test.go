package linux_test

import (
	"fmt"
	"net"
	"testing"

	"github.com/enidnet/enid/linux"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestEnsurePodIdempotentAndRepairs: a second ensure changes nothing, and
// after each kind of drift ensure restores exactly the missing piece.
func TestEnsurePodIdempotentAndRepairs(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	s := e.podSpec(t, 0, 12)
	res, _, err := e.dp.EnsurePod(ctx, s)
	if err != nil {
		t.Fatalf("ensure pod: %v", err)
	}
	if _, ch, err := e.dp.EnsurePod(ctx, s); err != nil || len(ch) != 0 {
		t.Fatalf("second ensure: changes %v, err %v; want none", ch, err)
	}
	hv, hostMAC, podMAC := res.HostVeth, res.Interfaces[0].MAC, res.PodMAC
	ip4, ip6 := s.IPv4.AsSlice(), s.IPv6.AsSlice()
	host4 := &net.IPNet{IP: ip4, Mask: net.CIDRMask(32, 32)}
	host6 := &net.IPNet{IP: ip6, Mask: net.CIDRMask(128, 128)}
	rule := func(prio int, src, dst *net.IPNet, table int) *netlink.Rule {
		r := netlink.NewRule()
		r.Priority, r.Src, r.Dst, r.Table, r.Protocol = prio, src, dst, table, linux.Proto
		if (src != nil && src.IP.To4() == nil) || (dst != nil && dst.IP.To4() == nil) {
			r.Family = unix.AF_INET6
		} else {
			r.Family = unix.AF_INET
		}
		return r
	}
	link := func(h *netlink.Handle, name string) netlink.Link {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	cases := []struct {
		name string
		// ns is "node" or "pod".
		ns    string
		drift func(h *netlink.Handle) error
		// want is the exact repair; nil means "some repair".
		want linux.Changes
		// seen says Observe must report the drift as a problem.
		seen bool
	}{
		{"from rule deleted", "node", func(h *netlink.Handle) error { return h.RuleDel(rule(2048, host4, nil, 1001)) },
			linux.Changes{"add rule prio 2048 from 10.0.1.12 lookup 1001"}, true},
		{"to rule v6 deleted", "node", func(h *netlink.Handle) error { return h.RuleDel(rule(512, nil, host6, unix.RT_TABLE_MAIN)) },
			linux.Changes{"add rule prio 512 to fd00:1::12 lookup main"}, true},
		{"from rule points elsewhere", "node", func(h *netlink.Handle) error {
			if err := h.RuleDel(rule(2048, host4, nil, 1001)); err != nil {
				return err
			}
			return h.RuleAdd(rule(2048, host4, nil, 1005))
		}, linux.Changes{"delete rule prio 2048 from 10.0.1.12 lookup 1005", "add rule prio 2048 from 10.0.1.12 lookup 1001"}, true},
		{"host route deleted", "node", func(h *netlink.Handle) error {
			return h.RouteDel(&netlink.Route{LinkIndex: link(h, hv).Attrs().Index, Dst: host4, Table: unix.RT_TABLE_MAIN, Scope: netlink.SCOPE_LINK})
		}, linux.Changes{"add route 10.0.1.12/32 dev " + hv + " scope link"}, true},
		{"host v6 neighbour deleted", "node", func(h *netlink.Handle) error {
			return h.NeighDel(&netlink.Neigh{LinkIndex: link(h, hv).Attrs().Index, Family: unix.AF_INET6, IP: ip6})
		}, linux.Changes{fmt.Sprintf("set neighbour fd00:1::12 lladdr %s dev %s permanent", podMAC, hv)}, true},
		{"pod gateway neighbour deleted", "pod", func(h *netlink.Handle) error {
			return h.NeighDel(&netlink.Neigh{LinkIndex: link(h, "eth0").Attrs().Index, Family: unix.AF_INET, IP: net.ParseIP("169.254.1.1")})
		}, linux.Changes{"set neighbour 169.254.1.1 lladdr " + hostMAC + " dev eth0 in pod permanent"}, true},
		{"pod default route deleted", "pod", func(h *netlink.Handle) error {
			return h.RouteDel(&netlink.Route{LinkIndex: link(h, "eth0").Attrs().Index, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, Gw: net.ParseIP("169.254.1.1")})
		}, linux.Changes{"add default via 169.254.1.1 dev eth0 onlink in pod"}, true},
		{"pod address deleted", "pod", func(h *netlink.Handle) error {
			return h.AddrDel(link(h, "eth0"), &netlink.Addr{IPNet: host4})
		}, linux.Changes{
			// Losing its last IPv4 address makes the kernel flush the
			// link's IPv4 routes and neighbours too.
			"add address 10.0.1.12/32 to eth0 in pod",
			"set neighbour 169.254.1.1 lladdr " + hostMAC + " dev eth0 in pod permanent",
			"add default via 169.254.1.1 dev eth0 onlink in pod",
		}, true},
		{"stray pod address", "pod", func(h *netlink.Handle) error {
			return h.AddrAdd(link(h, "eth0"), &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("10.9.9.9").To4(), Mask: net.CIDRMask(32, 32)}})
		}, linux.Changes{"delete address 10.9.9.9/32 from eth0 in pod"}, false},
		{"pod link down", "pod", func(h *netlink.Handle) error { return h.LinkSetDown(link(h, "eth0")) }, nil, true},
		{"host veth deleted", "node", func(h *netlink.Handle) error { return h.LinkDel(link(h, hv)) }, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := e.tp.NodeNS
			if c.ns == "pod" {
				path = s.NetNS
			}
			withH(t, path, c.drift)
			if c.seen {
				if p := observePod(t, e, s); p.Healthy || len(p.Problems) == 0 {
					t.Errorf("observe after drift: healthy %v problems %v; want a problem", p.Healthy, p.Problems)
				}
			}
			_, ch, err := e.dp.EnsurePod(ctx, s)
			if err != nil {
				t.Fatalf("repair: %v", err)
			}
			if c.want == nil {
				if len(ch) == 0 {
					t.Error("repair reported no change")
				}
			} else if diff := cmp.Diff(c.want, ch); diff != "" {
				t.Errorf("repair changes (-want +got):\n%s", diff)
			}
			if _, ch, err := e.dp.EnsurePod(ctx, s); err != nil || len(ch) != 0 {
				t.Errorf("ensure after repair: changes %v, err %v; want none", ch, err)
			}
			if p := observePod(t, e, s); !p.Healthy {
				t.Errorf("observe after repair: problems %v", p.Problems)
			}
		})
	}
}

// TestBandwidthAddedAndRemoved: tbf qdiscs follow the spec both ways.
func TestBandwidthAddedAndRemoved(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	s := e.podSpec(t, 0, 13)
	res, _, err := e.dp.EnsurePod(ctx, s)
	if err != nil {
		t.Fatalf("ensure pod: %v", err)
	}
	s.Bandwidth = &linux.Bandwidth{IngressRate: 8_000_000, IngressBurst: 800_000, EgressRate: 16_000_000, EgressBurst: 800_000}
	_, ch, err := e.dp.EnsurePod(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	want := linux.Changes{
		"set tbf rate 8000000bit burst 800000bit on " + res.HostVeth,
		"set tbf rate 16000000bit burst 800000bit on eth0 in pod",
	}
	if diff := cmp.Diff(want, ch); diff != "" {
		t.Errorf("add limits (-want +got):\n%s", diff)
	}
	if _, ch, err := e.dp.EnsurePod(ctx, s); err != nil || len(ch) != 0 {
		t.Errorf("ensure again: %v %v", ch, err)
	}
	s.Bandwidth = nil
	if _, ch, err = e.dp.EnsurePod(ctx, s); err != nil {
		t.Fatal(err)
	}
	want = linux.Changes{"delete tbf on " + res.HostVeth, "delete tbf on eth0 in pod"}
	if diff := cmp.Diff(want, ch); diff != "" {
		t.Errorf("remove limits (-want +got):\n%s", diff)
	}
}

// observePod returns Observe's view of s's attachment.
func observePod(t testing.TB, e *env, s linux.PodSpec) (p struct {
	Healthy  bool
	Problems []string
}) {
	t.Helper()
	n, err := e.dp.Observe(ctxT(t))
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	for _, pn := range n.Pods {
		if pn.Key == s.Key {
			p.Healthy, p.Problems = pn.Healthy, pn.Problems
			return p
		}
	}
	p.Problems = []string{"attachment not observed"}
	return p
}
