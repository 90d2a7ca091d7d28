package ecssim

import "sort"

// This file holds the instance types the simulator knows and their ENI and
// address limits.

// InstanceType holds the figures of an instance type that ENI management
// depends on, as DescribeInstanceTypes reports them.
type InstanceType struct {
	ID             string
	Family         string
	CPUCores       int
	MemoryGiB      float64
	ENIs           int  // EniQuantity, primary ENI included
	IPv4PerENI     int  // EniPrivateIpAddressQuantity, primary IP included
	IPv6PerENI     int  // EniIpv6AddressQuantity
	ENITotal       int  // EniTotalQuantity (trunk member ENIs included)
	TrunkSupported bool // EniTrunkSupported
}

// instanceTypes is the table the simulator knows. EniQuantity,
// EniPrivateIpAddressQuantity and EniIpv6AddressQuantity are the published
// limits as given in the project's reference (ecs.u1-c1m4.xlarge is
// Alibaba's DescribeInstanceTypes example). EniTotalQuantity of the g7
// types, CPU and memory were not checked against the live API: nothing in
// enid depends on them.
func instanceTypes() map[string]InstanceType {
	ts := []InstanceType{
		{ID: "ecs.g7.large", Family: "ecs.g7", CPUCores: 2, MemoryGiB: 8, ENIs: 3, IPv4PerENI: 6, IPv6PerENI: 6, ENITotal: 6, TrunkSupported: true},
		{ID: "ecs.g7.xlarge", Family: "ecs.g7", CPUCores: 4, MemoryGiB: 16, ENIs: 4, IPv4PerENI: 15, IPv6PerENI: 15, ENITotal: 12, TrunkSupported: true},
		{ID: "ecs.g7.2xlarge", Family: "ecs.g7", CPUCores: 8, MemoryGiB: 32, ENIs: 4, IPv4PerENI: 15, IPv6PerENI: 15, ENITotal: 25, TrunkSupported: true},
		{ID: "ecs.g7.4xlarge", Family: "ecs.g7", CPUCores: 16, MemoryGiB: 64, ENIs: 8, IPv4PerENI: 30, IPv6PerENI: 30, ENITotal: 50, TrunkSupported: true},
		// A fictional dense type (7 x 49 = 343 pod IPs) for the benchmark
		// harness, which holds 250 pods on one node; no real type is claimed.
		{ID: "ecs.sim.dense", Family: "ecs.sim", CPUCores: 64, MemoryGiB: 256, ENIs: 8, IPv4PerENI: 50, IPv6PerENI: 50, ENITotal: 64, TrunkSupported: true},
		{ID: "ecs.u1-c1m4.xlarge", Family: "ecs.u1", CPUCores: 4, MemoryGiB: 16, ENIs: 3, IPv4PerENI: 10, IPv6PerENI: 1, ENITotal: 6, TrunkSupported: true},
	}
	m := make(map[string]InstanceType, len(ts))
	for _, t := range ts {
		m[t.ID] = t
	}
	return m
}

// InstanceTypes returns the instance types the simulator knows, sorted by ID.
func InstanceTypes() []InstanceType {
	m := instanceTypes()
	out := make([]InstanceType, 0, len(m))
	for _, t := range m {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
