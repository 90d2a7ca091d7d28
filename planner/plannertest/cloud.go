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
		VPCID: v.VPCID, PrimaryIP: all[0], IPv4: all[1:], IPv6: v6,
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
	if a.IPv4Count > 10 || a.IPv6Count > 10 {
		return fmt.Errorf("more than 10 addresses in one call")
	}
	v := w.vswitch(e.VSwitchID)
	if a.IPv4Count > 0 {
		if len(e.IPv4)+a.IPv4Count > w.Instance.Limits.IPv4PerENI-1 {
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
	for _, ip := range append(slices.Clone(e.IPv4), e.IPv6...) {
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
