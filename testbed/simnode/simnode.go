// Package simnode stands up a simulated node for trying and measuring
// enid: the ECS simulator with one instance, and, when asked for a
// datapath, a pair of network namespaces where the simulator's attach hook
// plugs a veth carrying each attached ENI's MAC into the "node" namespace
// and routes the ENI's addresses from the "vpc" one. `enid run --sim`,
// `enid demo`, the end-to-end tests and the benchmarks use it.
package simnode

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/testbed/simvpc"
)

// Options configure a simulated node.
type Options struct {
	// Sim is the simulator's config (zero: its defaults).
	Sim ecssim.Config
	// InstanceType of the node (default ecssim.DefaultInstanceType).
	InstanceType string
	// VSwitchID is the vSwitch of the node's primary ENI (default: the
	// simulator's first).
	VSwitchID string
	// Datapath, when true, builds the namespaces and plugs ENIs (root).
	Datapath bool
	// Name prefixes the namespaces (default "enid").
	Name string
	// ECSAddr and MetadataAddr are listen addresses (default 127.0.0.1:0).
	ECSAddr, MetadataAddr string
	// ListenInNode, with a datapath, opens the simulator's listeners in the
	// node namespace, where processes of the node (a kubelet's pods on the
	// host network) reach them at ECSAddr and MetadataAddr, as a real
	// node reaches its region's endpoints; the host cannot. It also gives
	// the node's primary interface its address and default route, as the
	// node's DHCP client would (enid never touches the primary ENI).
	ListenInNode bool
	// ListenInVPC, with a datapath, opens the simulator's listeners in the
	// vpc namespace instead, at the VPC's own service addresses: the
	// metadata service at MetadataIP:80 and the ECS API at ECSIP:80, where
	// every node of the VPC (AddPeer) reaches them through its primary
	// interface, and the metadata service tells the nodes apart by their
	// source address. The primary interfaces are addressed as with
	// ListenInNode.
	ListenInVPC bool
	// PrimaryIPv6 gives the instance's primary ENI an IPv6 address (the
	// vSwitch needs an IPv6 CIDR) and, where the primary interface is
	// addressed (ListenInNode, ListenInVPC, AddPeer), that address and an
	// IPv6 default route: a dual-stack node.
	PrimaryIPv6 bool
	Logger      *slog.Logger
}

// The VPC's service addresses with ListenInVPC: the metadata service's
// well-known address, and the address the region's VPC endpoint of the
// ECS API resolves to inside the VPC (an address of the same
// 100.64.0.0/10 range; the real one varies by region).
const (
	MetadataIP = "100.100.100.200"
	ECSIP      = "100.100.80.10"
)

// Node is a running simulated node.
type Node struct {
	Sim      *ecssim.Server
	Instance ecssim.InstanceInfo
	// Topology is nil without a datapath.
	Topology *simvpc.Topology
	log      *slog.Logger
	hookErrs chan error
	// inVPC: the simulator listens at the VPC's service addresses.
	inVPC bool

	mu sync.Mutex // guards nodeNS
	// nodeNS maps an instance to its node namespace (the first instance
	// to Topology.NodeNS, peers to theirs).
	nodeNS map[string]string
}

// Peer is another instance of the simulated VPC with a node namespace of
// its own (AddPeer): a second node of a cluster.
type Peer struct {
	Instance ecssim.InstanceInfo
	// NS is the path of the namespace playing it.
	NS string
}

