package ecssim_test

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/vpc"
	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/cloud/ecssim"
)

// available is the vSwitch's AvailableIpAddressCount as the VPC API says.
func (e *env) available(t *testing.T, vsw string) int {
	t.Helper()
	req := vpc.CreateDescribeVSwitchesRequest()
	req.VSwitchId = vsw
	resp, err := e.vpc.DescribeVSwitches(req)
	if err != nil || len(resp.VSwitches.VSwitch) != 1 {
		t.Fatalf("describe %s: %v, %v", vsw, resp, err)
	}
	return int(resp.VSwitches.VSwitch[0].AvailableIpAddressCount)
}

// describeENI describes one ENI through the SDK.
func (e *env) describeENI(t *testing.T, id string) ecs.NetworkInterfaceSet {
	t.Helper()
	req := ecs.CreateDescribeNetworkInterfacesRequest()
	req.NetworkInterfaceId = &[]string{id}
	resp, err := e.ecs.DescribeNetworkInterfaces(req)
	if err != nil || len(resp.NetworkInterfaceSets.NetworkInterfaceSet) != 1 {
		t.Fatalf("describe %s: %v, %v", id, resp, err)
	}
	return resp.NetworkInterfaceSets.NetworkInterfaceSet[0]
}

func describedPrefixes(s ecs.NetworkInterfaceSet) []string {
	var out []string
	for _, p := range s.Ipv4PrefixSets.Ipv4PrefixSet {
		out = append(out, p.Ipv4Prefix)
	}
	return out
}

// assignPrefixes asks for n prefixes on id; the prefixes got and the code.
func (e *env) assignPrefixes(t *testing.T, id string, n int, token string) ([]string, string) {
	t.Helper()
	req := ecs.CreateAssignPrivateIpAddressesRequest()
	req.NetworkInterfaceId, req.ClientToken = id, token
	req.Ipv4PrefixCount = requestsInt(n)
	resp, err := e.ecs.AssignPrivateIpAddresses(req)
	if err != nil {
		return nil, code(t, err)
	}
	return resp.AssignedPrivateIpAddressesSet.Ipv4PrefixSet.Ipv4Prefixes, ""
}

func (e *env) unassign(t *testing.T, id string, addrs, prefixes []string) string {
	t.Helper()
	req := ecs.CreateUnassignPrivateIpAddressesRequest()
	req.NetworkInterfaceId = id
	if len(addrs) > 0 {
		req.PrivateIpAddress = &addrs
	}
	if len(prefixes) > 0 {
		req.Ipv4Prefix = &prefixes
	}
	_, err := e.ecs.UnassignPrivateIpAddresses(req)
	return code(t, err)
}

// checkPrefix fails unless s is an aligned /28 inside cidr none of whose
// addresses is reserved (the first of the CIDR, the last three).
func checkPrefix(t *testing.T, s string, cidr netip.Prefix) netip.Prefix {
	t.Helper()
	q, err := netip.ParsePrefix(s)
	if err != nil || q.Bits() != 28 || q.Masked() != q || !cidr.Contains(q.Addr()) {
		t.Fatalf("prefix %q is not an aligned /28 of %s", s, cidr)
	}
	last := q.Addr()
	for range 15 {
		last = last.Next()
	}
	end := cidr.Addr()
	for range (1 << (32 - cidr.Bits())) - 4 {
		end = end.Next()
	}
	if q.Addr() == cidr.Addr() || last.Compare(end) > 0 {
		t.Errorf("prefix %s holds a reserved address of %s", q, cidr)
	}
	return q
}

