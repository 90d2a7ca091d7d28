package linux

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"

	"github.com/enidnet/enid/observed"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// nodeView is one consistent-enough reading of the node namespace.
type nodeView struct {
	links  []netlink.Link
	routes []netlink.Route // every table, both families
	rules  []netlink.Rule  // both families
}

func (d *Datapath) readNode() (nodeView, error) {
	var v nodeView
	var err error
	if v.links, err = dump("list links", d.node.h.LinkList); err != nil {
		return v, err
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := dump("list routes", func() ([]netlink.Route, error) {
			return d.node.h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
		})
		if err != nil {
			return v, err
		}
		v.routes = append(v.routes, rs...)
		rules, err := d.listRules(fam)
		if err != nil {
			return v, err
		}
		v.rules = append(v.rules, rules...)
	}
	return v, nil
}

// Observe reads the node: every device with an Ethernet MAC that is not
// enid's (lo and enid's host veths excluded) as an ENIDevice, and every
// attachment enid labelled on a host veth as a PodNet with its health.
//
// An ENIDevice's Table is the table holding enid's default route (proto
// Proto) out of the device; Configured means the device is up and that
// route exists. A PodNet's addresses come from enid's host routes, its
// ENIMAC from the table its "from" rule looks up (or, without one, from the
// label), and Healthy means every piece EnsurePod or EnsureExclusive sets
// up is present. Pod namespaces are read through per-namespace handles.
func (d *Datapath) Observe(ctx context.Context) (observed.Node, error) {
	return d.observe(ctx, true)
}

// ObserveNode is Observe without entering the pods' namespaces: a PodNet's
// Healthy and Problems cover only what the node namespace holds (the host
// veth, host routes, rules). The agent reads it after a netlink change in
// the node namespace, where a full Observe would open every pod's netns.
func (d *Datapath) ObserveNode(ctx context.Context) (observed.Node, error) {
	return d.observe(ctx, false)
}

func (d *Datapath) observe(ctx context.Context, podNS bool) (observed.Node, error) {
	v, err := d.readNode()
	if err != nil {
		return observed.Node{}, fmt.Errorf("observe node: %w", err)
	}
	var node observed.Node
	tableOf := map[int]int{} // ifindex -> table of enid's default route
	macOfTable := map[int]string{}
	byIndex := map[int]netlink.Link{}
	for _, l := range v.links {
		byIndex[l.Attrs().Index] = l
	}
	for _, r := range v.routes {
		if r.Protocol == Proto && isDefault(r) && r.Family == netlink.FAMILY_V4 && r.Table != unix.RT_TABLE_MAIN {
			tableOf[r.LinkIndex] = r.Table
			if l, ok := byIndex[r.LinkIndex]; ok {
				macOfTable[r.Table] = l.Attrs().HardwareAddr.String()
			}
		}
	}
	for _, l := range v.links {
		a := l.Attrs()
		if a.Flags&net.FlagLoopback != 0 || len(a.HardwareAddr) != 6 {
			continue
		}
		if isHostVeth(l) {
			continue
		}
		t := tableOf[a.Index]
		node.ENIDevices = append(node.ENIDevices, observed.ENIDevice{
			MAC: a.HardwareAddr.String(), Name: a.Name, Index: a.Index, MTU: a.MTU,
			Up: isUp(l), Table: t, Configured: isUp(l) && t != 0,
		})
	}
	idx := indexPods(v)
	for _, l := range v.links {
		if !isHostVeth(l) {
			continue
		}
		lab, _ := parseLabel(l.Attrs().Alias) // isHostVeth parsed it
		if err := ctx.Err(); err != nil {
			return observed.Node{}, fmt.Errorf("observe node: %w", err)
		}
		node.Pods = append(node.Pods, d.observePod(v, idx, l, lab, macOfTable, podNS))
	}
	sort.Slice(node.ENIDevices, func(i, j int) bool { return node.ENIDevices[i].MAC < node.ENIDevices[j].MAC })
	slices.SortFunc(node.Pods, func(a, b observed.PodNet) int { return a.Key.Compare(b.Key) })
	return node, nil
}

// podIndex holds enid's host routes and pod rules by what a pod looks them
// up by, so that judging every pod costs one walk over each list, not one
// per pod (a node with hundreds of pods has hundreds of each).
type podIndex struct {
	// routed lists, per link index, the destinations of enid's main-table
	// routes out of it, in dump order.
	routed map[int][]netip.Addr
	// to holds the addresses with enid's "to <ip> lookup main" rule; from
	// lists, per address, the tables of its "from <ip>" rules.
	to   map[netip.Addr]bool
	from map[netip.Addr][]int
}

