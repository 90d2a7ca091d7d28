package linux

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// listRules dumps the node's policy rules of one family.
// On a node with IPv6 disabled the IPv6 list is empty, not an error.
func (d *Datapath) listRules(fam int) ([]netlink.Rule, error) {
	rules, err := dump("list rules", func() ([]netlink.Rule, error) { return d.node.h.RuleList(fam) })
	if fam == netlink.FAMILY_V6 && errors.Is(err, unix.EAFNOSUPPORT) {
		return nil, nil
	}
	return rules, err
}

// ruleString renders a rule the way `ip rule` does, briefly.
func ruleString(r netlink.Rule) string {
	s := fmt.Sprintf("prio %d", r.Priority)
	if r.Src != nil {
		s += " from " + prefixOf(r.Src).Addr().String()
	}
	if r.Dst != nil {
		s += " to " + prefixOf(r.Dst).Addr().String()
	}
	switch r.Table {
	case 0: // a delete that matches any table
		return s
	case unix.RT_TABLE_MAIN:
		return s + " lookup main"
	}
	return fmt.Sprintf("%s lookup %d", s, r.Table)
}

// delRule deletes the rule; one already gone is fine.
func (d *Datapath) delRule(r netlink.Rule, ch *Changes) error {
	del := netlink.NewRule()
	del.Family = r.Family
	del.Priority = r.Priority
	del.Table = r.Table
	del.Src = r.Src
	del.Dst = r.Dst
	del.Protocol = r.Protocol
	if err := d.node.h.RuleDel(del); err != nil {
		if isNotFound(mapErr(err)) {
			return nil
		}
		return fmt.Errorf("delete rule %s: %w", ruleString(r), mapErr(err))
	}
	ch.add("delete rule %s", ruleString(r))
	return nil
}

// podRules are the two rules for one pod address: "to ip lookup main" at
// PrioToPod and "from ip lookup table" at PrioFromPod.
func podRules(ip netip.Addr, table int) (to, from *netlink.Rule) {
	to = netlink.NewRule()
	to.Family = familyOf(ip)
	to.Priority = PrioToPod
	to.Dst = hostPrefix(ip)
	to.Table = unix.RT_TABLE_MAIN
	to.Protocol = Proto
	from = netlink.NewRule()
	from.Family = familyOf(ip)
	from.Priority = PrioFromPod
	from.Src = hostPrefix(ip)
	from.Table = table
	from.Protocol = Proto
	return to, from
}

// ensurePodRules makes the node hold exactly the two rules for ip (given
// the current rule list of ip's family): missing ones are added, ones at
// enid's priorities for the same address with a wrong table are deleted.
func (d *Datapath) ensurePodRules(rules []netlink.Rule, ip netip.Addr, table int, ch *Changes) error {
	to, from := podRules(ip, table)
	for _, want := range []*netlink.Rule{to, from} {
		found := false
		for _, r := range rules {
			var same bool
			if want.Dst != nil {
				same = r.Priority == PrioToPod && isHost(r.Dst, ip) && r.Src == nil
			} else {
				same = r.Priority == PrioFromPod && isHost(r.Src, ip) && r.Dst == nil
			}
			if !same {
				continue
			}
			if !found && r.Table == want.Table && r.Protocol == Proto {
				found = true
				continue
			}
			if err := d.delRule(r, ch); err != nil {
				return err
			}
		}
		if found {
			continue
		}
		if err := d.node.h.RuleAdd(want); err != nil && !isExist(err) {
			return fmt.Errorf("add rule %s: %w", ruleString(*want), mapErr(err))
		}
		ch.add("add rule %s", ruleString(*want))
	}
	return nil
}

// maxStaleRules bounds how many rules deleteAnyTable deletes for one
// priority and address before it gives up (a loop that never ends would
// be a kernel that acknowledges a delete and keeps the rule).
const maxStaleRules = 16

