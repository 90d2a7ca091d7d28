package ecssim_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/requests"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/vpc"

	"github.com/enidnet/enid/cloud/ecssim"
)

// TestReleaseInstance: what ECS does to an instance's ENIs when it is
// released ("Retain and reuse an ENI"): those set to DeleteOnRelease go
// with it, the others are detached and left Available with their
// addresses and tags; the instance is no longer listed, and attach and
// detach naming it answer InvalidEcsId.NotFound.
func TestReleaseInstance(t *testing.T) {
	e := newEnv(t, ecssim.Config{Delays: ecssim.Delays{Attach: ecssim.NoDelay}})
	create := func(deleteOnRelease string) string {
		t.Helper()
		req := ecs.CreateCreateNetworkInterfaceRequest()
		req.VSwitchId, req.SecurityGroupId = e.inst.VSwitchID, "sg-sim"
		req.SecondaryPrivateIpAddressCount = requestsInt(2)
		req.Tag = &[]ecs.CreateNetworkInterfaceTag{{Key: "enid.dev/owner", Value: e.inst.ID}}
		if deleteOnRelease != "" {
			req.DeleteOnRelease = requests.Boolean(deleteOnRelease)
		}
		resp, err := e.ecs.CreateNetworkInterface(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.NetworkInterfaceId
	}
	kept, gone, never := create(""), create("true"), create("false")
	if _, err := e.ecs.CreateNetworkInterface(func() *ecs.CreateNetworkInterfaceRequest {
		req := ecs.CreateCreateNetworkInterfaceRequest()
		req.VSwitchId, req.SecurityGroupId, req.DeleteOnRelease = e.inst.VSwitchID, "sg-sim", "yes"
		return req
	}()); code(t, err) != "InvalidParameter" {
		t.Errorf("DeleteOnRelease=yes: %v", err)
	}
	for _, id := range []string{kept, gone} {
		if err := attach(t, e, id); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool {
		st := e.sim.Dump()
		return eniStatus(st, kept) == "InUse" && eniStatus(st, gone) == "InUse"
	})
	before := e.sim.Dump()
	freeBefore := before.VSwitches[0].AvailableIPs

	deleted, left, err := e.sim.ReleaseInstance(e.inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := sorted(gone, e.inst.PrimaryENI); !slices.Equal(deleted, want) {
		t.Errorf("deleted %v, want %v (the primary and the DeleteOnRelease ENI)", deleted, want)
	}
	if !slices.Equal(left, []string{kept}) {
		t.Errorf("kept %v, want [%s]", left, kept)
	}
	if err := e.sim.Check(); err != nil {
		t.Fatal(err)
	}
	st := e.sim.Dump()
	if len(st.Instances) != 0 {
		t.Errorf("instances after release: %+v", st.Instances)
	}
	for _, eni := range st.ENIs {
		switch eni.ID {
		case kept:
			if eni.Status != "Available" || eni.InstanceID != "" || len(eni.IPv4) != 2 || eni.Tags["enid.dev/owner"] != e.inst.ID {
				t.Errorf("kept ENI after release: %+v", eni)
			}
		case never:
			if eni.Status != "Available" {
				t.Errorf("unattached ENI after release: %+v", eni)
			}
		default:
			t.Errorf("ENI %s survives its instance", eni.ID)
		}
	}
	// The primary's address and the deleted ENI's three go back.
	if got := st.VSwitches[0].AvailableIPs; got != freeBefore+4 {
		t.Errorf("vSwitch free %d, want %d", got, freeBefore+4)
	}
	d := ecs.CreateDescribeInstancesRequest()
	ids, _ := json.Marshal([]string{e.inst.ID})
	d.InstanceIds = string(ids)
	resp, err := e.ecs.DescribeInstances(d)
	if err != nil || len(resp.Instances.Instance) != 0 {
		t.Errorf("describe a released instance: %v %+v", err, resp.Instances.Instance)
	}
	if err := attach(t, e, kept); code(t, err) != "InvalidEcsId.NotFound" {
		t.Errorf("attach to a released instance: %v", err)
	}
	dn := ecs.CreateDescribeNetworkInterfacesRequest()
	dn.NetworkInterfaceId = &[]string{kept}
	got, err := e.ecs.DescribeNetworkInterfaces(dn)
	if err != nil || len(got.NetworkInterfaceSets.NetworkInterfaceSet) != 1 || got.NetworkInterfaceSets.NetworkInterfaceSet[0].DeleteOnRelease {
		t.Errorf("describe the kept ENI: %v %+v", err, got)
	}
	if _, _, err := e.sim.ReleaseInstance(e.inst.ID); err == nil {
		t.Error("a second release succeeded")
	}
}

// TestStopStartInstance: a stopped instance is listed as Stopped (and by
// the Status filter) with its ENIs still attached; started, Running.
func TestStopStartInstance(t *testing.T) {
	e := newEnv(t, ecssim.Config{})
	other, err := e.sim.AddInstance(ecssim.InstanceSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.sim.StopInstance(e.inst.ID); err != nil {
		t.Fatal(err)
	}
	byStatus := func(s string) []string {
		t.Helper()
		d := ecs.CreateDescribeInstancesRequest()
		d.Status = s
		resp, err := e.ecs.DescribeInstances(d)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, in := range resp.Instances.Instance {
			ids = append(ids, in.InstanceId+"="+in.Status)
		}
		return ids
	}
	if got, want := byStatus("Stopped"), []string{e.inst.ID + "=Stopped"}; !slices.Equal(got, want) {
		t.Errorf("stopped: %v, want %v", got, want)
	}
	if got, want := byStatus(""), sorted(e.inst.ID+"=Stopped", other.ID+"=Running"); !slices.Equal(got, want) {
		t.Errorf("all: %v, want %v", got, want)
	}
	if err := e.sim.StartInstance(e.inst.ID); err != nil {
		t.Fatal(err)
	}
	if got := byStatus("Stopped"); len(got) != 0 {
		t.Errorf("stopped after start: %v", got)
	}
	if err := e.sim.StopInstance("i-nope"); err == nil {
		t.Error("stopping a missing instance succeeded")
	}
}

// TestVSwitchTagFilter: DescribeVSwitches' Tag.N filter (VPC API: every
// tag given must match; a key with no value matches any value) sees tags
// set at run time (TagVSwitch, as TagResources does).
func TestVSwitchTagFilter(t *testing.T) {
	e := newEnv(t, ecssim.Config{})
	list := func(zone string, tags ...vpc.DescribeVSwitchesTag) []string {
		t.Helper()
		req := vpc.CreateDescribeVSwitchesRequest()
		req.ZoneId = zone
		if len(tags) > 0 {
			req.Tag = &tags
		}
		resp, err := e.vpc.DescribeVSwitches(req)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, v := range resp.VSwitches.VSwitch {
			ids = append(ids, v.VSwitchId)
		}
		return ids
	}
	role := vpc.DescribeVSwitchesTag{Key: "enid.dev/role", Value: "pods"}
	if got := list("", role); len(got) != 0 {
		t.Errorf("before tagging: %v", got)
	}
	for _, id := range []string{"vsw-sim-h", "vsw-sim-i"} {
		if err := e.sim.TagVSwitch(id, map[string]string{"enid.dev/role": "pods"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := list("", role); !slices.Equal(got, []string{"vsw-sim-h", "vsw-sim-i"}) {
		t.Errorf("tagged: %v", got)
	}
	if got := list("cn-hangzhou-i", role); !slices.Equal(got, []string{"vsw-sim-i"}) {
		t.Errorf("tagged in zone i: %v", got)
	}
	if got := list("", vpc.DescribeVSwitchesTag{Key: "enid.dev/role", Value: "nodes"}); len(got) != 0 {
		t.Errorf("other value: %v", got)
	}
	if err := e.sim.TagVSwitch("vsw-sim-h", map[string]string{"enid.dev/role": ""}); err != nil {
		t.Fatal(err)
	}
	if got := list("", role); !slices.Equal(got, []string{"vsw-sim-i"}) {
		t.Errorf("after untagging h: %v", got)
	}
}

func eniStatus(st ecssim.State, id string) string {
	for _, e := range st.ENIs {
		if e.ID == id {
			return e.Status
		}
	}
	return ""
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
