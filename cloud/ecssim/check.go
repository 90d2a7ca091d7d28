package ecssim

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// Check verifies the model's invariants and returns every violation: each
// address is held by exactly one ENI and the vSwitch pools agree;
// AvailableIpAddressCount is exact; statuses, attachments, device indexes
// and per-type limits are consistent; the index of ENIs by instance
// agrees with the ENIs. Tests call it after a workload.
func (s *Server) Check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var v violations
	held, perInstance := s.m.checkENIs(&v)
	s.m.checkPools(&v, held)
	s.m.checkInstances(&v, perInstance)
	s.m.checkIndex(&v)
	return errors.Join(v...)
}

// violations collects what Check finds.
type violations []error

// add records one violation.
func (v *violations) add(format string, args ...any) {
	*v = append(*v, fmt.Errorf(format, args...))
}

// checkENIs checks each ENI on its own (its key, vSwitch, addresses,
// prefixes and status) and returns what the others are checked against:
// which ENI holds each address, by vSwitch, and the ENIs attached to each
// instance.
func (m *model) checkENIs(v *violations) (held map[string]map[netip.Addr]string, perInstance map[string][]*ENIState) {
	held = map[string]map[netip.Addr]string{} // vSwitch -> address -> ENI
	for id := range m.vsw {
		held[id] = map[netip.Addr]string{}
	}
	perInstance = map[string][]*ENIState{}
	for id, e := range m.enis {
		if id != e.ID {
			v.add("eni %s stored under %s", e.ID, id)
		}
		pl := m.pools[e.VSwitchID]
		if pl == nil {
			v.add("eni %s in unknown vswitch %s", e.ID, e.VSwitchID)
			continue
		}
		checkENIAddrs(v, e, pl, held[e.VSwitchID])
		if m.checkENIStatus(v, e) {
			perInstance[e.InstanceID] = append(perInstance[e.InstanceID], e)
		}
	}
	return held, perInstance
}

// checkENIAddrs checks that e's prefixes are sorted, aligned /28s of its
// vSwitch's usable addresses, and that each of its addresses is usable in
// the vSwitch and held by no other ENI; it records them in held
// (address -> ENI, of e's vSwitch).
func checkENIAddrs(v *violations, e *ENIState, pl *pool, held map[netip.Addr]string) {
	for _, q := range e.IPv4Prefixes {
		if _, ok := pl.blockOf(q); !ok {
			v.add("eni %s holds prefix %s, not an aligned /28 of usable addresses of %s", e.ID, q, pl.cidr)
		}
	}
	if !slices.IsSortedFunc(e.IPv4Prefixes, netip.Prefix.Compare) {
		v.add("eni %s: prefixes %v not sorted", e.ID, e.IPv4Prefixes)
	}
	for _, a := range append(append(append([]netip.Addr{e.PrimaryIP}, e.IPv4...), prefixAddrs(e.IPv4Prefixes)...), e.IPv6...) {
		if o, dup := held[a]; dup {
			v.add("%s held by %s and %s", a, o, e.ID)
		}
		held[a] = e.ID
		if a.Is4() && !pl.usable4(a) {
			v.add("eni %s holds %s, not a usable address of %s", e.ID, a, pl.cidr)
		}
		if a.Is6() && !pl.usable6(a) {
			v.add("eni %s holds %s, outside %s", e.ID, a, pl.cidr6)
		}
	}
}

// checkENIStatus checks that e's status agrees with its attachment, and
// reports whether e is attached to a known instance.
func (m *model) checkENIStatus(v *violations, e *ENIState) bool {
	switch e.Status {
	case "Available", "Deleting":
		if e.InstanceID != "" {
			v.add("eni %s is %s but attached to %s", e.ID, e.Status, e.InstanceID)
		}
	case "Attaching", "InUse", "Detaching":
		if m.instances[e.InstanceID] == nil {
			v.add("eni %s is %s on unknown instance %q", e.ID, e.Status, e.InstanceID)
			return false
		}
		return true
	default:
		v.add("eni %s has status %q", e.ID, e.Status)
	}
	return false
}

