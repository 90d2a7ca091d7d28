package planner

// This file plans growth: addresses on attached ENIs, adoption of owned
// Available ENIs, and new ENIs in a vSwitch chosen by policy (vswitch.go).

import (
	"slices"

	"github.com/enidnet/enid/observed"
)

// grow plans n more units: first on attached ENIs with room, then ENIs
// attaching, then owned Available ENIs (adopted), then new ENIs. It returns
// the capacity sources in that order and, when n cannot be met, the status
// for pods left over.
//
// Rounding up to the batch applies to attached ENIs; new ENIs are made only
// for what is needed (rounded up to the batch within the new ENI), so a
// rounding surplus never costs an ENI.
// createNeeds is how many IPv4 addresses of its vSwitch a new ENI needs at
// the least: its primary, plus one for a pod in shared IPv4 mode.
func (b *builder) createNeeds(vswID string) int {
	if b.excl || !b.v4 {
		return 1
	}
	if prefix, _ := b.createKind(vswID); prefix {
		return 1 + prefixSize
	}
	return 2
}

// limitOrVSwitch is the status for pods left over when no ENI can be
// added: the node's limit only when its ENIs hold all they can. An attached
// ENI with room left after this plan's assignments had a vSwitch with no
// address to give (short: growOn said so; room is counted in the kind the
// vSwitch grows by now, which prefer-prefix turns to single addresses once
// this plan's prefix leaves fewer than 16); an attaching ENI with room
// will take more once it is attached (so will one this plan adopts).
// Either way the pods wait. So do they when an ENI this plan creates got
// fewer units than it can hold (newRoomIn names its vSwitch, "" for
// none): its vSwitch had no more to give, and the ENI takes more once it
// is attached if the vSwitch frees any (issue 28 item 12: the new ENI took
// the last slot and the pods left over failed with ip-limit).
func (b *builder) limitOrVSwitch(blocked *PodStatus, added map[*eniState]int, short map[*eniState]bool, adopted []*observed.ENI, newRoomIn string) *PodStatus {
	if b.excl || !b.v4 {
		return blocked
	}
	slotCap := b.slotCap()
	for _, e := range b.usable {
		if _, ok := b.growKind(e.eni.VSwitchID); !ok && b.freeV4Slots(e.eni) > 0 {
			return b.fragmentedStatus(e.eni.VSwitchID)
		}
		if short[e] || b.roomOn(e.eni) > added[e] {
			if text := b.tooFewText(e.eni.VSwitchID, prefixSize, "a /28 prefix"); text != "" {
				return &PodStatus{Phase: PhasePending, ReasonCode: ReasonVSwitchExhausted,
					Reason: "the attached ENIs' " + text + ", and no ENI can be added; waiting for addresses to free up"}
			}
			return &PodStatus{Phase: PhasePending, ReasonCode: ReasonVSwitchExhausted,
				Reason: "the attached ENIs' vSwitch has no free address and no ENI can be added; waiting for addresses to free up"}
		}
	}
	for _, e := range append(slices.Clone(b.inflight), adopted...) {
		if b.units(e) < slotCap {
			return &PodStatus{Phase: PhasePending, ReasonCode: ReasonWaitingForAttach,
				Reason: "waiting for ENI " + e.ID + " to attach and take more addresses"}
		}
	}
	if newRoomIn != "" {
		if v, ok := b.vsw[newRoomIn]; ok && v.AvailableIPs > 0 {
			return &PodStatus{Phase: PhasePending, ReasonCode: ReasonWaitingForAttach,
				Reason: "waiting for a new ENI to attach and take more addresses"}
		}
		return &PodStatus{Phase: PhasePending, ReasonCode: ReasonVSwitchExhausted,
			Reason: "vSwitch " + newRoomIn + " gave a new ENI its last free addresses and no ENI can be added; waiting for addresses to free up"}
	}
	return blocked
}