func TestPrefixes(t *testing.T) {
	e := newEnv(t, ecssim.Config{Delays: ecssim.Delays{Attach: ecssim.NoDelay}})
	cidr := netip.MustParsePrefix("192.168.0.0/24")
	free := e.available(t, "vsw-sim-h")

	// Secondary addresses and prefixes are not taken in one create.
	req := ecs.CreateCreateNetworkInterfaceRequest()
	req.VSwitchId, req.SecurityGroupId = "vsw-sim-h", "sg-sim"
	req.SecondaryPrivateIpAddressCount = requestsInt(1)
	req.Ipv4PrefixCount = requestsInt(2)
	if _, err := e.ecs.CreateNetworkInterface(req); code(t, err) != "InvalidParameter.Conflict" {
		t.Fatalf("create with an address and prefixes: %v, want InvalidParameter.Conflict", err)
	}
	// Created with 2 prefixes: the primary and 32 addresses.
	req = ecs.CreateCreateNetworkInterfaceRequest() // the SDK keeps a request's parameters once sent
	req.VSwitchId, req.SecurityGroupId = "vsw-sim-h", "sg-sim"
	req.Ipv4PrefixCount = requestsInt(2)
	created, err := e.ecs.CreateNetworkInterface(req)
	if err != nil {
		t.Fatal(err)
	}
	id := created.NetworkInterfaceId
	var fromCreate []string
	for _, p := range created.Ipv4PrefixSets.Ipv4PrefixSet {
		fromCreate = append(fromCreate, p.Ipv4Prefix)
		checkPrefix(t, p.Ipv4Prefix, cidr)
	}
	if len(fromCreate) != 2 || len(created.PrivateIpSets.PrivateIpSet) != 1 {
		t.Fatalf("created with prefixes %v, addresses %v; want 2 and the primary", fromCreate, created.PrivateIpSets.PrivateIpSet)
	}
	if got, want := e.available(t, "vsw-sim-h"), free-1-32; got != want {
		t.Errorf("AvailableIpAddressCount %d after a create with 2 prefixes, want %d", got, want)
	}
	if d := cmp.Diff(fromCreate, describedPrefixes(e.describeENI(t, id))); d != "" {
		t.Errorf("described prefixes (-create +describe):\n%s", d)
	}

	// Three more; Describe lists all five, sorted; 48 fewer free.
	got, c := e.assignPrefixes(t, id, 3, "")
	if c != "" || len(got) != 3 {
		t.Fatalf("assign 3 prefixes: %v, %s", got, c)
	}
	all := append(slices.Clone(fromCreate), got...)
	seen := map[netip.Prefix]bool{}
	for _, s := range all {
		q := checkPrefix(t, s, cidr)
		for o := range seen {
			if o.Overlaps(q) {
				t.Errorf("prefixes %s and %s overlap", o, q)
			}
		}
		seen[q] = true
		for _, a := range created.PrivateIpSets.PrivateIpSet {
			if q.Contains(netip.MustParseAddr(a.PrivateIpAddress)) {
				t.Errorf("prefix %s holds the ENI's address %s", q, a.PrivateIpAddress)
			}
		}
	}
	slices.SortFunc(all, func(a, b string) int { return netip.MustParsePrefix(a).Compare(netip.MustParsePrefix(b)) })
	if d := cmp.Diff(all, describedPrefixes(e.describeENI(t, id))); d != "" {
		t.Errorf("described prefixes (-want +got):\n%s", d)
	}
	if got, want := e.available(t, "vsw-sim-h"), free-1-5*16; got != want {
		t.Errorf("AvailableIpAddressCount %d with 5 prefixes, want %d", got, want)
	}

	// An address inside the prefix is held: nobody else gets it, and it is
	// no secondary address of the ENI to unassign alone.
	inside := netip.MustParsePrefix(all[0]).Addr().Next()
	other := e.createENI(t, 0).NetworkInterfaceId
	as := ecs.CreateAssignPrivateIpAddressesRequest()
	as.NetworkInterfaceId = other
	as.PrivateIpAddress = &[]string{inside.String()}
	if _, err := e.ecs.AssignPrivateIpAddresses(as); code(t, err) != "InvalidIp.IpAssigned" {
		t.Errorf("assign an address of another ENI's prefix: %v, want InvalidIp.IpAssigned", err)
	}
	if c := e.unassign(t, id, []string{inside.String()}, nil); c != "InvalidIp.IpUnassigned" {
		t.Errorf("unassign one address of a prefix: %q, want InvalidIp.IpUnassigned", c)
	}
	// A prefix the ENI lacks: refused; with one it holds: that one goes.
	if c := e.unassign(t, id, nil, []string{"192.168.0.240/28"}); c != "InvalidIp.IpUnassigned" {
		t.Errorf("unassign a prefix the ENI lacks: %q, want InvalidIp.IpUnassigned", c)
	}
	if c := e.unassign(t, id, nil, []string{all[0], "192.168.0.240/28"}); c != "" {
		t.Errorf("unassign a held prefix with a foreign one: %q", c)
	}
	if d := cmp.Diff(all[1:], describedPrefixes(e.describeENI(t, id))); d != "" {
		t.Errorf("prefixes after unassign (-want +got):\n%s", d)
	}
	if got, want := e.available(t, "vsw-sim-h"), free-1-4*16-1; got != want {
		t.Errorf("AvailableIpAddressCount %d after unassigning a prefix, want %d", got, want)
	}

	// Parameters: 1..10 per call; prefixes and addresses not in one call.
	if _, c := e.assignPrefixes(t, id, 11, ""); c != "InvalidParameter" {
		t.Errorf("11 prefixes in one call: %q, want InvalidParameter", c)
	}
	as = ecs.CreateAssignPrivateIpAddressesRequest()
	as.NetworkInterfaceId = id
	as.Ipv4PrefixCount, as.SecondaryPrivateIpAddressCount = requestsInt(1), requestsInt(1)
	if _, err := e.ecs.AssignPrivateIpAddresses(as); code(t, err) != "InvalidParameter" {
		t.Errorf("prefixes and addresses in one call: %v, want InvalidParameter", err)
	}
	as = ecs.CreateAssignPrivateIpAddressesRequest()
	as.NetworkInterfaceId = other
	as.Ipv4Prefix = &[]string{"192.168.0.8/28"} // not aligned
	if _, err := e.ecs.AssignPrivateIpAddresses(as); code(t, err) != "InvalidParameter" {
		t.Errorf("an unaligned prefix: %v, want InvalidParameter", err)
	}
	as.Ipv4Prefix = &[]string{all[1]} // held by id
	if _, err := e.ecs.AssignPrivateIpAddresses(as); code(t, err) != "InvalidIp.IpAssigned" {
		t.Errorf("another ENI's prefix: %v, want InvalidIp.IpAssigned", err)
	}

	// Deleting the ENI frees its prefixes.
	del := ecs.CreateDeleteNetworkInterfaceRequest()
	del.NetworkInterfaceId = id
	if _, err := e.ecs.DeleteNetworkInterface(del); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, id, "")
	if got, want := e.available(t, "vsw-sim-h"), free-1; got != want { // other's primary
		t.Errorf("AvailableIpAddressCount %d after deleting the ENI, want %d", got, want)
	}
	if err := e.sim.Check(); err != nil {
		t.Error(err)
	}
}

