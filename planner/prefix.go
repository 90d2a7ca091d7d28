package planner

// This file is IPv4 prefix mode (config eni.ipv4Allocation): which kind of
// IPv4 address an ENI grows by, the order free addresses are handed out in
// (fullest prefix first, so that others empty and can go back), which free
// addresses are surplus after the mode changed in place, and the release
// of whole prefixes. docs/design.md, "IPv4 prefixes", has the decisions.

import (
	"cmp"
	"math"
	"net/netip"
	"slices"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
)

// prefixSize is the number of pod addresses in one IPv4 prefix.
const prefixSize = observed.IPv4PrefixSize

// maxPrefixesPerCall is ECS's limit of IPv4 prefixes in one assign,
// unassign or create call.
const maxPrefixesPerCall = 10

// allocation is the IPv4 allocation in force: secondary unless the config
// asks for prefixes on a shared-mode node whose pods get IPv4.
func (b *builder) allocation() desired.IPv4Allocation {
	if b.excl || !b.v4 {
		return desired.IPv4Secondary
	}
	switch a := b.cfg.ENI.IPv4Allocation; a {
	case desired.IPv4Prefix, desired.IPv4PreferPrefix:
		return a
	}
	return desired.IPv4Secondary
}

// fragmented reports whether vSwitch id refused a prefix and is still
// marked so (Memory.Fragmented).
func (b *builder) fragmented(id string) bool {
	until, ok := b.mem.Fragmented[id]
	return ok && b.now.Before(until)
}

// growKind says how IPv4 grows on an attached ENI in vSwitch id: by
// prefixes or by single addresses; ok is false when it may not grow at all
// (strict prefix mode on a vSwitch that just refused a prefix).
func (b *builder) growKind(id string) (prefix, ok bool) { return b.kindFor(id, prefixSize) }

// createKind is growKind for a new ENI in vSwitch id: its primary address
// comes from the vSwitch too, so a prefix needs one address more.
func (b *builder) createKind(id string) (prefix, ok bool) { return b.kindFor(id, 1+prefixSize) }

// kindFor is growKind when a prefix needs need free addresses of the
// vSwitch. prefer-prefix takes single addresses where the vSwitch cannot
// give a /28: it refused one (fragmented), or it is known to have fewer
// free addresses than a prefix takes. The second needs no refusal to
// learn: no request would be sent (growOn and pickVSwitch never ask a
// vSwitch for more than it has), so no refusal would ever come. Strict
// prefix mode keeps asking for prefixes; its pods wait (tooFewStatus).
func (b *builder) kindFor(id string, need int) (prefix, ok bool) {
	switch b.allocation() {
	case desired.IPv4Prefix:
		return true, !b.fragmented(id)
	case desired.IPv4PreferPrefix:
		return !b.fragmented(id) && !b.tooFew(id, need), true
	}
	return false, true
}

// tooFew reports whether vSwitch id is known to have fewer than need free
// addresses, as observed or as this plan's own assigns and creates leave it.
func (b *builder) tooFew(id string, need int) bool {
	v, known := b.vsw[id]
	return known && v.AvailableIPs < need
}

// surplus reports whether a free IPv4 address of this origin (inside a
// prefix or a secondary address) is of the wrong kind for the allocation
// in force: the mode was switched in place. Surplus addresses are handed
// out only to pods no growth serves (bindSurplus), and go back at once
// (releaseSurplus). prefer-prefix takes both kinds.
func (b *builder) surplus(inPrefix bool) bool {
	switch b.allocation() {
	case desired.IPv4Secondary:
		return inPrefix
	case desired.IPv4Prefix:
		return !inPrefix
	}
	return false
}

// perSlot is how many pod IPv4 addresses one private-address slot of an
// ENI brings under the allocation in force.
func (b *builder) perSlot() int {
	if b.allocation() == desired.IPv4Secondary {
		return 1
	}
	return prefixSize
}

// v4Addrs is how many pod IPv4 addresses the ENI holds: secondary
// addresses and the addresses of its prefixes.
func v4Addrs(e *observed.ENI) int { return len(e.IPv4) + prefixSize*len(e.IPv4Prefixes) }

// freeV4Slots is how many private-address slots of the ENI are free: each
// secondary address and each prefix takes one, the primary address one.
func (b *builder) freeV4Slots(e *observed.ENI) int {
	return max(0, b.o.Instance.Limits.IPv4PerENI-1-len(e.IPv4)-len(e.IPv4Prefixes))
}

