package linux_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/linux/linuxtest"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestPodsReachEachOtherAndVPC proves the routes and rules work: two pods
// on two ENIs ping each other and the vpc router, over IPv4 and IPv6.
func TestPodsReachEachOtherAndVPC(t *testing.T) {
	e := newEnv(t, 2)
	a, b := e.podSpec(t, 0, 10), e.podSpec(t, 1, 20)
	ctx := ctxT(t)
	if _, ch, err := e.dp.EnsurePod(ctx, a); err != nil {
		t.Fatalf("ensure pod a: %v (changes %v)", err, ch)
	}
	if _, _, err := e.dp.EnsurePod(ctx, b); err != nil {
		t.Fatalf("ensure pod b: %v", err)
	}
	checks := []struct {
		name string
		ns   string
		dst  string
	}{
		{"a to b v4", a.NetNS, b.IPv4.String()},
		{"b to a v4", b.NetNS, a.IPv4.String()},
		{"a to gateway 1", a.NetNS, e.enis[0].spec.Gateway.String()},
		{"b to gateway 2", b.NetNS, e.enis[1].spec.Gateway.String()},
		{"a to b v6", a.NetNS, b.IPv6.String()},
		{"vpc to a v4", e.tp.VPCNS, a.IPv4.String()},
		{"vpc to b v6", e.tp.VPCNS, b.IPv6.String()},
		{"a to vpc v6", a.NetNS, linuxtest.VPCHostV6},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if err := linuxtest.Ping(ctx, c.ns, mustAddr(c.dst)); err != nil {
				t.Error(err)
			}
		})
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// withH runs fn with a netlink handle inside the namespace at path.
func withH(t testing.TB, path string, fn func(h *netlink.Handle) error) {
	t.Helper()
	fd, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer fd.Close()
	h, err := netlink.NewHandleAt(fd, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatalf("handle: %v", err)
	}
	defer h.Close()
	if err := fn(h); err != nil {
		t.Fatal(err)
	}
}

// TestPodRoundTrip: setup then teardown leaves the node exactly as before,
// and a second teardown changes nothing.
func TestPodRoundTrip(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	before := dumpNS(t, e.tp.NodeNS)
	s := e.podSpec(t, 0, 11)
	s.Bandwidth = &linux.Bandwidth{IngressRate: 10_000_000, IngressBurst: 1_000_000, EgressRate: 20_000_000}
	res, ch, err := e.dp.EnsurePod(ctx, s)
	if err != nil {
		t.Fatalf("ensure pod: %v", err)
	}
	if len(ch) == 0 {
		t.Fatal("first ensure reported no change")
	}
	if res.HostVeth != linux.HostVethName(s.Key) || len(res.Interfaces) != 2 || res.Interfaces[1].Sandbox != s.NetNS || res.PodMAC == "" {
		t.Errorf("unexpected result %+v", res)
	}
	during := dumpNS(t, e.tp.NodeNS)
	for _, want := range []string{
		"rule 512 from <nil> to 10.0.1.11/32 table 254 proto 222",
		"rule 2048 from 10.0.1.11/32 to <nil> table 1001 proto 222",
		"rule 512 from <nil> to fd00:1::11/128 table 254 proto 222",
		"rule 2048 from fd00:1::11/128 to <nil> table 1001 proto 222",
		"route 10.0.1.11/32 via <nil> dev " + res.HostVeth + " table 254 proto 222 scope 253",
		"qdisc tbf dev " + res.HostVeth,
	} {
		if !strings.Contains(during, want+"\n") {
			t.Errorf("node lacks %q; node holds:\n%s", want, during)
		}
	}
	pod := dumpNS(t, s.NetNS)
	for _, want := range []string{
		"addr 10.0.1.11/32 dev eth0",
		"addr fd00:1::11/128 dev eth0",
		"neigh 169.254.1.1 lladdr " + res.Interfaces[0].MAC + " dev eth0 permanent",
		"neigh fe80::1 lladdr " + res.Interfaces[0].MAC + " dev eth0 permanent",
		"route 0.0.0.0/0 via 169.254.1.1 dev eth0 table 254 proto 222 scope 0",
		"route ::/0 via fe80::1 dev eth0 table 254 proto 222 scope 0",
		"qdisc tbf dev eth0",
	} {
		if !strings.Contains(pod, want+"\n") {
			t.Errorf("pod lacks %q; pod holds:\n%s", want, pod)
		}
	}
	ch, err = e.dp.TeardownPod(ctx, s.Key, s.NetNS)
	if err != nil {
		t.Fatalf("teardown: %v", err)
	}
	if len(ch) == 0 {
		t.Error("teardown reported no change")
	}
	if diff := cmp.Diff(before, dumpNS(t, e.tp.NodeNS)); diff != "" {
		t.Errorf("node after teardown differs from before (-before +after):\n%s", diff)
	}
	if ch, err := e.dp.TeardownPod(ctx, s.Key, s.NetNS); err != nil || len(ch) != 0 {
		t.Errorf("second teardown: changes %v, err %v; want none", ch, err)
	}
}

// TestEnsurePodErrors: a missing netns is ErrNotFound; an interface of
// the requested name that is not enid's is ErrConflict and left alone.
func TestEnsurePodErrors(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	s := e.podSpec(t, 0, 17)
	gone := s
	gone.NetNS = "/run/netns/enid-no-such-netns"
	if _, _, err := e.dp.EnsurePod(ctx, gone); !errors.Is(err, linux.ErrNotFound) {
		t.Errorf("missing netns: err = %v, want ErrNotFound", err)
	}
	withH(t, s.NetNS, func(h *netlink.Handle) error {
		return h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "other0"})
	})
	before := dumpNS(t, s.NetNS)
	if _, _, err := e.dp.EnsurePod(ctx, s); !errors.Is(err, linux.ErrConflict) {
		t.Errorf("foreign eth0: err = %v, want ErrConflict", err)
	}
	if diff := cmp.Diff(before, dumpNS(t, s.NetNS)); diff != "" {
		t.Errorf("pod changed (-before +after):\n%s", diff)
	}
	bad := s
	bad.Table = unix.RT_TABLE_MAIN
	if _, _, err := e.dp.EnsurePod(ctx, bad); err == nil {
		t.Error("table main accepted")
	}
}
