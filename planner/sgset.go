package planner

// This file plans security-group sets (docs/design.md, "Security-group
// sets"): one pool per distinct set of security groups on the node. A pod
// asks for a set (desired.Config.SetNameFor); an ENI serves the set equal
// to its groups; a pod is placed only on an ENI of its set. The pool code
// (pool.go, grow.go, release.go) plans one pool over the builder's ENIs
// and config: eachSet narrows the builder to one set at a time (its ENIs,
// its pool knobs, its groups and tag for new ENIs) and runs it per set.
//
// An ENI whose set was given new groups by the config (its tag names the
// set, its groups are the old ones) is moved to them in place (UpdateENI)
// when no pod on it asks for other groups. When the instance has no ENI
// slot left for a set whose pods wait, an empty ENI of another set is
// released to make room.

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
)

// sgSet is one security-group set during planning.
type sgSet struct {
	key    string   // the sorted groups joined by ","
	groups []string // sorted
	// name is desired.DefaultSetName, a configured set's name, or "" (a
	// set only annotations name).
	name     string
	pool     poolPolicy
	tuned    bool // pool is the config's or the set's own
	maxENIs  int  // the most ENIs the set may have here (0: no cap of its own)
	usable   []*eniState
	inflight []*observed.ENI
	avail    []*observed.ENI
	pods     int // live pods asking for it
	waiting  int // of them, waiting for an address
	needSlot bool
	summary  PoolSummary
}

func (s *sgSet) isDefault() bool { return s.name == desired.DefaultSetName }

// tagValue is the value of observed.TagSecurityGroupSet on the set's ENIs.
func (s *sgSet) tagValue() string {
	if s.name == "" {
		return desired.AnnotationSetName
	}
	return s.name
}

// label names the set for people: "web (sg-a,sg-b)".
func (s *sgSet) label() string {
	if s.name == "" {
		return s.key
	}
	return s.name + " (" + s.key + ")"
}

func setKey(groups []string) string { return strings.Join(groups, ",") }

// sortedKey returns the groups sorted (a copy when they were not) and
// their key.
func sortedKey(groups []string) ([]string, string) {
	if !slices.IsSorted(groups) {
		groups = slices.Sorted(slices.Values(groups))
	}
	return groups, setKey(groups)
}

// set returns the set of the given sorted groups, made on first use.
func (b *builder) set(groups []string, key string) *sgSet {
	if s := b.setByKey[key]; s != nil {
		return s
	}
	s := &sgSet{key: key, groups: groups, name: b.cfg.SetNameOf(groups)}
	pp := b.policy() // the config's pool, sanitised
	cs, named := b.cfg.SecurityGroupSet(s.name)
	switch {
	case s.isDefault():
		s.pool, s.tuned = pp, true
	case named && cs.Pool != nil:
		s.tuned = true
		s.pool = poolPolicy{minIdle: max(0, cs.Pool.MinIdle), maxIdle: max(0, cs.Pool.MaxIdle, cs.Pool.MinIdle),
			minTotal: max(0, cs.Pool.MinTotal), batch: pp.batch}
		if cs.Pool.Batch > 0 {
			s.pool.batch = cs.Pool.Batch
		}
	default:
		// An untuned set keeps no minimum and at most one batch idle
		// while it has pods (their churn reuses addresses), none once they
		// are gone (eachSet): then its addresses go after the release
		// delay, and its empty ENIs with them.
		s.pool = poolPolicy{maxIdle: min(pp.batch, pp.maxIdle), batch: pp.batch}
	}
	if !s.isDefault() {
		s.maxENIs = b.cfg.ENI.MaxENIsPerSet
		if named && cs.MaxENIs > 0 {
			s.maxENIs = cs.MaxENIs
		}
	}
	if b.setByKey == nil {
		b.setByKey = map[string]*sgSet{}
	}
	b.setByKey[key] = s
	b.sets = append(b.sets, s)
	return s
}

