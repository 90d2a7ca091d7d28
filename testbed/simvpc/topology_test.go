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
	name, err := tp.NodeName(mac)
	if err != nil {
		t.Fatal(err)
	}
	node := handle(t, tp.NodeNS)
	l, err := node.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	if err := node.LinkSetUp(l); err != nil {
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
