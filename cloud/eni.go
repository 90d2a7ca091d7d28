package cloud

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/requests"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"

	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/observed"
)

// Per-call limits of DescribeNetworkInterfaces.
const (
	maxIDsPerDescribe  = 100
	maxTagsPerDescribe = 20
)

// ENIFilter selects ENIs. Every non-empty field must match.
type ENIFilter struct {
	// InstanceID selects the ENIs attached to the instance.
	InstanceID string
	// Tags selects ENIs carrying every key/value (at most 20).
	Tags map[string]string
	// IDs selects these ENIs (any number: sent 100 per call).
	IDs []string
	// Status selects ENIs in this state (e.g. Available).
	Status observed.ENIStatus
}

// ListENIs returns every ENI matching f, all pages read, sorted by ID. An ID
// in f.IDs that does not exist is simply absent from the result.
func (c *Client) ListENIs(ctx context.Context, f ENIFilter) ([]observed.ENI, error) {
	if len(f.Tags) > maxTagsPerDescribe {
		return nil, fmt.Errorf("list enis: %d tags, at most %d", len(f.Tags), maxTagsPerDescribe)
	}
	var out []observed.ENI
	if len(f.IDs) == 0 {
		enis, err := c.listENIs(ctx, f, nil)
		if err != nil {
			return nil, err
		}
		out = enis
	}
	for chunk := range slices.Chunk(f.IDs, maxIDsPerDescribe) {
		enis, err := c.listENIs(ctx, f, chunk)
		if err != nil {
			return nil, err
		}
		out = append(out, enis...)
	}
	slices.SortFunc(out, func(a, b observed.ENI) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

func (c *Client) listENIs(ctx context.Context, f ENIFilter, ids []string) ([]observed.ENI, error) {
	var out []observed.ENI
	token := ""
	for page := 1; ; page++ {
		req := ecs.CreateDescribeNetworkInterfacesRequest()
		req.InstanceId = f.InstanceID
		req.Status = string(f.Status)
		req.MaxResults = requests.NewInteger(c.cfg.PageSize)
		req.NextToken = token
		if len(ids) > 0 {
			req.NetworkInterfaceId = &ids
		}
		if len(f.Tags) > 0 {
			tags := make([]ecs.DescribeNetworkInterfacesTag, 0, len(f.Tags))
			for _, k := range slices.Sorted(maps.Keys(f.Tags)) {
				tags = append(tags, ecs.DescribeNetworkInterfacesTag{Key: k, Value: f.Tags[k]})
			}
			req.Tag = &tags
		}
		resp := ecs.CreateDescribeNetworkInterfacesResponse()
		if err := c.call(ctx, req, resp); err != nil {
			return nil, fmt.Errorf("list enis (page %d): %w", page, err)
		}
		for _, s := range resp.NetworkInterfaceSets.NetworkInterfaceSet {
			e, err := eniFromDescribe(s)
			if err != nil {
				return nil, fmt.Errorf("list enis: %w", err)
			}
			out = append(out, e)
		}
		if resp.NextToken == "" {
			return out, nil
		}
		if resp.NextToken == token {
			return nil, fmt.Errorf("list enis: page %d returned its own NextToken %q again", page, token)
		}
		token = resp.NextToken
	}
}

// CreateENIRequest describes a secondary ENI to create.
type CreateENIRequest struct {
	VSwitchID string
	// SecurityGroups are sent as SecurityGroupIds.N (1..10 distinct).
	SecurityGroups []string
	Tags           map[string]string
	// IPv4Count is the number of secondary private IPv4 addresses besides
	// the ENI's primary one (SecondaryPrivateIpAddressCount, 0..49).
	IPv4Count int
	// IPv6Count is the number of IPv6 addresses (Ipv6AddressCount, 0..10:
	// more are assigned once the ENI exists, see AssignIPv6).
	IPv6Count int
	// IPv4PrefixCount is the number of /28 IPv4 prefixes (Ipv4PrefixCount,
	// 0..10); each takes one private-address slot of the ENI like an
	// address. ECS takes secondary addresses or prefixes at creation, not
	// both: give IPv4Count or IPv4PrefixCount.
	IPv4PrefixCount int
	// ClientToken makes the call idempotent (see ClientToken).
	ClientToken string
	Description string
}

// Limits of CreateNetworkInterface the client checks before sending (the
// field comments of Alibaba's generated API models,
// github.com/alibabacloud-go/ecs-20140526/v7, CreateNetworkInterfaceRequest).
const (
	maxIPv4AtCreate     = 49 // SecondaryPrivateIpAddressCount: 1 to 49
	maxIPv6AtCreate     = 10 // Ipv6AddressCount: 1 to 10
	maxPrefixesAtCreate = 10 // Ipv4PrefixCount: 1 to 10
)

// check refuses what CreateNetworkInterface documents it refuses, so that
// such a request costs no call and burns no ClientToken: secondary
// addresses together with prefixes (Terway's client refuses the same: "ECS
// does not allow requesting both individual IPs and prefixes in the same
// request"; the Terraform provider's schema makes them conflict), counts
// outside their ranges, and other than 1 to 10 distinct security groups.
func (r CreateENIRequest) check() error {
	switch {
	case r.IPv4Count > 0 && r.IPv4PrefixCount > 0:
		return fmt.Errorf("%w: secondary addresses (%d) and IPv4 prefixes (%d) in one create", ErrInvalidRequest, r.IPv4Count, r.IPv4PrefixCount)
	case r.IPv4Count < 0 || r.IPv4Count > maxIPv4AtCreate:
		return fmt.Errorf("%w: %d secondary addresses at creation, want 0 to %d", ErrInvalidRequest, r.IPv4Count, maxIPv4AtCreate)
	case r.IPv6Count < 0 || r.IPv6Count > maxIPv6AtCreate:
		return fmt.Errorf("%w: %d IPv6 addresses at creation, want 0 to %d", ErrInvalidRequest, r.IPv6Count, maxIPv6AtCreate)
	case r.IPv4PrefixCount < 0 || r.IPv4PrefixCount > maxPrefixesAtCreate:
		return fmt.Errorf("%w: %d IPv4 prefixes at creation, want 0 to %d", ErrInvalidRequest, r.IPv4PrefixCount, maxPrefixesAtCreate)
	case len(r.SecurityGroups) == 0 || len(r.SecurityGroups) > maxSecurityGroupsPerENI:
		return fmt.Errorf("%w: %d security groups, want 1 to %d", ErrInvalidRequest, len(r.SecurityGroups), maxSecurityGroupsPerENI)
	}
	seen := map[string]bool{}
	for _, g := range r.SecurityGroups {
		if g == "" || seen[g] {
			return fmt.Errorf("%w: security group %q is empty or given twice", ErrInvalidRequest, g)
		}
		seen[g] = true
	}
	return nil
}

// CreateENI creates a secondary ENI; it is Available when this returns.
// Repeating the call with the same ClientToken and parameters returns the
// same ENI; with other parameters it fails with ErrIdempotencyMismatch.
// Without a ClientToken only throttled attempts are retried (see callOnce).
// A request ECS documents it refuses (see CreateENIRequest) fails with
// ErrInvalidRequest before any call.
func (c *Client) CreateENI(ctx context.Context, r CreateENIRequest) (observed.ENI, error) {
	if err := r.check(); err != nil {
		return observed.ENI{}, fmt.Errorf("create eni in %s: %w", r.VSwitchID, err)
	}
	req := ecs.CreateCreateNetworkInterfaceRequest()
	req.VSwitchId = r.VSwitchID
	req.InstanceType = observed.ENITypeSecondary
	req.ClientToken = r.ClientToken
	req.Description = r.Description
	// Released with the instance it is attached to ("Retain and reuse an
	// ENI"): a node that dies with ENIs attached leaks none of them. What
	// a dead node leaves Available, `enid sweep` finds (docs/deploy.md).
	req.DeleteOnRelease = requests.NewBoolean(true)
	sgs := slices.Clone(r.SecurityGroups)
	req.SecurityGroupIds = &sgs
	if r.IPv4Count > 0 {
		req.SecondaryPrivateIpAddressCount = requests.NewInteger(r.IPv4Count)
	}
	if r.IPv6Count > 0 {
		req.Ipv6AddressCount = requests.NewInteger(r.IPv6Count)
	}
	if r.IPv4PrefixCount > 0 {
		req.Ipv4PrefixCount = requests.NewInteger(r.IPv4PrefixCount)
	}
	if len(r.Tags) > 0 {
		tags := make([]ecs.CreateNetworkInterfaceTag, 0, len(r.Tags))
		for _, k := range slices.Sorted(maps.Keys(r.Tags)) {
			tags = append(tags, ecs.CreateNetworkInterfaceTag{Key: k, Value: r.Tags[k]})
		}
		req.Tag = &tags
	}
	resp := ecs.CreateCreateNetworkInterfaceResponse()
	do := c.call
	if r.ClientToken == "" {
		do = c.callOnce
	}
	if err := do(ctx, req, resp); err != nil {
		return observed.ENI{}, fmt.Errorf("create eni in %s: %w", r.VSwitchID, err)
	}
	e := observed.ENI{
		ID:             resp.NetworkInterfaceId,
		MAC:            strings.ToLower(resp.MacAddress),
		Status:         observed.ENIStatus(cmp.Or(resp.Status, string(observed.ENIAvailable))),
		Type:           cmp.Or(resp.Type, observed.ENITypeSecondary),
		VSwitchID:      resp.VSwitchId,
		ZoneID:         resp.ZoneId,
		VPCID:          resp.VpcId,
		SecurityGroups: resp.SecurityGroupIds.SecurityGroupId,
		Tags:           tagMap(resp.Tags.Tag),
	}
	var err error
	e.PrimaryIP, e.IPv4, err = splitIPv4(resp.PrivateIpAddress, resp.PrivateIpSets.PrivateIpSet)
	if err != nil {
		return observed.ENI{}, fmt.Errorf("create eni %s: %w", e.ID, err)
	}
	for _, s := range resp.Ipv6Sets.Ipv6Set {
		a, err := netip.ParseAddr(s.Ipv6Address)
		if err != nil {
			return observed.ENI{}, fmt.Errorf("create eni %s: ipv6 address: %w", e.ID, err)
		}
		e.IPv6 = append(e.IPv6, a)
	}
	slices.SortFunc(e.IPv6, netip.Addr.Compare)
	if e.IPv4Prefixes, err = parsePrefixSet(resp.Ipv4PrefixSets.Ipv4PrefixSet); err != nil {
		return observed.ENI{}, fmt.Errorf("create eni %s: %w", e.ID, err)
	}
	if e.ID == "" {
		return observed.ENI{}, fmt.Errorf("create eni in %s: answer names no NetworkInterfaceId", r.VSwitchID)
	}
	return e, nil
}

// AttachENI starts attaching eniID to instanceID; the ENI goes Attaching,
// then InUse (see WaitENI). Attaching an ENI that is already InUse or
// Attaching on instanceID succeeds: after a refusal in the conflict class
// (the ENI's state, or another operation running, once its retries ran
// out) a lookup decides.
func (c *Client) AttachENI(ctx context.Context, eniID, instanceID string) error {
	req := ecs.CreateAttachNetworkInterfaceRequest()
	req.NetworkInterfaceId = eniID
	req.InstanceId = instanceID
	err := c.call(ctx, req, ecs.CreateAttachNetworkInterfaceResponse())
	if errors.Is(err, ErrConflict) {
		if e, ok := c.lookup(ctx, eniID); ok && e.InstanceID == instanceID &&
			(e.Status == observed.ENIInUse || e.Status == observed.ENIAttaching) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("attach eni %s to %s: %w", eniID, instanceID, err)
	}
	return nil
}

// DetachENI starts detaching eniID from instanceID; the ENI goes Detaching,
// then Available. An ENI that is gone, or already Available or Detaching,
// counts as detached, and so does an ENI of an instance that is gone
// (InvalidEcsId.NotFound). Another operation running on the ENI or
// instance is retried (see Retryable); when the retries run out, a
// lookup decides whether the detach happened anyway.
func (c *Client) DetachENI(ctx context.Context, eniID, instanceID string) error {
	req := ecs.CreateDetachNetworkInterfaceRequest()
	req.NetworkInterfaceId = eniID
	req.InstanceId = instanceID
	err := c.call(ctx, req, ecs.CreateDetachNetworkInterfaceResponse())
	if errors.Is(err, ErrNotFound) && (isENINotFound(err) || isCode(err, "InvalidEcsId.NotFound")) {
		return nil
	}
	if errors.Is(err, ErrConflict) {
		if e, ok := c.lookup(ctx, eniID); ok && (e.Status == observed.ENIAvailable || e.Status == observed.ENIDetaching) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("detach eni %s from %s: %w", eniID, instanceID, err)
	}
	return nil
}

// DeleteENI starts deleting an Available ENI (see WaitENIGone). An ENI that
// is gone or already Deleting counts as deleted.
func (c *Client) DeleteENI(ctx context.Context, eniID string) error {
	req := ecs.CreateDeleteNetworkInterfaceRequest()
	req.NetworkInterfaceId = eniID
	err := c.call(ctx, req, ecs.CreateDeleteNetworkInterfaceResponse())
	if errors.Is(err, ErrNotFound) && isENINotFound(err) {
		return nil
	}
	if errors.Is(err, ErrConflict) {
		if e, ok := c.lookup(ctx, eniID); ok && e.Status == observed.ENIDeleting {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("delete eni %s: %w", eniID, err)
	}
	return nil
}

// maxSecurityGroupsPerENI is the most security groups ECS lets an ENI have.
const maxSecurityGroupsPerENI = 10

// SetENISecurityGroups replaces the security groups of eniID with groups,
// the complete new set (ModifyNetworkInterfaceAttribute with
// SecurityGroupId.N, 1 to 10 distinct IDs). The ENI keeps its addresses
// and attachment. Setting a set is idempotent, so failures are retried
// like any repeatable call; when a conflict outlasts the retries, a lookup
// decides: an ENI that has the groups already counts as done. An unknown
// ENI or group fails with ErrNotFound.
func (c *Client) SetENISecurityGroups(ctx context.Context, eniID string, groups []string) error {
	if len(groups) == 0 || len(groups) > maxSecurityGroupsPerENI {
		return fmt.Errorf("set security groups of eni %s: %d groups, want 1 to %d", eniID, len(groups), maxSecurityGroupsPerENI)
	}
	seen := map[string]bool{}
	for _, g := range groups {
		if g == "" || seen[g] {
			return fmt.Errorf("set security groups of eni %s: group %q is empty or given twice", eniID, g)
		}
		seen[g] = true
	}
	req := ecs.CreateModifyNetworkInterfaceAttributeRequest()
	req.NetworkInterfaceId = eniID
	sgs := slices.Clone(groups)
	req.SecurityGroupId = &sgs
	err := c.call(ctx, req, ecs.CreateModifyNetworkInterfaceAttributeResponse())
	if errors.Is(err, ErrConflict) {
		if e, ok := c.lookup(ctx, eniID); ok && sameSet(e.SecurityGroups, groups) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("set security groups of eni %s to %v: %w", eniID, groups, err)
	}
	return nil
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// isENINotFound reports whether err says the ENI itself is missing (rather
// than, say, the instance).
func isENINotFound(err error) bool { return isCode(err, "InvalidEniId.NotFound") }

// isCode reports whether err is an APIError with code.
func isCode(err error, code string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == code
}

// lookup describes one ENI, reporting ok=false when that fails or it is gone.
func (c *Client) lookup(ctx context.Context, eniID string) (observed.ENI, bool) {
	enis, err := c.ListENIs(ctx, ENIFilter{IDs: []string{eniID}})
	if err != nil || len(enis) != 1 {
		return observed.ENI{}, false
	}
	return enis[0], true
}

// WaitENI polls eniID until its Status is want and returns it then (want
// "" waits for the ENI to be gone, as WaitENIGone does). It
// fails with ErrNotFound if the ENI is not there (a describe may miss an ENI
// created a moment ago, so this too must settle, see below), with
// ErrConflict when the
// ENI settles in a state from which want cannot follow without another
// call (waiting for InUse: detaching, deleting, or back to Available after
// Attaching, i.e. the attach failed; waiting for Available: deleting), and
// when ctx ends or the wait policy's Timeout passes. Such a state counts
// only once it has settled: seen by deadEndPolls polls in a row spanning at
// least Wait.Settle, so stale reads cannot end the wait. Poll intervals grow from Wait.Initial to Wait.Max; each poll is
// an ordinary rate-limited, retried call.
func (c *Client) WaitENI(ctx context.Context, eniID string, want observed.ENIStatus) (observed.ENI, error) {
	if want == "" {
		return observed.ENI{}, c.WaitENIGone(ctx, eniID)
	}
	var got observed.ENI
	var seen []observed.ENIStatus // distinct consecutive states, oldest first ("" = not found)
	streak := 0                   // polls in a row showing seen's last state
	var since time.Time           // when the streak began
	err := c.poll(ctx, func() (bool, error) {
		enis, err := c.ListENIs(ctx, ENIFilter{IDs: []string{eniID}})
		if err != nil {
			return false, err
		}
		status := observed.ENIStatus("")
		if len(enis) == 1 {
			got = enis[0]
			status = got.Status
		}
		if status == want {
			return true, nil
		}
		if len(seen) > 0 && seen[len(seen)-1] == status {
			streak++
		} else {
			seen, streak, since = append(seen, status), 1, c.clk.Now()
		}
		settled := streak >= deadEndPolls && c.clk.Now().Sub(since) >= c.cfg.Wait.Settle
		if settled && status == "" {
			return false, fmt.Errorf("%w: eni %s is gone", ErrNotFound, eniID)
		}
		if settled && deadEnd(want, seen) {
			return false, fmt.Errorf("%w: eni %s went %v", ErrConflict, eniID, seen)
		}
		return false, nil
	})
	if err != nil {
		return got, fmt.Errorf("wait for eni %s to be %s (last %q): %w", eniID, want, got.Status, err)
	}
	return got, nil
}

// deadEndPolls is how many polls in a row must show a dead-end state
// before WaitENI gives up on it.
const deadEndPolls = 3

// deadEnd reports whether the states seen so far (oldest first, without
// repeats) rule out reaching want without another call.
func deadEnd(want observed.ENIStatus, seen []observed.ENIStatus) bool {
	last := seen[len(seen)-1]
	switch want {
	case observed.ENIInUse:
		if last == observed.ENIDetaching || last == observed.ENIDeleting {
			return true
		}
		return last == observed.ENIAvailable && slices.Contains(seen, observed.ENIAttaching)
	case observed.ENIAvailable:
		return last == observed.ENIDeleting
	}
	return false
}

// WaitENIGone polls eniID until it no longer exists (after DeleteENI).
func (c *Client) WaitENIGone(ctx context.Context, eniID string) error {
	var last observed.ENIStatus
	err := c.poll(ctx, func() (bool, error) {
		enis, err := c.ListENIs(ctx, ENIFilter{IDs: []string{eniID}})
		if err != nil {
			return false, err
		}
		if len(enis) == 0 {
			return true, nil
		}
		last = enis[0].Status
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("wait for eni %s to be gone (last %q): %w", eniID, last, err)
	}
	return nil
}

// poll calls check until it reports done or fails, waiting between calls
// as the wait policy says.
func (c *Client) poll(ctx context.Context, check func() (bool, error)) error {
	ctx, cancel := clock.WithTimeout(ctx, c.clk, c.cfg.Wait.Timeout)
	defer cancel()
	d := c.cfg.Wait.Initial
	for {
		done, err := check()
		if err != nil || done {
			return err
		}
		if err := c.clk.Sleep(ctx, d); err != nil {
			return err
		}
		d = min(c.cfg.Wait.Max, d*3/2)
	}
}

// eniFromDescribe converts one DescribeNetworkInterfaces item.
func eniFromDescribe(s ecs.NetworkInterfaceSet) (observed.ENI, error) {
	e := observed.ENI{
		ID:             s.NetworkInterfaceId,
		MAC:            strings.ToLower(s.MacAddress),
		Status:         observed.ENIStatus(s.Status),
		Type:           s.Type,
		InstanceID:     cmp.Or(s.InstanceId, s.Attachment.InstanceId),
		VSwitchID:      s.VSwitchId,
		ZoneID:         s.ZoneId,
		VPCID:          s.VpcId,
		SecurityGroups: s.SecurityGroupIds.SecurityGroupId,
		Tags:           tagMap(s.Tags.Tag),
		DeviceIndex:    s.Attachment.DeviceIndex,
		CreatedAt:      parseTime(s.CreationTime),
	}
	var err error
	e.PrimaryIP, e.IPv4, err = splitIPv4(s.PrivateIpAddress, s.PrivateIpSets.PrivateIpSet)
	if err != nil {
		return observed.ENI{}, fmt.Errorf("eni %s: %w", e.ID, err)
	}
	for _, v := range s.Ipv6Sets.Ipv6Set {
		a, err := netip.ParseAddr(v.Ipv6Address)
		if err != nil {
			return observed.ENI{}, fmt.Errorf("eni %s: ipv6 address: %w", e.ID, err)
		}
		e.IPv6 = append(e.IPv6, a)
	}
	slices.SortFunc(e.IPv6, netip.Addr.Compare)
	if e.IPv4Prefixes, err = parsePrefixSet(s.Ipv4PrefixSets.Ipv4PrefixSet); err != nil {
		return observed.ENI{}, fmt.Errorf("eni %s: %w", e.ID, err)
	}
	return e, nil
}

// parsePrefixSet reads an Ipv4PrefixSets item list into sorted /28s.
func parsePrefixSet(set []ecs.Ipv4PrefixSet) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range set {
		q, err := parseIPv4Prefix(s.Ipv4Prefix)
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	slices.SortFunc(out, netip.Prefix.Compare)
	return out, nil
}

// parseIPv4Prefix reads one IPv4 prefix as ECS gives it ("10.0.0.16/28"):
// a masked IPv4 prefix of observed.IPv4PrefixBits.
func parseIPv4Prefix(s string) (netip.Prefix, error) {
	q, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("ipv4 prefix: %w", err)
	}
	if !q.Addr().Is4() || q.Bits() != observed.IPv4PrefixBits || q.Masked() != q {
		return netip.Prefix{}, fmt.Errorf("ipv4 prefix %q is not an aligned /%d", s, observed.IPv4PrefixBits)
	}
	return q, nil
}

// splitIPv4 separates the ENI's primary address from the secondary ones.
// The set's Primary flag decides; primary names it when no flag is set.
func splitIPv4(primary string, set []ecs.PrivateIpSet) (netip.Addr, []netip.Addr, error) {
	var p netip.Addr
	if primary != "" {
		a, err := netip.ParseAddr(primary)
		if err != nil {
			return p, nil, fmt.Errorf("primary ip: %w", err)
		}
		p = a
	}
	flagged := slices.ContainsFunc(set, func(s ecs.PrivateIpSet) bool { return s.Primary })
	var sec []netip.Addr
	for _, s := range set {
		a, err := netip.ParseAddr(s.PrivateIpAddress)
		if err != nil {
			return p, nil, fmt.Errorf("private ip: %w", err)
		}
		switch {
		case s.Primary:
			p = a
		case !flagged && a == p:
		default:
			sec = append(sec, a)
		}
	}
	slices.SortFunc(sec, netip.Addr.Compare)
	return p, sec, nil
}

// tagMap reads ECS tags (TagKey/TagValue, or Key/Value in some answers).
func tagMap(tags []ecs.Tag) map[string]string {
	if len(tags) == 0 {
		return nil
	}
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		m[cmp.Or(t.TagKey, t.Key)] = cmp.Or(t.TagValue, t.Value)
	}
	return m
}

// parseTime reads an ECS timestamp ("2006-01-02T15:04:05Z" or without
// seconds); the zero time when it cannot.
func parseTime(s string) time.Time {
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04Z07:00"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t
		}
	}
	return time.Time{}
}
