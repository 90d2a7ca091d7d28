package linux_test

import (
	"fmt"
	"net"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/enidnet/enid/linux"
)

// dumpsDuring returns the netlink dumps, by kind, that f started.
func dumpsDuring(t *testing.T, f func()) map[string]int64 {
	t.Helper()
	before := linux.DumpsMade()
	f()
	after := linux.DumpsMade()
	got := map[string]int64{}
	for k, n := range after {
		if d := n - before[k]; d != 0 {
			got[k] = d
		}
	}
	return got
}

// TestTeardownListsTheNodeOnce: the usual DEL, its veth there and
// holding the addresses the caller names, lists nothing that grows with
// the pods on the node (on a full node the rules are two a pod, the links
// one): only the veth's own routes, a dump the kernel filters by device.
// A teardown whose veth is gone lists each family's rules once and the
// links once, however many of its steps (the rules of the addresses the
// caller names, the sweep) read them.
func TestTeardownListsTheNodeOnce(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	var specs []linux.PodSpec
	for h := 20; h < 23; h++ {
		s := e.podSpec(t, 0, h)
		if _, _, err := e.dp.EnsurePod(ctx, s); err != nil {
			t.Fatal(err)
		}
		specs = append(specs, s)
	}
	teardown := func(s linux.PodSpec) linux.Changes {
		ch, err := e.dp.TeardownPod(ctx, s.Key, s.NetNS, s.IPv4, s.IPv6)
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	var ch linux.Changes
	got := dumpsDuring(t, func() { ch = teardown(specs[1]) })
	if diff := cmp.Diff(map[string]int64{"list a device's routes": 2}, got); diff != "" {
		t.Errorf("dumps of the usual teardown (-want +got):\n%s", diff)
	}
	s := specs[1]
	want := linux.Changes{
		"delete rule prio 512 to " + s.IPv4.String(),
		"delete rule prio 2048 from " + s.IPv4.String(),
		"delete rule prio 512 to " + s.IPv6.String(),
		"delete rule prio 2048 from " + s.IPv6.String(),
		"delete veth " + linux.HostVethName(s.Key),
	}
	if diff := cmp.Diff(want, ch); diff != "" {
		t.Errorf("changes of the usual teardown (-want +got):\n%s", diff)
	}
	// The veth gone with its netns: the slow path, which also sweeps.
	s = specs[2]
	if err := e.tp.DeletePodNS(s.NetNS); err != nil {
		t.Fatal(err)
	}
	waitGone(t, e, s)
	got = dumpsDuring(t, func() { ch = teardown(s) })
	if diff := cmp.Diff(map[string]int64{"list rules": 2, "list links": 1, "list routes": 2}, got); diff != "" {
		t.Errorf("dumps of a teardown after the veth went (-want +got):\n%s", diff)
	}
	if len(ch) != 4 {
		t.Errorf("changes after the veth went: want the pod's 4 rules, got %q", ch)
	}
	n, err := e.dp.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Pods) != 1 || n.Pods[0].Key != specs[0].Key {
		t.Errorf("pods left: want only %s, got %+v", specs[0].Key, n.Pods)
	}
	if leaked := enidRules(t, e); len(leaked) != 4 {
		t.Errorf("enid rules left: want the 4 of the pod left, got %q", leaked)
	}
}

// enidRules lists enid's rules on the node, as ip rule shows them briefly.
func enidRules(t *testing.T, e *env) []string {
	t.Helper()
	var out []string
	withH(t, e.tp.NodeNS, func(h *netlink.Handle) error {
		for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			rules, err := h.RuleList(fam)
			if err != nil {
				return err
			}
			for _, r := range rules {
				if r.Protocol != linux.Proto {
					continue
				}
				var k string
				if r.Dst != nil {
					k = fmt.Sprintf("prio %d to %s", r.Priority, r.Dst.IP)
				} else {
					k = fmt.Sprintf("prio %d from %s", r.Priority, r.Src.IP)
				}
				if r.Table == unix.RT_TABLE_MAIN {
					k += " lookup main"
				} else {
					k += fmt.Sprintf(" lookup %d", r.Table)
				}
				out = append(out, k)
			}
		}
		return nil
	})
	return out
}

