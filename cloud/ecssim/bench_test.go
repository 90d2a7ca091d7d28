package ecssim_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk"
	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"
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

// BenchmarkDescribeByInstance measures the describes a node's agent sends
// (its instance's ENIs, ENIs by ID, its instance) in an account of 10,000
// instances with 3 ENIs each, through the SDK and the simulator's handler
// in-process, as a deterministic fleet simulation drives it: the cost must
// follow the ENIs returned, not the account.
func BenchmarkDescribeByInstance(b *testing.B) {
	const instances, perInstance = 10000, 3
	sim, err := ecssim.New(ecssim.Config{
		Zones:     []string{"cn-hangzhou-h"},
		VSwitches: []ecssim.VSwitchConfig{{ID: "vsw-big", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.0.0/16")}},
		Delays:    ecssim.Delays{Attach: time.Millisecond},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := sim.Close(); err != nil {
			b.Error(err)
		}
	})
	cfg := sdk.NewConfig()
	cfg.Transport = handlerTransport{sim.Handler()}
	c, err := ecs.NewClientWithOptions(ecssim.DefaultRegion, cfg,
		credentials.NewStaticAKCredentialsProvider(ecssim.DefaultAccessKeyID, ecssim.DefaultAccessKeySecret))
	if err != nil {
		b.Fatal(err)
	}
	c.Domain = "ecssim.invalid"
	insts := make([]string, instances)
	enis := make([][]string, instances)
	for i := range insts {
		in, err := sim.AddInstance(ecssim.InstanceSpec{})
		if err != nil {
			b.Fatal(err)
		}
		insts[i], enis[i] = in.ID, []string{in.PrimaryENI}
		for range perInstance - 1 {
			cr := ecs.CreateCreateNetworkInterfaceRequest()
			cr.VSwitchId, cr.SecurityGroupId = "vsw-big", ecssim.DefaultSecurityGroup
			resp, err := c.CreateNetworkInterface(cr)
			if err != nil {
				b.Fatal(err)
			}
			at := ecs.CreateAttachNetworkInterfaceRequest()
			at.NetworkInterfaceId, at.InstanceId = resp.NetworkInterfaceId, in.ID
			if _, err := c.AttachNetworkInterface(at); err != nil {
				b.Fatal(err)
			}
			enis[i] = append(enis[i], resp.NetworkInterfaceId)
		}
	}
	waitSettled(b, sim)

	b.Run("eni-by-instance", func(b *testing.B) {
		i := 0
		for b.Loop() {
			req := ecs.CreateDescribeNetworkInterfacesRequest()
			req.InstanceId = insts[i%instances]
			resp, err := c.DescribeNetworkInterfaces(req)
			if err != nil {
				b.Fatal(err)
			}
			if n := len(resp.NetworkInterfaceSets.NetworkInterfaceSet); n != perInstance {
				b.Fatalf("%s: %d ENIs, want %d", req.InstanceId, n, perInstance)
			}
			i++
		}
	})
	b.Run("eni-by-id", func(b *testing.B) {
		i := 0
		for b.Loop() {
			req := ecs.CreateDescribeNetworkInterfacesRequest()
			req.NetworkInterfaceId = &enis[i%instances]
			resp, err := c.DescribeNetworkInterfaces(req)
			if err != nil {
				b.Fatal(err)
			}
			if n := len(resp.NetworkInterfaceSets.NetworkInterfaceSet); n != perInstance {
				b.Fatalf("%v: %d ENIs, want %d", enis[i%instances], n, perInstance)
			}
			i++
		}
	})
	b.Run("instance-by-id", func(b *testing.B) {
		i := 0
		for b.Loop() {
			ids, err := json.Marshal([]string{insts[i%instances]})
			if err != nil {
				b.Fatal(err)
			}
			req := ecs.CreateDescribeInstancesRequest()
			req.InstanceIds = string(ids)
			resp, err := c.DescribeInstances(req)
			if err != nil {
				b.Fatal(err)
			}
			if n := len(resp.Instances.Instance); n != 1 {
				b.Fatalf("%s: %d instances, want 1", insts[i%instances], n)
			}
			if n := len(resp.Instances.Instance[0].NetworkInterfaces.NetworkInterface); n != perInstance {
				b.Fatalf("%s: %d ENIs, want %d", insts[i%instances], n, perInstance)
			}
			i++
		}
	})
}

// handlerTransport sends each request to a handler in-process: no
// sockets, as a simulation that drives the simulator in its own process.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	t.h.ServeHTTP(w, r)
	return w.Result(), nil
}

// waitSettled waits until no ENI is in a transition.
func waitSettled(b *testing.B, sim *ecssim.Server) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		busy := 0
		for _, e := range sim.Dump().ENIs {
			if e.Status != "InUse" && e.Status != "Available" {
				busy++
			}
		}
		if busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d ENIs still in a transition", busy)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
