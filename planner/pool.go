package planner

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"github.com/enidnet/enid/observed"
)

// This file is shared-mode pool policy: how many addresses to hold, where
// growth comes from, and what is released.

// poolPolicy is the config's pool with defaults and sanity applied.
type poolPolicy struct {
	minIdle, maxIdle, minTotal, batch int
}

func (b *builder) policy() poolPolicy {
	p := b.cfg.Pool
	pp := poolPolicy{minIdle: max(0, p.MinIdle), maxIdle: max(0, p.MaxIdle), minTotal: max(0, p.MinTotal), batch: max(1, p.Batch)}
	pp.maxIdle = max(pp.maxIdle, pp.minIdle)
	return pp
}

// source is capacity a waiting pod can count on: addresses being assigned,
// an ENI attaching, or an ENI being created.
type source struct {
	units int
	code  ReasonCode
	text  string
}

// shared plans shared-ENI mode.
func (b *builder) shared() {
	b.configureENIs()
	b.bindShared()
	cooling := b.computeFree()
	waiting := b.bindNew()
	b.rememberSticky()
	pp := b.policy()

	// Count the pool.
	// Every holder holds one address of the stack's first family.
	var used, sticky, gone int
	for _, s := range b.addrIdx {
		h := s.h
		if h == nil || s.ip.Is4() != b.v4 {
			continue
		}
		switch h.kind {
		case holdLive, holdKeep:
			used++
		case holdSticky:
			sticky++
		case holdStale:
			gone++
		}
	}
	total, idle := 0, 0
	for _, e := range b.usable {
		total += b.units(e.eni)
		idle += b.freeSlots(e)
	}
	hinted := min(b.hinted(), pp.maxIdle)
	wantIdle := max(pp.minIdle, hinted)
	need := len(waiting) + wantIdle - idle
	code := ReasonPoolBelowMinIdle
	if len(waiting) > 0 {
		code = ReasonPodsWaiting
	}
	if t := pp.minTotal - total; t > need {
		need, code = t, ReasonPoolBelowMinTotal
	}
	grow := 0
	if need > 0 {
		grow = min(roundUp(need, pp.batch), max(need, len(waiting)+pp.maxIdle-idle))
	}
	b.plan.Pool = PoolSummary{
		Total: total, Used: used, Idle: idle, Cooldown: cooling + gone, Sticky: sticky,
		Waiting: len(waiting), Target: max(total+grow, pp.minTotal), Capacity: b.capacity(),
	}
	b.plan.Pool.Target = min(b.plan.Pool.Target, max(b.plan.Pool.Capacity, total))

	var sources []source
	blocked := (*PodStatus)(nil)
	if grow > 0 {
		if !b.complete {
			blocked = &PodStatus{Phase: PhasePending, ReasonCode: ReasonObservationFailed, Reason: "observation incomplete: no new address is handed out"}
		} else {
			why := Reason{code, growText(code, len(waiting), idle, wantIdle, total, pp.minTotal)}
			sources, blocked = b.grow(need, grow, pp.batch, why)
		}
	} else if b.complete && len(waiting) == 0 {
		b.release(pp, idle, total, wantIdle)
	}
	if grow > 0 || len(waiting) > 0 {
		b.mem.IdleAboveMaxSince = time.Time{}
	}
	b.leaks()

	// Tell each waiting pod what it waits for.
	si := 0
	for _, p := range waiting {
		for si < len(sources) && sources[si].units == 0 {
			si++
		}
		if si < len(sources) {
			sources[si].units--
			p.status = b.waitStatus(p, sources[si].code, sources[si].text)
			continue
		}
		switch {
		case !b.complete:
			p.status = b.waitStatus(p, ReasonObservationFailed, "observation incomplete: no new address is handed out")
		case cooling+gone > 0 && (blocked == nil || blocked.Phase != PhasePending):
			p.status = b.waitStatus(p, ReasonWaitingCooldown, "free addresses are cooling down after release")
		case blocked != nil:
			st := *blocked
			st.Key, st.Revision, st.IfName = p.key, p.entry.Revision, p.key.IfName
			p.status = &st
		default:
			p.status = b.waitStatus(p, ReasonWaitingForIPs, "waiting for addresses")
		}
	}
	b.podActions()
}

