package planner

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/enidnet/enid/observed"
)

// This file plans node changes: ENI devices, pod network state, and the
// statuses the CNI plugin waits on.

// configureENIs plans ConfigureENI for every usable ENI whose device is not
// (or not fully, or differently) configured.
func (b *builder) configureENIs() {
	if b.excl {
		return
	}
	for _, e := range b.usable {
		dev, ok := b.devices[e.eni.MAC]
		text := "device not found"
		switch {
		case !ok:
		case !dev.Configured:
			text = "device " + dev.Name + " not configured"
		case dev.Table != e.table():
			text = "device " + dev.Name + " uses table " + itoa(dev.Table)
		case b.cfg.ENI.MTU > 0 && dev.MTU != b.cfg.ENI.MTU:
			text = "device " + dev.Name + " has MTU " + itoa(dev.MTU)
		default:
			continue
		}
		e.configureID = b.add(Action{
			Kind: ConfigureENI, Target: e.eni.ID, Reason: Reason{ReasonENIUnconfigured, text},
			ENIID: e.eni.ID, MAC: e.eni.MAC, Table: e.table(), Gateway: e.gw, GatewayV6: e.gw6,
			MTU: b.cfg.ENI.MTU,
		})
	}
}

// teardown plans the removal of a gone attachment's kernel state.
func (b *builder) teardown(pn observed.PodNet) {
	if !b.destroyOK() || b.kept(pn.Key) {
		return
	}
	if _, done := b.staleTeardown[pn.Key]; done {
		return
	}
	kind, target := TeardownPod, &PodTarget{Key: pn.Key, NetNS: pn.NetNS, IfName: pn.Key.IfName, IPv4: pn.IPv4, IPv6: pn.IPv6, ENIMAC: pn.ENIMAC}
	a := Action{Kind: kind, Target: pn.Key.String(), Reason: Reason{ReasonEntryGone, "no entry asks for this attachment"}, Pod: target}
	if pn.Exclusive {
		a.Kind = ReturnENI
		if e := b.byMAC[pn.ENIMAC]; e != nil {
			a.ENIID, target.ENIID = e.eni.ID, e.eni.ID
		}
		a.MAC = pn.ENIMAC
	}
	b.staleTeardown[pn.Key] = b.add(a)
}

// unpublish plans the removal of a gone attachment's status file.
func (b *builder) unpublish(k observed.AttachmentKey) {
	if !b.destroyOK() || b.kept(k) || b.goneKeys[k] {
		return // an entry whose netns is gone keeps a status (publishGone)
	}
	var deps []int
	if id, ok := b.staleTeardown[k]; ok {
		deps = append(deps, id)
	}
	b.add(Action{Kind: PublishStatus, Target: k.String(), Reason: Reason{ReasonEntryGone, "remove the status of a gone attachment"}, DependsOn: deps})
}

