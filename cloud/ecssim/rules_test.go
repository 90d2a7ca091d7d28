package ecssim_test

// The documented request rules of rules.go, each driven through the
// unmodified SDK: what ECS refuses is refused with ECS's code and status,
// what it reads in its own way is read so.

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	sdkerrors "github.com/aliyun/alibaba-cloud-sdk-go/sdk/errors"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/cloud/ecssim"
)

// status is the HTTP status of an API error (0 for nil).
func status(t testing.TB, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var se *sdkerrors.ServerError
	if !errors.As(err, &se) {
		t.Fatalf("not a server error: %v", err)
	}
	return se.HttpStatus()
}

// manyENIs creates n ENIs in vsw (secondary, no addresses besides the
// primary) and returns their IDs.
func (e *env) manyENIs(t *testing.T, vsw string, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		req := ecs.CreateCreateNetworkInterfaceRequest()
		req.VSwitchId, req.SecurityGroupId = vsw, "sg-sim"
		resp, err := e.ecs.CreateNetworkInterface(req)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.NetworkInterfaceId)
	}
	return ids
}

func TestPagingBounds(t *testing.T) {
	e := newEnv(t, ecssim.Config{Zones: []string{"cn-hangzhou-h"}, VSwitches: []ecssim.VSwitchConfig{
		{ID: "vsw-sim-h", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.0.0/22")},
	}})
	e.manyENIs(t, "vsw-sim-h", 510) // 511 with the primary
	page := func(mod func(*ecs.DescribeNetworkInterfacesRequest)) (int, bool, string) {
		req := ecs.CreateDescribeNetworkInterfacesRequest()
		mod(req)
		resp, err := e.ecs.DescribeNetworkInterfaces(req)
		return len(resp.NetworkInterfaceSets.NetworkInterfaceSet), resp.NextToken != "", code(t, err)
	}
	for _, tt := range []struct {
		name string
		mod  func(*ecs.DescribeNetworkInterfacesRequest)
		n    int
		more bool
		code string
	}{
		// MaxResults below 10 reads as 10, above 500 as 500 (v7 model).
		{"MaxResults 5", func(r *ecs.DescribeNetworkInterfacesRequest) { r.MaxResults = requestsInt(5) }, 10, true, ""},
		{"MaxResults 0", func(r *ecs.DescribeNetworkInterfacesRequest) { r.MaxResults = requestsInt(0) }, 10, true, ""},
		{"MaxResults 10", func(r *ecs.DescribeNetworkInterfacesRequest) { r.MaxResults = requestsInt(10) }, 10, true, ""},
		{"MaxResults 500", func(r *ecs.DescribeNetworkInterfacesRequest) { r.MaxResults = requestsInt(500) }, 500, true, ""},
		{"MaxResults 10000", func(r *ecs.DescribeNetworkInterfacesRequest) { r.MaxResults = requestsInt(10000) }, 500, true, ""},
		{"MaxResults x", func(r *ecs.DescribeNetworkInterfacesRequest) { r.MaxResults = "x" }, 0, false, "InvalidParameter"},
		// PageSize 1..1000, refused beyond (v7 model).
		{"PageSize 1000", func(r *ecs.DescribeNetworkInterfacesRequest) { r.PageSize = requestsInt(1000) }, 511, false, ""},
		{"PageSize 1001", func(r *ecs.DescribeNetworkInterfacesRequest) { r.PageSize = requestsInt(1001) }, 0, false, "InvalidParameter"},
		{"PageSize 0", func(r *ecs.DescribeNetworkInterfacesRequest) { r.PageSize = requestsInt(0) }, 0, false, "InvalidParameter"},
		{"no paging", func(*ecs.DescribeNetworkInterfacesRequest) {}, 10, false, ""},
	} {
		n, more, c := page(tt.mod)
		if n != tt.n || more != tt.more || c != tt.code {
			t.Errorf("%s: %d ENIs, more %v, code %q; want %d, %v, %q", tt.name, n, more, c, tt.n, tt.more, tt.code)
		}
	}

	// DescribeInstances: MaxResults read into 10..100 (v7 model), PageSize
	// at most 100 (API reference).
	for range 11 {
		if _, err := e.sim.AddInstance(ecssim.InstanceSpec{}); err != nil {
			t.Fatal(err)
		}
	}
	insts := func(mod func(*ecs.DescribeInstancesRequest)) (int, bool, string) {
		req := ecs.CreateDescribeInstancesRequest()
		mod(req)
		resp, err := e.ecs.DescribeInstances(req)
		return len(resp.Instances.Instance), resp.NextToken != "", code(t, err)
	}
	for _, tt := range []struct {
		name string
		mod  func(*ecs.DescribeInstancesRequest)
		n    int
		more bool
		code string
	}{
		{"MaxResults 1", func(r *ecs.DescribeInstancesRequest) { r.MaxResults = requestsInt(1) }, 10, true, ""},
		{"MaxResults 101", func(r *ecs.DescribeInstancesRequest) { r.MaxResults = requestsInt(101) }, 12, false, ""},
		{"PageSize 100", func(r *ecs.DescribeInstancesRequest) { r.PageSize = requestsInt(100) }, 12, false, ""},
		{"PageSize 101", func(r *ecs.DescribeInstancesRequest) { r.PageSize = requestsInt(101) }, 0, false, "InvalidParameter"},
	} {
		n, more, c := insts(tt.mod)
		if n != tt.n || more != tt.more || c != tt.code {
			t.Errorf("DescribeInstances %s: %d, more %v, code %q; want %d, %v, %q", tt.name, n, more, c, tt.n, tt.more, tt.code)
		}
	}
}

func TestDescribeFilters(t *testing.T) {
	e := newEnv(t, ecssim.Config{SecurityGroups: []string{"sg-sim", "sg-b"}})
	a := e.createENI(t, 2) // sg-sim, like the instance's primary ENI
	req := ecs.CreateCreateNetworkInterfaceRequest()
	req.VSwitchId, req.SecurityGroupIds, req.Ipv6AddressCount = "vsw-sim-h", &[]string{"sg-b"}, requestsInt(2)
	b, err := e.ecs.CreateNetworkInterface(req)
	if err != nil {
		t.Fatal(err)
	}
	find := func(mod func(*ecs.DescribeNetworkInterfacesRequest)) ([]string, string) {
		req := ecs.CreateDescribeNetworkInterfacesRequest()
		mod(req)
		resp, err := e.ecs.DescribeNetworkInterfaces(req)
		var ids []string
		for _, n := range resp.NetworkInterfaceSets.NetworkInterfaceSet {
			ids = append(ids, n.NetworkInterfaceId)
		}
		return ids, code(t, err)
	}
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprintf("192.168.0.%d", i+1)
	}
	many6 := make([]string, 101)
	for i := range many6 {
		many6[i] = fmt.Sprintf("2408:4005:300::%x", i+1)
	}
	for _, tt := range []struct {
		name string
		mod  func(*ecs.DescribeNetworkInterfacesRequest)
		want []string
		code string
	}{
		// SecurityGroupId covers secondary ENIs only (v7 model): the
		// instance's primary ENI, in sg-sim too, is not listed.
		{"SecurityGroupId", func(r *ecs.DescribeNetworkInterfacesRequest) { r.SecurityGroupId = "sg-sim" }, []string{a.NetworkInterfaceId}, ""},
		{"SecurityGroupId b", func(r *ecs.DescribeNetworkInterfacesRequest) { r.SecurityGroupId = "sg-b" }, []string{b.NetworkInterfaceId}, ""},
		// Ipv6Address.N: ENIs holding any of them.
		{"Ipv6Address", func(r *ecs.DescribeNetworkInterfacesRequest) {
			r.Ipv6Address = &[]string{"2408:4005:300::ffff", b.Ipv6Sets.Ipv6Set[1].Ipv6Address}
		}, []string{b.NetworkInterfaceId}, ""},
		{"Ipv6Address none", func(r *ecs.DescribeNetworkInterfacesRequest) { r.Ipv6Address = &[]string{"2408:4005:300::ffff"} }, nil, ""},
		{"Ipv6Address 101", func(r *ecs.DescribeNetworkInterfacesRequest) { r.Ipv6Address = &many6 }, nil, "InvalidParameter"},
		{"Ipv6Address bad", func(r *ecs.DescribeNetworkInterfacesRequest) { r.Ipv6Address = &[]string{"192.168.0.1"} }, nil, "InvalidIp.Address"},
		// PrivateIpAddress.N: secondary addresses (v7 model).
		{"PrivateIpAddress", func(r *ecs.DescribeNetworkInterfacesRequest) {
			r.PrivateIpAddress = &[]string{a.PrivateIpSets.PrivateIpSet[1].PrivateIpAddress}
		}, []string{a.NetworkInterfaceId}, ""},
		{"PrivateIpAddress primary", func(r *ecs.DescribeNetworkInterfacesRequest) {
			r.PrivateIpAddress = &[]string{a.PrivateIpAddress}
		}, nil, ""},
		{"PrimaryIpAddress", func(r *ecs.DescribeNetworkInterfacesRequest) { r.PrimaryIpAddress = a.PrivateIpAddress }, []string{a.NetworkInterfaceId}, ""},
		{"PrivateIpAddress 101", func(r *ecs.DescribeNetworkInterfacesRequest) { r.PrivateIpAddress = &many }, nil, "InvalidParameter"},
	} {
		got, c := find(tt.mod)
		if c != tt.code || !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, code %q; want %v, %q", tt.name, got, c, tt.want, tt.code)
		}
	}
}

