package linux_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/linux/linuxtest"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The node's primary ENI in these tests.
const (
	primaryMAC = "02:00:00:00:00:f0"
)

var (
	primaryIP   = netip.MustParseAddr("10.0.9.5")
	primaryCIDR = netip.MustParsePrefix("10.0.9.0/24")
	primaryGW   = netip.MustParseAddr("10.0.9.253")
	// vpcClient is an address elsewhere in the VPC (on the vpc's lo).
	vpcClient = netip.MustParseAddr("10.255.0.1")
)

// plugPrimary plugs the node's primary ENI and addresses it as the node's
// DHCP client would.
func plugPrimary(t *testing.T, tp *linuxtest.Topology) string {
	t.Helper()
	if err := tp.PlugENI(primaryMAC, primaryIP, primaryCIDR, primaryGW); err != nil {
		t.Fatal(err)
	}
	if err := tp.AddressPrimary(primaryMAC, primaryIP, primaryCIDR, primaryGW); err != nil {
		t.Fatal(err)
	}
	name, err := tp.NodeName(primaryMAC)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// nodeHandle is a route handle in the namespace.
func nsHandle(t *testing.T, path string) *netlink.Handle {
	t.Helper()
	fd, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fd.Close() })
	h, err := netlink.NewHandleAt(fd, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// markRules returns the node's rules at PrioMarked, rendered.
func markRules(t *testing.T, h *netlink.Handle) []string {
	t.Helper()
	var got []string
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rules, err := h.RuleList(fam)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rules {
			if r.Priority == linux.PrioMarked {
				m := uint32(0)
				if r.Mask != nil {
					m = *r.Mask
				}
				got = append(got, fmt.Sprintf("fam %d fwmark %#x/%#x table %d proto %d", fam, r.Mark, m, r.Table, r.Protocol))
			}
		}
	}
	return got
}

