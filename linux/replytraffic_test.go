package linux_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/linux/linuxtest"
	"github.com/enidnet/enid/observed"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Service traffic through the reply path: kube-proxy's rules written with
// iptables in the node namespace, real connections from the vpc.

// netState renders what a failed connection needs looked at: the vpc's
// anti-spoofing counters, the node's rules, routes, neighbours and nat
// table.
func netState(tp *linuxtest.Topology) string {
	var b strings.Builder
	for _, c := range []struct{ ns, cmd string }{
		{tp.VPCNS, "nft list table inet simvpc"},
		{tp.NodeNS, "ip rule"}, {tp.NodeNS, "ip route show table all"}, {tp.NodeNS, "ip neigh"},
		{tp.NodeNS, "nft list ruleset"}, {tp.VPCNS, "ip route"}, {tp.VPCNS, "ip neigh"},
	} {
		out, _ := exec.Command("ip", append([]string{"netns", "exec", nsName(c.ns)}, strings.Fields(c.cmd)...)...).CombinedOutput()
		fmt.Fprintf(&b, "--- %s: %s\n%s", nsName(c.ns), c.cmd, out)
	}
	return b.String()
}

// nsName is the name `ip netns` knows a /run/netns path by.
func nsName(path string) string { return path[strings.LastIndexByte(path, '/')+1:] }

// iptables runs iptables (iptables-nft, as on a kube-proxy node) in the
// namespace.
func iptables(t *testing.T, ns string, args ...string) {
	t.Helper()
	xtables(t, ns, "iptables", args...)
}

// xtables runs iptables or ip6tables in the namespace.
func xtables(t *testing.T, ns, bin string, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", nsName(ns), bin, "-w"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("iptables %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// kubeProxyNodePort writes what kube-proxy (iptables mode) writes for a
// NodePort whose one endpoint is backend: a DNAT of <nodeIP>:<port> in
// nat PREROUTING, and, with masq, its 0x4000 mark and the MASQUERADE in
// POSTROUTING that it triggers.
func kubeProxyNodePort(t *testing.T, ns string, node netip.Addr, port int, backend netip.AddrPort, masq bool) {
	t.Helper()
	bin := "iptables"
	if node.Is6() {
		bin = "ip6tables"
	}
	dst := []string{"-d", netip.PrefixFrom(node, node.BitLen()).String(), "-p", "tcp", "--dport", fmt.Sprint(port)}
	if masq {
		xtables(t, ns, bin, append(append([]string{"-t", "nat", "-A", "PREROUTING"}, dst...), "-j", "MARK", "--set-xmark", "0x4000/0x4000")...)
		xtables(t, ns, bin, "-t", "nat", "-A", "POSTROUTING", "-m", "mark", "--mark", "0x4000/0x4000", "-j", "MASQUERADE")
	}
	xtables(t, ns, bin, append(append([]string{"-t", "nat", "-A", "PREROUTING"}, dst...), "-j", "DNAT", "--to-destination", backend.String())...)
}

// serveTCP answers every connection to addr in the namespace with reply.
func serveTCP(t *testing.T, ns string, addr netip.AddrPort, reply string) {
	t.Helper()
	var ln net.Listener
	err := linuxtest.InNS(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", addr.String())
		return err
	})
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, reply) // the client sees a short answer as a failure
			_ = c.Close()                   // nothing to report: the client reads until EOF
		}
	}()
}

