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
// on its way out. Actions that give nothing up leave st as it is. It never
// modifies st (see Effects for the form that edits in place).
func Before(st observed.State, a Action) observed.State {
	e := NewEffects(st)
	e.Before(a)
	return e.State()
}

// Apply returns st with the result of a successful action applied. An
// action that names its ENI by ENIRef must carry the created ENI's ID and
// MAC by now (the executor substitutes them). It never modifies st.
func Apply(st observed.State, a Action, r Result) observed.State {
	e := NewEffects(st)
	e.Apply(a, r)
	return e.State()
}

// Failed returns st with what a failed action leaves applied: the failure
// transition beside Before and Apply. A setup (SetupPod, MoveENI) that
// failed withdraws the claim Before recorded: the pod holds no address
// the node could be trusted with, and the next pass binds it anew or
// waits. refused says the call was refused before it did anything (ECS
// throttled it): what Before gave up comes back (the addresses of an
// unassign, the status of an ENI being detached or deleted; a detached
// ENI's device comes back from the node's next read). Otherwise a failed
// cloud action changes nothing here: the executor asks for a full
// observation, which shows what the cloud did (a failed detach may have
// detached). It never modifies st.
func Failed(st observed.State, a Action, refused bool) observed.State {
	e := NewEffects(st)
	e.Failed(a, refused)
	return e.State()
}

// Effects applies actions to an observed state it keeps, editing the
// state's lists in place once it owns them: the first edit of a list
// (ENIs, vSwitches, the node's devices, pods or published statuses) after
// State handed the state out copies that list alone, later edits change
// the copy.
// Applying one action to a node of n pods thus costs O(log n) compares
// and no allocation, not a copy of the list (issue 28: 2,000 entries
// cost 640 MB when every status copied the published list), and a state
// handed out by State is never changed under its holder. Inner lists (an
// ENI's addresses) are always copied when edited. Not safe for concurrent
// use; the zero Effects holds an empty state.
type Effects struct {
	st observed.State
	// owned: which of the lists in st are this value's alone (copied
	// since the last State). Each edit copies only the lists it changes: a
	// pod's setup copies the pods, not the published statuses, and its
	// status the statuses, not the pods.
	owned lists
}

// lists names the lists of an observed state Effects edit.
type lists uint8

const (
	eniList lists = 1 << iota
	vSwitchList
	deviceList
	podList
	publishedList
)

// NewEffects returns Effects on st (which it will not modify).
func NewEffects(st observed.State) *Effects { return &Effects{st: st} }

// State returns the current state. The caller may keep it: the next edit
// copies the lists first.
func (x *Effects) State() observed.State {
	x.owned = 0
	return x.st
}

// Peek returns the current state to read at once: unlike State's, its
// lists may change at the next edit, so the caller must not keep it.
func (x *Effects) Peek() observed.State { return x.st }

// Replace makes st the current state (not owned: it may be shared).
func (x *Effects) Replace(st observed.State) { x.st, x.owned = st, 0 }

// own copies the lists l names that are not this value's alone already,
// sorted by their keys (observed lists usually are already), and returns
// the state to edit: only those lists may be changed in place.
func (x *Effects) own(l lists) *observed.State {
	st := &x.st
	need := l &^ x.owned
	if need&eniList != 0 {
		st.ENIs = sortedClone(st.ENIs, eniCmp)
	}
	if need&vSwitchList != 0 {
		st.VSwitches = slices.Clone(st.VSwitches)
	}
	if need&deviceList != 0 {
		st.Node.ENIDevices = sortedClone(st.Node.ENIDevices, deviceCmp)
	}
	if need&podList != 0 {
		st.Node.Pods = sortedClone(st.Node.Pods, podCmp)
	}
	if need&publishedList != 0 {
		st.Node.Published = sortedClone(st.Node.Published, bindingCmp)
	}
	x.owned |= l
	return st
}

