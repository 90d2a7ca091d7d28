package linux_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/linux/linuxtest"
	"github.com/enidnet/enid/observed"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// TestExclusiveENI: the ENI moves into the pod, is reachable from the vpc,
// ensure is idempotent, and teardown returns it with its name.
func TestExclusiveENI(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	const mac = "02:00:00:00:00:99"
	cidr := netip.MustParsePrefix("10.0.9.0/24")
	gw := observed.GatewayOf(cidr)
	podIP := netip.MustParseAddr("10.0.9.7")
	podIP6 := netip.MustParseAddr("fd00:9::7")
	if err := e.tp.PlugENI(mac, podIP, cidr, gw, podIP6); err != nil {
		t.Fatal(err)
	}
	name, err := e.tp.NodeName(mac)
	if err != nil {
		t.Fatal(err)
	}
	before := dumpNS(t, e.tp.NodeNS)
	ns, cleanup, err := e.tp.NewPodNS("excl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	s := linux.ExclusiveSpec{
		Key:   observed.AttachmentKey{ContainerID: "excl0", IfName: "eth0"},
		NetNS: ns, IfName: "eth0", MAC: mac,
		Prefix: netip.PrefixFrom(podIP, 24), Gateway: gw, MTU: 1500,
		PrefixV6: netip.PrefixFrom(podIP6, 64), GatewayV6: netip.MustParseAddr(linuxtest.GatewayV6),
		HostRoutes: []netip.Prefix{netip.MustParsePrefix("172.21.0.0/20"), netip.MustParsePrefix("fd99::/108")},
	}
	// A node whose only pods are exclusive has no shared-mode ENI to turn
	// forwarding on: the pod's service veth does.
	for _, k := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		if err := linuxtest.SetSysctl(e.tp.NodeNS, k, "0"); err != nil {
			t.Fatal(err)
		}
	}
	res, ch, err := e.dp.EnsureExclusive(ctx, s)
	if err != nil {
		t.Fatalf("ensure exclusive: %v (changes %v)", err, ch)
	}
	for _, k := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		if v, err := linuxtest.Sysctl(e.tp.NodeNS, k); err != nil || v != "1" {
			t.Errorf("node %s = %q (%v), want 1: the pod's Service traffic is forwarded by the node", k, v, err)
		}
	}
	if res.PodMAC != mac || len(res.Interfaces) != 3 {
		t.Errorf("result %+v", res)
	}
	if _, ch, err := e.dp.EnsureExclusive(ctx, s); err != nil || len(ch) != 0 {
		t.Errorf("second ensure: %v %v", ch, err)
	}
	pod := dumpNS(t, ns)
	for _, want := range []string{
		"addr 10.0.9.7/24 dev eth0",
		"route 0.0.0.0/0 via 10.0.9.253 dev eth0 table 254 proto 222 scope 0",
		"route 172.21.0.0/20 via 169.254.1.1 dev " + res.Interfaces[2].Name + " table 254 proto 222 scope 0",
		"addr fd00:9::7/64 dev eth0",
		"route ::/0 via fe80::fffe dev eth0 table 254 proto 222 scope 0",
		"route fd99::/108 via fe80::1 dev " + res.Interfaces[2].Name + " table 254 proto 222 scope 0",
	} {
		if !contains(pod, want) {
			t.Errorf("pod lacks %q:\n%s", want, pod)
		}
	}
	if !strings.Contains(pod, "link eth0 veth mac="+mac) {
		t.Errorf("eni not in the pod as eth0:\n%s", pod)
	}
	if err := linuxtest.Ping(ctx, e.tp.VPCNS, podIP); err != nil {
		t.Error(err)
	}
	if err := linuxtest.Ping(ctx, ns, gw); err != nil {
		t.Error(err)
	}
	if err := linuxtest.Ping(ctx, ns, netip.MustParseAddr(linuxtest.VPCHostV6)); err != nil {
		t.Error(err)
	}
	n, err := e.dp.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []observed.PodNet
	for _, p := range n.Pods {
		if p.Key == s.Key {
			got = append(got, p)
		}
	}
	want := []observed.PodNet{{Key: s.Key, HostVeth: res.HostVeth, NetNS: ns, IPv4: podIP, IPv6: podIP6, ENIMAC: mac, Exclusive: true,
		HostRoutes: s.HostRoutes, Healthy: true}}
	addrEq := cmp.Comparer(func(a, b netip.Addr) bool { return a == b })
	prefixEq := cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })
	if diff := cmp.Diff(want, got, addrEq, prefixEq); diff != "" {
		t.Errorf("observed (-want +got):\n%s", diff)
	}

	// The host routes change (the config's serviceCIDRs did): the route no
	// longer asked for goes, the new one comes, the others stay.
	s.HostRoutes = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd99::/108")}
	_, ch, err = e.dp.EnsureExclusive(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	sv := res.Interfaces[2].Name
	wantCh := []string{"delete route 172.21.0.0/20 via 169.254.1.1 dev " + sv + " in pod", "add route 10.96.0.0/12 via 169.254.1.1 dev " + sv + " onlink in pod"}
	if diff := cmp.Diff(wantCh, []string(ch)); diff != "" {
		t.Errorf("changes of the new host routes (-want +got):\n%s", diff)
	}
	if pod := dumpNS(t, ns); contains(pod, "route 172.21.0.0/20 via 169.254.1.1 dev "+sv+" table 254 proto 222 scope 0") ||
		!contains(pod, "route 10.96.0.0/12 via 169.254.1.1 dev "+sv+" table 254 proto 222 scope 0") {
		t.Errorf("pod routes after the change:\n%s", pod)
	}
	if n, err = e.dp.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range n.Pods {
		if p.Key == s.Key && !slices.Equal(p.HostRoutes, s.HostRoutes) {
			t.Errorf("observed host routes %v, want %v", p.HostRoutes, s.HostRoutes)
		}
	}
	for _, d := range n.ENIDevices {
		if d.MAC == mac {
			t.Errorf("moved eni still listed on the node: %+v", d)
		}
	}
	ch, err = e.dp.TeardownExclusive(ctx, s.Key, ns, mac)
	if err != nil {
		t.Fatalf("teardown: %v", err)
	}
	if diff := cmp.Diff(before, dumpNS(t, e.tp.NodeNS)); diff != "" {
		t.Errorf("node after teardown (-before +after), changes %v:\n%s", ch, diff)
	}
	if !contains(dumpNS(t, e.tp.NodeNS), "link "+name+" veth mac="+mac+" mtu=1500 up=false alias=\"\"") {
		t.Errorf("eni not back as %s", name)
	}
	if ch, err := e.dp.TeardownExclusive(ctx, s.Key, ns, mac); err != nil || len(ch) != 0 {
		t.Errorf("second teardown: %v %v", ch, err)
	}
}