// checkPools checks each vSwitch's pool against what the ENIs hold
// (held: vSwitch -> address -> ENI) and its list of addresses held
// outside, and AvailableIpAddressCount against the pool.
func (m *model) checkPools(v *violations, held map[string]map[netip.Addr]string) {
	for id, pl := range m.pools {
		n4 := 0
		for a, eni := range pl.used {
			switch {
			case eni == outsideHolder:
				if !pl.outside[a] {
					v.add("vswitch %s pool holds %s for outside, not listed as such", id, a)
				}
			case held[id][a] != eni:
				v.add("vswitch %s pool gives %s to %s, the ENIs say %q", id, a, eni, held[id][a])
			}
			if a.Is4() {
				n4++
			}
		}
		for a := range pl.outside {
			if pl.used[a] != outsideHolder {
				v.add("vswitch %s lists %s as held outside, the pool says %q", id, a, pl.used[a])
			}
		}
		if len(pl.used) != len(held[id])+len(pl.outside) {
			v.add("vswitch %s pool holds %d addresses, the ENIs %d and outside %d", id, len(pl.used), len(held[id]), len(pl.outside))
		}
		if n4 != pl.n4 {
			v.add("vswitch %s counts %d IPv4 in use, holds %d", id, pl.n4, n4)
		}
		if got, want := m.vsw[id].AvailableIPs, int(pl.size)-n4; got != want {
			v.add("vswitch %s AvailableIpAddressCount %d, want %d", id, got, want)
		}
	}
}

// checkInstances checks each instance's attached ENIs (perInstance)
// against its type's limits and device indexes, and its primary ENI.
func (m *model) checkInstances(v *violations, perInstance map[string][]*ENIState) {
	for id, in := range m.instances {
		t := m.types[in.InstanceType]
		att := perInstance[id]
		if len(att) > t.ENIs {
			v.add("instance %s (%s) has %d ENIs, limit %d", id, t.ID, len(att), t.ENIs)
		}
		idx := map[int]string{}
		for _, e := range att {
			if o, dup := idx[e.DeviceIndex]; dup {
				v.add("instance %s: device index %d on %s and %s", id, e.DeviceIndex, o, e.ID)
			}
			idx[e.DeviceIndex] = e.ID
			if e.ipCount() > t.IPv4PerENI || len(e.IPv6) > t.IPv6PerENI {
				v.add("eni %s on %s holds %d IPv4 and %d IPv6, limits %d and %d", e.ID, t.ID, e.ipCount(), len(e.IPv6), t.IPv4PerENI, t.IPv6PerENI)
			}
		}
		if p := m.enis[in.PrimaryENI]; p == nil || p.Type != "Primary" || p.Status != "InUse" || p.InstanceID != id || p.DeviceIndex != 0 {
			v.add("instance %s: primary eni %s missing or not InUse at index 0", id, in.PrimaryENI)
		}
	}
}

// checkIndex checks byInstance and byTag against the ENIs: each ENI on an
// instance is indexed under it, each under each of its tags, and nothing
// else is indexed.
func (m *model) checkIndex(v *violations) {
	on, indexed := 0, 0
	for id, e := range m.enis {
		if e.InstanceID == "" {
			continue
		}
		on++
		if m.byInstance[e.InstanceID][id] != e {
			v.add("eni %s on %s is not indexed under it", id, e.InstanceID)
		}
	}
	for inst, set := range m.byInstance {
		if len(set) == 0 {
			v.add("instance %s indexed with no ENI", inst)
		}
		indexed += len(set)
	}
	if indexed != on {
		v.add("%d ENIs indexed by instance, %d are on one", indexed, on)
	}
	tagged, byTag := 0, 0
	for id, e := range m.enis {
		for k, val := range e.Tags {
			tagged++
			if m.byTag[tagKey(k, val)][id] != e {
				v.add("eni %s is not indexed under its tag %s=%s", id, k, val)
			}
		}
	}
	for key, set := range m.byTag {
		if len(set) == 0 {
			v.add("tag %s indexed with no ENI", key)
		}
		byTag += len(set)
	}
	if byTag != tagged {
		v.add("%d ENI tags indexed, the ENIs carry %d", byTag, tagged)
	}
}
