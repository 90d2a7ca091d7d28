package ecssim_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/cloud/ecssim"
)

func TestClientToken(t *testing.T) {
	e := newEnv(t, ecssim.Config{})
	create := func(token string, secondary int) (*ecs.CreateNetworkInterfaceResponse, error) {
		req := ecs.CreateCreateNetworkInterfaceRequest()
		req.VSwitchId, req.SecurityGroupId, req.ClientToken = "vsw-sim-h", "sg-sim", token
		req.SecondaryPrivateIpAddressCount = countParam(secondary)
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

// A token whose request failed with a non-5xx error is burnt, as on ECS:
// a resend answers IdempotentFailed even once the cause is gone, and a
// resend with other parameters IdempotentParameterMismatch.
func TestClientTokenBurnt(t *testing.T) {
	e := newEnv(t, ecssim.Config{Zones: []string{"cn-hangzhou-h"}, VSwitches: []ecssim.VSwitchConfig{
		{ID: "vsw-sim-h", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.0.0/24")},
		{ID: "vsw-tiny", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.9.0/29")}, // 4 usable
	}})
	create := func(token string, secondary int) (string, error) {
		req := ecs.CreateCreateNetworkInterfaceRequest()
		req.VSwitchId, req.SecurityGroupId, req.ClientToken = "vsw-tiny", "sg-sim", token
		req.SecondaryPrivateIpAddressCount = countParam(secondary)
		resp, err := e.ecs.CreateNetworkInterface(req)
		if err != nil {
			return "", err
		}
		return resp.NetworkInterfaceId, nil
	}
	filler, err := create("", 2) // 3 of 4 addresses
	if err != nil {
		t.Fatal(err)
	}
	if _, err := create("tok-full", 1); code(t, err) != "InvalidVSwitchId.IpNotEnough" {
		t.Fatalf("create in a full vSwitch: %v", err)
	}
	del := ecs.CreateDeleteNetworkInterfaceRequest()
	del.NetworkInterfaceId = filler
	if _, err := e.ecs.DeleteNetworkInterface(del); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, filler, "")
	if _, err := create("tok-full", 1); code(t, err) != "IdempotentFailed" {
		t.Errorf("resend of a burnt token once the vSwitch has room: %v, want IdempotentFailed", err)
	}
	if _, err := create("tok-full", 0); code(t, err) != "IdempotentParameterMismatch" {
		t.Errorf("burnt token, other params: %v, want IdempotentParameterMismatch", err)
	}
	if _, err := create("tok-new", 1); err != nil {
		t.Errorf("a new token: %v", err)
	}
	// A scripted non-5xx answer burns a token too; throttling does not.
	e.sim.InjectFault(ecssim.Fault{Action: "CreateNetworkInterface", Code: "Throttling"})
	if _, err := create("tok-t", 0); code(t, err) != "Throttling" {
		t.Fatalf("scripted throttling: %v", err)
	}
	if _, err := create("tok-t", 0); err != nil {
		t.Errorf("resend after throttling: %v", err)
	}
	e.sim.InjectFault(ecssim.Fault{Action: "CreateNetworkInterface", Code: "InvalidVSwitchId.IpNotEnough"})
	if _, err := create("tok-s", 0); code(t, err) != "InvalidVSwitchId.IpNotEnough" {
		t.Fatalf("scripted IpNotEnough: %v", err)
	}
	if _, err := create("tok-s", 0); code(t, err) != "IdempotentFailed" {
		t.Errorf("resend after scripted IpNotEnough: %v", err)
	}
	if n := e.sim.Counters()["CreateNetworkInterface"]["IdempotentFailed"]; n != 2 {
		t.Errorf("IdempotentFailed counted %d times, want 2", n)
	}
}

// A resend while the first request is still being processed answers
// IdempotentProcessing; with Conflicts on, two mutations of one ENI that
// overlap answer OperationConflict.
func TestInFlightAndConflicts(t *testing.T) {
	slow := ecssim.Latency{PerAction: map[string]ecssim.LatencyDist{
		"AssignPrivateIpAddresses":   {Fixed: 300 * time.Millisecond},
		"UnassignPrivateIpAddresses": {Fixed: 300 * time.Millisecond},
	}}
	e := newEnv(t, ecssim.Config{Latency: slow, Conflicts: true})
	id := e.createENI(t, 1).NetworkInterfaceId
	// Each goroutine its own SDK client: the SDK writes its shared
	// http.Client's Timeout on every call (a data race otherwise).
	assignWith := func(c *ecs.Client, token string) error {
		req := ecs.CreateAssignPrivateIpAddressesRequest()
		req.NetworkInterfaceId, req.ClientToken = id, token
		req.SecondaryPrivateIpAddressCount = requestsInt(1)
		_, err := c.AssignPrivateIpAddresses(req)
		return err
	}
	assign := func(token string) error { return assignWith(e.ecs, token) }
	other := ecsClient(t, e.host, ecssim.DefaultAccessKeyID, ecssim.DefaultAccessKeySecret)
	first := make(chan error, 1)
	go func() { first <- assignWith(other, "tok-a") }()
	time.Sleep(100 * time.Millisecond)
	// The second call with the same token finds the ENI held: the conflict
	// check comes first, as the ENI is busy.
	if err := assign("tok-b"); code(t, err) != "OperationConflict" {
		t.Errorf("overlapping assign on one ENI: %v, want OperationConflict", err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := assign("tok-b"); err != nil {
		t.Errorf("after the first ended: %v", err)
	}

	// Without Conflicts, a duplicate of an in-flight token is told so.
	e.sim.SetSettings(ecssim.Settings{Latency: slow})
	go func() { first <- assignWith(other, "tok-c") }()
	time.Sleep(100 * time.Millisecond)
	if err := assign("tok-c"); code(t, err) != "IdempotentProcessing" {
		t.Errorf("duplicate in flight: %v, want IdempotentProcessing", err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}

	at := ecs.CreateAttachNetworkInterfaceRequest()
	at.NetworkInterfaceId, at.InstanceId = id, "i-gone"
	if _, err := e.ecs.AttachNetworkInterface(at); code(t, err) != "InvalidEcsId.NotFound" {
		t.Errorf("attach to a missing instance: %v, want InvalidEcsId.NotFound", err)
	}
}