// roomOn is how many more units ENI e can hold: its free slots filled
// with the kind its vSwitch grows by, capped by IPv6 per ENI on dual stack.
func (b *builder) roomOn(e *observed.ENI) int {
	u := b.units(e)
	most := u
	if b.v4 {
		per := 1
		if prefix, ok := b.growKind(e.VSwitchID); !ok {
			return 0
		} else if prefix {
			per = prefixSize
		}
		most = v4Addrs(e) + per*b.freeV4Slots(e)
	}
	if b.v6 {
		c6 := max(len(e.IPv6), b.o.Instance.Limits.IPv6PerENI)
		if b.v4 {
			most = min(most, c6)
		} else {
			most = c6
		}
	}
	return max(0, most-u)
}

// growOn plans growth of ENI e by up to n units (more when a prefix
// brings more): within its free slots, never asking its vSwitch for more
// than it has left. It returns the units added, and short when the
// vSwitch's free addresses held it below that.
func (b *builder) growOn(e *eniState, n int, why Reason) (added int, short bool) {
	u := b.units(e.eni)
	want := u + min(n, b.roomOn(e.eni))
	target := want
	v, known := b.vsw[e.eni.VSwitchID]
	prefix, _ := b.growKind(e.eni.VSwitchID)
	a4 := v4Addrs(e.eni)
	if known && b.v4 {
		// ECS refuses a whole assign the vSwitch cannot fill: ask only for
		// what it has left, and let the rest wait as exhausted.
		if prefix {
			target = min(target, a4+v.AvailableIPs/prefixSize*prefixSize)
		} else {
			target = min(target, a4+v.AvailableIPs)
		}
	}
	short = target < want
	if target <= u {
		return 0, short
	}
	taken := b.assign(e, target, prefix, why)
	if known && b.v4 {
		v.AvailableIPs -= taken
		b.vsw[v.ID] = v
	}
	after := target
	switch {
	case b.v4 && b.v6:
		after = min(a4+taken, max(len(e.eni.IPv6), target))
	case b.v4:
		after = a4 + taken
	}
	return after - u, short
}

// strictTooFew reports whether, in strict prefix mode, vSwitch id is
// known to have free addresses but fewer than need, what a prefix takes
// there: the pods wait for that, not for a vSwitch with no address at all.
func (b *builder) strictTooFew(id string, need int) bool {
	v := b.vsw[id]
	return b.allocation() == desired.IPv4Prefix && v.AvailableIPs > 0 && b.tooFew(id, need)
}

// tooFewText says why pods wait when strictTooFew(id, need) (what names
// what the need is for), "" when it does not hold.
func (b *builder) tooFewText(id string, need int, what string) string {
	if !b.strictTooFew(id, need) {
		return ""
	}
	return "vSwitch " + id + " has " + itoa(b.vsw[id].AvailableIPs) + " free addresses, fewer than " + what + " needs (" + itoa(need) +
		"; eni.ipv4Allocation is prefix, prefer-prefix would take single addresses)"
}

// fragmentedStatus is the answer for pods that wait because a vSwitch
// refused a prefix in strict prefix mode.
func (b *builder) fragmentedStatus(id string) *PodStatus {
	return &PodStatus{Phase: PhasePending, ReasonCode: ReasonVSwitchFragmented,
		Reason: "vSwitch " + id + " has no aligned /28 free (it refused a prefix) and eni.ipv4Allocation is prefix; " +
			"a prefix is asked again after " + b.mem.Fragmented[id].UTC().Format(rfc3339) + " (prefer-prefix would take single addresses)"}
}

// orderFree puts each usable ENI's free IPv4 addresses in the order they
// are handed out: addresses of the fullest prefix first (the fewest of
// its addresses free: the rest are bound, held or cooling), so that the
// emptiest prefixes stay empty and can go back whole; then secondary
// addresses, lowest first. The surplus list is ordered the same way. The
// order stays right while pods are bound from it: the prefix they fill
// only gets fuller.
//
// Each address's sort key is computed once: this runs on every pass.
func (b *builder) orderFree() {
	for _, e := range b.usable {
		if len(e.eni.IPv4Prefixes) == 0 {
			continue
		}
		// Free addresses per prefix, by the prefix's first address (a
		// prefix is an aligned /28, so an address's prefix is its /28).
		free := make(map[netip.Addr]int, len(e.eni.IPv4Prefixes))
		for _, p := range e.eni.IPv4Prefixes {
			free[p.Masked().Addr()] = 0
		}
		for _, l := range [][]netip.Addr{e.free4, e.spare4} {
			for _, a := range l {
				if base := prefixBase(a); hasKey(free, base) {
					free[base]++
				}
			}
		}
		e.free4 = orderByFullness(e.free4, free)
		e.spare4 = orderByFullness(e.spare4, free)
	}
}

