package linux

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ENISpec is how one secondary ENI's device is configured in shared mode.
type ENISpec struct {
	// MAC finds the device (lower-case, colon separated).
	MAC string
	// Table is the ENI's route table id (the planner uses 1000 + device
	// index); it must not be 0, 253, 254 or 255.
	Table int
	// Gateway is the vSwitch's IPv4 gateway.
	Gateway netip.Addr
	// GatewayV6 is the IPv6 gateway; the zero Addr means no IPv6.
	GatewayV6 netip.Addr
	// MTU is the device MTU; 0 leaves it alone.
	MTU int
	// WaitForDevice bounds how long EnsureENI waits for the device to
	// appear; 0 means look once.
	WaitForDevice time.Duration
}

func validTable(t int) error {
	if t <= 0 || t == unix.RT_TABLE_DEFAULT || t == unix.RT_TABLE_MAIN || t == unix.RT_TABLE_LOCAL {
		return fmt.Errorf("route table %d is reserved or invalid", t)
	}
	return nil
}

// EnsureENI configures the ENI device: sysctls (forwarding on, rp_filter
// off, accept_ra off), MTU, up, and in the ENI's table
// "default via <gateway> dev <device> onlink" (and the IPv6 one). It waits
// up to WaitForDevice for the device and returns an error wrapping
// ErrNotFound if it never appears.
func (d *Datapath) EnsureENI(ctx context.Context, s ENISpec) (Changes, error) {
	mac, err := normMAC(s.MAC)
	if err != nil {
		return nil, err
	}
	if err := validTable(s.Table); err != nil {
		return nil, fmt.Errorf("ensure eni %s: %w", s.MAC, err)
	}
	if !s.Gateway.Is4() {
		return nil, fmt.Errorf("ensure eni %s: ipv4 gateway %v is not valid", s.MAC, s.Gateway)
	}
	l, err := waitForMAC(ctx, d.node.h, mac, s.WaitForDevice)
	if err != nil {
		return nil, fmt.Errorf("ensure eni %s: %w", s.MAC, err)
	}
	name := l.Attrs().Name
	var ch Changes
	defer d.logChanges("ensure eni", s.MAC, &ch)
	set := []sysctl{
		{path: []string{"net", "ipv4", "ip_forward"}, value: "1"},
		{path: []string{"net", "ipv4", "conf", name, "forwarding"}, value: "1"},
		{path: []string{"net", "ipv4", "conf", name, "rp_filter"}, value: "0"},
		// A router must not take a default route from RAs; harmless
		// without IPv6, so skipped where IPv6 is disabled.
		{path: []string{"net", "ipv6", "conf", name, "accept_ra"}, value: "0", optional: !s.GatewayV6.IsValid()},
	}
	if s.GatewayV6.IsValid() {
		set = append(set, sysctl{path: []string{"net", "ipv6", "conf", "all", "forwarding"}, value: "1"})
	}
	done, err := d.node.ensureSysctls(set)
	ch = append(ch, done...)
	if err != nil {
		return ch, fmt.Errorf("ensure eni %s: %w", s.MAC, err)
	}
	if err := ensureLink(d.node.h, l, s.MTU, "", &ch); err != nil {
		return ch, fmt.Errorf("ensure eni %s: %w", s.MAC, err)
	}
	for _, gw := range podIPs(s.Gateway, s.GatewayV6) {
		if err := d.ensureTableDefault(l, s.Table, gw, &ch); err != nil {
			return ch, fmt.Errorf("ensure eni %s: %w", s.MAC, err)
		}
	}
	return ch, nil
}

// ensureTableDefault makes the table hold exactly one default route of
// gw's family: via gw out of l, onlink.
func (d *Datapath) ensureTableDefault(l netlink.Link, table int, gw netip.Addr, ch *Changes) error {
	fam := familyOf(gw)
	routes, err := dump("list routes", func() ([]netlink.Route, error) {
		return d.node.h.RouteListFiltered(fam, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return err
	}
	var good, bad []netlink.Route
	for _, r := range routes {
		if !isDefault(r) {
			continue
		}
		if r.LinkIndex == l.Attrs().Index && addrOf(r.Gw) == gw && isOnlink(r) && r.Protocol == Proto && len(good) == 0 {
			good = append(good, r)
		} else {
			bad = append(bad, r)
		}
	}
	for _, r := range bad {
		if err := d.node.h.RouteDel(&r); err != nil && !isNotFound(mapErr(err)) {
			return fmt.Errorf("delete stale default route in table %d: %w", table, mapErr(err))
		}
		ch.add("delete default via %s dev ifindex %d table %d", addrOf(r.Gw), r.LinkIndex, table)
	}
	if len(good) == 1 {
		return nil
	}
	r := &netlink.Route{
		LinkIndex: l.Attrs().Index,
		Gw:        gw.AsSlice(),
		Table:     table,
		Flags:     unix.RTNH_F_ONLINK,
		Protocol:  Proto,
		Family:    fam,
	}
	if err := d.node.h.RouteReplace(r); err != nil {
		return fmt.Errorf("add default via %s dev %s table %d: %w", gw, l.Attrs().Name, table, mapErr(err))
	}
	ch.add("add default via %s dev %s onlink table %d", gw, l.Attrs().Name, table)
	return nil
}

// RemoveENI undoes EnsureENI's routing: it flushes the ENI's table and
// deletes enid's rules pointing at it. The device may already be gone;
// its sysctls are left as they are.
func (d *Datapath) RemoveENI(ctx context.Context, mac string, table int) (Changes, error) {
	if err := validTable(table); err != nil {
		return nil, fmt.Errorf("remove eni %s: %w", mac, err)
	}
	var ch Changes
	defer d.logChanges("remove eni", mac, &ch)
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		if err := ctx.Err(); err != nil {
			return ch, fmt.Errorf("remove eni %s: %w", mac, err)
		}
		routes, err := dump("list routes", func() ([]netlink.Route, error) {
			return d.node.h.RouteListFiltered(fam, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
		})
		if err != nil {
			return ch, fmt.Errorf("remove eni %s: %w", mac, err)
		}
		for _, r := range routes {
			if err := d.node.h.RouteDel(&r); err != nil && !isNotFound(mapErr(err)) {
				return ch, fmt.Errorf("remove eni %s: delete route %s table %d: %w", mac, routeString(r), table, mapErr(err))
			}
			ch.add("delete route %s table %d", routeString(r), table)
		}
		rules, err := d.listRules(fam)
		if err != nil {
			return ch, fmt.Errorf("remove eni %s: %w", mac, err)
		}
		for _, r := range rules {
			if r.Table == table && r.Protocol == Proto {
				if err := d.delRule(r, &ch); err != nil {
					return ch, fmt.Errorf("remove eni %s: %w", mac, err)
				}
			}
		}
	}
	return ch, nil
}

// routeString renders a route briefly for change lines.
func routeString(r netlink.Route) string {
	dst := "default"
	if !isDefault(r) {
		dst = prefixOf(r.Dst).String()
	}
	s := dst
	if r.Gw != nil {
		s += " via " + addrOf(r.Gw).String()
	}
	return fmt.Sprintf("%s dev ifindex %d", s, r.LinkIndex)
}