// Before applies what action a gives up, before it runs (see Before).
func (x *Effects) Before(a Action) {
	switch a.Kind {
	case UnassignIPs:
		unassignIPs(x.own(eniList), a)
	case DetachENI:
		st := x.own(eniList | deviceList)
		withoutDevice(st, a.MAC)
		editENI(st, a.ENIID, func(e *observed.ENI) { e.Status = observed.ENIDetaching })
	case DeleteENI:
		editENI(x.own(eniList), a.ENIID, func(e *observed.ENI) { e.Status = observed.ENIDeleting })
	case SetupPod, MoveENI:
		if a.Pod == nil {
			return
		}
		// Claim the address for this pod at once (not yet healthy).
		p := podNet(a, Result{})
		p.Healthy, p.HostVeth, p.Problems = false, "", []string{"setup in progress"}
		withPod(x.own(podList), p)
	}
}

// Failed applies what a failed action leaves (see Failed).
func (x *Effects) Failed(a Action, refused bool) {
	switch {
	case (a.Kind == SetupPod || a.Kind == MoveENI) && a.Pod != nil:
		teardownPod(x.own(podList), a)
	case !refused:
	case a.Kind == UnassignIPs:
		editENI(x.own(eniList), a.ENIID, func(e *observed.ENI) {
			e.IPv4, e.IPv6 = addIPs(e.IPv4, a.IPv4), addIPs(e.IPv6, a.IPv6)
			e.IPv4Prefixes = addPrefixes(e.IPv4Prefixes, a.IPv4Prefixes)
		})
	case a.Kind == DetachENI:
		editENI(x.own(eniList), a.ENIID, func(e *observed.ENI) { e.Status = observed.ENIInUse })
	case a.Kind == DeleteENI:
		editENI(x.own(eniList), a.ENIID, func(e *observed.ENI) { e.Status = observed.ENIAvailable })
	}
}

// Apply applies the result of a successful action (see Apply).
func (x *Effects) Apply(a Action, r Result) {
	switch a.Kind {
	case CreateENI:
		createENI(x.own(eniList|vSwitchList), r)
	case AttachENI:
		attachENI(x.own(eniList), r)
	case AssignIPs:
		assignIPs(x.own(eniList|vSwitchList), a, r)
	case UnassignIPs:
		st := x.own(eniList | vSwitchList)
		unassignIPs(st, a)
		returnIPs(st, a)
	case DetachENI:
		detachENI(x.own(eniList|deviceList), a, r)
	case DeleteENI:
		withoutENI(x.own(eniList), a.ENIID)
	case ConfigureENI:
		configureENI(x.own(deviceList), a, r)
	case SetupPod:
		setupPod(x.own(podList), a, r)
	case MoveENI:
		setupPod(x.own(podList|deviceList), a, r)
	case TeardownPod, ReturnENI:
		teardownPod(x.own(podList), a)
	case PublishStatus:
		publishStatus(x.own(publishedList), a)
	case UpdateENI:
		updateENI(x.own(eniList), a)
	}
}

// The functions below edit st's lists in place (Effects owns them); an
// ENI's own address lists are copied when changed, as a snapshot shares
// them.

// updateENI: the ENI has the new security groups, sorted as observed.
func updateENI(st *observed.State, a Action) {
	editENI(st, a.ENIID, func(e *observed.ENI) {
		e.SecurityGroups = slices.Sorted(slices.Values(a.SecurityGroups))
	})
}

// createENI: the new ENI exists, and its vSwitch has fewer free addresses
// by its primary, its secondaries and 16 per prefix.
func createENI(st *observed.State, r Result) {
	if r.ENI == nil {
		return
	}
	upsert(&st.ENIs, *r.ENI, eniCmp)
	takeVSwitchIPs(st, r.ENI.VSwitchID, 1+len(r.ENI.IPv4)+observed.IPv4PrefixSize*len(r.ENI.IPv4Prefixes))
}

// attachENI: the ENI is as the cloud reports it after the attach (InUse
// on this instance, with its device index).
func attachENI(st *observed.State, r Result) {
	if r.ENI != nil {
		upsert(&st.ENIs, *r.ENI, eniCmp)
	}
}

