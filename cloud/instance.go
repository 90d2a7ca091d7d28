package cloud

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/requests"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/vpc"

	"github.com/enidnet/enid/observed"
)

// Instance describes instanceID: region, zone, type, VPC, primary ENI and
// the ENI limits of its type. The limits come from DescribeInstanceTypes
// once per type for the life of the Client. A missing instance is
// ErrNotFound.
func (c *Client) Instance(ctx context.Context, instanceID string) (observed.Instance, error) {
	ids, err := json.Marshal([]string{instanceID})
	if err != nil {
		return observed.Instance{}, fmt.Errorf("describe instance %s: %w", instanceID, err)
	}
	req := ecs.CreateDescribeInstancesRequest()
	req.InstanceIds = string(ids)
	resp := ecs.CreateDescribeInstancesResponse()
	if err := c.call(ctx, req, resp); err != nil {
		return observed.Instance{}, fmt.Errorf("describe instance %s: %w", instanceID, err)
	}
	i := slices.IndexFunc(resp.Instances.Instance, func(in ecs.Instance) bool { return in.InstanceId == instanceID })
	if i < 0 {
		return observed.Instance{}, fmt.Errorf("describe instance %s: %w", instanceID, ErrNotFound)
	}
	in := resp.Instances.Instance[i]
	out := observed.Instance{
		ID:           in.InstanceId,
		RegionID:     cmp.Or(in.RegionId, c.cfg.Region),
		ZoneID:       in.ZoneId,
		InstanceType: in.InstanceType,
		VPCID:        in.VpcAttributes.VpcId,
	}
	for _, n := range in.NetworkInterfaces.NetworkInterface {
		if n.Type == observed.ENITypePrimary {
			out.PrimaryENI = n.NetworkInterfaceId
		}
	}
	if out.PrimaryENI == "" {
		// Older answers carry no Type: ask ECS which ENI is the primary.
		primary, err := c.listPrimary(ctx, instanceID)
		if err != nil {
			return observed.Instance{}, err
		}
		out.PrimaryENI = primary
	}
	out.Limits, err = c.Limits(ctx, in.InstanceType)
	if err != nil {
		return observed.Instance{}, fmt.Errorf("describe instance %s: %w", instanceID, err)
	}
	return out, nil
}

func (c *Client) listPrimary(ctx context.Context, instanceID string) (string, error) {
	enis, err := c.ListENIs(ctx, ENIFilter{InstanceID: instanceID})
	if err != nil {
		return "", fmt.Errorf("find primary eni of %s: %w", instanceID, err)
	}
	for _, e := range enis {
		if e.Type == observed.ENITypePrimary {
			return e.ID, nil
		}
	}
	return "", fmt.Errorf("find primary eni of %s: %w", instanceID, ErrNotFound)
}

// Limits returns the ENI limits of an instance type (DescribeInstanceTypes,
// cached for the life of the Client). An unknown type is ErrNotFound.
func (c *Client) Limits(ctx context.Context, instanceType string) (observed.Limits, error) {
	c.typesMu.Lock()
	l, ok := c.types[instanceType]
	c.typesMu.Unlock()
	if ok {
		return l, nil
	}
	req := ecs.CreateDescribeInstanceTypesRequest()
	req.InstanceTypes = &[]string{instanceType}
	resp := ecs.CreateDescribeInstanceTypesResponse()
	if err := c.call(ctx, req, resp); err != nil {
		return observed.Limits{}, fmt.Errorf("describe instance type %s: %w", instanceType, err)
	}
	i := slices.IndexFunc(resp.InstanceTypes.InstanceType, func(t ecs.InstanceType) bool {
		return cmp.Or(t.InstanceTypeId, t.InstanceType) == instanceType
	})
	if i < 0 {
		return observed.Limits{}, fmt.Errorf("describe instance type %s: %w", instanceType, ErrNotFound)
	}
	t := resp.InstanceTypes.InstanceType[i]
	l = observed.Limits{ENIs: t.EniQuantity, IPv4PerENI: t.EniPrivateIpAddressQuantity, IPv6PerENI: t.EniIpv6AddressQuantity}
	c.typesMu.Lock()
	c.types[instanceType] = l
	c.typesMu.Unlock()
	return l, nil
}

// VSwitches describes the vSwitches ids (one DescribeVSwitches call each:
// the API filters by a single VSwitchId), sorted by ID. Every vSwitch found
// is returned; when some do not exist the error wraps ErrNotFound and names
// them.
func (c *Client) VSwitches(ctx context.Context, ids []string) ([]observed.VSwitch, error) {
	var out []observed.VSwitch
	var missing []string
	for _, id := range slices.Compact(slices.Sorted(slices.Values(ids))) {
		req := vpc.CreateDescribeVSwitchesRequest()
		req.VSwitchId = id
		req.PageSize = requests.NewInteger(10)
		resp := vpc.CreateDescribeVSwitchesResponse()
		if err := c.call(ctx, req, resp); err != nil {
			if errors.Is(err, ErrNotFound) {
				missing = append(missing, id)
				continue
			}
			return out, fmt.Errorf("describe vswitch %s: %w", id, err)
		}
		i := slices.IndexFunc(resp.VSwitches.VSwitch, func(v vpc.VSwitch) bool { return v.VSwitchId == id })
		if i < 0 {
			missing = append(missing, id)
			continue
		}
		v, err := vswitchFrom(resp.VSwitches.VSwitch[i])
		if err != nil {
			return out, fmt.Errorf("describe vswitch %s: %w", id, err)
		}
		out = append(out, v)
	}
	if len(missing) > 0 {
		return out, fmt.Errorf("describe vswitches %v: %w", missing, ErrNotFound)
	}
	return out, nil
}

func vswitchFrom(v vpc.VSwitch) (observed.VSwitch, error) {
	out := observed.VSwitch{ID: v.VSwitchId, ZoneID: v.ZoneId, VPCID: v.VpcId, AvailableIPs: int(v.AvailableIpAddressCount)}
	var err error
	if out.CIDR, err = netip.ParsePrefix(v.CidrBlock); err != nil {
		return out, fmt.Errorf("cidr: %w", err)
	}
	if v.Ipv6CidrBlock != "" {
		if out.IPv6CIDR, err = netip.ParsePrefix(v.Ipv6CidrBlock); err != nil {
			return out, fmt.Errorf("ipv6 cidr: %w", err)
		}
	}
	return out, nil
}
