package ecssim_test

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/vpc"

	"github.com/enidnet/enid/cloud/ecssim"
)

// TestConcurrentAssignUnassign runs 100 goroutines assigning and releasing
// addresses on five ENIs of a /26 (60 usable addresses, far fewer than
// asked for). No address may be handed out twice, and the vSwitch
// accounting must be exact at the end.
func TestConcurrentAssignUnassign(t *testing.T) {
	cidr := netip.MustParsePrefix("192.168.10.0/26")
	e := newEnv(t, ecssim.Config{
		Zones: []string{"cn-hangzhou-h"},
		VSwitches: []ecssim.VSwitchConfig{
			{ID: "vsw-sim-h", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.0.0/24")},
			{ID: "vsw-small", Zone: "cn-hangzhou-h", CIDR: cidr},
		},
	})
	var enis []string
	for range 5 {
		req := ecs.CreateCreateNetworkInterfaceRequest()
		req.VSwitchId, req.SecurityGroupId = "vsw-small", "sg-sim"
		resp, err := e.ecs.CreateNetworkInterface(req)
		if err != nil {
			t.Fatal(err)
		}
		enis = append(enis, resp.NetworkInterfaceId)
	}

	var (
		mu       sync.Mutex
		held     = map[string]string{} // address -> goroutine holding it
		failures = map[string]int{}
		wg       sync.WaitGroup
	)
	for g := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := ecsClient(t, e.host, ecssim.DefaultAccessKeyID, ecssim.DefaultAccessKeySecret)
			me := string(rune('A'+g%26)) + string(rune('0'+g/26))
			for i := range 8 {
				eni := enis[(g+i)%len(enis)]
				as := ecs.CreateAssignPrivateIpAddressesRequest()
				as.NetworkInterfaceId = eni
				as.SecondaryPrivateIpAddressCount = requestsInt(1 + (g+i)%3)
				resp, err := client.AssignPrivateIpAddresses(as)
				if err != nil {
					c := code(t, err)
					if c != "InvalidVSwitchId.IpNotEnough" && c != "InvalidOperation.Ipv4CountExceeded" {
						t.Errorf("assign: %v", err)
						return
					}
					mu.Lock()
					failures[c]++
					mu.Unlock()
					continue
				}
				got := resp.AssignedPrivateIpAddressesSet.PrivateIpSet.PrivateIpAddress
				mu.Lock()
				for _, a := range got {
					if other, dup := held[a]; dup {
						t.Errorf("%s handed to %s while %s holds it", a, me, other)
					}
					held[a] = me
				}
				mu.Unlock()
				// Release before the call: once the simulator has freed an
				// address another goroutine may rightly receive it.
				mu.Lock()
				for _, a := range got {
					delete(held, a)
				}
				mu.Unlock()
				un := ecs.CreateUnassignPrivateIpAddressesRequest()
				un.NetworkInterfaceId = eni
				un.PrivateIpAddress = &got
				if _, err := client.UnassignPrivateIpAddresses(un); err != nil {
					t.Errorf("unassign %v: %v", got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if failures["InvalidVSwitchId.IpNotEnough"] == 0 {
		t.Errorf("the vSwitch was never exhausted (failures %v): the test does not exercise contention", failures)
	}

	st := e.sim.Dump()
	seen := map[netip.Addr]string{}
	for _, en := range st.ENIs {
		for _, a := range append([]netip.Addr{en.PrimaryIP}, en.IPv4...) {
			if o, dup := seen[a]; dup {
				t.Errorf("%s on both %s and %s", a, o, en.ID)
			}
			seen[a] = en.ID
		}
		if en.VSwitchID == "vsw-small" && len(en.IPv4) != 0 {
			t.Errorf("%s still holds %v after every address was released", en.ID, en.IPv4)
		}
	}
	dv := vpc.CreateDescribeVSwitchesRequest()
	dv.VSwitchId = "vsw-small"
	vs, err := e.vpc.DescribeVSwitches(dv)
	if err != nil {
		t.Fatal(err)
	}
	if got := vs.VSwitches.VSwitch[0].AvailableIpAddressCount; got != 60-5 {
		t.Errorf("AvailableIpAddressCount = %d, want %d", got, 60-5)
	}
	if err := e.sim.Check(); err != nil {
		t.Errorf("invariants: %v", err)
	}
	t.Logf("failures: %v; calls: %v", failures, e.sim.Counters()["AssignPrivateIpAddresses"])
}
