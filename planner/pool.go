package planner

import (
	"time"

	"github.com/enidnet/enid/desired"
)

// This file is the pool policy: how many units to hold, counted in one
// step from demand. Growth is planned in grow.go, release in release.go.

// poolPolicy is the config's pool with defaults and sanity applied.
type poolPolicy struct {
	minIdle, maxIdle, minTotal, batch int
	// alloc is eni.ipv4Allocation in force: a change of it is a change
	// of the pool's knobs (spread, like the counts).
	alloc desired.IPv4Allocation
}

func (b *builder) policy() poolPolicy {
	p := b.cfg.Pool
	pp := poolPolicy{minIdle: max(0, p.MinIdle), maxIdle: max(0, p.MaxIdle), minTotal: max(0, p.MinTotal), batch: max(1, p.Batch)}
	pp.maxIdle = max(pp.maxIdle, pp.minIdle)
	pp.alloc = b.allocation()
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
	b.podSets()
	b.eniTargets()
	b.bindShared()
	b.eniSets()
	b.computeFree()
	b.eachSet(b.setPool)
	b.rememberSticky()
	b.leaks()
	b.podActions()
}

// setPool plans the pool of the security-group set the builder is
// narrowed to (sgset.go; with one set, the node's whole pool): its new
// bindings, growth or release, and what its waiting pods wait for.
// cooling counts the set's units cooling down.
func (b *builder) setPool(cooling int) {
	waiting := b.bindNew()
	pp := b.policy()
	// After a change of the pool's knobs, optional work waits for this
	// node's turn (spread.go); growth for waiting pods never does. The
	// knobs are the config's: a cordon is no change of them.
	spread := b.spreading(pp)
	pp = b.cordonPolicy(pp)

	used, sticky, gone := b.countHeld()
	total, idle := 0, 0
	for _, e := range b.usable {
		total += b.units(e.eni)
		idle += b.freeSlots(e)
	}
	expected := b.hinted()
	hinted := min(expected, pp.maxIdle)
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
	switch {
	case spread && len(waiting) == 0:
		grow = 0
	case spread && need > 0:
		// Only what the waiting pods need now; the new minimum comes in
		// this node's turn.
		need = len(waiting) - idle
		grow = max(0, min(roundUp(need, pp.batch), len(waiting)+pp.maxIdle-idle))
	}
	steer := grow
	if b.perSlot() > 1 && !b.v6 {
		steer = roundUp(grow, prefixSize) // prefixes come whole
	}
	b.plan.Pool = PoolSummary{
		Total: total, Used: used, Idle: idle, Cooldown: cooling + gone, Sticky: sticky,
		Waiting: len(waiting), Target: max(total+steer, pp.minTotal), Capacity: b.capacity(), Expected: expected,
	}
	b.plan.Pool.Target = min(b.plan.Pool.Target, max(b.plan.Pool.Capacity, total))
	b.plan.Pool.Prefixes, b.plan.Pool.Surplus = b.prefixCount(), b.surplusCount()

	var sources []source
	blocked := (*PodStatus)(nil)
	if grow > 0 {
		if !b.complete {
			blocked = b.incompleteStatus()
		} else {
			why := Reason{code, growText(code, len(waiting), idle, wantIdle, total, pp.minTotal)}
			first := len(b.plan.Actions)
			sources, blocked = b.grow(need, grow, pp.batch, why)
			blocked = b.slotWait(blocked, len(waiting))
			if len(waiting) > 0 {
				b.markUrgent(first)
			}
		}
	} else if b.complete && len(waiting) == 0 && !spread {
		b.release(pp, idle, total, wantIdle)
	}
	if grow > 0 || len(waiting) > 0 {
		b.mem.IdleAboveMaxSince = time.Time{}
	}
	if b.plan.Pool.Surplus > 0 {
		// Pods no growth serves (it is blocked, or the cloud is not
		// observed) take surplus addresses the node holds rather than wait.
		waiting = b.bindSurplus(waiting, sources)
		// Sticky pods bound here are remembered by shared(), after every
		// set: nothing reads Memory.Sticky in between.
		b.plan.Pool.Waiting, b.plan.Pool.Surplus = len(waiting), b.surplusCount()
	}
	if b.complete && !spread {
		b.releaseSurplus() // after bindSurplus: it gives back what is left
	}
	if refused := b.refusedStatus(); refused != nil && len(waiting) > 0 && len(sources) == 0 {
		// The set's groups were refused and nothing planned serves these
		// pods: no new ENI of the set is made before the mark ends. Pods
		// growth serves on an ENI that has the groups already wait for it
		// (grow gives the refusal only for the pods past them).
		blocked = refused
	}
	b.tellWaiting(waiting, sources, blocked, cooling+gone)
}

// countHeld counts the addresses held by live (or kept) attachments, by
// sticky reservations and by gone attachments. Every holder holds one
// address of the stack's first family.
func (b *builder) countHeld() (used, sticky, gone int) {
	for _, s := range b.addrIdx {
		h := s.h
		if h == nil || s.ip.Is4() != b.v4 || s.eni.set != b.cur {
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
	return used, sticky, gone
}

// tellWaiting gives each waiting pod the status that says what it waits
// for: the growth source that serves it, else why none does (cooling is
// the number of addresses cooling down or held by gone attachments).
func (b *builder) tellWaiting(waiting []*podState, sources []source, blocked *PodStatus, cooling int) {
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
			st := *b.incompleteStatus()
			st.Key, st.Revision, st.IfName = p.key, p.entry.Revision, p.key.IfName
			p.status = &st
		case cooling > 0 && (blocked == nil || blocked.Phase != PhasePending):
			p.status = b.waitStatus(p, ReasonWaitingCooldown, "free addresses are cooling down after release")
		case blocked != nil:
			st := *blocked
			st.Key, st.Revision, st.IfName = p.key, p.entry.Revision, p.key.IfName
			p.status = &st
		default:
			p.status = b.waitStatus(p, ReasonWaitingForIPs, "waiting for addresses")
		}
	}
}

// markUrgent marks the cloud actions from index first on: a waiting pod
// needs them.
func (b *builder) markUrgent(first int) {
	for i := first; i < len(b.plan.Actions); i++ {
		if b.plan.Actions[i].Kind.Cloud() {
			b.plan.Actions[i].Urgent = true
		}
	}
}

// incompleteStatus is what a pod waits for when the observation is
// incomplete: the cloud in degraded mode (idle addresses are handed out,
// none are left), the whole observation otherwise.
func (b *builder) incompleteStatus() *PodStatus {
	if b.bindable {
		return &PodStatus{Phase: PhasePending, ReasonCode: ReasonCloudUnreachable,
			Reason: "cloud unreachable (last observed " + b.o.CloudFrom.UTC().Format(rfc3339) + "): no idle address left, and growth waits for the cloud"}
	}
	return &PodStatus{Phase: PhasePending, ReasonCode: ReasonObservationFailed, Reason: "observation incomplete: no new address is handed out"}
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
