package ecssim_test

import (
	"testing"

	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/cloud/ecssim"
)

func TestClientToken(t *testing.T) {
	e := newEnv(t, ecssim.Config{})
	create := func(token string, secondary int) (*ecs.CreateNetworkInterfaceResponse, error) {
		req := ecs.CreateCreateNetworkInterfaceRequest()
		req.VSwitchId, req.SecurityGroupId, req.ClientToken = "vsw-sim-h", "sg-sim", token
		req.SecondaryPrivateIpAddressCount = requestsInt(secondary)
		return e.ecs.CreateNetworkInterface(req)
	}
	first, err := create("tok-1", 2)
	if err != nil {
		t.Fatal(err)
	}
	again, err := create("tok-1", 2)
	if err != nil {
		t.Fatal(err)
	}
	if first.NetworkInterfaceId != again.NetworkInterfaceId || first.RequestId != again.RequestId {
		t.Errorf("retry with the same token: %s/%s, first %s/%s", again.NetworkInterfaceId, again.RequestId, first.NetworkInterfaceId, first.RequestId)
	}
	if _, err := create("tok-1", 3); code(t, err) != "IdempotentParameterMismatch" {
		t.Errorf("same token, other params: %v", err)
	}
	other, err := create("tok-2", 2)
	if err != nil {
		t.Fatal(err)
	}
	if other.NetworkInterfaceId == first.NetworkInterfaceId {
		t.Error("another token got the same ENI")
	}
	if n := len(e.sim.Dump().ENIs); n != 3 { // primary + 2
		t.Errorf("%d ENIs, want 3", n)
	}

	assign := func(token string) []string {
		req := ecs.CreateAssignPrivateIpAddressesRequest()
		req.NetworkInterfaceId, req.ClientToken = first.NetworkInterfaceId, token
		req.SecondaryPrivateIpAddressCount = requestsInt(3)
		resp, err := e.ecs.AssignPrivateIpAddresses(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.AssignedPrivateIpAddressesSet.PrivateIpSet.PrivateIpAddress
	}
	a1, a2 := assign("as-1"), assign("as-1")
	if d := cmp.Diff(a1, a2); d != "" {
		t.Errorf("assign retry (-first +retry):\n%s", d)
	}
	for _, en := range e.sim.Dump().ENIs {
		if en.ID == first.NetworkInterfaceId && len(en.IPv4) != 2+3 {
			t.Errorf("ENI holds %d secondary IPs after a retried assign, want 5", len(en.IPv4))
		}
	}

	// A failed call is not remembered: the token can be used again.
	if _, err := create("tok-3", 0); err != nil {
		t.Fatal(err)
	}
	e.sim.InjectFault(ecssim.Fault{Action: "CreateNetworkInterface", Code: "InternalError"})
	if _, err := create("tok-4", 0); code(t, err) != "InternalError" {
		t.Fatalf("injected fault: %v", err)
	}
	if _, err := create("tok-4", 0); err != nil {
		t.Errorf("retry after a failure: %v", err)
	}
}
