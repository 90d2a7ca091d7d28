package reconcile

import (
	"context"
	"net/netip"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/observed"
)

// This file declares what the loop needs of the cloud client and of the
// datapath (the consumer declares the interface).

// Cloud is what the agent needs of the ECS/VPC API; *cloud.Client
// implements it.
type Cloud interface {
	Instance(ctx context.Context, instanceID string) (observed.Instance, error)
	ListENIs(ctx context.Context, f cloud.ENIFilter) ([]observed.ENI, error)
	VSwitches(ctx context.Context, ids []string) ([]observed.VSwitch, error)
	SelectVSwitches(ctx context.Context, vpcID, zoneID string, tags map[string]string) ([]observed.VSwitch, error)
	CreateENI(ctx context.Context, r cloud.CreateENIRequest) (observed.ENI, error)
	AttachENI(ctx context.Context, eniID, instanceID string) error
	DetachENI(ctx context.Context, eniID, instanceID string) error
	DeleteENI(ctx context.Context, eniID string) error
	WaitENI(ctx context.Context, eniID string, want observed.ENIStatus) (observed.ENI, error)
	AssignIPv4(ctx context.Context, eniID string, count int, ips []netip.Addr, clientToken string) ([]netip.Addr, error)
	UnassignIPv4(ctx context.Context, eniID string, ips []netip.Addr) error
	AssignIPv6(ctx context.Context, eniID string, count int, ips []netip.Addr, clientToken string) ([]netip.Addr, error)
	UnassignIPv6(ctx context.Context, eniID string, ips []netip.Addr) error
	AssignIPv4Prefixes(ctx context.Context, eniID string, count int, clientToken string) ([]netip.Prefix, error)
	UnassignIPv4Prefixes(ctx context.Context, eniID string, prefixes []netip.Prefix) error
	SetENISecurityGroups(ctx context.Context, eniID string, groups []string) error
}

// Datapath is what the agent needs of the node's kernel; *linux.Datapath
// implements it, and so does the in-memory NoDatapath used where there is
// no datapath (no root, or a simulated fleet).
type Datapath interface {
	Observe(ctx context.Context) (observed.Node, error)
	EnsureENI(ctx context.Context, s linux.ENISpec) (linux.Changes, error)
	RemoveENI(ctx context.Context, mac string, table int) (linux.Changes, error)
	EnsurePod(ctx context.Context, s linux.PodSpec) (linux.PodResult, linux.Changes, error)
	TeardownPod(ctx context.Context, key observed.AttachmentKey, netns string, addrs ...netip.Addr) (linux.Changes, error)
	EnsureExclusive(ctx context.Context, s linux.ExclusiveSpec) (linux.PodResult, linux.Changes, error)
	TeardownExclusive(ctx context.Context, key observed.AttachmentKey, netns, mac string) (linux.Changes, error)
}
