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
// The check is an nftables rule in the vpc namespace, table inet simvpc,
// chain antispoof (prerouting, priority raw), one per ENI:
//
//	iifname <veth> fib saddr . iif oif missing drop
//
// ("no route to the source through the device it came in on"), for IPv4
// and IPv6 alike. Not rp_filter=1 on the veth, though it checks the same
// for IPv4: the kernel applies rp_filter to ARP requests too (arp_process
// validates the sender address as a source), and a node sends its ARP for
// a secondary ENI's gateway with the address of another interface (the
// primary's, when the pod's source is not local), so the vpc would refuse
// to answer: the VPC answers ARP whatever its sender. nftables' inet
// family never sees ARP. IPv6 has no rp_filter at all. Link-local sources
// (neighbour discovery) pass: fe80::/64 is routed on every veth. DAD
// probes (source ::) are dropped, which only lets DAD succeed.
//
// `ip netns exec <vpc> nft list table inet simvpc` shows it, with a
// counter of the packets each rule dropped.

// antiSpoofTable is the vpc namespace's nftables table of the IPv6 check.
const antiSpoofTable = "simvpc"

// antiSpoof makes the vpc drop what arrives on the vpc end vpcDev of an
// ENI's veth from a source that is not routed back to it.
func antiSpoof(vpcNS, vpcDev string) error {
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
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: antiSpoofTable})
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