func indexPods(v nodeView) podIndex {
	x := podIndex{routed: map[int][]netip.Addr{}, to: map[netip.Addr]bool{}, from: map[netip.Addr][]int{}}
	for _, r := range v.routes {
		if r.Protocol == Proto && r.Table == unix.RT_TABLE_MAIN && r.Dst != nil {
			x.routed[r.LinkIndex] = append(x.routed[r.LinkIndex], prefixOf(r.Dst).Addr())
		}
	}
	for _, r := range v.rules {
		if r.Protocol != Proto {
			continue
		}
		if r.Priority == PrioToPod && r.Table == unix.RT_TABLE_MAIN && r.Dst != nil {
			if p := prefixOf(r.Dst); p.IsValid() && p.Bits() == p.Addr().BitLen() {
				x.to[p.Addr()] = true
			}
		}
		if r.Priority == PrioFromPod && r.Src != nil {
			if p := prefixOf(r.Src); p.IsValid() && p.Bits() == p.Addr().BitLen() {
				x.from[p.Addr()] = append(x.from[p.Addr()], r.Table)
			}
		}
	}
	return x
}

// observePod rebuilds one attachment from its labelled host veth.
func (d *Datapath) observePod(v nodeView, idx podIndex, hv netlink.Link, lab label, macOfTable map[int]string, podNS bool) observed.PodNet {
	p := observed.PodNet{
		Key: lab.Key, HostVeth: hv.Attrs().Name, NetNS: lab.NetNS,
		ENIMAC: lab.ENI, Exclusive: lab.Mode == modeExclusive,
	}
	var probs []string
	problem := func(f string, a ...any) { probs = append(probs, fmt.Sprintf(f, a...)) }
	p.IPv4, p.IPv6 = lab.IPv4, lab.IPv6
	routed := map[netip.Addr]bool{}
	for _, a := range idx.routed[hv.Attrs().Index] {
		routed[a] = true
		// Labels from before addresses were recorded: trust the routes.
		if a.Is4() && !p.IPv4.IsValid() {
			p.IPv4 = a
		} else if a.Is6() && !p.IPv6.IsValid() {
			p.IPv6 = a
		}
	}
	if !isUp(hv) {
		problem("host veth %s is down", hv.Attrs().Name)
	}
	ips := podIPs(p.IPv4, p.IPv6)
	if len(ips) == 0 {
		problem("no pod address recorded or routed on %s", hv.Attrs().Name)
	}
	for _, ip := range ips {
		if !routed[ip] {
			problem("host route %s dev %s missing", ip, hv.Attrs().Name)
		}
	}
	if !p.Exclusive {
		for _, ip := range ips {
			to, from := idx.to[ip], len(idx.from[ip]) > 0
			for _, table := range idx.from[ip] {
				if mac, ok := macOfTable[table]; ok {
					p.ENIMAC = mac
				} else {
					problem("rule from %s looks up table %d, which has no enid default route", ip, table)
				}
			}
			if !to {
				problem("rule to %s lookup main missing", ip)
			}
			if !from {
				problem("rule from %s lookup <eni table> missing", ip)
			}
		}
	}
	if podNS {
		var pprobs []string
		pprobs, p.HostRoutes = d.checkPodNS(hv, lab, p, ips)
		probs = append(probs, pprobs...)
	}
	p.Problems = probs
	p.Healthy = len(probs) == 0
	return p
}

// checkPodNS inspects the pod side of an attachment and lists problems;
// for an exclusive one it also returns the host routes found in the pod.
func (d *Datapath) checkPodNS(hv netlink.Link, lab label, p observed.PodNet, ips []netip.Addr) ([]string, []netip.Prefix) {
	if lab.NetNS == "" {
		return []string{"netns not recorded"}, nil
	}
	pod, err := d.openPod(lab.NetNS)
	if err != nil {
		return []string{fmt.Sprintf("netns %s: %v", lab.NetNS, err)}, nil
	}
	defer func() { _ = pod.Close() }() // releasing descriptors cannot fail usefully
	if p.Exclusive {
		return checkPodENI(pod, hv, lab, ips)
	}
	return d.checkPodVeth(pod, hv, lab, ips), nil
}

