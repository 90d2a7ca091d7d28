package linux

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// watchGroups are the rtnetlink multicast groups Watch listens to: links,
// addresses, routes and policy rules, both families.
var watchGroups = []uint{
	unix.RTNLGRP_LINK,
	unix.RTNLGRP_IPV4_IFADDR, unix.RTNLGRP_IPV6_IFADDR,
	unix.RTNLGRP_IPV4_ROUTE, unix.RTNLGRP_IPV6_ROUTE,
	unix.RTNLGRP_IPV4_RULE, unix.RTNLGRP_IPV6_RULE,
}

// watchRcvBuf is the subscription socket's receive buffer: a burst of pod
// setups makes a few dozen notifications each. When it still overflows,
// events were lost and Watch reports a change.
const watchRcvBuf = 1 << 20

// Watch reports changes in the node namespace that may concern what enid
// owns there: any link or address change (ENI devices, host veths), and
// route and rule changes carrying enid's protocol (Proto: pod host routes,
// ENI table routes, pod rules). Other routes and rules (the node's own,
// another agent's) are ignored. changed is called on Watch's goroutine for
// every such notification, and once when the kernel dropped notifications
// (a full receive buffer); it must not block. Watch returns nil when ctx
// ends, and an error when the subscription fails; the caller subscribes
// again (a change in between is missed, so it should also re-read).
//
// enid's own changes are reported too: the caller tells drift from its own
// work by reading the node again when its own actions are done.
func (d *Datapath) Watch(ctx context.Context, changed func()) error {
	s, err := nl.SubscribeAt(d.node.fd, netns.None(), unix.NETLINK_ROUTE, watchGroups...)
	if err != nil {
		return fmt.Errorf("subscribe to node netlink changes: %w", err)
	}
	// Closing the socket ends a blocked Receive; that is how ctx stops it.
	stop := context.AfterFunc(ctx, s.Close)
	defer func() {
		if stop() {
			s.Close()
		}
	}()
	if err := s.SetReceiveBufferSize(watchRcvBuf, false); err != nil {
		return fmt.Errorf("node netlink watch: receive buffer: %w", err)
	}
	for {
		msgs, _, err := s.Receive()
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, unix.ENOBUFS) {
			changed() // notifications were dropped: whatever they said, look again
			continue
		}
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil {
			return fmt.Errorf("node netlink watch: %w", err)
		}
		for _, m := range msgs {
			if concerns(m) {
				changed()
				break
			}
		}
	}
}

// concerns reports whether a notification may be about something enid owns.
func concerns(m syscall.NetlinkMessage) bool {
	switch m.Header.Type {
	case unix.RTM_NEWLINK, unix.RTM_DELLINK, unix.RTM_NEWADDR, unix.RTM_DELADDR:
		return true
	case unix.RTM_NEWROUTE, unix.RTM_DELROUTE:
		// struct rtmsg: family, dst_len, src_len, tos, table, protocol, ...
		return len(m.Data) >= unix.SizeofRtMsg && m.Data[5] == Proto
	case unix.RTM_NEWRULE, unix.RTM_DELRULE:
		// struct fib_rule_hdr has the size of struct rtmsg; the protocol is
		// the FRA_PROTOCOL attribute after it.
		if len(m.Data) < unix.SizeofRtMsg {
			return false
		}
		attrs, err := nl.ParseRouteAttr(m.Data[unix.SizeofRtMsg:])
		if err != nil {
			return true // cannot tell: look
		}
		for _, a := range attrs {
			if a.Attr.Type == unix.FRA_PROTOCOL && len(a.Value) == 1 {
				return a.Value[0] == Proto
			}
		}
	}
	return false
}
