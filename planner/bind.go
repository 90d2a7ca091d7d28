package planner

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"github.com/enidnet/enid/observed"
)

// This file derives bindings (which attachment holds which addresses) from
// the kernel, then the published statuses, then sticky reservations, and
// hands free addresses to the rest. Nothing about bindings is stored
// privately: they are derived again on every pass.

// addrsOn returns the usable ENI holding every address the stack needs
// (ip4 and/or ip6 on the same ENI), or nil.
func (b *builder) addrsOn(ip4, ip6 netip.Addr) *eniState {
	var e *eniState
	if b.v4 {
		if !ip4.IsValid() {
			return nil
		}
		e = b.eniOf(ip4)
		if e == nil {
			return nil
		}
	}
	if b.v6 {
		if !ip6.IsValid() {
			return nil
		}
		e6 := b.eniOf(ip6)
		if e6 == nil || (e != nil && e6 != e) {
			return nil
		}
		e = e6
	}
	return e
}

// addrs returns the addresses of a pair that the stack uses (an array, so
// that the per-pod hot path does not allocate).
func (b *builder) addrs(ip4, ip6 netip.Addr) pairAddrs {
	var out pairAddrs
	if b.v4 && ip4.IsValid() {
		out.a[out.n] = ip4
		out.n++
	}
	if b.v6 && ip6.IsValid() {
		out.a[out.n] = ip6
		out.n++
	}
	return out
}

// pairAddrs holds up to two addresses.
type pairAddrs struct {
	a [2]netip.Addr
	n int
}

func (p *pairAddrs) list() []netip.Addr { return p.a[:p.n] }

// holderOf returns the first holder of any address of the pair.
func (b *builder) holderOf(ip4, ip6 netip.Addr) *holder {
	pa := b.addrs(ip4, ip6)
	for _, a := range pa.list() {
		if s := b.slot(a); s != nil && s.h != nil {
			return s.h
		}
	}
	return nil
}

func (b *builder) hold(ip4, ip6 netip.Addr, h *holder) {
	pa := b.addrs(ip4, ip6)
	for _, a := range pa.list() {
		if s := b.slot(a); s != nil {
			s.h = h
		}
	}
}

// bindShared derives every binding that already exists, in the order of
// docs/plan.md ("Bindings"): the kernel's live and gone state, the
// published statuses of live and gone attachments, sticky reservations of
// live pods, then the reservations of deleted sticky pods.
func (b *builder) bindShared() {
	// Actions are large: room, once, for the teardown and the unpublish
	// of every attachment nobody wants any more.
	b.plan.Actions = slices.Grow(b.plan.Actions, nils(b.kernelPod)+nils(b.pubPod))
	// 1. Live kernel state, then 2. kernel state nobody wants any more.
	for j, pn := range b.kernel {
		if p := b.kernelPod[j]; p != nil && pn.Exclusive == b.excl {
			b.claim(p, pn.IPv4, pn.IPv6, ReasonKernelDiffers)
		}
	}
	for j, pn := range b.kernel {
		if b.kernelPod[j] == nil {
			b.holdGone(pn.Key, pn.IPv4, pn.IPv6)
			b.teardown(pn)
		}
	}
	// 3. Published statuses of live entries, then 4. of gone ones.
	for j, pb := range b.pubs {
		if p := b.pubPod[j]; p != nil && !p.bound() && p.status == nil {
			b.claim(p, pb.IPv4, pb.IPv6, ReasonStatusOutdated)
		}
	}
	for j, pb := range b.pubs {
		if b.pubPod[j] == nil {
			b.holdGone(pb.Key, pb.IPv4, pb.IPv6)
			b.unpublish(pb.Key)
		}
	}
	// 5. Sticky reservations of live entries.
	for _, p := range b.pods {
		if p.sticky != "" && !p.bound() && p.status == nil {
			b.restoreSticky(p)
		}
	}
	b.blocked = nil // moveBlocked's view holds only while they are restored
	// 6. Reservations of deleted sticky pods keep their addresses.
	b.holdDeletedSticky()
	if b.cfg.StickyIPHold <= 0 {
		b.mem.Sticky = nil
	}
}

