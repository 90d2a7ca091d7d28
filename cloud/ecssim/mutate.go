package ecssim

import (
	"net/netip"
	"net/url"
	"slices"
)

// parseAddrs reads addresses of one family: an IPv4 one that does not
// parse is InvalidParameter, an IPv6 one InvalidIp.Address (403, "the
// specified IPv6 address is invalid", in the error tables of the actions
// that take IPv6 addresses).
func parseAddrs(p []string, name string, v6 bool) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, s := range p {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Is4() == v6 || a.Zone() != "" {
			if v6 {
				return nil, apiErr("InvalidIp.Address", "%s %q is not a valid IPv6 address.", name, s)
			}
			return nil, apiErr("InvalidParameter", "%s %q is not a valid IPv4 address.", name, s)
		}
		out = append(out, a)
	}
	return out, nil
}

// listOf reads name.1 .. name.N, refusing more than most
// (InvalidParameter: N outside its documented range).
func listOf(p url.Values, name string, most int) ([]string, error) {
	l := list(p, name)
	if len(l) > most {
		return nil, apiErr("InvalidParameter", "At most %d %s.N are allowed (got %d).", most, name, len(l))
	}
	return l, nil
}

// parsePrefixes reads Ipv4Prefix.N (at most 10).
func parsePrefixes(p []string) ([]netip.Prefix, error) {
	if len(p) > maxPrefixesPerCall {
		return nil, apiErr("InvalidParameter", "At most %d Ipv4Prefix.N are allowed.", maxPrefixesPerCall)
	}
	var out []netip.Prefix
	for _, v := range p {
		q, err := netip.ParsePrefix(v)
		if err != nil || !q.Addr().Is4() {
			return nil, apiErr("InvalidParameter", "Ipv4Prefix %q is not a valid IPv4 prefix.", v)
		}
		out = append(out, q)
	}
	return out, nil
}

// conflict refuses two parameters given together that ECS takes one at a
// time: InvalidParameter.Conflict (400), the code of
// CreateNetworkInterface's error table for parameters that conflict.
func conflict(a, b string) error {
	return apiErr("InvalidParameter.Conflict", "%s and %s cannot be given together.", a, b)
}

// createNetworkInterface creates a secondary ENI, Available at once. The
// parameter rules and their sources are in rules.go and on each check.
func (s *Server) createNetworkInterface(c call) (obj, error) {
	in, delOnRelease, err := createParams(c.p)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in.now = s.now()
	e, err := s.m.createENI(in)
	if err != nil {
		return nil, err
	}
	e.DeleteOnRelease = delOnRelease
	// Reads lag a creation too: for a while the new ENI is not listed.
	if s.run.StaleReads > 0 {
		s.recordStaleLocked(e.ID, nil, s.now())
	}
	s.saveLocked()
	return renderENI(e), nil
}

// createParams checks CreateNetworkInterface's parameters, in the order
// ECS checks them (the first refusal is the answer), and returns them as
// createENI's inputs (all but now) and DeleteOnRelease.
func createParams(p url.Values) (newENIParams, bool, error) {
	vsw, err := required(p, "VSwitchId")
	if err != nil {
		return newENIParams{}, false, err
	}
	sgs, err := createSecurityGroups(p)
	if err != nil {
		return newENIParams{}, false, err
	}
	tg, err := createTags(p)
	if err != nil {
		return newENIParams{}, false, err
	}
	if err := checkDescription(p, maxCreateDescription); err != nil {
		return newENIParams{}, false, err
	}
	sec, addrs, primary, err := createIPv4(p)
	if err != nil {
		return newENIParams{}, false, err
	}
	prefixCount, prefixes, err := createPrefixes(p)
	if err != nil {
		return newENIParams{}, false, err
	}
	// Secondary addresses and prefixes are not asked for in one call
	// (Terway pkg/aliyun/client/options.go: "ECS does not allow requesting
	// both individual IPs and prefixes in the same request"; Terraform:
	// secondary_private_ip_address_count and private_ip_addresses conflict
	// with ipv4_prefix_count and ipv4_prefixes).
	if (sec > 0 || len(addrs) > 0) && (prefixCount > 0 || len(prefixes) > 0) {
		return newENIParams{}, false, conflict("secondary private IP addresses", "IPv4 prefixes")
	}
	v6, addrs6, err := createIPv6(p)
	if err != nil {
		return newENIParams{}, false, err
	}
	eniType, mode, delOnRelease, err := createKind(p)
	if err != nil {
		return newENIParams{}, false, err
	}
	return newENIParams{vswID: vsw, sgs: sgs, tags: tg, secondary: sec, primary: primary, addrs: addrs,
		prefixCount: prefixCount, prefixes: prefixes, ipv6Count: v6, addrs6: addrs6,
		description: p.Get("Description"), trafficMode: mode, eniType: eniType}, delOnRelease, nil
}

