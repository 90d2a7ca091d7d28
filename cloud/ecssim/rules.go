package ecssim

import (
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The request rules ECS documents, each with its source. Sources named
// here:
//   - "v7 model": the field comments of Alibaba's generated API models,
//     github.com/alibabacloud-go/ecs-20140526/v7 v7.7.0 (the request
//     struct of the action named);
//   - "API reference": the ECS API reference page of the action (the
//     parameter table, the usage notes and the error table; "2021" names
//     the 2021 edition where it says something the v7 model does not);
//   - "common errors": the ECS API reference's table of errors common to
//     all actions ("Response results");
//   - Terway: AliyunContainerService/terway pkg/aliyun/client;
//   - Terraform: the alicloud_ecs_network_interface schema of
//     aliyun/terraform-provider-alicloud.
//
// Where sources disagree, the constant says which one the simulator follows.
const (
	// maxSecondaryAtCreate: CreateNetworkInterface
	// SecondaryPrivateIpAddressCount takes 1..49 (v7 model).
	maxSecondaryAtCreate = 49
	// maxAddrsAtCreate: CreateNetworkInterface PrivateIpAddress.N takes
	// N 0..10 (v7 model; API reference 2021).
	maxAddrsAtCreate = 10
	// maxIPv6PerCall: Ipv6AddressCount and Ipv6Address.N take 1..10 at
	// CreateNetworkInterface and AssignIpv6Addresses, Ipv6Address.N 1..10
	// at UnassignIpv6Addresses (v7 model; Terraform validates
	// ipv6_address_count as 1..10 and ipv6_addresses as at most 10).
	maxIPv6PerCall = 10
	// maxAssignOnAvailable: AssignPrivateIpAddresses on an Available ENI
	// takes at most 10 addresses per call (API reference 2021: "1 to 10";
	// ROS AssignPrivateIpAddresses: "up to 10 IP addresses" when
	// Available). The v7 model says 1 to 50 instead: the sources disagree
	// and the simulator follows the two that agree (50 is the most an
	// unattached ENI holds, maxIPv4Unattached).
	maxAssignOnAvailable = 10
	// maxIPv4Unattached: private IPv4 of an ENI that is not attached, the
	// primary included (v7 model, AssignPrivateIpAddresses: "1 to 50" on an
	// Available ENI; CreateNetworkInterface: primary + 49).
	maxIPv4Unattached = 50
	// maxIPv6Unattached: an Available ENI holds at most 10 IPv6 addresses
	// (API reference 2021, AssignIpv6Addresses usage notes).
	maxIPv6Unattached = 10
	// maxUnassignPerCall: UnassignPrivateIpAddresses PrivateIpAddress.N
	// takes N 1..32 (API reference, current edition; the 2019 edition said
	// 1..10 on an Available ENI and the type's limit on an InUse one).
	maxUnassignPerCall = 32
	// maxSecurityGroupsOnENI: SecurityGroupIds.N, as the ENI security group
	// quota (API reference: "Limits").
	maxSecurityGroupsOnENI = 10
	// maxPrefixesPerCall: Ipv4PrefixCount and Ipv4Prefix.N take 1..10
	// (v7 model; Terraform ipv4_prefix_count IntBetween(1, 10)).
	maxPrefixesPerCall = 10
	// maxTags: Tag.N takes N 1..20 (v7 model, CreateNetworkInterfaceRequestTag
	// and DescribeNetworkInterfacesRequestTag).
	maxTags = 20
	// maxTagLen: a tag key or value is at most 128 characters (v7 model).
	maxTagLen = 128
	// maxFilterItems: DescribeNetworkInterfaces NetworkInterfaceId.N,
	// PrivateIpAddress.N and Ipv6Address.N take N 1..100 (v7 model).
	maxFilterItems = 100
	// maxCreateDescription and maxModifyDescription: Description is 2 to 256
	// characters at CreateNetworkInterface and 2 to 255 at
	// ModifyNetworkInterfaceAttribute, and does not start with http:// or
	// https:// (v7 model, each action's own).
	maxCreateDescription = 256
	maxModifyDescription = 255
	// maxClientToken: a ClientToken is at most 64 ASCII characters (v7
	// model, every action that takes one).
	maxClientToken = 64
)

// pageRule is how a listing reads MaxResults and PageSize.
type pageRule struct {
	// MaxResults below minResults reads as minResults, above maxResults
	// as maxResults; absent, it is minResults. ECS documents that reading
	// (it refuses nothing but a value that is no integer).
	minResults, maxResults int
	// PageSize takes 1..maxPageSize (refused beyond), defPageSize when
	// absent.
	maxPageSize, defPageSize int
	// tokens: the listing pages by NextToken/MaxResults as well.
	tokens bool
}

// pagingOf is the paging rule of a listing action:
//   - DescribeNetworkInterfaces: MaxResults 10..500 (v7 model: "less than
//     10 ... 10; greater than 500 ... 500"), PageSize 1..1000, default 10
//     (v7 model; the API reference of 2021 said at most 100: the simulator
//     follows the newer model);
//   - DescribeInstances: MaxResults read into 10..100 (v7 model), PageSize
//     at most 100, default 10 (API reference 2021; the v7 model states no
//     range);
//   - DescribeVSwitches (VPC): PageSize 1..50, default 10, no tokens (VPC
//     API reference).
func pagingOf(action string) pageRule {
	switch action {
	case "DescribeNetworkInterfaces":
		return pageRule{minResults: 10, maxResults: 500, maxPageSize: 1000, defPageSize: 10, tokens: true}
	case "DescribeInstances":
		return pageRule{minResults: 10, maxResults: 100, maxPageSize: 100, defPageSize: 10, tokens: true}
	}
	return pageRule{maxPageSize: 50, defPageSize: 10}
}

// maxResults reads MaxResults as rule says: clamped, not refused.
func (r pageRule) maxResultsOf(p url.Values) (int, error) {
	v := p.Get("MaxResults")
	if v == "" {
		return r.minResults, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, apiErr("InvalidParameter", "The parameter MaxResults=%q is not an integer.", v)
	}
	return min(max(n, r.minResults), r.maxResults), nil
}

// createTags reads the Tag.N of CreateNetworkInterface with the rules the
// v7 model and the API reference document, and the codes of its error
// table:
//   - at most 20 tags (QuotaExceed.Tags, 403);
//   - a key is 1..128 characters, does not start with "aliyun" or "acs:"
//     and contains no "http://" or "https://" (InvalidTagKey.Malformed,
//     400); the prefixes are compared without regard to case, which ECS
//     does not say (the stricter reading);
//   - a key is given once (Duplicate.TagKey, 400);
//   - a value is at most 128 characters and contains no "http://" or
//     "https://" (InvalidTagValue.Malformed, 400). The 2021 reference also
//     forbade a value starting with "acs:"; the v7 model does not, and the
//     simulator follows the newer model.
func createTags(p url.Values) (map[string]string, error) {
	out := map[string]string{}
	for i := 1; ; i++ {
		n := strconv.Itoa(i)
		k, ok := p["Tag."+n+".Key"]
		if !ok {
			return out, nil
		}
		if i > maxTags {
			return nil, apiErr("QuotaExceed.Tags", "At most %d tags can be added to an ENI.", maxTags)
		}
		key, val := k[0], p.Get("Tag."+n+".Value")
		lk := strings.ToLower(key)
		switch {
		case key == "", utf8.RuneCountInString(key) > maxTagLen,
			strings.HasPrefix(lk, "aliyun"), strings.HasPrefix(lk, "acs:"), hasURL(key):
			return nil, apiErr("InvalidTagKey.Malformed", "The specified Tag.%d.Key is not valid.", i)
		case utf8.RuneCountInString(val) > maxTagLen, hasURL(val):
			return nil, apiErr("InvalidTagValue.Malformed", "The specified Tag.%d.Value is not valid.", i)
		}
		if _, dup := out[key]; dup {
			return nil, apiErr("Duplicate.TagKey", "The Tag.N.Key contain duplicate key.")
		}
		out[key] = val
	}
}

func hasURL(s string) bool {
	return strings.Contains(s, "http://") || strings.Contains(s, "https://")
}

// checkDescription applies the Description rule when the parameter is
// present: 2..maxLen characters, not starting with http:// or https://.
// The ENI actions' error tables list only InvalidParameter; the code here
// is the one the other ECS actions with the same rule answer
// (InvalidDescription.Malformed, 400: CreateInstance, CreateSecurityGroup).
func checkDescription(p url.Values, maxLen int) error {
	d, ok := p["Description"]
	if !ok {
		return nil
	}
	s := d[0]
	if n := utf8.RuneCountInString(s); n < 2 || n > maxLen || strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://") {
		return apiErr("InvalidDescription.Malformed", "The specified description is wrongly formed: 2 to %d characters, not starting with http:// or https://.", maxLen)
	}
	return nil
}

// checkClientToken applies the ClientToken rule: at most 64 ASCII
// characters.
func checkClientToken(token string) error {
	if len(token) > maxClientToken {
		return apiErr("InvalidParameter", "The ClientToken is longer than %d characters.", maxClientToken)
	}
	for i := 0; i < len(token); i++ {
		if token[i] >= utf8.RuneSelf {
			return apiErr("InvalidParameter", "The ClientToken may hold ASCII characters only.")
		}
	}
	return nil
}
