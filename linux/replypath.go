package linux

import (
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The reply path: replies to connections that entered the node through its
// primary interface leave through it (docs/datapath.md, "Services").
//
// A NodePort (or LoadBalancer, hostPort, externalIP) connection enters on
// the primary interface addressed to the node and is DNATed to a local
// pod. The pod's reply comes out of its veth with the pod's address as
// source, so rule PrioFromPod sends it to the pod's ENI table; conntrack
// then gives it the node's address as source, and it leaves a secondary
// ENI with an address that ENI does not own: the VPC drops it. So:
//
//   - nftables table "inet enid", chain "prerouting" (filter, priority
//     mangle): a packet of a connection's original direction arriving on
//     the primary interface sets MarkPrimary in the connection's mark; a
//     packet arriving on a pod's veth (enid*) of a connection whose mark
//     holds MarkPrimary gets MarkPrimary in its packet mark. A packet from a
//     pod that kube-proxy marked for masquerade (MarkMasquerade, set in
//     nat PREROUTING: the chain runs after it) sets MarkPrimary in its
//     connection's mark first: it will leave with the node's address.
//   - rule PrioMarked "fwmark MarkPrimary/MarkPrimary lookup main" (IPv4 and
//     IPv6): such a packet is routed by the main table, out of the primary
//     interface, before PrioFromPod can send it to the pod's ENI.
//
// Only the mark's own bit is read or written, so other users of the packet
// and connection marks keep theirs.

const (
	// MarkPrimary is the packet and connection mark bit of a connection
	// that entered through the primary interface: bit 13. kube-proxy uses
	// 0x4000 (masquerade) and 0x8000 (drop), Calico 0xffff0000, Cilium
	// 0x0f00 and 0xffff0000, Weave 0x20000 and 0x40000, Tailscale 0xff0000.
	MarkPrimary = 0x2000
	// PrioMarked is the priority of "fwmark MarkPrimary/MarkPrimary lookup
	// main": after PrioToPod (traffic to a local pod is delivered first),
	// before PrioFromPod (which would send the reply out of the pod's ENI).
	// AWS's VPC CNI uses 1024 for the same rule.
	PrioMarked = 1024
	// MarkMasquerade is kube-proxy's masquerade mark (its default
	// masqueradeBit 14), set in nat PREROUTING on the first packet of what
	// it will give the node's own address as source: a pod's connection
	// to its node's NodePort, everything with masqueradeAll, pod traffic
	// it takes for outside traffic. Such a connection of a pod's gets
	// MarkPrimary too: it leaves with the node's address, so by the node's
	// route.
	MarkMasquerade = 0x4000
	// NFTable is the name of enid's nftables table (family inet).
	NFTable = "enid"
	// nftChain is the table's only chain.
	nftChain = "prerouting"
	// podVethPrefix starts the name of every host veth of a pod.
	podVethPrefix = "enid"
)

// ReplyPathSpec is what EnsureReplyPath needs.
type ReplyPathSpec struct {
	// PrimaryMAC finds the node's primary interface (the primary ENI's
	// MAC), which enid never changes but must name.
	PrimaryMAC string
}

// EnsureReplyPath makes the node hold the reply path (the nftables table
// and the fwmark rules) for the primary interface of s, and nothing else
// of enid's at PrioMarked or in its table. A table that differs in any way
// is replaced in one transaction; a missing or wrong rule is added or
// deleted. On correct state it changes nothing. The error wraps
// ErrNotFound when no interface has the primary MAC.
func (d *Datapath) EnsureReplyPath(ctx context.Context, s ReplyPathSpec) (Changes, error) {
	var ch Changes
	defer d.logChanges("ensure reply path", s.PrimaryMAC, &ch)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	mac, err := normMAC(s.PrimaryMAC)
	if err != nil {
		return nil, err
	}
	l, err := linkByMAC(d.node.h, mac)
	if err != nil {
		return nil, fmt.Errorf("ensure reply path: primary interface %s: %w", mac, err)
	}
	if err := d.ensureReplyTable(l.Attrs().Name, &ch); err != nil {
		return ch, fmt.Errorf("ensure reply path: %w", err)
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		if err := d.ensureMarkRule(fam, &ch); err != nil {
			return ch, fmt.Errorf("ensure reply path: %w", err)
		}
	}
	return ch, nil
}

// RemoveReplyPath deletes enid's table and its rules at PrioMarked; what
// is already gone is fine.
func (d *Datapath) RemoveReplyPath(ctx context.Context) (Changes, error) {
	var ch Changes
	defer d.logChanges("remove reply path", NFTable, &ch)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := d.nft()
	if err != nil {
		return nil, fmt.Errorf("remove reply path: %w", err)
	}
	if _, found, err := replyTable(c); err != nil {
		return nil, fmt.Errorf("remove reply path: %w", err)
	} else if found {
		c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: NFTable})
		if err := c.Flush(); err != nil && !isNotFound(mapErr(err)) {
			return nil, fmt.Errorf("remove reply path: delete table inet %s: %w", NFTable, err)
		}
		ch.add("delete nftables table inet %s", NFTable)
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rules, err := d.listRules(fam)
		if err != nil {
			return ch, fmt.Errorf("remove reply path: %w", err)
		}
		for _, r := range rules {
			if isMarkRule(r) {
				if err := d.delMarkRule(r, &ch); err != nil {
					return ch, fmt.Errorf("remove reply path: %w", err)
				}
			}
		}
	}
	return ch, nil
}

