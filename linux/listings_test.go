package linux_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

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

// TestTeardownListsTheNodeOnce: a teardown lists the node's rules once per
// family and its links once, however many of its steps (the pod's rules,
// the rules of the addresses the caller names, the sweep) read them: on a
// full node each listing is two rules or one link a pod. It lists the
// pod's own routes (through its veth) and, for the sweep, enid's host
// routes of each family.
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
	s := specs[1]
	var ch linux.Changes
	got := dumpsDuring(t, func() {
		var err error
		if ch, err = e.dp.TeardownPod(ctx, s.Key, s.NetNS, s.IPv4, s.IPv6); err != nil {
			t.Fatal(err)
		}
	})
	want := map[string]int64{"list rules": 2, "list links": 1, "list routes": 4}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dumps of one teardown (-want +got):\n%s", diff)
	}
	// What it did is unchanged: the pod's four rules and its veth.
	if len(ch) != 5 {
		t.Errorf("changes: want the pod's 4 rules and its veth, got %q", ch)
	}
	n, err := e.dp.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Pods) != 2 {
		t.Errorf("pods left: want 2, got %d", len(n.Pods))
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
