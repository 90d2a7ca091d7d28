package planner

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/enidnet/enid/observed"
)

// This file answers "what does an action do to the world?": one pure
// function per action kind applies an action's result to an observed.State.
// The executor's observation cache (reconcile), the model world the
// planner's tests run against (plannertest) and the kernel stand-in
// (reconcile.NoDatapath) all apply actions through it, so the three cannot
// disagree about what an action leaves behind.

// Table is the route table of the ENI at device index deviceIndex: every
// secondary ENI's routes live in a table of their own.
func Table(deviceIndex int) int { return tableBase + deviceIndex }

// Result is what running an action returned that its plan could not know.
type Result struct {
	// ENI is the ENI as the cloud returned it after CreateENI, AttachENI
	// or DetachENI (nil: as the action describes it).
	ENI *observed.ENI
	// Gone: the ENI no longer exists (a DetachENI found it deleted).
	Gone bool
	// IPv4 and IPv6 are the addresses AssignIPs got (either may be empty
	// when only one family's call ran).
	IPv4, IPv6 []netip.Addr
	// IPv4Prefixes are the prefixes an AssignIPs with IPv4PrefixCount got.
	IPv4Prefixes []netip.Prefix
	// HostVeth is the host side of the pod's veth (SetupPod, MoveENI).
	HostVeth string
	// DeviceName names a device ConfigureENI finds for the first time.
	DeviceName string
}

// Before applies what an action gives up, before it runs: addresses being
// unassigned, an ENI being detached or deleted, and the pod address a setup
// claims. A pass planned while the action runs then never hands out what is
// on its way out. Actions that give nothing up leave st as it is.
func Before(st observed.State, a Action) observed.State {
	switch a.Kind {
	case UnassignIPs:
		return unassignIPs(st, a)
	case DetachENI:
		st = withoutDevice(st, a.MAC)
		return editENI(st, a.ENIID, func(e *observed.ENI) { e.Status = observed.ENIDetaching })
	case DeleteENI:
		return editENI(st, a.ENIID, func(e *observed.ENI) { e.Status = observed.ENIDeleting })
	case SetupPod, MoveENI:
		if a.Pod == nil {
			return st
		}
		// Claim the address for this pod at once (not yet healthy).
		p := podNet(a, Result{})
		p.Healthy, p.HostVeth, p.Problems = false, "", []string{"setup in progress"}
		return withPod(st, p)
	}
	return st
}

// Apply returns st with the result of a successful action applied. An
// action that names its ENI by ENIRef must carry the created ENI's ID and
// MAC by now (the executor substitutes them).
func Apply(st observed.State, a Action, r Result) observed.State {
	switch a.Kind {
	case CreateENI:
		return createENI(st, r)
	case AttachENI:
		return attachENI(st, r)
	case AssignIPs:
		return assignIPs(st, a, r)
	case UnassignIPs:
		return returnIPs(unassignIPs(st, a), a)
	case DetachENI:
		return detachENI(st, a, r)
	case DeleteENI:
		return withoutENI(st, a.ENIID)
	case ConfigureENI:
		return configureENI(st, a, r)
	case SetupPod, MoveENI:
		return setupPod(st, a, r)
	case TeardownPod, ReturnENI:
		return teardownPod(st, a)
	case PublishStatus:
		return publishStatus(st, a)
	case UpdateENI:
		return updateENI(st, a)
	}
	return st
}

// updateENI: the ENI has the new security groups, sorted as observed.
func updateENI(st observed.State, a Action) observed.State {
	return editENI(st, a.ENIID, func(e *observed.ENI) {
		e.SecurityGroups = slices.Sorted(slices.Values(a.SecurityGroups))
	})
}

// createENI: the new ENI exists, and its vSwitch has fewer free addresses
// by its primary, its secondaries and 16 per prefix.
func createENI(st observed.State, r Result) observed.State {
	if r.ENI == nil {
		return st
	}
	st.ENIs = upsert(st.ENIs, *r.ENI, eniCmp)
	return takeVSwitchIPs(st, r.ENI.VSwitchID, 1+len(r.ENI.IPv4)+observed.IPv4PrefixSize*len(r.ENI.IPv4Prefixes))
}

// attachENI: the ENI is as the cloud reports it after the attach (InUse
// on this instance, with its device index).
func attachENI(st observed.State, r Result) observed.State {
	if r.ENI == nil {
		return st
	}
	st.ENIs = upsert(st.ENIs, *r.ENI, eniCmp)
	return st
}

