package ecssim

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"
)

// The limits of the API that do not depend on the instance type are in
// rules.go, each with its source.

// model is the simulated account. Its methods are called with Server.mu
// held; they change nothing when they return an error.
type model struct {
	region    string
	vpcID     string
	vpcCIDR   netip.Prefix
	types     map[string]InstanceType
	sgs       map[string]bool
	instances map[string]*InstanceState
	enis      map[string]*ENIState
	// byInstance indexes enis by InstanceID (instance -> ENI ID -> ENI)
	// for every ENI with an instance: attaching, attached or detaching. A
	// describe of one instance's ENIs reads it instead of every ENI of the
	// account. Only put, remove and setInstance change it.
	byInstance map[string]map[string]*ENIState
	// byTag indexes enis by each of their tags ("key=value" -> ENI ID ->
	// ENI): a describe by tag (the agent's owned ENIs, by its owner tag)
	// reads it instead of every ENI of the account, as ECS's tag index
	// does. An ENI's tags are set when it is created and never change
	// here, so only put and remove change it.
	byTag   map[string]map[string]*ENIState
	vsw     map[string]*VSwitchState
	pools   map[string]*pool
	seq     uint64
	maxENIs int
}

// put adds a new ENI.
func (m *model) put(e *ENIState) {
	m.enis[e.ID] = e
	m.index(e)
	for k, v := range e.Tags {
		set := m.byTag[tagKey(k, v)]
		if set == nil {
			set = map[string]*ENIState{}
			m.byTag[tagKey(k, v)] = set
		}
		set[e.ID] = e
	}
}

// tagKey is byTag's key for the tag k=v.
func tagKey(k, v string) string { return k + "=" + v }

// setInstance attaches e to instance id ("": to none). Every change of an
// ENI's InstanceID goes through it, so that byInstance follows.
func (m *model) setInstance(e *ENIState, id string) {
	m.unindex(e)
	e.InstanceID = id
	m.index(e)
}

// setDetached leaves e Available and on no instance: what a completed
// detach does, and a release to an ENI it keeps.
func (m *model) setDetached(e *ENIState) {
	m.setInstance(e, "")
	e.Status, e.DeviceIndex, e.InUseAt = "Available", 0, time.Time{}
}

func (m *model) index(e *ENIState) {
	if e.InstanceID == "" {
		return
	}
	set := m.byInstance[e.InstanceID]
	if set == nil {
		set = map[string]*ENIState{}
		m.byInstance[e.InstanceID] = set
	}
	set[e.ID] = e
}

// unindex drops e from byInstance, and its instance's set when that empties
// (the index does not grow with instances released).
func (m *model) unindex(e *ENIState) {
	set := m.byInstance[e.InstanceID]
	delete(set, e.ID)
	if len(set) == 0 {
		delete(m.byInstance, e.InstanceID)
	}
}

func (m *model) nextID(prefix string) string {
	m.seq++
	return fmt.Sprintf("%s%014x", prefix, m.seq)
}

func (m *model) nextMAC() string {
	m.seq++
	n := m.seq
	return fmt.Sprintf("00:16:3e:%02x:%02x:%02x", byte(n>>16), byte(n>>8), byte(n))
}

func (m *model) addVSwitch(c VSwitchConfig) error {
	if c.ID == "" {
		return fmt.Errorf("vswitch without id")
	}
	if _, dup := m.vsw[c.ID]; dup {
		return fmt.Errorf("vswitch %s defined twice", c.ID)
	}
	if !c.CIDR.IsValid() || !c.CIDR.Addr().Is4() || c.CIDR.Bits() > 29 {
		return fmt.Errorf("vswitch %s: cidr %s is not an IPv4 prefix of /29 or larger", c.ID, c.CIDR)
	}
	if !m.vpcCIDR.Contains(c.CIDR.Addr()) || c.CIDR.Bits() < m.vpcCIDR.Bits() {
		return fmt.Errorf("vswitch %s: cidr %s outside vpc %s", c.ID, c.CIDR, m.vpcCIDR)
	}
	for _, o := range m.vsw {
		if o.CIDR.Overlaps(c.CIDR) {
			return fmt.Errorf("vswitch %s: cidr %s overlaps %s", c.ID, c.CIDR, o.ID)
		}
	}
	if c.IPv6CIDR.IsValid() && (c.IPv6CIDR.Addr().Is4() || c.IPv6CIDR.Bits() > 120) {
		return fmt.Errorf("vswitch %s: ipv6 cidr %s is not an IPv6 prefix of /120 or larger", c.ID, c.IPv6CIDR)
	}
	p := newPool(c.CIDR, c.IPv6CIDR)
	m.pools[c.ID] = p
	m.vsw[c.ID] = &VSwitchState{ID: c.ID, ZoneID: c.Zone, VPCID: m.vpcID, CIDR: c.CIDR.Masked(), IPv6CIDR: c.IPv6CIDR.Masked(), AvailableIPs: p.available(), Tags: map[string]string{}}
	for k, v := range c.Tags {
		m.vsw[c.ID].Tags[k] = v
	}
	return nil
}

