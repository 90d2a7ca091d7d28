package linux

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/enidnet/enid/observed"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ExclusiveSpec is one exclusive-mode attachment: a whole ENI moved into
// the pod, plus a veth to the host for traffic that must go through the
// node (services, kubelet probes).
type ExclusiveSpec struct {
	Key observed.AttachmentKey
	// NetNS is the pod's netns path; IfName the ENI's name in it.
	NetNS, IfName string
	// MAC finds the ENI device.
	MAC string
	// Prefix is the pod's address with the vSwitch prefix length.
	Prefix netip.Prefix
	// Gateway is the vSwitch gateway.
	Gateway netip.Addr
	// PrefixV6 is the pod's IPv6 address with its prefix length, and
	// GatewayV6 the IPv6 gateway; zero values mean no IPv6.
	PrefixV6  netip.Prefix
	GatewayV6 netip.Addr
	// MTU of the ENI in the pod and of the service veth; 0 leaves it.
	MTU int
	// HostRoutes are destinations the pod reaches through the service veth
	// (via 169.254.1.1) instead of the ENI: service CIDRs, the node's own
	// address. May be empty; the host reaches the pod over the veth anyway.
	HostRoutes []netip.Prefix
	// WaitForDevice bounds how long to wait for the ENI's device to appear
	// on the node; 0 means look once.
	WaitForDevice time.Duration
}

func (s ExclusiveSpec) validate() error {
	if s.Key.ContainerID == "" || s.NetNS == "" {
		return fmt.Errorf("empty container id or netns")
	}
	if err := validIfName(s.IfName); err != nil {
		return err
	}
	if !s.Prefix.IsValid() || !s.Prefix.Addr().Is4() || !s.Gateway.Is4() {
		return fmt.Errorf("prefix %v and gateway %v must be IPv4", s.Prefix, s.Gateway)
	}
	if s.PrefixV6.IsValid() != s.GatewayV6.IsValid() || (s.PrefixV6.IsValid() && (!s.PrefixV6.Addr().Is6() || !s.GatewayV6.Is6())) {
		return fmt.Errorf("ipv6 prefix %v and gateway %v must both be IPv6 or both be unset", s.PrefixV6, s.GatewayV6)
	}
	return nil
}

// EnsureExclusive moves the ENI into the pod (remembering its host name in
// its alias), names it IfName, gives it Prefix and "default via Gateway",
// and sets up the service veth: in the pod a permanent neighbour for
// 169.254.1.1 and the HostRoutes via it, on the host a route to the pod's
// address. It changes only what differs and reports it.
func (d *Datapath) EnsureExclusive(ctx context.Context, s ExclusiveSpec) (PodResult, Changes, error) {
	if err := s.validate(); err != nil {
		return PodResult{}, nil, fmt.Errorf("ensure exclusive %s: %w", s.Key, err)
	}
	var ch Changes
	defer d.logChanges("ensure exclusive", s.Key.String(), &ch)
	res, err := d.ensureExclusive(ctx, s, &ch)
	if err != nil {
		return res, ch, fmt.Errorf("ensure exclusive %s: %w", s.Key, err)
	}
	return res, ch, nil
}

