package linux_test

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/enidnet/enid/linux"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestNodeNetNSRefused: a pod netns that is the node's own namespace (here
// the namespace playing the node, named by its own path and by a second
// bind mount of it) is refused before anything changes, and the node's
// default route survives.
func TestNodeNetNSRefused(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	// The node's own default route (a stand-in for its uplink).
	withH(t, e.tp.NodeNS, func(h *netlink.Handle) error { return uplink(h) })
	before := dumpNS(t, e.tp.NodeNS)
	// A second name for the same namespace: identity, not paths, decides.
	alias := filepath.Join(t.TempDir(), "alias")
	if err := os.WriteFile(alias, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(e.tp.NodeNS, alias, "none", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(alias, unix.MNT_DETACH) }) // test cleanup, best effort
	for _, path := range []string{e.tp.NodeNS, alias} {
		s := e.podSpec(t, 0, 30)
		s.NetNS = path
		_, ch, err := e.dp.EnsurePod(ctx, s)
		if !errors.Is(err, linux.ErrNodeNetNS) {
			t.Fatalf("EnsurePod in %s = %v, want ErrNodeNetNS", path, err)
		}
		if len(ch) != 0 {
			t.Errorf("changes made before the refusal: %v", ch)
		}
		if !strings.Contains(err.Error(), "node's own network namespace") {
			t.Errorf("error %q does not say why", err)
		}
		if err := e.dp.CheckNetNS(path); !errors.Is(err, linux.ErrNodeNetNS) {
			t.Errorf("CheckNetNS(%s) = %v", path, err)
		}
		ex := linux.ExclusiveSpec{Key: s.Key, NetNS: path, IfName: "eth0", MAC: e.enis[0].mac,
			Prefix: netipPrefix(s.IPv4, 24), Gateway: e.enis[0].spec.Gateway}
		if _, _, err := e.dp.EnsureExclusive(ctx, ex); !errors.Is(err, linux.ErrNodeNetNS) {
			t.Errorf("EnsureExclusive in %s = %v, want ErrNodeNetNS", path, err)
		}
	}
	if _, err := e.dp.TeardownPod(ctx, e.podSpec(t, 0, 30).Key, e.tp.NodeNS); err != nil {
		t.Fatalf("teardown: %v", err)
	}
	if after := dumpNS(t, e.tp.NodeNS); after != before {
		t.Errorf("the node namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestNotNetNSRefused: a regular file, a FIFO (which would block a plain
// open) and a directory are not network namespaces: refused at once.
func TestNotNetNSRefused(t *testing.T) {
	e := newEnv(t, 1)
	dir := t.TempDir()
	file, fifo := filepath.Join(dir, "file"), filepath.Join(dir, "fifo")
	if err := os.WriteFile(file, []byte("not a netns"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{file, fifo, dir} {
		s := e.podSpec(t, 0, 31)
		s.NetNS = path
		if _, _, err := e.dp.EnsurePod(ctxT(t), s); !errors.Is(err, linux.ErrNotNetNS) {
			t.Errorf("EnsurePod in %s = %v, want ErrNotNetNS", path, err)
		}
		if err := e.dp.CheckNetNS(path); !errors.Is(err, linux.ErrNotNetNS) {
			t.Errorf("CheckNetNS(%s) = %v, want ErrNotNetNS", path, err)
		}
	}
	if err := e.dp.CheckNetNS(filepath.Join(dir, "missing")); !errors.Is(err, linux.ErrNotFound) {
		t.Errorf("CheckNetNS(missing) = %v, want ErrNotFound", err)
	}
}

// TestSecondInterfaceKeepsDefault: a pod with its own default route (made
// by someone else) and two enid interfaces: eth1 never touches the default
// route; eth0 finds a default route it did not make and reports a conflict
// rather than deleting it. In a pod without one, eth0 gets the default
// route and eth1 added later leaves it alone; eth1's teardown keeps it.
func TestSecondInterfaceKeepsDefault(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	eth1 := e.podSpec(t, 0, 40)
	eth1.IfName = "eth1"
	eth1.Key.IfName = "eth1"
	withH(t, eth1.NetNS, func(h *netlink.Handle) error { return uplink(h) })
	if _, ch, err := e.dp.EnsurePod(ctx, eth1); err != nil {
		t.Fatalf("ensure eth1: %v (%v)", err, ch)
	}
	wantDefault := func(ns, dev string) {
		t.Helper()
		withH(t, ns, func(h *netlink.Handle) error {
			routes, err := h.RouteList(nil, netlink.FAMILY_V4)
			if err != nil {
				return err
			}
			var got []string
			for _, r := range routes {
				if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
					l, err := h.LinkByIndex(r.LinkIndex)
					if err != nil {
						return err
					}
					got = append(got, l.Attrs().Name)
				}
			}
			if len(got) != 1 || got[0] != dev {
				t.Errorf("default routes out of %v, want one out of %s", got, dev)
			}
			return nil
		})
	}
	wantDefault(eth1.NetNS, "up0")
	eth0 := eth1
	eth0.IfName, eth0.Key.IfName, eth0.IPv4, eth0.IPv6 = "eth0", "eth0", v4(0, 41), v6(0, 41)
	if _, _, err := e.dp.EnsurePod(ctx, eth0); !errors.Is(err, linux.ErrConflict) {
		t.Errorf("eth0 over a foreign default route = %v, want ErrConflict", err)
	}
	wantDefault(eth1.NetNS, "up0")

	// A fresh pod: eth0 first, then eth1, then eth1 goes.
	p0 := e.podSpec(t, 0, 42)
	p1 := p0
	p1.IfName, p1.Key.IfName, p1.IPv4, p1.IPv6 = "eth1", "eth1", v4(0, 43), v6(0, 43)
	if _, _, err := e.dp.EnsurePod(ctx, p0); err != nil {
		t.Fatalf("ensure eth0: %v", err)
	}
	if _, _, err := e.dp.EnsurePod(ctx, p1); err != nil {
		t.Fatalf("ensure eth1: %v", err)
	}
	wantDefault(p0.NetNS, "eth0")
	if _, err := e.dp.TeardownPod(ctx, p1.Key, p1.NetNS, p1.IPv4, p1.IPv6); err != nil {
		t.Fatalf("teardown eth1: %v", err)
	}
	wantDefault(p0.NetNS, "eth0")
	// Both are healthy as observed: eth1 is not expected to hold a default.
	if _, _, err := e.dp.EnsurePod(ctx, p1); err != nil {
		t.Fatalf("ensure eth1 again: %v", err)
	}
	node, err := e.dp.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range node.Pods {
		if p.Key == p0.Key || p.Key == p1.Key {
			if !p.Healthy {
				t.Errorf("%s unhealthy: %v", p.Key, p.Problems)
			}
		}
	}
}

func netipPrefix(a netip.Addr, bits int) netip.Prefix { return netip.PrefixFrom(a, bits) }

// uplink gives the namespace of h a device up0 (a veth with its peer) and a
// default route via 192.0.2.1 out of it, as someone other than enid would.
func uplink(h *netlink.Handle) error {
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up0"}, PeerName: "up0p"}
	if err := h.LinkAdd(v); err != nil {
		return err
	}
	l, err := h.LinkByName("up0")
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(l); err != nil {
		return err
	}
	return h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP("192.0.2.1"),
		Flags: unix.RTNH_F_ONLINK, Scope: netlink.SCOPE_UNIVERSE})
}
