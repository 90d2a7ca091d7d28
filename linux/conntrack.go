package linux

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/enidnet/enid/observed"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// This file removes the node's conntrack entries that name a pod address
// when the address is bound to a pod and when it is released.
//
// Why: an address released by one pod and bound to another carries the
// old pod's connections. kube-proxy's DNAT of a Service to the old pod
// lives in the node's conntrack table, and a SYN_SENT entry lives 120 s,
// longer than a 30 s reuse cooldown (pool.cooldown): a client still
// retransmitting to the old pod reaches the new one, which may serve
// something else entirely (aws-vpc-cni #3634; no peer flushes). With the
// entries gone, the next packet is NATed afresh by the Service rules.
//
// When: a new binding is the moment the node starts routing the address
// to this attachment's veth (ensureHostRoutes added the route), so an
// agent restart or a repair that finds the route in place leaves a live
// pod's connections alone; the entries are removed after the route is in
// place, so none made before it survives, and if they cannot be removed
// the route is taken back, so the next attempt finds the binding new again
// and the ADD never completes with entries left. At release (teardown),
// the entries of every address the attachment held, unless another
// attachment claims it.

// ctFilter matches a conntrack flow naming one address in any of the four
// places a flow carries addresses (original and reply source and
// destination), so one table dump deletes every flow naming any address.
type ctFilter struct {
	ip net.IP
}

// MatchConntrackFlow implements netlink.CustomConntrackFilter.
func (f ctFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	for _, a := range []net.IP{flow.Forward.SrcIP, flow.Forward.DstIP, flow.Reverse.SrcIP, flow.Reverse.DstIP} {
		if a.Equal(f.ip) {
			return true
		}
	}
	return false
}

// flushConntrack deletes the conntrack entries of the node's namespace
// that name any of addrs, and reports how many. A kernel without
// conntrack (or its netlink interface) has no entries to delete: that is
// not an error, and is said once in the changes.
func (d *Datapath) flushConntrack(addrs []netip.Addr, ch *Changes) error {
	addrs = validAddrs(addrs)
	if len(addrs) == 0 {
		return nil
	}
	if d.conntrackEmpty(addrs, ch) {
		return nil
	}
	h, err := netlink.NewHandleAt(d.node.fd, unix.NETLINK_NETFILTER)
	if err != nil {
		if noConntrack(err) {
			ch.add("no conntrack in the node namespace: nothing to flush for %s", joinAddrs(addrs))
			return nil
		}
		return fmt.Errorf("conntrack handle: %w", mapErr(err))
	}
	defer h.Close()
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		var filters []netlink.CustomConntrackFilter
		var named []netip.Addr
		for _, a := range addrs {
			if familyOf(a) == fam {
				filters = append(filters, ctFilter{ip: net.IP(a.AsSlice())})
				named = append(named, a)
			}
		}
		if len(filters) == 0 {
			continue
		}
		var n uint
		for i := 0; ; i++ {
			// An interrupted dump deletes what it saw; start again until a
			// whole one ran, so no entry of the address is left behind.
			k, derr := h.ConntrackDeleteFilters(netlink.ConntrackTable, netlink.InetFamily(fam), filters...)
			n, err = n+k, derr
			if !errors.Is(err, netlink.ErrDumpInterrupted) || i >= maxDumpRetries {
				break
			}
		}
		if err != nil {
			if noConntrack(err) {
				ch.add("no conntrack in the node namespace: nothing to flush for %s", joinAddrs(named))
				continue
			}
			return fmt.Errorf("delete conntrack entries of %s: %w", joinAddrs(named), mapErr(err))
		}
		if n > 0 {
			ch.add("delete %d conntrack entries naming %s", n, joinAddrs(named))
		}
	}
	return nil
}

// conntrackEmpty reports whether the node namespace holds no conntrack
// entry, so that nothing can name addrs. The dump a flush makes walks
// every bucket of the kernel's conntrack hash, which all namespaces share
// (262,144 buckets here): 10-20 ms of kernel time whatever the namespace
// holds, twice per pod (bind and release). The namespace's own count
// costs no walk. A count that could not be read (an older kernel's
// answer) is no reason to skip: the dump decides.
func (d *Datapath) conntrackEmpty(addrs []netip.Addr, ch *Changes) bool {
	n, err := conntrackEntries(d.node.fd)
	if err != nil && noConntrack(err) {
		ch.add("no conntrack in the node namespace: nothing to flush for %s", joinAddrs(addrs))
		return true
	}
	return err == nil && n == 0
}

// IPCTNL_MSG_CT_GET_STATS and CTA_STATS_GLOBAL_ENTRIES
// (linux/netfilter/nfnetlink_conntrack.h), which vishvananda/netlink does
// not name.
const (
	ipctnlMsgCtGetStats   = 5
	ctaStatsGlobalEntries = 1
)