// deleteAnyTable deletes every rule of enid's at r's priority for r's
// address (source or destination), whatever its table, without listing
// the node's rules (two a pod): the kernel matches a delete that names no
// table against any, and answers "no such rule" when none is left. verb
// says what the deletion is in the changes ("delete", "delete stale").
func (d *Datapath) deleteAnyTable(r netlink.Rule, verb string, ch *Changes) error {
	r.Table = 0
	for i := 0; ; i++ {
		err := d.node.h.RuleDel(&r)
		if isNotFound(mapErr(err)) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s rule %s: %w", verb, ruleString(r), mapErr(err))
		}
		if i == maxStaleRules {
			return fmt.Errorf("%s rule %s: still there after %d deletes", verb, ruleString(r), i+1)
		}
		ch.add("%s rule %s", verb, ruleString(r))
	}
}

// replacePodRules is ensurePodRules for an address whose veth this setup
// has just made, so that none of the pod's traffic flows yet: rather than
// list every rule of the node, it deletes whatever rule of enid's names ip
// at each of the two priorities (a stale one: the address bound to
// another ENI before, its rules left by a veth that vanished) and adds the
// right one. On a node without stale rules that is one delete the kernel
// refuses and one add a rule.
func (d *Datapath) replacePodRules(ip netip.Addr, table int, ch *Changes) error {
	to, from := podRules(ip, table)
	for _, want := range []*netlink.Rule{to, from} {
		if err := d.deleteAnyTable(*want, "delete stale", ch); err != nil {
			return err
		}
		if err := d.node.h.RuleAdd(want); err != nil && !isExist(err) {
			return fmt.Errorf("add rule %s: %w", ruleString(*want), mapErr(err))
		}
		ch.add("add rule %s", ruleString(*want))
	}
	return nil
}

// dropRulesOf deletes enid's two rules for ip, whatever their table,
// without listing.
func (d *Datapath) dropRulesOf(ip netip.Addr, ch *Changes) error {
	to, from := podRules(ip, 0)
	for _, r := range []*netlink.Rule{to, from} {
		if err := d.deleteAnyTable(*r, "delete", ch); err != nil {
			return err
		}
	}
	return nil
}

// ruleLists are the node's rules of each family, listed once: the steps
// of a teardown that lists (and of Sweep) share one dump per family (on a
// full node two rules a pod), and a rule deleted through drop leaves its
// list.
type ruleLists struct {
	d   *Datapath
	fam map[int][]netlink.Rule
}

// listRulesThenLinks lists both families' rules, then the links: the order
// sweepRules needs.
func (d *Datapath) listRulesThenLinks() (*ruleLists, []netlink.Link, error) {
	rl := &ruleLists{d: d, fam: map[int][]netlink.Rule{}}
	for _, fam := range ruleFamilies {
		rs, err := d.listRules(fam)
		if err != nil {
			return nil, nil, err
		}
		rl.fam[fam] = rs
	}
	links, err := dump("list links", d.node.h.LinkList)
	if err != nil {
		return nil, nil, err
	}
	return rl, links, nil
}

// drop deletes the rules of family fam that match (a rule already gone
// is fine) and forgets them.
func (rl *ruleLists) drop(fam int, match func(netlink.Rule) bool, ch *Changes) error {
	rs := rl.fam[fam]
	kept := rs[:0]
	for i, r := range rs {
		if !match(r) {
			kept = append(kept, r)
			continue
		}
		if err := rl.d.delRule(r, ch); err != nil {
			rl.fam[fam] = append(kept, rs[i:]...)
			return err
		}
	}
	rl.fam[fam] = kept
	return nil
}

// dropPodRulesOf deletes enid's rules for the addresses in ips (of family
// fam), whatever their table.
func (rl *ruleLists) dropPodRulesOf(fam int, ips map[netip.Addr]bool, ch *Changes) error {
	if len(ips) == 0 {
		return nil
	}
	return rl.drop(fam, func(r netlink.Rule) bool {
		ip, ok := podRuleAddr(r)
		return ok && ips[ip]
	}, ch)
}

