package plannertest

// This file is the model's cloud half: ENIs, addresses and vSwitch pools,
// with ClientToken replay and the instance's limits.

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
)

// alloc takes n free addresses of vSwitch v (IPv6 from its IPv6 CIDR).
func (w *World) alloc(v *observed.VSwitch, n int, v6 bool) ([]netip.Addr, error) {
	if !v6 && v.AvailableIPs < n {
		return nil, fmt.Errorf("InvalidVSwitchId.IpNotEnough: %s has %d free", v.ID, v.AvailableIPs)
	}
	if w.allocd[v.ID] == nil {
		w.allocd[v.ID] = map[netip.Addr]bool{}
	}
	used := w.allocd[v.ID]
	p := v.CIDR
	if v6 {
		p = v.IPv6CIDR
		if !p.IsValid() {
			return nil, fmt.Errorf("%s has no IPv6 CIDR", v.ID)
		}
	}
	var out []netip.Addr
	for a := p.Masked().Addr().Next().Next().Next().Next(); p.Contains(a) && len(out) < n; a = a.Next() {
		if !used[a] && a != v.Gateway() {
			used[a] = true
			out = append(out, a)
		}
	}
	if len(out) < n {
		return nil, fmt.Errorf("InvalidVSwitchId.IpNotEnough: %s is full", v.ID)
	}
	if !v6 {
		v.AvailableIPs -= n
	}
	return out, nil
}

// allocPrefixes takes n aligned /28 prefixes of vSwitch v whose 16
// addresses are all free, lowest first; the first and the last /28 of the
// CIDR hold addresses the vSwitch reserves (network, gateway) and are never
// given. A vSwitch marked by the script's `fragment` control refuses every
// prefix though it may have single addresses free, as ECS does when no
// aligned /28 is left.
func (w *World) allocPrefixes(v *observed.VSwitch, n int) ([]netip.Prefix, error) {
	if w.fragmentedVSw[v.ID] {
		return nil, fmt.Errorf("InvalidVSwitchId.IpNotEnough: %s has no aligned /28 free (%d single addresses free)", v.ID, v.AvailableIPs)
	}
	if w.allocd[v.ID] == nil {
		w.allocd[v.ID] = map[netip.Addr]bool{}
	}
	used := w.allocd[v.ID]
	cidr := v.CIDR.Masked()
	size := uint64(1) << (32 - cidr.Bits())
	var out []netip.Prefix
	a := cidr.Addr()
	for off := uint64(0); off+observed.IPv4PrefixSize <= size && len(out) < n; off += observed.IPv4PrefixSize {
		p := netip.PrefixFrom(a, observed.IPv4PrefixBits)
		first, last := off == 0, off+observed.IPv4PrefixSize == size
		free := !first && !last
		x := a
		for range observed.IPv4PrefixSize {
			free = free && !used[x]
			x = x.Next()
		}
		if free {
			out = append(out, p)
		}
		a = x
	}
	if len(out) < n || v.AvailableIPs < n*observed.IPv4PrefixSize {
		return nil, fmt.Errorf("InvalidVSwitchId.IpNotEnough: %s has no aligned /28 free", v.ID)
	}
	for _, p := range out {
		x := p.Addr()
		for range observed.IPv4PrefixSize {
			used[x] = true
			x = x.Next()
		}
	}
	v.AvailableIPs -= n * observed.IPv4PrefixSize
	return out, nil
}

// prefixAddrs lists the addresses of the prefixes.
func prefixAddrs(ps []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, p := range ps {
		x := p.Masked().Addr()
		for range observed.IPv4PrefixSize {
			out = append(out, x)
			x = x.Next()
		}
	}
	return out
}

func (w *World) free(vswID string, addrs ...netip.Addr) {
	v := w.vswitch(vswID)
	for _, a := range addrs {
		if w.allocd[vswID][a] {
			delete(w.allocd[vswID], a)
			if v != nil && a.Is4() {
				v.AvailableIPs++
			}
		}
	}
}

// Reserve marks addresses of a vSwitch as taken (for ENIs a test creates).
func (w *World) Reserve(vswID string, addrs ...netip.Addr) {
	if w.allocd[vswID] == nil {
		w.allocd[vswID] = map[netip.Addr]bool{}
	}
	for _, a := range addrs {
		w.allocd[vswID][a] = true
	}
}

