package ecssim_test

import (
	"errors"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk"
	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"
	sdkerrors "github.com/aliyun/alibaba-cloud-sdk-go/sdk/errors"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/vpc"
	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/cloud/ecssim"
)

// env is a simulator served by httptest with SDK clients pointed at it.
type env struct {
	sim  *ecssim.Server
	inst ecssim.InstanceInfo
	ecs  *ecs.Client
	vpc  *vpc.Client
	host string
}

func newEnv(t testing.TB, cfg ecssim.Config) *env {
	t.Helper()
	sim, err := ecssim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := sim.AddInstance(ecssim.InstanceSpec{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim.Handler())
	t.Cleanup(func() {
		ts.Close()
		if err := sim.Close(); err != nil {
			t.Error(err)
		}
	})
	host := strings.TrimPrefix(ts.URL, "http://")
	return &env{sim: sim, inst: inst, host: host,
		ecs: ecsClient(t, host, ecssim.DefaultAccessKeyID, ecssim.DefaultAccessKeySecret),
		vpc: vpcClient(t, host)}
}

func ecsClient(t testing.TB, host, id, secret string) *ecs.Client {
	t.Helper()
	c, err := ecs.NewClientWithOptions("cn-hangzhou", sdk.NewConfig(), credentials.NewStaticAKCredentialsProvider(id, secret))
	if err != nil {
		t.Fatal(err)
	}
	c.Domain = host
	return c
}

func vpcClient(t testing.TB, host string) *vpc.Client {
	t.Helper()
	c, err := vpc.NewClientWithOptions("cn-hangzhou", sdk.NewConfig(),
		credentials.NewStaticAKCredentialsProvider(ecssim.DefaultAccessKeyID, ecssim.DefaultAccessKeySecret))
	if err != nil {
		t.Fatal(err)
	}
	c.Domain = host
	return c
}

// code returns the API error code of err ("" when err is nil).
func code(t testing.TB, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var se *sdkerrors.ServerError
	if !errors.As(err, &se) {
		t.Fatalf("not a server error: %v", err)
	}
	return se.ErrorCode()
}

func (e *env) createENI(t testing.TB, secondary int) *ecs.CreateNetworkInterfaceResponse {
	t.Helper()
	req := ecs.CreateCreateNetworkInterfaceRequest()
	req.VSwitchId = "vsw-sim-h"
	req.SecurityGroupIds = &[]string{"sg-sim"}
	req.Tag = &[]ecs.CreateNetworkInterfaceTag{{Key: "owner", Value: "test"}}
	if secondary > 0 {
		req.SecondaryPrivateIpAddressCount = countParam(secondary)
	}
	resp, err := e.ecs.CreateNetworkInterface(req)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return resp
}

func (e *env) waitStatus(t testing.TB, id, want string) ecs.NetworkInterfaceSet {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		req := ecs.CreateDescribeNetworkInterfacesRequest()
		req.NetworkInterfaceId = &[]string{id}
		resp, err := e.ecs.DescribeNetworkInterfaces(req)
		if err != nil {
			t.Fatalf("describe %s: %v", id, err)
		}
		set := resp.NetworkInterfaceSets.NetworkInterfaceSet
		if want == "" && len(set) == 0 {
			return ecs.NetworkInterfaceSet{}
		}
		if len(set) == 1 && set[0].Status == want {
			return set[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("eni %s never became %q: %+v", id, want, set)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestLifecycleWithSDK(t *testing.T) {
	e := newEnv(t, ecssim.Config{})

	di := ecs.CreateDescribeInstancesRequest()
	di.InstanceIds = `["` + e.inst.ID + `"]`
	insts, err := e.ecs.DescribeInstances(di)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(insts.Instances.Instance); n != 1 {
		t.Fatalf("DescribeInstances: %d instances", n)
	}
	in := insts.Instances.Instance[0]
	gotInst := []string{in.InstanceId, in.InstanceType, in.ZoneId, in.VpcAttributes.VpcId, in.VpcAttributes.VSwitchId}
	if d := cmp.Diff([]string{e.inst.ID, "ecs.g7.xlarge", "cn-hangzhou-h", "vpc-sim", "vsw-sim-h"}, gotInst); d != "" {
		t.Errorf("instance (-want +got):\n%s", d)
	}
	nics := in.NetworkInterfaces.NetworkInterface
	if len(nics) != 1 || nics[0].Type != "Primary" || nics[0].NetworkInterfaceId != e.inst.PrimaryENI || nics[0].MacAddress != e.inst.MAC {
		t.Errorf("instance network interfaces: %+v", nics)
	}

	dt := ecs.CreateDescribeInstanceTypesRequest()
	dt.InstanceTypes = &[]string{"ecs.g7.xlarge"}
	types, err := e.ecs.DescribeInstanceTypes(dt)
	if err != nil {
		t.Fatal(err)
	}
	if it := types.InstanceTypes.InstanceType; len(it) != 1 || it[0].EniQuantity != 4 || it[0].EniPrivateIpAddressQuantity != 15 || it[0].EniIpv6AddressQuantity != 15 {
		t.Errorf("instance types: %+v", it)
	}

	created := e.createENI(t, 2)
	if created.Status != "Available" || len(created.PrivateIpSets.PrivateIpSet) != 3 || created.Tags.Tag[0].TagKey != "owner" {
		t.Fatalf("created: %+v", created)
	}
	id := created.NetworkInterfaceId

	at := ecs.CreateAttachNetworkInterfaceRequest()
	at.NetworkInterfaceId, at.InstanceId = id, e.inst.ID
	if _, err := e.ecs.AttachNetworkInterface(at); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ecs.AttachNetworkInterface(at); code(t, err) != "InvalidOperation.InvalidEniState" {
		t.Errorf("second attach: %v", err)
	}
	got := e.waitStatus(t, id, "InUse")
	if got.InstanceId != e.inst.ID || got.Attachment.DeviceIndex != 1 {
		t.Errorf("attached: %+v", got)
	}

	as := ecs.CreateAssignPrivateIpAddressesRequest()
	as.NetworkInterfaceId = id
	as.SecondaryPrivateIpAddressCount = requestsInt(12)
	ar, err := e.ecs.AssignPrivateIpAddresses(as)
	if err != nil {
		t.Fatal(err)
	}
	assigned := ar.AssignedPrivateIpAddressesSet.PrivateIpSet.PrivateIpAddress
	if len(assigned) != 12 || ar.AssignedPrivateIpAddressesSet.NetworkInterfaceId != id {
		t.Fatalf("assigned: %+v", ar.AssignedPrivateIpAddressesSet)
	}
	// 1 primary + 2 + 12 = 15, the g7.xlarge limit.
	as.SecondaryPrivateIpAddressCount = requestsInt(1)
	if _, err := e.ecs.AssignPrivateIpAddresses(as); code(t, err) != "InvalidOperation.Ipv4CountExceeded" {
		t.Errorf("assign over limit: %v", err)
	}
	un := ecs.CreateUnassignPrivateIpAddressesRequest()
	un.NetworkInterfaceId = id
	un.PrivateIpAddress = &assigned
	if _, err := e.ecs.UnassignPrivateIpAddresses(un); err != nil {
		t.Fatal(err)
	}

	a6 := ecs.CreateAssignIpv6AddressesRequest()
	a6.NetworkInterfaceId = id
	a6.Ipv6AddressCount = requestsInt(2)
	r6, err := e.ecs.AssignIpv6Addresses(a6)
	if err != nil {
		t.Fatal(err)
	}
	if len(r6.Ipv6Sets.Ipv6Address) != 2 {
		t.Fatalf("ipv6: %+v", r6)
	}
	u6 := ecs.CreateUnassignIpv6AddressesRequest()
	u6.NetworkInterfaceId = id
	u6.Ipv6Address = &r6.Ipv6Sets.Ipv6Address
	if _, err := e.ecs.UnassignIpv6Addresses(u6); err != nil {
		t.Fatal(err)
	}

	dv := vpc.CreateDescribeVSwitchesRequest()
	dv.VSwitchId = "vsw-sim-h"
	vs, err := e.vpc.DescribeVSwitches(dv)
	if err != nil {
		t.Fatal(err)
	}
	// /24: 252 usable; primary ENI 1; our ENI 1 + 2.
	if v := vs.VSwitches.VSwitch; len(v) != 1 || v[0].AvailableIpAddressCount != 248 || v[0].CidrBlock != "192.168.0.0/24" {
		t.Errorf("vswitches: %+v", v)
	}

	de := ecs.CreateDetachNetworkInterfaceRequest()
	de.NetworkInterfaceId, de.InstanceId = e.inst.PrimaryENI, e.inst.ID
	if _, err := e.ecs.DetachNetworkInterface(de); code(t, err) != "InvalidOperation.DetachPrimaryEniNotAllowed" {
		t.Errorf("detach primary: %v", err)
	}
	de.NetworkInterfaceId = id
	if _, err := e.ecs.DetachNetworkInterface(de); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, id, "Available")
	del := ecs.CreateDeleteNetworkInterfaceRequest()
	del.NetworkInterfaceId = id
	if _, err := e.ecs.DeleteNetworkInterface(del); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, id, "")
	if _, err := e.ecs.DeleteNetworkInterface(del); code(t, err) != "InvalidEniId.NotFound" {
		t.Errorf("delete again: %v", err)
	}
	vs, err = e.vpc.DescribeVSwitches(dv)
	if err != nil {
		t.Fatal(err)
	}
	if n := vs.VSwitches.VSwitch[0].AvailableIpAddressCount; n != 251 {
		t.Errorf("AvailableIpAddressCount after delete = %d, want 251", n)
	}
}

// A describe by tag answers from the tag index (byTag) what a scan of
// every ENI would: each ENI carrying every tag given, a tag with an empty
// value matching any value of its key, a deleted ENI in none.
func TestDescribeByTag(t *testing.T) {
	e := newEnv(t, ecssim.Config{})
	create := func(tags map[string]string) string {
		req := ecs.CreateCreateNetworkInterfaceRequest()
		req.VSwitchId = "vsw-sim-h"
		req.SecurityGroupIds = &[]string{"sg-sim"}
		var tt []ecs.CreateNetworkInterfaceTag
		for _, k := range slices.Sorted(maps.Keys(tags)) {
			tt = append(tt, ecs.CreateNetworkInterfaceTag{Key: k, Value: tags[k]})
		}
		req.Tag = &tt
		resp, err := e.ecs.CreateNetworkInterface(req)
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		return resp.NetworkInterfaceId
	}
	a := create(map[string]string{"owner": "i-a", "cluster": "c1"})
	b := create(map[string]string{"owner": "i-b", "cluster": "c1"})
	c := create(map[string]string{"owner": "i-a"})
	gone := create(map[string]string{"owner": "i-a", "cluster": "c1"})
	del := ecs.CreateDeleteNetworkInterfaceRequest()
	del.NetworkInterfaceId = gone
	if _, err := e.ecs.DeleteNetworkInterface(del); err != nil {
		t.Fatal(err)
	}
	// The delete completes after a while (Delays.Delete): wait for it,
	// asking by ID (not the index under test).
	for deadline := time.Now().Add(10 * time.Second); ; {
		req := ecs.CreateDescribeNetworkInterfacesRequest()
		req.NetworkInterfaceId = &[]string{gone}
		resp, err := e.ecs.DescribeNetworkInterfaces(req)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.NetworkInterfaceSets.NetworkInterfaceSet) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still listed 10s after its delete", gone)
		}
		time.Sleep(5 * time.Millisecond)
	}
	describe := func(tags map[string]string) []string {
		req := ecs.CreateDescribeNetworkInterfacesRequest()
		var tt []ecs.DescribeNetworkInterfacesTag
		for _, k := range slices.Sorted(maps.Keys(tags)) {
			tt = append(tt, ecs.DescribeNetworkInterfacesTag{Key: k, Value: tags[k]})
		}
		req.Tag = &tt
		resp, err := e.ecs.DescribeNetworkInterfaces(req)
		if err != nil {
			t.Fatalf("describe %v: %v", tags, err)
		}
		var ids []string
		for _, n := range resp.NetworkInterfaceSets.NetworkInterfaceSet {
			ids = append(ids, n.NetworkInterfaceId)
		}
		slices.Sort(ids)
		return ids
	}
	sorted := func(ids ...string) []string { slices.Sort(ids); return ids }
	for _, tc := range []struct {
		tags map[string]string
		want []string
	}{
		{map[string]string{"owner": "i-a"}, sorted(a, c)},
		{map[string]string{"owner": "i-a", "cluster": "c1"}, sorted(a)},
		{map[string]string{"cluster": "c1"}, sorted(a, b)},
		{map[string]string{"cluster": "", "owner": "i-b"}, sorted(b)},
		{map[string]string{"owner": ""}, sorted(a, b, c)},
		{map[string]string{"owner": "i-z"}, nil},
	} {
		if got := describe(tc.tags); !slices.Equal(got, tc.want) {
			t.Errorf("describe by %v: %v, want %v", tc.tags, got, tc.want)
		}
	}
}
