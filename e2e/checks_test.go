package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/reconcile/status"
)

// owned returns the ENIs in the simulator that carry enid's tags naming
// the node's instance.
func (n *node) owned(st ecssim.State) []ecssim.ENIState {
	var out []ecssim.ENIState
	for _, e := range st.ENIs {
		if e.Type != "Primary" && e.Tags[observed.TagManagedBy] == observed.TagManagedByValue && e.Tags[observed.TagOwner] == n.sn.Instance.ID {
			out = append(out, e)
		}
	}
	return out
}

// ownedIPs counts the pod IPv4 addresses on owned ENIs: the secondary
// addresses and the 16 of every /28 prefix.
func ownedIPs(enis []ecssim.ENIState) int {
	k := 0
	for _, e := range enis {
		k += len(e.IPv4) + 16*len(e.IPv4Prefixes)
	}
	return k
}

// ownedAddrs maps every pod IPv4 address on owned ENIs (secondary or in a
// /28 prefix) to its ENI.
func ownedAddrs(enis []ecssim.ENIState) map[netip.Addr]string {
	held := map[netip.Addr]string{}
	for _, e := range enis {
		for _, a := range e.IPv4 {
			held[a] = e.ID
		}
		for _, q := range e.IPv4Prefixes {
			for a := q.Addr(); q.Contains(a); a = a.Next() {
				held[a] = e.ID
			}
		}
	}
	return held
}

// kernel is enid's state in the node namespace.
type kernel struct {
	// veths are the host veths (enid + hash).
	veths []string
	// rules are the rules with protocol 222, rendered.
	rules []string
	// ruleAddrs are the pod addresses those rules name.
	ruleAddrs []ruleAddr
	// hostRoutes maps a pod address to the links of the main-table routes
	// (protocol 222) that lead to it.
	hostRoutes map[netip.Addr][]string
}

func (k kernel) clean() (bool, string) {
	if len(k.veths)+len(k.rules)+len(k.hostRoutes) == 0 {
		return true, ""
	}
	var routes []string
	for a, l := range k.hostRoutes {
		routes = append(routes, fmt.Sprintf("%s dev %v", a, l))
	}
	sort.Strings(routes)
	return false, fmt.Sprintf("node netns keeps veths %v, rules %v, host routes %v", k.veths, k.rules, routes)
}

// ruleAddr is a pod rule and the address it is for.
type ruleAddr struct {
	ip   netip.Addr
	text string
}

// nodeKernel reads enid's links, rules and host routes in the node netns.
func (n *node) nodeKernel() kernel {
	n.t.Helper()
	h := nsHandle(n.t, n.sn.NodeNS())
	defer h.Close()
	k := kernel{hostRoutes: map[netip.Addr][]string{}}
	links, err := h.LinkList()
	for try := 0; errors.Is(err, netlink.ErrDumpInterrupted) && try < 5; try++ {
		// The agent is changing links meanwhile: read again.
		links, err = h.LinkList()
	}
	if err != nil {
		n.t.Fatalf("list links: %v", err)
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
		if strings.HasPrefix(l.Attrs().Name, "enid") {
			k.veths = append(k.veths, l.Attrs().Name)
		}
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rules, err := h.RuleList(fam)
		if err != nil {
			n.t.Fatalf("list rules: %v", err)
		}
		for _, r := range rules {
			// The reply path's rule (PrioMarked) is the node's, not a
			// pod's: it stays while the agent serves the node.
			if r.Protocol != linux.Proto || r.Priority == linux.PrioMarked {
				continue
			}
			text := fmt.Sprintf("%d: from %v to %v lookup %d", r.Priority, r.Src, r.Dst, r.Table)
			k.rules = append(k.rules, text)
			for _, p := range []*net.IPNet{r.Src, r.Dst} {
				if p != nil {
					a, _ := netip.AddrFromSlice(p.IP)
					k.ruleAddrs = append(k.ruleAddrs, ruleAddr{a.Unmap(), text})
				}
			}
		}
		routes, err := h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: linux.Proto},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			n.t.Fatalf("list routes: %v", err)
		}
		for _, r := range routes {
			if r.Dst == nil {
				continue
			}
			a, _ := netip.AddrFromSlice(r.Dst.IP)
			k.hostRoutes[a.Unmap()] = append(k.hostRoutes[a.Unmap()], names[r.LinkIndex])
		}
	}
	return k
}