// orderByFullness sorts addresses by the free count of their prefix
// (fewest first; ties by prefix), addresses outside every prefix last;
// within a prefix, and among those outside, lowest first.
func orderByFullness(l []netip.Addr, free map[netip.Addr]int) []netip.Addr {
	type keyed struct {
		rank int // free addresses of its prefix; outside prefixes: last
		base netip.Addr
		a    netip.Addr
	}
	ks := make([]keyed, len(l))
	for i, a := range l {
		base := prefixBase(a)
		n, in := free[base]
		if !in {
			n, base = math.MaxInt, a
		}
		ks[i] = keyed{n, base, a}
	}
	slices.SortFunc(ks, func(x, y keyed) int {
		return cmp.Or(cmp.Compare(x.rank, y.rank), x.base.Compare(y.base), x.a.Compare(y.a))
	})
	for i := range ks {
		l[i] = ks[i].a
	}
	return l
}

// prefixBase is the first address of the /28 holding a.
func prefixBase(a netip.Addr) netip.Addr {
	p, err := a.Prefix(observed.IPv4PrefixBits)
	if err != nil {
		return a
	}
	return p.Addr()
}

func hasKey(m map[netip.Addr]int, k netip.Addr) bool {
	_, ok := m[k]
	return ok
}

// spareSlots is how many pods the ENI can take from its surplus addresses.
func (b *builder) spareSlots(e *eniState) int {
	if b.v6 {
		return min(len(e.spare4), len(e.free6))
	}
	return len(e.spare4)
}

// bindSurplus hands surplus addresses (of the kind the mode no longer
// asks for) to waiting pods that no growth source serves (growth is
// blocked, or the cloud is not observed): better served now from what the
// node holds than waiting. A pod growth serves waits for the right kind,
// so that the old kind can drain. It returns the pods left waiting.
func (b *builder) bindSurplus(waiting []*podState, sources []source) []*podState {
	served := 0
	for _, s := range sources {
		served += s.units
	}
	if !b.bindable || len(waiting) <= served {
		return waiting
	}
	order := b.fillOrder()
	left := slices.Clone(waiting[:served])
	i := 0
	for _, p := range waiting[served:] {
		for i < len(order) && b.spareSlots(order[i]) == 0 {
			i++
		}
		if i == len(order) {
			left = append(left, p)
			continue
		}
		e := order[i]
		var ip4, ip6 netip.Addr
		ip4, e.spare4 = e.spare4[0], e.spare4[1:]
		if b.v6 {
			ip6, e.free6 = e.free6[0], e.free6[1:]
		}
		b.bindFree(p, ip4, ip6, e)
	}
	return left
}

// freeSingles is how many units of single (secondary) free addresses the
// ENI could give back: free4 holds them after the prefix addresses
// (orderFree).
func (b *builder) freeSingles(e *eniState) int {
	if !b.v4 {
		return len(e.free6)
	}
	n := 0
	for _, a := range slices.Backward(e.free4) {
		if _, in := e.eni.PrefixOf(a); in {
			break
		}
		n++
	}
	if b.v6 {
		return min(n, len(e.free6))
	}
	return n
}

// prefixFree reports whether every address of prefix p is free: held by
// no pod, no gone attachment and no sticky reservation, and not cooling
// down. Only such a prefix may go back.
func (b *builder) prefixFree(p netip.Prefix) bool {
	a := p.Masked().Addr()
	for range prefixSize {
		s := b.slot(a)
		if s == nil || s.h != nil || s.dup {
			return false
		}
		if until, ok := b.mem.Cooldowns[a]; ok && b.now.Before(until) {
			return false
		}
		a = a.Next()
	}
	return true
}