// Sweep deletes enid's pod rules that belong to no attachment any more:
// what a pod leaves when its netns (and with it its veth and host routes)
// went before its teardown, while the agent was down or between two full
// observations. Observe finds attachments by their host veth, so nothing
// would ever tear such rules down. The agent sweeps after every full
// observation; it is safe while pods are being set up (see sweepRules).
func (d *Datapath) Sweep(ctx context.Context) (Changes, error) {
	var ch Changes
	defer d.logChanges("sweep", "orphaned pod rules", &ch)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rl, links, err := d.listRulesThenLinks()
	if err != nil {
		return ch, fmt.Errorf("sweep pod rules: %w", err)
	}
	if err := d.sweepRules(rl, links, &ch); err != nil {
		return ch, fmt.Errorf("sweep pod rules: %w", err)
	}
	return ch, nil
}

// podRuleAddr returns the pod address of one of enid's pod rules ("to ip
// lookup main" or "from ip lookup table"); ok is false for any other rule.
func podRuleAddr(r netlink.Rule) (ip netip.Addr, ok bool) {
	switch {
	case r.Protocol != Proto:
		return netip.Addr{}, false
	case r.Priority == PrioToPod && r.Dst != nil:
		return prefixOf(r.Dst).Addr(), true
	case r.Priority == PrioFromPod && r.Src != nil:
		return prefixOf(r.Src).Addr(), true
	}
	return netip.Addr{}, false
}

// ruleFamilies are the families of enid's pod rules.
var ruleFamilies = []int{netlink.FAMILY_V4, netlink.FAMILY_V6}

// sweepRules deletes enid's pod rules whose address belongs to no
// attachment any more (neither recorded in a host veth's label nor routed
// by enid's host routes): what is left when a pod's veth vanished with its
// netns before teardown. EnsurePod labels the veth and adds the host route
// before the rules, teardown deletes the rules before the veth, and the
// rules and links come from listRulesThenLinks, and the routes are listed
// here, after both, so an attachment being set up is never swept.
func (d *Datapath) sweepRules(rl *ruleLists, links []netlink.Link, ch *Changes) error {
	live := map[netip.Addr]bool{}
	for _, l := range links {
		if lab, ok := parseLabel(l.Attrs().Alias); ok {
			live[lab.IPv4], live[lab.IPv6] = true, true
		}
	}
	for _, fam := range ruleFamilies {
		routes, err := d.hostRoutes(fam)
		if err != nil {
			return err
		}
		for _, r := range routes {
			live[prefixOf(r.Dst).Addr()] = true
		}
		err = rl.drop(fam, func(r netlink.Rule) bool {
			ip, ok := podRuleAddr(r)
			return ok && !live[ip]
		}, ch)
		if err != nil {
			return err
		}
	}
	return nil
}

// hostRoutes lists enid's routes of one family in the main table (the
// host routes to pods).
// On a node with IPv6 disabled the kernel may answer an IPv6 dump with
// every family's routes, so the family is checked here.
func (d *Datapath) hostRoutes(fam int) ([]netlink.Route, error) {
	routes, err := dump("list routes", func() ([]netlink.Route, error) {
		return d.node.h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: Proto},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	})
	if fam == netlink.FAMILY_V6 && errors.Is(err, unix.EAFNOSUPPORT) {
		return nil, nil
	}
	var r []netlink.Route
	for _, rt := range routes {
		if rt.Dst != nil && familyOf(prefixOf(rt.Dst).Addr()) == fam {
			r = append(r, rt)
		}
	}
	return r, err
}

// hostRoutesVia is hostRoutes through the device with index link: the
// kernel filters the dump where it can (Datapath.strict), else the full
// dump is filtered here.
func (d *Datapath) hostRoutesVia(fam, link int) ([]netlink.Route, error) {
	if d.strict == nil {
		all, err := d.hostRoutes(fam)
		return slices.DeleteFunc(all, func(r netlink.Route) bool { return r.LinkIndex != link }), err
	}
	routes, err := dump("list a device's routes", func() ([]netlink.Route, error) {
		return d.strict.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: Proto, LinkIndex: link},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_OIF)
	})
	if fam == netlink.FAMILY_V6 && errors.Is(err, unix.EAFNOSUPPORT) {
		return nil, nil
	}
	return slices.DeleteFunc(routes, func(r netlink.Route) bool {
		return r.Dst == nil || familyOf(prefixOf(r.Dst).Addr()) != fam
	}), err
}