// defaultSet is the set of eni.securityGroups.
func (b *builder) defaultSet() *sgSet {
	g, k := sortedKey(b.cfg.ENI.SecurityGroups)
	return b.set(g, k)
}

// podSets gives every live pod its set; a pod whose annotation is invalid
// fails (no other pod is affected).
func (b *builder) podSets() {
	def := b.defaultSet()
	// A configured set whose pool keeps a minimum exists before its first
	// pod or ENI does, so its minIdle and minTotal are kept warm as they
	// document (issue 28 item 4); a set without one appears with its pods.
	for _, cs := range b.cfg.ENI.SecurityGroupSets {
		if cs.Pool != nil && (cs.Pool.MinIdle > 0 || cs.Pool.MinTotal > 0) {
			b.set(sortedKey(cs.SecurityGroups))
		}
	}
	for _, p := range b.pods {
		name, groups, err := b.cfg.SetNameFor(*p.entry)
		switch {
		case err != nil:
			p.status = b.failStatus(p, ReasonSecurityGroupsInvalid, err.Error())
			p.set = def // holds nothing new; counted nowhere
			continue
		case name == desired.DefaultSetName:
			p.set = def
		case groups == nil:
			cs, _ := b.cfg.SecurityGroupSet(name)
			p.set = b.set(sortedKey(cs.SecurityGroups))
		default:
			p.set = b.set(groups, setKey(groups))
		}
		p.set.pods++
	}
}

// target is the set an owned ENI's tag names, as groups: the default
// set for "default" or no tag (ENIs older than sets were made with the
// default groups), a configured set by name; else the ENI's own groups.
func (b *builder) target(e *observed.ENI) ([]string, string) {
	name, ok := e.Tags[observed.TagSecurityGroupSet]
	if !ok {
		name = desired.DefaultSetName
	}
	if name == desired.DefaultSetName && len(b.cfg.ENI.SecurityGroups) > 0 {
		return sortedKey(b.cfg.ENI.SecurityGroups)
	}
	if cs, ok := b.cfg.SecurityGroupSet(name); ok && name != desired.AnnotationSetName {
		return sortedKey(cs.SecurityGroups)
	}
	if name == desired.DefaultSetName {
		// No default groups (an invalid config): the ENI stays the
		// default's as it is.
		return b.defaultSet().groups, b.defaultSet().key
	}
	return sortedKey(e.SecurityGroups)
}

// eniTargets notes each usable ENI's groups and the groups of the set its
// tag names.
func (b *builder) eniTargets() {
	for _, e := range b.usable {
		e.own, e.ownKey = sortedKey(e.eni.SecurityGroups)
		e.target, e.targetKey = b.target(e.eni)
	}
}

// servesTargetAsIs reports whether e serves the set its tag names with the
// groups it has, never moved (eniSets): when there are no groups to move
// it to (no default groups, an invalid config that was kept) or the
// observation gave none of its own (ECS gives every ENI at least one).
func (e *eniState) servesTargetAsIs() bool { return len(e.target) == 0 || len(e.own) == 0 }