func (w *World) create(a planner.Action) (string, error) {
	if id, ok := w.tokens[a.ClientToken]; ok && a.ClientToken != "" {
		return id, nil
	}
	v := w.vswitch(a.VSwitchID)
	if v == nil {
		return "", fmt.Errorf("InvalidVSwitchId.NotFound: %s", a.VSwitchID)
	}
	if a.IPv4Count > 49 {
		return "", fmt.Errorf("SecondaryPrivateIpAddressCount %d > 49", a.IPv4Count)
	}
	if a.IPv4PrefixCount > 10 {
		return "", fmt.Errorf("InvalidParam.Ipv4PrefixCount: %d", a.IPv4PrefixCount)
	}
	if a.IPv6Count > 10 {
		return "", fmt.Errorf("InvalidParameter: Ipv6AddressCount %d > 10", a.IPv6Count)
	}
	if a.IPv4Count > 0 && a.IPv4PrefixCount > 0 {
		return "", fmt.Errorf("InvalidParameter.Conflict: %d addresses and %d prefixes", a.IPv4Count, a.IPv4PrefixCount)
	}
	// Each secondary address and each prefix takes one private-address
	// slot of the instance type's; the primary takes one more.
	if a.IPv4Count+a.IPv4PrefixCount > w.Instance.Limits.IPv4PerENI-1 {
		return "", fmt.Errorf("InvalidOperation.Ipv4CountExceeded: %d addresses and %d prefixes", a.IPv4Count, a.IPv4PrefixCount)
	}
	var prefixes []netip.Prefix
	if a.IPv4PrefixCount > 0 {
		var err error
		if prefixes, err = w.allocPrefixes(v, a.IPv4PrefixCount); err != nil {
			// As the executor does: no prefix is asked of it for a while.
			w.Memory = w.Memory.MarkFragmented(v.ID, w.Now.Add(planner.DefaultFragmentedFor))
			return "", err
		}
	}
	all, err := w.alloc(v, 1+a.IPv4Count, false)
	if err != nil {
		w.Memory = w.Memory.MarkExhausted(v.ID, w.Now.Add(planner.DefaultExhaustedFor))
		return "", err
	}
	var v6 []netip.Addr
	if a.IPv6Count > 0 {
		if v6, err = w.alloc(v, a.IPv6Count, true); err != nil {
			return "", err
		}
	}
	w.nextENI++
	n := w.nextENI
	e := observed.ENI{
		ID: fmt.Sprintf("eni-n%d", n), MAC: fmt.Sprintf("02:00:00:00:%02x:%02x", n>>8, n&255),
		Status: observed.ENIAvailable, Type: observed.ENITypeSecondary, VSwitchID: v.ID, ZoneID: v.ZoneID,
		VPCID: v.VPCID, PrimaryIP: all[0], IPv4: all[1:], IPv6: v6, IPv4Prefixes: prefixes,
		SecurityGroups: slices.Clone(a.SecurityGroups), Tags: maps.Clone(a.Tags), CreatedAt: w.Now,
	}
	w.apply(a, planner.Result{ENI: &e})
	w.tokens[a.ClientToken] = e.ID
	return e.ID, nil
}

func (w *World) attach(a planner.Action) error {
	e := w.eni(a.ENIID)
	if e == nil {
		return fmt.Errorf("InvalidEniId.NotFound: %s", a.ENIID)
	}
	if e.Status == observed.ENIInUse && e.InstanceID == a.InstanceID {
		return nil // replay
	}
	if e.Status != observed.ENIAvailable {
		return fmt.Errorf("InvalidOperation.InvalidEniState: %s is %s", e.ID, e.Status)
	}
	idx := map[int]bool{}
	for _, x := range w.ENIs {
		if x.InstanceID == w.Instance.ID && x.Status != observed.ENIAvailable {
			idx[x.DeviceIndex] = true
		}
	}
	if len(idx) >= w.Instance.Limits.ENIs {
		return fmt.Errorf("EniPerInstanceLimitExceeded")
	}
	d := 1
	for idx[d] {
		d++
	}
	in := *e
	in.Status, in.InstanceID, in.DeviceIndex = observed.ENIInUse, a.InstanceID, d
	w.apply(a, planner.Result{ENI: &in})
	return nil
}