func TestCreateRules(t *testing.T) {
	e := newEnv(t, ecssim.Config{SecurityGroups: []string{"sg-sim", "sg-b"}})
	base := func() *ecs.CreateNetworkInterfaceRequest {
		req := ecs.CreateCreateNetworkInterfaceRequest()
		req.VSwitchId, req.SecurityGroupIds = "vsw-sim-h", &[]string{"sg-sim"}
		return req
	}
	tags := func(kv ...string) *[]ecs.CreateNetworkInterfaceTag {
		var out []ecs.CreateNetworkInterfaceTag
		for i := 0; i < len(kv); i += 2 {
			out = append(out, ecs.CreateNetworkInterfaceTag{Key: kv[i], Value: kv[i+1]})
		}
		return &out
	}
	var tooMany []string
	for i := range 21 {
		tooMany = append(tooMany, fmt.Sprintf("k%d", i), "v")
	}
	eleven := func(prefix string, v6 bool) *[]string {
		var s []string
		for i := range 11 {
			if v6 {
				s = append(s, fmt.Sprintf("%s%x", prefix, 0x100+i))
			} else {
				s = append(s, fmt.Sprintf("%s%d", prefix, 100+i))
			}
		}
		return &s
	}
	primary := e.inst.PrimaryIP.String()
	for _, tt := range []struct {
		name   string
		mod    func(*ecs.CreateNetworkInterfaceRequest)
		code   string
		status int
	}{
		// Parameters taken one at a time: InvalidParameter.Conflict (400).
		{"addresses and prefixes", func(r *ecs.CreateNetworkInterfaceRequest) {
			r.SecondaryPrivateIpAddressCount, r.Ipv4PrefixCount = requestsInt(1), requestsInt(1)
		}, "InvalidParameter.Conflict", 400},
		{"listed addresses and prefixes", func(r *ecs.CreateNetworkInterfaceRequest) {
			r.PrivateIpAddress, r.Ipv4PrefixCount = &[]string{"192.168.0.100"}, requestsInt(1)
		}, "InvalidParameter.Conflict", 400},
		{"count and list", func(r *ecs.CreateNetworkInterfaceRequest) {
			r.SecondaryPrivateIpAddressCount, r.PrivateIpAddress = requestsInt(1), &[]string{"192.168.0.100"}
		}, "InvalidParameter.Conflict", 400},
		{"SecurityGroupId and SecurityGroupIds", func(r *ecs.CreateNetworkInterfaceRequest) { r.SecurityGroupId = "sg-b" }, "InvalidParameter.Conflict", 400},
		{"Ipv6AddressCount and Ipv6Address", func(r *ecs.CreateNetworkInterfaceRequest) {
			r.Ipv6AddressCount, r.Ipv6Address = requestsInt(1), &[]string{"2408:4005:300::100"}
		}, "InvalidParameter.Conflict", 400},
		// Ranges.
		{"SecondaryPrivateIpAddressCount 50", func(r *ecs.CreateNetworkInterfaceRequest) { r.SecondaryPrivateIpAddressCount = requestsInt(50) }, "InvalidParameter", 400},
		{"SecondaryPrivateIpAddressCount 0", func(r *ecs.CreateNetworkInterfaceRequest) { r.SecondaryPrivateIpAddressCount = requestsInt(0) }, "InvalidParameter", 400},
		{"Ipv6AddressCount 11", func(r *ecs.CreateNetworkInterfaceRequest) { r.Ipv6AddressCount = requestsInt(11) }, "InvalidParameter", 400},
		{"Ipv6Address.N 11", func(r *ecs.CreateNetworkInterfaceRequest) { r.Ipv6Address = eleven("2408:4005:300::", true) }, "InvalidParameter", 400},
		{"PrivateIpAddress.N 11", func(r *ecs.CreateNetworkInterfaceRequest) { r.PrivateIpAddress = eleven("192.168.0.", false) }, "InvalidParameter", 400},
		{"Ipv4PrefixCount 11", func(r *ecs.CreateNetworkInterfaceRequest) { r.Ipv4PrefixCount = requestsInt(11) }, "InvalidParameter", 400},
		// Addresses.
		{"address outside the vSwitch", func(r *ecs.CreateNetworkInterfaceRequest) { r.PrivateIpAddress = &[]string{"192.168.1.10"} }, "InvalidVSwitchId.IpInvalid", 403},
		{"reserved address", func(r *ecs.CreateNetworkInterfaceRequest) { r.PrivateIpAddress = &[]string{"192.168.0.253"} }, "InvalidVSwitchId.IpInvalid", 403},
		{"address twice", func(r *ecs.CreateNetworkInterfaceRequest) {
			r.PrivateIpAddress = &[]string{"192.168.0.100", "192.168.0.100"}
		}, "InvalidIp.IpRepeated", 403},
		{"address in use", func(r *ecs.CreateNetworkInterfaceRequest) { r.PrivateIpAddress = &[]string{primary} }, "InvalidPrivateIpAddress.Duplicated", 400},
		{"PrimaryIpAddress outside", func(r *ecs.CreateNetworkInterfaceRequest) { r.PrimaryIpAddress = "10.0.0.5" }, "InvalidVSwitchId.IpInvalid", 403},
		{"PrimaryIpAddress in use", func(r *ecs.CreateNetworkInterfaceRequest) { r.PrimaryIpAddress = primary }, "InvalidPrivateIpAddress.Duplicated", 400},
		{"PrimaryIpAddress also secondary", func(r *ecs.CreateNetworkInterfaceRequest) {
			r.PrimaryIpAddress, r.PrivateIpAddress = "192.168.0.100", &[]string{"192.168.0.100"}
		}, "InvalidIp.IpRepeated", 403},
		{"IPv6 outside the vSwitch", func(r *ecs.CreateNetworkInterfaceRequest) { r.Ipv6Address = &[]string{"2408:4005:301::1"} }, "InvalidIp.Address", 403},
		{"IPv6 twice", func(r *ecs.CreateNetworkInterfaceRequest) {
			r.Ipv6Address = &[]string{"2408:4005:300::100", "2408:4005:300::100"}
		}, "InvalidIp.IpRepeated", 403},
		// Tags.
		{"duplicate tag key", func(r *ecs.CreateNetworkInterfaceRequest) { r.Tag = tags("a", "1", "a", "2") }, "Duplicate.TagKey", 400},
		{"acs: tag key", func(r *ecs.CreateNetworkInterfaceRequest) { r.Tag = tags("acs:x", "1") }, "InvalidTagKey.Malformed", 400},
		{"aliyun tag key", func(r *ecs.CreateNetworkInterfaceRequest) { r.Tag = tags("Aliyun-x", "1") }, "InvalidTagKey.Malformed", 400},
		{"long tag key", func(r *ecs.CreateNetworkInterfaceRequest) { r.Tag = tags(strings.Repeat("k", 129), "1") }, "InvalidTagKey.Malformed", 400},
		{"URL tag key", func(r *ecs.CreateNetworkInterfaceRequest) { r.Tag = tags("see http://x", "1") }, "InvalidTagKey.Malformed", 400},
		{"long tag value", func(r *ecs.CreateNetworkInterfaceRequest) { r.Tag = tags("k", strings.Repeat("v", 129)) }, "InvalidTagValue.Malformed", 400},
		{"URL tag value", func(r *ecs.CreateNetworkInterfaceRequest) { r.Tag = tags("k", "https://x") }, "InvalidTagValue.Malformed", 400},
		{"21 tags", func(r *ecs.CreateNetworkInterfaceRequest) { r.Tag = tags(tooMany...) }, "QuotaExceed.Tags", 403},
		// Description.
		{"short description", func(r *ecs.CreateNetworkInterfaceRequest) { r.Description = "x" }, "InvalidDescription.Malformed", 400},
		{"long description", func(r *ecs.CreateNetworkInterfaceRequest) { r.Description = strings.Repeat("d", 257) }, "InvalidDescription.Malformed", 400},
		{"URL description", func(r *ecs.CreateNetworkInterfaceRequest) { r.Description = "http://example" }, "InvalidDescription.Malformed", 400},
		// ClientToken: ASCII.
		{"non-ASCII token", func(r *ecs.CreateNetworkInterfaceRequest) { r.ClientToken = "tök" }, "InvalidParameter", 400},
		// Within every bound.
		{"128-character tag key", func(r *ecs.CreateNetworkInterfaceRequest) { r.Tag = tags(strings.Repeat("k", 128), "") }, "", 0},
		{"256-character description", func(r *ecs.CreateNetworkInterfaceRequest) { r.Description = strings.Repeat("d", 256) }, "", 0},
		{"10 IPv6", func(r *ecs.CreateNetworkInterfaceRequest) { r.Ipv6AddressCount = requestsInt(10) }, "", 0},
	} {
		req := base()
		tt.mod(req)
		_, err := e.ecs.CreateNetworkInterface(req)
		if c, s := code(t, err), status(t, err); c != tt.code || s != tt.status {
			t.Errorf("%s: %q (HTTP %d), want %q (HTTP %d)", tt.name, c, s, tt.code, tt.status)
		}
	}
	if err := e.sim.Check(); err != nil {
		t.Error(err)
	}

	// PrimaryIpAddress, PrivateIpAddress.N and Ipv6Address.N are honoured.
	req := base()
	req.PrimaryIpAddress = "192.168.0.200"
	req.PrivateIpAddress = &[]string{"192.168.0.202", "192.168.0.201"}
	req.Ipv6Address = &[]string{"2408:4005:300::beef"}
	resp, err := e.ecs.CreateNetworkInterface(req)
	if err != nil {
		t.Fatal(err)
	}
	got := e.describeENI(t, resp.NetworkInterfaceId)
	var addrs []string
	for _, s := range got.PrivateIpSets.PrivateIpSet {
		addrs = append(addrs, fmt.Sprintf("%s primary=%v", s.PrivateIpAddress, s.Primary))
	}
	want := []string{"192.168.0.200 primary=true", "192.168.0.201 primary=false", "192.168.0.202 primary=false"}
	if d := cmp.Diff(want, addrs); d != "" || got.PrivateIpAddress != "192.168.0.200" {
		t.Errorf("named addresses (-want +got):\n%s (primary %s)", d, got.PrivateIpAddress)
	}
	if len(got.Ipv6Sets.Ipv6Set) != 1 || got.Ipv6Sets.Ipv6Set[0].Ipv6Address != "2408:4005:300::beef" {
		t.Errorf("named IPv6: %+v", got.Ipv6Sets.Ipv6Set)
	}

	// IPv6 on a vSwitch without an IPv6 CIDR.
	e2 := newEnv(t, ecssim.Config{Zones: []string{"cn-hangzhou-h"}, VSwitches: []ecssim.VSwitchConfig{
		{ID: "vsw-v4", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.0.0/24")},
	}})
	r := ecs.CreateCreateNetworkInterfaceRequest()
	r.VSwitchId, r.SecurityGroupId, r.Ipv6AddressCount = "vsw-v4", "sg-sim", requestsInt(1)
	if _, err := e2.ecs.CreateNetworkInterface(r); code(t, err) != "InvalidVSwitch.Ipv6NotTurnOn" || status(t, err) != 403 {
		t.Errorf("IPv6 on a vSwitch without: %v", err)
	}
}

func TestAssignRules(t *testing.T) {
	e := newEnv(t, ecssim.Config{Delays: ecssim.Delays{Attach: ecssim.NoDelay}})
	eni := e.createENI(t, 1)
	id, primary, second := eni.NetworkInterfaceId, eni.PrivateIpAddress, eni.PrivateIpSets.PrivateIpSet[1].PrivateIpAddress
	assign := func(addrs ...string) error {
		req := ecs.CreateAssignPrivateIpAddressesRequest()
		req.NetworkInterfaceId, req.PrivateIpAddress = id, &addrs
		_, err := e.ecs.AssignPrivateIpAddresses(req)
		return err
	}
	addrs := func(from, n int) []string {
		var s []string
		for i := range n {
			s = append(s, fmt.Sprintf("192.168.0.%d", from+i))
		}
		return s
	}
	check := func(what string, err error, wantCode string, wantStatus int) {
		t.Helper()
		if c, s := code(t, err), status(t, err); c != wantCode || s != wantStatus {
			t.Errorf("%s: %q (HTTP %d), want %q (HTTP %d)", what, c, s, wantCode, wantStatus)
		}
	}
	check("assign outside the vSwitch", assign("192.168.1.9"), "InvalidVSwitchId.IpInvalid", 403)
	check("assign the gateway", assign("192.168.0.253"), "InvalidVSwitchId.IpInvalid", 403)
	check("assign twice in a call", assign("192.168.0.150", "192.168.0.150"), "InvalidIp.IpRepeated", 403)
	check("assign one held", assign(primary), "InvalidIp.IpAssigned", 403)
	// An Available ENI takes at most 10 per call (API reference).
	check("11 on an Available ENI", assign(addrs(150, 11)...), "InvalidOperation.Ipv4CountExceeded", 403)
	check("10 on an Available ENI", assign(addrs(150, 10)...), "", 0)

	// Unassign: the primary is no secondary address (Terway: ECS answers
	// InvalidIp.IpUnassigned), and nothing of the call is done.
	un := func(addrs ...string) error {
		req := ecs.CreateUnassignPrivateIpAddressesRequest()
		req.NetworkInterfaceId, req.PrivateIpAddress = id, &addrs
		_, err := e.ecs.UnassignPrivateIpAddresses(req)
		return err
	}
	check("unassign the primary", un(primary), "InvalidIp.IpUnassigned", 403)
	check("unassign the primary with a secondary", un(second, primary), "InvalidIp.IpUnassigned", 403)
	if d := e.describeENI(t, id); len(d.PrivateIpSets.PrivateIpSet) != 12 || d.PrivateIpAddress != primary {
		t.Errorf("after refused unassigns: %d addresses, primary %s", len(d.PrivateIpSets.PrivateIpSet), d.PrivateIpAddress)
	}
	check("unassign outside the vSwitch", un("192.168.1.9"), "InvalidVSwitchId.IpInvalid", 403)
	check("unassign 33", un(addrs(150, 33)...), "InvalidParameter", 400)
	check("unassign a secondary", un(second), "", 0)

	// IPv6: an Available ENI holds at most 10 (API reference); 1..10 per
	// call (v7 model).
	a6 := func(n int, list ...string) error {
		req := ecs.CreateAssignIpv6AddressesRequest()
		req.NetworkInterfaceId = id
		if n > 0 {
			req.Ipv6AddressCount = requestsInt(n)
		} else {
			req.Ipv6Address = &list
		}
		_, err := e.ecs.AssignIpv6Addresses(req)
		return err
	}
	check("IPv6 count 11", a6(11), "InvalidParameter", 400)
	check("IPv6 outside the vSwitch", a6(0, "2408:4005:301::1"), "InvalidIp.Address", 403)
	check("IPv6 twice", a6(0, "2408:4005:300::77", "2408:4005:300::77"), "InvalidIp.IpRepeated", 403)
	check("IPv6 malformed", a6(0, "not-an-address"), "InvalidIp.Address", 403)
	check("10 IPv6 on an Available ENI", a6(9, ""), "", 0)
	check("named IPv6", a6(0, "2408:4005:300::77"), "", 0)
	check("an 11th IPv6 on an Available ENI", a6(1), "InvalidOperation.Ipv6CountExceeded", 403)
	u6 := ecs.CreateUnassignIpv6AddressesRequest()
	u6.NetworkInterfaceId, u6.Ipv6Address = id, &[]string{"2408:4005:301::1"}
	_, err := e.ecs.UnassignIpv6Addresses(u6)
	check("unassign IPv6 outside the vSwitch", err, "InvalidIp.Address", 403)
	if err := e.sim.Check(); err != nil {
		t.Error(err)
	}
}

// TestLifecycleResend: a detach re-sent while the ENI is Detaching, and a
// delete re-sent while it is Deleting, are accepted and change nothing (API
// reference: the ENI must be "Detaching or InUse"; a detach or delete stuck
// in its state may be re-initiated).
func TestLifecycleResend(t *testing.T) {
	e := newEnv(t, ecssim.Config{Delays: ecssim.Delays{Attach: ecssim.NoDelay, Detach: 300 * time.Millisecond, Delete: 300 * time.Millisecond}})
	id := e.createENI(t, 0).NetworkInterfaceId
	if err := attach(t, e, id); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, id, "InUse")
	detach := func() error {
		req := ecs.CreateDetachNetworkInterfaceRequest()
		req.NetworkInterfaceId, req.InstanceId = id, e.inst.ID
		_, err := e.ecs.DetachNetworkInterface(req)
		return err
	}
	del := func() error {
		req := ecs.CreateDeleteNetworkInterfaceRequest()
		req.NetworkInterfaceId = id
		_, err := e.ecs.DeleteNetworkInterface(req)
		return err
	}
	if err := del(); code(t, err) != "InvalidOperation.InvalidEniState" {
		t.Errorf("delete while InUse: %v", err)
	}
	for i := range 2 {
		if err := detach(); err != nil {
			t.Fatalf("detach %d: %v", i, err)
		}
		if s := e.describeENI(t, id).Status; s != "Detaching" {
			t.Fatalf("after detach %d: %s", i, s)
		}
	}
	e.waitStatus(t, id, "Available")
	if err := detach(); code(t, err) != "InvalidOperation.InvalidEniState" {
		t.Errorf("detach while Available: %v", err)
	}
	for i := range 2 {
		if err := del(); err != nil {
			t.Fatalf("delete %d: %v", i, err)
		}
		if s := e.describeENI(t, id).Status; s != "Deleting" {
			t.Fatalf("after delete %d: %s", i, s)
		}
	}
	e.waitStatus(t, id, "")
	if err := del(); code(t, err) != "InvalidEniId.NotFound" {
		t.Errorf("delete when gone: %v", err)
	}
	if c := e.sim.Counters(); c["DetachNetworkInterface"]["ok"] != 2 || c["DeleteNetworkInterface"]["ok"] != 2 {
		t.Errorf("counters %v", c)
	}
}

// TestConflictStatus: OperationConflict answers the status of ECS's common
// error table, 409; the ENI actions' dotted Operation.Conflict 403.
func TestConflictStatus(t *testing.T) {
	e := newEnv(t, ecssim.Config{})
	for code, want := range map[string]int{"OperationConflict": 409, "Operation.Conflict": 403, "LastTokenProcessing": 403} {
		e.sim.InjectFault(ecssim.Fault{Action: "DescribeNetworkInterfaces", Code: code})
		_, err := e.ecs.DescribeNetworkInterfaces(ecs.CreateDescribeNetworkInterfacesRequest())
		if got := status(t, err); got != want {
			t.Errorf("%s: HTTP %d, want %d", code, got, want)
		}
	}
}