// restoreSticky binds a live sticky pod to its reservation when the
// addresses are still on an ENI of ours: after the previous pod of its
// name is torn down (it waits for that), never over another holder.
func (b *builder) restoreSticky(p *podState) {
	r, ok := b.mem.Sticky[p.sticky]
	if !ok {
		return
	}
	e := b.addrsOn(r.IPv4, r.IPv6)
	if e == nil {
		if b.complete {
			delete(b.mem.Sticky, p.sticky) // the addresses are gone from our ENIs
		}
		return
	}
	if !b.stickyFits(p, e, r) {
		return
	}
	if b.inDoubt(r.IPv4, r.IPv6) {
		// Which ENI holds it is unknown: set up on the wrong one, the
		// pod would have no network. The cloud's view settles soon.
		p.status = b.waitStatus(p, ReasonWaitingForIPs, "sticky address "+r.IPv4.String()+" is listed on more than one ENI (a describe is stale); waiting for the cloud to list it once")
		return
	}
	h := b.holderOf(r.IPv4, r.IPv6)
	if h != nil && (h.kind == holdStale || h.kind == holdSticky) {
		e.held-- // taken over below
	}
	switch {
	case h == nil:
	case h.kind == holdSticky || (h.kind == holdStale && h.key.String() == r.Key):
		// The previous pod of this name: wait for its teardown.
		if id, ok := b.staleTeardown[h.key]; ok {
			p.deps = append(p.deps, id)
		} else if h.kind == holdStale {
			p.status = b.waitStatus(p, ReasonWaitingForIPs, "waiting for the previous pod "+h.key.String()+" to be torn down")
			return
		}
	default:
		p.status = b.failStatus(p, ReasonAddressConflict, "sticky address "+r.IPv4.String()+" is held by "+h.key.String())
		return
	}
	b.bindTo(p, r.IPv4, r.IPv6, e, ReasonStickyRestore)
	if b.blocked != nil && p.set.key != e.targetKey {
		b.blocked[e] = true // moveBlocked's view follows the binding
	}
}