// hinted counts admitted pods that have no entry yet: demand soon to come.
func (b *builder) hinted() int {
	if len(b.d.Hints.AdmittedPodUIDs) == 0 {
		return 0
	}
	have := make(map[string]bool, len(b.pods))
	for _, p := range b.pods {
		have[p.entry.PodUID] = true
	}
	n := 0
	for _, u := range b.d.Hints.AdmittedPodUIDs {
		if !have[u] {
			n++
		}
	}
	return n
}

// capacity is the most pod address pairs the instance can hold.
func (b *builder) capacity() int {
	return max(0, b.maxOwnedENIs()) * b.slotCap()
}

// maxOwnedENIs is how many secondary ENIs enid may have attached.
func (b *builder) maxOwnedENIs() int {
	n := b.o.Instance.Limits.ENIs - 1
	if m := b.cfg.ENI.MaxENIs; m > 0 && m < n {
		n = m
	}
	return n
}

func roundUp(n, step int) int { return (n + step - 1) / step * step }

func growText(c ReasonCode, waiting, idle, wantIdle, total, minTotal int) string {
	switch c {
	case ReasonPodsWaiting:
		return "waiting " + itoa(waiting) + ", idle " + itoa(idle)
	case ReasonPoolBelowMinTotal:
		return "total " + itoa(total) + " < minTotal " + itoa(minTotal)
	}
	return "idle " + itoa(idle) + " < " + itoa(wantIdle)
}

// grow plans n more units: first on attached ENIs with room, then ENIs
// attaching, then owned Available ENIs (adopted), then new ENIs. It returns
// the capacity sources in that order and, when n cannot be met, the status
// for pods left over.
//
// Rounding up to the batch applies to attached ENIs; new ENIs are made only
// for what is needed (rounded up to the batch within the new ENI), so a
// rounding surplus never costs an ENI.
func (b *builder) grow(need, n, batch int, why Reason) ([]source, *PodStatus) {
	var out []source
	slotCap := b.slotCap()
	for _, e := range b.fillOrder() {
		if n == 0 || b.excl {
			break
		}
		room := slotCap - b.units(e.eni)
		k := min(room, n)
		if k <= 0 {
			continue
		}
		b.assign(e, b.units(e.eni)+k, why)
		n -= k
		need -= k
		out = append(out, source{k, ReasonWaitingForIPs, "waiting for addresses on " + e.eni.ID})
	}
	n = max(0, need)
	for _, e := range b.inflight {
		if n == 0 {
			break
		}
		k := min(n, b.units(e))
		n -= k
		out = append(out, source{k, ReasonWaitingForAttach, "waiting for ENI " + e.ID + " to attach"})
	}
	planned := 0 // ENIs this plan attaches
	creates := 0 // ENIs this plan creates
	for len(b.avail) > 0 && n > 0 {
		e := b.adoptable()
		if e == nil {
			break
		}
		if blocked := b.eniLimit(planned); blocked != nil {
			return out, blocked
		}
		// The next pass configures it, once its device index is known.
		b.add(Action{Kind: AttachENI, Target: e.ID, Reason: Reason{ReasonAdoptENI, "owned ENI left Available; " + why.Text},
			ENIID: e.ID, MAC: e.MAC, InstanceID: b.o.Instance.ID, ClientToken: token("attach", itoa(b.mem.Epoch), b.o.Instance.ID, e.ID)})
		planned++
		k := min(n, max(1, b.units(e)))
		n -= k
		out = append(out, source{k, ReasonWaitingForAttach, "waiting for ENI " + e.ID + " to attach"})
	}
	for n > 0 {
		if blocked := b.eniLimit(planned); blocked != nil {
			return out, blocked
		}
		if slotCap == 0 {
			return out, &PodStatus{Phase: PhaseFailed, ReasonCode: ReasonConfigInvalid, Reason: "instance limits unknown or zero addresses per ENI"}
		}
		v, blocked := b.pickVSwitch()
		if blocked != nil {
			return out, blocked
		}
		k := min(roundUp(n, batch), slotCap, maxIPsAtCreate, v.AvailableIPs)
		if b.v6 && !b.v4 || b.excl {
			k = min(n, slotCap)
		}
		create := b.createENI(v, k, creates, why)
		creates++
		att := b.add(Action{Kind: AttachENI, Target: "new#" + itoa(create), Reason: why, DependsOn: []int{create},
			ENIRef: create + 1, InstanceID: b.o.Instance.ID,
			ClientToken: token("attach", itoa(b.mem.Epoch), b.o.Instance.ID, b.plan.Actions[create].ClientToken)})
		b.configureNew("", create+1, v.ID, att)
		planned++
		n = max(0, n-k)
		// Later ENIs of this plan see what this one takes.
		v.AvailableIPs -= k
		b.vsw[v.ID] = v
		out = append(out, source{k, ReasonWaitingForAttach, "waiting for a new ENI to attach"})
	}
	return out, nil
}