// ReplyPathProblems reports how the node's reply path differs from what
// EnsureReplyPath makes for the primary interface named primary; nil
// means it is in place.
func (d *Datapath) ReplyPathProblems(primary string) ([]string, error) {
	c, err := d.nft()
	if err != nil {
		return nil, err
	}
	var problems []string
	if p, err := replyTableProblem(c, primary); err != nil {
		return nil, err
	} else if p != "" {
		problems = append(problems, p)
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rules, err := d.listRules(fam)
		if err != nil {
			return nil, err
		}
		if fam == netlink.FAMILY_V6 && rules == nil {
			continue // IPv6 disabled
		}
		n := 0
		for _, r := range rules {
			switch {
			case isWantedMarkRule(r):
				n++
			case isMarkRule(r):
				problems = append(problems, "unexpected rule "+markRuleString(r))
			}
		}
		if n != 1 {
			problems = append(problems, fmt.Sprintf("%d rules %s, want 1", n, markRuleString(markRule(fam))))
		}
	}
	return problems, nil
}

// nft is an nftables connection in the node namespace (one netlink socket
// per operation).
func (d *Datapath) nft() (*nftables.Conn, error) {
	c, err := nftables.New(nftables.WithNetNSFd(int(d.node.fd)))
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	return c, nil
}

// replyTable finds enid's table; found is false when there is none.
func replyTable(c *nftables.Conn) (*nftables.Table, bool, error) {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, false, fmt.Errorf("list nftables tables: %w", mapErr(err))
	}
	for _, t := range tables {
		if t.Name == NFTable {
			return t, true, nil
		}
	}
	return nil, false, nil
}

// replyTableProblem compares enid's table with the one for primary: ""
// when it is exactly that, else what differs.
func replyTableProblem(c *nftables.Conn, primary string) (string, error) {
	t, found, err := replyTable(c)
	if err != nil {
		return "", err
	}
	if !found {
		return fmt.Sprintf("no nftables table inet %s", NFTable), nil
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return "", fmt.Errorf("list nftables chains: %w", mapErr(err))
	}
	want := replyChain(t)
	var mine []*nftables.Chain
	for _, ch := range chains {
		if ch.Table.Name == NFTable {
			mine = append(mine, ch)
		}
	}
	if len(mine) != 1 || !sameChain(mine[0], want) {
		return fmt.Sprintf("table inet %s does not hold exactly chain %s", NFTable, nftChain), nil
	}
	rules, err := c.GetRules(t, mine[0])
	if err != nil {
		return "", fmt.Errorf("list nftables rules: %w", mapErr(err))
	}
	wantRules := replyRules(t, want, primary)
	if len(rules) != len(wantRules) {
		return fmt.Sprintf("chain %s holds %d rules, want %d", nftChain, len(rules), len(wantRules)), nil
	}
	for i, r := range rules {
		if !reflect.DeepEqual(r.Exprs, readBack(wantRules[i].Exprs)) || string(r.UserData) != string(wantRules[i].UserData) {
			return fmt.Sprintf("chain %s rule %d differs from %q", nftChain, i+1, ruleComment(wantRules[i])), nil
		}
	}
	return "", nil
}