func (m *model) syncAvailable(vswID string) {
	m.vsw[vswID].AvailableIPs = m.pools[vswID].available()
}

// eventOf renders an ENI for a hook.
func (m *model) eventOf(e *ENIState) ENIEvent {
	ev := ENIEvent{InstanceID: e.InstanceID, ENIID: e.ID, MAC: e.MAC, PrimaryIP: e.PrimaryIP,
		IPv4: cloneOrNil(e.IPv4), IPv6: cloneOrNil(e.IPv6), DeviceIndex: e.DeviceIndex}
	if len(e.IPv4Prefixes) > 0 {
		ev.IPv4Prefixes = slices.Clone(e.IPv4Prefixes)
		ev.IPv4 = sortAddrs(append(ev.IPv4, prefixAddrs(e.IPv4Prefixes)...))
	}
	if v := m.vsw[e.VSwitchID]; v != nil {
		ev.CIDR = v.CIDR
		ev.Gateway = gatewayOf(v.CIDR)
		if v.IPv6CIDR.IsValid() {
			ev.GatewayV6 = ipv6Gateway(v.IPv6CIDR)
		}
	}
	return ev
}

// Event is the ENI as the hooks see it (what OnAttach would get now); a
// harness that plugs an ENI the hooks never saw (an instance's primary,
// attached at creation) uses it.
func (s *Server) Event(eniID string) (ENIEvent, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m.enis[eniID]
	if e == nil {
		return ENIEvent{}, false
	}
	return s.m.eventOf(e), true
}

// gatewayOf is the vSwitch gateway: the address at index -3 of the CIDR.
func gatewayOf(p netip.Prefix) netip.Addr {
	if !p.IsValid() || !p.Addr().Is4() || p.Bits() > 29 {
		return netip.Addr{}
	}
	return newPool(p, netip.Prefix{}).addr4((uint64(1) << (32 - p.Bits())) - 3)
}

// newENIParams are the checked inputs of createENI.
type newENIParams struct {
	vswID     string
	sgs       []string
	tags      map[string]string
	secondary int
	// primary is PrimaryIpAddress (zero: chosen here).
	primary netip.Addr
	addrs   []netip.Addr
	// addrs6 are Ipv6Address.N; ipv6Count is Ipv6AddressCount.
	addrs6      []netip.Addr
	prefixCount int
	prefixes    []netip.Prefix
	ipv6Count   int
	description string
	trafficMode string
	eniType     string
	now         time.Time
}

