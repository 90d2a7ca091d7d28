package ecssim_test

import (
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/cloud/ecssim"
)

func attach(t *testing.T, e *env, id string) error {
	t.Helper()
	at := ecs.CreateAttachNetworkInterfaceRequest()
	at.NetworkInterfaceId, at.InstanceId = id, e.inst.ID
	_, err := e.ecs.AttachNetworkInterface(at)
	return err
}

func TestLimits(t *testing.T) {
	e := newEnv(t, ecssim.Config{
		Zones: []string{"cn-hangzhou-h", "cn-hangzhou-i"},
		VSwitches: []ecssim.VSwitchConfig{
			{ID: "vsw-sim-h", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.0.0/24")},
			{ID: "vsw-tiny", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.1.0/29")},
			{ID: "vsw-i", Zone: "cn-hangzhou-i", CIDR: netip.MustParsePrefix("192.168.2.0/24")},
		},
		Delays: ecssim.Delays{Attach: ecssim.NoDelay},
	})
	g7large, err := e.sim.AddInstance(ecssim.InstanceSpec{InstanceType: "ecs.g7.large", VSwitchID: "vsw-sim-h"})
	if err != nil {
		t.Fatal(err)
	}
	e.inst = g7large

	create := func(vsw string, secondary int) (string, string) {
		req := ecs.CreateCreateNetworkInterfaceRequest()
		req.VSwitchId, req.SecurityGroupId = vsw, "sg-sim"
		req.SecondaryPrivateIpAddressCount = countParam(secondary)
		resp, err := e.ecs.CreateNetworkInterface(req)
		return resp.NetworkInterfaceId, code(t, err)
	}
	if _, c := create("vsw-sim-h", 50); c != "InvalidParameter" {
		t.Errorf("50 secondaries at create: %q", c)
	}
	// /29: 8 - 4 reserved = 4 usable.
	if _, c := create("vsw-tiny", 4); c != "InvalidVSwitchId.IpNotEnough" {
		t.Errorf("5 addresses from a /29: %q", c)
	}
	if _, c := create("vsw-tiny", 3); c != "" {
		t.Errorf("4 addresses from a /29: %q", c)
	}
	if _, c := create("vsw-nope", 0); c != "InvalidVSwitchId.NotFound" {
		t.Errorf("unknown vSwitch: %q", c)
	}
	req := ecs.CreateCreateNetworkInterfaceRequest()
	req.VSwitchId, req.SecurityGroupId = "vsw-sim-h", "sg-nope"
	if _, err := e.ecs.CreateNetworkInterface(req); code(t, err) != "InvalidSecurityGroupId.NotFound" {
		t.Errorf("unknown security group: %v", err)
	}

	big, _ := create("vsw-sim-h", 10)
	as := ecs.CreateAssignPrivateIpAddressesRequest()
	as.NetworkInterfaceId = big
	as.SecondaryPrivateIpAddressCount = requestsInt(11)
	if _, err := e.ecs.AssignPrivateIpAddresses(as); code(t, err) != "InvalidOperation.Ipv4CountExceeded" {
		t.Errorf("11 on an Available ENI in one call: %v", err)
	}
	// ecs.g7.large: 6 IPv4 per ENI; big holds 11.
	if err := attach(t, e, big); code(t, err) != "InvalidOperation.Ipv4CountExceeded" {
		t.Errorf("attach an ENI over the type's IP limit: %v", err)
	}
	other, _ := create("vsw-i", 0)
	if err := attach(t, e, other); code(t, err) != "InvalidOperation.AvailabilityZoneMismatch" {
		t.Errorf("attach across zones: %v", err)
	}
	a, _ := create("vsw-sim-h", 0)
	b, _ := create("vsw-sim-h", 0)
	c, _ := create("vsw-sim-h", 0)
	for _, id := range []string{a, b} {
		if err := attach(t, e, id); err != nil {
			t.Fatal(err)
		}
	}
	// ecs.g7.large: 3 ENIs, the primary included.
	if err := attach(t, e, c); code(t, err) != "EniPerInstanceLimitExceeded" {
		t.Errorf("fourth ENI on ecs.g7.large: %v", err)
	}
	e.waitStatus(t, a, "InUse")
	as.NetworkInterfaceId = a
	as.SecondaryPrivateIpAddressCount = requestsInt(6)
	if _, err := e.ecs.AssignPrivateIpAddresses(as); code(t, err) != "InvalidOperation.Ipv4CountExceeded" {
		t.Errorf("7 IPv4 on an InUse g7.large ENI: %v", err)
	}
	as.SecondaryPrivateIpAddressCount = requestsInt(5)
	if _, err := e.ecs.AssignPrivateIpAddresses(as); err != nil {
		t.Errorf("6 IPv4 on an InUse g7.large ENI: %v", err)
	}
	del := ecs.CreateDeleteNetworkInterfaceRequest()
	del.NetworkInterfaceId = a
	if _, err := e.ecs.DeleteNetworkInterface(del); code(t, err) != "InvalidOperation.InvalidEniState" {
		t.Errorf("delete an InUse ENI: %v", err)
	}
	un := ecs.CreateUnassignPrivateIpAddressesRequest()
	un.NetworkInterfaceId = a
	un.PrivateIpAddress = &[]string{"192.168.0.250"}
	if _, err := e.ecs.UnassignPrivateIpAddresses(un); code(t, err) != "InvalidIp.IpUnassigned" {
		t.Errorf("unassign an address the ENI lacks: %v", err)
	}
}

func TestStaleReads(t *testing.T) {
	clock := newFakeClock()
	e := newEnv(t, ecssim.Config{Clock: clock.Now, StaleReads: 3 * time.Second, Delays: ecssim.Delays{Attach: ecssim.NoDelay}})
	describe := func(id string) []ecs.NetworkInterfaceSet {
		req := ecs.CreateDescribeNetworkInterfacesRequest()
		req.NetworkInterfaceId = &[]string{id}
		resp, err := e.ecs.DescribeNetworkInterfaces(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.NetworkInterfaceSets.NetworkInterfaceSet
	}
	id := e.createENI(t, 0).NetworkInterfaceId
	if got := describe(id); len(got) != 0 {
		t.Errorf("a new ENI is listed inside the stale window: %+v", got)
	}
	clock.Advance(3 * time.Second)
	if got := describe(id); len(got) != 1 || got[0].Status != "Available" {
		t.Fatalf("after the window: %+v", got)
	}
	if err := attach(t, e, id); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for e.sim.Dump().ENIs[1].Status != "InUse" && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := describe(id); got[0].Status != "Available" {
		t.Errorf("read inside the window after attach shows %s, want the old Available", got[0].Status)
	}
	clock.Advance(3 * time.Second)
	if got := describe(id); got[0].Status != "InUse" {
		t.Errorf("read after the window shows %s, want InUse", got[0].Status)
	}
}

func TestHooks(t *testing.T) {
	e := newEnv(t, ecssim.Config{Delays: ecssim.Delays{Attach: 10 * time.Millisecond, Detach: 10 * time.Millisecond}})
	var mu sync.Mutex
	var events []string
	var attached ecssim.ENIEvent
	record := func(kind string) func(ecssim.ENIEvent) {
		return func(ev ecssim.ENIEvent) {
			// The ENI must not be InUse yet when OnAttach runs.
			status := ""
			for _, en := range e.sim.Dump().ENIs {
				if en.ID == ev.ENIID {
					status = en.Status
				}
			}
			mu.Lock()
			defer mu.Unlock()
			events = append(events, kind+" "+status+" "+ipsOf(ev))
			if kind == "attach" {
				attached = ev
			}
		}
	}
	e.sim.SetHooks(ecssim.Hooks{OnAttach: record("attach"), OnDetach: record("detach"), OnAssign: record("assign"), OnUnassign: record("unassign")})

	created := e.createENI(t, 1)
	id := created.NetworkInterfaceId
	as := ecs.CreateAssignPrivateIpAddressesRequest()
	as.NetworkInterfaceId = id
	as.PrivateIpAddress = &[]string{"192.168.0.100"}
	if _, err := e.ecs.AssignPrivateIpAddresses(as); err != nil { // Available: no hook
		t.Fatal(err)
	}
	if err := attach(t, e, id); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, id, "InUse")
	as.PrivateIpAddress = &[]string{"192.168.0.101"}
	if _, err := e.ecs.AssignPrivateIpAddresses(as); err != nil {
		t.Fatal(err)
	}
	un := ecs.CreateUnassignPrivateIpAddressesRequest()
	un.NetworkInterfaceId = id
	un.PrivateIpAddress = &[]string{"192.168.0.100"}
	if _, err := e.ecs.UnassignPrivateIpAddresses(un); err != nil {
		t.Fatal(err)
	}
	de := ecs.CreateDetachNetworkInterfaceRequest()
	de.NetworkInterfaceId, de.InstanceId = id, e.inst.ID
	if _, err := e.ecs.DetachNetworkInterface(de); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, id, "Available")

	sec := created.PrivateIpSets.PrivateIpSet[1].PrivateIpAddress
	want := []string{
		"attach Attaching " + sec + ",192.168.0.100",
		"assign InUse 192.168.0.101",
		"unassign InUse 192.168.0.100",
		"detach Detaching " + sec + ",192.168.0.101",
	}
	mu.Lock()
	defer mu.Unlock()
	if d := cmp.Diff(want, events); d != "" {
		t.Errorf("hook events (-want +got):\n%s", d)
	}
	wantEv := ecssim.ENIEvent{InstanceID: e.inst.ID, ENIID: id, MAC: created.MacAddress,
		PrimaryIP: netip.MustParseAddr(created.PrivateIpAddress), CIDR: netip.MustParsePrefix("192.168.0.0/24"),
		Gateway: netip.MustParseAddr("192.168.0.253"), GatewayV6: netip.MustParseAddr("2408:4005:300:0:ffff:ffff:ffff:fffd"),
		DeviceIndex: 1, IPv4: attached.IPv4}
	if d := cmp.Diff(wantEv, attached, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); d != "" {
		t.Errorf("attach event (-want +got):\n%s", d)
	}
}

func ipsOf(ev ecssim.ENIEvent) string {
	var s []string
	for _, a := range append(slices.Clone(ev.IPv4), ev.IPv6...) {
		s = append(s, a.String())
	}
	return joinComma(s) // the simulator keeps addresses sorted
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

func TestStateFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state.json")
	e := newEnv(t, ecssim.Config{StateFile: file, Delays: ecssim.Delays{Attach: ecssim.NoDelay}})
	id := e.createENI(t, 3).NetworkInterfaceId
	if err := attach(t, e, id); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, id, "InUse")
	before := e.sim.Dump()
	if err := e.sim.Close(); err != nil {
		t.Fatal(err)
	}

	again, err := ecssim.New(ecssim.Config{StateFile: file})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { again.Close() }) // nothing is left to check on close
	after := again.Dump()
	if d := cmp.Diff(before, after, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); d != "" {
		t.Errorf("state after reload (-before +after):\n%s", d)
	}
	// Allocation goes on without handing out a held address.
	inst, err := again.AddInstance(ecssim.InstanceSpec{})
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range after.ENIs {
		if en.PrimaryIP == inst.PrimaryIP || slices.Contains(en.IPv4, inst.PrimaryIP) || en.ID == inst.PrimaryENI {
			t.Errorf("new instance got %s / %s, already held by %s", inst.PrimaryENI, inst.PrimaryIP, en.ID)
		}
	}
}
