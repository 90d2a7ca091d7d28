package linux_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"

	"github.com/enidnet/enid/linux"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestRandomWalk drives a few attachments through random sequences of
// ensure, teardown, drift (a rule, a host route, a dead netns) and checks
// after every step that the state is clean: an ensured pod is healthy and
// a second ensure changes nothing; a torn-down pod leaves no rule. At the
// end the node is as it was.
func TestRandomWalk(t *testing.T) {
	for _, seed := range []uint64{7, 8, 9} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { walk(t, seed) })
	}
}

func walk(t *testing.T, seed uint64) {
	e := newEnv(t, 2)
	ctx := ctxT(t)
	before := dumpNS(t, e.tp.NodeNS)
	const pods, steps = 5, 80
	specs := make([]linux.PodSpec, pods)
	up := make([]bool, pods)
	for i := range specs {
		specs[i] = e.podSpec(t, i%2, 40+i)
	}
	rng := rand.New(rand.NewPCG(seed, 11))
	var trail []string
	fail := func(f string, a ...any) {
		t.Helper()
		t.Fatalf("after %s: %s", strings.Join(trail, ", "), fmt.Sprintf(f, a...))
	}
	for range steps {
		i := rng.IntN(pods)
		s := specs[i]
		switch op := rng.IntN(6); op {
		case 0, 1:
			trail = append(trail, fmt.Sprintf("ensure %d", i))
			if _, _, err := e.dp.EnsurePod(ctx, s); err != nil {
				fail("ensure: %v", err)
			}
			up[i] = true
		case 2:
			trail = append(trail, fmt.Sprintf("teardown %d", i))
			if _, err := e.dp.TeardownPod(ctx, s.Key, s.NetNS); err != nil {
				fail("teardown: %v", err)
			}
			up[i] = false
			withH(t, e.tp.NodeNS, func(h *netlink.Handle) error {
				for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
					rules, err := h.RuleList(fam)
					if err != nil {
						return err
					}
					for _, r := range rules {
						if r.Protocol == linux.Proto && (ruleFor(r.Src, s) || ruleFor(r.Dst, s)) {
							fail("rule %v left after teardown", r)
						}
					}
				}
				return nil
			})
		case 3:
			if !up[i] {
				continue
			}
			r := netlink.NewRule()
			r.Family, r.Protocol = unix.AF_INET, linux.Proto
			if rng.IntN(2) == 0 {
				r.Priority, r.Dst, r.Table = linux.PrioToPod, &net.IPNet{IP: s.IPv4.AsSlice(), Mask: net.CIDRMask(32, 32)}, unix.RT_TABLE_MAIN
			} else {
				r.Priority, r.Src, r.Table = linux.PrioFromPod, &net.IPNet{IP: s.IPv4.AsSlice(), Mask: net.CIDRMask(32, 32)}, s.Table
			}
			trail = append(trail, fmt.Sprintf("drop rule %d of %d", r.Priority, i))
			withH(t, e.tp.NodeNS, func(h *netlink.Handle) error { return h.RuleDel(r) })
			up[i] = false // drifted: must be ensured before it is checked
		case 4:
			if !up[i] {
				continue
			}
			trail = append(trail, fmt.Sprintf("drop host route of %d", i))
			withH(t, e.tp.NodeNS, func(h *netlink.Handle) error {
				l, err := h.LinkByName(linux.HostVethName(s.Key))
				if err != nil {
					return err
				}
				return h.RouteDel(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: s.IPv4.AsSlice(), Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK})
			})
			up[i] = false
		case 5:
			trail = append(trail, fmt.Sprintf("new netns for %d", i))
			if err := e.tp.DeletePodNS(s.NetNS); err != nil {
				fail("delete netns: %v", err)
			}
			ns, cleanup, err := e.tp.NewPodNS(fmt.Sprintf("w%d", i))
			if err != nil {
				fail("new netns: %v", err)
			}
			t.Cleanup(cleanup)
			specs[i].NetNS = ns
			up[i] = false
		}
		n, err := e.dp.Observe(ctx)
		if err != nil {
			fail("observe: %v", err)
		}
		seen := map[string]bool{}
		for _, p := range n.Pods {
			seen[p.Key.String()] = true
			for j, sp := range specs {
				if sp.Key == p.Key && up[j] && !p.Healthy {
					fail("pod %d unhealthy: %v", j, p.Problems)
				}
			}
		}
		for j, sp := range specs {
			if up[j] {
				if !seen[sp.Key.String()] {
					fail("pod %d not observed", j)
				}
				if _, ch, err := e.dp.EnsurePod(ctx, sp); err != nil || len(ch) != 0 {
					fail("pod %d: ensure of a converged pod changed %v (err %v)", j, ch, err)
				}
			}
		}
	}
	for i, s := range specs {
		if _, err := e.dp.TeardownPod(ctx, s.Key, s.NetNS); err != nil {
			t.Fatalf("final teardown %d: %v", i, err)
		}
	}
	for _, s := range specs {
		waitGone(t, e, s)
	}
	// A last teardown sweeps rules left by veths that died with a netns
	// after the teardown above had run.
	if _, err := e.dp.TeardownPod(ctx, specs[0].Key, ""); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, dumpNS(t, e.tp.NodeNS)); diff != "" {
		t.Errorf("node after the walk (-before +after), trail %v:\n%s", trail, diff)
	}
}

// ruleFor reports whether a rule selector names one of the pod's addresses.
func ruleFor(n *net.IPNet, s linux.PodSpec) bool {
	return n != nil && (n.IP.Equal(s.IPv4.AsSlice()) || n.IP.Equal(s.IPv6.AsSlice()))
}