func (m *model) createENI(p newENIParams) (*ENIState, error) {
	v := m.vsw[p.vswID]
	if v == nil {
		return nil, apiErr("InvalidVSwitchId.NotFound", "The specified VSwitchId %q does not exist.", p.vswID)
	}
	for _, sg := range p.sgs {
		if !m.sgs[sg] {
			return nil, apiErr("InvalidSecurityGroupId.NotFound", "The specified SecurityGroupId %q does not exist.", sg)
		}
	}
	if m.maxENIs > 0 && len(m.enis) >= m.maxENIs {
		return nil, apiErr("MaxEniCountExceeded", "The maximum number of ENIs in this account (%d) is reached.", m.maxENIs)
	}
	pl := m.pools[p.vswID]
	if (p.ipv6Count > 0 || len(p.addrs6) > 0) && !pl.cidr6.IsValid() {
		return nil, ipv6NotOn(p.vswID)
	}
	// A named address already held is InvalidPrivateIpAddress.Duplicated
	// here: CreateNetworkInterface's error table has no InvalidIp.IpAssigned.
	explicit := p.addrs
	if p.primary.IsValid() {
		explicit = append([]netip.Addr{p.primary}, p.addrs...)
	}
	if err := checkNew4(pl, explicit, "InvalidPrivateIpAddress.Duplicated"); err != nil {
		return nil, err
	}
	if err := checkNew6(pl, p.addrs6, "InvalidPrivateIpAddress.Duplicated"); err != nil {
		return nil, err
	}
	if err := checkPrefixes(pl, p.prefixes); err != nil {
		return nil, err
	}
	if pl.available() < 1+p.secondary+len(p.addrs)+prefixSize*(p.prefixCount+len(p.prefixes)) {
		return nil, apiErr("InvalidVSwitchId.IpNotEnough", "The specified VSwitch %q has not enough IpAddress.", p.vswID)
	}
	seq := m.seq
	id := m.nextID("eni-sim")
	// Prefixes before single addresses: a single address taken first could
	// break the last free /28. Whatever fails undoes the claims before it.
	var claimed []netip.Addr
	var claimedP []netip.Prefix
	undo := func() {
		for _, a := range claimed {
			pl.release(id, a)
		}
		for _, q := range claimedP {
			pl.releasePrefix(id, q)
		}
		m.seq = seq
	}
	for _, a := range explicit {
		pl.claim(id, a)
		claimed = append(claimed, a)
	}
	for _, q := range p.prefixes {
		if k, _ := pl.blockOf(q); !pl.blockFree(k) {
			undo()
			return nil, apiErr("InvalidIp.IpAssigned", "An address of the IPv4 prefix %s is already assigned.", q)
		}
		pl.claimPrefix(id, q)
		claimedP = append(claimedP, q)
	}
	got, ok := pl.takePrefixes(id, p.prefixCount)
	if !ok {
		undo()
		return nil, apiErr("InvalidVSwitchId.IpNotEnough", "The specified VSwitch %q has not enough IpAddress: no free aligned /28 for an IPv4 prefix.", p.vswID)
	}
	claimedP = append(claimedP, got...)
	chosen := p.secondary
	if !p.primary.IsValid() {
		chosen++
	}
	singles, ok := pl.take4(id, chosen)
	if !ok {
		undo()
		return nil, apiErr("InvalidVSwitchId.IpNotEnough", "The specified VSwitch %q has not enough IpAddress.", p.vswID)
	}
	if p.primary.IsValid() {
		singles = append([]netip.Addr{p.primary}, singles...)
	}
	e := &ENIState{ID: id, MAC: m.nextMAC(), Status: "Available", Type: p.eniType, VSwitchID: v.ID, ZoneID: v.ZoneID, VPCID: v.VPCID,
		SecurityGroups: slices.Clone(p.sgs), Tags: p.tags, Description: p.description, TrafficMode: p.trafficMode, CreatedAt: p.now}
	if e.Tags == nil {
		e.Tags = map[string]string{}
	}
	e.PrimaryIP = singles[0]
	e.IPv4 = sortAddrs(append(slices.Clone(p.addrs), singles[1:]...))
	if len(claimedP) > 0 {
		e.IPv4Prefixes = sortPrefixes(claimedP)
	}
	for _, a := range p.addrs6 {
		pl.claim(id, a)
	}
	e.IPv6 = sortAddrs(append(slices.Clone(p.addrs6), pl.take6(id, p.ipv6Count)...))
	m.put(e)
	m.syncAvailable(v.ID)
	return e, nil
}

// checkPrefixes checks that the prefixes named in a request are distinct
// aligned /28s of the vSwitch made of usable addresses; whether they are
// free is checked as they are claimed.
func checkPrefixes(pl *pool, qs []netip.Prefix) error {
	seen := map[netip.Prefix]bool{}
	for _, q := range qs {
		if seen[q] {
			return apiErr("InvalidParameter", "The IPv4 prefix %s is given twice.", q)
		}
		seen[q] = true
		if _, ok := pl.blockOf(q); !ok {
			return apiErr("InvalidParameter", "The IPv4 prefix %s is not an aligned /28 of usable addresses of vSwitch CIDR %s.", q, pl.cidr)
		}
	}
	return nil
}

