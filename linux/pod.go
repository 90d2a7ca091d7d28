package linux

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/enidnet/enid/internal/podkey"
	"github.com/enidnet/enid/observed"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// PodSpec is one shared-mode pod attachment: a veth pair, the pod's
// addresses, and policy routing through the ENI's table.
type PodSpec struct {
	Key observed.AttachmentKey
	// NetNS is the pod's netns path (must exist).
	NetNS string
	// IfName is the interface name inside the pod (e.g. "eth0").
	IfName string
	// IPv4 and IPv6 are the pod's addresses; at least one is valid.
	IPv4, IPv6 netip.Addr
	// ENIMAC is the ENI whose table Table is; recorded for Observe.
	ENIMAC string
	// Table is the ENI's route table (see ENISpec.Table).
	Table int
	// MTU of both veth ends; 0 keeps the kernel's default.
	MTU int
	// Bandwidth limits the pod's traffic; nil means no limit.
	Bandwidth *Bandwidth
}

// validIfName checks the pod-side interface name by the attachment key's
// grammar (podkey.CheckIfName: what Linux accepts, without '_').
func validIfName(n string) error { return podkey.CheckIfName(n) }

func (s PodSpec) validate() error {
	if s.Key.ContainerID == "" {
		return fmt.Errorf("empty container id")
	}
	if err := validIfName(s.IfName); err != nil {
		return err
	}
	if s.NetNS == "" {
		return fmt.Errorf("empty netns path")
	}
	if (s.IPv4.IsValid() && !s.IPv4.Is4()) || (s.IPv6.IsValid() && !s.IPv6.Is6()) {
		return fmt.Errorf("address family mismatch (ipv4 %v, ipv6 %v)", s.IPv4, s.IPv6)
	}
	if !s.IPv4.IsValid() && !s.IPv6.IsValid() {
		return fmt.Errorf("no pod address")
	}
	return validTable(s.Table)
}

// EnsurePod sets up or repairs a shared-mode pod attachment: in the pod,
// IfName with IP/32 (and /128), a permanent neighbour for the link-local
// gateway naming the host veth's MAC, and the default route via it; on
// the node, the host veth (named HostVethName, labelled with the
// attachment), the route to the pod, the two policy rules, and tc tbf
// limits when asked. It changes only what differs and reports it.
func (d *Datapath) EnsurePod(ctx context.Context, s PodSpec) (PodResult, Changes, error) {
	if err := s.validate(); err != nil {
		return PodResult{}, nil, fmt.Errorf("ensure pod %s: %w", s.Key, err)
	}
	var ch Changes
	defer d.logChanges("ensure pod", s.Key.String(), &ch)
	res, err := d.ensurePod(ctx, s, &ch)
	if err != nil {
		return res, ch, fmt.Errorf("ensure pod %s: %w", s.Key, err)
	}
	return res, ch, nil
}