// assignIPs: the ENI holds the addresses and prefixes the cloud chose (or
// the explicit ones asked for), and its vSwitch has that many fewer free
// IPv4 addresses (16 per prefix).
func assignIPs(st observed.State, a Action, r Result) observed.State {
	st = editENI(st, a.ENIID, func(e *observed.ENI) {
		e.IPv4, e.IPv6 = addIPs(e.IPv4, r.IPv4), addIPs(e.IPv6, r.IPv6)
		e.IPv4Prefixes = addPrefixes(e.IPv4Prefixes, r.IPv4Prefixes)
	})
	if n := len(r.IPv4) + observed.IPv4PrefixSize*len(r.IPv4Prefixes); n > 0 {
		st = takeVSwitchIPs(st, vSwitchOf(st, a.ENIID), n)
	}
	return st
}

// unassignIPs: the ENI no longer holds the addresses and prefixes.
func unassignIPs(st observed.State, a Action) observed.State {
	return editENI(st, a.ENIID, func(e *observed.ENI) {
		e.IPv4, e.IPv6 = removeIPs(e.IPv4, a.IPv4), removeIPs(e.IPv6, a.IPv6)
		e.IPv4Prefixes = slices.DeleteFunc(e.IPv4Prefixes, func(p netip.Prefix) bool { return slices.Contains(a.IPv4Prefixes, p) })
	})
}

// returnIPs: the ENI's vSwitch has the unassigned IPv4 addresses back (16
// per prefix).
func returnIPs(st observed.State, a Action) observed.State {
	n := len(a.IPv4) + observed.IPv4PrefixSize*len(a.IPv4Prefixes)
	if n == 0 {
		return st
	}
	return takeVSwitchIPs(st, vSwitchOf(st, a.ENIID), -n)
}

// detachENI: the ENI's device is gone from the node, and the ENI is
// Available again (or gone altogether).
func detachENI(st observed.State, a Action, r Result) observed.State {
	st = withoutDevice(st, a.MAC)
	if r.Gone {
		return withoutENI(st, a.ENIID)
	}
	if r.ENI != nil {
		st.ENIs = upsert(st.ENIs, *r.ENI, eniCmp)
		return st
	}
	return editENI(st, a.ENIID, func(e *observed.ENI) {
		e.Status, e.InstanceID, e.DeviceIndex = observed.ENIAvailable, "", 0
	})
}

// configureENI: the ENI's device is up and configured with its table and
// MTU (a device seen before keeps its name, index and, with MTU 0, its
// MTU).
func configureENI(st observed.State, a Action, r Result) observed.State {
	d := observed.ENIDevice{MAC: a.MAC, Name: r.DeviceName, MTU: a.MTU, Up: true, Table: a.Table, Configured: true}
	if i := slices.IndexFunc(st.Node.ENIDevices, func(x observed.ENIDevice) bool { return x.MAC == a.MAC }); i >= 0 {
		old := st.Node.ENIDevices[i]
		d.Name, d.Index = old.Name, old.Index
		if d.MTU == 0 {
			d.MTU = old.MTU
		}
	}
	st.Node.ENIDevices = upsert(st.Node.ENIDevices, d, deviceCmp)
	return st
}

// setupPod: the pod's network is set up and healthy; an exclusive pod's
// ENI device has moved into the pod, off the node.
func setupPod(st observed.State, a Action, r Result) observed.State {
	if a.Kind == MoveENI {
		st = withoutDevice(st, a.Pod.ENIMAC)
	}
	return withPod(st, podNet(a, r))
}

// teardownPod: the pod's network is gone (an exclusive pod's ENI is back
// on the node, where the next observation sees it as a device).
func teardownPod(st observed.State, a Action) observed.State {
	st.Node.Pods = without(st.Node.Pods, func(p observed.PodNet) bool { return p.Key == a.Pod.Key })
	return st
}

// publishStatus: the attachment's status is published (or, with a nil
// Status, the status published under Target is removed).
func publishStatus(st observed.State, a Action) observed.State {
	if a.Status == nil {
		st.Node.Published = without(st.Node.Published, func(b observed.Binding) bool {
			return len(b.Key.ContainerID)+1+len(b.Key.IfName) == len(a.Target) && b.Key.String() == a.Target
		})
		return st
	}
	s := a.Status
	st.Node.Published = upsert(st.Node.Published, observed.Binding{Key: s.Key, Revision: s.Revision, Phase: s.Phase,
		Reason: s.Reason, IPv4: s.IPv4, IPv6: s.IPv6, ENIID: s.ENIID}, bindingCmp)
	return st
}

