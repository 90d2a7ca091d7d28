package simvpc

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// GatewayV6 is the IPv6 gateway the vpc side of every plugged ENI
// answers: a link-local address, so the ENI table's IPv6 default route is
// "default via fe80::fffe dev ethN".
const GatewayV6 = "fe80::fffe"

// VPCHostV6 is a global IPv6 address on the vpc namespace's lo: something
// in the VPC that pods can reach over IPv6 (and that the vpc pings from).
const VPCHostV6 = "fd00:ffff::1"

// Topology is a vpc namespace and one or more node namespaces with ENIs
// plugged between them: the first node is NodeNS, AddNode makes more (a
// cluster of several instances in one VPC). Its methods are safe for
// concurrent use (the simulator's attach hook calls them from its own
// goroutines).
type Topology struct {
	// VPCNS and NodeNS are the namespaces' paths (NodeNS: the first node).
	VPCNS, NodeNS string
	name          string

	mu sync.Mutex // guards the fields below
	// plugs maps a lower-case MAC to its plugged ENI.
	plugs map[string]*plug
	// next is, per node namespace, the number of its next node-side
	// device name (eth<next>).
	next map[string]int
	// nodes are the node namespaces added by AddNode.
	nodes []string
	// pods are the pod namespaces created by NewPodNS and not yet removed.
	pods map[string]bool
	// closed is set by Close.
	closed bool
	// ndp proxies the vpc's neighbour discovery (ndp.go).
	ndp ndp
}

// plug is one ENI: a veth whose node end has the ENI's MAC.
type plug struct {
	mac      net.HardwareAddr
	nodeNS   string
	nodeName string
	vpcName  string
}

// New creates the two namespaces; name tags their paths
// (/run/netns/<name>-vpc-<random>). Close removes everything.
func New(name string) (*Topology, error) {
	vpc, err := createNS(name + "-vpc")
	if err != nil {
		return nil, err
	}
	node, err := createNS(name + "-node")
	if err != nil {
		return nil, errors.Join(err, deleteNS(vpc))
	}
	tp := &Topology{VPCNS: vpc, NodeNS: node, name: name, plugs: map[string]*plug{}, next: map[string]int{}, pods: map[string]bool{}}
	// The vpc namespace routes between vSwitches like the VPC does, and
	// answers neighbour discovery for every routed IPv6 address (proxy
	// NDP, ndp.go).
	if err := writeSysctls(vpc, map[string]string{
		"net/ipv4/ip_forward":          "1",
		"net/ipv6/conf/all/forwarding": "1",
		"net/ipv6/conf/all/proxy_ndp":  "1",
	}); err != nil {
		return nil, errors.Join(err, tp.Close())
	}
	if err := withHandle(vpc, func(h *netlink.Handle) error {
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		a := netip.MustParseAddr(VPCHostV6)
		return h.AddrAdd(lo, hostAddrV6(a))
	}); err != nil {
		return nil, errors.Join(fmt.Errorf("vpc address: %w", err), tp.Close())
	}
	return tp, nil
}

// Close removes the pod namespaces, the node and the vpc namespace (and so
// every link in them). Calling it again does nothing.
func (tp *Topology) Close() error {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.closed {
		return nil
	}
	tp.closed = true
	var errs []error
	for p := range tp.pods {
		errs = append(errs, deleteNS(p))
	}
	for _, n := range tp.nodes {
		errs = append(errs, deleteNS(n))
	}
	errs = append(errs, deleteNS(tp.NodeNS), deleteNS(tp.VPCNS))
	return errors.Join(errs...)
}

