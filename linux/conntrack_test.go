package linux_test

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/observed"
)

// ctHandle is a conntrack netlink handle in the namespace at path.
func ctHandle(t *testing.T, path string) *netlink.Handle {
	t.Helper()
	fd, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fd.Close() })
	h, err := netlink.NewHandleAt(fd, unix.NETLINK_NETFILTER)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	if _, err := h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET); err != nil {
		t.Skipf("no conntrack in this kernel: %v", err)
	}
	return h
}

// serviceFlow is what kube-proxy's DNAT of a Service leaves in the node's
// table: client -> service VIP, answered by the pod at podIP, in SYN_SENT
// (the state that lives 120 s), with the kernel's own timeout for it.
func serviceFlow(client, vip, pod netip.Addr, sport uint16) *netlink.ConntrackFlow {
	fam := uint8(unix.AF_INET)
	if pod.Is6() {
		fam = unix.AF_INET6
	}
	ip := func(a netip.Addr) net.IP { return net.IP(a.AsSlice()) }
	return &netlink.ConntrackFlow{
		FamilyType: fam,
		Forward:    netlink.IPTuple{SrcIP: ip(client), DstIP: ip(vip), Protocol: unix.IPPROTO_TCP, SrcPort: sport, DstPort: 80},
		Reverse:    netlink.IPTuple{SrcIP: ip(pod), DstIP: ip(client), Protocol: unix.IPPROTO_TCP, SrcPort: 8080, DstPort: sport},
		TimeOut:    120,
		ProtoInfo:  &netlink.ProtoInfoTCP{State: nl.TCP_CONNTRACK_SYN_SENT},
	}
}

func addFlow(t *testing.T, h *netlink.Handle, f *netlink.ConntrackFlow) {
	t.Helper()
	if err := h.ConntrackCreate(netlink.ConntrackTable, netlink.InetFamily(f.FamilyType), f); err != nil {
		t.Fatalf("create conntrack entry %s: %v", f, err)
	}
}

// naming lists the entries of the table that name a, as text.
func naming(t *testing.T, h *netlink.Handle, a netip.Addr) []string {
	t.Helper()
	fam := netlink.InetFamily(unix.AF_INET)
	if a.Is6() {
		fam = unix.AF_INET6
	}
	flows, err := h.ConntrackTableList(netlink.ConntrackTable, fam)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range flows {
		for _, ip := range []net.IP{f.Forward.SrcIP, f.Forward.DstIP, f.Reverse.SrcIP, f.Reverse.DstIP} {
			if ip.Equal(net.IP(a.AsSlice())) {
				out = append(out, f.String())
				break
			}
		}
	}
	return out
}

// TestConntrackOnReuse: an address bound to a pod starts with none of its
// previous holder's conntrack entries in the node's namespace (a lingering
// SYN_SENT of a Service DNAT to the old pod, IPv4 and IPv6), gone when
// EnsurePod returns; entries of other addresses stay. A repair of the live
// pod leaves its own connections alone; its teardown removes its
// entries, but not those of an address another pod holds.
func TestConntrackOnReuse(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	h := ctHandle(t, e.tp.NodeNS)
	a, b := e.podSpec(t, 0, 11), e.podSpec(t, 0, 12)
	client, vip := netip.MustParseAddr("10.200.0.7"), netip.MustParseAddr("10.96.0.10")
	client6, vip6 := netip.MustParseAddr("fd00:200::7"), netip.MustParseAddr("fd00:96::10")
	other := netip.MustParseAddr("10.0.1.50")
	addFlow(t, h, serviceFlow(client, vip, a.IPv4, 40001)) // the old pod's, lingering
	addFlow(t, h, serviceFlow(client6, vip6, a.IPv6, 40002))
	addFlow(t, h, serviceFlow(client, vip, other, 40003)) // someone else's
	if got := naming(t, h, a.IPv4); len(got) != 1 {
		t.Fatalf("before: %v", got)
	}

	_, ch, err := e.dp.EnsurePod(ctx, a)
	if err != nil {
		t.Fatalf("ensure pod: %v (%v)", err, ch)
	}
	for _, ip := range []netip.Addr{a.IPv4, a.IPv6} {
		if got := naming(t, h, ip); len(got) != 0 {
			t.Errorf("entries naming %s after ADD: %v", ip, got)
		}
	}
	if got := naming(t, h, other); len(got) != 1 {
		t.Errorf("an unrelated entry went: %v", got)
	}
	if !slices.ContainsFunc(ch, func(c string) bool { return strings.Contains(c, "conntrack entries naming "+a.IPv4.String()) }) {
		t.Errorf("changes do not say the flush: %v", ch)
	}

	// The pod's own connection; a pass that finds everything in place
	// (an agent restart, a resync) must not cut it.
	addFlow(t, h, serviceFlow(client, vip, a.IPv4, 40004))
	if _, ch, err := e.dp.EnsurePod(ctx, a); err != nil || len(ch) != 0 {
		t.Fatalf("second ensure: %v %v", err, ch)
	}
	if got := naming(t, h, a.IPv4); len(got) != 1 {
		t.Errorf("the live pod's entry after a no-op ensure: %v", got)
	}

	if _, _, err := e.dp.EnsurePod(ctx, b); err != nil {
		t.Fatal(err)
	}
	addFlow(t, h, serviceFlow(client, vip, b.IPv4, 40005))
	// b's address among those the caller names for a: another pod holds it.
	if _, err := e.dp.TeardownPod(ctx, a.Key, a.NetNS, a.IPv4, a.IPv6, b.IPv4); err != nil {
		t.Fatal(err)
	}
	if got := naming(t, h, a.IPv4); len(got) != 0 {
		t.Errorf("entries naming %s after DEL: %v", a.IPv4, got)
	}
	if got := naming(t, h, b.IPv4); len(got) != 1 {
		t.Errorf("b's entry after a's teardown: %v", got)
	}
	if got := naming(t, h, other); len(got) != 1 {
		t.Errorf("an unrelated entry went at DEL: %v", got)
	}
}

