package simvpc_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/enidnet/enid/internal/roottest"
	"github.com/enidnet/enid/linux/linuxtest"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func handle(t *testing.T, path string) *netlink.Handle {
	t.Helper()
	fd, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fd.Close() })
	h, err := netlink.NewHandleAt(fd, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// nodeLink is the node-side device of a plugged ENI, in the namespace of
// h, brought up.
func nodeLink(t *testing.T, tp *linuxtest.Topology, h *netlink.Handle, mac string) netlink.Link {
	t.Helper()
	name, err := tp.NodeName(mac)
	if err != nil {
		t.Fatal(err)
	}
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestPlugConcurrently: ENIs plugged from several goroutines get distinct
// node devices with their MACs, and unplugging removes them.
func TestPlugConcurrently(t *testing.T) {
	roottest.Need(t)
	tp := linuxtest.NewTopology(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			cidr := netip.MustParsePrefix(fmt.Sprintf("10.1.%d.0/24", i))
			errs[i] = tp.PlugENI(fmt.Sprintf("02:00:00:00:01:%02x", i), cidr.Addr().Next(), cidr, netip.MustParseAddr(fmt.Sprintf("10.1.%d.253", i)))
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	node := handle(t, tp.NodeNS)
	links, err := node.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range links {
		if l.Attrs().Name != "lo" {
			got = append(got, l.Attrs().HardwareAddr.String())
		}
	}
	sort.Strings(got)
	want := []string{"02:00:00:00:01:00", "02:00:00:00:01:01", "02:00:00:00:01:02", "02:00:00:00:01:03"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("node devices (-want +got):\n%s", diff)
	}
	names := map[string]bool{}
	for _, m := range want {
		n, err := tp.NodeName(m)
		if err != nil || names[n] {
			t.Errorf("name of %s: %q %v", m, n, err)
		}
		names[n] = true
	}
	if err := tp.PlugENI(want[0], netip.MustParseAddr("10.1.0.1"), netip.MustParsePrefix("10.1.0.0/24"), netip.MustParseAddr("10.1.0.253")); err == nil {
		t.Error("plugging a MAC twice succeeded")
	}
	for _, m := range want {
		if err := tp.UnplugENI(m); err != nil {
			t.Error(err)
		}
	}
	if links, err := node.LinkList(); err != nil || len(links) != 1 {
		t.Errorf("after unplug: %d links, %v", len(links), err)
	}
}

// TestRoutedIPReachable: the vpc reaches an address routed to a plugged
// ENI (configured by hand in the node here), stops after UnrouteIPs, and
// Ping reports the failure.
func TestRoutedIPReachable(t *testing.T) {
	roottest.Need(t)
	tp := linuxtest.NewTopology(t)
	const mac = "02:00:00:00:02:01"
	cidr := netip.MustParsePrefix("10.2.0.0/24")
	gw, ip := netip.MustParseAddr("10.2.0.253"), netip.MustParseAddr("10.2.0.9")
	if err := tp.PlugENI(mac, netip.MustParseAddr("10.2.0.5"), cidr, gw); err != nil {
		t.Fatal(err)
	}
	if err := tp.RouteIPs(mac, ip); err != nil {
		t.Fatal(err)
	}
	node := handle(t, tp.NodeNS)
	l := nodeLink(t, tp, node, mac)
	if err := node.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := linuxtest.Ping(ctx, tp.VPCNS, ip); err != nil {
		t.Fatal(err)
	}
	if err := linuxtest.Ping(ctx, tp.NodeNS, gw); err != nil {
		t.Fatal(err)
	}
	if err := tp.UnrouteIPs(mac, ip); err != nil {
		t.Fatal(err)
	}
	if err := tp.UnrouteIPs(mac, ip); err != nil {
		t.Errorf("unroute twice: %v", err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel2()
	if err := linuxtest.Ping(short, tp.VPCNS, ip); err == nil {
		t.Error("ping succeeded after the address was unrouted")
	}
}

// TestAnswerGatewayV6: a node whose ENI table routes by the vSwitch's
// IPv6 gateway (the metadata's ipv6-gateway, a global address) reaches
// the VPC once the vpc answers that gateway, and not before: neighbour
// discovery for it goes unanswered.
func TestAnswerGatewayV6(t *testing.T) {
	roottest.Need(t)
	tp := linuxtest.NewTopology(t)
	const mac = "02:00:00:00:04:01"
	cidr := netip.MustParsePrefix("10.4.0.0/24")
	gw, a6 := netip.MustParseAddr("10.4.0.253"), netip.MustParseAddr("fd00:4::5")
	gw6 := netip.MustParseAddr("fd00:4::ffff:ffff:ffff:fffd")
	host6 := netip.MustParseAddr(linuxtest.VPCHostV6)
	if err := tp.PlugENI(mac, netip.MustParseAddr("10.4.0.5"), cidr, gw, a6); err != nil {
		t.Fatal(err)
	}
	node := handle(t, tp.NodeNS)
	l := nodeLink(t, tp, node, mac)
	if err := node.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: a6.AsSlice(), Mask: net.CIDRMask(128, 128)}, Flags: unix.IFA_F_NODAD}); err != nil {
		t.Fatal(err)
	}
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: host6.AsSlice(), Mask: net.CIDRMask(128, 128)},
		Gw: gw6.AsSlice(), Flags: unix.RTNH_F_ONLINK}
	if err := node.RouteAdd(r); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := linuxtest.Ping(short, tp.NodeNS, host6); err == nil {
		t.Fatal("the VPC was reached by a gateway the vpc does not answer")
	}
	if err := tp.AnswerGatewayV6(mac, gw6); err != nil {
		t.Fatal(err)
	}
	if err := tp.AnswerGatewayV6(mac, gw6); err != nil {
		t.Errorf("answer the gateway twice: %v", err)
	}
	if err := tp.AnswerGatewayV6(mac, gw); err == nil {
		t.Error("an IPv4 gateway was taken as an IPv6 one")
	}
	// A failed resolution leaves the neighbour FAILED for a while; the
	// next packet solicits again.
	ctx, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := linuxtest.Ping(ctx, tp.NodeNS, host6); err != nil {
		t.Fatal(err)
	}
}