// readBack is exprs as google/nftables v0.3.0 reads them back from the
// kernel: it does not parse a ct expression's source register
// (NFTA_CT_SREG), so "ct ... set" comes back as a ct expression with
// neither register. Nothing else can look like that: the kernel refuses a
// ct load without a destination register.
func readBack(exprs []expr.Any) []expr.Any {
	out := make([]expr.Any, len(exprs))
	for i, e := range exprs {
		if ct, ok := e.(*expr.Ct); ok && ct.SourceRegister {
			e = &expr.Ct{Key: ct.Key, Direction: ct.Direction}
		}
		out[i] = e
	}
	return out
}

func sameChain(got, want *nftables.Chain) bool {
	return got.Name == want.Name && got.Type == want.Type &&
		got.Hooknum != nil && *got.Hooknum == *want.Hooknum &&
		got.Priority != nil && *got.Priority == *want.Priority &&
		got.Policy != nil && *got.Policy == *want.Policy
}

// ensureReplyTable replaces enid's table, in one transaction, unless it is
// already exactly the one for primary.
func (d *Datapath) ensureReplyTable(primary string, ch *Changes) error {
	c, err := d.nft()
	if err != nil {
		return err
	}
	problem, err := replyTableProblem(c, primary)
	if err != nil || problem == "" {
		return err
	}
	// Add, delete, add: the batch deletes whatever table is there (adding
	// an existing table is no error) and builds the new one; the kernel
	// applies the batch whole or not at all, so packets never see a
	// half-built table.
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: NFTable}
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	chain := c.AddChain(replyChain(t))
	for _, r := range replyRules(t, chain, primary) {
		c.AddRule(r)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("write nftables table inet %s (%s): %w", NFTable, problem, err)
	}
	ch.add("replace nftables table inet %s (%s): mark connections entering on %s", NFTable, problem, primary)
	return nil
}

// replyChain is the table's chain: after conntrack (priority -200) so the
// connection is known, after nat (-100) so kube-proxy's masquerade mark is
// set, before routing (every prerouting hook is).
func replyChain(t *nftables.Table) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{Name: nftChain, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityFilter, Policy: &accept}
}

// replyRules are the chain's three rules, in order.
func replyRules(t *nftables.Table, c *nftables.Chain, primary string) []*nftables.Rule {
	mark := u32(MarkPrimary)
	keep := u32(^uint32(MarkPrimary))
	masq := u32(MarkMasquerade)
	zero := u32(0)
	return []*nftables.Rule{
		{Table: t, Chain: c, UserData: comment(fmt.Sprintf("enid: connection entering on %s: ct mark | %#x", primary, MarkPrimary)),
			Exprs: []expr.Any{
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifnameBytes(primary)},
				&expr.Ct{Key: expr.CtKeyDIRECTION, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0}}, // IP_CT_DIR_ORIGINAL,
				&expr.Ct{Key: expr.CtKeyMARK, Register: 1},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: keep, Xor: mark},
				&expr.Ct{Key: expr.CtKeyMARK, Register: 1, SourceRegister: true},
			}},
		{Table: t, Chain: c, UserData: comment(fmt.Sprintf("enid: from a pod, marked %#x by kube-proxy for masquerade: ct mark | %#x", MarkMasquerade, MarkPrimary)),
			Exprs: []expr.Any{
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(podVethPrefix)},
				&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: masq, Xor: zero},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: zero},
				&expr.Ct{Key: expr.CtKeyMARK, Register: 1},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: keep, Xor: mark},
				&expr.Ct{Key: expr.CtKeyMARK, Register: 1, SourceRegister: true},
			}},
		{Table: t, Chain: c, UserData: comment(fmt.Sprintf("enid: from a pod, of such a connection: meta mark | %#x", MarkPrimary)),
			Exprs: []expr.Any{
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(podVethPrefix)},
				&expr.Ct{Key: expr.CtKeyMARK, Register: 1},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mark, Xor: zero},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: zero},
				&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: keep, Xor: mark},
				&expr.Meta{Key: expr.MetaKeyMARK, Register: 1, SourceRegister: true},
			}},
	}
}