func (d *Datapath) ensurePod(ctx context.Context, s PodSpec, ch *Changes) (PodResult, error) {
	pod, err := d.openPod(s.NetNS)
	if err != nil {
		return PodResult{}, err
	}
	defer func() { _ = pod.Close() }() // releasing descriptors cannot fail usefully
	lab := label{Key: s.Key, NetNS: s.NetNS, Mode: modeShared, ENI: s.ENIMAC, IPv4: s.IPv4, IPv6: s.IPv6}
	hv, pv, fresh, err := d.ensureVeth(pod, HostVethName(s.Key), s.IfName, s.MTU, lab.String(), ch)
	if err != nil {
		return PodResult{}, err
	}
	if err := ensureLink(pod.h, pv, s.MTU, " in pod", ch); err != nil {
		return PodResult{}, err
	}
	if err := ensureLink(d.node.h, hv, s.MTU, "", ch); err != nil {
		return PodResult{}, err
	}
	ips := podIPs(s.IPv4, s.IPv6)
	if err := ensureAddrs(pod.h, pv, hostPrefixes(ips), " in pod", ch); err != nil {
		return PodResult{}, err
	}
	hostMAC, podMAC := hv.Attrs().HardwareAddr, pv.Attrs().HardwareAddr
	for _, ip := range ips {
		gw := podGateway(ip)
		if err := ensurePermNeigh(pod.h, pv, gw, hostMAC, " in pod", ch); err != nil {
			return PodResult{}, err
		}
		if err := ensureDefault(pod.h, pv, gw, s.IfName == DefaultIfName, " in pod", ch); err != nil {
			return PodResult{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return PodResult{}, err
	}
	added, err := d.ensureHostRoutes(hv, ips, fresh, ch)
	if err != nil {
		return PodResult{}, err
	}
	if s.IPv6.IsValid() {
		// The host answers for the pod's IPv6 itself: no NDP, so no wait
		// for the host veth's link-local address to leave DAD.
		if err := ensurePermNeigh(d.node.h, hv, s.IPv6, podMAC, "", ch); err != nil {
			return PodResult{}, err
		}
	}
	for _, ip := range ips {
		if fresh {
			if err := d.replacePodRules(ip, s.Table, ch); err != nil {
				return PodResult{}, err
			}
			continue
		}
		rules, err := d.listRules(familyOf(ip))
		if err != nil {
			return PodResult{}, err
		}
		if err := d.ensurePodRules(rules, ip, s.Table, ch); err != nil {
			return PodResult{}, err
		}
	}
	var in, eg rate
	if b := s.Bandwidth; b != nil {
		in, eg = rate{b.IngressRate, b.IngressBurst}, rate{b.EgressRate, b.EgressBurst}
	}
	// Ingress (to the pod) is shaped leaving the host veth, egress leaving
	// the pod's end.
	if err := ensureTBF(d.node.h, hv, in, fresh, "", ch); err != nil {
		return PodResult{}, err
	}
	if err := ensureTBF(pod.h, pv, eg, fresh, " in pod", ch); err != nil {
		return PodResult{}, err
	}
	// Last: a new binding starts with no conntrack entry of the address's
	// previous holder (conntrack.go).
	if err := d.bindFresh(hv, added, ch); err != nil {
		return PodResult{}, err
	}
	return PodResult{
		HostVeth: hv.Attrs().Name,
		PodMAC:   podMAC.String(),
		Interfaces: []Interface{
			{Name: hv.Attrs().Name, MAC: hostMAC.String()},
			{Name: s.IfName, MAC: podMAC.String(), Sandbox: s.NetNS},
		},
	}, nil
}

// ensureVeth makes host (in the node) and podName (in the pod) the two
// ends of one veth pair, labelled with alias, and returns both ends as
// they are now and whether it created the pair.
// A host veth whose peer is not podName in this pod is replaced; an
// interface podName in the pod that is not our peer is a conflict.
func (d *Datapath) ensureVeth(pod *nsRef, host, podName string, mtu int, alias string, ch *Changes) (hv, pv netlink.Link, created bool, err error) {
	hv, err = linkByName(d.node.h, host)
	if err != nil && !isNotFound(err) {
		return nil, nil, false, err
	}
	pv, err = linkByName(pod.h, podName)
	if err != nil && !isNotFound(err) {
		return nil, nil, false, err
	}
	if hv != nil && !(pv != nil && paired(hv, pv)) {
		if _, ok := hv.(*netlink.Veth); !ok {
			return nil, nil, false, fmt.Errorf("%s exists and is a %s, not a veth: %w", host, hv.Type(), ErrConflict)
		}
		if err := d.node.h.LinkDel(hv); err != nil && !isNotFound(mapErr(err)) {
			return nil, nil, false, fmt.Errorf("delete stale veth %s: %w", host, mapErr(err))
		}
		ch.add("delete veth %s: its peer is not %s in %s", host, podName, pod.path)
		hv = nil
		// Its peer went with it; look again.
		if pv, err = linkByName(pod.h, podName); err != nil && !isNotFound(err) {
			return nil, nil, false, err
		}
	}
	if hv == nil {
		if pv != nil {
			return nil, nil, false, fmt.Errorf("interface %s already exists in %s: %w", podName, pod.path, ErrConflict)
		}
		v := &netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: host, MTU: mtu},
			PeerName:      podName,
			PeerNamespace: netlink.NsFd(int(pod.fd)),
		}
		if err := d.node.h.LinkAdd(v); err != nil {
			return nil, nil, false, fmt.Errorf("add veth %s: %w", host, mapErr(err))
		}
		ch.add("add veth %s <-> %s in %s", host, podName, pod.path)
		created = true
		if hv, err = linkByName(d.node.h, host); err != nil {
			return nil, nil, false, err
		}
		if pv, err = linkByName(pod.h, podName); err != nil {
			return nil, nil, false, err
		}
	}
	if err := ensureAlias(d.node.h, hv, alias, "", ch); err != nil {
		return nil, nil, false, err
	}
	return hv, pv, created, nil
}