// stickyFits reports whether the sticky pod p may have its reservation r
// back on ENI e: only when e serves the pod's set as it is (it has the
// pod's groups, or serves its tag's set unmoved: servesTargetAsIs, as
// eniSets decides). When e is about to move to them (its set's new
// groups), p waits a pass and its addresses stay held. When e serves
// another set (the pod came back asking for other groups), the reservation
// ends and p is bound anew in its set.
func (b *builder) stickyFits(p *podState, e *eniState, r Reservation) bool {
	if p.set.key == e.targetKey && e.servesTargetAsIs() {
		return true
	}
	switch p.set.key {
	case e.ownKey:
		return true
	case e.targetKey:
		if until, ok := b.refused(e.targetKey); ok && b.complete {
			// The move was refused (eniSets plans none before the
			// refusal ends): the reservation stays held, and the pod
			// fails with the refusal instead of waiting for a move that
			// does not come; kubelet's retry gets it once the groups
			// are fixed (back, the ENI has them; moved, after the move).
			p.status = b.failStatus(p, ReasonSecurityGroupsRefused, "sticky address "+r.IPv4.String()+" is on "+e.eni.ID+
				", which is to move to security groups "+e.targetKey+", but the cloud refused them (`enid status` shows the cloud's error); "+
				"they are tried again after "+until.UTC().Format(rfc3339))
			if h := b.holderOf(r.IPv4, r.IPv6); h == nil {
				b.hold(r.IPv4, r.IPv6, &holder{kind: holdSticky})
				e.held++
			}
			return false
		}
		if b.moveBlocked(e) {
			// The ENI stays on its groups while a pod on it asks for
			// them (eniSets): waiting for the move could be forever.
			delete(b.mem.Sticky, p.sticky)
			return false
		}
		p.status = b.waitStatus(p, ReasonWaitingForIPs, "sticky address "+r.IPv4.String()+" is on "+e.eni.ID+
			", which moves to security groups "+e.targetKey+" first")
		if h := b.holderOf(r.IPv4, r.IPv6); h == nil {
			b.hold(r.IPv4, r.IPv6, &holder{kind: holdSticky})
			e.held++
		}
	default:
		delete(b.mem.Sticky, p.sticky)
	}
	return false
}

// moveBlocked reports whether a live pod bound so far on e asks for other
// groups than those of the set e's tag names: eniSets then keeps e on its
// groups. It is asked per sticky pod while bindShared restores them: it
// scans the pods once and then learns of the bindings restoreSticky makes
// (the only ones made meanwhile; b.blocked). A scan per sticky pod made a
// burst's pass quadratic (issue 24: 127 us of a 1,000-pod pass).
func (b *builder) moveBlocked(e *eniState) bool {
	if b.blocked == nil {
		b.blocked = map[*eniState]bool{}
		for _, q := range b.pods {
			if q.eni != nil && q.status == nil && q.set.key != q.eni.targetKey {
				b.blocked[q.eni] = true
			}
		}
	}
	return b.blocked[e]
}

