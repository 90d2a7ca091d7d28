package ecssim

import (
	"encoding/json"
	"net/netip"
	"slices"
	"sort"
	"strings"
)

func (s *Server) describeNetworkInterfaces(c call) (obj, error) {
	p := c.p
	ids, err := listOf(p, "NetworkInterfaceId", maxFilterItems)
	if err != nil {
		return nil, err
	}
	want, err := tags(p)
	if err != nil {
		return nil, err
	}
	// PrivateIpAddress.N: "the secondary private IPv4 addresses of the
	// ENI", N 1..100; Ipv6Address.N: its IPv6 addresses, N 1..100 (v7
	// model). An ENI matches when it holds any of them.
	raw, err := listOf(p, "PrivateIpAddress", maxFilterItems)
	if err != nil {
		return nil, err
	}
	addrs, err := parseAddrs(raw, "PrivateIpAddress", false)
	if err != nil {
		return nil, err
	}
	raw6, err := listOf(p, "Ipv6Address", maxFilterItems)
	if err != nil {
		return nil, err
	}
	addrs6, err := parseAddrs(raw6, "Ipv6Address", true)
	if err != nil {
		return nil, err
	}
	inst, typ, status := p.Get("InstanceId"), p.Get("Type"), p.Get("Status")
	vpc, vsw, sg, prim := p.Get("VpcId"), p.Get("VSwitchId"), p.Get("SecurityGroupId"), p.Get("PrimaryIpAddress")

	s.mu.Lock()
	var match []*ENIState
	// The view holds the candidates for ids and inst; the switch below is
	// the filter, of them too.
	for _, e := range s.viewENIsLocked(ids, inst, want) {
		switch {
		case len(ids) > 0 && !slices.Contains(ids, e.ID),
			inst != "" && e.InstanceID != inst,
			typ != "" && e.Type != typ,
			status != "" && e.Status != status,
			vpc != "" && e.VPCID != vpc,
			vsw != "" && e.VSwitchID != vsw,
			// SecurityGroupId selects secondary ENIs only: "to query
			// primary ENIs by security group, call DescribeInstances" (v7
			// model; API reference).
			sg != "" && (e.Type == "Primary" || !slices.Contains(e.SecurityGroups, sg)),
			prim != "" && e.PrimaryIP.String() != prim:
			continue
		}
		if !tagsMatch(e.Tags, want) || !holdsAny(e.IPv4, addrs) || !holdsAny(e.IPv6, addrs6) {
			continue
		}
		match = append(match, e.clone())
	}
	s.mu.Unlock()

	keys := make([]string, len(match))
	for i, e := range match {
		keys[i] = e.ID
	}
	pg, err := paginate(p, keys, pagingOf(c.action))
	if err != nil {
		return nil, err
	}
	items := []obj{}
	for _, e := range match[pg.from:pg.to] {
		items = append(items, renderENI(e))
	}
	out := obj{"TotalCount": len(match), "NextToken": pg.nextToken, "NetworkInterfaceSets": obj{"NetworkInterfaceSet": items}}
	if pg.pageNumber > 0 {
		out["PageNumber"], out["PageSize"] = pg.pageNumber, pg.pageSize
	}
	return out, nil
}

func tagsMatch(have, want map[string]string) bool {
	for k, v := range want {
		hv, ok := have[k]
		if !ok || (v != "" && hv != v) {
			return false
		}
	}
	return true
}

// holdsAny reports whether have holds one of want, or want is empty (no
// filter).
func holdsAny(have, want []netip.Addr) bool {
	if len(want) == 0 {
		return true
	}
	for _, a := range want {
		if slices.Contains(have, a) {
			return true
		}
	}
	return false
}

func (s *Server) describeInstances(c call) (obj, error) {
	p := c.p
	var ids []string
	if raw := p.Get("InstanceIds"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &ids); err != nil {
			return nil, apiErr("InvalidParameter", "InstanceIds must be a JSON array of strings: %v.", err)
		}
		if len(ids) > 100 {
			return nil, apiErr("InvalidParameter", "At most 100 InstanceIds are allowed.")
		}
	}
	vpc, vsw, zone, typ, status := p.Get("VpcId"), p.Get("VSwitchId"), p.Get("ZoneId"), p.Get("InstanceType"), p.Get("Status")

	s.mu.Lock()
	var match []obj
	var keys []string
	for _, in := range s.m.instanceList(ids) {
		switch {
		case len(ids) > 0 && !slices.Contains(ids, in.ID),
			vpc != "" && vpc != s.m.vpcID,
			vsw != "" && vsw != in.VSwitchID,
			zone != "" && zone != in.ZoneID,
			typ != "" && typ != in.InstanceType,
			status != "" && status != in.status():
			continue
		}
		match = append(match, s.renderInstanceLocked(in, s.viewENIsLocked(nil, in.ID, nil)))
		keys = append(keys, in.ID)
	}
	s.mu.Unlock()

	pg, err := paginate(p, keys, pagingOf(c.action))
	if err != nil {
		return nil, err
	}
	items := append([]obj{}, match[pg.from:pg.to]...)
	out := obj{"TotalCount": len(match), "NextToken": pg.nextToken, "Instances": obj{"Instance": items}}
	if pg.pageNumber > 0 {
		out["PageNumber"], out["PageSize"] = pg.pageNumber, pg.pageSize
	}
	return out, nil
}