// AddNode creates another namespace that plays a node of the same VPC
// (an instance beside the first) and returns its path; PlugENIInto plugs
// its ENIs. Close removes it.
func (tp *Topology) AddNode() (string, error) {
	path, err := createNS(tp.name + "-node")
	if err != nil {
		return "", err
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.closed {
		return "", errors.Join(errors.New("add node: topology closed"), deleteNS(path))
	}
	tp.nodes = append(tp.nodes, path)
	return path, nil
}

// NewPodNS creates a pod namespace (lo up). cleanup removes it and may be
// called more than once; Close removes it too.
func (tp *Topology) NewPodNS(name string) (path string, cleanup func(), err error) {
	path, err = createNS("enidt-pod-" + name)
	if err != nil {
		return "", nil, err
	}
	tp.mu.Lock()
	tp.pods[path] = true
	tp.mu.Unlock()
	return path, func() {
		tp.mu.Lock()
		defer tp.mu.Unlock()
		if tp.pods[path] {
			delete(tp.pods, path)
			// Best effort, like t.Cleanup work: the namespace is gone or
			// Close reports nothing more useful.
			_ = deleteNS(path)
		}
	}, nil
}

// DeletePodNS removes a pod namespace now (as a runtime does before CNI
// DEL when a sandbox dies).
func (tp *Topology) DeletePodNS(path string) error {
	tp.mu.Lock()
	delete(tp.pods, path)
	tp.mu.Unlock()
	return deleteNS(path)
}

// PlugENI attaches an ENI to the first node: a veth pair whose node end
// (named eth1, eth2, ... in order of plugging, down) has the MAC, and
// whose vpc end holds the vSwitch gateway (as /32) and GatewayV6, with /32
// (or /128) routes and permanent neighbours for primary and ips, as the
// VPC's own tables know where each address lives. The vpc drops what the
// ENI sends from any other source, as the VPC does (antispoof.go).
func (tp *Topology) PlugENI(mac string, primary netip.Addr, cidr netip.Prefix, gateway netip.Addr, ips ...netip.Addr) error {
	return tp.PlugENIInto(tp.NodeNS, mac, primary, cidr, gateway, ips...)
}

// PlugENIInto is PlugENI for the node namespace at nodeNS (NodeNS or one
// AddNode made); device names count per node.
func (tp *Topology) PlugENIInto(nodeNS, mac string, primary netip.Addr, cidr netip.Prefix, gateway netip.Addr, ips ...netip.Addr) error {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return fmt.Errorf("plug eni: %w", err)
	}
	if !gateway.Is4() || !cidr.Contains(gateway) {
		return fmt.Errorf("plug eni %s: gateway %v not in %v", mac, gateway, cidr)
	}
	tp.mu.Lock()
	if tp.plugs[hw.String()] != nil {
		tp.mu.Unlock()
		return fmt.Errorf("plug eni %s: already plugged", mac)
	}
	tp.next[nodeNS]++
	p := &plug{mac: hw, nodeNS: nodeNS, nodeName: fmt.Sprintf("eth%d", tp.next[nodeNS]), vpcName: "v" + strings.ReplaceAll(hw.String(), ":", "")}
	tp.plugs[hw.String()] = p
	tp.mu.Unlock()

	nodeFD, err := netns.GetFromPath(nodeNS)
	if err != nil {
		return fmt.Errorf("plug eni %s: %w", mac, err)
	}
	defer func() { _ = nodeFD.Close() }() // read-only descriptor
	err = withHandle(tp.VPCNS, func(h *netlink.Handle) error {
		v := &netlink.Veth{
			LinkAttrs:        netlink.LinkAttrs{Name: p.vpcName},
			PeerName:         p.nodeName,
			PeerHardwareAddr: hw,
			PeerNamespace:    netlink.NsFd(int(nodeFD)),
		}
		if err := h.LinkAdd(v); err != nil {
			return fmt.Errorf("add veth: %w", err)
		}
		l, err := h.LinkByName(p.vpcName)
		if err != nil {
			return err
		}
		gw6 := netip.MustParseAddr(GatewayV6)
		for _, a := range []*netlink.Addr{
			{IPNet: &net.IPNet{IP: gateway.AsSlice(), Mask: net.CIDRMask(32, 32)}},
			{IPNet: &net.IPNet{IP: gw6.AsSlice(), Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD},
		} {
			if err := h.AddrAdd(l, a); err != nil {
				return fmt.Errorf("add address %s: %w", a.IPNet, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			return err
		}
		if err := tp.ndp.addDev(h, p.vpcName, l.Attrs().Index); err != nil {
			return err
		}
		return tp.routeIPs(h, l, hw, append([]netip.Addr{primary}, ips...))
	})
	if err != nil {
		tp.mu.Lock()
		delete(tp.plugs, hw.String())
		tp.mu.Unlock()
		return fmt.Errorf("plug eni %s: %w", mac, err)
	}
	// A vSwitch answers ARP for every address in it, as the VPC router
	// does: an exclusive-ENI pod, which holds the vSwitch prefix on link,
	// reaches another pod of the vSwitch through the VPC.
	// It answers a solicitation for a proxied IPv6 address at once, as
	// the VPC's router does, not after the random delay a proxy waits by
	// default (up to 0.8 s; a new namespace has no neigh/default to set).
	if err := writeSysctls(tp.VPCNS, map[string]string{
		"net/ipv4/conf/" + p.vpcName + "/proxy_arp":    "1",
		"net/ipv6/neigh/" + p.vpcName + "/proxy_delay": "0",
	}); err != nil {
		return fmt.Errorf("plug eni %s: %w", mac, err)
	}
	if err := antiSpoof(tp.VPCNS, p.vpcName); err != nil {
		return fmt.Errorf("plug eni %s: %w", mac, err)
	}
	return nil
}

// routeIPs routes each valid address to the ENI's link with a permanent
// neighbour naming the ENI's MAC; each IPv6 address is proxied on every
// ENI veth (ndp.go).
func (tp *Topology) routeIPs(h *netlink.Handle, l netlink.Link, mac net.HardwareAddr, ips []netip.Addr) error {
	for _, ip := range ips {
		if !ip.IsValid() {
			continue
		}
		r, fam := hostRoute(l, ip)
		if err := h.RouteReplace(r); err != nil {
			return fmt.Errorf("route %s: %w", ip, err)
		}
		n := &netlink.Neigh{LinkIndex: l.Attrs().Index, Family: fam, State: netlink.NUD_PERMANENT, IP: ip.AsSlice(), HardwareAddr: mac}
		if err := h.NeighSet(n); err != nil {
			return fmt.Errorf("neighbour %s: %w", ip, err)
		}
		if ip.Is6() {
			if err := tp.ndp.addAddr(h, ip, l.Attrs().Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// AddressPrimary gives the node end of the plugged primary ENI (by MAC)
// its address in cidr and a default route via gateway in the main table,
// as the node's DHCP client does on a real instance, and brings it up.
// Each of ipv6 (the ENI's IPv6 addresses) is added as a /128, as DHCPv6
// leases it, with an IPv6 default route via GatewayV6.
func (tp *Topology) AddressPrimary(mac string, ip netip.Addr, cidr netip.Prefix, gateway netip.Addr, ipv6 ...netip.Addr) error {
	p, err := tp.plugOf(mac)
	if err != nil {
		return err
	}
	return withHandle(p.nodeNS, func(h *netlink.Handle) error {
		l, err := h.LinkByName(p.nodeName)
		if err != nil {
			return fmt.Errorf("address primary %s: %w", mac, err)
		}
		a := &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(cidr.Bits(), 32)}}
		if err := h.AddrReplace(l, a); err != nil {
			return fmt.Errorf("address primary %s: %w", mac, err)
		}
		if err := h.LinkSetUp(l); err != nil {
			return fmt.Errorf("address primary %s: up: %w", mac, err)
		}
		r := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: gateway.AsSlice()}
		if err := h.RouteReplace(r); err != nil {
			return fmt.Errorf("address primary %s: default via %s: %w", mac, gateway, err)
		}
		if len(ipv6) == 0 {
			return nil
		}
		for _, a := range ipv6 {
			if err := h.AddrReplace(l, hostAddrV6(a)); err != nil {
				return fmt.Errorf("address primary %s: %s: %w", mac, a, err)
			}
		}
		gw6 := netip.MustParseAddr(GatewayV6)
		r6 := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}, Gw: gw6.AsSlice()}
		if err := h.RouteReplace(r6); err != nil {
			return fmt.Errorf("address primary %s: default via %s: %w", mac, gw6, err)
		}
		return nil
	})
}

// AnswerGatewayV6 makes the vpc end of a plugged ENI (by MAC) hold gw,
// the vSwitch's IPv6 gateway as the metadata item ipv6-gateway names it,
// as a /128: the vpc then answers neighbour solicitations for it, as the
// VPC's router does, and an ENI table's "default via <gw> onlink"
// resolves. (GatewayV6, the link-local one, it holds from the plug.)
func (tp *Topology) AnswerGatewayV6(mac string, gw netip.Addr) error {
	if !gw.Is6() || gw.Is4In6() {
		return fmt.Errorf("answer gateway %v for %s: not an IPv6 address", gw, mac)
	}
	p, err := tp.plugOf(mac)
	if err != nil {
		return err
	}
	return withHandle(tp.VPCNS, func(h *netlink.Handle) error {
		l, err := h.LinkByName(p.vpcName)
		if err != nil {
			return fmt.Errorf("answer gateway %s for %s: %w", gw, mac, err)
		}
		if err := h.AddrReplace(l, hostAddrV6(gw)); err != nil {
			return fmt.Errorf("answer gateway %s for %s: %w", gw, mac, err)
		}
		return nil
	})
}

// AddNodeLoopback adds an address (a /32 or /128) to the first node
// namespace's lo: an address the node itself answers on, such as a
// Service address a kube-proxy would otherwise translate.
func (tp *Topology) AddNodeLoopback(ip netip.Addr) error {
	return addLoopback(tp.NodeNS, ip)
}

// AddVPCLoopback adds an address to the vpc namespace's lo: a service of
// the VPC itself, such as the metadata address 100.100.100.200, which
// every node reaches through its primary interface's default route.
func (tp *Topology) AddVPCLoopback(ip netip.Addr) error {
	return addLoopback(tp.VPCNS, ip)
}

func addLoopback(ns string, ip netip.Addr) error {
	return withHandle(ns, func(h *netlink.Handle) error {
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		a := &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(ip.BitLen(), ip.BitLen())}}
		if err := h.AddrAdd(lo, a); err != nil {
			return fmt.Errorf("add %s to lo in %s: %w", ip, ns, err)
		}
		return nil
	})
}