// Start starts the simulator (and the namespaces).
func Start(o Options) (*Node, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ECSAddr == "" {
		o.ECSAddr = "127.0.0.1:0"
	}
	if o.MetadataAddr == "" {
		o.MetadataAddr = "127.0.0.1:0"
	}
	if o.Name == "" {
		o.Name = "enid"
	}
	sim, err := ecssim.New(o.Sim)
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	n := &Node{Sim: sim, log: o.Logger, nodeNS: map[string]string{}}
	if o.Datapath {
		tp, err := simvpc.New(o.Name)
		if err != nil {
			sim.Close()
			return nil, fmt.Errorf("build the node's namespaces: %w", err)
		}
		n.Topology = tp
		sim.SetHooks(ecssim.Hooks{OnAttach: n.onAttach, OnDetach: n.onDetach, OnAssign: n.onAssign, OnUnassign: n.onUnassign})
	}
	inst, err := sim.AddInstance(ecssim.InstanceSpec{InstanceType: o.InstanceType, VSwitchID: o.VSwitchID, IPv6Count: ipv6Count(o.PrimaryIPv6)})
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("add instance: %w", err)
	}
	n.Instance = inst
	if n.Topology != nil {
		n.mu.Lock()
		n.nodeNS[inst.ID] = n.Topology.NodeNS
		n.mu.Unlock()
	}
	if err := n.startSim(o); err != nil {
		n.Close()
		return nil, fmt.Errorf("start simulator: %w", err)
	}
	return n, nil
}

// startSim opens the simulator's listeners: here, or, with ListenInNode,
// in the node namespace once the primary ENI is plugged and addressed
// there (it is attached at creation: no hook plugs it).
func (n *Node) startSim(o Options) error {
	if (!o.ListenInNode && !o.ListenInVPC) || n.Topology == nil {
		return n.Sim.Start(o.ECSAddr, o.MetadataAddr)
	}
	if err := n.plugPrimary(n.Instance, n.Topology.NodeNS); err != nil {
		return err
	}
	if o.ListenInNode {
		return simvpc.InNS(n.Topology.NodeNS, func() error { return n.Sim.Start(o.ECSAddr, o.MetadataAddr) })
	}
	n.inVPC = true
	for _, ip := range []string{MetadataIP, ECSIP} {
		if err := n.Topology.AddVPCLoopback(netip.MustParseAddr(ip)); err != nil {
			return err
		}
	}
	return simvpc.InNS(n.Topology.VPCNS, func() error {
		return n.Sim.Start(net.JoinHostPort(ECSIP, "80"), net.JoinHostPort(MetadataIP, "80"))
	})
}

// plugPrimary plugs an instance's primary ENI (attached at creation: no
// hook plugs it) into its node namespace and addresses it there, with the
// default route, as the node's DHCP client would.
func (n *Node) plugPrimary(inst ecssim.InstanceInfo, ns string) error {
	ev, ok := n.Sim.Event(inst.PrimaryENI)
	if !ok {
		return fmt.Errorf("the primary ENI %s of %s is not in the simulator", inst.PrimaryENI, inst.ID)
	}
	if err := n.plug(ns, ev); err != nil {
		return err
	}
	return n.Topology.AddressPrimary(ev.MAC, ev.PrimaryIP, ev.CIDR, ev.Gateway, ev.IPv6...)
}

// plug plugs an ENI into a node namespace: its addresses routed to it in
// the vpc, and on a vSwitch with IPv6 its IPv6 gateway answered.
func (n *Node) plug(ns string, ev ecssim.ENIEvent) error {
	if err := n.Topology.PlugENIInto(ns, ev.MAC, ev.PrimaryIP, ev.CIDR, ev.Gateway, append(slices.Clone(ev.IPv4), ev.IPv6...)...); err != nil {
		return err
	}
	if ev.GatewayV6.IsValid() {
		return n.Topology.AnswerGatewayV6(ev.MAC, ev.GatewayV6)
	}
	return nil
}

// ipv6Count is the primary ENI's IPv6 count for Options.PrimaryIPv6.
func ipv6Count(primaryIPv6 bool) int {
	if primaryIPv6 {
		return 1
	}
	return 0
}

// AddPeer adds another instance to the simulated VPC, with a node
// namespace of its own, its primary interface addressed there: the next
// node of a cluster (with an IPv6 address too when primaryIPv6). Its
// ENIs are plugged into its namespace. It needs a datapath.
func (n *Node) AddPeer(instanceType, vswitchID string, primaryIPv6 bool) (Peer, error) {
	if n.Topology == nil {
		return Peer{}, errors.New("add peer: the simulated node has no datapath")
	}
	ns, err := n.Topology.AddNode()
	if err != nil {
		return Peer{}, fmt.Errorf("add peer: %w", err)
	}
	inst, err := n.Sim.AddInstance(ecssim.InstanceSpec{InstanceType: instanceType, VSwitchID: vswitchID, IPv6Count: ipv6Count(primaryIPv6)})
	if err != nil {
		return Peer{}, fmt.Errorf("add peer: %w", err)
	}
	n.mu.Lock()
	n.nodeNS[inst.ID] = ns
	n.mu.Unlock()
	if err := n.plugPrimary(inst, ns); err != nil {
		return Peer{}, fmt.Errorf("add peer: %w", err)
	}
	return Peer{Instance: inst, NS: ns}, nil
}