// assign plans AssignIPs on e so that it holds target units, at most ten
// addresses per call, calls on one ENI chained (ECS refuses concurrent
// changes to one ENI).
func (b *builder) assign(e *eniState, target int, why Reason) {
	prev := -1
	for _, fam := range []int{4, 6} {
		var have int
		switch {
		case fam == 4 && b.v4:
			have = len(e.eni.IPv4)
		case fam == 6 && b.v6:
			have = len(e.eni.IPv6)
		default:
			continue
		}
		for seq := 0; have < target; seq++ {
			k := min(target-have, maxAssignPerCall)
			a := Action{Kind: AssignIPs, Target: e.eni.ID, Reason: why, ENIID: e.eni.ID,
				ClientToken: token("assign", itoa(b.mem.Epoch), e.eni.ID, itoa(fam), itoa(have), itoa(k))}
			if fam == 4 {
				a.IPv4Count = k
			} else {
				a.IPv6Count = k
			}
			if prev >= 0 {
				a.DependsOn = []int{prev}
			}
			prev = b.add(a)
			have += k
		}
	}
}

// adoptable returns the first owned Available ENI in a vSwitch pods may use
// in this zone and removes it from b.avail, or nil.
func (b *builder) adoptable() *observed.ENI {
	allowed := b.cfg.ENI.VSwitches[b.o.Instance.ZoneID]
	for i, e := range b.avail {
		if e.ZoneID == b.o.Instance.ZoneID && slices.Contains(allowed, e.VSwitchID) {
			b.avail = slices.Delete(b.avail, i, i+1)
			return e
		}
	}
	return nil
}

// eniLimit returns the status for pods that cannot be served because no
// further ENI may be attached, or nil when one may.
func (b *builder) eniLimit(planned int) *PodStatus {
	l := b.o.Instance.Limits.ENIs
	mine := len(b.usable) + len(b.inflight) + planned
	switch {
	case l <= 0:
		return &PodStatus{Phase: PhaseFailed, ReasonCode: ReasonConfigInvalid, Reason: "instance ENI limit unknown"}
	case mine >= b.maxOwnedENIs() && b.cfg.ENI.MaxENIs > 0 && b.cfg.ENI.MaxENIs < l-1:
		return &PodStatus{Phase: PhaseFailed, ReasonCode: ReasonInstanceENILimit, Reason: "maxENIs " + itoa(b.cfg.ENI.MaxENIs) + " reached and every address is in use"}
	case mine >= l-1:
		return &PodStatus{Phase: PhaseFailed, ReasonCode: ReasonIPLimit, Reason: "node holds its maximum of " + itoa(b.capacity()) + " pod addresses"}
	case b.attached+planned >= l:
		return &PodStatus{Phase: PhaseFailed, ReasonCode: ReasonInstanceENILimit, Reason: "instance has " + itoa(b.attached) + " of " + itoa(l) + " ENIs attached (" + itoa(b.attached-1-mine+planned) + " not enid's)"}
	}
	return nil
}

