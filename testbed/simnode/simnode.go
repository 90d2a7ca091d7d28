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
	"net/netip"
	"sort"
	"strings"

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
	Logger       *slog.Logger
}

// Node is a running simulated node.
type Node struct {
	Sim      *ecssim.Server
	Instance ecssim.InstanceInfo
	// Topology is nil without a datapath.
	Topology *simvpc.Topology
	log      *slog.Logger
	hookErrs chan error
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
	n := &Node{Sim: sim, log: o.Logger}
	if o.Datapath {
		tp, err := simvpc.New(o.Name)
		if err != nil {
			sim.Close()
			return nil, fmt.Errorf("build the node's namespaces: %w", err)
		}
		n.Topology = tp
		sim.SetHooks(ecssim.Hooks{OnAttach: n.onAttach, OnDetach: n.onDetach, OnAssign: n.onAssign, OnUnassign: n.onUnassign})
	}
	inst, err := sim.AddInstance(ecssim.InstanceSpec{InstanceType: o.InstanceType, VSwitchID: o.VSwitchID})
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("add instance: %w", err)
	}
	n.Instance = inst
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
	if !o.ListenInNode || n.Topology == nil {
		return n.Sim.Start(o.ECSAddr, o.MetadataAddr)
	}
	ev, ok := n.Sim.Event(n.Instance.PrimaryENI)
	if !ok {
		return fmt.Errorf("the primary ENI %s of %s is not in the simulator", n.Instance.PrimaryENI, n.Instance.ID)
	}
	if err := n.Topology.PlugENI(ev.MAC, ev.PrimaryIP, ev.CIDR, ev.Gateway, ev.IPv4...); err != nil {
		return err
	}
	if err := n.Topology.AddressPrimary(ev.MAC, ev.PrimaryIP, ev.CIDR, ev.Gateway); err != nil {
		return err
	}
	return simvpc.InNS(n.Topology.NodeNS, func() error { return n.Sim.Start(o.ECSAddr, o.MetadataAddr) })
}

func (n *Node) logHook(what string, ev ecssim.ENIEvent, err error) {
	if err != nil {
		n.log.Error("simulated node: "+what, "eni", ev.ENIID, "mac", ev.MAC, "err", err)
	}
}

func (n *Node) onAttach(ev ecssim.ENIEvent) {
	ips := append(append([]netip.Addr{}, ev.IPv4...), ev.IPv6...)
	n.logHook("plug eni", ev, n.Topology.PlugENI(ev.MAC, ev.PrimaryIP, ev.CIDR, ev.Gateway, ips...))
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
// simulator as this node (what `enid sim` prints).
func (n *Node) Env() map[string]string {
	return map[string]string{
		"ENID_ECS_ENDPOINT":               n.Sim.Endpoint(),
		"ENID_METADATA_ENDPOINT":          n.Sim.MetadataURL(n.Instance.ID),
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