// assignIPs: the ENI holds the addresses and prefixes the cloud chose (or
// the explicit ones asked for), and its vSwitch has that many fewer free
// IPv4 addresses (16 per prefix).
func assignIPs(st *observed.State, a Action, r Result) {
	editENI(st, a.ENIID, func(e *observed.ENI) {
		e.IPv4, e.IPv6 = addIPs(e.IPv4, r.IPv4), addIPs(e.IPv6, r.IPv6)
		e.IPv4Prefixes = addPrefixes(e.IPv4Prefixes, r.IPv4Prefixes)
	})
	if n := len(r.IPv4) + observed.IPv4PrefixSize*len(r.IPv4Prefixes); n > 0 {
		takeVSwitchIPs(st, vSwitchOf(st, a.ENIID), n)
	}
}

// unassignIPs: the ENI no longer holds the addresses and prefixes.
func unassignIPs(st *observed.State, a Action) {
	editENI(st, a.ENIID, func(e *observed.ENI) {
		e.IPv4, e.IPv6 = removeIPs(e.IPv4, a.IPv4), removeIPs(e.IPv6, a.IPv6)
		e.IPv4Prefixes = slices.DeleteFunc(slices.Clone(e.IPv4Prefixes), func(p netip.Prefix) bool { return slices.Contains(a.IPv4Prefixes, p) })
	})
}

// returnIPs: the ENI's vSwitch has the unassigned IPv4 addresses back (16
// per prefix).
func returnIPs(st *observed.State, a Action) {
	if n := len(a.IPv4) + observed.IPv4PrefixSize*len(a.IPv4Prefixes); n > 0 {
		takeVSwitchIPs(st, vSwitchOf(st, a.ENIID), -n)
	}
}

// detachENI: the ENI's device is gone from the node, and the ENI is
// Available again (or gone altogether).
func detachENI(st *observed.State, a Action, r Result) {
	withoutDevice(st, a.MAC)
	switch {
	case r.Gone:
		withoutENI(st, a.ENIID)
	case r.ENI != nil:
		upsert(&st.ENIs, *r.ENI, eniCmp)
	default:
		editENI(st, a.ENIID, func(e *observed.ENI) {
			e.Status, e.InstanceID, e.DeviceIndex = observed.ENIAvailable, "", 0
		})
	}
}

// configureENI: the ENI's device is up and configured with its table and
// MTU (a device seen before keeps its name, index and, with MTU 0, its
// MTU).
func configureENI(st *observed.State, a Action, r Result) {
	d := observed.ENIDevice{MAC: a.MAC, Name: r.DeviceName, MTU: a.MTU, Up: true, Table: a.Table, Configured: true}
	if i, ok := slices.BinarySearchFunc(st.Node.ENIDevices, d, deviceCmp); ok {
		old := st.Node.ENIDevices[i]
		d.Name, d.Index = old.Name, old.Index
		if d.MTU == 0 {
			d.MTU = old.MTU
		}
	}
	upsert(&st.Node.ENIDevices, d, deviceCmp)
}

// setupPod: the pod's network is set up and healthy; an exclusive pod's
// ENI device has moved into the pod, off the node.
func setupPod(st *observed.State, a Action, r Result) {
	if a.Kind == MoveENI {
		withoutDevice(st, a.Pod.ENIMAC)
	}
	withPod(st, podNet(a, r))
}

// teardownPod: the pod's network is gone (an exclusive pod's ENI is back
// on the node, where the next observation sees it as a device).
func teardownPod(st *observed.State, a Action) {
	remove(&st.Node.Pods, observed.PodNet{Key: a.Pod.Key}, podCmp)
}

// publishStatus: the attachment's status is published (or, with a nil
// Status, the status published under Target is removed).
func publishStatus(st *observed.State, a Action) {
	if a.Status == nil {
		// Target is the key's string form, "<containerID>_<ifName>"; an
		// interface name never holds '_', so the last one splits it.
		if i := strings.LastIndexByte(a.Target, '_'); i >= 0 {
			k := observed.AttachmentKey{ContainerID: a.Target[:i], IfName: a.Target[i+1:]}
			remove(&st.Node.Published, observed.Binding{Key: k}, bindingCmp)
		}
		return
	}
	s := a.Status
	upsert(&st.Node.Published, observed.Binding{Key: s.Key, Revision: s.Revision, Phase: s.Phase,
		Reason: s.Reason, IPv4: s.IPv4, IPv6: s.IPv6, ENIID: s.ENIID}, bindingCmp)
}