// nsOf is the node namespace of an instance's ENIs.
func (n *Node) nsOf(instanceID string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ns, ok := n.nodeNS[instanceID]; ok {
		return ns
	}
	return n.Topology.NodeNS
}

func (n *Node) logHook(what string, ev ecssim.ENIEvent, err error) {
	if err != nil {
		n.log.Error("simulated node: "+what, "eni", ev.ENIID, "mac", ev.MAC, "err", err)
	}
}

func (n *Node) onAttach(ev ecssim.ENIEvent) {
	n.logHook("plug eni", ev, n.plug(n.nsOf(ev.InstanceID), ev))
}

func (n *Node) onDetach(ev ecssim.ENIEvent) {
	n.logHook("unplug eni", ev, n.Topology.UnplugENI(ev.MAC))
}

func (n *Node) onAssign(ev ecssim.ENIEvent) {
	n.logHook("route ips", ev, n.Topology.RouteIPs(ev.MAC, append(append([]netip.Addr{}, ev.IPv4...), ev.IPv6...)...))
}

func (n *Node) onUnassign(ev ecssim.ENIEvent) {
	n.logHook("unroute ips", ev, n.Topology.UnrouteIPs(ev.MAC, append(append([]netip.Addr{}, ev.IPv4...), ev.IPv6...)...))
}

// Env returns the variables a separate process uses to reach the
// simulator as this node (what `enid sim` prints). With ListenInVPC the
// metadata endpoint is the bare well-known address, which answers every
// node about itself.
func (n *Node) Env() map[string]string {
	md := n.Sim.MetadataURL(n.Instance.ID)
	if n.inVPC {
		md = "http://" + MetadataIP
	}
	return map[string]string{
		"ENID_ECS_ENDPOINT":               n.Sim.Endpoint(),
		"ENID_METADATA_ENDPOINT":          md,
		"ALIBABA_CLOUD_ACCESS_KEY_ID":     ecssim.DefaultAccessKeyID,
		"ALIBABA_CLOUD_ACCESS_KEY_SECRET": ecssim.DefaultAccessKeySecret,
		"ALIBABA_CLOUD_REGION_ID":         n.Sim.Dump().Region,
	}
}

// ConfigYAML returns an agent config that fits the simulator: the
// instance's zone with its vSwitches and the default security group, in
// shared-ENI mode with the default pool.
func (n *Node) ConfigYAML() string {
	st := n.Sim.Dump()
	var b strings.Builder
	b.WriteString("apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\nmode: shared-eni\neni:\n  vSwitches:\n")
	zones := map[string][]string{}
	for _, v := range st.VSwitches {
		zones[v.ZoneID] = append(zones[v.ZoneID], v.ID)
	}
	var names []string
	for z := range zones {
		names = append(names, z)
	}
	sort.Strings(names)
	for _, z := range names {
		fmt.Fprintf(&b, "    %s: [%s]\n", z, strings.Join(zones[z], ", "))
	}
	fmt.Fprintf(&b, "  securityGroups: [%s]\n", ecssim.DefaultSecurityGroup)
	return b.String()
}

// NodeNS is the path of the namespace playing the node ("" without a
// datapath).
func (n *Node) NodeNS() string {
	if n.Topology == nil {
		return ""
	}
	return n.Topology.NodeNS
}

// Close stops the simulator and removes the namespaces.
func (n *Node) Close() error {
	var errs []error
	if n.Sim != nil {
		errs = append(errs, n.Sim.Close())
	}
	if n.Topology != nil {
		errs = append(errs, n.Topology.Close())
	}
	return errors.Join(errs...)
}
