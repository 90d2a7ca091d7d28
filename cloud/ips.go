package cloud

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/requests"
	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/responses"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
)

// maxIPsPerCall is the most addresses one Assign/Unassign call moves: ECS
// takes 1..10 per call for both IPv4 and IPv6.
const maxIPsPerCall = 10

// AssignIPv4 adds secondary private IPv4 addresses to eniID: count new
// ones chosen by ECS, or exactly ips (give one or the other). It returns
// the addresses assigned, sorted. Requests above 10 addresses are split
// into calls of at most 10; each call after the first gets a ClientToken
// derived from clientToken and its index, so a repeat of the whole request
// repeats every call. When a later call fails, the addresses the earlier
// calls assigned are returned along with the error. Without a ClientToken
// only throttled attempts are retried: an assign repeated after a lost
// answer would add addresses twice.
func (c *Client) AssignIPv4(ctx context.Context, eniID string, count int, ips []netip.Addr, clientToken string) ([]netip.Addr, error) {
	out, err := c.assign(ctx, eniID, count, ips, clientToken, func(ctx context.Context, n int, ips []string, token string) ([]string, error) {
		req := ecs.CreateAssignPrivateIpAddressesRequest()
		req.NetworkInterfaceId = eniID
		req.ClientToken = token
		if n > 0 {
			req.SecondaryPrivateIpAddressCount = requests.NewInteger(n)
		} else {
			req.PrivateIpAddress = &ips
		}
		resp := ecs.CreateAssignPrivateIpAddressesResponse()
		if err := c.callFor(token)(ctx, req, resp); err != nil {
			return nil, err
		}
		return resp.AssignedPrivateIpAddressesSet.PrivateIpSet.PrivateIpAddress, nil
	})
	if err != nil {
		return out, fmt.Errorf("assign ipv4 to eni %s: %w", eniID, err)
	}
	return out, nil
}

// AssignIPv6 adds IPv6 addresses to eniID, as AssignIPv4 does for IPv4.
func (c *Client) AssignIPv6(ctx context.Context, eniID string, count int, ips []netip.Addr, clientToken string) ([]netip.Addr, error) {
	out, err := c.assign(ctx, eniID, count, ips, clientToken, func(ctx context.Context, n int, ips []string, token string) ([]string, error) {
		req := ecs.CreateAssignIpv6AddressesRequest()
		req.NetworkInterfaceId = eniID
		req.ClientToken = token
		if n > 0 {
			req.Ipv6AddressCount = requests.NewInteger(n)
		} else {
			req.Ipv6Address = &ips
		}
		resp := ecs.CreateAssignIpv6AddressesResponse()
		if err := c.callFor(token)(ctx, req, resp); err != nil {
			return nil, err
		}
		return resp.Ipv6Sets.Ipv6Address, nil
	})
	if err != nil {
		return out, fmt.Errorf("assign ipv6 to eni %s: %w", eniID, err)
	}
	return out, nil
}

// maxPrefixesPerCall is the most IPv4 prefixes one Assign/Unassign call
// moves (Ipv4PrefixCount and Ipv4Prefix.N take 1..10).
const maxPrefixesPerCall = 10

// AssignIPv4Prefixes adds count /28 IPv4 prefixes chosen by ECS to eniID
// (Ipv4PrefixCount) and returns them, sorted. Each takes one of the ENI's
// private-address slots, as a secondary address does. Requests above 10
// are split into calls of at most 10, with ClientTokens derived as
// AssignIPv4 derives them; when a later call fails, the prefixes the
// earlier ones got are returned with the error. A vSwitch with no free
// aligned /28 answers InvalidVSwitchId.IpNotEnough, which is
// ErrVSwitchExhausted even when single addresses are still free there
// (fragmentation): for a prefix request, "exhausted" means "no /28". Without
// a ClientToken only throttled attempts are retried.
func (c *Client) AssignIPv4Prefixes(ctx context.Context, eniID string, count int, clientToken string) ([]netip.Prefix, error) {
	if count <= 0 {
		return nil, fmt.Errorf("assign ipv4 prefixes to eni %s: count %d", eniID, count)
	}
	var out []netip.Prefix
	for i := 0; count > 0; i++ {
		n := min(count, maxPrefixesPerCall)
		count -= n
		token := clientToken
		if i > 0 && token != "" {
			token = ClientToken(clientToken, "batch", strconv.Itoa(i))
		}
		req := ecs.CreateAssignPrivateIpAddressesRequest()
		req.NetworkInterfaceId = eniID
		req.ClientToken = token
		req.Ipv4PrefixCount = requests.NewInteger(n)
		resp := ecs.CreateAssignPrivateIpAddressesResponse()
		if err := c.callFor(token)(ctx, req, resp); err != nil {
			slices.SortFunc(out, netip.Prefix.Compare)
			return out, fmt.Errorf("assign %d ipv4 prefixes to eni %s: %w", n, eniID, err)
		}
		for _, s := range resp.AssignedPrivateIpAddressesSet.Ipv4PrefixSet.Ipv4Prefixes {
			q, err := parseIPv4Prefix(s)
			if err != nil {
				slices.SortFunc(out, netip.Prefix.Compare)
				return out, fmt.Errorf("assign ipv4 prefixes to eni %s: answer: %w", eniID, err)
			}
			out = append(out, q)
		}
	}
	slices.SortFunc(out, netip.Prefix.Compare)
	return out, nil
}