// nftIn is an nftables connection in the namespace.
func nftIn(t *testing.T, path string) *nftables.Conn {
	t.Helper()
	fd, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fd.Close() })
	c, err := nftables.New(nftables.WithNetNSFd(int(fd)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestReplyPath: EnsureReplyPath installs the table and both families'
// rules, changes nothing the second time, repairs each piece removed or
// altered by hand, follows a renamed primary interface, and
// RemoveReplyPath leaves nothing.
func TestReplyPath(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	name := plugPrimary(t, e.tp)
	h := nsHandle(t, e.tp.NodeNS)
	spec := linux.ReplyPathSpec{PrimaryMAC: primaryMAC}

	if _, err := e.dp.EnsureReplyPath(ctx, linux.ReplyPathSpec{PrimaryMAC: "02:00:00:00:00:99"}); !errors.Is(err, linux.ErrNotFound) {
		t.Errorf("ensure for a MAC no device has: %v, want ErrNotFound", err)
	}
	ch, err := e.dp.EnsureReplyPath(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch) != 3 {
		t.Errorf("first ensure: %q, want the table and two rules", ch)
	}
	wantRules := []string{
		fmt.Sprintf("fam %d fwmark 0x2000/0x2000 table 254 proto 222", netlink.FAMILY_V4),
		fmt.Sprintf("fam %d fwmark 0x2000/0x2000 table 254 proto 222", netlink.FAMILY_V6),
	}
	if got := markRules(t, h); strings.Join(got, "\n") != strings.Join(wantRules, "\n") {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantRules, "\n"))
	}
	if p, err := e.dp.ReplyPathProblems(name); err != nil || p != nil {
		t.Errorf("problems after ensure: %q, %v", p, err)
	}
	// nft reads back what the library wrote, comments included.
	out, err := exec.Command("ip", "netns", "exec", nsName(e.tp.NodeNS), "nft", "list", "table", "inet", "enid").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v\n%s", err, out)
	}
	for _, want := range []string{
		`iifname "` + name + `" ct direction original ct mark set ct mark | 0x00002000`,
		`iifname "enid*" meta mark & 0x00004000 != 0x00000000 ct mark set ct mark | 0x00002000`,
		`iifname "enid*" ct mark & 0x00002000 != 0x00000000 meta mark set meta mark | 0x00002000`,
		`type filter hook prerouting priority filter; policy accept;`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("nft list table inet enid lacks %q:\n%s", want, out)
		}
	}
	if ch, err := e.dp.EnsureReplyPath(ctx, spec); err != nil || len(ch) != 0 {
		t.Errorf("second ensure: %q, %v; want no change", ch, err)
	}

	// Drift: each repaired by one ensure.
	v4 := netlink.NewRule()
	v4.Priority, v4.Mark, v4.Table, v4.Protocol = linux.PrioMarked, linux.MarkPrimary, unix.RT_TABLE_MAIN, linux.Proto
	m := uint32(linux.MarkPrimary)
	v4.Mask = &m
	if err := h.RuleDel(v4); err != nil {
		t.Fatal(err)
	}
	if p, _ := e.dp.ReplyPathProblems(name); len(p) != 1 {
		t.Errorf("problems with the IPv4 rule gone: %q", p)
	}
	if err := h.RuleAdd(v4); err != nil { // and a second copy of the IPv6 rule
		t.Fatal(err)
	}
	dup := *v4
	dup.Family = netlink.FAMILY_V6
	dup.Table = 100 // a wrong table at enid's priority
	if err := h.RuleAdd(&dup); err != nil {
		t.Fatal(err)
	}
	if p, _ := e.dp.ReplyPathProblems(name); len(p) != 1 || !strings.HasPrefix(p[0], "unexpected rule ipv6") {
		t.Errorf("problems with a wrong IPv6 rule at enid's priority: %q", p)
	}
	if ch, err := e.dp.EnsureReplyPath(ctx, spec); err != nil || len(ch) != 1 || !strings.HasPrefix(ch[0], "delete rule ipv6") {
		t.Errorf("ensure after a wrong IPv6 rule: %q, %v", ch, err)
	}
	c := nftIn(t, e.tp.NodeNS)
	c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: linux.NFTable})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if ch, err := e.dp.EnsureReplyPath(ctx, spec); err != nil || len(ch) != 1 || !strings.Contains(ch[0], "no nftables table") {
		t.Errorf("ensure after the table was deleted: %q, %v", ch, err)
	}
	// A rule deleted from the chain.
	out, err = exec.Command("ip", "netns", "exec", nsName(e.tp.NodeNS), "nft", "-a", "list", "chain", "inet", "enid", "prerouting").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v\n%s", err, out)
	}
	handle := out[strings.LastIndex(string(out), "# handle ")+len("# handle "):]
	handle = handle[:strings.IndexByte(string(handle), '\n')]
	if out, err := exec.Command("ip", "netns", "exec", nsName(e.tp.NodeNS), "nft", "delete", "rule", "inet", "enid", "prerouting", "handle", string(handle)).CombinedOutput(); err != nil {
		t.Fatalf("nft delete rule: %v\n%s", err, out)
	}
	if ch, err := e.dp.EnsureReplyPath(ctx, spec); err != nil || len(ch) != 1 || !strings.Contains(ch[0], "holds 2 rules, want 3") {
		t.Errorf("ensure after a rule was deleted: %q, %v", ch, err)
	}
	// The primary interface renamed: the table follows it.
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetDown(l); err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetName(l, "ens5"); err != nil {
		t.Fatal(err)
	}
	if ch, err := e.dp.EnsureReplyPath(ctx, spec); err != nil || len(ch) != 1 || !strings.Contains(ch[0], "entering on ens5") {
		t.Errorf("ensure after a rename: %q, %v", ch, err)
	}
	if p, err := e.dp.ReplyPathProblems("ens5"); err != nil || p != nil {
		t.Errorf("problems after the rename: %q, %v", p, err)
	}

	ch, err = e.dp.RemoveReplyPath(ctx)
	if err != nil || len(ch) != 3 {
		t.Errorf("remove: %q, %v; want the table and two rules", ch, err)
	}
	if got := markRules(t, h); len(got) != 0 {
		t.Errorf("rules left: %q", got)
	}
	tables, err := nftIn(t, e.tp.NodeNS).ListTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb.Name == linux.NFTable {
			t.Errorf("table %s left", tb.Name)
		}
	}
	if ch, err := e.dp.RemoveReplyPath(ctx); err != nil || len(ch) != 0 {
		t.Errorf("second remove: %q, %v", ch, err)
	}
}

// BenchmarkReplyPathConverged measures EnsureReplyPath on a node where it
// is in place (what each full observation costs the agent).
func BenchmarkReplyPathConverged(b *testing.B) {
	e := newEnv(b, 1)
	ctx := ctxT(b)
	if err := e.tp.PlugENI(primaryMAC, primaryIP, primaryCIDR, primaryGW); err != nil {
		b.Fatal(err)
	}
	spec := linux.ReplyPathSpec{PrimaryMAC: primaryMAC}
	if _, err := e.dp.EnsureReplyPath(ctx, spec); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if ch, err := e.dp.EnsureReplyPath(ctx, spec); err != nil || len(ch) != 0 {
			b.Fatal(ch, err)
		}
	}
}