// TestProxyNDP: a namespace holding an ENI with its vSwitch's IPv6 /64 on
// link (an exclusive-ENI pod) reaches another ENI's IPv6 address through
// the vpc, which answers neighbour discovery for every routed IPv6
// address, as the VPC's router does; unrouting the address and
// unplugging its ENI remove the vpc's proxy entry.
func TestProxyNDP(t *testing.T) {
	roottest.Need(t)
	tp := linuxtest.NewTopology(t)
	const macA, macB = "02:00:00:00:05:01", "02:00:00:00:05:02"
	cidr := netip.MustParsePrefix("10.5.0.0/24")
	gw := netip.MustParseAddr("10.5.0.253")
	a6, b6 := netip.MustParseAddr("fd00:5::a"), netip.MustParseAddr("fd00:5::b")
	if err := tp.PlugENI(macA, netip.MustParseAddr("10.5.0.5"), cidr, gw, a6); err != nil {
		t.Fatal(err)
	}
	if err := tp.PlugENI(macB, netip.MustParseAddr("10.5.0.6"), cidr, gw, b6); err != nil {
		t.Fatal(err)
	}
	pod, cleanup, err := tp.NewPodNS("ndp")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	node := handle(t, tp.NodeNS)
	gw6 := netip.MustParseAddr(linuxtest.GatewayV6)
	// A's device goes into the pod with fd00:5::a/64 on link.
	podFD, err := netns.GetFromPath(pod)
	if err != nil {
		t.Fatal(err)
	}
	defer podFD.Close()
	if err := node.LinkSetNsFd(nodeLink(t, tp, node, macA), int(podFD)); err != nil {
		t.Fatal(err)
	}
	ph := handle(t, pod)
	la := nodeLink(t, tp, ph, macA)
	if err := ph.AddrAdd(la, &netlink.Addr{IPNet: &net.IPNet{IP: a6.AsSlice(), Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}); err != nil {
		t.Fatal(err)
	}
	// B stays in the node, fd00:5::b/128, its way back by the gateway.
	lb := nodeLink(t, tp, node, macB)
	if err := node.AddrAdd(lb, &netlink.Addr{IPNet: &net.IPNet{IP: b6.AsSlice(), Mask: net.CIDRMask(128, 128)}, Flags: unix.IFA_F_NODAD}); err != nil {
		t.Fatal(err)
	}
	if err := node.RouteAdd(&netlink.Route{LinkIndex: lb.Attrs().Index, Dst: &net.IPNet{IP: a6.AsSlice(), Mask: net.CIDRMask(128, 128)}, Gw: gw6.AsSlice()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := linuxtest.Ping(ctx, pod, b6); err != nil {
		t.Fatalf("an on-link neighbour through the vpc: %v", err)
	}
	vpc := handle(t, tp.VPCNS)
	proxied := func() []string {
		ns, err := vpc.NeighProxyList(0, unix.AF_INET6)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range ns {
			l, err := vpc.LinkByIndex(n.LinkIndex)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, n.IP.String()+" "+l.Attrs().Name)
		}
		sort.Strings(out)
		return out
	}
	// Each address on each ENI veth.
	vA, vB := "v020000000501", "v020000000502"
	want := []string{"fd00:5::a " + vA, "fd00:5::a " + vB, "fd00:5::b " + vA, "fd00:5::b " + vB}
	if diff := cmp.Diff(want, proxied()); diff != "" {
		t.Errorf("proxy entries (-want +got):\n%s", diff)
	}
	if err := tp.UnrouteIPs(macB, b6); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"fd00:5::a " + vA, "fd00:5::a " + vB}, proxied()); diff != "" {
		t.Errorf("proxy entries after unroute (-want +got):\n%s", diff)
	}
	if err := tp.UnplugENI(macA); err != nil {
		t.Fatal(err)
	}
	if got := proxied(); len(got) != 0 {
		t.Errorf("proxy entries after unplug: %v, want none", got)
	}
}