// checkPodENI inspects the pod side of an exclusive attachment: the ENI
// in the pod under its name, up, carrying the default routes on eth0, and
// the service veth paired with hv; and returns the host routes enid set on
// that veth (viaRoutes).
func checkPodENI(pod *nsRef, hv netlink.Link, lab label, ips []netip.Addr) (probs []string, routes []netip.Prefix) {
	problem := func(f string, a ...any) { probs = append(probs, fmt.Sprintf(f, a...)) }
	mac, err := net.ParseMAC(lab.ENI)
	if err != nil {
		return []string{fmt.Sprintf("label eni %q: %v", lab.ENI, err)}, nil
	}
	l, err := linkByMAC(pod.h, mac)
	if err != nil {
		return []string{fmt.Sprintf("eni %s not in the pod: %v", lab.ENI, err)}, nil
	}
	if l.Attrs().Name != lab.Key.IfName {
		problem("eni %s is named %s in the pod, not %s", lab.ENI, l.Attrs().Name, lab.Key.IfName)
	}
	if !isUp(l) {
		problem("eni %s is down in the pod", lab.ENI)
	}
	for _, ip := range ips {
		if lab.Key.IfName != DefaultIfName {
			break // only eth0 carries the default route
		}
		if ok, err := hasDefault(pod.h, l, familyOf(ip), netip.Addr{}); err != nil || !ok {
			problem("no %s default route via %s in the pod", familyName(ip), l.Attrs().Name)
		}
	}
	sv, err := linkByName(pod.h, svcVethName(lab.Key))
	if err != nil || !paired(hv, sv) {
		problem("service veth %s missing in the pod", svcVethName(lab.Key))
		return probs, nil
	}
	for _, ip := range ips {
		rs, err := viaRoutes(pod.h, sv, podGateway(ip))
		if err != nil {
			problem("host routes in the pod: %v", err)
		}
		routes = append(routes, rs...)
	}
	slices.SortFunc(routes, netip.Prefix.Compare)
	return probs, routes
}

// checkPodVeth inspects the pod side of a shared attachment: the pod's
// veth paired with hv and up, and for each address its place in the pod
// (address, gateway neighbour, default route on eth0) and, for IPv6, its
// neighbour on the node.
func (d *Datapath) checkPodVeth(pod *nsRef, hv netlink.Link, lab label, ips []netip.Addr) []string {
	var probs []string
	problem := func(f string, a ...any) { probs = append(probs, fmt.Sprintf(f, a...)) }
	pv, err := linkByName(pod.h, lab.Key.IfName)
	if err != nil {
		return []string{fmt.Sprintf("pod interface %s: %v", lab.Key.IfName, err)}
	}
	if !paired(hv, pv) {
		problem("%s in the pod is not the peer of %s", lab.Key.IfName, hv.Attrs().Name)
	}
	if !isUp(pv) {
		problem("%s is down in the pod", lab.Key.IfName)
	}
	addrs, err := dump("list addresses", func() ([]netlink.Addr, error) { return pod.h.AddrList(pv, netlink.FAMILY_ALL) })
	if err != nil {
		return append(probs, err.Error())
	}
	for _, ip := range ips {
		found := false
		for _, a := range addrs {
			if isHost(a.IPNet, ip) {
				found = true
			}
		}
		if !found {
			problem("address %s missing in the pod", ip)
		}
		gw := podGateway(ip)
		if ok, err := hasPermNeigh(pod.h, pv, gw, hv.Attrs().HardwareAddr); err != nil || !ok {
			problem("neighbour %s missing in the pod", gw)
		}
		if lab.Key.IfName == DefaultIfName { // only eth0 carries the default route
			if ok, err := hasDefault(pod.h, pv, familyOf(ip), gw); err != nil || !ok {
				problem("default via %s missing in the pod", gw)
			}
		}
		if ip.Is6() {
			if ok, err := hasPermNeigh(d.node.h, hv, ip, pv.Attrs().HardwareAddr); err != nil || !ok {
				problem("neighbour %s missing on %s", ip, hv.Attrs().Name)
			}
		}
	}
	return probs
}

// hasDefault reports whether the main table has a default route out of l
// (via gw when gw is valid).
func hasDefault(h *netlink.Handle, l netlink.Link, fam int, gw netip.Addr) (bool, error) {
	routes, err := dump("list routes", func() ([]netlink.Route, error) {
		return h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return false, err
	}
	for _, r := range routes {
		if isDefault(r) && r.LinkIndex == l.Attrs().Index && (!gw.IsValid() || addrOf(r.Gw) == gw) {
			return true, nil
		}
	}
	return false, nil
}

// isHostVeth reports whether l is a host veth enid labelled: labelled, and
// not itself the ENI its label names (an exclusive ENI back on the node
// with its label still on is an ENI device, not an attachment).
func isHostVeth(l netlink.Link) bool {
	lab, ok := parseLabel(l.Attrs().Alias)
	return ok && lab.ENI != l.Attrs().HardwareAddr.String()
}

func familyName(a netip.Addr) string {
	if a.Is4() {
		return "ipv4"
	}
	return "ipv6"
}
