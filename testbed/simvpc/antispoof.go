package simvpc

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The ECS VPC drops a packet an ENI sends whose source address is not one
// of that ENI's addresses (its primary, secondary and prefix addresses,
// its IPv6 addresses): anti-spoofing, as AWS's VPC does. The vpc namespace
// models it on the vpc end of every ENI's veth, where it routes each
// address of the ENI as a /32 (/128): "the source is an address of this
// ENI" is then exactly "the route back to the source leaves by this veth",
// which is what strict reverse-path filtering checks.
//
//   - IPv4: net.ipv4.conf.<veth>.rp_filter=1 (strict). The kernel applies
//     max(conf.all, conf.<dev>), and a new namespace copies conf.all from
//     the host's current value (devconf_inherit_init_net 0): a host with
//     all=2 (loose; Ubuntu's default) would weaken every device, so the vpc
//     namespace's conf.all is set to 0, which leaves each device's own value
//     in force.
//   - IPv6 has no rp_filter. The same check is an nftables rule in the vpc
//     namespace, table ip6 simvpc, chain antispoof (prerouting, priority
//     raw): iifname <veth> fib saddr . iif oif missing drop, i.e. "no route
//     to the source through the device it came in on". Link-local sources
//     (neighbour discovery) pass: fe80::/64 is routed on every veth. DAD
//     probes (source ::) are dropped, which only lets DAD succeed.
//
// `ip netns exec <vpc> nft list table ip6 simvpc` and
// `sysctl net.ipv4.conf.<veth>.rp_filter` show it.

// antiSpoofTable is the vpc namespace's nftables table of the IPv6 check.
const antiSpoofTable = "simvpc"

// antiSpoof makes the vpc drop what arrives on the vpc end vpcDev of an
// ENI's veth from a source that is not routed back to it.
func antiSpoof(vpcNS, vpcDev string) error {
	if err := writeSysctls(vpcNS, map[string]string{
		"net/ipv4/conf/all/rp_filter":            "0",
		"net/ipv4/conf/" + vpcDev + "/rp_filter": "1",
	}); err != nil {
		return fmt.Errorf("anti-spoofing on %s: %w", vpcDev, err)
	}
	fd, err := netns.GetFromPath(vpcNS)
	if err != nil {
		return fmt.Errorf("anti-spoofing on %s: %w", vpcDev, err)
	}
	defer func() { _ = fd.Close() }() // read-only descriptor
	c, err := nftables.New(nftables.WithNetNSFd(int(fd)))
	if err != nil {
		return fmt.Errorf("anti-spoofing on %s: %w", vpcDev, err)
	}
	// AddTable and AddChain create or leave in place: one table and chain
	// for every ENI, one rule per ENI.
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv6, Name: antiSpoofTable})
	policy := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{
		Name: "antispoof", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw, Policy: &policy,
	})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(vpcDev)},
		&expr.Fib{Register: 1, FlagSADDR: true, FlagIIF: true, ResultOIF: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, 0, 0, 0}},
		&expr.Counter{},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("anti-spoofing on %s: nftables: %w", vpcDev, err)
	}
	return nil
}

// ifname is an interface name as nftables compares it: IFNAMSIZ bytes,
// zero padded.
func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}
