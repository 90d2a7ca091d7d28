package ecssim_test

import (
	"testing"

	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"

	"github.com/enidnet/enid/cloud/ecssim"
)

// BenchmarkDescribeNetworkInterfaces measures one signed SDK round trip
// listing an instance's ENIs (the simulator's cost of a poll).
func BenchmarkDescribeNetworkInterfaces(b *testing.B) {
	e := newEnv(b, ecssim.Config{})
	req := ecs.CreateDescribeNetworkInterfacesRequest()
	req.InstanceId = e.inst.ID
	for b.Loop() {
		if _, err := e.ecs.DescribeNetworkInterfaces(req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAssignUnassign measures an assign of 10 addresses and their
// release, two SDK round trips.
func BenchmarkAssignUnassign(b *testing.B) {
	e := newEnv(b, ecssim.Config{})
	id := e.createENI(b, 0).NetworkInterfaceId
	for b.Loop() {
		as := ecs.CreateAssignPrivateIpAddressesRequest()
		as.NetworkInterfaceId = id
		as.SecondaryPrivateIpAddressCount = requestsInt(10)
		resp, err := e.ecs.AssignPrivateIpAddresses(as)
		if err != nil {
			b.Fatal(err)
		}
		un := ecs.CreateUnassignPrivateIpAddressesRequest()
		un.NetworkInterfaceId = id
		un.PrivateIpAddress = &resp.AssignedPrivateIpAddressesSet.PrivateIpSet.PrivateIpAddress
		if _, err := e.ecs.UnassignPrivateIpAddresses(un); err != nil {
			b.Fatal(err)
		}
	}
}