// releasePrefixes gives back whole free prefixes of e while each fits in
// the excess (idle - 16 stays >= maxIdle, wantIdle; total - 16 >= minTotal),
// highest first, with as many free IPv6 addresses on dual stack; prev is
// the last call planned on e (chained). It returns the excess left and the
// last call.
func (b *builder) releasePrefixes(e *eniState, excess int, why Reason, prev int) (int, int) {
	if !b.v4 || b.surplus(true) {
		return excess, prev // surplus prefixes go in releaseSurplus
	}
	var out []netip.Prefix
	for _, p := range slices.Backward(e.eni.IPv4Prefixes) {
		if excess < prefixSize {
			break
		}
		if b.prefixFree(p) {
			out = append(out, p)
			excess -= prefixSize
		}
	}
	prev = b.unassignPrefixes(e, out, why, prev)
	if b.v6 && len(out) > 0 {
		k := min(len(out)*prefixSize, len(e.free6))
		prev = b.unassignAddrs(e, nil, e.free6[len(e.free6)-k:], why, prev)
		e.free6 = e.free6[:len(e.free6)-k]
	}
	return excess, prev
}

// releaseSurplus gives back the free addresses of the kind the allocation
// no longer asks for (the mode was switched in place): whole free
// prefixes, and single free secondary addresses. Their pods keep theirs;
// the rest follows as those pods go. Held, sticky and cooling addresses
// stay.
func (b *builder) releaseSurplus() {
	if !b.v4 || b.excl {
		return // pods take no IPv4 from ENI slots: nothing is of a kind
	}
	why := Reason{ReasonAllocationModeChanged, "eni.ipv4Allocation is " + string(b.allocation()) + ": free addresses of the other kind go back"}
	for _, e := range b.usable {
		if e.dropped {
			continue // its addresses go with it (dropENI)
		}
		prev := e.lastCall - 1
		if b.surplus(false) {
			var singles []netip.Addr
			for _, a := range e.spare4 {
				if _, in := e.eni.PrefixOf(a); !in {
					singles = append(singles, a)
				}
			}
			prev = b.unassignAddrs(e, singles, nil, why, prev)
		}
		if b.surplus(true) {
			var out []netip.Prefix
			for _, p := range e.eni.IPv4Prefixes {
				if b.prefixFree(p) {
					out = append(out, p)
				}
			}
			prev = b.unassignPrefixes(e, out, why, prev)
		}
		e.lastCall = prev + 1
	}
}

// unassignAddrs plans UnassignIPs of the addresses, at most ten per call
// and family, chained after prev; it returns the last call (prev if none).
func (b *builder) unassignAddrs(e *eniState, v4, v6 []netip.Addr, why Reason, prev int) int {
	for _, l := range [][]netip.Addr{v4, v6} {
		for len(l) > 0 {
			c := min(len(l), maxAssignPerCall)
			a := Action{Kind: UnassignIPs, Target: e.eni.ID, Reason: why, ENIID: e.eni.ID}
			if l[0].Is4() {
				a.IPv4 = slices.Clone(l[:c])
			} else {
				a.IPv6 = slices.Clone(l[:c])
			}
			if prev >= 0 {
				a.DependsOn = []int{prev}
			}
			prev = b.add(a)
			l = l[c:]
		}
	}
	return prev
}

// unassignPrefixes plans UnassignIPs of whole prefixes, at most ten per
// call, chained after prev; it returns the last call (prev if none).
func (b *builder) unassignPrefixes(e *eniState, ps []netip.Prefix, why Reason, prev int) int {
	slices.SortFunc(ps, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	for len(ps) > 0 {
		c := min(len(ps), maxPrefixesPerCall)
		a := Action{Kind: UnassignIPs, Target: e.eni.ID, Reason: why, ENIID: e.eni.ID, IPv4Prefixes: slices.Clone(ps[:c])}
		if prev >= 0 {
			a.DependsOn = []int{prev}
		}
		prev = b.add(a)
		ps = ps[c:]
	}
	return prev
}

// prefixCount is how many IPv4 prefixes the usable ENIs hold.
func (b *builder) prefixCount() int {
	n := 0
	for _, e := range b.usable {
		n += len(e.eni.IPv4Prefixes)
	}
	return n
}

// surplusCount is how many free surplus IPv4 addresses remain.
func (b *builder) surplusCount() int {
	n := 0
	for _, e := range b.usable {
		n += len(e.spare4)
	}
	return n
}

func ceilDiv(n, d int) int { return (n + d - 1) / d }