// eniSets puts every owned ENI in its set. A usable ENI whose tag names a
// set with other groups than it has is moved to them (UpdateENI) when the
// observation is complete and no live pod on it asks for other groups;
// until then it serves the set of the groups it has. While the cloud's
// refusal of the new groups holds, no UpdateENI is planned (the refusal
// paces the retries) and the ENI is in its tag's set but stuck: no pod is
// newly placed on it, and its addresses and pods stay as they are (in the
// set of its own groups, which no pod may ask for, its pool would be
// released as idle).
func (b *builder) eniSets() {
	type want struct {
		groups []string
		key    string
	}
	// conflict[e] is a live pod on e asking for another set than the one
	// e's tag names.
	conflict := map[*eniState]*podState{}
	for _, p := range b.pods {
		// A pod with an invalid annotation asks for nothing.
		if p.bound() && p.status == nil && p.set.key != p.eni.targetKey && conflict[p.eni] == nil {
			conflict[p.eni] = p
		}
	}
	for _, e := range b.usable {
		own, ownKey := e.own, e.ownKey
		t := want{e.target, e.targetKey}
		in := want{own, ownKey} // the set the ENI serves in this pass
		switch {
		case t.key == ownKey:
		case e.servesTargetAsIs():
			// No default groups (an invalid config that was kept), or an
			// observation without the ENI's groups (ECS gives every ENI
			// at least one): the ENI serves its tag's set as it is
			// (stickyFits agrees).
			in = t
		case !b.complete:
			// Only a complete observation plans UpdateENI.
		case conflict[e] != nil:
			p := conflict[e]
			b.plan.Problems = append(b.plan.Problems, "ENI "+e.eni.ID+" keeps security groups "+ownKey+" (its set now has "+t.key+
				"): pod "+p.key.String()+" on it asks for "+p.set.key+"; it is moved once no such pod is on it")
		case b.refusedKey(t.key):
			in, e.stuck = t, true
		default:
			in = t
			e.updateRef = 1 + b.add(Action{Kind: UpdateENI, Target: e.eni.ID, ENIID: e.eni.ID,
				SecurityGroups: slices.Clone(t.groups),
				Reason:         Reason{ReasonSecurityGroupsChanged, "set " + b.set(t.groups, t.key).tagValue() + ": " + ownKey + " → " + t.key}})
		}
		s := b.set(in.groups, in.key)
		e.set = s
		s.usable = append(s.usable, e)
	}
	for _, p := range b.pods {
		if p.bound() && p.status == nil && p.set != p.eni.set {
			b.plan.Problems = append(b.plan.Problems, "pod "+p.key.String()+" asks for security groups "+p.set.key+" but runs on "+
				p.eni.eni.ID+" with "+p.eni.set.key+": it keeps its address, and gets its set when it is recreated")
		}
	}
	// An attaching or Available ENI counts for (is adopted by) the set its
	// tag names, as a usable one: after a change of the set's groups it
	// is moved to them once attached (above, next pass). By its current
	// groups it would count for no set with pods: an extra create, and the
	// Available ENI deleted after the leak grace instead of adopted.
	for _, e := range b.inflight {
		s := b.set(b.target(e))
		s.inflight = append(s.inflight, e)
	}
	for _, e := range b.avail {
		s := b.set(b.target(e))
		s.avail = append(s.avail, e)
	}
	// The default set first (its pool is the config's), then by groups.
	def := b.defaultSet()
	slices.SortStableFunc(b.sets, func(x, y *sgSet) int {
		if x == def || y == def {
			return cmp.Compare(boolInt(y == def), boolInt(x == def))
		}
		return strings.Compare(x.key, y.key)
	})
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// narrowed is what eachSet swaps while the pool code plans one set.
type narrowed struct {
	usable            []*eniState
	inflight, avail   []*observed.ENI
	pool              desired.Pool
	groups            []string
	tags              map[string]string
	idleAboveMaxSince time.Time
}

// eachSet runs f (setPool) once per security-group set, with the builder
// narrowed to that set, then releases empty ENIs of other sets for sets
// whose pods wait for an ENI slot, and sums the sets' pools.
func (b *builder) eachSet(f func(cooling int)) {
	saved := narrowed{usable: b.usable, inflight: b.inflight, avail: b.avail, pool: b.cfg.Pool,
		groups: b.cfg.ENI.SecurityGroups, tags: b.cfg.ENI.Tags, idleAboveMaxSince: b.mem.IdleAboveMaxSince}
	setIdle := b.mem.SetIdleAboveMaxSince
	b.mem.SetIdleAboveMaxSince = nil
	multi := len(b.sets) > 1 || !b.sets[0].isDefault()
	for _, s := range b.setOrder() {
		b.narrowTo(s, &saved, setIdle)
		b.planSet(s, f, multi)
		s.avail = b.avail
		s.summary = b.plan.Pool
		if !s.isDefault() && !b.mem.IdleAboveMaxSince.IsZero() {
			if b.mem.SetIdleAboveMaxSince == nil {
				b.mem.SetIdleAboveMaxSince = map[string]time.Time{}
			}
			b.mem.SetIdleAboveMaxSince[s.key] = b.mem.IdleAboveMaxSince
		}
		if s.isDefault() {
			saved.idleAboveMaxSince = b.mem.IdleAboveMaxSince
		}
	}
	b.widen(saved)
	b.afterMoves()
	b.reclaimSlots()
	b.summarise(multi)
}

// setOrder is the order sets are planned in: sets with pods to place
// first, as a set's optional growth (its minIdle, its minTotal) must not
// take the ENI slot another set's pods wait for, which would only be
// released again (reclaimSlots).
func (b *builder) setOrder() []*sgSet {
	demand := map[*sgSet]bool{}
	for _, p := range b.pods {
		if !p.bound() && p.status == nil {
			demand[p.set] = true
		}
	}
	order := slices.Clone(b.sets)
	slices.SortStableFunc(order, func(x, y *sgSet) int { return cmp.Compare(boolInt(demand[y]), boolInt(demand[x])) })
	return order
}

// narrowTo narrows the builder to set s: its ENIs, its pool knobs, its
// groups and tag for new ENIs, its release-delay stamp.
func (b *builder) narrowTo(s *sgSet, saved *narrowed, setIdle map[string]time.Time) {
	b.cur = s
	b.usable, b.inflight, b.avail = s.usable, s.inflight, s.avail
	b.cfg.Pool.MinIdle, b.cfg.Pool.MaxIdle, b.cfg.Pool.MinTotal, b.cfg.Pool.Batch = s.pool.minIdle, s.pool.maxIdle, s.pool.minTotal, s.pool.batch
	if !s.tuned && s.pods == 0 {
		b.cfg.Pool.MaxIdle = 0
	}
	b.cfg.ENI.SecurityGroups = s.groups
	b.cfg.ENI.Tags = make(map[string]string, len(saved.tags)+1)
	for k, v := range saved.tags {
		b.cfg.ENI.Tags[k] = v
	}
	b.cfg.ENI.Tags[observed.TagSecurityGroupSet] = s.tagValue()
	b.mem.IdleAboveMaxSince = saved.idleAboveMaxSince
	if !s.isDefault() {
		b.mem.IdleAboveMaxSince = setIdle[s.key]
	}
	b.otherENIs = b.ownedAttached() - len(s.usable) - len(s.inflight)
}

// planSet runs f for the set the builder is narrowed to, counts the pods
// it leaves waiting (naming the set in their reason when the node has
// several) and orders the set's address calls after an ENI's move.
func (b *builder) planSet(s *sgSet, f func(cooling int), multi bool) {
	cooling := 0
	for _, e := range s.usable {
		cooling += e.cooling
	}
	// The pods f leaves waiting get their status in f; mark them.
	var fresh []*podState
	for _, p := range b.pods {
		if p.set == s && !p.bound() && p.status == nil {
			fresh = append(fresh, p)
		}
	}
	first := len(b.plan.Actions)
	f(cooling)
	for _, p := range fresh {
		if p.bound() {
			continue
		}
		s.waiting++
		if multi && p.status != nil && p.status.Phase == PhasePending {
			p.status.Reason += " (security groups " + s.label() + ")"
		}
	}
	for i := first; i < len(b.plan.Actions); i++ {
		a := &b.plan.Actions[i]
		switch a.Kind {
		case AttachENI:
			b.plannedENIs++ // a slot, created or adopted
		case CreateENI:
			b.plannedCreates++
		case AssignIPs, UnassignIPs, DetachENI:
			// ECS refuses concurrent changes to one ENI: after its move.
			if e := b.byID[a.ENIID]; e != nil && e.updateRef > 0 && !slices.Contains(a.DependsOn, e.updateRef-1) {
				a.DependsOn = append(a.DependsOn, e.updateRef-1)
				slices.Sort(a.DependsOn)
			}
		}
	}
}

// widen undoes narrowTo after the last set: the builder is the node's
// again, and the owned Available ENIs are those no set adopted.
func (b *builder) widen(saved narrowed) {
	b.cur = nil
	b.usable, b.inflight = saved.usable, saved.inflight
	b.avail = slices.DeleteFunc(saved.avail, func(e *observed.ENI) bool {
		return !slices.ContainsFunc(b.sets, func(s *sgSet) bool { return slices.Contains(s.avail, e) })
	})
	b.cfg.Pool, b.cfg.ENI.SecurityGroups, b.cfg.ENI.Tags = saved.pool, saved.groups, saved.tags
	b.mem.IdleAboveMaxSince = saved.idleAboveMaxSince
	b.otherENIs, b.plannedENIs, b.plannedCreates = 0, 0, 0
}

// afterMoves makes a pod newly placed on an ENI moving to its set start
// after the move, which it needs now (under throttling, urgent actions go
// first). A pod claimed from kernel or published state runs already: its
// setup (a repair) does not wait for the cloud.
func (b *builder) afterMoves() {
	for _, p := range b.pods {
		if p.bound() && p.eni.updateRef > 0 && (p.source == ReasonNewBinding || p.source == ReasonStickyRestore) {
			p.deps = append(p.deps, p.eni.updateRef-1)
			b.plan.Actions[p.eni.updateRef-1].Urgent = true
		}
	}
}

// ownedAttached counts the owned ENIs attached or attaching here.
func (b *builder) ownedAttached() int {
	n := 0
	for _, s := range b.sets {
		n += len(s.usable) + len(s.inflight)
	}
	return n
}

// setCap returns the status for pods of the set the builder is narrowed
// to when the set has its maximum of ENIs (with planned more in this
// plan), or nil.
func (b *builder) setCap(planned int) *PodStatus {
	s := b.cur
	if s == nil || s.maxENIs <= 0 || len(b.usable)+len(b.inflight)+planned < s.maxENIs {
		return nil
	}
	return &PodStatus{Phase: PhaseFailed, ReasonCode: ReasonSGSetENILimit,
		Reason: "security-group set " + s.label() + " has its maximum of " + itoa(s.maxENIs) + " ENIs (eni.maxENIsPerSet or the set's maxENIs) and every address on them is in use"}
}

// refusedStatus returns the status for pods of the set the builder is
// narrowed to while the cloud's refusal of its groups holds
// (Memory.RefusedGroups), or nil. No CreateENI is planned then: retried
// every pass, it would hold an ENI slot (counted in this plan) that
// another set's pods may need, for an ENI that cannot be made.
func (b *builder) refusedStatus() *PodStatus {
	_, key := sortedKey(b.cfg.ENI.SecurityGroups)
	until, ok := b.refused(key)
	if !ok {
		return nil
	}
	return &PodStatus{Phase: PhaseFailed, ReasonCode: ReasonSecurityGroupsRefused,
		Reason: "the cloud refused security groups " + key + " for an ENI (a group that does not exist, is of another VPC, or is full; " +
			"`enid status` shows the cloud's error); they are tried again after " + until.UTC().Format(rfc3339)}
}

// refused reports whether the cloud's refusal of the groups key holds
// now, and until when.
func (b *builder) refused(key string) (time.Time, bool) {
	until, ok := b.mem.RefusedGroups[key]
	return until, ok && b.now.Before(until)
}

// refusedKey reports whether the cloud's refusal of the groups key holds.
func (b *builder) refusedKey(key string) bool {
	_, ok := b.refused(key)
	return ok
}

// moveRefused reports whether e is to move to groups the cloud refused
// (an UpdateENI or CreateENI of them failed so, eniSets): until it has
// them, no pod is newly placed on it and the pool does not grow on it.
func (b *builder) moveRefused(e *eniState) bool { return e.stuck }

// slotWait turns the status of a set's pods that wait for an ENI no slot
// is left for into sg-set-no-eni-slot when ENIs of other sets hold slots:
// such a pod is served once one of them empties (reclaimSlots), so it
// waits rather than fails.
func (b *builder) slotWait(blocked *PodStatus, waiting int) *PodStatus {
	if blocked == nil || b.cur == nil || b.otherENIs == 0 || waiting == 0 ||
		(blocked.ReasonCode != ReasonInstanceENILimit && blocked.ReasonCode != ReasonIPLimit) {
		return blocked
	}
	b.cur.needSlot = true
	return &PodStatus{Phase: PhasePending, ReasonCode: ReasonSGSetNoENISlot,
		Reason: "no ENI slot left for this set (" + itoa(b.otherENIs) + " ENIs of other sets hold slots); waiting for one of them to empty"}
}

// reclaimSlots releases, for each set whose pods wait for an ENI slot,
// one empty ENI of another set: an ENI with no live, kept, sticky, stale
// or cooling address, of a set with no waiting pod. That set's minIdle
// and minTotal do not keep it: a waiting pod comes before another set's
// warm pool. The next pass creates the waiting set's ENI in the freed
// slot. Nothing is released from an incomplete observation, nor while a
// live pod's address is unseen within UnseenGrace: a describe that lags an
// assign shows that pod's ENI emptier than it is (the pod counts on no
// ENI then), and the release is at once, with no delay to cover the lag.
func (b *builder) reclaimSlots() {
	if !b.destroyOK() || b.unseenInGrace() {
		return
	}
	busy := map[string]bool{} // ENIs this plan acts on already
	for _, a := range b.plan.Actions {
		if a.ENIID != "" {
			busy[a.ENIID] = true
		}
	}
	for _, s := range b.sets {
		if !s.needSlot {
			continue
		}
		var pick *eniState
		for _, t := range b.sets {
			if t == s || t.waiting > 0 {
				continue
			}
			for _, e := range t.usable {
				if e.used == 0 && e.held == 0 && !busy[e.eni.ID] &&
					(pick == nil || e.eni.DeviceIndex > pick.eni.DeviceIndex) {
					pick = e
				}
			}
		}
		if pick == nil {
			continue
		}
		busy[pick.eni.ID] = true
		b.dropENI(pick, Reason{ReasonSGSetSlotReclaim, "set " + s.label() + " waits for an ENI slot; this ENI of set " +
			pick.set.label() + " is empty"})
		for _, p := range b.pods {
			if p.set == s && p.status != nil && p.status.ReasonCode == ReasonSGSetNoENISlot {
				p.status.Reason = "no ENI slot left for this set; releasing the empty ENI " + pick.eni.ID + " of set " +
					pick.set.label() + " to make room (security groups " + s.label() + ")"
			}
		}
	}
}

// unseenInGrace reports whether an address of a live pod that no owned
// ENI shows in this observation is still within UnseenGrace.
func (b *builder) unseenInGrace() bool {
	for ip := range b.unseenNow {
		if since, ok := b.mem.Unseen[ip]; ok && b.now.Sub(since) < UnseenGrace {
			return true
		}
	}
	return false
}

// summarise sums the sets' pools into the plan's, and lists them when
// the node has more than the default set.
func (b *builder) summarise(multi bool) {
	var sum PoolSummary
	for _, s := range b.sets {
		p := s.summary
		sum.Total += p.Total
		sum.Used += p.Used
		sum.Idle += p.Idle
		sum.Cooldown += p.Cooldown
		sum.Sticky += p.Sticky
		sum.Waiting += p.Waiting
		sum.Prefixes += p.Prefixes
		sum.Surplus += p.Surplus
		sum.Expected += p.Expected
		sum.Target += p.Target
		sum.Capacity = p.Capacity
	}
	sum.Target = min(sum.Target, max(sum.Capacity, sum.Total))
	b.plan.Pool = sum
	if !multi {
		return
	}
	for _, s := range b.sets {
		ss := SetSummary{Name: s.name, SecurityGroups: slices.Clone(s.groups), Pods: s.pods, PoolSummary: s.summary}
		for _, e := range s.usable {
			ss.ENIs = append(ss.ENIs, e.eni.ID)
		}
		b.plan.Sets = append(b.plan.Sets, ss)
	}
}

// createParts is the identity of a new ENI's CreateENI token: the
// instance, the vSwitch, the owned ENIs seen (any state) plus the creates
// before it in this plan (of earlier sets: plannedCreates; of this set:
// nth), and the release epoch; a set other than the default adds its
// groups, so two sets never share a token. Adoptions do not count: the
// ENI they attach is among the owned ENIs already.
func (b *builder) createParts(vswID string, nth int) []string {
	parts := []string{itoa(b.mem.Epoch), b.o.Instance.ID, vswID, itoa(b.owned + b.plannedCreates + nth)}
	if b.cur != nil && !b.cur.isDefault() {
		parts = append(parts, b.cur.key)
	}
	return parts
}