// plugOf returns the plug of a MAC.
func (tp *Topology) plugOf(mac string) (*plug, error) {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return nil, err
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	p := tp.plugs[hw.String()]
	if p == nil {
		return nil, fmt.Errorf("eni %s is not plugged", mac)
	}
	return p, nil
}

// NodeName returns the node-side device name of a plugged ENI.
func (tp *Topology) NodeName(mac string) (string, error) {
	p, err := tp.plugOf(mac)
	if err != nil {
		return "", err
	}
	return p.nodeName, nil
}

// RouteIPs makes the vpc route more addresses to a plugged ENI (IPs
// assigned after the attach).
func (tp *Topology) RouteIPs(mac string, ips ...netip.Addr) error {
	p, err := tp.plugOf(mac)
	if err != nil {
		return fmt.Errorf("route ips: %w", err)
	}
	return withHandle(tp.VPCNS, func(h *netlink.Handle) error {
		l, err := h.LinkByName(p.vpcName)
		if err != nil {
			return fmt.Errorf("route ips to %s: %w", mac, err)
		}
		return tp.routeIPs(h, l, p.mac, ips)
	})
}

// UnrouteIPs removes the vpc's routes and neighbours for the addresses;
// ones already gone are fine.
func (tp *Topology) UnrouteIPs(mac string, ips ...netip.Addr) error {
	p, err := tp.plugOf(mac)
	if err != nil {
		return fmt.Errorf("unroute ips: %w", err)
	}
	return withHandle(tp.VPCNS, func(h *netlink.Handle) error {
		l, err := h.LinkByName(p.vpcName)
		if err != nil {
			return fmt.Errorf("unroute ips from %s: %w", mac, err)
		}
		for _, ip := range ips {
			if !ip.IsValid() {
				continue
			}
			r, fam := hostRoute(l, ip)
			if err := h.RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("unroute %s: %w", ip, err)
			}
			n := &netlink.Neigh{LinkIndex: l.Attrs().Index, Family: fam, IP: ip.AsSlice()}
			if err := h.NeighDel(n); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("remove neighbour %s: %w", ip, err)
			}
			if ip.Is6() {
				if err := tp.ndp.delAddr(h, ip); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// UnplugENI detaches a plugged ENI: its veth is deleted wherever its node
// end is (node or a pod namespace). Unplugging an unknown MAC is an error.
func (tp *Topology) UnplugENI(mac string) error {
	p, err := tp.plugOf(mac)
	if err != nil {
		return fmt.Errorf("unplug eni: %w", err)
	}
	err = withHandle(tp.VPCNS, func(h *netlink.Handle) error {
		l, err := h.LinkByName(p.vpcName)
		if err != nil {
			var nf netlink.LinkNotFoundError
			if errors.As(err, &nf) {
				return nil
			}
			return err
		}
		if err := tp.ndp.delDev(h, p.vpcName); err != nil {
			return err
		}
		return h.LinkDel(l)
	})
	if err != nil {
		return fmt.Errorf("unplug eni %s: %w", mac, err)
	}
	tp.mu.Lock()
	delete(tp.plugs, p.mac.String())
	tp.mu.Unlock()
	return nil
}

// hostAddrV6 is an IPv6 address as a /128, usable at once (no DAD).
func hostAddrV6(a netip.Addr) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(128, 128)}, Flags: unix.IFA_F_NODAD}
}

// hostRoute is the link-scope route of one address to l, and the address's
// family.
func hostRoute(l netlink.Link, ip netip.Addr) (*netlink.Route, int) {
	fam := unix.AF_INET
	if ip.Is6() {
		fam = unix.AF_INET6
	}
	return &netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(ip.BitLen(), ip.BitLen())}, Scope: netlink.SCOPE_LINK}, fam
}