// podActions plans SetupPod (or MoveENI) where the kernel differs from the
// binding and PublishStatus where the published status differs from the
// answer, for every live entry and every entry problem.
func (b *builder) podActions() {
	exclusive := b.excl
	b.reservePodActions()
	for _, p := range b.pods {
		if p.status != nil {
			b.publish(*p.status, p.pub, nil, true)
			continue
		}
		if !p.bound() {
			continue // cannot happen: every unbound pod gets a status
		}
		e := p.eni
		st := PodStatus{
			Key: p.key, Revision: p.entry.Revision, Phase: PhaseReady, ReasonCode: ReasonReady,
			IPv4: p.ipv4, IPv6: p.ipv6,
			ENIID: e.eni.ID, ENIMAC: e.eni.MAC, IfName: p.key.IfName, Exclusive: exclusive,
		}
		st.Routes = b.routes.take(st.families())
		address(&st, e, exclusive)
		// The datapath's gateways are the vSwitch's: an ENI's table routes
		// through them, and an exclusive pod's ENI sits on the vSwitch.
		gw, gw6 := e.gw, e.gw6
		if !b.v4 {
			gw = netip.Addr{}
		}
		if !b.v6 {
			gw6 = netip.Addr{}
		}
		pn := p.kn
		good := pn != nil && pn.Healthy && pn.Exclusive == exclusive && pn.IPv4 == p.ipv4 &&
			pn.IPv6 == p.ipv6 && pn.ENIMAC == e.eni.MAC
		if good && exclusive {
			_, differ := b.hostRoutes.differ(pn.HostRoutes, b.hostRoutes.forPod(p.ipv4.IsValid(), p.ipv6.IsValid()))
			good = !differ
		}
		if good {
			b.publish(st, p.pub, nil, true)
			continue
		}
		a := b.setupAction(p, gw, gw6)
		fs := b.failureStatus(p, &a)
		if fs != nil {
			// While the setup backs off, the failure is the pod's answer:
			// written first, then the retry, whose Ready status follows
			// (never the other way round).
			if id := b.publishAs(*fs, a.Target, p.pub, nil, true); id >= 0 {
				a.DependsOn = append(slices.Clip(a.DependsOn), id)
			}
		}
		deps := append(b.deps.take(1), b.add(a))
		if fs != nil {
			b.planPublish(st, a.Target, p.pub, deps, true)
		} else {
			b.publishAs(st, a.Target, p.pub, deps, true)
		}
	}
	b.urgentPodPath()
	b.publishGone()
	for _, ep := range b.d.EntryProblems {
		if ep.ContainerID == "" {
			continue
		}
		k := ep.Key()
		if b.pod(k) != nil {
			continue
		}
		pub, _ := find(b.pubs, k, pubKey)
		code := ReasonEntryInvalid
		if ep.Code != "" {
			code = ReasonCode(ep.Code)
		}
		b.publish(PodStatus{Key: k, Phase: PhaseFailed, ReasonCode: code, Reason: "entry " + ep.File + ": " + ep.Err, IfName: ep.IfName}, pub, nil, false)
	}
}

// reservePodActions makes room, once, for the actions podActions is
// likely to plan (actions are large) and sizes the slabs their parts come
// from.
func (b *builder) reservePodActions() {
	setups, pubs, bound := 0, 0, 0
	for _, p := range b.pods {
		switch {
		case p.status != nil:
			pubs++
		case p.kn == nil || !p.kn.Healthy:
			setups++
			pubs++
		case p.pub == nil:
			pubs++
		}
		if p.status == nil && p.bound() {
			bound++
		}
	}
	b.plan.Actions = slices.Grow(b.plan.Actions, setups+pubs)
	b.routes.expect(bound * b.families())
	b.targets.expect(setups)
	b.deps.expect(setups)
}

// setupAction is the SetupPod (exclusive mode: MoveENI) that sets bound
// pod p up on its ENI, with the datapath's gateways gw and gw6; urgent (a
// CNI ADD waits on it).
func (b *builder) setupAction(p *podState, gw, gw6 netip.Addr) Action {
	e, pn, exclusive := p.eni, p.kn, b.excl
	reason := Reason{p.source, sourceText(p.source)}
	var routes []netip.Prefix
	if exclusive {
		routes = b.hostRoutes.forPod(p.ipv4.IsValid(), p.ipv6.IsValid())
	}
	if pn != nil {
		text := kernelDiff(pn, p, exclusive)
		if d, ok := b.hostRoutes.differ(pn.HostRoutes, routes); ok && exclusive {
			text = strings.TrimPrefix(text+"; "+d, "; ")
		}
		reason = Reason{ReasonKernelDiffers, text}
	}
	kind := SetupPod
	if exclusive {
		kind = MoveENI
	}
	a := Action{
		Kind: kind, Target: p.key.String(), Reason: reason, DependsOn: p.deps,
		ENIID: e.eni.ID, MAC: e.eni.MAC, Gateway: gw, GatewayV6: gw6, Urgent: true,
		Pod: b.targets.new(PodTarget{
			Key: p.key, Revision: p.entry.Revision, Namespace: p.entry.PodNamespace, Name: p.entry.PodName,
			NetNS: p.entry.NetNS, IfName: p.key.IfName, IPv4: p.ipv4, IPv6: p.ipv6,
			ENIID: e.eni.ID, ENIMAC: e.eni.MAC, Bandwidth: p.entry.Bandwidth, MTU: b.podMTU(e.eni.MAC),
		}),
	}
	if exclusive {
		a.HostRoutes = routes
		a.Prefix = prefixOf(p, e)
		if gw6.IsValid() {
			a.PrefixV6 = prefixV6Of(p, e)
		}
	} else {
		a.Pod.Table = e.table()
		if e.configureID >= 0 {
			a.DependsOn = append(slices.Clip(a.DependsOn), e.configureID)
		}
	}
	return a
}