// holdDeletedSticky holds the addresses of every reservation whose pod is
// gone, until the hold ends (stickyIPHold after the pod went), unless a
// live pod was rebound to them above or someone else holds them.
func (b *builder) holdDeletedSticky() {
	keys := make([]string, 0, len(b.mem.Sticky))
	for k := range b.mem.Sticky {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	alive := b.stickyAlive()
	for _, k := range keys {
		r := b.mem.Sticky[k]
		if r.Key != "" {
			if alive[k] {
				continue
			}
			r.Key = ""
		}
		if r.Until.IsZero() {
			r.Until = b.now.Add(b.cfg.StickyIPHold.D())
		}
		if b.addrsOn(r.IPv4, r.IPv6) == nil {
			if b.complete { // a partial view may just not show the ENI
				delete(b.mem.Sticky, k)
			} else {
				b.mem.Sticky[k] = r
			}
			continue
		}
		b.mem.Sticky[k] = r
		h := b.holderOf(r.IPv4, r.IPv6)
		if h != nil && h.kind != holdStale {
			continue // rebound above, or held by someone else
		}
		b.hold(r.IPv4, r.IPv6, &holder{kind: holdSticky})
		if h == nil {
			b.addrsOn(r.IPv4, r.IPv6).held++
		}
	}
}

// stickyAlive names the sticky identities whose reservation's holder is a
// live pod of that identity. It compares keys with the reservations'
// strings rather than building the pods' (a converged node would make one
// string per sticky pod and pass, only to find it unchanged).
func (b *builder) stickyAlive() map[string]bool {
	var alive map[string]bool
	for _, p := range b.pods {
		if p.sticky == "" { // only sticky pods hold reservations
			continue
		}
		if r, ok := b.mem.Sticky[p.sticky]; ok && keyIs(p.key, r.Key) {
			if alive == nil {
				alive = make(map[string]bool, len(b.mem.Sticky))
			}
			alive[p.sticky] = true
		}
	}
	return alive
}

// nils counts the nil pods of l.
func nils(l []*podState) int {
	n := 0
	for _, p := range l {
		if p == nil {
			n++
		}
	}
	return n
}

// keyIs reports whether s is k.String(), without building it.
func keyIs(k observed.AttachmentKey, s string) bool {
	n := len(k.ContainerID)
	return len(s) == n+1+len(k.IfName) && s[:n] == k.ContainerID && s[n] == '_' && s[n+1:] == k.IfName
}

func (p *podState) bound() bool { return p.eni != nil }

// claim binds p to the pair when the addresses are ours and free; a pair
// held by another attachment fails p (never two pods on one address).
//
// It looks each address up once: this is the per-pod hot path.
func (b *builder) claim(p *podState, ip4, ip6 netip.Addr, src ReasonCode) {
	var s4, s6 *addrRef
	var e4, e6 *eniState
	if b.v4 {
		if s4 = b.slot(ip4); s4 == nil {
			b.unseen(p, ip4, src)
			return // not (or no longer) on an ENI we use: bind anew
		}
		e4 = s4.eni
		if s4.dup {
			e4 = b.dupENI(s4, b.claimHint(p, src))
		}
	}
	if b.v6 {
		if s6 = b.slot(ip6); s6 != nil {
			e6 = s6.eni
			if s6.dup {
				e6 = b.dupENI(s6, b.claimHint(p, src))
			}
		}
		if s6 == nil || (s4 != nil && e4 != e6) {
			if s6 == nil {
				b.unseen(p, ip6, src)
			}
			return
		}
	}
	s, e := s4, e4
	if s == nil {
		s, e = s6, e6
	}
	h := s.h
	if h == nil && s6 != nil {
		h = s6.h
	}
	if h != nil && h.pod != p {
		p.status = b.failStatus(p, ReasonAddressConflict, "address "+s.ip.String()+" is held by "+h.key.String())
		return
	}
	p.ipv4, p.ipv6, p.eni, p.source = netip.Addr{}, netip.Addr{}, e, src
	p.h = holder{key: p.key, kind: holdLive, pod: p}
	if s4 != nil {
		p.ipv4, s4.h = ip4, &p.h
	}
	if s6 != nil {
		p.ipv6, s6.h = ip6, &p.h
	}
	e.used++
}

// claimHint is the ENI p's binding names, for an address listed on more
// than one ENI (dupENI): its kernel state's ENI when claimed from the
// kernel, its published ENI when claimed from its status. Keeping the pod
// where it runs moves nothing while the cloud's view settles.
func (b *builder) claimHint(p *podState, src ReasonCode) *eniState {
	switch {
	case src == ReasonKernelDiffers && p.kn != nil:
		return b.byMAC[p.kn.ENIMAC]
	case src == ReasonStatusOutdated && p.pub != nil:
		return b.byID[p.pub.ENIID]
	}
	return nil
}

// inDoubt reports whether an address of the pair is listed on more than
// one ENI (markDuplicates).
func (b *builder) inDoubt(ip4, ip6 netip.Addr) bool {
	pa := b.addrs(ip4, ip6)
	for _, a := range pa.list() {
		if s := b.slot(a); s != nil && s.dup {
			return true
		}
	}
	return false
}

// unseen handles a live pod whose address in the kernel (src
// ReasonKernelDiffers) is on no owned ENI: within UnseenGrace of first
// seeing that, the pod waits (its kernel state untouched) instead of being
// bound anew, since a describe may not show a recent assign yet; after it,
// the address is taken as gone. Memory.Unseen keeps the first sighting.
func (b *builder) unseen(p *podState, ip netip.Addr, src ReasonCode) {
	if src != ReasonKernelDiffers || !ip.IsValid() || p.status != nil {
		return
	}
	since, ok := b.mem.Unseen[ip]
	if !ok {
		if b.mem.Unseen == nil {
			b.mem.Unseen = map[netip.Addr]time.Time{}
		}
		since = b.now
		b.mem.Unseen[ip] = since
	}
	if b.unseenNow == nil {
		b.unseenNow = map[netip.Addr]bool{}
	}
	b.unseenNow[ip] = true
	if b.now.Sub(since) < UnseenGrace {
		p.status = b.waitStatus(p, ReasonWaitingForIPs, "address "+ip.String()+" is on no owned ENI yet (describes may lag an assign); waiting before binding anew")
	}
}

func (b *builder) bindTo(p *podState, ip4, ip6 netip.Addr, e *eniState, src ReasonCode) {
	if !b.v4 {
		ip4 = netip.Addr{}
	}
	if !b.v6 {
		ip6 = netip.Addr{}
	}
	p.ipv4, p.ipv6, p.eni, p.source = ip4, ip6, e, src
	e.used++
	p.h = holder{key: p.key, kind: holdLive, pod: p}
	b.hold(ip4, ip6, &p.h)
}

// holdGone records addresses held by an attachment that has no entry.
func (b *builder) holdGone(k observed.AttachmentKey, ip4, ip6 netip.Addr) {
	e := b.addrsOn(ip4, ip6)
	if e == nil {
		return
	}
	if h := b.holderOf(ip4, ip6); h != nil {
		return // already held (the kernel record of the same key, or a live pod)
	}
	kind := holdStale
	if b.kept(k) {
		kind = holdKeep // a bad entry or a runtime record without a DEL: never a reason to release
	}
	b.hold(ip4, ip6, &holder{key: k, kind: kind})
	e.held++
	// A sticky pod's address cools down too: if its hold ends before the
	// cooldown does, no other pod may take it early (restoring it to the
	// same pod ignores the cooldown).
	if kind == holdStale && b.cfg.Pool.Cooldown > 0 {
		pa := b.addrs(ip4, ip6)
		for _, a := range pa.list() {
			if b.mem.Cooldowns == nil {
				b.mem.Cooldowns = map[netip.Addr]time.Time{}
			}
			b.mem.Cooldowns[a] = b.now.Add(b.cfg.Pool.Cooldown.D())
		}
	}
}

// computeFree fills each usable ENI's free lists: addresses nobody holds
// and that are not cooling down.
//
// One walk over the address index (sorted, so each ENI's lists come out
// ascending).
func (b *builder) computeFree() (cooling int) {
	type counts struct{ c4, c6 int }
	cool := map[*eniState]*counts{}
	for i := range b.addrIdx {
		r := &b.addrIdx[i]
		is4 := r.ip.Is4()
		if r.h != nil || r.dup || (is4 && !b.v4) || (!is4 && !b.v6) {
			continue // held, in doubt (markDuplicates), or not of the stack
		}
		if len(b.mem.Cooldowns) > 0 {
			if until, ok := b.mem.Cooldowns[r.ip]; ok && b.now.Before(until) {
				c := cool[r.eni]
				if c == nil {
					c = &counts{}
					cool[r.eni] = c
				}
				if is4 {
					c.c4++
				} else {
					c.c6++
				}
				continue
			}
		}
		switch {
		case is4 && b.surplus(r.inPfx):
			r.eni.spare4 = append(r.eni.spare4, r.ip)
		case is4:
			r.eni.free4 = append(r.eni.free4, r.ip)
		default:
			r.eni.free6 = append(r.eni.free6, r.ip)
		}
	}
	for _, e := range b.usable {
		if c := cool[e]; c != nil {
			n := max(c.c4, c.c6)
			e.held += n
			e.cooling = n
			cooling += n
		}
	}
	b.orderFree()
	return cooling
}

// freeSlots is how many pods the ENI can take now.
func (b *builder) freeSlots(e *eniState) int {
	switch {
	case b.v4 && b.v6:
		return min(len(e.free4), len(e.free6))
	case b.v6:
		return len(e.free6)
	}
	return len(e.free4)
}

// units is how many pod address pairs the ENI holds in all.
func (b *builder) units(e *observed.ENI) int {
	if b.excl {
		if b.v6 && len(e.IPv6) == 0 {
			return 0
		}
		return 1
	}
	switch {
	case b.v4 && b.v6:
		return min(v4Addrs(e), len(e.IPv6))
	case b.v6:
		return len(e.IPv6)
	}
	return v4Addrs(e)
}

// slotCap is the most pod address pairs one ENI can hold (its slots all
// filled with the kind eni.ipv4Allocation asks for).
func (b *builder) slotCap() int {
	if b.excl {
		return 1
	}
	l := b.o.Instance.Limits
	c4, c6 := (l.IPv4PerENI-1)*b.perSlot(), l.IPv6PerENI
	switch {
	case b.v4 && b.v6:
		return max(0, min(c4, c6))
	case b.v6:
		return max(0, c6)
	}
	return max(0, c4)
}

// fillOrder is the order new pods are placed on ENIs: ENIs that have
// their set's groups before ENIs moving to them (a pod on a moving ENI
// starts after its UpdateENI: the cloud is not on the pod path while the
// node holds a free address with the pod's groups), then the ENI with the
// most live pods first (packing, so idle ENIs can be released whole), then
// the lowest device index, then the lowest ID. An ENI whose move the cloud
// refused takes no new pod.
func (b *builder) fillOrder() []*eniState {
	order := slices.DeleteFunc(slices.Clone(b.usable), b.moveRefused)
	slices.SortStableFunc(order, func(x, y *eniState) int {
		if c := cmp.Compare(boolInt(x.updateRef > 0), boolInt(y.updateRef > 0)); c != 0 {
			return c
		}
		return y.used - x.used
	})
	return order
}

// bindNew hands free addresses to live pods without a binding, in key
// order, from ENIs in fill order, lowest address first. It returns the pods
// left waiting.
func (b *builder) bindNew() []*podState {
	order := b.fillOrder()
	var waiting []*podState
	i := 0
	for _, p := range b.pods {
		if p.bound() || p.status != nil || p.set != b.cur {
			continue
		}
		if !b.bindable {
			// A partial observation may hide who holds an address.
			waiting = append(waiting, p)
			continue
		}
		for i < len(order) && b.freeSlots(order[i]) == 0 {
			i++
		}
		if i == len(order) {
			waiting = append(waiting, p)
			continue
		}
		e := order[i]
		var ip4, ip6 netip.Addr
		if b.v4 {
			ip4, e.free4 = e.free4[0], e.free4[1:]
		}
		if b.v6 {
			ip6, e.free6 = e.free6[0], e.free6[1:]
		}
		b.bindFree(p, ip4, ip6, e)
	}
	return waiting
}

// bindFree binds p to free addresses of e, with the reason its entry gives
// (a new binding unless it says otherwise).
func (b *builder) bindFree(p *podState, ip4, ip6 netip.Addr, e *eniState) {
	src := ReasonNewBinding
	if p.source != "" {
		src = p.source
	}
	b.bindTo(p, ip4, ip6, e, src)
}

// rememberSticky records the binding of every bound sticky pod, so that it
// can be held when the pod goes and restored when it comes back.
func (b *builder) rememberSticky() {
	for _, p := range b.pods {
		if p.sticky == "" || !p.bound() {
			continue
		}
		if r, ok := b.mem.Sticky[p.sticky]; ok && keyIs(p.key, r.Key) &&
			r == (Reservation{Key: r.Key, IPv4: p.ipv4, IPv6: p.ipv6, ENIID: p.eni.eni.ID}) {
			continue // unchanged: no new key string
		}
		if b.mem.Sticky == nil {
			b.mem.Sticky = map[string]Reservation{}
		}
		b.mem.Sticky[p.sticky] = Reservation{Key: p.key.String(), IPv4: p.ipv4, IPv6: p.ipv6, ENIID: p.eni.eni.ID}
	}
}