// checkNew4 checks the IPv4 addresses a request names to be given to an
// ENI, with the codes of the ENI actions' error tables (API reference):
// one named twice is InvalidIp.IpRepeated (403), one that is no usable
// address of the vSwitch (outside its CIDR, or reserved) is
// InvalidVSwitchId.IpInvalid (403), one held already answers usedCode.
func checkNew4(pl *pool, addrs []netip.Addr, usedCode string) error {
	seen := map[netip.Addr]bool{}
	for _, a := range addrs {
		if seen[a] {
			return apiErr("InvalidIp.IpRepeated", "The IP address %s is given twice.", a)
		}
		seen[a] = true
		if !pl.usable4(a) {
			return apiErr("InvalidVSwitchId.IpInvalid", "The IP address %s is not a usable address of vSwitch CIDR %s.", a, pl.cidr)
		}
		if _, used := pl.used[a]; used {
			return apiErr(usedCode, "The IP address %s is already assigned.", a)
		}
	}
	return nil
}

// checkNew6 is checkNew4 for IPv6: an address outside the vSwitch's IPv6
// CIDR is InvalidIp.Address (403, "the specified IPv6 address is
// invalid": CreateNetworkInterface's and AssignIpv6Addresses' error
// tables, which do not say whether that code or InvalidVSwitchId.IpInvalid
// is the one for an address of another CIDR).
func checkNew6(pl *pool, addrs []netip.Addr, usedCode string) error {
	seen := map[netip.Addr]bool{}
	for _, a := range addrs {
		if seen[a] {
			return apiErr("InvalidIp.IpRepeated", "The IPv6 address %s is given twice.", a)
		}
		seen[a] = true
		if !pl.usable6(a) {
			return apiErr("InvalidIp.Address", "The IPv6 address %s is not in vSwitch IPv6 CIDR %s.", a, pl.cidr6)
		}
		if _, used := pl.used[a]; used {
			return apiErr(usedCode, "The IPv6 address %s is already assigned.", a)
		}
	}
	return nil
}

// ipv6NotOn refuses IPv6 on a vSwitch without an IPv6 CIDR
// (InvalidVSwitch.Ipv6NotTurnOn, 403: AssignIpv6Addresses' error table).
func ipv6NotOn(vswID string) error {
	return apiErr("InvalidVSwitch.Ipv6NotTurnOn", "The vSwitch %s has no IPv6 CIDR.", vswID)
}

func (m *model) eni(id string) (*ENIState, error) {
	e := m.enis[id]
	if e == nil {
		return nil, apiErr("InvalidEniId.NotFound", "The specified NetworkInterfaceId %q does not exist.", id)
	}
	return e, nil
}

func (m *model) instance(id string) (*InstanceState, error) {
	in := m.instances[id]
	if in == nil {
		// Attach and detach name a missing instance so (DescribeInstances
		// just lists nothing).
		return nil, apiErr("InvalidEcsId.NotFound", "The specified InstanceId %q does not exist.", id)
	}
	return in, nil
}

// attached lists the ENIs attached, attaching or detaching to an instance,
// by device index.
func (m *model) attached(instanceID string) []*ENIState {
	out := slices.Collect(maps.Values(m.byInstance[instanceID]))
	sort.Slice(out, func(i, j int) bool { return out[i].DeviceIndex < out[j].DeviceIndex })
	return out
}

func (m *model) startAttach(eniID, instanceID string) (*ENIState, error) {
	e, err := m.eni(eniID)
	if err != nil {
		return nil, err
	}
	in, err := m.instance(instanceID)
	if err != nil {
		return nil, err
	}
	if e.Status != "Available" {
		return nil, apiErr("InvalidOperation.InvalidEniState", "The ENI %s is %s; it must be Available to attach.", e.ID, e.Status)
	}
	if e.ZoneID != in.ZoneID {
		return nil, apiErr("InvalidOperation.AvailabilityZoneMismatch", "The ENI %s is in zone %s, the instance in %s.", e.ID, e.ZoneID, in.ZoneID)
	}
	t := m.types[in.InstanceType]
	att := m.attached(in.ID)
	if len(att) >= t.ENIs {
		return nil, apiErr("EniPerInstanceLimitExceeded", "The instance %s (%s) can hold at most %d ENIs.", in.ID, t.ID, t.ENIs)
	}
	if e.ipCount() > t.IPv4PerENI {
		return nil, apiErr("InvalidOperation.Ipv4CountExceeded", "The ENI %s has %d private IPv4 addresses; %s allows %d per ENI.", e.ID, e.ipCount(), t.ID, t.IPv4PerENI)
	}
	if len(e.IPv6) > t.IPv6PerENI {
		return nil, apiErr("InvalidOperation.Ipv6CountExceeded", "The ENI %s has %d IPv6 addresses; %s allows %d per ENI.", e.ID, len(e.IPv6), t.ID, t.IPv6PerENI)
	}
	used := map[int]bool{}
	for _, o := range att {
		used[o.DeviceIndex] = true
	}
	idx := 1
	for used[idx] {
		idx++
	}
	m.setInstance(e, in.ID)
	e.Status, e.DeviceIndex = "Attaching", idx
	return e, nil
}