// urgentPodPath marks urgent every ConfigureENI (an ENI's device is on
// the path of every pod placed on it, now or by a later pass while it
// runs) and the node actions an urgent action depends on (a previous
// holder's teardown): the executor starts them first (see Action.Urgent).
// Dependencies are always earlier actions, so one walk backwards reaches
// every one.
func (b *builder) urgentPodPath() {
	acts := b.plan.Actions
	for i := len(acts) - 1; i >= 0; i-- {
		a := &acts[i]
		if a.Kind == ConfigureENI {
			a.Urgent = true
		}
		if !a.Urgent || a.Kind.Cloud() {
			continue
		}
		for _, d := range a.DependsOn {
			if !acts[d].Kind.Cloud() {
				acts[d].Urgent = true
			}
		}
	}
}

// publish records st as the attachment's answer and plans PublishStatus
// when the published one (pb, nil when none) differs (planPublish).
func (b *builder) publish(st PodStatus, pb *observed.Binding, deps []int, urgent bool) int {
	return b.publishAs(st, "", pb, deps, urgent)
}

// publishAs is publish with the string of st.Key, target, when the caller
// has it already ("": built if needed).
func (b *builder) publishAs(st PodStatus, target string, pb *observed.Binding, deps []int, urgent bool) int {
	b.plan.Statuses = append(b.plan.Statuses, st)
	if published(st, pb) {
		return -1
	}
	// The action points to the recorded status rather than a copy of its
	// own (finish keeps it so when it sorts the statuses).
	return b.publishAction(&b.plan.Statuses[len(b.plan.Statuses)-1], target, deps, urgent)
}

// planPublish plans PublishStatus of st when the published one (pb, nil
// when none) differs, and returns its ID (-1: none planned); urgent when a
// live pod's CNI ADD waits on it (whatever the phase: a Pending or Failed
// status tells it why), not for the entries that cannot be served. A
// status planned to follow another (Ready after a retried setup) is not
// the attachment's answer now: it is planned, not recorded. target is the
// string of st.Key ("": built here, only when an action is planned).
func (b *builder) planPublish(st PodStatus, target string, pb *observed.Binding, deps []int, urgent bool) int {
	if published(st, pb) {
		return -1
	}
	return b.publishAction(b.statuses.new(st), target, deps, urgent)
}

// published reports whether pb, the published status (nil when none),
// says what st says.
func published(st PodStatus, pb *observed.Binding) bool {
	return pb != nil && pb.Revision == st.Revision && pb.Phase == st.Phase &&
		pb.Reason == st.Reason && pb.IPv4 == st.IPv4 && pb.IPv6 == st.IPv6 && pb.ENIID == st.ENIID
}

// publishAction plans PublishStatus of st and returns its ID.
func (b *builder) publishAction(st *PodStatus, target string, deps []int, urgent bool) int {
	if target == "" {
		target = st.Key.String()
	}
	return b.add(Action{Kind: PublishStatus, Target: target, Reason: Reason{ReasonStatusOutdated, ""}, DependsOn: deps, Status: st, Urgent: urgent})
}

func sourceText(c ReasonCode) string {
	switch c {
	case ReasonStickyRestore:
		return "sticky address restored"
	case ReasonStatusOutdated:
		return "restored from the published status"
	}
	return "new binding"
}