func (w *World) assign(a planner.Action) error {
	e := w.eni(a.ENIID)
	if e == nil {
		return fmt.Errorf("InvalidEniId.NotFound: %s", a.ENIID)
	}
	if _, ok := w.tokens[a.ClientToken]; ok {
		return nil
	}
	if a.IPv4Count > 10 || a.IPv6Count > 10 || a.IPv4PrefixCount > 10 {
		return fmt.Errorf("more than 10 addresses or prefixes in one call")
	}
	if a.IPv4Count > 0 && a.IPv4PrefixCount > 0 {
		return fmt.Errorf("InvalidParameter: addresses and prefixes in one call")
	}
	v := w.vswitch(e.VSwitchID)
	// Each secondary address and each prefix takes one of the ENI's
	// private-address slots (the primary takes one more).
	slots := len(e.IPv4) + len(e.IPv4Prefixes) + a.IPv4Count + a.IPv4PrefixCount
	if a.IPv4PrefixCount > 0 {
		if slots > w.Instance.Limits.IPv4PerENI-1 {
			return fmt.Errorf("InvalidOperation.Ipv4CountExceeded: %s", e.ID)
		}
		got, err := w.allocPrefixes(v, a.IPv4PrefixCount)
		if err != nil {
			w.Memory = w.Memory.MarkFragmented(v.ID, w.Now.Add(planner.DefaultFragmentedFor))
			return err
		}
		w.apply(a, planner.Result{IPv4Prefixes: got})
	}
	if a.IPv4Count > 0 {
		if slots > w.Instance.Limits.IPv4PerENI-1 {
			return fmt.Errorf("InvalidOperation.Ipv4CountExceeded: %s", e.ID)
		}
		got, err := w.alloc(v, a.IPv4Count, false)
		if err != nil {
			return err
		}
		w.apply(a, planner.Result{IPv4: got})
	}
	if a.IPv6Count > 0 {
		if len(e.IPv6)+a.IPv6Count > w.Instance.Limits.IPv6PerENI {
			return fmt.Errorf("InvalidOperation.Ipv6CountExceeded: %s", e.ID)
		}
		got, err := w.alloc(v, a.IPv6Count, true)
		if err != nil {
			return err
		}
		w.apply(a, planner.Result{IPv6: got})
	}
	w.tokens[a.ClientToken] = e.ID
	return nil
}

func sorted(l []netip.Addr) []netip.Addr { slices.SortFunc(l, netip.Addr.Compare); return l }

// inUse reports whether a pod on the node or a Ready status holds ip.
func (w *World) inUse(ip netip.Addr) string {
	for _, p := range w.Node.Pods {
		if p.IPv4 == ip || p.IPv6 == ip {
			return p.Key.String()
		}
	}
	for _, b := range w.Node.Published {
		if b.Phase == planner.PhaseReady && (b.IPv4 == ip || b.IPv6 == ip) {
			return b.Key.String() + " (published)"
		}
	}
	return ""
}

func (w *World) unassign(a planner.Action) error {
	e := w.eni(a.ENIID)
	if e == nil {
		return nil // gone: success for Unassign
	}
	w.mayDestroy(a, e)
	for _, ip := range append(slices.Clone(a.IPv4), a.IPv6...) {
		if k := w.inUse(ip); k != "" {
			w.violate("unassign %s of %s while %s uses it", ip, e.ID, k)
		}
	}
	for _, p := range a.IPv4Prefixes {
		if !slices.Contains(e.IPv4Prefixes, p) {
			continue // gone already: success, as for an address
		}
		for _, ip := range prefixAddrs([]netip.Prefix{p}) {
			if k := w.inUse(ip); k != "" {
				w.violate("unassign prefix %s of %s while %s uses %s", p, e.ID, k, ip)
			}
		}
		w.free(e.VSwitchID, prefixAddrs([]netip.Prefix{p})...)
	}
	w.free(e.VSwitchID, a.IPv4...)
	w.free(e.VSwitchID, a.IPv6...)
	w.apply(a, planner.Result{})
	return nil
}

func (w *World) detach(a planner.Action) error {
	e := w.eni(a.ENIID)
	if e == nil {
		return nil
	}
	w.mayDestroy(a, e)
	for _, ip := range append(append(slices.Clone(e.IPv4), e.IPv6...), prefixAddrs(e.IPv4Prefixes)...) {
		if k := w.inUse(ip); k != "" {
			w.violate("detach %s while %s uses %s", e.ID, k, ip)
		}
	}
	a.MAC = e.MAC // its device goes, configured or not
	w.apply(a, planner.Result{})
	return nil
}

func (w *World) delete(a planner.Action) error {
	e := w.eni(a.ENIID)
	if e == nil {
		return nil
	}
	w.mayDestroy(a, e)
	if e.Status != observed.ENIAvailable {
		return fmt.Errorf("InvalidOperation.InvalidEniState: %s is %s", e.ID, e.Status)
	}
	w.free(e.VSwitchID, append(append([]netip.Addr{e.PrimaryIP}, e.IPv4...), e.IPv6...)...)
	w.free(e.VSwitchID, prefixAddrs(e.IPv4Prefixes)...)
	w.apply(a, planner.Result{})
	return nil
}

// update moves an ENI to new security groups
// (ModifyNetworkInterfaceAttribute): only an owned ENI, never the primary.
func (w *World) update(a planner.Action) error {
	e := w.eni(a.ENIID)
	if e == nil {
		return fmt.Errorf("InvalidEniId.NotFound: %s", a.ENIID)
	}
	w.mayDestroy(a, e)
	if len(a.SecurityGroups) == 0 || len(a.SecurityGroups) > 10 {
		return fmt.Errorf("InvalidSecurityGroupId.Malformed: %d groups", len(a.SecurityGroups))
	}
	w.apply(a, planner.Result{})
	return nil
}