// podAddrs lists the global addresses inside a pod's namespace.
func (n *node) podAddrs(path string) []netip.Addr {
	n.t.Helper()
	h := nsHandle(n.t, path)
	defer h.Close()
	addrs, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		n.t.Fatalf("list addresses in %s: %v", path, err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		ip, _ := netip.AddrFromSlice(a.IP)
		ip = ip.Unmap()
		if ip.IsGlobalUnicast() {
			out = append(out, ip)
		}
	}
	return out
}

// checkBindings checks that every pod is Ready with an address no other
// pod has, that the kernel routes that address to exactly the pod's veth,
// that the pod's namespace holds it, and that an owned ENI in the
// simulator holds it.
func (n *node) checkBindings(pods []*pod) {
	n.t.Helper()
	byKey := map[string]status.Attachment{}
	for _, s := range n.statuses() {
		byKey[s.ContainerID+"_"+s.IfName] = s
	}
	held := ownedAddrs(n.owned(n.sn.Sim.Dump()))
	k := n.nodeKernel()
	seen := map[netip.Addr]string{}
	for _, p := range pods {
		st, ok := byKey[p.ContainerID+"_"+p.IfName]
		if !ok || st.Phase != status.Ready || len(st.IPs) == 0 {
			n.t.Errorf("pod %s: status %+v, want Ready with an address", p.Name, st)
			continue
		}
		ip := st.IPs[0].Address.Addr()
		if other, dup := seen[ip]; dup {
			n.t.Errorf("address %s bound to pods %s and %s", ip, other, p.Name)
		}
		seen[ip] = p.Name
		veth := linux.HostVethName(observed.AttachmentKey{ContainerID: p.ContainerID, IfName: p.IfName})
		if got := k.hostRoutes[ip]; !slices.Equal(got, []string{veth}) {
			n.t.Errorf("pod %s (%s): host routes via %v, want exactly [%s]", p.Name, ip, got, veth)
		}
		if got := n.podAddrs(p.NetNS); !slices.Equal(got, []netip.Addr{ip}) {
			n.t.Errorf("pod %s: addresses in its netns %v, want [%s]", p.Name, got, ip)
		}
		if held[ip] == "" || held[ip] != st.ENIID {
			n.t.Errorf("pod %s: %s is on ENI %q in the simulator, status says %q", p.Name, ip, held[ip], st.ENIID)
		}
	}
	for ip, links := range k.hostRoutes {
		if seen[ip] == "" {
			n.t.Errorf("host route to %s via %v belongs to no pod", ip, links)
		}
	}
	for _, r := range k.ruleAddrs {
		if seen[r.ip] == "" {
			n.t.Errorf("rule %s is for %s, which no pod holds", r.text, r.ip)
		}
	}
}

// noOrphanRules reports whether every pod rule in the node namespace is
// for the address of one of pods (by their published statuses).
func (n *node) noOrphanRules(pods []*pod) (bool, string) {
	held := map[netip.Addr]bool{}
	for _, p := range pods {
		if st, err := n.statusOf(p); err == nil && len(st.IPs) > 0 {
			held[st.IPs[0].Address.Addr()] = true
		}
	}
	for _, r := range n.nodeKernel().ruleAddrs {
		if !held[r.ip] {
			return false, fmt.Sprintf("rule %s is for %s, which no pod holds", r.text, r.ip)
		}
	}
	return true, ""
}