// UnassignIPv4Prefixes releases whole IPv4 prefixes of eniID (Ipv4Prefix.N),
// at most 10 per call. As UnassignIPv4 does for addresses, prefixes already
// gone (InvalidIp.IpUnassigned) and an ENI that is gone count as released.
func (c *Client) UnassignIPv4Prefixes(ctx context.Context, eniID string, prefixes []netip.Prefix) error {
	s := make([]string, len(prefixes))
	for i, q := range prefixes {
		s[i] = q.String()
	}
	err := c.unassignStrings(ctx, s, func(ctx context.Context, s []string) error {
		req := ecs.CreateUnassignPrivateIpAddressesRequest()
		req.NetworkInterfaceId = eniID
		req.Ipv4Prefix = &s
		return c.call(ctx, req, ecs.CreateUnassignPrivateIpAddressesResponse())
	})
	if err != nil {
		return fmt.Errorf("unassign ipv4 prefixes from eni %s: %w", eniID, err)
	}
	return nil
}

// callFor picks call or, without a ClientToken, callOnce.
func (c *Client) callFor(token string) func(context.Context, requests.AcsRequest, responses.AcsResponse) error {
	if token == "" {
		return c.callOnce
	}
	return c.call
}

type assignFunc func(ctx context.Context, count int, ips []string, token string) ([]string, error)

func (c *Client) assign(ctx context.Context, eniID string, count int, ips []netip.Addr, token string, do assignFunc) ([]netip.Addr, error) {
	switch {
	case count > 0 && len(ips) > 0:
		return nil, errors.New("both a count and explicit addresses given")
	case count <= 0 && len(ips) == 0:
		return nil, errors.New("neither a count nor explicit addresses given")
	}
	type batch struct {
		n   int
		ips []string
	}
	var batches []batch
	for ; count > 0; count -= maxIPsPerCall {
		batches = append(batches, batch{n: min(count, maxIPsPerCall)})
	}
	for chunk := range slices.Chunk(ips, maxIPsPerCall) {
		s := make([]string, len(chunk))
		for i, a := range chunk {
			s[i] = a.String()
		}
		batches = append(batches, batch{ips: s})
	}
	var out []netip.Addr
	for i, b := range batches {
		t := token
		if i > 0 && token != "" {
			t = ClientToken(token, "batch", strconv.Itoa(i))
		}
		got, err := do(ctx, b.n, b.ips, t)
		if err != nil {
			slices.SortFunc(out, netip.Addr.Compare)
			return out, err
		}
		for _, s := range got {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return out, fmt.Errorf("answer holds a bad address %q: %w", s, err)
			}
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// UnassignIPv4 removes secondary private IPv4 addresses from eniID, at most
// 10 per call. Addresses already gone (InvalidIp.IpUnassigned), and an ENI
// that is gone, count as removed: when a call of several addresses fails
// with IpUnassigned, its addresses are retried one by one so the others
// still go.
func (c *Client) UnassignIPv4(ctx context.Context, eniID string, ips []netip.Addr) error {
	err := c.unassign(ctx, ips, func(ctx context.Context, s []string) error {
		req := ecs.CreateUnassignPrivateIpAddressesRequest()
		req.NetworkInterfaceId = eniID
		req.PrivateIpAddress = &s
		return c.call(ctx, req, ecs.CreateUnassignPrivateIpAddressesResponse())
	})
	if err != nil {
		return fmt.Errorf("unassign ipv4 from eni %s: %w", eniID, err)
	}
	return nil
}

// UnassignIPv6 removes IPv6 addresses from eniID, as UnassignIPv4 does.
func (c *Client) UnassignIPv6(ctx context.Context, eniID string, ips []netip.Addr) error {
	err := c.unassign(ctx, ips, func(ctx context.Context, s []string) error {
		req := ecs.CreateUnassignIpv6AddressesRequest()
		req.NetworkInterfaceId = eniID
		req.Ipv6Address = &s
		return c.call(ctx, req, ecs.CreateUnassignIpv6AddressesResponse())
	})
	if err != nil {
		return fmt.Errorf("unassign ipv6 from eni %s: %w", eniID, err)
	}
	return nil
}

func (c *Client) unassign(ctx context.Context, ips []netip.Addr, do func(context.Context, []string) error) error {
	s := make([]string, len(ips))
	for i, a := range ips {
		s[i] = a.String()
	}
	return c.unassignStrings(ctx, s, do)
}

// unassignStrings sends items (addresses or prefixes) 10 per call; one
// that is gone already, or an ENI that is gone, counts as removed.
func (c *Client) unassignStrings(ctx context.Context, items []string, do func(context.Context, []string) error) error {
	for s := range slices.Chunk(items, maxIPsPerCall) {
		err := do(ctx, s)
		switch {
		case err == nil, isENINotFound(err):
			continue
		case !isIPUnassigned(err):
			return err
		case len(s) == 1:
			continue
		}
		for _, one := range s {
			if err := do(ctx, []string{one}); err != nil && !isIPUnassigned(err) && !isENINotFound(err) {
				return err
			}
		}
	}
	return nil
}

func isIPUnassigned(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == "InvalidIp.IpUnassigned"
}