// A prefix takes one private-IPv4 slot, shared with secondary addresses:
// ecs.g7.large has 6 (the primary address included).
func TestPrefixSlots(t *testing.T) {
	e := newEnv(t, ecssim.Config{Delays: ecssim.Delays{Attach: ecssim.NoDelay}})
	inst, err := e.sim.AddInstance(ecssim.InstanceSpec{InstanceType: "ecs.g7.large", VSwitchID: "vsw-sim-h"})
	if err != nil {
		t.Fatal(err)
	}
	e.inst = inst
	id := e.createENI(t, 1).NetworkInterfaceId
	if _, c := e.assignPrefixes(t, id, 5, ""); c != "" {
		t.Fatalf("5 prefixes on an Available ENI: %s", c)
	}
	// 1 + 1 + 5 = 7 slots > 6.
	if err := attach(t, e, id); code(t, err) != "InvalidOperation.Ipv4CountExceeded" {
		t.Errorf("attach with 7 slots on a 6-slot type: %v", err)
	}
	got := describedPrefixes(e.describeENI(t, id))
	if c := e.unassign(t, id, nil, got[:1]); c != "" {
		t.Fatal(c)
	}
	if err := attach(t, e, id); err != nil {
		t.Fatalf("attach with 6 slots: %v", err)
	}
	e.waitStatus(t, id, "InUse")
	if _, c := e.assignPrefixes(t, id, 1, ""); c != "InvalidOperation.Ipv4CountExceeded" {
		t.Errorf("a prefix beyond the slots: %q", c)
	}
	as := ecs.CreateAssignPrivateIpAddressesRequest()
	as.NetworkInterfaceId = id
	as.SecondaryPrivateIpAddressCount = requestsInt(1)
	if _, err := e.ecs.AssignPrivateIpAddresses(as); code(t, err) != "InvalidOperation.Ipv4CountExceeded" {
		t.Errorf("an address beyond the slots (prefixes hold them): %v", err)
	}
	// A secondary address gone frees a slot for a prefix.
	if c := e.unassign(t, id, []string{e.describeENI(t, id).PrivateIpSets.PrivateIpSet[1].PrivateIpAddress}, nil); c != "" {
		t.Fatal(c)
	}
	if _, c := e.assignPrefixes(t, id, 1, ""); c != "" {
		t.Errorf("a prefix in the slot an address left: %q", c)
	}
	if err := e.sim.Check(); err != nil {
		t.Error(err)
	}
}

