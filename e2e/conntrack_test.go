package e2e

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestConntrackGoneBeforeADD (issue 26 item 2; aws-vpc-cni #3634): an
// address handed to a new pod carries no conntrack entry of its previous
// holder. Pod a takes an address and is deleted; a lingering SYN_SENT
// entry of a Service DNAT to every address the node holds (a's included)
// stands in the node's table, as kube-proxy leaves it for 120 s. Pod b is
// added once a's cooldown is over: when its ADD returns, no entry names
// b's address, while the entries of the idle addresses are still there.
func TestConntrackGoneBeforeADD(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fd, err := netns.GetFromPath(n.sn.Topology.NodeNS)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	h, err := netlink.NewHandleAt(fd, unix.NETLINK_NETFILTER)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET); err != nil {
		t.Skipf("no conntrack in this kernel: %v", err)
	}
	n.startAgent()
	n.waitReady(30 * time.Second)
	a := n.newPod("ct-a")
	ipA := n.addAll(ctx, []*pod{a})[0]
	n.delAll(ctx, []*pod{a})

	held := ownedAddrs(n.owned(n.sn.Sim.Dump()))
	if _, ok := held[ipA]; !ok {
		t.Fatalf("a's address %s is no longer held: %v", ipA, held)
	}
	client, vip := netip.MustParseAddr("10.200.0.7"), netip.MustParseAddr("10.96.0.10")
	port := uint16(40000)
	for ip := range held {
		port++
		f := &netlink.ConntrackFlow{FamilyType: unix.AF_INET,
			Forward:   netlink.IPTuple{SrcIP: net.IP(client.AsSlice()), DstIP: net.IP(vip.AsSlice()), Protocol: unix.IPPROTO_TCP, SrcPort: port, DstPort: 80},
			Reverse:   netlink.IPTuple{SrcIP: net.IP(ip.AsSlice()), DstIP: net.IP(client.AsSlice()), Protocol: unix.IPPROTO_TCP, SrcPort: 8080, DstPort: port},
			TimeOut:   120,
			ProtoInfo: &netlink.ProtoInfoTCP{State: nl.TCP_CONNTRACK_SYN_SENT}}
		if err := h.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(400 * time.Millisecond) // past a's cooldown (300ms): its address may be handed out
	b := n.newPod("ct-b")
	ipB := n.addAll(ctx, []*pod{b})[0]
	flows, err := h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	left := map[netip.Addr]int{}
	for _, f := range flows {
		if a, ok := netip.AddrFromSlice(f.Reverse.SrcIP); ok {
			left[a.Unmap()]++
		}
	}
	if left[ipB] != 0 {
		t.Errorf("b got %s and %d entries naming it survived the ADD", ipB, left[ipB])
	}
	kept := 0
	for ip := range held {
		if ip != ipB && left[ip] == 1 {
			kept++
		}
	}
	if kept != len(held)-1 {
		t.Errorf("%d of the %d other addresses kept their entries: only b's may go", kept, len(held)-1)
	}
	t.Logf("a had %s, b got %s; %d addresses held", ipA, ipB, len(held))
	n.delAll(ctx, []*pod{b})
	n.waitSettled(2, 6, 20*time.Second)
}