// startDetach starts detaching an InUse ENI. An ENI Detaching already is
// accepted again (again is true) and left to the detach under way: the
// API reference says the ENI must be "Detaching or InUse", and that a
// detach stuck in Detaching may be re-initiated.
func (m *model) startDetach(eniID, instanceID string) (e *ENIState, again bool, err error) {
	e, err = m.eni(eniID)
	if err != nil {
		return nil, false, err
	}
	if instanceID != "" {
		if _, err := m.instance(instanceID); err != nil {
			return nil, false, err
		}
	}
	if e.Type == "Primary" {
		return nil, false, apiErr("InvalidOperation.DetachPrimaryEniNotAllowed", "The primary ENI %s cannot be detached.", e.ID)
	}
	if e.Status != "InUse" && e.Status != "Detaching" {
		return nil, false, apiErr("InvalidOperation.InvalidEniState", "The ENI %s is %s; it must be InUse or Detaching to detach.", e.ID, e.Status)
	}
	if instanceID != "" && e.InstanceID != instanceID {
		return nil, false, apiErr("InvalidOperation.InvalidEniState", "The ENI %s is not attached to instance %s.", e.ID, instanceID)
	}
	if e.Status == "Detaching" {
		return e, true, nil
	}
	e.Status = "Detaching"
	return e, false, nil
}

// startDelete starts deleting an Available ENI. An ENI Deleting already is
// accepted again (again is true) and left to the deletion under way: the
// API reference says a deletion stuck in Deleting may be re-initiated.
func (m *model) startDelete(eniID string) (e *ENIState, again bool, err error) {
	e, err = m.eni(eniID)
	if err != nil {
		return nil, false, err
	}
	if e.Type == "Primary" || (e.Status != "Available" && e.Status != "Deleting") {
		return nil, false, apiErr("InvalidOperation.InvalidEniState", "The ENI %s is %s; it must be Available to delete.", e.ID, e.Status)
	}
	if e.Status == "Deleting" {
		return e, true, nil
	}
	e.Status = "Deleting"
	return e, false, nil
}

// remove deletes an ENI and returns its addresses to the vSwitch.
func (m *model) remove(e *ENIState) {
	pl := m.pools[e.VSwitchID]
	pl.release(e.ID, e.PrimaryIP)
	for _, a := range e.IPv4 {
		pl.release(e.ID, a)
	}
	for _, q := range e.IPv4Prefixes {
		pl.releasePrefix(e.ID, q)
	}
	for _, a := range e.IPv6 {
		pl.release(e.ID, a)
	}
	m.unindex(e)
	for k, v := range e.Tags {
		set := m.byTag[tagKey(k, v)]
		delete(set, e.ID)
		if len(set) == 0 {
			delete(m.byTag, tagKey(k, v))
		}
	}
	delete(m.enis, e.ID)
	m.syncAvailable(e.VSwitchID)
}

// ipv4Limit is how many private IPv4 addresses (primary included) the ENI
// may hold in its current state, and the most one call may add.
func (m *model) ipv4Limit(e *ENIState) (total, perCall int) {
	if e.InstanceID != "" {
		t := m.types[m.instances[e.InstanceID].InstanceType]
		return t.IPv4PerENI, t.IPv4PerENI
	}
	return maxIPv4Unattached, maxAssignOnAvailable
}

func (m *model) ipv6Limit(e *ENIState) (total, perCall int) {
	if e.InstanceID != "" {
		t := m.types[m.instances[e.InstanceID].InstanceType]
		return t.IPv6PerENI, t.IPv6PerENI
	}
	return maxIPv6Unattached, maxIPv6PerCall
}