// paired reports whether a and b are the two ends of one veth.
func paired(a, b netlink.Link) bool {
	_, va := a.(*netlink.Veth)
	_, vb := b.(*netlink.Veth)
	return va && vb && a.Attrs().ParentIndex == b.Attrs().Index && b.Attrs().ParentIndex == a.Attrs().Index
}

// ensureAddrs makes l hold exactly the addresses want among its
// non-link-local addresses (IPv6 ones without DAD).
func ensureAddrs(h *netlink.Handle, l netlink.Link, want []netip.Prefix, where string, ch *Changes) error {
	addrs, err := dump("list addresses", func() ([]netlink.Addr, error) { return h.AddrList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return err
	}
	have := map[netip.Prefix]bool{}
	for _, a := range addrs {
		p := prefixOf(a.IPNet)
		if p.Addr().IsLinkLocalUnicast() {
			continue
		}
		if slices.Contains(want, p) {
			have[p] = true
			continue
		}
		if err := h.AddrDel(l, &a); err != nil && !isNotFound(mapErr(err)) {
			return fmt.Errorf("delete address %s from %s: %w", p, l.Attrs().Name, mapErr(err))
		}
		ch.add("delete address %s from %s%s", p, l.Attrs().Name, where)
	}
	for _, p := range want {
		if have[p] {
			continue
		}
		a := &netlink.Addr{IPNet: ipNet(p)}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(l, a); err != nil && !isExist(err) {
			return fmt.Errorf("add address %s to %s: %w", p, l.Attrs().Name, mapErr(err))
		}
		ch.add("add address %s to %s%s", p, l.Attrs().Name, where)
	}
	return nil
}

func hostPrefixes(ips []netip.Addr) []netip.Prefix {
	var r []netip.Prefix
	for _, ip := range ips {
		r = append(r, netip.PrefixFrom(ip, ip.BitLen()))
	}
	return r
}

// ensurePermNeigh makes ip a permanent neighbour with mac on l.
func ensurePermNeigh(h *netlink.Handle, l netlink.Link, ip netip.Addr, mac []byte, where string, ch *Changes) error {
	ok, err := hasPermNeigh(h, l, ip, mac)
	if err != nil || ok {
		return err
	}
	n := &netlink.Neigh{
		LinkIndex:    l.Attrs().Index,
		Family:       familyOf(ip),
		State:        netlink.NUD_PERMANENT,
		IP:           ip.AsSlice(),
		HardwareAddr: mac,
	}
	if err := h.NeighSet(n); err != nil {
		return fmt.Errorf("set neighbour %s on %s: %w", ip, l.Attrs().Name, mapErr(err))
	}
	ch.add("set neighbour %s lladdr %s dev %s%s permanent", ip, n.HardwareAddr, l.Attrs().Name, where)
	return nil
}

func hasPermNeigh(h *netlink.Handle, l netlink.Link, ip netip.Addr, mac []byte) (bool, error) {
	ns, err := dump("list neighbours", func() ([]netlink.Neigh, error) { return h.NeighList(l.Attrs().Index, familyOf(ip)) })
	if err != nil {
		return false, err
	}
	for _, n := range ns {
		if addrOf(n.IP) == ip && n.State&netlink.NUD_PERMANENT != 0 && bytes.Equal(n.HardwareAddr, mac) {
			return true, nil
		}
	}
	return false, nil
}

// DefaultIfName is the one pod interface that gets the pod's default
// route. A pod with several enid interfaces (eth0 from enid, eth1 from a
// second enid network) has one default route, and the runtime's primary
// network names its interface eth0; every other interface gets only its
// own address, gateway neighbour and the routes enid made for it. See
// docs/datapath.md.
const DefaultIfName = "eth0"

// ensureDefault makes the main table of the pod's namespace hold enid's
// default route of gw's family via gw dev l onlink when want, and no
// default route of enid's out of l otherwise. It never deletes a route it
// did not make (one without enid's protocol): a foreign default route where
// enid must put its own is a conflict, reported, not replaced.
func ensureDefault(h *netlink.Handle, l netlink.Link, gw netip.Addr, want bool, where string, ch *Changes) error {
	routes, err := dump("list routes", func() ([]netlink.Route, error) {
		return h.RouteListFiltered(familyOf(gw), &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return err
	}
	good := false
	var foreign []string
	for _, r := range routes {
		if !isDefault(r) {
			continue
		}
		if r.Protocol != Proto {
			foreign = append(foreign, routeString(r))
			continue
		}
		if want && !good && r.LinkIndex == l.Attrs().Index && addrOf(r.Gw) == gw && isOnlink(r) {
			good = true
			continue
		}
		if !want && r.LinkIndex != l.Attrs().Index {
			continue // enid's, but another interface's (the pod's eth0)
		}
		if err := h.RouteDel(&r); err != nil && !isNotFound(mapErr(err)) {
			return fmt.Errorf("delete default route: %w", mapErr(err))
		}
		ch.add("delete route %s%s", routeString(r), where)
	}
	if good || !want {
		return nil
	}
	if len(foreign) > 0 {
		return fmt.Errorf("%s needs the default route, but the pod holds one enid did not make (%s): %w",
			l.Attrs().Name, strings.Join(foreign, "; "), ErrConflict)
	}
	r := &netlink.Route{
		LinkIndex: l.Attrs().Index,
		Gw:        gw.AsSlice(),
		Flags:     unix.RTNH_F_ONLINK,
		Protocol:  Proto,
		Family:    familyOf(gw),
	}
	if err := h.RouteReplace(r); err != nil {
		return fmt.Errorf("add default via %s dev %s: %w", gw, l.Attrs().Name, mapErr(err))
	}
	ch.add("add default via %s dev %s onlink%s", gw, l.Attrs().Name, where)
	return nil
}

// ensureHostRoutes makes the main table route each pod address to the
// host veth, and removes enid's routes (and rules) for addresses the pod
// no longer has. It returns the addresses it began to route to hv: those
// newly bound to the attachment.
func (d *Datapath) ensureHostRoutes(hv netlink.Link, ips []netip.Addr, fresh bool, ch *Changes) (added []netip.Addr, err error) {
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		// enid's main-table routes through hv: a route to the address
		// through another device is replaced below, by the route's key
		// (destination, TOS, metric), and needs no listing. Asking for
		// hv's routes alone keeps a setup's cost flat in the pods on the
		// node (the main table holds one route per pod), but the kernel
		// still walks the table to filter it; a veth this setup made
		// (fresh) has no route yet, so it is not asked at all.
		var routes []netlink.Route
		if !fresh {
			if routes, err = d.hostRoutesVia(fam, hv.Attrs().Index); err != nil {
				return nil, err
			}
		}
		var want netip.Addr
		for _, ip := range ips {
			if familyOf(ip) == fam {
				want = ip
			}
		}
		good := false
		for _, r := range routes {
			dst := prefixOf(r.Dst).Addr()
			onVeth := r.LinkIndex == hv.Attrs().Index
			if dst != want && !onVeth {
				continue // another pod's
			}
			if !good && dst == want && onVeth && (fam == netlink.FAMILY_V6 || r.Scope == netlink.SCOPE_LINK) {
				good = true
				continue
			}
			if err := d.node.h.RouteDel(&r); err != nil && !isNotFound(mapErr(err)) {
				return nil, fmt.Errorf("delete route %s: %w", routeString(r), mapErr(err))
			}
			ch.add("delete route %s", routeString(r))
			if dst != want {
				if err := d.dropRulesOf(dst, ch); err != nil {
					return nil, err
				}
			}
		}
		if good || !want.IsValid() {
			continue
		}
		r := &netlink.Route{
			LinkIndex: hv.Attrs().Index,
			Dst:       hostPrefix(want),
			Scope:     netlink.SCOPE_LINK,
			Protocol:  Proto,
			Table:     unix.RT_TABLE_MAIN,
			Family:    fam,
		}
		if err := d.node.h.RouteReplace(r); err != nil {
			return nil, fmt.Errorf("add route %s dev %s: %w", want, hv.Attrs().Name, mapErr(err))
		}
		ch.add("add route %s dev %s scope link", hostPrefix(want), hv.Attrs().Name)
		added = append(added, want)
	}
	return added, nil
}

// TeardownPod removes a shared-mode attachment: its rules and its veth
// (which takes the pod end, the host routes and the neighbours with it).
// netns may be "" or already gone: the veth is found by name. Everything
// already gone is success.
//
// addrs are the pod's addresses as the caller knows them: their rules are
// removed even when the veth (and with it the label that records them) is
// already gone, unless another attachment's veth claims the address. The
// node's conntrack entries naming the addresses go too (conntrack.go),
// with the same exception.
//
// A teardown that finds the veth holding every address in addrs (the
// usual DEL) lists nothing that grows with the pods on the node: the
// pod's rules are deleted by priority and address, whatever their table
// (deleteAnyTable). Otherwise, the veth gone or an address not its own, it
// lists the node's rules once per family, then the links once, the veth
// gone (the order sweepRules needs), deletes the rules of the addresses no
// other veth claims, and sweeps the rules of every attachment whose veth
// vanished (the agent also sweeps after each full observation: Sweep).
func (d *Datapath) TeardownPod(ctx context.Context, key observed.AttachmentKey, netns string, addrs ...netip.Addr) (Changes, error) {
	var ch Changes
	defer d.logChanges("teardown pod", key.String(), &ch)
	fail := func(err error) (Changes, error) { return ch, fmt.Errorf("teardown pod %s: %w", key, err) }
	held, found, err := d.teardownVeth(ctx, key, &ch)
	if err != nil {
		return fail(err)
	}
	if found && !slices.ContainsFunc(addrs, func(a netip.Addr) bool { return a.IsValid() && !slices.Contains(held, a) }) {
		if err := d.releaseConntrack(key, held, &ch); err != nil {
			return fail(err)
		}
		return ch, nil
	}
	rl, links, err := d.listRulesThenLinks()
	if err != nil {
		return fail(err)
	}
	if err := dropPodRules(key, addrs, links, rl, &ch); err != nil {
		return fail(err)
	}
	if err := d.releaseConntrack(key, append(held, addrs...), &ch); err != nil {
		return fail(err)
	}
	if err := d.sweepRules(rl, links, &ch); err != nil {
		return fail(err)
	}
	return ch, nil
}

// dropPodRules deletes enid's rules (of rl) for addrs, except an address
// that a veth (of links) labelled for another attachment claims.
func dropPodRules(key observed.AttachmentKey, addrs []netip.Addr, links []netlink.Link, rl *ruleLists, ch *Changes) error {
	want := map[int]map[netip.Addr]bool{}
	for _, a := range addrs {
		if a.IsValid() {
			if want[familyOf(a)] == nil {
				want[familyOf(a)] = map[netip.Addr]bool{}
			}
			want[familyOf(a)][a] = true
		}
	}
	if len(want) == 0 {
		return nil
	}
	for _, l := range links {
		if lab, ok := parseLabel(l.Attrs().Alias); ok && lab.Key != key {
			for _, ips := range want {
				delete(ips, lab.IPv4)
				delete(ips, lab.IPv6)
			}
		}
	}
	for _, fam := range ruleFamilies {
		if err := rl.dropPodRulesOf(fam, want[fam], ch); err != nil {
			return err
		}
	}
	return nil
}

// teardownVeth deletes the attachment's rules and host veth, if present
// (found), and returns the addresses the veth carried (its label's and
// those routed to it).
func (d *Datapath) teardownVeth(ctx context.Context, key observed.AttachmentKey, ch *Changes) (held []netip.Addr, found bool, err error) {
	host := HostVethName(key)
	hv, err := linkByName(d.node.h, host)
	if isNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	lab, _ := parseLabel(hv.Attrs().Alias) // an unlabelled veth has no recorded addresses
	held = podIPs(lab.IPv4, lab.IPv6)
	for _, fam := range ruleFamilies {
		// enid's main-table routes through hv: asking for hv's routes
		// alone keeps a teardown's cost flat in the pods on the node
		// (the main table holds one route per pod).
		routes, err := d.hostRoutesVia(fam, hv.Attrs().Index)
		if err != nil {
			return nil, true, err
		}
		for _, r := range routes {
			if ip := prefixOf(r.Dst).Addr(); r.LinkIndex == hv.Attrs().Index && !slices.Contains(held, ip) {
				held = append(held, ip)
			}
		}
	}
	for _, ip := range held {
		if err := d.dropRulesOf(ip, ch); err != nil {
			return nil, true, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, true, err
	}
	if err := d.node.h.LinkDel(hv); err != nil && !isNotFound(mapErr(err)) {
		return nil, true, fmt.Errorf("delete veth %s: %w", host, mapErr(err))
	}
	ch.add("delete veth %s", host)
	return held, true, nil
}