// pickVSwitch chooses the vSwitch for a new ENI by the configured policy:
// most-free (most available addresses; ties by config order) or ordered
// (the first in config order with room). vSwitches seen exhausted are
// skipped until their mark expires.
func (b *builder) pickVSwitch() (observed.VSwitch, *PodStatus) {
	zone := b.o.Instance.ZoneID
	ids := b.cfg.ENI.VSwitches[zone]
	if len(ids) == 0 {
		return observed.VSwitch{}, &PodStatus{Phase: PhaseFailed, ReasonCode: ReasonConfigInvalid, Reason: "no vSwitch configured for zone " + zone}
	}
	if len(b.cfg.ENI.SecurityGroups) == 0 {
		return observed.VSwitch{}, &PodStatus{Phase: PhaseFailed, ReasonCode: ReasonConfigInvalid, Reason: "no security group configured"}
	}
	var best *observed.VSwitch
	unknown := 0
	for _, id := range ids {
		v, ok := b.vsw[id]
		if !ok || v.ZoneID != zone {
			unknown++
			continue
		}
		if until, ok := b.mem.Exhausted[id]; ok && b.now.Before(until) {
			continue
		}
		if v.AvailableIPs <= 0 {
			if b.mem.Exhausted == nil {
				b.mem.Exhausted = map[string]time.Time{}
			}
			b.mem.Exhausted[id] = b.now.Add(b.opt.ExhaustedFor)
			continue
		}
		if best == nil || (b.cfg.ENI.VSwitchPolicy != "ordered" && v.AvailableIPs > best.AvailableIPs) {
			vv := v
			best = &vv
		}
		if b.cfg.ENI.VSwitchPolicy == "ordered" {
			break
		}
	}
	if best == nil {
		if unknown == len(ids) {
			return observed.VSwitch{}, &PodStatus{Phase: PhaseFailed, ReasonCode: ReasonConfigInvalid, Reason: "no configured vSwitch of zone " + zone + " was found"}
		}
		return observed.VSwitch{}, &PodStatus{Phase: PhaseFailed, ReasonCode: ReasonVSwitchExhausted, Reason: "every vSwitch of zone " + zone + " is exhausted"}
	}
	return *best, nil
}

// createENI plans CreateENI with the first k units in the call. Its token
// names the instance, the vSwitch, the owned ENIs seen plus the creates
// before it in this plan, and the release epoch: stable when a pass is
// replayed after a crash, new for every ENI the node really needs.
func (b *builder) createENI(v observed.VSwitch, k, nth int, why Reason) int {
	tags := map[string]string{}
	for key, val := range b.cfg.ENI.Tags {
		tags[key] = val
	}
	tags[observed.TagManagedBy] = observed.TagManagedByValue
	tags[observed.TagOwner] = b.o.Instance.ID
	tags[observed.TagCreatedAt] = b.now.UTC().Format(rfc3339)
	a := Action{Kind: CreateENI, Target: "new", Reason: why, VSwitchID: v.ID,
		SecurityGroups: slices.Clone(b.cfg.ENI.SecurityGroups), Tags: tags,
		ClientToken: token("create", itoa(b.mem.Epoch), b.o.Instance.ID, v.ID, itoa(b.owned+nth))}
	if b.v4 && !b.excl {
		a.IPv4Count = k
	}
	if b.v6 {
		a.IPv6Count = k
	}
	id := b.add(a)
	b.plan.Actions[id].Target = "new#" + itoa(id)
	return id
}

