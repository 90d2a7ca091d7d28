package ecssim_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"

	"github.com/enidnet/enid/cloud/ecssim"
)

// TestRandomWalk drives random sequences of API calls (with transitions
// completing in between) and checks the model's invariants after each one.
// Refusals are fine when they carry a business error code; internal errors
// and broken invariants are not.
func TestRandomWalk(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		walk(t, seed, 300)
	}
}

func walk(t *testing.T, seed uint64, steps int) {
	e := newEnv(t, ecssim.Config{
		Zones: []string{"cn-hangzhou-h"},
		VSwitches: []ecssim.VSwitchConfig{
			{ID: "vsw-sim-h", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.0.0/27"), IPv6CIDR: netip.MustParsePrefix("2408:4005:300::/64")},
			{ID: "vsw-b", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.1.0/28")},
		},
		Delays: ecssim.Delays{Attach: time.Millisecond, Detach: time.Millisecond, Delete: time.Millisecond},
	})
	if _, err := e.sim.AddInstance(ecssim.InstanceSpec{InstanceType: "ecs.u1-c1m4.xlarge", VSwitchID: "vsw-b"}); err != nil {
		t.Fatal(err)
	}
	insts := []string{e.inst.ID}
	for _, in := range e.sim.Dump().Instances {
		if in.ID != e.inst.ID {
			insts = append(insts, in.ID)
		}
	}
	expected := map[string]bool{
		"InvalidVSwitchId.IpNotEnough": true, "InvalidEniId.NotFound": true, "InvalidOperation.InvalidEniState": true,
		"EniPerInstanceLimitExceeded": true, "InvalidOperation.Ipv4CountExceeded": true, "InvalidOperation.Ipv6CountExceeded": true,
		"InvalidIp.IpUnassigned": true, "InvalidVSwitch.Ipv6NotTurnOn": true, "InvalidOperation.DetachPrimaryEniNotAllowed": true,
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	outcomes := map[string]int{}
	for step := range steps {
		st := e.sim.Dump()
		var enis []string
		for _, en := range st.ENIs {
			enis = append(enis, en.ID)
		}
		enis = append(enis, "eni-gone")
		eni := pick(enis)
		var held []string
		var held6 []string
		for _, en := range st.ENIs {
			if en.ID == eni {
				held, held6 = strs(en.IPv4), strs(en.IPv6)
			}
		}
		var err error
		op := rng.IntN(8)
		switch op {
		case 0:
			req := ecs.CreateCreateNetworkInterfaceRequest()
			req.VSwitchId, req.SecurityGroupId = pick([]string{"vsw-sim-h", "vsw-b"}), "sg-sim"
			req.SecondaryPrivateIpAddressCount = countParam(rng.IntN(8))
			_, err = e.ecs.CreateNetworkInterface(req)
		case 1:
			req := ecs.CreateAttachNetworkInterfaceRequest()
			req.NetworkInterfaceId, req.InstanceId = eni, pick(insts)
			_, err = e.ecs.AttachNetworkInterface(req)
			if code(t, err) == "InvalidOperation.AvailabilityZoneMismatch" {
				t.Fatalf("one zone only, yet: %v", err)
			}
		case 2:
			req := ecs.CreateDetachNetworkInterfaceRequest()
			req.NetworkInterfaceId = eni
			_, err = e.ecs.DetachNetworkInterface(req)
		case 3:
			req := ecs.CreateDeleteNetworkInterfaceRequest()
			req.NetworkInterfaceId = eni
			_, err = e.ecs.DeleteNetworkInterface(req)
		case 4:
			req := ecs.CreateAssignPrivateIpAddressesRequest()
			req.NetworkInterfaceId = eni
			req.SecondaryPrivateIpAddressCount = requestsInt(1 + rng.IntN(10))
			_, err = e.ecs.AssignPrivateIpAddresses(req)
		case 5:
			if len(held) == 0 {
				continue
			}
			n := 1 + rng.IntN(len(held))
			sub := held[:n]
			req := ecs.CreateUnassignPrivateIpAddressesRequest()
			req.NetworkInterfaceId = eni
			req.PrivateIpAddress = &sub
			_, err = e.ecs.UnassignPrivateIpAddresses(req)
		case 6:
			req := ecs.CreateAssignIpv6AddressesRequest()
			req.NetworkInterfaceId = eni
			req.Ipv6AddressCount = requestsInt(1 + rng.IntN(3))
			_, err = e.ecs.AssignIpv6Addresses(req)
		case 7:
			if len(held6) == 0 {
				time.Sleep(2 * time.Millisecond) // let transitions complete
				continue
			}
			req := ecs.CreateUnassignIpv6AddressesRequest()
			req.NetworkInterfaceId = eni
			req.Ipv6Address = &held6 // at most 10 per call
			if len(held6) > 10 {
				req.Ipv6Address = &[]string{held6[0]}
			}
			_, err = e.ecs.UnassignIpv6Addresses(req)
		}
		c := code(t, err)
		if c != "" && !expected[c] {
			t.Fatalf("seed %d step %d op %d on %s: unexpected %v", seed, step, op, eni, err)
		}
		outcomes[c]++
		if err := e.sim.Check(); err != nil {
			t.Fatalf("seed %d step %d op %d on %s: invariants broken:\n%v", seed, step, op, eni, err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if err := e.sim.Check(); err != nil {
		t.Fatalf("seed %d after settling: %v", seed, err)
	}
	if outcomes[""] < steps/5 {
		t.Errorf("seed %d: only %d of %d calls succeeded (%v): the walk explores little", seed, outcomes[""], steps, outcomes)
	}
}

func strs(a []netip.Addr) []string {
	out := make([]string, len(a))
	for i, x := range a {
		out[i] = x.String()
	}
	return out
}
