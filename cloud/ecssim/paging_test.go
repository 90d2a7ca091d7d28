package ecssim_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/vpc"
	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/cloud/ecssim"
)

func TestPagination(t *testing.T) {
	var vsw []ecssim.VSwitchConfig
	for i := range 3 {
		vsw = append(vsw, ecssim.VSwitchConfig{ID: fmt.Sprintf("vsw-%d", i), Zone: "cn-hangzhou-h",
			CIDR: netip.MustParsePrefix(fmt.Sprintf("192.168.%d.0/24", i)), Tags: map[string]string{"parity": fmt.Sprint(i % 2)}})
	}
	e := newEnv(t, ecssim.Config{Zones: []string{"cn-hangzhou-h"}, VSwitches: vsw})
	want := []string{e.inst.PrimaryENI}
	for i := range 24 {
		req := ecs.CreateCreateNetworkInterfaceRequest()
		req.VSwitchId, req.SecurityGroupId = "vsw-1", "sg-sim"
		req.Tag = &[]ecs.CreateNetworkInterfaceTag{{Key: "k", Value: fmt.Sprint(i % 2)}}
		resp, err := e.ecs.CreateNetworkInterface(req)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, resp.NetworkInterfaceId)
	}

	var got []string
	var sizes []int
	token := ""
	for {
		req := ecs.CreateDescribeNetworkInterfacesRequest()
		req.MaxResults = requestsInt(10)
		req.NextToken = token
		resp, err := e.ecs.DescribeNetworkInterfaces(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.TotalCount != 25 {
			t.Errorf("TotalCount = %d", resp.TotalCount)
		}
		sizes = append(sizes, len(resp.NetworkInterfaceSets.NetworkInterfaceSet))
		for _, n := range resp.NetworkInterfaceSets.NetworkInterfaceSet {
			got = append(got, n.NetworkInterfaceId)
		}
		if token = resp.NextToken; token == "" {
			break
		}
	}
	if d := cmp.Diff([]int{10, 10, 5}, sizes); d != "" {
		t.Errorf("page sizes (-want +got):\n%s", d)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("token paging (-want +got):\n%s", d)
	}

	req := ecs.CreateDescribeNetworkInterfacesRequest()
	req.PageNumber, req.PageSize = requestsInt(3), requestsInt(10)
	resp, err := e.ecs.DescribeNetworkInterfaces(req)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.NetworkInterfaceSets.NetworkInterfaceSet); n != 5 || resp.PageNumber != 3 {
		t.Errorf("page 3: %d items, PageNumber %d", n, resp.PageNumber)
	}
	req = ecs.CreateDescribeNetworkInterfacesRequest()
	req.Tag = &[]ecs.DescribeNetworkInterfacesTag{{Key: "k", Value: "1"}}
	req.MaxResults = requestsInt(100)
	resp, err = e.ecs.DescribeNetworkInterfaces(req)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.NetworkInterfaceSets.NetworkInterfaceSet); n != 12 {
		t.Errorf("tag filter: %d ENIs, want 12", n)
	}

	var pages [][]string
	for pn := 1; pn <= 2; pn++ {
		dv := vpc.CreateDescribeVSwitchesRequest()
		dv.PageNumber, dv.PageSize = requestsInt(pn), requestsInt(2)
		vs, err := e.vpc.DescribeVSwitches(dv)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, v := range vs.VSwitches.VSwitch {
			ids = append(ids, v.VSwitchId)
		}
		pages = append(pages, ids)
		if vs.TotalCount != 3 {
			t.Errorf("vSwitch TotalCount = %d", vs.TotalCount)
		}
	}
	if d := cmp.Diff([][]string{{"vsw-0", "vsw-1"}, {"vsw-2"}}, pages); d != "" {
		t.Errorf("vSwitch pages (-want +got):\n%s", d)
	}
	dv := vpc.CreateDescribeVSwitchesRequest()
	dv.Tag = &[]vpc.DescribeVSwitchesTag{{Key: "parity", Value: "0"}}
	vs, err := e.vpc.DescribeVSwitches(dv)
	if err != nil {
		t.Fatal(err)
	}
	var tagged []string
	for _, v := range vs.VSwitches.VSwitch {
		tagged = append(tagged, v.VSwitchId+":"+v.Tags.Tag[0].Key+"="+v.Tags.Tag[0].Value)
	}
	if d := cmp.Diff([]string{"vsw-0:parity=0", "vsw-2:parity=0"}, tagged); d != "" {
		t.Errorf("vSwitches by tag (-want +got):\n%s", d)
	}
}
