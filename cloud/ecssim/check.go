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
// and per-type limits are consistent. Tests call it after a workload.
func (s *Server) Check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.m
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	held := map[string]map[netip.Addr]string{} // vSwitch -> address -> ENI
	for id := range m.vsw {
		held[id] = map[netip.Addr]string{}
	}
	perInstance := map[string][]*ENIState{}
	for id, e := range m.enis {
		if id != e.ID {
			bad("eni %s stored under %s", e.ID, id)
		}
		pl := m.pools[e.VSwitchID]
		if pl == nil {
			bad("eni %s in unknown vswitch %s", e.ID, e.VSwitchID)
			continue
		}
		for _, q := range e.IPv4Prefixes {
			if _, ok := pl.blockOf(q); !ok {
				bad("eni %s holds prefix %s, not an aligned /28 of usable addresses of %s", e.ID, q, pl.cidr)
			}
		}
		if !slices.IsSortedFunc(e.IPv4Prefixes, netip.Prefix.Compare) {
			bad("eni %s: prefixes %v not sorted", e.ID, e.IPv4Prefixes)
		}
		for _, a := range append(append(append([]netip.Addr{e.PrimaryIP}, e.IPv4...), prefixAddrs(e.IPv4Prefixes)...), e.IPv6...) {
			if o, dup := held[e.VSwitchID][a]; dup {
				bad("%s held by %s and %s", a, o, e.ID)
			}
			held[e.VSwitchID][a] = e.ID
			if a.Is4() && !pl.usable4(a) {
				bad("eni %s holds %s, not a usable address of %s", e.ID, a, pl.cidr)
			}
			if a.Is6() && !pl.usable6(a) {
				bad("eni %s holds %s, outside %s", e.ID, a, pl.cidr6)
			}
		}
		switch e.Status {
		case "Available", "Deleting":
			if e.InstanceID != "" {
				bad("eni %s is %s but attached to %s", e.ID, e.Status, e.InstanceID)
			}
		case "Attaching", "InUse", "Detaching":
			if m.instances[e.InstanceID] == nil {
				bad("eni %s is %s on unknown instance %q", e.ID, e.Status, e.InstanceID)
				continue
			}
			perInstance[e.InstanceID] = append(perInstance[e.InstanceID], e)
		default:
			bad("eni %s has status %q", e.ID, e.Status)
		}
	}
	for id, pl := range m.pools {
		n4 := 0
		for a, eni := range pl.used {
			switch {
			case eni == outsideHolder:
				if !pl.outside[a] {
					bad("vswitch %s pool holds %s for outside, not listed as such", id, a)
				}
			case held[id][a] != eni:
				bad("vswitch %s pool gives %s to %s, the ENIs say %q", id, a, eni, held[id][a])
			}
			if a.Is4() {
				n4++
			}
		}
		for a := range pl.outside {
			if pl.used[a] != outsideHolder {
				bad("vswitch %s lists %s as held outside, the pool says %q", id, a, pl.used[a])
			}
		}
		if len(pl.used) != len(held[id])+len(pl.outside) {
			bad("vswitch %s pool holds %d addresses, the ENIs %d and outside %d", id, len(pl.used), len(held[id]), len(pl.outside))
		}
		if n4 != pl.n4 {
			bad("vswitch %s counts %d IPv4 in use, holds %d", id, pl.n4, n4)
		}
		if got, want := m.vsw[id].AvailableIPs, int(pl.size)-n4; got != want {
			bad("vswitch %s AvailableIpAddressCount %d, want %d", id, got, want)
		}
	}
	for id, in := range m.instances {
		t := m.types[in.InstanceType]
		att := perInstance[id]
		if len(att) > t.ENIs {
			bad("instance %s (%s) has %d ENIs, limit %d", id, t.ID, len(att), t.ENIs)
		}
		idx := map[int]string{}
		for _, e := range att {
			if o, dup := idx[e.DeviceIndex]; dup {
				bad("instance %s: device index %d on %s and %s", id, e.DeviceIndex, o, e.ID)
			}
			idx[e.DeviceIndex] = e.ID
			if e.ipCount() > t.IPv4PerENI || len(e.IPv6) > t.IPv6PerENI {
				bad("eni %s on %s holds %d IPv4 and %d IPv6, limits %d and %d", e.ID, t.ID, e.ipCount(), len(e.IPv6), t.IPv4PerENI, t.IPv6PerENI)
			}
		}
		if p := m.enis[in.PrimaryENI]; p == nil || p.Type != "Primary" || p.Status != "InUse" || p.InstanceID != id || p.DeviceIndex != 0 {
			bad("instance %s: primary eni %s missing or not InUse at index 0", id, in.PrimaryENI)
		}
	}
	return errors.Join(errs...)
}