// u32 is a register value as the kernel holds marks: host byte order.
func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// ifnameBytes is an interface name as nftables compares it exactly:
// IFNAMSIZ bytes, zero padded (a shorter, unpadded value matches a prefix).
func ifnameBytes(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

// comment is a rule comment as nft prints it.
func comment(s string) []byte { return userdata.AppendString(nil, userdata.TypeComment, s) }

func ruleComment(r *nftables.Rule) string {
	s, _ := userdata.GetString(r.UserData, userdata.TypeComment)
	return strings.TrimPrefix(s, "enid: ")
}

// markRule is "fwmark MarkPrimary/MarkPrimary lookup main" at PrioMarked.
func markRule(fam int) netlink.Rule {
	r := netlink.NewRule()
	r.Family = fam
	r.Priority = PrioMarked
	r.Mark = MarkPrimary
	m := uint32(MarkPrimary)
	r.Mask = &m
	r.Table = unix.RT_TABLE_MAIN
	r.Protocol = Proto
	return *r
}

// isMarkRule reports whether r is enid's rule at PrioMarked (right or
// wrong).
func isMarkRule(r netlink.Rule) bool {
	return r.Protocol == Proto && r.Priority == PrioMarked
}

// isWantedMarkRule reports whether r is exactly markRule.
func isWantedMarkRule(r netlink.Rule) bool {
	return isMarkRule(r) && r.Mark == MarkPrimary && r.Mask != nil && *r.Mask == MarkPrimary &&
		r.Table == unix.RT_TABLE_MAIN && r.Src == nil && r.Dst == nil && r.IifName == "" && r.OifName == "" && !r.Invert
}

// ensureMarkRule keeps exactly one markRule of the family: a wrong rule of
// enid's at PrioMarked, or a second copy, is deleted.
func (d *Datapath) ensureMarkRule(fam int, ch *Changes) error {
	rules, err := d.listRules(fam)
	if err != nil {
		return err
	}
	if fam == netlink.FAMILY_V6 && rules == nil {
		return nil // IPv6 disabled
	}
	found := false
	for _, r := range rules {
		if !isMarkRule(r) {
			continue
		}
		if !found && isWantedMarkRule(r) {
			found = true
			continue
		}
		if err := d.delMarkRule(r, ch); err != nil {
			return err
		}
	}
	if found {
		return nil
	}
	want := markRule(fam)
	if err := d.node.h.RuleAdd(&want); err != nil && !isExist(err) {
		return fmt.Errorf("add rule %s: %w", markRuleString(want), mapErr(err))
	}
	ch.add("add rule %s", markRuleString(want))
	return nil
}

// delMarkRule deletes one rule at PrioMarked, matching its mark too.
func (d *Datapath) delMarkRule(r netlink.Rule, ch *Changes) error {
	del := netlink.NewRule()
	del.Family = r.Family
	del.Priority = r.Priority
	del.Table = r.Table
	del.Mark = r.Mark
	del.Mask = r.Mask
	del.Src = r.Src
	del.Dst = r.Dst
	del.IifName = r.IifName
	del.OifName = r.OifName
	del.Invert = r.Invert
	del.Protocol = r.Protocol
	if err := d.node.h.RuleDel(del); err != nil {
		if isNotFound(mapErr(err)) {
			return nil
		}
		return fmt.Errorf("delete rule %s: %w", markRuleString(r), mapErr(err))
	}
	ch.add("delete rule %s", markRuleString(r))
	return nil
}

func markRuleString(r netlink.Rule) string {
	fam := "ipv4"
	if r.Family == netlink.FAMILY_V6 {
		fam = "ipv6"
	}
	mask := uint32(0xffffffff)
	if r.Mask != nil {
		mask = *r.Mask
	}
	return fmt.Sprintf("%s %s fwmark %#x/%#x", fam, ruleString(r), r.Mark, mask)
}