// TestNewPodListsNoHostRoutes: a setup that makes the pod's veth does not
// ask the node for the veth's routes (it has none yet, and the kernel
// walks the main table, one route a pod, to filter them); a repair of the
// same pod asks, once per family, and finds its route in place.
func TestNewPodListsNoHostRoutes(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	s := e.podSpec(t, 0, 27)
	const devRoutes = "list a device's routes"
	var ch linux.Changes
	got := dumpsDuring(t, func() {
		var err error
		if _, ch, err = e.dp.EnsurePod(ctx, s); err != nil {
			t.Fatal(err)
		}
	})
	if got[devRoutes] != 0 {
		t.Errorf("a new pod listed its veth's routes %d times, want none", got[devRoutes])
	}
	for _, ip := range []string{s.IPv4.String(), s.IPv6.String()} {
		if want := "add route " + ip + "/"; !slices.ContainsFunc(ch, func(c string) bool { return len(c) > len(want) && c[:len(want)] == want }) {
			t.Errorf("a new pod's changes %q: no host route to %s", ch, ip)
		}
	}
	got = dumpsDuring(t, func() {
		if _, ch, err := e.dp.EnsurePod(ctx, s); err != nil || len(ch) != 0 {
			t.Fatalf("repair: changes %q, %v", ch, err)
		}
	})
	if got[devRoutes] != 2 {
		t.Errorf("a repair listed its veth's routes %d times, want 2 (one per family)", got[devRoutes])
	}
}

// TestNewPodListsNoQdiscs: a new pod's veth has its default qdisc, so a
// setup that asks for no bandwidth limit makes no tc listing; a repair of
// an existing pod still looks (a limit may have been lifted), and a new
// pod that asks for one gets it.
func TestNewPodListsNoQdiscs(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	s := e.podSpec(t, 0, 24)
	got := dumpsDuring(t, func() {
		if _, _, err := e.dp.EnsurePod(ctx, s); err != nil {
			t.Fatal(err)
		}
	})
	if got["list qdiscs"] != 0 {
		t.Errorf("a new pod without limits listed qdiscs %d times", got["list qdiscs"])
	}
	got = dumpsDuring(t, func() {
		if _, _, err := e.dp.EnsurePod(ctx, s); err != nil {
			t.Fatal(err)
		}
	})
	if got["list qdiscs"] != 2 {
		t.Errorf("a repair listed qdiscs %d times, want 2 (host and pod end)", got["list qdiscs"])
	}
	b := e.podSpec(t, 0, 25)
	b.Bandwidth = &linux.Bandwidth{IngressRate: 10_000_000, EgressRate: 20_000_000}
	_, ch, err := e.dp.EnsurePod(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	var tbf int
	for _, c := range ch {
		if len(c) > 8 && c[:8] == "set tbf " {
			tbf++
		}
	}
	if tbf != 2 {
		t.Errorf("a new pod with limits: want 2 tbf set, got changes %q", ch)
	}
	_, ch, err = e.dp.EnsurePod(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch) != 0 {
		t.Errorf("a repair of the limited pod changed %q", ch)
	}
}

// TestNewPodListsNoRules: a setup that makes the pod's veth lists no rule
// (on a full node, two a pod) and still replaces a stale rule of the
// address at enid's priorities (here "from ip lookup 1005", left by an
// earlier binding to another ENI) whatever its table, leaving exactly the
// pod's two rules per address; a repair of the same pod lists the rules.
func TestNewPodListsNoRules(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	s := e.podSpec(t, 0, 26)
	withH(t, e.tp.NodeNS, func(h *netlink.Handle) error {
		r := netlink.NewRule()
		r.Priority, r.Table, r.Protocol = linux.PrioFromPod, 1005, linux.Proto
		r.Src = &net.IPNet{IP: s.IPv4.AsSlice(), Mask: net.CIDRMask(32, 32)}
		return h.RuleAdd(r)
	})
	var ch linux.Changes
	got := dumpsDuring(t, func() {
		var err error
		if _, ch, err = e.dp.EnsurePod(ctx, s); err != nil {
			t.Fatal(err)
		}
	})
	if got["list rules"] != 0 {
		t.Errorf("a new pod listed the rules %d times", got["list rules"])
	}
	if !slices.Contains(ch, "delete stale rule prio 2048 from "+s.IPv4.String()) {
		t.Errorf("the stale rule's deletion is not among the changes %q", ch)
	}
	want := map[string]int{
		fmt.Sprintf("prio %d to %s lookup main", linux.PrioToPod, s.IPv4):            1,
		fmt.Sprintf("prio %d from %s lookup %d", linux.PrioFromPod, s.IPv4, s.Table): 1,
		fmt.Sprintf("prio %d to %s lookup main", linux.PrioToPod, s.IPv6):            1,
		fmt.Sprintf("prio %d from %s lookup %d", linux.PrioFromPod, s.IPv6, s.Table): 1,
	}
	have := map[string]int{}
	for _, r := range enidRules(t, e) {
		have[r]++
	}
	if diff := cmp.Diff(want, have); diff != "" {
		t.Errorf("enid's rules on the node (-want +got):\n%s", diff)
	}
	got = dumpsDuring(t, func() {
		if _, ch, err := e.dp.EnsurePod(ctx, s); err != nil || len(ch) != 0 {
			t.Fatalf("repair: changes %q, err %v", ch, err)
		}
	})
	if got["list rules"] != 2 {
		t.Errorf("a repair listed the rules %d times, want once per family", got["list rules"])
	}
}