// podNet is what the node holds for the pod of a SetupPod or MoveENI.
func podNet(a Action, r Result) observed.PodNet {
	p := a.Pod
	return observed.PodNet{Key: p.Key, HostVeth: r.HostVeth, NetNS: p.NetNS, IPv4: p.IPv4, IPv6: p.IPv6,
		ENIMAC: p.ENIMAC, Exclusive: a.Kind == MoveENI, Healthy: true}
}

func withPod(st observed.State, p observed.PodNet) observed.State {
	st.Node.Pods = upsert(st.Node.Pods, p, podCmp)
	return st
}

func withoutDevice(st observed.State, mac string) observed.State {
	if mac == "" {
		return st
	}
	st.Node.ENIDevices = without(st.Node.ENIDevices, func(d observed.ENIDevice) bool { return d.MAC == mac })
	return st
}

func withoutENI(st observed.State, id string) observed.State {
	st.ENIs = without(st.ENIs, func(e observed.ENI) bool { return e.ID == id })
	return st
}

// editENI applies f to a copy of the ENI with that ID, if present.
func editENI(st observed.State, id string, f func(*observed.ENI)) observed.State {
	i := slices.IndexFunc(st.ENIs, func(e observed.ENI) bool { return e.ID == id })
	if i < 0 {
		return st
	}
	enis := slices.Clone(st.ENIs)
	e := enis[i]
	e.IPv4, e.IPv6, e.IPv4Prefixes = slices.Clone(e.IPv4), slices.Clone(e.IPv6), slices.Clone(e.IPv4Prefixes)
	f(&e)
	enis[i] = e
	st.ENIs = enis
	return st
}

// vSwitchOf returns the vSwitch of the ENI with that ID ("" if unknown).
func vSwitchOf(st observed.State, eniID string) string {
	for _, e := range st.ENIs {
		if e.ID == eniID {
			return e.VSwitchID
		}
	}
	return ""
}

// takeVSwitchIPs records that n IPv4 addresses of the vSwitch were taken
// (n < 0: returned), so passes before the next full observation do not ask
// the vSwitch for addresses it no longer has.
func takeVSwitchIPs(st observed.State, id string, n int) observed.State {
	if id == "" || n == 0 {
		return st
	}
	vs := slices.Clone(st.VSwitches)
	for i := range vs {
		if vs[i].ID == id {
			vs[i].AvailableIPs = max(0, vs[i].AvailableIPs-n)
		}
	}
	st.VSwitches = vs
	return st
}

// addIPs and removeIPs keep an ENI's address lists sorted and unique.
func addIPs(list []netip.Addr, ips []netip.Addr) []netip.Addr {
	if len(ips) == 0 {
		return list
	}
	out := append(slices.Clone(list), ips...)
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// addPrefixes keeps an ENI's prefix list sorted and unique.
func addPrefixes(list []netip.Prefix, ps []netip.Prefix) []netip.Prefix {
	if len(ps) == 0 {
		return list
	}
	out := append(slices.Clone(list), ps...)
	slices.SortFunc(out, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	return slices.Compact(out)
}

func removeIPs(list []netip.Addr, ips []netip.Addr) []netip.Addr {
	return slices.DeleteFunc(slices.Clone(list), func(a netip.Addr) bool { return slices.Contains(ips, a) })
}

// upsert returns a copy of list with item in place of the element that
// compares equal to it (in its place), or added in order. It never
// modifies list: a snapshot handed to the planner may share its backing
// array. It costs one copy and compares, never a key built per comparison:
// the executor applies every pod action, on lists as long as the node has
// pods.
func upsert[T any](list []T, item T, cmp func(a, b T) int) []T {
	out := slices.Clone(list)
	for i := range out {
		if cmp(out[i], item) == 0 {
			out[i] = item
			return out
		}
	}
	out = append(out, item)
	slices.SortStableFunc(out, cmp) // sorted but for the last: linear
	return out
}

// without returns a copy of list without the elements that match.
func without[T any](list []T, match func(T) bool) []T {
	return slices.DeleteFunc(slices.Clone(list), match)
}

func eniCmp(a, b observed.ENI) int          { return strings.Compare(a.ID, b.ID) }
func deviceCmp(a, b observed.ENIDevice) int { return strings.Compare(a.MAC, b.MAC) }
func podCmp(a, b observed.PodNet) int       { return a.Key.Compare(b.Key) }
func bindingCmp(a, b observed.Binding) int  { return a.Key.Compare(b.Key) }
