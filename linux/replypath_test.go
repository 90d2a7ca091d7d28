package linux_test

import (
	"context"
	"errors"
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
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The node's primary ENI in these tests.
const (
	primaryMAC = "02:00:00:00:00:f0"
)

var (
	primaryIP   = netip.MustParseAddr("10.0.9.5")
	primaryCIDR = netip.MustParsePrefix("10.0.9.0/24")
	primaryGW   = netip.MustParseAddr("10.0.9.253")
	// vpcClient is an address elsewhere in the VPC (on the vpc's lo).
	vpcClient = netip.MustParseAddr("10.255.0.1")
)

// plugPrimary plugs the node's primary ENI and addresses it as the node's
// DHCP client would.
func plugPrimary(t *testing.T, tp *linuxtest.Topology) string {
	t.Helper()
	if err := tp.PlugENI(primaryMAC, primaryIP, primaryCIDR, primaryGW); err != nil {
		t.Fatal(err)
	}
	if err := tp.AddressPrimary(primaryMAC, primaryIP, primaryCIDR, primaryGW); err != nil {
		t.Fatal(err)
	}
	name, err := tp.NodeName(primaryMAC)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// nodeHandle is a route handle in the namespace.
func nsHandle(t *testing.T, path string) *netlink.Handle {
	t.Helper()
	fd, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fd.Close() })
	h, err := netlink.NewHandleAt(fd, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// markRules returns the node's rules at PrioMarked, rendered.
func markRules(t *testing.T, h *netlink.Handle) []string {
	t.Helper()
	var got []string
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rules, err := h.RuleList(fam)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rules {
			if r.Priority == linux.PrioMarked {
				m := uint32(0)
				if r.Mask != nil {
					m = *r.Mask
				}
				got = append(got, fmt.Sprintf("fam %d fwmark %#x/%#x table %d proto %d", fam, r.Mark, m, r.Table, r.Protocol))
			}
		}
	}
	return got
}

// nftIn is an nftables connection in the namespace.
func nftIn(t *testing.T, path string) *nftables.Conn {
	t.Helper()
	fd, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fd.Close() })
	c, err := nftables.New(nftables.WithNetNSFd(int(fd)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestReplyPath: EnsureReplyPath installs the table and both families'
// rules, changes nothing the second time, repairs each piece removed or
// altered by hand, follows a renamed primary interface, and
// RemoveReplyPath leaves nothing.
func TestReplyPath(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	name := plugPrimary(t, e.tp)
	h := nsHandle(t, e.tp.NodeNS)
	spec := linux.ReplyPathSpec{PrimaryMAC: primaryMAC}

	if _, err := e.dp.EnsureReplyPath(ctx, linux.ReplyPathSpec{PrimaryMAC: "02:00:00:00:00:99"}); !errors.Is(err, linux.ErrNotFound) {
		t.Errorf("ensure for a MAC no device has: %v, want ErrNotFound", err)
	}
	ch, err := e.dp.EnsureReplyPath(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch) != 3 {
		t.Errorf("first ensure: %q, want the table and two rules", ch)
	}
	wantRules := []string{
		fmt.Sprintf("fam %d fwmark 0x2000/0x2000 table 254 proto 222", netlink.FAMILY_V4),
		fmt.Sprintf("fam %d fwmark 0x2000/0x2000 table 254 proto 222", netlink.FAMILY_V6),
	}
	if got := markRules(t, h); strings.Join(got, "\n") != strings.Join(wantRules, "\n") {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantRules, "\n"))
	}
	if p, err := e.dp.ReplyPathProblems(name); err != nil || p != nil {
		t.Errorf("problems after ensure: %q, %v", p, err)
	}
	// nft reads back what the library wrote, comments included.
	out, err := exec.Command("ip", "netns", "exec", nsName(e.tp.NodeNS), "nft", "list", "table", "inet", "enid").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v\n%s", err, out)
	}
	for _, want := range []string{
		`iifname "` + name + `" ct direction original ct mark set ct mark | 0x00002000`,
		`iifname "enid*" ct mark & 0x00002000 != 0x00000000 meta mark set meta mark | 0x00002000`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("nft list table inet enid lacks %q:\n%s", want, out)
		}
	}
	if ch, err := e.dp.EnsureReplyPath(ctx, spec); err != nil || len(ch) != 0 {
		t.Errorf("second ensure: %q, %v; want no change", ch, err)
	}

	// Drift: each repaired by one ensure.
	v4 := netlink.NewRule()
	v4.Priority, v4.Mark, v4.Table, v4.Protocol = linux.PrioMarked, linux.MarkPrimary, unix.RT_TABLE_MAIN, linux.Proto
	m := uint32(linux.MarkPrimary)
	v4.Mask = &m
	if err := h.RuleDel(v4); err != nil {
		t.Fatal(err)
	}
	if p, _ := e.dp.ReplyPathProblems(name); len(p) != 1 {
		t.Errorf("problems with the IPv4 rule gone: %q", p)
	}
	if err := h.RuleAdd(v4); err != nil { // and a second copy of the IPv6 rule
		t.Fatal(err)
	}
	dup := *v4
	dup.Family = netlink.FAMILY_V6
	dup.Table = 100 // a wrong table at enid's priority
	if err := h.RuleAdd(&dup); err != nil {
		t.Fatal(err)
	}
	if p, _ := e.dp.ReplyPathProblems(name); len(p) != 1 || !strings.HasPrefix(p[0], "unexpected rule ipv6") {
		t.Errorf("problems with a wrong IPv6 rule at enid's priority: %q", p)
	}
	if ch, err := e.dp.EnsureReplyPath(ctx, spec); err != nil || len(ch) != 1 || !strings.HasPrefix(ch[0], "delete rule ipv6") {
		t.Errorf("ensure after a wrong IPv6 rule: %q, %v", ch, err)
	}
	c := nftIn(t, e.tp.NodeNS)
	c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: linux.NFTable})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if ch, err := e.dp.EnsureReplyPath(ctx, spec); err != nil || len(ch) != 1 || !strings.Contains(ch[0], "no nftables table") {
		t.Errorf("ensure after the table was deleted: %q, %v", ch, err)
	}
	// A rule deleted from the chain.
	out, err = exec.Command("ip", "netns", "exec", nsName(e.tp.NodeNS), "nft", "-a", "list", "chain", "inet", "enid", "prerouting").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v\n%s", err, out)
	}
	handle := out[strings.LastIndex(string(out), "# handle ")+len("# handle "):]
	handle = handle[:strings.IndexByte(string(handle), '\n')]
	if out, err := exec.Command("ip", "netns", "exec", nsName(e.tp.NodeNS), "nft", "delete", "rule", "inet", "enid", "prerouting", "handle", string(handle)).CombinedOutput(); err != nil {
		t.Fatalf("nft delete rule: %v\n%s", err, out)
	}
	if ch, err := e.dp.EnsureReplyPath(ctx, spec); err != nil || len(ch) != 1 || !strings.Contains(ch[0], "holds 1 rules, want 2") {
		t.Errorf("ensure after a rule was deleted: %q, %v", ch, err)
	}
	// The primary interface renamed: the table follows it.
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetDown(l); err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetName(l, "ens5"); err != nil {
		t.Fatal(err)
	}
	if ch, err := e.dp.EnsureReplyPath(ctx, spec); err != nil || len(ch) != 1 || !strings.Contains(ch[0], "entering on ens5") {
		t.Errorf("ensure after a rename: %q, %v", ch, err)
	}
	if p, err := e.dp.ReplyPathProblems("ens5"); err != nil || p != nil {
		t.Errorf("problems after the rename: %q, %v", p, err)
	}

	ch, err = e.dp.RemoveReplyPath(ctx)
	if err != nil || len(ch) != 3 {
		t.Errorf("remove: %q, %v; want the table and two rules", ch, err)
	}
	if got := markRules(t, h); len(got) != 0 {
		t.Errorf("rules left: %q", got)
	}
	tables, err := nftIn(t, e.tp.NodeNS).ListTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb.Name == linux.NFTable {
			t.Errorf("table %s left", tb.Name)
		}
	}
	if ch, err := e.dp.RemoveReplyPath(ctx); err != nil || len(ch) != 0 {
		t.Errorf("second remove: %q, %v", ch, err)
	}
}

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

// BenchmarkReplyPathConverged measures EnsureReplyPath on a node where it
// is in place (what each full observation costs the agent).
func BenchmarkReplyPathConverged(b *testing.B) {
	e := newEnv(b, 1)
	ctx := ctxT(b)
	if err := e.tp.PlugENI(primaryMAC, primaryIP, primaryCIDR, primaryGW); err != nil {
		b.Fatal(err)
	}
	spec := linux.ReplyPathSpec{PrimaryMAC: primaryMAC}
	if _, err := e.dp.EnsureReplyPath(ctx, spec); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if ch, err := e.dp.EnsureReplyPath(ctx, spec); err != nil || len(ch) != 0 {
			b.Fatal(ch, err)
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
