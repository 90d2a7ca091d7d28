package simvpc_test

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/enidnet/enid/internal/roottest"
	"github.com/enidnet/enid/linux/linuxtest"
	"github.com/enidnet/enid/testbed/simvpc"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// listenUDP opens a UDP socket bound to addr inside the namespace.
func listenUDP(t *testing.T, ns string, addr netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := simvpc.InNS(ns, func() error {
		var err error
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		return err
	})
	if err != nil {
		t.Fatalf("listen udp %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// arrives sends one datagram from src (an address of the node) to dst and
// reports whether the vpc's socket rx received it.
func arrives(t *testing.T, node string, src netip.Addr, rx *net.UDPConn) bool {
	t.Helper()
	tx := listenUDP(t, node, netip.AddrPortFrom(src, 0))
	dst := rx.LocalAddr().(*net.UDPAddr)
	buf := make([]byte, 64)
	for range 3 {
		if _, err := tx.WriteToUDP([]byte(src.String()), dst); err != nil {
			t.Fatalf("send from %s: %v", src, err)
		}
		if err := rx.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		for {
			n, from, err := rx.ReadFromUDPAddrPort(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if from.Addr().Unmap() == src && string(buf[:n]) == src.String() {
				return true
			}
		}
	}
	return false
}

// TestAntiSpoofing: what an ENI sends from one of its own addresses
// (primary, secondary, IPv6) reaches the VPC; what it sends from another
// ENI's address, or from an address of no ENI, is dropped, for IPv4 and
// IPv6, even when the vpc's conf.all.rp_filter is loose.
func TestAntiSpoofing(t *testing.T) {
	roottest.Need(t)
	tp := linuxtest.NewTopology(t)
	cidr := netip.MustParsePrefix("10.3.0.0/24")
	gw := netip.MustParseAddr("10.3.0.253")
	macA, macB := "02:00:00:00:03:01", "02:00:00:00:03:02"
	a, a2, a6 := netip.MustParseAddr("10.3.0.5"), netip.MustParseAddr("10.3.0.6"), netip.MustParseAddr("fd00:3::5")
	b, b6 := netip.MustParseAddr("10.3.0.7"), netip.MustParseAddr("fd00:3::7")
	stray, stray6 := netip.MustParseAddr("10.3.0.99"), netip.MustParseAddr("fd00:3::99")
	if err := tp.PlugENI(macA, a, cidr, gw, a2, a6); err != nil {
		t.Fatal(err)
	}
	if err := tp.PlugENI(macB, b, cidr, gw, b6); err != nil {
		t.Fatal(err)
	}
	// What a host whose sysctl.d makes all interfaces loose (2) gives a
	// new namespace: the topology must stay strict anyway.
	if err := linuxtest.SetSysctl(tp.VPCNS, "net/ipv4/conf/all/rp_filter", "2"); err != nil {
		t.Fatal(err)
	}
	if err := tp.PlugENI("02:00:00:00:03:03", netip.MustParseAddr("10.3.0.8"), cidr, gw); err != nil {
		t.Fatal(err)
	}

	// Every address sits on ENI A's device in the node, so each is sent
	// out of ENI A.
	node := handle(t, tp.NodeNS)
	l := nodeLink(t, tp, node, macA)
	for _, ip := range []netip.Addr{a, a2, b, stray, a6, b6, stray6} {
		if err := node.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(ip.BitLen(), ip.BitLen())}, Flags: unix.IFA_F_NODAD}); err != nil {
			t.Fatal(err)
		}
	}
	vpc := handle(t, tp.VPCNS)
	va, err := vpc.LinkByName("v" + "020000000301")
	if err != nil {
		t.Fatal(err)
	}
	gw6 := netip.MustParseAddr(linuxtest.GatewayV6)
	host6 := netip.MustParseAddr(linuxtest.VPCHostV6)
	for _, r := range []*netlink.Route{
		{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: gw.AsSlice(), Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK},
		{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: host6.AsSlice(), Mask: net.CIDRMask(128, 128)}, Gw: gw6.AsSlice()},
	} {
		if err := node.RouteAdd(r); err != nil {
			t.Fatal(err)
		}
	}
	// The node knows the gateways' MAC: an ARP request from a spoofed
	// source would be refused by rp_filter too, and the test is about
	// the data packets.
	for _, ip := range []netip.Addr{gw, gw6} {
		fam := unix.AF_INET
		if ip.Is6() {
			fam = unix.AF_INET6
		}
		if err := node.NeighSet(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: fam, State: netlink.NUD_PERMANENT, IP: ip.AsSlice(), HardwareAddr: va.Attrs().HardwareAddr}); err != nil {
			t.Fatal(err)
		}
	}
	rx4 := listenUDP(t, tp.VPCNS, netip.AddrPortFrom(gw, 4789))
	rx6 := listenUDP(t, tp.VPCNS, netip.AddrPortFrom(host6, 4789))
	for _, c := range []struct {
		src  netip.Addr
		rx   *net.UDPConn
		want bool
	}{
		{a, rx4, true},
		{a2, rx4, true},
		{a6, rx6, true},
		{b, rx4, false},
		{stray, rx4, false},
		{b6, rx6, false},
		{stray6, rx6, false},
	} {
		if got := arrives(t, tp.NodeNS, c.src, c.rx); got != c.want {
			t.Errorf("from %s out of ENI A: arrived %v, want %v", c.src, got, c.want)
		}
	}
}
