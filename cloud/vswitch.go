package cloud

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/requests"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/vpc"

	"github.com/enidnet/enid/observed"
)

// vswitchPageSize is DescribeVSwitches' largest PageSize (VPC API: 1..50).
const vswitchPageSize = 50

// SelectVSwitches describes the vSwitches of vpcID ("" any) in zoneID
// ("" any) that carry every one of tags (DescribeVSwitches' Tag.N, at
// most 20; a value "" matches any value of its key), all pages read,
// sorted by ID.
func (c *Client) SelectVSwitches(ctx context.Context, vpcID, zoneID string, tags map[string]string) ([]observed.VSwitch, error) {
	if len(tags) == 0 || len(tags) > maxTagsPerDescribe {
		return nil, fmt.Errorf("select vswitches: %d tags, want 1 to %d: %w", len(tags), maxTagsPerDescribe, ErrInvalidRequest)
	}
	filter := make([]vpc.DescribeVSwitchesTag, 0, len(tags))
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		filter = append(filter, vpc.DescribeVSwitchesTag{Key: k, Value: tags[k]})
	}
	var out []observed.VSwitch
	for page := 1; ; page++ {
		req := vpc.CreateDescribeVSwitchesRequest()
		req.VpcId, req.ZoneId = vpcID, zoneID
		req.Tag = &filter
		req.PageNumber = requests.NewInteger(page)
		req.PageSize = requests.NewInteger(vswitchPageSize)
		resp := vpc.CreateDescribeVSwitchesResponse()
		if err := c.call(ctx, req, resp); err != nil {
			return nil, fmt.Errorf("select vswitches (page %d): %w", page, err)
		}
		for _, v := range resp.VSwitches.VSwitch {
			o, err := vswitchFrom(v)
			if err != nil {
				return nil, fmt.Errorf("select vswitches: %s: %w", v.VSwitchId, err)
			}
			out = append(out, o)
		}
		if len(resp.VSwitches.VSwitch) < vswitchPageSize || page*vswitchPageSize >= resp.TotalCount {
			break
		}
	}
	slices.SortFunc(out, func(a, b observed.VSwitch) int { return cmp.Compare(a.ID, b.ID) })
	return slices.CompactFunc(out, func(a, b observed.VSwitch) bool { return a.ID == b.ID }), nil
}
