package planner

// This file plans giving back: idle units above maxIdle after the release
// delay, and leaked owned ENIs after their grace.

import (
	"cmp"
	"net/netip"
	"slices"
	"time"
)

// release gives back idle units above maxIdle once idle has stayed above
// it for ReleaseDelay: whole idle ENIs first (newest first), then single
// addresses from the least used ENIs (highest addresses first), then whole
// free prefixes that fit in the excess (releasePrefixes). Addresses
// held, sticky or cooling down are never released, and nothing is released
// while a pod waits.
func (b *builder) release(pp poolPolicy, idle, total, wantIdle int) {
	excess := min(idle-pp.maxIdle, total-pp.minTotal, idle-wantIdle)
	b.dropEmptyENIs()
	why, due := b.releaseDue(pp, idle, excess)
	if !due {
		return
	}
	excess = b.dropIdleENIs(excess, why)
	order := slices.Clone(b.usable)
	slices.SortStableFunc(order, func(x, y *eniState) int {
		return cmp.Or(cmp.Compare(x.used, y.used), cmp.Compare(y.eni.DeviceIndex, x.eni.DeviceIndex))
	})
	for _, e := range order {
		if excess <= 0 {
			break
		}
		if e.dropped || b.excl {
			continue
		}
		excess = b.releaseFrom(e, excess, why)
	}
}

// dropEmptyENIs releases at once the owned ENIs holding nothing at all:
// they serve no pod and count for nothing in the pool.
func (b *builder) dropEmptyENIs() {
	for _, e := range slices.Backward(b.usable) {
		if !b.excl && b.units(e.eni) == 0 && e.used == 0 && e.held == 0 && len(e.eni.IPv4)+len(e.eni.IPv6)+len(e.eni.IPv4Prefixes) == 0 {
			b.dropENI(e, Reason{ReasonIdleAboveMax, "ENI holds no address"})
		}
	}
}

// releaseDue keeps the memory of when idle went above maxIdle (cleared
// when there is no excess) and reports whether the release is due (the
// release delay has passed, or the node is cordoned and its own wait has:
// see unschedulable.go), with the reason of what it releases.
func (b *builder) releaseDue(pp poolPolicy, idle, excess int) (Reason, bool) {
	if excess <= 0 {
		b.mem.IdleAboveMaxSince = time.Time{}
		return Reason{}, false
	}
	if b.mem.IdleAboveMaxSince.IsZero() {
		b.mem.IdleAboveMaxSince = b.now
	}
	cordoned := b.cordoned()
	if !cordoned && b.now.Sub(b.mem.IdleAboveMaxSince) < b.cfg.Pool.ReleaseDelay.D() {
		return Reason{}, false
	}
	if cordoned {
		// The wait was pool.unschedulableRelease (unschedulable.go).
		return b.cordonReason(idle), true
	}
	return Reason{ReasonIdleAboveMax, "idle " + itoa(idle) + " > maxIdle " + itoa(pp.maxIdle) + " since " + b.mem.IdleAboveMaxSince.UTC().Format(rfc3339)}, true
}

// dropIdleENIs releases whole idle ENIs, newest first, that fit in the
// excess, and returns the excess left.
func (b *builder) dropIdleENIs(excess int, why Reason) int {
	for _, e := range slices.Backward(b.usable) {
		u := b.units(e.eni)
		if e.used == 0 && e.held == 0 && u > 0 && u == b.freeSlots(e) && u <= excess {
			b.dropENI(e, why)
			excess -= u
		}
	}
	return excess
}

// releaseFrom gives back free units of one ENI, up to the excess: single
// addresses first (the highest), then whole prefixes, chained after the
// ENI's last call; it returns the excess left.
func (b *builder) releaseFrom(e *eniState, excess int, why Reason) int {
	k := min(excess, b.freeSingles(e))
	excess -= k
	var v4, v6 []netip.Addr
	if k > 0 && b.v4 {
		v4 = e.free4[len(e.free4)-k:]
		e.free4 = e.free4[:len(e.free4)-k]
	}
	if k > 0 && b.v6 {
		v6 = e.free6[len(e.free6)-k:]
		e.free6 = e.free6[:len(e.free6)-k]
	}
	prev := b.unassignAddrs(e, v4, v6, why, e.lastCall-1)
	excess, prev = b.releasePrefixes(e, excess, why, prev)
	e.lastCall = prev + 1
	return excess
}

// dropENI plans DetachENI then DeleteENI of an owned, unused ENI, and
// marks it dropped: its addresses go with it, so no other call is planned
// on it (releaseSurplus would otherwise unassign its surplus addresses
// beside the detach: on dual stack an ENI whose units are all free, as
// IPv6 counts them, can still hold surplus IPv4 addresses).
func (b *builder) dropENI(e *eniState, why Reason) {
	e.dropped = true
	// MAC and Table let the executor remove the ENI's device configuration
	// before the detach.
	det := b.add(Action{Kind: DetachENI, Target: e.eni.ID, Reason: why, ENIID: e.eni.ID, InstanceID: b.o.Instance.ID,
		MAC: e.eni.MAC, Table: e.table()})
	b.add(Action{Kind: DeleteENI, Target: e.eni.ID, Reason: why, DependsOn: []int{det}, ENIID: e.eni.ID})
}

// leaks deletes owned ENIs left Available (a crash between create and
// attach, or after a detach) once they have been seen so for LeakGrace and
// nothing adopted them.
func (b *builder) leaks() {
	for _, e := range b.avail {
		since, ok := b.mem.LeakedSince[e.ID]
		if !ok {
			if b.mem.LeakedSince == nil {
				b.mem.LeakedSince = map[string]time.Time{}
			}
			b.mem.LeakedSince[e.ID] = b.now
			since = b.now
		}
		if b.destroyOK() && b.now.Sub(since) >= b.opt.LeakGrace {
			b.add(Action{Kind: DeleteENI, Target: e.ID, Reason: Reason{ReasonLeakedENI, "owned ENI Available since " + since.UTC().Format(rfc3339)}, ENIID: e.ID})
		}
	}
}