func assignable(e *ENIState) error {
	if e.Status != "Available" && e.Status != "InUse" {
		return apiErr("InvalidOperation.InvalidEniState", "The ENI %s is %s; addresses can change only when it is Available or InUse.", e.ID, e.Status)
	}
	return nil
}

func (m *model) assign4(eniID string, count int, addrs []netip.Addr) (*ENIState, []netip.Addr, error) {
	e, err := m.eni(eniID)
	if err != nil {
		return nil, nil, err
	}
	if err := assignable(e); err != nil {
		return nil, nil, err
	}
	n := count + len(addrs)
	total, perCall := m.ipv4Limit(e)
	if n > perCall || e.ipCount()+n > total {
		return nil, nil, apiErr("InvalidOperation.Ipv4CountExceeded", "The ENI %s holds %d private IPv4 addresses; adding %d exceeds its limit of %d (at most %d per call).", e.ID, e.ipCount(), n, total, perCall)
	}
	pl := m.pools[e.VSwitchID]
	if err := checkNew4(pl, addrs, "InvalidIp.IpAssigned"); err != nil {
		return nil, nil, err
	}
	if pl.available() < n {
		return nil, nil, apiErr("InvalidVSwitchId.IpNotEnough", "The specified VSwitch %q has not enough IpAddress.", e.VSwitchID)
	}
	for _, a := range addrs {
		pl.claim(e.ID, a)
	}
	got, _ := pl.take4(e.ID, count)
	got = append(slices.Clone(addrs), got...)
	e.IPv4 = sortAddrs(append(e.IPv4, got...))
	m.syncAvailable(e.VSwitchID)
	return e, got, nil
}

// assignPrefixes adds count IPv4 prefixes chosen here, or exactly qs, to
// the ENI. Each takes one private IPv4 slot; a vSwitch without a free
// aligned /28 refuses with InvalidVSwitchId.IpNotEnough, however many
// single addresses it has free.
func (m *model) assignPrefixes(eniID string, count int, qs []netip.Prefix) (*ENIState, []netip.Prefix, error) {
	e, err := m.eni(eniID)
	if err != nil {
		return nil, nil, err
	}
	if err := assignable(e); err != nil {
		return nil, nil, err
	}
	n := count + len(qs)
	total, _ := m.ipv4Limit(e)
	if n > maxPrefixesPerCall || e.ipCount()+n > total {
		return nil, nil, apiErr("InvalidOperation.Ipv4CountExceeded", "The ENI %s holds %d private IPv4 addresses and prefixes; adding %d prefixes exceeds its limit of %d (at most %d per call).", e.ID, e.ipCount(), n, total, maxPrefixesPerCall)
	}
	pl := m.pools[e.VSwitchID]
	if err := checkPrefixes(pl, qs); err != nil {
		return nil, nil, err
	}
	var got []netip.Prefix
	for _, q := range qs {
		if k, _ := pl.blockOf(q); !pl.blockFree(k) {
			for _, c := range got {
				pl.releasePrefix(e.ID, c)
			}
			return nil, nil, apiErr("InvalidIp.IpAssigned", "An address of the IPv4 prefix %s is already assigned.", q)
		}
		pl.claimPrefix(e.ID, q)
		got = append(got, q)
	}
	chosen, ok := pl.takePrefixes(e.ID, count)
	if !ok {
		for _, c := range got {
			pl.releasePrefix(e.ID, c)
		}
		return nil, nil, apiErr("InvalidVSwitchId.IpNotEnough", "The specified VSwitch %q has not enough IpAddress: no free aligned /28 for an IPv4 prefix.", e.VSwitchID)
	}
	got = append(got, chosen...)
	e.IPv4Prefixes = sortPrefixes(append(e.IPv4Prefixes, got...))
	m.syncAvailable(e.VSwitchID)
	return e, got, nil
}