// settled reports whether, with no pods, the pool is back inside its
// bounds: no status left, the node namespace clean, every owned ENI InUse
// on this instance holding at least one address or prefix (none in
// exclusive mode), and between minIdle and maxIdle owned addresses in all
// (ENIs in exclusive mode). With n.prefixMode every owned address is in a
// /28 prefix and the bound above is maxIdle+15 (a prefix goes back only
// when idle stays at or above maxIdle without it, docs/config.md); without
// it no prefix is held.
func (n *node) settled(minIdle, maxIdle int) (bool, string) {
	if sts := n.statuses(); len(sts) > 0 {
		return false, fmt.Sprintf("%d statuses left (first %s %s)", len(sts), sts[0].ContainerID[:12], sts[0].Phase)
	}
	if ok, why := n.nodeKernel().clean(); !ok {
		return false, why
	}
	enis := n.owned(n.sn.Sim.Dump())
	for _, e := range enis {
		if e.Status != "InUse" || e.InstanceID != n.sn.Instance.ID || (len(e.IPv4)+len(e.IPv4Prefixes) == 0) != n.exclusive {
			return false, fmt.Sprintf("owned ENI %s is %s on %q with %d addresses and %d prefixes", e.ID, e.Status, e.InstanceID, len(e.IPv4), len(e.IPv4Prefixes))
		}
		if n.prefixMode && len(e.IPv4) > 0 {
			return false, fmt.Sprintf("owned ENI %s holds secondary addresses %v in a prefix mode", e.ID, e.IPv4)
		}
		if !n.prefixMode && len(e.IPv4Prefixes) > 0 {
			return false, fmt.Sprintf("owned ENI %s holds prefixes %v in secondary mode", e.ID, e.IPv4Prefixes)
		}
	}
	if n.exclusive {
		// A pool of whole ENIs.
		if k := len(enis); k < minIdle || k > maxIdle {
			return false, fmt.Sprintf("%d owned ENIs, want %d..%d", k, minIdle, maxIdle)
		}
		return true, ""
	}
	if n.prefixMode {
		maxIdle += 15
	}
	if k := ownedIPs(enis); k < minIdle || k > maxIdle {
		return false, fmt.Sprintf("%d owned addresses on %d ENIs, want %d..%d", k, len(enis), minIdle, maxIdle)
	}
	return true, ""
}

// waitSettled waits for settled, then checks the simulator's model and
// that the plan is empty.
func (n *node) waitSettled(minIdle, maxIdle int, timeout time.Duration) {
	n.t.Helper()
	n.waitPoolSettled(minIdle, maxIdle, timeout)
	n.checkPlanEmpty()
}

// waitPoolSettled waits for settled, checks it holds past a release delay,
// and checks the simulator's model.
func (n *node) waitPoolSettled(minIdle, maxIdle int, timeout time.Duration) {
	n.t.Helper()
	waitFor(n.t, timeout, "pool settles", func() (bool, string) { return n.settled(minIdle, maxIdle) })
	// Settled means it stays so: past a release delay, nothing moves.
	time.Sleep(1500 * time.Millisecond)
	if ok, why := n.settled(minIdle, maxIdle); !ok {
		n.t.Errorf("pool left its bounds after settling: %s", why)
	}
	if err := n.sn.Sim.Check(); err != nil {
		n.t.Errorf("simulator model: %v", err)
	}
}

// checkPlanEmpty runs `enid plan --detailed-exitcode`, which must exit 0:
// converged, the agent would do nothing more. (Its cloud calls come on top
// of the agent's.)
func (n *node) checkPlanEmpty() {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if code, out, stderr := n.plan(ctx, "--detailed-exitcode"); code != 0 {
		n.t.Errorf("settled, but enid plan --detailed-exitcode exits %d:\n%s%s", code, out, stderr)
	}
}

// nsHandle opens a route netlink handle inside the namespace at path; the
// caller closes it.
func nsHandle(t testing.TB, path string) *netlink.Handle {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatalf("open netns %s: %v", path, err)
	}
	defer ns.Close() // the handle keeps its own socket in the namespace
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink in %s: %v", path, err)
	}
	return h
}