// fetchTCP connects from src in the namespace to dst and returns what the
// server said.
func fetchTCP(ns string, src netip.Addr, dst netip.AddrPort, within time.Duration) (string, error) {
	var c net.Conn
	err := linuxtest.InNS(ns, func() error {
		d := net.Dialer{Timeout: within}
		if src.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
		}
		var err error
		c, err = d.DialContext(context.Background(), "tcp", dst.String())
		return err
	})
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }() // read-only use
	if err := c.SetDeadline(time.Now().Add(within)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// TestReplyPathNodePort: a client elsewhere in the VPC connects to
// <nodeIP>:<NodePort>, which kube-proxy's rules DNAT to a pod of the node
// (with masquerade and without, as with externalTrafficPolicy Local). The
// VPC drops a packet an ENI sends from an address not its own (simvpc's
// anti-spoofing), so without the reply path the pod's reply, sent out of
// its secondary ENI with the node's address, never arrives; with it the
// reply leaves by the primary interface.
func TestReplyPathNodePort(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	plugPrimary(t, e.tp)
	vpc := nsHandle(t, e.tp.VPCNS)
	lo, err := vpc.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := vpc.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: vpcClient.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
		t.Fatal(err)
	}
	s := e.podSpec(t, 0, 10)
	if _, _, err := e.dp.EnsurePod(ctx, s); err != nil {
		t.Fatal(err)
	}
	backend := netip.AddrPortFrom(s.IPv4, 8080)
	serveTCP(t, s.NetNS, backend, "pod")
	kubeProxyNodePort(t, e.tp.NodeNS, primaryIP, 30080, backend, true)
	kubeProxyNodePort(t, e.tp.NodeNS, primaryIP, 30081, backend, false)

	try := func(port int, within time.Duration) error {
		got, err := fetchTCP(e.tp.VPCNS, vpcClient, netip.AddrPortFrom(primaryIP, uint16(port)), within)
		if err == nil && got != "pod" {
			err = fmt.Errorf("answer %q, want %q", got, "pod")
		}
		return err
	}
	// The pod itself is reachable from the VPC, straight to its address:
	// the topology works.
	if got, err := fetchTCP(e.tp.VPCNS, vpcClient, backend, 5*time.Second); err != nil || got != "pod" {
		t.Fatalf("straight to the pod: %q, %v\n%s", got, err, netState(e.tp))
	}
	for _, port := range []int{30080, 30081} {
		if err := try(port, time.Second); err == nil {
			t.Errorf("NodePort %d answered without the reply path: the VPC model lets spoofed replies through", port)
		}
	}
	if _, err := e.dp.EnsureReplyPath(ctx, linux.ReplyPathSpec{PrimaryMAC: primaryMAC}); err != nil {
		t.Fatal(err)
	}
	for _, port := range []int{30080, 30081} {
		if err := try(port, 5*time.Second); err != nil {
			t.Errorf("NodePort %d with the reply path: %v", port, err)
		}
	}
	if _, err := e.dp.RemoveReplyPath(ctx); err != nil {
		t.Fatal(err)
	}
	if err := try(30081, time.Second); err == nil {
		t.Error("NodePort answered after RemoveReplyPath")
	}
}

// TestReplyPathNodePortIPv6 is TestReplyPathNodePort over IPv6: the
// primary interface has an IPv6 address and default route, ip6tables
// DNATs <nodeIPv6>:<port> to the pod's IPv6 address, and the client is the
// vpc's IPv6 host.
func TestReplyPathNodePortIPv6(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	node6 := netip.MustParseAddr("fd00:9::5")
	if err := e.tp.PlugENI(primaryMAC, primaryIP, primaryCIDR, primaryGW, node6); err != nil {
		t.Fatal(err)
	}
	if err := e.tp.AddressPrimary(primaryMAC, primaryIP, primaryCIDR, primaryGW); err != nil {
		t.Fatal(err)
	}
	name, err := e.tp.NodeName(primaryMAC)
	if err != nil {
		t.Fatal(err)
	}
	h := nsHandle(t, e.tp.NodeNS)
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: node6.AsSlice(), Mask: net.CIDRMask(128, 128)}, Flags: unix.IFA_F_NODAD}); err != nil {
		t.Fatal(err)
	}
	gw6 := netip.MustParseAddr(linuxtest.GatewayV6)
	if err := h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}, Gw: gw6.AsSlice()}); err != nil {
		t.Fatal(err)
	}
	s := e.podSpec(t, 0, 10)
	if _, _, err := e.dp.EnsurePod(ctx, s); err != nil {
		t.Fatal(err)
	}
	backend := netip.AddrPortFrom(s.IPv6, 8080)
	serveTCP(t, s.NetNS, backend, "pod")
	kubeProxyNodePort(t, e.tp.NodeNS, node6, 30080, backend, true)
	kubeProxyNodePort(t, e.tp.NodeNS, node6, 30081, backend, false)
	client := netip.MustParseAddr(linuxtest.VPCHostV6)
	try := func(port int, within time.Duration) error {
		got, err := fetchTCP(e.tp.VPCNS, client, netip.AddrPortFrom(node6, uint16(port)), within)
		if err == nil && got != "pod" {
			err = fmt.Errorf("answer %q, want %q", got, "pod")
		}
		return err
	}
	if got, err := fetchTCP(e.tp.VPCNS, client, backend, 5*time.Second); err != nil || got != "pod" {
		t.Fatalf("straight to the pod: %q, %v\n%s", got, err, netState(e.tp))
	}
	for _, port := range []int{30080, 30081} {
		if err := try(port, time.Second); err == nil {
			t.Errorf("NodePort [%s]:%d answered without the reply path", node6, port)
		}
	}
	if _, err := e.dp.EnsureReplyPath(ctx, linux.ReplyPathSpec{PrimaryMAC: primaryMAC}); err != nil {
		t.Fatal(err)
	}
	for _, port := range []int{30080, 30081} {
		if err := try(port, 5*time.Second); err != nil {
			t.Errorf("NodePort [%s]:%d with the reply path: %v", node6, port, err)
		}
	}
}