// unassign4 removes addrs and prefixes qs; those the ENI does not hold are
// ignored when some are held, and refused (InvalidIp.IpUnassigned) when
// none is. An address inside one of the ENI's prefixes is not one of its
// secondary addresses: only the whole prefix can go.
func (m *model) unassign4(eniID string, addrs []netip.Addr, qs []netip.Prefix) (*ENIState, []netip.Addr, []netip.Prefix, error) {
	e, err := m.eni(eniID)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := assignable(e); err != nil {
		return nil, nil, nil, err
	}
	pl := m.pools[e.VSwitchID]
	for _, a := range addrs {
		switch {
		case !pl.usable4(a):
			// UnassignPrivateIpAddresses' error table: the specified
			// private IP is invalid.
			return nil, nil, nil, apiErr("InvalidVSwitchId.IpInvalid", "The IP address %s is not a usable address of vSwitch CIDR %s.", a, pl.cidr)
		case a == e.PrimaryIP:
			// The primary address is no secondary one: ECS answers
			// InvalidIp.IpUnassigned (Terway pkg/aliyun/client/ecs.go,
			// UnAssignPrivateIPAddresses) and removes nothing.
			return nil, nil, nil, apiErr("InvalidIp.IpUnassigned", "The IP address %s is the primary address of ENI %s, not a secondary one.", a, e.ID)
		}
	}
	gone := removeAddrs(&e.IPv4, addrs)
	var goneP []netip.Prefix
	for _, q := range qs {
		if i := slices.Index(e.IPv4Prefixes, q); i >= 0 {
			e.IPv4Prefixes = slices.Delete(e.IPv4Prefixes, i, i+1)
			goneP = append(goneP, q)
		}
	}
	if len(e.IPv4Prefixes) == 0 {
		e.IPv4Prefixes = nil
	}
	if len(gone) == 0 && len(goneP) == 0 {
		return nil, nil, nil, apiErr("InvalidIp.IpUnassigned", "The IP addresses or prefixes are not assigned to ENI %s.", e.ID)
	}
	for _, a := range gone {
		pl.release(e.ID, a)
	}
	for _, q := range goneP {
		pl.releasePrefix(e.ID, q)
	}
	m.syncAvailable(e.VSwitchID)
	return e, gone, goneP, nil
}

// setSecurityGroups replaces the ENI's security groups with sgs
// (ModifyNetworkInterfaceAttribute): every group must exist, the ENI must
// be Available or InUse.
func (m *model) setSecurityGroups(eniID string, sgs []string) (*ENIState, error) {
	e, err := m.eni(eniID)
	if err != nil {
		return nil, err
	}
	for _, sg := range sgs {
		if !m.sgs[sg] {
			return nil, apiErr("InvalidSecurityGroupId.NotFound", "The specified SecurityGroupId %q does not exist.", sg)
		}
	}
	if e.Status != "Available" && e.Status != "InUse" {
		return nil, apiErr("InvalidOperation.InvalidEniState", "The ENI %s is %s; its attributes can change only when it is Available or InUse.", e.ID, e.Status)
	}
	e.SecurityGroups = slices.Clone(sgs)
	return e, nil
}

func (m *model) assign6(eniID string, count int, addrs []netip.Addr) (*ENIState, []netip.Addr, error) {
	e, err := m.eni(eniID)
	if err != nil {
		return nil, nil, err
	}
	if err := assignable(e); err != nil {
		return nil, nil, err
	}
	pl := m.pools[e.VSwitchID]
	if !pl.cidr6.IsValid() {
		return nil, nil, ipv6NotOn(e.VSwitchID)
	}
	n := count + len(addrs)
	total, perCall := m.ipv6Limit(e)
	if n > perCall || len(e.IPv6)+n > total {
		return nil, nil, apiErr("InvalidOperation.Ipv6CountExceeded", "The ENI %s holds %d IPv6 addresses; adding %d exceeds its limit of %d.", e.ID, len(e.IPv6), n, total)
	}
	if err := checkNew6(pl, addrs, "InvalidIp.IpAssigned"); err != nil {
		return nil, nil, err
	}
	for _, a := range addrs {
		pl.claim(e.ID, a)
	}
	got := append(slices.Clone(addrs), pl.take6(e.ID, count)...)
	e.IPv6 = sortAddrs(append(e.IPv6, got...))
	return e, got, nil
}