// createSecurityGroups reads the new ENI's security groups: "You must
// specify SecurityGroupId or SecurityGroupIds.N but not both" (v7 model;
// API reference), and each group once.
func createSecurityGroups(p url.Values) ([]string, error) {
	sgs, err := listOf(p, "SecurityGroupIds", maxSecurityGroupsOnENI)
	if err != nil {
		return nil, err
	}
	if sg := p.Get("SecurityGroupId"); sg != "" {
		if len(sgs) > 0 {
			return nil, conflict("SecurityGroupId", "SecurityGroupIds.N")
		}
		sgs = []string{sg}
	}
	if len(sgs) == 0 {
		return nil, apiErr("MissingParameter", "The input parameter \"SecurityGroupId\" that is mandatory for processing this request is not supplied.")
	}
	if err := distinctGroups(sgs); err != nil {
		return nil, err
	}
	return sgs, nil
}

// distinctGroups refuses a security group that is empty or given twice
// (InvalidParameter).
func distinctGroups(sgs []string) error {
	seen := map[string]bool{}
	for _, sg := range sgs {
		if sg == "" || seen[sg] {
			return apiErr("InvalidParameter", "The security group %q is empty or given twice.", sg)
		}
		seen[sg] = true
	}
	return nil
}

// createIPv4 reads the new ENI's IPv4 addresses: how many secondary ones
// (SecondaryPrivateIpAddressCount) or which (PrivateIpAddress.N), not
// both, and the primary one (PrimaryIpAddress; zero: chosen by createENI).
func createIPv4(p url.Values) (int, []netip.Addr, netip.Addr, error) {
	sec, err := intParam(p, "SecondaryPrivateIpAddressCount", 0, 1, maxSecondaryAtCreate)
	if err != nil {
		return 0, nil, netip.Addr{}, err
	}
	raw, err := listOf(p, "PrivateIpAddress", maxAddrsAtCreate)
	if err != nil {
		return 0, nil, netip.Addr{}, err
	}
	addrs, err := parseAddrs(raw, "PrivateIpAddress", false)
	if err != nil {
		return 0, nil, netip.Addr{}, err
	}
	if sec > 0 && len(addrs) > 0 {
		return 0, nil, netip.Addr{}, conflict("SecondaryPrivateIpAddressCount", "PrivateIpAddress.N")
	}
	var primary netip.Addr
	if v := p.Get("PrimaryIpAddress"); v != "" {
		a, err := parseAddrs([]string{v}, "PrimaryIpAddress", false)
		if err != nil {
			return 0, nil, netip.Addr{}, err
		}
		primary = a[0]
	}
	return sec, addrs, primary, nil
}

// createPrefixes reads the new ENI's IPv4 prefixes: how many
// (Ipv4PrefixCount) or which (Ipv4Prefix.N), not both.
func createPrefixes(p url.Values) (int, []netip.Prefix, error) {
	prefixCount, err := intParam(p, "Ipv4PrefixCount", 0, 1, maxPrefixesPerCall)
	if err != nil {
		return 0, nil, err
	}
	prefixes, err := parsePrefixes(list(p, "Ipv4Prefix"))
	if err != nil {
		return 0, nil, err
	}
	if prefixCount > 0 && len(prefixes) > 0 {
		return 0, nil, conflict("Ipv4PrefixCount", "Ipv4Prefix.N")
	}
	return prefixCount, prefixes, nil
}

// createIPv6 reads the new ENI's IPv6 addresses: how many
// (Ipv6AddressCount) or which (Ipv6Address.N), not both.
func createIPv6(p url.Values) (int, []netip.Addr, error) {
	v6, err := intParam(p, "Ipv6AddressCount", 0, 1, maxIPv6PerCall)
	if err != nil {
		return 0, nil, err
	}
	raw6, err := listOf(p, "Ipv6Address", maxIPv6PerCall)
	if err != nil {
		return 0, nil, err
	}
	addrs6, err := parseAddrs(raw6, "Ipv6Address", true)
	if err != nil {
		return 0, nil, err
	}
	if v6 > 0 && len(addrs6) > 0 {
		return 0, nil, conflict("Ipv6AddressCount", "Ipv6Address.N")
	}
	return v6, addrs6, nil
}