// TestExclusiveTeardownNetnsGone: teardown succeeds when the pod's netns
// (and with a veth ENI, the device) is gone, and leaves no service veth.
func TestExclusiveTeardownNetnsGone(t *testing.T) {
	e := newEnv(t, 0)
	ctx := ctxT(t)
	const mac = "02:00:00:00:00:98"
	cidr := netip.MustParsePrefix("10.0.8.0/24")
	if err := e.tp.PlugENI(mac, netip.MustParseAddr("10.0.8.7"), cidr, observed.GatewayOf(cidr)); err != nil {
		t.Fatal(err)
	}
	ns, _, err := e.tp.NewPodNS("exclgone")
	if err != nil {
		t.Fatal(err)
	}
	s := linux.ExclusiveSpec{
		Key: observed.AttachmentKey{ContainerID: "excl1", IfName: "eth0"}, NetNS: ns, IfName: "eth0", MAC: mac,
		Prefix: netip.MustParsePrefix("10.0.8.7/24"), Gateway: observed.GatewayOf(cidr),
	}
	if _, _, err := e.dp.EnsureExclusive(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := e.tp.DeletePodNS(ns); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := e.dp.TeardownExclusive(ctx, s.Key, ns, mac); err != nil {
			t.Fatalf("teardown: %v", err)
		}
	}
	if d := dumpNS(t, e.tp.NodeNS); strings.Contains(d, linux.HostVethName(s.Key)) {
		t.Errorf("service veth left behind:\n%s", d)
	}
}

// TestExclusiveDeviceReturned: when a pod's netns dies the kernel puts a
// physical ENI back on the host under another name, label still on. It
// is observed as an ENI device (the attachment as unhealthy), and
// teardown without a netns renames it back and clears the label.
func TestExclusiveDeviceReturned(t *testing.T) {
	e := newEnv(t, 0)
	ctx := ctxT(t)
	const mac = "02:00:00:00:00:97"
	cidr := netip.MustParsePrefix("10.0.7.0/24")
	if err := e.tp.PlugENI(mac, netip.MustParseAddr("10.0.7.7"), cidr, observed.GatewayOf(cidr)); err != nil {
		t.Fatal(err)
	}
	before := dumpNS(t, e.tp.NodeNS)
	ns, cleanup, err := e.tp.NewPodNS("exclret")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	s := linux.ExclusiveSpec{
		Key: observed.AttachmentKey{ContainerID: "excl2", IfName: "eth0"}, NetNS: ns, IfName: "eth0", MAC: mac,
		Prefix: netip.MustParsePrefix("10.0.7.7/24"), Gateway: observed.GatewayOf(cidr),
	}
	if _, _, err := e.dp.EnsureExclusive(ctx, s); err != nil {
		t.Fatal(err)
	}
	// What the kernel does for a physical device when the netns dies.
	nodeFD, err := netns.GetFromPath(e.tp.NodeNS)
	if err != nil {
		t.Fatal(err)
	}
	defer nodeFD.Close()
	withH(t, ns, func(h *netlink.Handle) error {
		l, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := h.LinkSetDown(l); err != nil {
			return err
		}
		if err := h.LinkSetName(l, "dev7"); err != nil {
			return err
		}
		return h.LinkSetNsFd(l, int(nodeFD))
	})
	n, err := e.dp.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var dev *observed.ENIDevice
	for i := range n.ENIDevices {
		if n.ENIDevices[i].MAC == mac {
			dev = &n.ENIDevices[i]
		}
	}
	if dev == nil || dev.Name != "dev7" {
		t.Errorf("returned eni not observed as a device: %+v", n.ENIDevices)
	}
	if len(n.Pods) != 1 || n.Pods[0].Key != s.Key || n.Pods[0].Healthy {
		t.Errorf("pods = %+v, want the one exclusive attachment, unhealthy", n.Pods)
	}
	if _, err := e.dp.TeardownExclusive(ctx, s.Key, "", mac); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, dumpNS(t, e.tp.NodeNS)); diff != "" {
		t.Errorf("node after teardown (-before +after):\n%s", diff)
	}
}