// renderInstanceLocked renders an instance with its ENIs found in view.
func (s *Server) renderInstanceLocked(in InstanceState, view []*ENIState) obj {
	t := s.m.types[in.InstanceType]
	var nics []obj
	primaryIP := ""
	for _, e := range view {
		if e.InstanceID != in.ID || (e.Status != "InUse" && e.Status != "Detaching") {
			continue
		}
		if e.Type == "Primary" {
			primaryIP = e.PrimaryIP.String()
		}
		r := renderENI(e)
		nics = append(nics, obj{
			"NetworkInterfaceId": e.ID, "MacAddress": e.MAC, "PrimaryIpAddress": e.PrimaryIP.String(), "Type": e.Type,
			"PrivateIpSets": r["PrivateIpSets"], "Ipv6Sets": r["Ipv6Sets"], "Ipv4PrefixSets": r["Ipv4PrefixSets"],
		})
	}
	sort.Slice(nics, func(i, j int) bool {
		return nics[i]["Type"] == "Primary" && nics[j]["Type"] != "Primary"
	})
	return obj{
		"InstanceId": in.ID, "InstanceName": in.ID, "HostName": strings.TrimPrefix(in.ID, "i-"),
		"RegionId": s.m.region, "ZoneId": in.ZoneID, "InstanceType": in.InstanceType, "InstanceTypeFamily": t.Family,
		"Cpu": t.CPUCores, "Memory": int(t.MemoryGiB * 1024), "Status": in.status(), "InstanceNetworkType": "vpc",
		"OSType": "linux", "CreationTime": fmtTime(in.CreatedAt),
		"VpcAttributes": obj{"VpcId": s.m.vpcID, "VSwitchId": in.VSwitchID, "NatIpAddress": "",
			"PrivateIpAddress": obj{"IpAddress": []string{primaryIP}}},
		"SecurityGroupIds":  obj{"SecurityGroupId": orEmpty(in.SecurityGroups)},
		"NetworkInterfaces": obj{"NetworkInterface": append([]obj{}, nics...)},
		"Tags":              obj{"Tag": []obj{}},
		"PublicIpAddress":   obj{"IpAddress": []string{}},
		"InnerIpAddress":    obj{"IpAddress": []string{}},
		"EipAddress":        obj{},
	}
}

func (s *Server) describeInstanceTypes(c call) (obj, error) {
	want := list(c.p, "InstanceTypes")
	var keys []string
	var items []obj
	for _, t := range InstanceTypes() {
		if len(want) > 0 && !slices.Contains(want, t.ID) {
			continue
		}
		if f := c.p.Get("InstanceTypeFamily"); f != "" && f != t.Family {
			continue
		}
		keys = append(keys, t.ID)
		items = append(items, obj{
			"InstanceTypeId": t.ID, "InstanceTypeFamily": t.Family, "CpuCoreCount": t.CPUCores, "MemorySize": t.MemoryGiB,
			"EniQuantity": t.ENIs, "EniPrivateIpAddressQuantity": t.IPv4PerENI, "EniIpv6AddressQuantity": t.IPv6PerENI,
			"EniTotalQuantity": t.ENITotal, "EniTrunkSupported": t.TrunkSupported, "EriQuantity": 0,
			"InstanceCategory": "General-purpose", "CpuArchitecture": "X86", "InstanceFamilyLevel": "EnterpriseLevel",
		})
	}
	// DescribeInstanceTypes pages by token only.
	p := c.p
	if p.Get("MaxResults") == "" {
		p = cloneValues(p)
		p.Set("MaxResults", "1600")
	}
	pg, err := paginate(p, keys, pageRule{minResults: 1, maxResults: 1600, maxPageSize: 1600, defPageSize: 1600, tokens: true})
	if err != nil {
		return nil, err
	}
	return obj{"NextToken": pg.nextToken, "InstanceTypes": obj{"InstanceType": append([]obj{}, items[pg.from:pg.to]...)}}, nil
}

func (s *Server) describeVSwitches(c call) (obj, error) {
	p := c.p
	var ids []string
	if v := p.Get("VSwitchId"); v != "" {
		ids = strings.Split(v, ",")
	}
	vpc, zone := p.Get("VpcId"), p.Get("ZoneId")
	want, err := tags(p)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	vsws := s.m.vSwitchList()
	s.mu.Unlock()
	var keys []string
	var items []obj
	for _, v := range vsws {
		switch {
		case len(ids) > 0 && !slices.Contains(ids, v.ID),
			vpc != "" && vpc != v.VPCID,
			zone != "" && zone != v.ZoneID,
			!tagsMatch(v.Tags, want):
			continue
		}
		keys = append(keys, v.ID)
		v6 := ""
		if v.IPv6CIDR.IsValid() {
			v6 = v.IPv6CIDR.String()
		}
		items = append(items, obj{
			"VSwitchId": v.ID, "VpcId": v.VPCID, "ZoneId": v.ZoneID, "CidrBlock": v.CIDR.String(), "Ipv6CidrBlock": v6,
			"EnabledIpv6": v6 != "", "AvailableIpAddressCount": v.AvailableIPs, "Status": "Available", "VSwitchName": v.ID,
			"IsDefault": false, "CreationTime": "2024-01-01T00:00:00Z", "Description": "",
			"RouteTable": obj{"RouteTableId": "vtb-sim", "RouteTableType": "System"},
			"Tags":       obj{"Tag": renderTags(v.Tags, "Key", "Value")},
		})
	}
	pg, err := paginate(p, keys, pagingOf(c.action))
	if err != nil {
		return nil, err
	}
	return obj{"TotalCount": len(items), "PageNumber": pg.pageNumber, "PageSize": pg.pageSize,
		"VSwitches": obj{"VSwitch": append([]obj{}, items[pg.from:pg.to]...)}}, nil
}