// createKind reads what kind of ENI to create: its type (InstanceType:
// Secondary or Trunk), its traffic mode (NetworkInterfaceTrafficMode:
// Standard or HighPerformance) and whether it goes with the instance
// (DeleteOnRelease).
func createKind(p url.Values) (eniType, mode string, delOnRelease bool, err error) {
	eniType = "Secondary"
	switch t := p.Get("InstanceType"); t {
	case "", "Secondary":
	case "Trunk":
		eniType = "Trunk"
	default:
		return "", "", false, apiErr("InvalidParameter", "InstanceType %q must be Secondary or Trunk.", t)
	}
	mode = p.Get("NetworkInterfaceTrafficMode")
	switch mode {
	case "":
		mode = "Standard"
	case "Standard", "HighPerformance":
	default:
		return "", "", false, apiErr("InvalidParameter", "NetworkInterfaceTrafficMode %q must be Standard or HighPerformance.", mode)
	}
	// DeleteOnRelease is a Boolean (v7 model): "true" or "false".
	switch v := p.Get("DeleteOnRelease"); v {
	case "", "false":
	case "true":
		delOnRelease = true
	default:
		return "", "", false, apiErr("InvalidParameter", "DeleteOnRelease %q must be true or false.", v)
	}
	return eniType, mode, delOnRelease, nil
}

func (s *Server) attachNetworkInterface(c call) (obj, error) {
	eniID, err := required(c.p, "NetworkInterfaceId")
	if err != nil {
		return nil, err
	}
	inst, err := required(c.p, "InstanceId")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.touchLocked(eniID)
	if _, err := s.m.startAttach(eniID, inst); err != nil {
		return nil, err
	}
	s.saveLocked()
	s.after(s.cfg.Delays.Attach, func() { s.finishAttach(eniID) })
	return obj{}, nil
}