func (b *builder) grow(need, n, batch int, why Reason) ([]source, *PodStatus) {
	var out []source
	slotCap := b.slotCap()
	added := map[*eniState]int{}  // units this plan assigns, by ENI
	short := map[*eniState]bool{} // ENIs their vSwitch could not fill
	for _, e := range b.fillOrder() {
		if n == 0 || b.excl {
			break
		}
		// Within its free slots, by the kind its vSwitch grows by, never
		// more than the vSwitch has left (growOn).
		k, s := b.growOn(e, n, why)
		if s {
			short[e] = true
		}
		if k <= 0 {
			continue
		}
		added[e] += k
		n = max(0, n-k)
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
	planned := 0                // ENIs this plan attaches
	creates := 0                // ENIs this plan creates
	var adopted []*observed.ENI // owned Available ENIs this plan attaches
	newRoomIn := ""             // vSwitch of an ENI this plan creates with room left
	for len(b.avail) > 0 && n > 0 {
		i := b.adoptable()
		if i < 0 {
			break
		}
		if blocked := b.eniLimit(planned); blocked != nil {
			// It stays in b.avail: leaks() deletes it after the grace
			// period if no slot frees for it.
			return out, b.limitOrVSwitch(blocked, added, short, adopted, newRoomIn)
		}
		e := b.avail[i]
		b.avail = slices.Delete(b.avail, i, i+1)
		adopted = append(adopted, e)
		// The next pass configures it, once its device index is known.
		b.add(Action{Kind: AttachENI, Target: e.ID, Reason: Reason{ReasonAdoptENI, "owned ENI left Available; " + why.Text},
			ENIID: e.ID, MAC: e.MAC, InstanceID: b.o.Instance.ID, ClientToken: token("attach", itoa(b.mem.Epoch), b.o.Instance.ID, e.ID)})
		planned++
		k := min(n, max(1, b.units(e)))
		n -= k
		out = append(out, source{k, ReasonWaitingForAttach, "waiting for ENI " + e.ID + " to attach"})
	}
	for n > 0 {
		if refused := b.refusedStatus(); refused != nil {
			return out, refused
		}
		if blocked := b.eniLimit(planned); blocked != nil {
			return out, b.limitOrVSwitch(blocked, added, short, adopted, newRoomIn)
		}
		if slotCap == 0 {
			return out, &PodStatus{Phase: PhaseFailed, ReasonCode: ReasonConfigInvalid, Reason: "instance limits unknown or zero addresses per ENI"}
		}
		v, pick, blocked := b.pickVSwitch(creates)
		if blocked != nil {
			return out, blocked
		}
		// The create says which vSwitch it took and why (enid plan).
		create, k := b.createENI(v, b.createUnits(v, n, batch, slotCap), creates, Reason{why.Code, why.Text + "; " + pick})
		creates++
		att := b.add(Action{Kind: AttachENI, Target: "new#" + itoa(create), Reason: why, DependsOn: []int{create},
			ENIRef: create + 1, InstanceID: b.o.Instance.ID,
			ClientToken: token("attach", itoa(b.mem.Epoch), b.o.Instance.ID, b.plan.Actions[create].ClientToken)})
		b.configureNew("", create+1, v.ID, att)
		planned++
		n = max(0, n-k)
		if k < slotCap {
			newRoomIn = v.ID
		}
		// Later ENIs of this plan see what this one takes.
		c := b.plan.Actions[create]
		used := 1 + c.IPv4Count + prefixSize*c.IPv4PrefixCount // the primary and the pods
		v.AvailableIPs -= used
		b.vsw[v.ID] = v
		out = append(out, source{k, ReasonWaitingForAttach, "waiting for a new ENI to attach"})
	}
	return out, nil
}

// createUnits is how many units a new ENI in v is created with for n
// pods, batch and slotCap as grow has them.
func (b *builder) createUnits(v observed.VSwitch, n, batch, slotCap int) int {
	// The new ENI's own primary address comes from the vSwitch too.
	k := min(roundUp(n, batch), slotCap, maxIPsAtCreate, v.AvailableIPs-1)
	if b.v6 && !b.v4 || b.excl {
		return min(n, slotCap)
	}
	if prefix, _ := b.createKind(v.ID); !prefix {
		// Single addresses, one slot each (slotCap counts prefixes when
		// the mode asks for them and this vSwitch refused one).
		return min(k, b.o.Instance.Limits.IPv4PerENI-1)
	}
	// Whole prefixes: the slots, ten per call, what the vSwitch has.
	p := min(ceilDiv(n, prefixSize), b.o.Instance.Limits.IPv4PerENI-1, maxPrefixesPerCall, (v.AvailableIPs-1)/prefixSize)
	k = min(p*prefixSize, slotCap)
	if b.v6 {
		// IPv6 stays single addresses: as many as needed, by batch.
		k = min(k, roundUp(n, batch), maxIPsAtCreate)
	}
	return k
}

// assign plans AssignIPs on e so that it holds target units, at most ten
// addresses per call, calls on one ENI chained (ECS refuses concurrent
// changes to one ENI).
//
// With prefix, IPv4 comes as /28 prefixes (at most ten per call), rounded
// up to whole prefixes. It returns the IPv4 addresses the calls take from
// the vSwitch.
func (b *builder) assign(e *eniState, target int, prefix bool, why Reason) (taken4 int) {
	prev := e.lastCall - 1
	for _, fam := range []int{4, 6} {
		var have int
		switch {
		case fam == 4 && b.v4:
			have = v4Addrs(e.eni)
		case fam == 6 && b.v6:
			have = len(e.eni.IPv6)
		default:
			continue
		}
		for seq := 0; have < target; seq++ {
			k := min(target-have, maxAssignPerCall)
			famKey := itoa(fam)
			if fam == 4 && prefix {
				k, famKey = min(ceilDiv(target-have, prefixSize), maxPrefixesPerCall), "4prefix"
			}
			tok, _, _ := b.clientToken(false, "assign", itoa(b.mem.Epoch), e.eni.ID, famKey, itoa(have), itoa(k))
			a := Action{Kind: AssignIPs, Target: e.eni.ID, Reason: why, ENIID: e.eni.ID, ClientToken: tok}
			switch {
			case fam == 4 && prefix:
				a.IPv4PrefixCount = k
				k *= prefixSize
			case fam == 4:
				a.IPv4Count = k
			default:
				a.IPv6Count = k
			}
			if fam == 4 {
				taken4 += k
			}
			if prev >= 0 {
				a.DependsOn = []int{prev}
			}
			prev = b.add(a)
			have += k
		}
	}
	e.lastCall = prev + 1
	return taken4
}

// eniLimit returns the status for pods that cannot be served because no
// further ENI may be attached, or nil when one may.
func (b *builder) eniLimit(planned int) *PodStatus {
	l := b.o.Instance.Limits.ENIs
	if st := b.setCap(planned); st != nil {
		return st
	}
	// The ENIs of the other security-group sets take slots too (sgset.go).
	planned += b.plannedENIs
	mine := len(b.usable) + len(b.inflight) + planned + b.otherENIs
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

// liftExhausted drops the exhausted mark of a vSwitch that shows more free
// addresses than it did in the first pass after the mark: addresses were
// released, so the pods waiting need not sit out the rest of the mark
// (10 minutes). The first count is kept in memory; a count that never
// rises leaves the mark to expire.
func (b *builder) liftExhausted() {
	for id := range b.mem.Exhausted {
		v, ok := b.vsw[id]
		if !ok {
			continue
		}
		free, seen := b.mem.ExhaustedFree[id]
		switch {
		case !seen:
			if b.mem.ExhaustedFree == nil {
				b.mem.ExhaustedFree = map[string]int{}
			}
			b.mem.ExhaustedFree[id] = v.AvailableIPs
		case v.AvailableIPs > free:
			delete(b.mem.Exhausted, id)
			delete(b.mem.ExhaustedFree, id)
		}
	}
}

// clientToken derives the ClientToken of a call from its identity (kind
// and parts) and the attempt count memory keeps for it (Memory.Tokens):
// the same identity gives the same token until the executor reports the
// token failed definitely, then a new one. A CreateENI (create) always
// gets a record, whose Since fixes the created-at tag across resends.
func (b *builder) clientToken(create bool, kind string, parts ...string) (tok, base string, rec TokenRecord) {
	base = token(kind, parts...)
	rec, ok := b.mem.Tokens[base]
	if !ok && !create {
		return base, base, TokenRecord{Token: base}
	}
	if !ok {
		rec = TokenRecord{Since: b.now, Epoch: b.mem.Epoch}
	}
	rec.Token = base
	if rec.Attempt > 0 {
		rec.Token = token(kind, append(parts, "attempt", itoa(rec.Attempt))...)
	}
	if rec.Since.IsZero() && create {
		rec.Since = b.now
	}
	if b.mem.Tokens == nil {
		b.mem.Tokens = map[string]TokenRecord{}
	}
	b.mem.Tokens[base] = rec
	return rec.Token, base, rec
}

// createENI plans CreateENI with the first k units in the call. Its token
// names the instance, the vSwitch, the owned ENIs seen plus the creates
// before it in this plan, and the release epoch: stable when a pass is
// replayed after a crash, new for every ENI the node really needs.
//
// It returns the action's ID and the units the create really asks for: a
// create whose token was sent before keeps the counts of then.
func (b *builder) createENI(v observed.VSwitch, k, nth int, why Reason) (int, int) {
	tags := map[string]string{}
	for key, val := range b.cfg.ENI.Tags {
		tags[key] = val
	}
	tags[observed.TagManagedBy] = observed.TagManagedByValue
	tags[observed.TagOwner] = b.o.Instance.ID
	tok, base, rec := b.clientToken(true, "create", b.createParts(v.ID, nth)...)
	// The tag carries when the call was first planned, not b.now: a resend
	// with the same token must send the same parameters.
	tags[observed.TagCreatedAt] = rec.Since.UTC().Format(rfc3339)
	a := Action{Kind: CreateENI, Target: "new", Reason: why, VSwitchID: v.ID,
		SecurityGroups: slices.Clone(b.cfg.ENI.SecurityGroups), Tags: tags, ClientToken: tok}
	if b.v4 && !b.excl {
		if prefix, _ := b.createKind(v.ID); prefix {
			a.IPv4PrefixCount = ceilDiv(k, prefixSize)
		} else {
			a.IPv4Count = k
		}
	}
	if b.v6 {
		// The rest of the ENI's IPv6 is assigned once it is attached.
		a.IPv6Count = min(k, maxIPv6AtCreate)
	}
	if rec.Sent {
		// The same call again: the same parameters, or ECS refuses it.
		a.IPv4Count, a.IPv6Count, a.IPv4PrefixCount = rec.IPv4, rec.IPv6, rec.IPv4Prefixes
		k = max(a.IPv4Count, a.IPv6Count, 1)
		if a.IPv4PrefixCount > 0 {
			k = a.IPv4PrefixCount * prefixSize
			if b.v6 {
				k = min(k, a.IPv6Count)
			}
		}
	} else {
		rec.IPv4, rec.IPv6, rec.IPv4Prefixes = a.IPv4Count, a.IPv6Count, a.IPv4PrefixCount
		b.mem.Tokens[base] = rec
	}
	id := b.add(a)
	b.plan.Actions[id].Target = "new#" + itoa(id)
	return id, k
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
		a.GatewayV6 = v.GatewayV6()
	}
	b.add(a)
}