// TestConntrackExclusive: an exclusive pod's address is flushed from the
// node's table when it is bound and when it is released, as in shared mode.
func TestConntrackExclusive(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	h := ctHandle(t, e.tp.NodeNS)
	const mac = "02:00:00:00:00:98"
	cidr := netip.MustParsePrefix("10.0.8.0/24")
	gw := observed.GatewayOf(cidr)
	ip := netip.MustParseAddr("10.0.8.7")
	if err := e.tp.PlugENI(mac, ip, cidr, gw); err != nil {
		t.Fatal(err)
	}
	ns, cleanup, err := e.tp.NewPodNS("exct")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	s := linux.ExclusiveSpec{Key: observed.AttachmentKey{ContainerID: "exct0", IfName: "eth0"},
		NetNS: ns, IfName: "eth0", MAC: mac, Prefix: netip.PrefixFrom(ip, 24), Gateway: gw, MTU: 1500}
	addFlow(t, h, serviceFlow(netip.MustParseAddr("10.200.0.8"), netip.MustParseAddr("10.96.0.11"), ip, 41001))
	if _, ch, err := e.dp.EnsureExclusive(ctx, s); err != nil {
		t.Fatalf("ensure exclusive: %v (%v)", err, ch)
	}
	if got := naming(t, h, ip); len(got) != 0 {
		t.Errorf("entries naming %s after ADD: %v", ip, got)
	}
	addFlow(t, h, serviceFlow(netip.MustParseAddr("10.200.0.8"), netip.MustParseAddr("10.96.0.11"), ip, 41002))
	if _, err := e.dp.TeardownExclusive(ctx, s.Key, s.NetNS, s.MAC); err != nil {
		t.Fatal(err)
	}
	if got := naming(t, h, ip); len(got) != 0 {
		t.Errorf("entries naming %s after DEL: %v", ip, got)
	}
}

// TestConntrackEntriesCounted: the count that lets a flush skip the table
// walk is the namespace's own: a new namespace has none, the entries made
// in it count, and another namespace's do not.
func TestConntrackEntriesCounted(t *testing.T) {
	e := newEnv(t, 1)
	h := ctHandle(t, e.tp.NodeNS)
	count := func(path string) uint32 {
		t.Helper()
		fd, err := netns.GetFromPath(path)
		if err != nil {
			t.Fatal(err)
		}
		defer fd.Close()
		n, err := linux.ConntrackEntries(fd)
		if err != nil {
			t.Fatalf("count in %s: %v", path, err)
		}
		return n
	}
	if n := count(e.tp.NodeNS); n != 0 {
		t.Fatalf("a new node namespace counts %d entries", n)
	}
	client, vip := netip.MustParseAddr("10.200.0.7"), netip.MustParseAddr("10.96.0.10")
	for i := range 3 {
		addFlow(t, h, serviceFlow(client, vip, netip.MustParseAddr("10.0.1.50"), uint16(41000+i)))
	}
	if n := count(e.tp.NodeNS); n != 3 {
		t.Errorf("node namespace counts %d entries after 3 were made", n)
	}
	if n := count(e.podSpec(t, 0, 20).NetNS); n != 0 {
		t.Errorf("a pod namespace counts %d entries: the node's are not its", n)
	}
}