// conntrackEntries returns how many conntrack entries the namespace ns
// holds: the kernel's count for that namespace (nf_conntrack_count), which
// IPCTNL_MSG_CT_GET_STATS answers without walking the table. The answer is
// one message flagged NLM_F_MULTI with no NLMSG_DONE after it, which
// netlink's request loop would wait on: the socket is read here, once.
func conntrackEntries(ns netns.NsHandle) (uint32, error) {
	sock, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_NETFILTER)
	if err != nil {
		return 0, err
	}
	defer sock.Close()
	// The kernel answers at once; a bound keeps a lost answer from
	// holding a pod's setup.
	tv := unix.NsecToTimeval(time.Second.Nanoseconds())
	if err := sock.SetReceiveTimeout(&tv); err != nil {
		return 0, err
	}
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_CTNETLINK<<8|ipctnlMsgCtGetStats, 0)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_UNSPEC, Version: nl.NFNETLINK_V0})
	if err := sock.Send(req); err != nil {
		return 0, err
	}
	msgs, _, err := sock.Receive()
	if err != nil {
		return 0, err
	}
	for _, m := range msgs {
		switch {
		case m.Header.Seq != req.Seq:
			continue
		case m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4:
			if errno := int32(nl.NativeEndian().Uint32(m.Data[:4])); errno != 0 {
				return 0, syscall.Errno(-errno)
			}
			continue
		case len(m.Data) < nl.SizeofNfgenmsg:
			continue
		}
		attrs, err := nl.ParseRouteAttr(m.Data[nl.SizeofNfgenmsg:])
		if err != nil {
			return 0, fmt.Errorf("conntrack stats: %w", err)
		}
		for _, a := range attrs {
			if a.Attr.Type&nl.NLA_TYPE_MASK == ctaStatsGlobalEntries && len(a.Value) == 4 {
				return binary.BigEndian.Uint32(a.Value), nil
			}
		}
	}
	return 0, errors.New("conntrack stats: no entry count in the answer")
}

// validAddrs returns addrs less the zero ones (an attachment without an
// IPv4 or IPv6 address), in a new slice.
func validAddrs(addrs []netip.Addr) []netip.Addr {
	return slices.DeleteFunc(slices.Clone(addrs), func(a netip.Addr) bool { return !a.IsValid() })
}

// noConntrack reports an error that means the namespace has no conntrack
// table to speak of (nf_conntrack or nf_conntrack_netlink not loaded).
func noConntrack(err error) bool {
	return errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP)
}

func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// bindFresh completes a new binding: the conntrack entries naming the
// addresses just routed to hv go. When they cannot, the routes are taken
// back (so the binding is new again at the next attempt) and the error
// returned.
func (d *Datapath) bindFresh(hv netlink.Link, added []netip.Addr, ch *Changes) error {
	if len(added) == 0 {
		return nil
	}
	err := d.flushConntrack(added, ch)
	if err == nil {
		return nil
	}
	for _, a := range added {
		r := &netlink.Route{LinkIndex: hv.Attrs().Index, Dst: hostPrefix(a), Table: unix.RT_TABLE_MAIN, Family: familyOf(a)}
		if derr := d.node.h.RouteDel(r); derr != nil && !isNotFound(mapErr(derr)) {
			return errors.Join(err, fmt.Errorf("take back route %s: %w", a, mapErr(derr)))
		}
		ch.add("delete route %s dev %s: its conntrack entries could not be flushed", hostPrefix(a), hv.Attrs().Name)
	}
	return err
}

// unclaimed returns addrs less those a veth labelled for another
// attachment claims (an address never leaves a pod that holds it).
func (d *Datapath) unclaimed(key observed.AttachmentKey, addrs []netip.Addr) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range addrs {
		if a.IsValid() && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	links, err := dump("list links", d.node.h.LinkList)
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		if lab, ok := parseLabel(l.Attrs().Alias); ok && lab.Key != key {
			out = slices.DeleteFunc(out, func(a netip.Addr) bool { return a == lab.IPv4 || a == lab.IPv6 })
		}
	}
	return out, nil
}

// releaseConntrack deletes the node's conntrack entries naming the
// addresses an attachment held, except those another attachment claims.
func (d *Datapath) releaseConntrack(key observed.AttachmentKey, addrs []netip.Addr, ch *Changes) error {
	// Asked before unclaimed's dump of every link, which grows with the
	// pods on the node.
	if valid := validAddrs(addrs); len(valid) == 0 || d.conntrackEmpty(valid, ch) {
		return nil
	}
	free, err := d.unclaimed(key, addrs)
	if err != nil {
		return err
	}
	return d.flushConntrack(free, ch)
}