// On an Available ENI, 49 prefixes in all (50 slots with the primary
// address), 10 a call; a /24 holds 14 usable /28s.
func TestPrefixLimitsUnattached(t *testing.T) {
	e := newEnv(t, ecssim.Config{Zones: []string{"cn-hangzhou-h"}, VSwitches: []ecssim.VSwitchConfig{
		{ID: "vsw-sim-h", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.0.0/24")},
		{ID: "vsw-big", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.16.0/20")},
	}})
	req := ecs.CreateCreateNetworkInterfaceRequest()
	req.VSwitchId, req.SecurityGroupId = "vsw-big", "sg-sim"
	resp, err := e.ecs.CreateNetworkInterface(req)
	if err != nil {
		t.Fatal(err)
	}
	big := resp.NetworkInterfaceId
	for range 4 {
		if _, c := e.assignPrefixes(t, big, 10, ""); c != "" {
			t.Fatal(c)
		}
	}
	if _, c := e.assignPrefixes(t, big, 10, ""); c != "InvalidOperation.Ipv4CountExceeded" {
		t.Errorf("50 prefixes on an Available ENI: %q, want InvalidOperation.Ipv4CountExceeded", c)
	}
	if _, c := e.assignPrefixes(t, big, 9, ""); c != "" {
		t.Errorf("49 prefixes on an Available ENI: %q", c)
	}
	small := e.createENI(t, 0).NetworkInterfaceId
	if _, c := e.assignPrefixes(t, small, 10, ""); c != "" {
		t.Fatal(c)
	}
	if _, c := e.assignPrefixes(t, small, 5, ""); c != "InvalidVSwitchId.IpNotEnough" {
		t.Errorf("15 /28s of a /24: %q, want InvalidVSwitchId.IpNotEnough", c)
	}
	if _, c := e.assignPrefixes(t, small, 4, ""); c != "" {
		t.Errorf("14 /28s of a /24: %q", c)
	}
	if err := e.sim.Check(); err != nil {
		t.Error(err)
	}
}

// A fragmented vSwitch refuses prefixes while it gives single addresses;
// defragmented, it gives prefixes again. The refusal burns a ClientToken
// like any other.
func TestFragmentation(t *testing.T) {
	e := newEnv(t, ecssim.Config{})
	id := e.createENI(t, 0).NetworkInterfaceId
	free := e.available(t, "vsw-sim-h")
	var n ecssim.AddressCount
	control(t, e, "POST", "/_sim/fragment", ecssim.VSwitchRequest{VSwitchID: "vsw-sim-h"}, &n)
	if n.Addresses != 14 { // every usable /28 of the /24 was free
		t.Errorf("fragment took %d addresses, want 14", n.Addresses)
	}
	if got := e.available(t, "vsw-sim-h"); got != free-14 {
		t.Errorf("AvailableIpAddressCount %d after fragmenting, want %d", got, free-14)
	}
	var st ecssim.State
	control(t, e, "GET", "/_sim/state", nil, &st)
	for _, v := range st.VSwitches {
		if v.ID == "vsw-sim-h" && (v.FreePrefixes != 0 || len(v.Held) != 14) {
			t.Errorf("fragmented vSwitch in the state: %d free prefixes, %d held", v.FreePrefixes, len(v.Held))
		}
	}
	if _, c := e.assignPrefixes(t, id, 1, "tok-frag"); c != "InvalidVSwitchId.IpNotEnough" {
		t.Errorf("a prefix from a fragmented vSwitch: %q, want InvalidVSwitchId.IpNotEnough", c)
	}
	req := ecs.CreateCreateNetworkInterfaceRequest()
	req.VSwitchId, req.SecurityGroupId = "vsw-sim-h", "sg-sim"
	req.Ipv4PrefixCount = requestsInt(1)
	if _, err := e.ecs.CreateNetworkInterface(req); code(t, err) != "InvalidVSwitchId.IpNotEnough" {
		t.Errorf("create with a prefix in a fragmented vSwitch: %v", err)
	}
	if got := len(e.sim.Dump().ENIs); got != 2 {
		t.Errorf("%d ENIs after a refused create, want 2", got)
	}
	as := ecs.CreateAssignPrivateIpAddressesRequest()
	as.NetworkInterfaceId = id
	as.SecondaryPrivateIpAddressCount = requestsInt(10)
	if _, err := e.ecs.AssignPrivateIpAddresses(as); err != nil {
		t.Errorf("single addresses from a fragmented vSwitch: %v", err)
	}
	if got := e.available(t, "vsw-sim-h"); got != free-14-10 {
		t.Errorf("AvailableIpAddressCount %d, want %d", got, free-14-10)
	}

	control(t, e, "POST", "/_sim/defragment", ecssim.VSwitchRequest{VSwitchID: "vsw-sim-h"}, &n)
	if n.Addresses != 14 {
		t.Errorf("defragment released %d addresses, want 14", n.Addresses)
	}
	if _, c := e.assignPrefixes(t, id, 1, "tok-frag"); c != "IdempotentFailed" {
		t.Errorf("resend of the refused token: %q, want IdempotentFailed", c)
	}
	got, c := e.assignPrefixes(t, id, 1, "tok-2")
	if c != "" {
		t.Fatalf("a prefix once defragmented: %s", c)
	}
	// The same token again: the same prefix, nothing new; other params: mismatch.
	again, c := e.assignPrefixes(t, id, 1, "tok-2")
	if c != "" || !cmp.Equal(got, again) {
		t.Errorf("replayed prefix assign: %v %q, first %v", again, c, got)
	}
	if p := describedPrefixes(e.describeENI(t, id)); len(p) != 1 {
		t.Errorf("%d prefixes after a replayed assign, want 1", len(p))
	}
	if _, c := e.assignPrefixes(t, id, 2, "tok-2"); c != "IdempotentParameterMismatch" {
		t.Errorf("token reused with another count: %q", c)
	}
	if got := e.sim.Counters()["AssignPrivateIpAddresses"]["InvalidVSwitchId.IpNotEnough"]; got != 1 {
		t.Errorf("IpNotEnough counted %d times, want 1", got)
	}
	if _, err := e.sim.FragmentVSwitch("vsw-nosuch"); err == nil {
		t.Error("fragmenting an unknown vSwitch succeeded")
	}
	if err := e.sim.Check(); err != nil {
		t.Error(err)
	}
}

// The state file keeps prefixes and what fragmentation holds.
func TestPrefixStatePersists(t *testing.T) {
	file := t.TempDir() + "/state.json"
	e := newEnv(t, ecssim.Config{StateFile: file})
	id := e.createENI(t, 0).NetworkInterfaceId
	got, c := e.assignPrefixes(t, id, 2, "")
	if c != "" {
		t.Fatal(c)
	}
	if _, err := e.sim.FragmentVSwitch("vsw-sim-h"); err != nil {
		t.Fatal(err)
	}
	before := e.sim.Dump()
	again, err := ecssim.New(ecssim.Config{StateFile: file})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	after := again.Dump()
	if d := cmp.Diff(before, after, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); d != "" {
		t.Errorf("state after reload (-before +after):\n%s", d)
	}
	for _, x := range after.ENIs {
		if x.ID == id && len(x.IPv4Prefixes) != len(got) {
			t.Errorf("reloaded ENI has prefixes %v, want %v", x.IPv4Prefixes, got)
		}
	}
	if err := again.Check(); err != nil {
		t.Error(err)
	}
}

func TestModifySecurityGroups(t *testing.T) {
	e := newEnv(t, ecssim.Config{SecurityGroups: []string{"sg-sim", "sg-a", "sg-b"}})
	id := e.createENI(t, 0).NetworkInterfaceId
	modify := func(eni string, sgs ...string) string {
		req := ecs.CreateModifyNetworkInterfaceAttributeRequest()
		req.NetworkInterfaceId = eni
		req.SecurityGroupId = &sgs
		_, err := e.ecs.ModifyNetworkInterfaceAttribute(req)
		return code(t, err)
	}
	if c := modify(id, "sg-b", "sg-a"); c != "" {
		t.Fatalf("modify: %s", c)
	}
	if d := cmp.Diff([]string{"sg-b", "sg-a"}, e.describeENI(t, id).SecurityGroupIds.SecurityGroupId); d != "" {
		t.Errorf("groups after modify (-want +got):\n%s", d)
	}
	for _, tc := range []struct {
		eni  string
		sgs  []string
		want string
	}{
		{"eni-nosuch", []string{"sg-a"}, "InvalidEniId.NotFound"},
		{id, []string{"sg-a", "sg-nosuch"}, "InvalidSecurityGroupId.NotFound"},
		{id, []string{"sg-a", "sg-a"}, "InvalidParameter"},
		{id, []string{"sg-1", "sg-2", "sg-3", "sg-4", "sg-5", "sg-6", "sg-7", "sg-8", "sg-9", "sg-10", "sg-11"}, "InvalidParameter"},
	} {
		if c := modify(tc.eni, tc.sgs...); c != tc.want {
			t.Errorf("modify %s to %v: %q, want %q", tc.eni, tc.sgs, c, tc.want)
		}
	}
	// A refused change changes nothing.
	if d := cmp.Diff([]string{"sg-b", "sg-a"}, e.describeENI(t, id).SecurityGroupIds.SecurityGroupId); d != "" {
		t.Errorf("groups after refused changes (-want +got):\n%s", d)
	}
	// Deleting: the ENI's state refuses.
	del := ecs.CreateDeleteNetworkInterfaceRequest()
	del.NetworkInterfaceId = e.createENI(t, 0).NetworkInterfaceId
	e.sim.SetSettings(ecssim.Settings{})
	if _, err := e.ecs.DeleteNetworkInterface(del); err != nil {
		t.Fatal(err)
	}
	if c := modify(del.NetworkInterfaceId, "sg-a"); c != "InvalidOperation.InvalidEniState" && c != "InvalidEniId.NotFound" {
		t.Errorf("modify a deleting ENI: %q", c)
	}

	// With conflicts on, a modify overlapping another mutation of the ENI
	// is refused with OperationConflict.
	e.sim.SetSettings(ecssim.Settings{Conflicts: true, Latency: ecssim.Latency{PerAction: map[string]ecssim.LatencyDist{
		"AssignPrivateIpAddresses": {Fixed: 300 * time.Millisecond}}}})
	other := ecsClient(t, e.host, ecssim.DefaultAccessKeyID, ecssim.DefaultAccessKeySecret)
	first := make(chan error, 1)
	go func() {
		req := ecs.CreateAssignPrivateIpAddressesRequest()
		req.NetworkInterfaceId = id
		req.SecondaryPrivateIpAddressCount = requestsInt(1)
		_, err := other.AssignPrivateIpAddresses(req)
		first <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if c := modify(id, "sg-sim"); c != "OperationConflict" {
		t.Errorf("modify during an assign: %q, want OperationConflict", c)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if c := modify(id, "sg-sim"); c != "" {
		t.Errorf("modify after the assign: %q", c)
	}
	if n := e.sim.Counters()["ModifyNetworkInterfaceAttribute"]["ok"]; n != 2 {
		t.Errorf("%d successful modifies counted, want 2", n)
	}
}

// Hooks see prefixes as their addresses (so a hook routing addresses
// routes all 16), and DescribeInstances lists an attached ENI's prefixes.
func TestPrefixHooks(t *testing.T) {
	e := newEnv(t, ecssim.Config{Delays: ecssim.Delays{Attach: ecssim.NoDelay}})
	id := e.createENI(t, 0).NetworkInterfaceId
	if _, c := e.assignPrefixes(t, id, 1, ""); c != "" {
		t.Fatal(c)
	}
	events := make(chan ecssim.ENIEvent, 4)
	record := func(ev ecssim.ENIEvent) { events <- ev }
	e.sim.SetHooks(ecssim.Hooks{OnAttach: record, OnAssign: record, OnUnassign: record})
	if err := attach(t, e, id); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, id, "InUse")
	ev := <-events
	if len(ev.IPv4Prefixes) != 1 || len(ev.IPv4) != 16 || !ev.IPv4Prefixes[0].Contains(ev.IPv4[15]) {
		t.Errorf("attach event: prefixes %v, %d addresses; want 1 prefix and its 16 addresses", ev.IPv4Prefixes, len(ev.IPv4))
	}
	got, c := e.assignPrefixes(t, id, 1, "")
	if c != "" {
		t.Fatal(c)
	}
	ev = <-events
	if len(ev.IPv4Prefixes) != 1 || ev.IPv4Prefixes[0].String() != got[0] || len(ev.IPv4) != 16 {
		t.Errorf("assign event: prefixes %v, %d addresses; want %s and its 16 addresses", ev.IPv4Prefixes, len(ev.IPv4), got[0])
	}
	if c := e.unassign(t, id, nil, got); c != "" {
		t.Fatal(c)
	}
	ev = <-events
	if len(ev.IPv4Prefixes) != 1 || ev.IPv4Prefixes[0].String() != got[0] || len(ev.IPv4) != 16 {
		t.Errorf("unassign event: prefixes %v, %d addresses; want %s and its 16 addresses", ev.IPv4Prefixes, len(ev.IPv4), got[0])
	}

	di := ecs.CreateDescribeInstancesRequest()
	di.InstanceIds = `["` + e.inst.ID + `"]`
	insts, err := e.ecs.DescribeInstances(di)
	if err != nil || len(insts.Instances.Instance) != 1 {
		t.Fatalf("DescribeInstances: %v, %v", insts, err)
	}
	n := 0
	for _, nic := range insts.Instances.Instance[0].NetworkInterfaces.NetworkInterface {
		if nic.NetworkInterfaceId == id {
			n = len(nic.Ipv4PrefixSets.Ipv4PrefixSet)
		}
	}
	if n != 1 {
		t.Errorf("DescribeInstances lists %d prefixes of %s, want 1", n, id)
	}
}
