package cloud

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/requests"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
)

// This file holds the calls that look beyond one node's instance, for the
// cluster-level sweep of ENIs that dead nodes left behind (`enid sweep`).

// maxInstanceIDs is how many InstanceIds one DescribeInstances takes.
const maxInstanceIDs = 100

// InstanceStatuses returns the Status ECS reports (Running, Stopped,
// Starting, Stopping, Pending) of each of ids that exists; an instance
// that is not in the answer does not exist (released). Any failure fails
// the whole call: a caller that decides on the absence of an instance must
// never decide on a partial answer.
func (c *Client) InstanceStatuses(ctx context.Context, ids []string) (map[string]string, error) {
	out := map[string]string{}
	for chunk := range slices.Chunk(slices.Compact(slices.Sorted(slices.Values(ids))), maxInstanceIDs) {
		raw, err := json.Marshal(chunk)
		if err != nil {
			return nil, fmt.Errorf("describe instances: %w", err)
		}
		token := ""
		for page := 1; ; page++ {
			req := ecs.CreateDescribeInstancesRequest()
			req.InstanceIds = string(raw)
			req.MaxResults = requests.NewInteger(maxInstanceIDs)
			req.NextToken = token
			resp := ecs.CreateDescribeInstancesResponse()
			if err := c.call(ctx, req, resp); err != nil {
				return nil, fmt.Errorf("describe instances (page %d): %w", page, err)
			}
			for _, in := range resp.Instances.Instance {
				if slices.Contains(chunk, in.InstanceId) {
					out[in.InstanceId] = in.Status
				}
			}
			if resp.NextToken == "" {
				break
			}
			if resp.NextToken == token {
				return nil, fmt.Errorf("describe instances: page %d returned its own NextToken %q again", page, token)
			}
			token = resp.NextToken
		}
	}
	return out, nil
}