// podNet is what the node holds for the pod of a SetupPod or MoveENI.
func podNet(a Action, r Result) observed.PodNet {
	p := a.Pod
	return observed.PodNet{Key: p.Key, HostVeth: r.HostVeth, NetNS: p.NetNS, IPv4: p.IPv4, IPv6: p.IPv6,
		ENIMAC: p.ENIMAC, Exclusive: a.Kind == MoveENI, HostRoutes: a.HostRoutes, Healthy: true}
}

func withPod(st *observed.State, p observed.PodNet) { upsert(&st.Node.Pods, p, podCmp) }

func withoutDevice(st *observed.State, mac string) {
	if mac != "" {
		remove(&st.Node.ENIDevices, observed.ENIDevice{MAC: mac}, deviceCmp)
	}
}

func withoutENI(st *observed.State, id string) { remove(&st.ENIs, observed.ENI{ID: id}, eniCmp) }

// editENI applies f to the ENI with that ID, if present; the ENI's own
// lists are copied first (a snapshot shares them).
func editENI(st *observed.State, id string, f func(*observed.ENI)) {
	i, ok := slices.BinarySearchFunc(st.ENIs, observed.ENI{ID: id}, eniCmp)
	if !ok {
		return
	}
	e := st.ENIs[i]
	e.IPv4, e.IPv6, e.IPv4Prefixes = slices.Clone(e.IPv4), slices.Clone(e.IPv6), slices.Clone(e.IPv4Prefixes)
	f(&e)
	st.ENIs[i] = e
}

// vSwitchOf returns the vSwitch of the ENI with that ID ("" if unknown).
func vSwitchOf(st *observed.State, eniID string) string {
	if i, ok := slices.BinarySearchFunc(st.ENIs, observed.ENI{ID: eniID}, eniCmp); ok {
		return st.ENIs[i].VSwitchID
	}
	return ""
}

// takeVSwitchIPs records that n IPv4 addresses of the vSwitch were taken
// (n < 0: returned), so passes before the next full observation do not ask
// the vSwitch for addresses it no longer has.
func takeVSwitchIPs(st *observed.State, id string, n int) {
	if id == "" || n == 0 {
		return
	}
	for i := range st.VSwitches {
		if st.VSwitches[i].ID == id {
			st.VSwitches[i].AvailableIPs = max(0, st.VSwitches[i].AvailableIPs-n)
		}
	}
}

// addIPs and removeIPs return an ENI's address lists changed, sorted and
// unique (new slices: the old ones may be shared).
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

// upsert puts item into the sorted list in place of the element that
// compares equal to it, or inserts it in order: a binary search and, for
// an insert, one move of the tail. The list must be owned (Effects.own).
func upsert[T any](list *[]T, item T, cmp func(a, b T) int) {
	i, ok := slices.BinarySearchFunc(*list, item, cmp)
	if ok {
		(*list)[i] = item
		return
	}
	*list = slices.Insert(*list, i, item)
}

// remove deletes the element of the sorted list that compares equal to
// item, if any (in place; the list must be owned).
func remove[T any](list *[]T, item T, cmp func(a, b T) int) {
	if i, ok := slices.BinarySearchFunc(*list, item, cmp); ok {
		*list = slices.Delete(*list, i, i+1)
	}
}

// sortedClone copies list, sorted by cmp (stable: the first of equal
// elements stays first).
func sortedClone[T any](list []T, cmp func(a, b T) int) []T {
	out := slices.Clone(list)
	if !slices.IsSortedFunc(out, cmp) {
		slices.SortStableFunc(out, cmp)
	}
	return out
}

func eniCmp(a, b observed.ENI) int          { return strings.Compare(a.ID, b.ID) }
func deviceCmp(a, b observed.ENIDevice) int { return strings.Compare(a.MAC, b.MAC) }
func podCmp(a, b observed.PodNet) int       { return a.Key.Compare(b.Key) }
func bindingCmp(a, b observed.Binding) int  { return a.Key.Compare(b.Key) }