// configureNew plans ConfigureENI for an ENI a CreateENI of this plan makes
// (ref is that action's ID+1); its table comes from the device index the
// attach gives (Table 0).
func (b *builder) configureNew(eniID string, ref int, vswID string, attach int) {
	if b.excl {
		return
	}
	v := b.vsw[vswID]
	a := Action{Kind: ConfigureENI, Target: eniID, Reason: Reason{ReasonENIUnconfigured, "new attachment"},
		DependsOn: []int{attach}, ENIID: eniID, ENIRef: ref, Gateway: v.Gateway(), MTU: b.cfg.ENI.MTU}
	if ref > 0 {
		a.Target = "new#" + itoa(ref-1)
	}
	if b.v6 && v.IPv6CIDR.IsValid() {
		a.GatewayV6 = v.IPv6CIDR.Masked().Addr().Next()
	}
	b.add(a)
}

// release gives back idle units above maxIdle once idle has stayed above
// it for ReleaseDelay: whole idle ENIs first (newest first), then single
// addresses from the least used ENIs (highest addresses first). Addresses
// held, sticky or cooling down are never released, and nothing is released
// while a pod waits.
func (b *builder) release(pp poolPolicy, idle, total, wantIdle int) {
	excess := min(idle-pp.maxIdle, total-pp.minTotal, idle-wantIdle)
	// Owned ENIs holding nothing at all are released at once: they serve no
	// pod and count for nothing in the pool.
	for _, e := range slices.Backward(b.usable) {
		if !b.excl && b.units(e.eni) == 0 && e.used == 0 && e.held == 0 && len(e.eni.IPv4)+len(e.eni.IPv6) == 0 {
			b.dropENI(e, Reason{ReasonIdleAboveMax, "ENI holds no address"})
		}
	}
	if excess <= 0 {
		b.mem.IdleAboveMaxSince = time.Time{}
		return
	}
	if b.mem.IdleAboveMaxSince.IsZero() {
		b.mem.IdleAboveMaxSince = b.now
	}
	if b.now.Sub(b.mem.IdleAboveMaxSince) < b.cfg.Pool.ReleaseDelay.D() {
		return
	}
	why := Reason{ReasonIdleAboveMax, "idle " + itoa(idle) + " > maxIdle " + itoa(pp.maxIdle) + " since " + b.mem.IdleAboveMaxSince.UTC().Format(rfc3339)}
	dropped := map[*eniState]bool{}
	for _, e := range slices.Backward(b.usable) {
		u := b.units(e.eni)
		if e.used == 0 && e.held == 0 && u > 0 && u == b.freeSlots(e) && u <= excess {
			b.dropENI(e, why)
			dropped[e] = true
			excess -= u
		}
	}
	order := slices.Clone(b.usable)
	slices.SortStableFunc(order, func(x, y *eniState) int {
		return cmp.Or(cmp.Compare(x.used, y.used), cmp.Compare(y.eni.DeviceIndex, x.eni.DeviceIndex))
	})
	for _, e := range order {
		if excess <= 0 {
			break
		}
		if dropped[e] || b.excl {
			continue
		}
		k := min(excess, b.freeSlots(e))
		if k <= 0 {
			continue
		}
		excess -= k
		prev := -1
		for _, fam := range []int{4, 6} {
			var addrs []netip.Addr
			switch {
			case fam == 4 && b.v4:
				addrs = e.free4[len(e.free4)-k:]
			case fam == 6 && b.v6:
				addrs = e.free6[len(e.free6)-k:]
			}
			for len(addrs) > 0 {
				c := min(len(addrs), maxAssignPerCall)
				a := Action{Kind: UnassignIPs, Target: e.eni.ID, Reason: why, ENIID: e.eni.ID}
				if fam == 4 {
					a.IPv4 = slices.Clone(addrs[:c])
				} else {
					a.IPv6 = slices.Clone(addrs[:c])
				}
				if prev >= 0 {
					a.DependsOn = []int{prev}
				}
				prev = b.add(a)
				addrs = addrs[c:]
			}
		}
	}
}

// dropENI plans DetachENI then DeleteENI of an owned, unused ENI.
func (b *builder) dropENI(e *eniState, why Reason) {
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