func kernelDiff(pn *observed.PodNet, p *podState, exclusive bool) string {
	var d []string
	if pn.IPv4 != p.ipv4 || pn.IPv6 != p.ipv6 {
		d = append(d, "addresses differ")
	}
	if pn.ENIMAC != p.eni.eni.MAC {
		d = append(d, "ENI differs")
	}
	if pn.Exclusive != exclusive {
		d = append(d, "mode differs")
	}
	if !pn.Healthy {
		if len(pn.Problems) > 0 {
			d = append(d, pn.Problems...)
		} else {
			d = append(d, "unhealthy")
		}
	}
	return strings.Join(d, "; ")
}

// failStatus and waitStatus build the answer for a pod that cannot be
// served now.
func (b *builder) failStatus(p *podState, c ReasonCode, text string) *PodStatus {
	return &PodStatus{Key: p.key, Revision: p.entry.Revision, Phase: PhaseFailed, ReasonCode: c, Reason: text, IfName: p.key.IfName}
}

func (b *builder) waitStatus(p *podState, c ReasonCode, text string) *PodStatus {
	return &PodStatus{Key: p.key, Revision: p.entry.Revision, Phase: PhasePending, ReasonCode: c, Reason: text, IfName: p.key.IfName}
}

// prefixOf is the pod's IPv4 address with the vSwitch prefix length
// (exclusive mode: the ENI's own address lives in the pod).
// The shared-mode pod gateways (observed.PodGatewayV4, PodGatewayV6).
var (
	podGatewayV4 = netip.MustParseAddr(observed.PodGatewayV4)
	podGatewayV6 = netip.MustParseAddr(observed.PodGatewayV6)
	defaultV4    = netip.MustParsePrefix("0.0.0.0/0")
	defaultV6    = netip.MustParsePrefix("::/0")
)

// address fills a Ready status with everything the pod's interface gets,
// so that publishing it decides nothing: each address's prefix length and
// gateway, and a default route per family via that gateway. A shared-mode
// pod routes through the node (/32 and /128, the link-local gateways the
// node answers); an exclusive pod owns its ENI on the vSwitch (the
// vSwitch's prefix length and gateways; without an IPv6 gateway, the
// link-local one).
//
// st.Routes must have room for the routes (PodStatus.families).
func address(st *PodStatus, e *eniState, exclusive bool) {
	if st.IPv4.IsValid() {
		st.PrefixBits, st.Gateway = 32, podGatewayV4
		if exclusive {
			st.Gateway = e.gw
			if e.bits > 0 {
				st.PrefixBits = e.bits
			}
		}
		st.Routes = append(st.Routes, PodRoute{Dst: defaultV4, GW: st.Gateway})
	}
	if st.IPv6.IsValid() {
		st.PrefixBitsV6, st.GatewayV6 = 128, podGatewayV6
		if exclusive && e.gw6.IsValid() {
			st.GatewayV6 = e.gw6
			if e.bits6 > 0 {
				st.PrefixBitsV6 = e.bits6
			}
		}
		st.Routes = append(st.Routes, PodRoute{Dst: defaultV6, GW: st.GatewayV6})
	}
}

// families counts the address families st has an address of: the
// routes address gives it.
func (st *PodStatus) families() int {
	n := 0
	if st.IPv4.IsValid() {
		n++
	}
	if st.IPv6.IsValid() {
		n++
	}
	return n
}

// families counts the address families pods get.
func (b *builder) families() int {
	n := 0
	if b.v4 {
		n++
	}
	if b.v6 {
		n++
	}
	return n
}

// prefixV6Of is an exclusive pod's IPv6 address with the vSwitch's IPv6
// prefix length (zero without either).
func prefixV6Of(p *podState, e *eniState) netip.Prefix {
	if !p.ipv6.IsValid() || e.bits6 == 0 {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(p.ipv6, e.bits6)
}

func prefixOf(p *podState, e *eniState) netip.Prefix {
	if !p.ipv4.IsValid() || e.bits == 0 {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(p.ipv4, e.bits)
}
