package linux_test

import (
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// dumpNS renders what a namespace holds, one sorted line per link,
// address, route (every table), rule and permanent neighbour, in the
// spirit of `ip -d link; ip addr; ip route show table all; ip rule; ip neigh
// nud permanent`. Dynamic neighbours are left out: they come and go with
// traffic.
func dumpNS(t testing.TB, path string) string {
	t.Helper()
	fd, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer fd.Close()
	h, err := netlink.NewHandleAt(fd, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatalf("handle: %v", err)
	}
	defer h.Close()
	retry := func(what string, f func() error) {
		for i := 0; ; i++ {
			err := f()
			if err == nil {
				return
			}
			if i > 5 {
				t.Fatalf("%s: %v", what, err)
			}
		}
	}
	var lines []string
	var links []netlink.Link
	retry("links", func() (err error) { links, err = h.LinkList(); return })
	names := map[int]string{}
	for _, l := range links {
		a := l.Attrs()
		names[a.Index] = a.Name
		lines = append(lines, fmt.Sprintf("link %s %s mac=%s mtu=%d up=%v alias=%q", a.Name, l.Type(), a.HardwareAddr, a.MTU, a.Flags&net.FlagUp != 0, a.Alias))
		var qs []netlink.Qdisc
		retry("qdiscs", func() (err error) { qs, err = h.QdiscList(l); return })
		for _, q := range qs {
			if q.Type() != "noqueue" {
				lines = append(lines, fmt.Sprintf("qdisc %s dev %s", q.Type(), a.Name))
			}
		}
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		var addrs []netlink.Addr
		retry("addrs", func() (err error) { addrs, err = h.AddrList(nil, fam); return })
		for _, a := range addrs {
			if a.IP.IsLinkLocalUnicast() {
				continue // kernel-made, and its timing depends on link up
			}
			lines = append(lines, fmt.Sprintf("addr %s dev %s", a.IPNet, names[a.LinkIndex]))
		}
		var routes []netlink.Route
		retry("routes", func() (err error) {
			routes, err = h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
			return
		})
		for _, r := range routes {
			if r.Dst != nil && r.Dst.IP.IsLinkLocalUnicast() || r.Dst != nil && r.Dst.IP.IsLinkLocalMulticast() || r.Dst != nil && r.Dst.IP.IsMulticast() {
				continue
			}
			lines = append(lines, fmt.Sprintf("route %v via %v dev %s table %d proto %d scope %d", r.Dst, r.Gw, names[r.LinkIndex], r.Table, r.Protocol, r.Scope))
		}
		var rules []netlink.Rule
		retry("rules", func() (err error) { rules, err = h.RuleList(fam); return })
		for _, r := range rules {
			lines = append(lines, fmt.Sprintf("rule %d from %v to %v table %d proto %d", r.Priority, r.Src, r.Dst, r.Table, r.Protocol))
		}
		var neighs []netlink.Neigh
		retry("neighbours", func() (err error) { neighs, err = h.NeighList(0, fam); return })
		for _, n := range neighs {
			if n.State&netlink.NUD_PERMANENT != 0 {
				lines = append(lines, fmt.Sprintf("neigh %s lladdr %s dev %s permanent", n.IP, n.HardwareAddr, names[n.LinkIndex]))
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

func countLines(dump, prefix string) int {
	c := 0
	for _, l := range strings.Split(dump, "\n") {
		if strings.HasPrefix(l, prefix) {
			c++
		}
	}
	return c
}

func contains(dump, line string) bool { return strings.Contains(dump, line+"\n") }
