package linux_test

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/linux/linuxtest"
	"github.com/enidnet/enid/observed"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestEnsureENI: a device that appears late is waited for, configured,
// observed, left alone by a second ensure, repaired after drift, and
// RemoveENI clears its table.
func TestEnsureENI(t *testing.T) {
	e := newEnv(t, 0)
	ctx := ctxT(t)
	const mac = "02:00:00:00:00:aa"
	cidr := netip.MustParsePrefix("10.0.5.0/24")
	gw := observed.GatewayOf(cidr)
	s := linux.ENISpec{MAC: mac, Table: 1005, Gateway: gw, GatewayV6: netip.MustParseAddr("fe80::fffe"), MTU: 1400, WaitForDevice: 5 * time.Second}

	before := dumpNS(t, e.tp.NodeNS)
	plugged := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		plugged <- e.tp.PlugENI(mac, netip.MustParseAddr("10.0.5.5"), cidr, gw)
	}()
	ch, err := e.dp.EnsureENI(ctx, s)
	if perr := <-plugged; perr != nil {
		t.Fatal(perr)
	}
	if err != nil {
		t.Fatalf("ensure eni: %v", err)
	}
	name, err := e.tp.NodeName(mac)
	if err != nil {
		t.Fatal(err)
	}
	want := linux.Changes{
		"set mtu 1400 on " + name + " (was 1500)",
		"set " + name + " up",
		"add default via 10.0.5.253 dev " + name + " onlink table 1005",
		"add default via fe80::fffe dev " + name + " onlink table 1005",
	}
	// Which sysctls change depends on the namespace's defaults: compare
	// the rest, then read the sysctls back.
	if diff := cmp.Diff(want, withoutSysctls(ch)); diff != "" {
		t.Errorf("first ensure (-want +got):\n%s", diff)
	}
	for key, want := range map[string]string{
		"net/ipv4/ip_forward": "1", "net/ipv4/conf/" + name + "/forwarding": "1",
		"net/ipv4/conf/" + name + "/rp_filter": "0", "net/ipv6/conf/" + name + "/accept_ra": "0",
		"net/ipv6/conf/all/forwarding": "1",
	} {
		if got, err := linuxtest.Sysctl(e.tp.NodeNS, key); err != nil || got != want {
			t.Errorf("sysctl %s = %q (%v), want %q", key, got, err, want)
		}
	}
	if ch, err := e.dp.EnsureENI(ctx, s); err != nil || len(ch) != 0 {
		t.Errorf("second ensure: %v %v", ch, err)
	}
	n, err := e.dp.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var dev observed.ENIDevice
	for _, d := range n.ENIDevices {
		if d.MAC == mac {
			dev = d
		}
	}
	dev.Index = 0
	if diff := cmp.Diff(observed.ENIDevice{MAC: mac, Name: name, MTU: 1400, Up: true, Table: 1005, Configured: true}, dev); diff != "" {
		t.Errorf("observed device (-want +got):\n%s", diff)
	}

	// Drift: a sysctl.
	if err := linuxtest.SetSysctl(e.tp.NodeNS, "net/ipv4/conf/"+name+"/rp_filter", "1"); err != nil {
		t.Fatal(err)
	}
	ch, err = e.dp.EnsureENI(ctx, s)
	if diff := cmp.Diff(linux.Changes{"set sysctl net.ipv4.conf." + name + ".rp_filter=0"}, ch); diff != "" || err != nil {
		t.Errorf("repair sysctl (-want +got), err %v:\n%s", err, diff)
	}
	// Drift: the table's default route is gone.
	withH(t, e.tp.NodeNS, func(h *netlink.Handle) error {
		l, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		return h.RouteDel(&netlink.Route{LinkIndex: l.Attrs().Index, Table: 1005, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, Gw: gw.AsSlice()})
	})
	if n, err := e.dp.Observe(ctx); err != nil || configured(n, mac) {
		t.Errorf("observe after drift: configured=%v err=%v", configured(n, mac), err)
	}
	ch, err = e.dp.EnsureENI(ctx, s)
	if diff := cmp.Diff(linux.Changes{"add default via 10.0.5.253 dev " + name + " onlink table 1005"}, ch); diff != "" || err != nil {
		t.Errorf("repair (-want +got), err %v:\n%s", err, diff)
	}

	ch, err = e.dp.RemoveENI(ctx, mac, 1005)
	if err != nil || len(ch) != 2 {
		t.Errorf("remove: %v %v", ch, err)
	}
	if ch, err := e.dp.RemoveENI(ctx, mac, 1005); err != nil || len(ch) != 0 {
		t.Errorf("second remove: %v %v", ch, err)
	}
	if err := e.tp.UnplugENI(mac); err != nil {
		t.Fatal(err)
	}
	if ch, err := e.dp.RemoveENI(ctx, mac, 1005); err != nil || len(ch) != 0 {
		t.Errorf("remove after unplug: %v %v", ch, err)
	}
	// Only sysctls stay changed; links, routes and rules are as before.
	if diff := cmp.Diff(before, dumpNS(t, e.tp.NodeNS)); diff != "" {
		t.Errorf("node (-before +after):\n%s", diff)
	}
}

// TestEnsureENIMissingDevice: a device that never appears is ErrNotFound
// after the wait.
func TestEnsureENIMissingDevice(t *testing.T) {
	e := newEnv(t, 0)
	start := time.Now()
	_, err := e.dp.EnsureENI(ctxT(t), linux.ENISpec{MAC: "02:00:00:00:00:ab", Table: 1009, Gateway: netip.MustParseAddr("10.0.9.253"), WaitForDevice: 200 * time.Millisecond})
	if !errors.Is(err, linux.ErrNotFound) {
		t.Errorf("err = %v, want ErrNotFound", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("returned after %v, before the wait bound", d)
	}
	if _, err := e.dp.EnsureENI(ctxT(t), linux.ENISpec{MAC: "02:00:00:00:00:ab", Table: unix.RT_TABLE_MAIN, Gateway: netip.MustParseAddr("10.0.9.253")}); err == nil {
		t.Error("table main accepted")
	}
}

func configured(n observed.Node, mac string) bool {
	for _, d := range n.ENIDevices {
		if d.MAC == mac {
			return d.Configured
		}
	}
	return false
}

func withoutSysctls(ch linux.Changes) linux.Changes {
	var r linux.Changes
	for _, l := range ch {
		if !strings.HasPrefix(l, "set sysctl ") {
			r = append(r, l)
		}
	}
	return r
}