// TestReplyPathNodePortExclusive: a NodePort to a pod that owns its ENI
// (exclusive mode). The pod's default route is its own ENI's, so its
// replies never pass the node's routing. Masqueraded, the reply goes to
// the node's address through the VPC, arrives on the primary interface,
// and conntrack sends it on: it works. Not masqueraded
// (externalTrafficPolicy Local), the pod answers the client straight from
// its own address, which the client's connection does not expect: that
// fails, with or without the reply path (docs/datapath.md: not supported
// in exclusive mode). If it starts to answer, update the docs.
func TestReplyPathNodePortExclusive(t *testing.T) {
	e := newEnv(t, 0)
	ctx := ctxT(t)
	plugPrimary(t, e.tp)
	vpc := nsHandle(t, e.tp.VPCNS)
	lo, err := vpc.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := vpc.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: vpcClient.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
		t.Fatal(err)
	}
	const mac = "02:00:00:00:00:98"
	cidr := netip.MustParsePrefix("10.0.8.0/24")
	gw := netip.MustParseAddr("10.0.8.253")
	podIP := netip.MustParseAddr("10.0.8.7")
	if err := e.tp.PlugENI(mac, podIP, cidr, gw); err != nil {
		t.Fatal(err)
	}
	ns, cleanup, err := e.tp.NewPodNS("exclnp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	s := linux.ExclusiveSpec{
		Key:   observed.AttachmentKey{ContainerID: "exclnp0", IfName: "eth0"},
		NetNS: ns, IfName: "eth0", MAC: mac,
		Prefix: netip.PrefixFrom(podIP, 24), Gateway: gw, MTU: 1500,
		HostRoutes: []netip.Prefix{netip.MustParsePrefix("172.21.0.0/20")},
	}
	if _, _, err := e.dp.EnsureExclusive(ctx, s); err != nil {
		t.Fatal(err)
	}
	// No shared ENI is configured on this node, and EnsureENI is what sets
	// ip_forward: a Kubernetes node has it on anyway (kubeadm's preflight
	// requires it).
	if err := linuxtest.SetSysctl(e.tp.NodeNS, "net/ipv4/ip_forward", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dp.EnsureReplyPath(ctx, linux.ReplyPathSpec{PrimaryMAC: primaryMAC}); err != nil {
		t.Fatal(err)
	}
	backend := netip.AddrPortFrom(podIP, 8080)
	serveTCP(t, ns, backend, "pod")
	kubeProxyNodePort(t, e.tp.NodeNS, primaryIP, 30080, backend, true)
	kubeProxyNodePort(t, e.tp.NodeNS, primaryIP, 30081, backend, false)
	if got, err := fetchTCP(e.tp.VPCNS, vpcClient, netip.AddrPortFrom(primaryIP, 30080), 5*time.Second); err != nil || got != "pod" {
		t.Errorf("masqueraded NodePort to an exclusive-ENI pod: %q, %v\n%s", got, err, netState(e.tp))
	}
	if got, err := fetchTCP(e.tp.VPCNS, vpcClient, netip.AddrPortFrom(primaryIP, 30081), time.Second); err == nil {
		t.Errorf("NodePort without masquerade to an exclusive-ENI pod answered %q: docs/datapath.md says it cannot", got)
	}
}