func (m *model) unassign6(eniID string, addrs []netip.Addr) (*ENIState, []netip.Addr, error) {
	e, err := m.eni(eniID)
	if err != nil {
		return nil, nil, err
	}
	if err := assignable(e); err != nil {
		return nil, nil, err
	}
	pl := m.pools[e.VSwitchID]
	for _, a := range addrs {
		if !pl.usable6(a) {
			return nil, nil, apiErr("InvalidIp.Address", "The IPv6 address %s is not in vSwitch IPv6 CIDR %s.", a, pl.cidr6)
		}
	}
	gone := removeAddrs(&e.IPv6, addrs)
	if len(gone) == 0 {
		return nil, nil, apiErr("InvalidIp.IpUnassigned", "The IPv6 addresses are not assigned to ENI %s.", e.ID)
	}
	for _, a := range gone {
		pl.release(e.ID, a)
	}
	return e, gone, nil
}

// removeAddrs deletes addrs from *have and returns those it removed.
func removeAddrs(have *[]netip.Addr, addrs []netip.Addr) []netip.Addr {
	var gone []netip.Addr
	for _, a := range addrs {
		if i := slices.Index(*have, a); i >= 0 {
			*have = slices.Delete(*have, i, i+1)
			gone = append(gone, a)
		}
	}
	return gone
}

func sortAddrs(a []netip.Addr) []netip.Addr {
	slices.SortFunc(a, netip.Addr.Compare)
	return a
}

func sortPrefixes(q []netip.Prefix) []netip.Prefix {
	slices.SortFunc(q, netip.Prefix.Compare)
	return q
}

// instanceList returns copies of the instances, sorted by ID: what the
// describes need, without the rest of a snapshot (which copies every ENI
// and counts every vSwitch's free /28s: on the fleet benchmark's /12, a
// million address lookups per call). Given ids, only the instances they
// name, each once.
func (m *model) instanceList(ids []string) []InstanceState {
	var from []*InstanceState
	if len(ids) == 0 {
		from = slices.Collect(maps.Values(m.instances))
	}
	for _, id := range ids {
		if in := m.instances[id]; in != nil {
			from = append(from, in)
		}
	}
	out := make([]InstanceState, 0, len(from))
	for _, in := range from {
		c := *in
		c.SecurityGroups = slices.Clone(in.SecurityGroups)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b InstanceState) int { return strings.Compare(a.ID, b.ID) })
	return slices.CompactFunc(out, func(a, b InstanceState) bool { return a.ID == b.ID })
}

// vSwitchList returns copies of the vSwitches, sorted by ID, without the
// snapshot's FreePrefixes and Held (see instanceList).
func (m *model) vSwitchList() []VSwitchState {
	out := make([]VSwitchState, 0, len(m.vsw))
	for _, v := range m.vsw {
		c := *v
		c.Tags = maps.Clone(v.Tags)
		c.Held, c.FreePrefixes = nil, 0
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// snapshot copies the model into a State.
func (m *model) snapshot() State {
	st := State{Region: m.region, VPCID: m.vpcID, VPCCIDR: m.vpcCIDR, Seq: m.seq}
	for _, in := range m.instances {
		c := *in
		c.SecurityGroups = slices.Clone(in.SecurityGroups)
		st.Instances = append(st.Instances, c)
	}
	for _, e := range m.enis {
		st.ENIs = append(st.ENIs, *e.clone())
	}
	for _, v := range m.vsw {
		c := *v
		c.Tags = make(map[string]string, len(v.Tags))
		for k, val := range v.Tags {
			c.Tags[k] = val
		}
		pl := m.pools[v.ID]
		c.FreePrefixes = pl.freePrefixes()
		c.Held = nil
		for a := range pl.outside {
			c.Held = append(c.Held, a)
		}
		sortAddrs(c.Held)
		st.VSwitches = append(st.VSwitches, c)
	}
	sort.Slice(st.Instances, func(i, j int) bool { return st.Instances[i].ID < st.Instances[j].ID })
	sort.Slice(st.ENIs, func(i, j int) bool { return st.ENIs[i].ID < st.ENIs[j].ID })
	sort.Slice(st.VSwitches, func(i, j int) bool { return st.VSwitches[i].ID < st.VSwitches[j].ID })
	return st
}

// prefixAddrs lists every address of the prefixes.
func prefixAddrs(qs []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, q := range qs {
		for a := q.Addr(); q.Contains(a); a = a.Next() {
			out = append(out, a)
		}
	}
	return out
}

func cloneOrNil(a []netip.Addr) []netip.Addr {
	if len(a) == 0 {
		return nil
	}
	return slices.Clone(a)
}