func (d *Datapath) ensureExclusive(ctx context.Context, s ExclusiveSpec, ch *Changes) (PodResult, error) {
	mac, err := normMAC(s.MAC)
	if err != nil {
		return PodResult{}, err
	}
	pod, err := d.openPod(s.NetNS)
	if err != nil {
		return PodResult{}, err
	}
	defer func() { _ = pod.Close() }() // releasing descriptors cannot fail usefully
	l, err := d.moveIn(ctx, pod, mac, s, ch)
	if err != nil {
		return PodResult{}, err
	}
	if err := ensureLink(pod.h, l, s.MTU, " in pod", ch); err != nil {
		return PodResult{}, err
	}
	prefixes, gateways := []netip.Prefix{s.Prefix}, []netip.Addr{s.Gateway}
	if s.PrefixV6.IsValid() {
		prefixes, gateways = append(prefixes, s.PrefixV6), append(gateways, s.GatewayV6)
	}
	if err := ensureAddrs(pod.h, l, prefixes, " in pod", ch); err != nil {
		return PodResult{}, err
	}
	for _, gw := range gateways {
		if err := ensureDefault(pod.h, l, gw, s.IfName == DefaultIfName, " in pod", ch); err != nil {
			return PodResult{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return PodResult{}, err
	}
	// What the pod sends through its service veth (HostRoutes: Services,
	// the node) is forwarded by the node: kube-proxy translates it there
	// and routes it on. Shared-mode ENIs turn forwarding on (EnsureENI);
	// a node with only exclusive pods has no such ENI, so the pod does.
	if err := d.ensureForwarding(s.HostRoutes, ch); err != nil {
		return PodResult{}, err
	}
	lab := label{Key: s.Key, NetNS: s.NetNS, Mode: modeExclusive, ENI: mac.String(), IPv4: s.Prefix.Addr(), IPv6: s.PrefixV6.Addr()}
	hv, sv, fresh, err := d.ensureVeth(pod, HostVethName(s.Key), svcVethName(s.Key), s.MTU, lab.String(), ch)
	if err != nil {
		return PodResult{}, err
	}
	if err := ensureLink(pod.h, sv, s.MTU, " in pod", ch); err != nil {
		return PodResult{}, err
	}
	if err := ensureLink(d.node.h, hv, s.MTU, "", ch); err != nil {
		return PodResult{}, err
	}
	ips := podIPs(s.Prefix.Addr(), s.PrefixV6.Addr())
	for _, ip := range ips {
		gw := podGateway(ip)
		if err := ensurePermNeigh(pod.h, sv, gw, hv.Attrs().HardwareAddr, " in pod", ch); err != nil {
			return PodResult{}, err
		}
		var dsts []netip.Prefix
		for _, p := range s.HostRoutes {
			if p.Addr().Is4() == ip.Is4() {
				dsts = append(dsts, p)
			}
		}
		if err := ensureViaRoutes(pod.h, sv, gw, dsts, ch); err != nil {
			return PodResult{}, err
		}
	}
	added, err := d.ensureHostRoutes(hv, ips, fresh, ch)
	if err != nil {
		return PodResult{}, err
	}
	if s.PrefixV6.IsValid() {
		if err := ensurePermNeigh(d.node.h, hv, s.PrefixV6.Addr(), sv.Attrs().HardwareAddr, "", ch); err != nil {
			return PodResult{}, err
		}
	}
	// The node sees the pod's service traffic through the veth: a new
	// binding starts with no conntrack entry of the address's previous
	// holder (conntrack.go).
	if err := d.bindFresh(hv, added, ch); err != nil {
		return PodResult{}, err
	}
	return PodResult{
		HostVeth: hv.Attrs().Name,
		PodMAC:   mac.String(),
		Interfaces: []Interface{
			{Name: hv.Attrs().Name, MAC: hv.Attrs().HardwareAddr.String()},
			{Name: s.IfName, MAC: mac.String(), Sandbox: s.NetNS},
			{Name: sv.Attrs().Name, MAC: sv.Attrs().HardwareAddr.String(), Sandbox: s.NetNS},
		},
	}, nil
}

// moveIn returns the ENI inside the pod named IfName, moving it from the
// node and renaming it as needed.
func (d *Datapath) moveIn(ctx context.Context, pod *nsRef, mac net.HardwareAddr, s ExclusiveSpec, ch *Changes) (netlink.Link, error) {
	l, err := linkByMAC(pod.h, mac)
	if err != nil && !isNotFound(err) {
		return nil, err
	}
	if l == nil {
		hl, err := waitForMAC(ctx, d.node.h, mac, s.WaitForDevice)
		if err != nil {
			return nil, fmt.Errorf("eni %s is neither in the pod nor on the node: %w", mac, err)
		}
		lab, ok := parseLabel(hl.Attrs().Alias)
		if !ok || lab.Orig == "" {
			lab = label{Orig: hl.Attrs().Name, Up: isUp(hl)}
		}
		lab.Key, lab.NetNS, lab.Mode, lab.ENI = s.Key, s.NetNS, modeExclusive, mac.String()
		if err := ensureAlias(d.node.h, hl, lab.String(), "", ch); err != nil {
			return nil, err
		}
		if isUp(hl) {
			if err := d.node.h.LinkSetDown(hl); err != nil {
				return nil, fmt.Errorf("set %s down: %w", hl.Attrs().Name, mapErr(err))
			}
		}
		if err := d.node.h.LinkSetNsFd(hl, int(pod.fd)); err != nil {
			return nil, fmt.Errorf("move %s into %s: %w", hl.Attrs().Name, pod.path, mapErr(err))
		}
		ch.add("move eni %s (%s) into %s", mac, hl.Attrs().Name, pod.path)
		if l, err = linkByMAC(pod.h, mac); err != nil {
			return nil, err
		}
	}
	if l.Attrs().Name == s.IfName {
		return l, nil
	}
	if other, err := linkByName(pod.h, s.IfName); err == nil {
		return nil, fmt.Errorf("interface %s (%s) already exists in %s: %w", s.IfName, other.Type(), pod.path, ErrConflict)
	}
	if err := pod.h.LinkSetDown(l); err != nil {
		return nil, fmt.Errorf("set %s down: %w", l.Attrs().Name, mapErr(err))
	}
	if err := pod.h.LinkSetName(l, s.IfName); err != nil {
		return nil, fmt.Errorf("rename %s to %s: %w", l.Attrs().Name, s.IfName, mapErr(err))
	}
	ch.add("rename %s to %s in pod", l.Attrs().Name, s.IfName)
	return linkByMAC(pod.h, mac)
}

// ensureViaRoutes makes the main table route each destination via gw out
// of l (onlink), replacing a route to the same destination elsewhere.
func ensureViaRoutes(h *netlink.Handle, l netlink.Link, gw netip.Addr, dsts []netip.Prefix, ch *Changes) error {
	// Routes enid set before for prefixes no longer asked for (the
	// config's serviceCIDRs changed) go first: only enid's, via gw on the
	// service veth, which enid created.
	have, err := viaRouteList(h, l, gw)
	if err != nil {
		return err
	}
	for _, r := range have {
		dst := prefixOf(r.Dst)
		if slices.Contains(dsts, dst) {
			continue
		}
		if err := h.RouteDel(&r); err != nil && !isNotFound(mapErr(err)) {
			return fmt.Errorf("delete route %s via %s: %w", dst, gw, mapErr(err))
		}
		ch.add("delete route %s via %s dev %s in pod", dst, gw, l.Attrs().Name)
	}
	for _, dst := range dsts {
		routes, err := dump("list routes", func() ([]netlink.Route, error) {
			return h.RouteListFiltered(familyOf(dst.Addr()), &netlink.Route{Table: unix.RT_TABLE_MAIN, Dst: ipNet(dst)},
				netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
		})
		if err != nil {
			return err
		}
		ok := false
		for _, r := range routes {
			if r.LinkIndex == l.Attrs().Index && addrOf(r.Gw) == gw {
				ok = true
			}
		}
		if ok {
			continue
		}
		r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipNet(dst), Gw: gw.AsSlice(), Flags: unix.RTNH_F_ONLINK, Protocol: Proto}
		if err := h.RouteReplace(r); err != nil {
			return fmt.Errorf("add route %s via %s: %w", dst, gw, mapErr(err))
		}
		ch.add("add route %s via %s dev %s onlink in pod", dst, gw, l.Attrs().Name)
	}
	return nil
}

// viaRouteList lists the main-table routes of gw's family that enid set
// on l via gw (protocol Proto): an exclusive pod's host routes.
func viaRouteList(h *netlink.Handle, l netlink.Link, gw netip.Addr) ([]netlink.Route, error) {
	routes, err := dump("list routes", func() ([]netlink.Route, error) {
		return h.RouteListFiltered(familyOf(gw), &netlink.Route{Table: unix.RT_TABLE_MAIN, LinkIndex: l.Attrs().Index, Protocol: Proto},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF|netlink.RT_FILTER_PROTOCOL)
	})
	if err != nil {
		return nil, err
	}
	var out []netlink.Route
	for _, r := range routes {
		if r.Dst != nil && addrOf(r.Gw) == gw {
			out = append(out, r)
		}
	}
	return out, nil
}

// viaRoutes returns the destinations of viaRouteList.
func viaRoutes(h *netlink.Handle, l netlink.Link, gw netip.Addr) ([]netip.Prefix, error) {
	routes, err := viaRouteList(h, l, gw)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, r := range routes {
		out = append(out, prefixOf(r.Dst))
	}
	return out, nil
}

// TeardownExclusive returns the ENI to the node under its original name
// (and admin state) and deletes the service veth. netns may be "" or gone:
// the ENI is then looked for on the node, where the kernel puts a physical
// device back when its namespace dies, and renamed there. Everything
// already gone or already back is success.
func (d *Datapath) TeardownExclusive(ctx context.Context, key observed.AttachmentKey, netns string, mac string) (Changes, error) {
	var ch Changes
	defer d.logChanges("teardown exclusive", key.String(), &ch)
	if err := d.teardownExclusive(ctx, key, netns, mac, &ch); err != nil {
		return ch, fmt.Errorf("teardown exclusive %s: %w", key, err)
	}
	return ch, nil
}

func (d *Datapath) teardownExclusive(ctx context.Context, key observed.AttachmentKey, netns string, mac string, ch *Changes) error {
	hw, err := normMAC(mac)
	if err != nil {
		return err
	}
	if netns != "" {
		if err := d.moveOut(netns, hw, ch); err != nil {
			return err
		}
	}
	if l, err := linkByMAC(d.node.h, hw); err == nil {
		if err := d.restoreOnNode(l, ch); err != nil {
			return err
		}
	} else if !isNotFound(err) {
		return err
	}
	held, _, err := d.teardownVeth(ctx, key, ch)
	if err != nil {
		return err
	}
	return d.releaseConntrack(key, held, ch)
}

// moveOut moves the ENI from the pod back to the node, renamed to its
// original name first so it cannot clash with a node device named IfName.
func (d *Datapath) moveOut(netnsPath string, hw net.HardwareAddr, ch *Changes) error {
	pod, err := d.openPod(netnsPath)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = pod.Close() }() // releasing descriptors cannot fail usefully
	l, err := linkByMAC(pod.h, hw)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := pod.h.LinkSetDown(l); err != nil {
		return fmt.Errorf("set %s down: %w", l.Attrs().Name, mapErr(err))
	}
	if lab, ok := parseLabel(l.Attrs().Alias); ok && lab.Orig != "" && lab.Orig != l.Attrs().Name {
		if err := pod.h.LinkSetName(l, lab.Orig); err != nil {
			return fmt.Errorf("rename %s to %s: %w", l.Attrs().Name, lab.Orig, mapErr(err))
		}
	}
	if err := pod.h.LinkSetNsFd(l, int(d.node.fd)); err != nil {
		return fmt.Errorf("move eni %s to the node: %w", hw, mapErr(err))
	}
	ch.add("move eni %s out of %s", hw, netnsPath)
	return nil
}

// restoreOnNode gives a returned ENI its original name and admin state and
// clears enid's label. A device without enid's exclusive label is left alone.
func (d *Datapath) restoreOnNode(l netlink.Link, ch *Changes) error {
	lab, ok := parseLabel(l.Attrs().Alias)
	if !ok || lab.Mode != modeExclusive || lab.Orig == "" {
		return nil
	}
	if l.Attrs().Name != lab.Orig {
		if err := d.node.h.LinkSetDown(l); err != nil {
			return fmt.Errorf("set %s down: %w", l.Attrs().Name, mapErr(err))
		}
		if err := d.node.h.LinkSetName(l, lab.Orig); err != nil {
			return fmt.Errorf("rename %s to %s: %w", l.Attrs().Name, lab.Orig, mapErr(err))
		}
		ch.add("rename %s back to %s", l.Attrs().Name, lab.Orig)
	}
	if err := d.node.h.LinkSetAlias(l, ""); err != nil {
		return fmt.Errorf("clear alias of %s: %w", lab.Orig, mapErr(err))
	}
	ch.add("clear alias of %s", lab.Orig)
	if lab.Up {
		if err := d.node.h.LinkSetUp(l); err != nil {
			return fmt.Errorf("set %s up: %w", lab.Orig, mapErr(err))
		}
		ch.add("set %s up", lab.Orig)
	}
	return nil
}

// ensureForwarding turns the node's forwarding on for the families of
// routes (none: nothing to forward).
func (d *Datapath) ensureForwarding(routes []netip.Prefix, ch *Changes) error {
	var set []sysctl
	v4, v6 := false, false
	for _, r := range routes {
		if r.Addr().Is4() {
			v4 = true
		} else {
			v6 = true
		}
	}
	if v4 {
		set = append(set, sysctl{path: []string{"net", "ipv4", "ip_forward"}, value: "1"})
	}
	if v6 {
		set = append(set, sysctl{path: []string{"net", "ipv6", "conf", "all", "forwarding"}, value: "1"})
	}
	if len(set) == 0 {
		return nil
	}
	done, err := d.node.ensureSysctls(set)
	*ch = append(*ch, done...)
	return err
}