// finishAttach runs the OnAttach hook, then makes the ENI InUse.
func (s *Server) finishAttach(eniID string) {
	s.mu.Lock()
	e := s.m.enis[eniID]
	if e == nil || e.Status != "Attaching" {
		s.mu.Unlock()
		return
	}
	ev, hook := s.m.eventOf(e), s.hooks.OnAttach
	s.mu.Unlock()
	if hook != nil {
		hook(ev)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.m.enis[eniID]; e != nil && e.Status == "Attaching" {
		s.touchLocked(eniID)
		e.Status, e.InUseAt = "InUse", s.now()
		s.saveLocked()
	}
}

func (s *Server) detachNetworkInterface(c call) (obj, error) {
	eniID, err := required(c.p, "NetworkInterfaceId")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.touchLocked(eniID)
	e, again, err := s.m.startDetach(eniID, c.p.Get("InstanceId"))
	if err != nil || again {
		// again: the detach under way goes on; nothing new starts.
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return obj{}, nil
	}
	ev, hook := s.m.eventOf(e), s.hooks.OnDetach
	s.saveLocked()
	s.mu.Unlock()
	if hook != nil {
		hook(ev)
	}
	s.after(s.cfg.Delays.Detach, func() { s.finishDetach(eniID) })
	return obj{}, nil
}

// finishDetach makes a Detaching ENI Available.
func (s *Server) finishDetach(eniID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.m.enis[eniID]; e != nil && e.Status == "Detaching" {
		s.touchLocked(eniID)
		s.m.setDetached(e)
		s.saveLocked()
	}
}

func (s *Server) deleteNetworkInterface(c call) (obj, error) {
	eniID, err := required(c.p, "NetworkInterfaceId")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.touchLocked(eniID)
	_, again, err := s.m.startDelete(eniID)
	if err != nil {
		return nil, err
	}
	if again {
		return obj{}, nil // the deletion under way goes on
	}
	s.saveLocked()
	s.after(s.cfg.Delays.Delete, func() { s.finishDelete(eniID) })
	return obj{}, nil
}

// finishDelete removes a Deleting ENI.
func (s *Server) finishDelete(eniID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.m.enis[eniID]; e != nil && e.Status == "Deleting" {
		s.touchLocked(eniID)
		s.m.remove(e)
		s.saveLocked()
	}
}

// countOrList reads "count xor list" parameters, each at most most.
func countOrList(c call, countName, listName string, v6 bool, most int) (int, []netip.Addr, error) {
	raw, err := listOf(c.p, listName, most)
	if err != nil {
		return 0, nil, err
	}
	addrs, err := parseAddrs(raw, listName, v6)
	if err != nil {
		return 0, nil, err
	}
	n, err := intParam(c.p, countName, 0, 1, most)
	if err != nil {
		return 0, nil, err
	}
	switch {
	case n > 0 && len(addrs) > 0:
		return 0, nil, apiErr("InvalidParameter", "%s and %s.N are mutually exclusive.", countName, listName)
	case n == 0 && len(addrs) == 0:
		return 0, nil, apiErr("MissingParameter", "One of %s and %s.N must be given.", countName, listName)
	}
	return n, addrs, nil
}

// addrEventLocked prepares the address hook for an attached ENI; the
// caller runs the returned func after releasing mu. changedP are IPv4
// prefixes changed (their addresses are added to the event's IPv4).
func (s *Server) addrEventLocked(e *ENIState, changed []netip.Addr, changedP []netip.Prefix, v6 bool, assign bool) func() {
	hook := s.hooks.OnUnassign
	if assign {
		hook = s.hooks.OnAssign
	}
	if hook == nil || e.InstanceID == "" || e.Status != "InUse" {
		return func() {}
	}
	ev := s.m.eventOf(e)
	ev.IPv4, ev.IPv6, ev.IPv4Prefixes = nil, nil, nil
	if v6 {
		ev.IPv6 = changed
	} else {
		ev.IPv4 = changed
		if len(changedP) > 0 {
			ev.IPv4Prefixes = changedP
			ev.IPv4 = sortAddrs(append(slices.Clone(changed), prefixAddrs(changedP)...))
		}
	}
	return func() { hook(ev) }
}

// assignPrivateIPs assigns secondary addresses (SecondaryPrivateIpAddressCount
// or PrivateIpAddress.N) or IPv4 prefixes (Ipv4PrefixCount or
// Ipv4Prefix.N), one of the four per call.
func (s *Server) assignPrivateIPs(c call) (obj, error) {
	eniID, err := required(c.p, "NetworkInterfaceId")
	if err != nil {
		return nil, err
	}
	prefixCount, err := intParam(c.p, "Ipv4PrefixCount", 0, 1, maxPrefixesPerCall)
	if err != nil {
		return nil, err
	}
	prefixes, err := parsePrefixes(list(c.p, "Ipv4Prefix"))
	if err != nil {
		return nil, err
	}
	if prefixCount > 0 || len(prefixes) > 0 {
		if c.p.Get("SecondaryPrivateIpAddressCount") != "" || len(list(c.p, "PrivateIpAddress")) > 0 {
			return nil, apiErr("InvalidParameter", "IPv4 prefixes and secondary private IP addresses cannot be assigned in one call.")
		}
		if prefixCount > 0 && len(prefixes) > 0 {
			return nil, apiErr("InvalidParameter", "Ipv4PrefixCount and Ipv4Prefix.N are mutually exclusive.")
		}
		s.mu.Lock()
		s.touchLocked(eniID)
		e, got, err := s.m.assignPrefixes(eniID, prefixCount, prefixes)
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		run := s.addrEventLocked(e, nil, got, false, true)
		s.saveLocked()
		s.mu.Unlock()
		run()
		return obj{"AssignedPrivateIpAddressesSet": obj{"NetworkInterfaceId": eniID, "PrivateIpSet": obj{"PrivateIpAddress": []string{}},
			"Ipv4PrefixSet": obj{"Ipv4Prefixes": prefixStrs(got)}}}, nil
	}
	// No documented range of its own: the ENI's state sets the limit
	// (model.ipv4Limit).
	n, addrs, err := countOrList(c, "SecondaryPrivateIpAddressCount", "PrivateIpAddress", false, 1<<20)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.touchLocked(eniID)
	e, got, err := s.m.assign4(eniID, n, addrs)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	run := s.addrEventLocked(e, got, nil, false, true)
	s.saveLocked()
	s.mu.Unlock()
	run()
	return obj{"AssignedPrivateIpAddressesSet": obj{"NetworkInterfaceId": eniID, "PrivateIpSet": obj{"PrivateIpAddress": strs(got)},
		"Ipv4PrefixSet": obj{"Ipv4Prefixes": []string{}}}}, nil
}

// unassignPrivateIPs removes secondary addresses (PrivateIpAddress.N) and
// IPv4 prefixes (Ipv4Prefix.N, at most 10).
func (s *Server) unassignPrivateIPs(c call) (obj, error) {
	eniID, err := required(c.p, "NetworkInterfaceId")
	if err != nil {
		return nil, err
	}
	raw, err := listOf(c.p, "PrivateIpAddress", maxUnassignPerCall)
	if err != nil {
		return nil, err
	}
	addrs, err := parseAddrs(raw, "PrivateIpAddress", false)
	if err != nil {
		return nil, err
	}
	prefixes, err := parsePrefixes(list(c.p, "Ipv4Prefix"))
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 && len(prefixes) == 0 {
		return nil, apiErr("MissingParameter", "The input parameter \"PrivateIpAddress.N\" that is mandatory for processing this request is not supplied.")
	}
	s.mu.Lock()
	s.touchLocked(eniID)
	e, gone, goneP, err := s.m.unassign4(eniID, addrs, prefixes)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	run := s.addrEventLocked(e, gone, goneP, false, false)
	s.saveLocked()
	s.mu.Unlock()
	run()
	return obj{}, nil
}

// modifyNetworkInterfaceAttribute changes an ENI's security groups
// (SecurityGroupId.N: the complete new set, 1..10 distinct groups that
// exist) and Description. Other attributes (name, queues,
// DeleteOnRelease, ...) are accepted and ignored.
func (s *Server) modifyNetworkInterfaceAttribute(c call) (obj, error) {
	eniID, err := required(c.p, "NetworkInterfaceId")
	if err != nil {
		return nil, err
	}
	sgs := list(c.p, "SecurityGroupId")
	if len(sgs) > maxSecurityGroupsOnENI {
		return nil, apiErr("InvalidParameter", "At most %d security groups are allowed.", maxSecurityGroupsOnENI)
	}
	if err := distinctGroups(sgs); err != nil {
		return nil, err
	}
	if err := checkDescription(c.p, maxModifyDescription); err != nil {
		return nil, err
	}
	desc, hasDesc := c.p["Description"]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.touchLocked(eniID)
	e, err := s.m.eni(eniID)
	if err != nil {
		return nil, err
	}
	if len(sgs) > 0 {
		if e, err = s.m.setSecurityGroups(eniID, sgs); err != nil {
			return nil, err
		}
	}
	if hasDesc {
		e.Description = desc[0]
	}
	s.saveLocked()
	return obj{}, nil
}

func (s *Server) assignIPv6(c call) (obj, error) {
	eniID, err := required(c.p, "NetworkInterfaceId")
	if err != nil {
		return nil, err
	}
	n, addrs, err := countOrList(c, "Ipv6AddressCount", "Ipv6Address", true, maxIPv6PerCall)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.touchLocked(eniID)
	e, got, err := s.m.assign6(eniID, n, addrs)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	run := s.addrEventLocked(e, got, nil, true, true)
	s.saveLocked()
	s.mu.Unlock()
	run()
	return obj{"NetworkInterfaceId": eniID, "Ipv6Sets": obj{"Ipv6Address": strs(got)}}, nil
}

func (s *Server) unassignIPv6(c call) (obj, error) {
	eniID, err := required(c.p, "NetworkInterfaceId")
	if err != nil {
		return nil, err
	}
	raw, err := listOf(c.p, "Ipv6Address", maxIPv6PerCall)
	if err != nil {
		return nil, err
	}
	addrs, err := parseAddrs(raw, "Ipv6Address", true)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, apiErr("MissingParameter", "The input parameter \"Ipv6Address.N\" that is mandatory for processing this request is not supplied.")
	}
	s.mu.Lock()
	s.touchLocked(eniID)
	e, gone, err := s.m.unassign6(eniID, addrs)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	run := s.addrEventLocked(e, gone, nil, true, false)
	s.saveLocked()
	s.mu.Unlock()
	run()
	return obj{}, nil
}

func prefixStrs(q []netip.Prefix) []string {
	out := make([]string, len(q))
	for i, x := range q {
		out[i] = x.String()
	}
	return out
}

func strs(a []netip.Addr) []string {
	out := make([]string, len(a))
	for i, x := range a {
		out[i] = x.String()
	}
	return out
}
