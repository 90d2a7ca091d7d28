package linux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// linkByName returns the named link, or an error wrapping ErrNotFound.
func linkByName(h *netlink.Handle, name string) (netlink.Link, error) {
	l, err := h.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("link %s: %w", name, mapErr(err))
	}
	return l, nil
}

// linkByMAC returns the link with hardware address mac, or ErrNotFound.
func linkByMAC(h *netlink.Handle, mac net.HardwareAddr) (netlink.Link, error) {
	links, err := dump("list links", h.LinkList)
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		if bytes.Equal(l.Attrs().HardwareAddr, mac) {
			return l, nil
		}
	}
	return nil, fmt.Errorf("link with mac %s: %w", mac, ErrNotFound)
}

// waitForMAC polls for a link with the MAC for up to wait: an attached
// ENI's device can show up a while after the cloud says it is attached.
func waitForMAC(ctx context.Context, h *netlink.Handle, mac net.HardwareAddr, wait time.Duration) (netlink.Link, error) {
	const poll = 50 * time.Millisecond
	// The wall clock, not the agent's: this waits on the kernel, which
	// makes the device in real time. A virtual-time agent (tests, the
	// simulation) runs the no-datapath mode, which never waits.
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		l, err := linkByMAC(h, mac)
		if err == nil || !isNotFound(err) {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for device %s: %w", mac, ctx.Err())
		case <-deadline.C:
			return nil, fmt.Errorf("device %s did not appear within %s: %w", mac, wait, ErrNotFound)
		case <-tick.C:
		}
	}
}

// ensureLink brings l up with the given MTU (0 leaves the MTU alone).
func ensureLink(h *netlink.Handle, l netlink.Link, mtu int, where string, ch *Changes) error {
	a := l.Attrs()
	if mtu > 0 && a.MTU != mtu {
		if err := h.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("set mtu of %s: %w", a.Name, mapErr(err))
		}
		ch.add("set mtu %d on %s%s (was %d)", mtu, a.Name, where, a.MTU)
	}
	if a.Flags&net.FlagUp == 0 {
		if err := h.LinkSetUp(l); err != nil {
			return fmt.Errorf("set %s up: %w", a.Name, mapErr(err))
		}
		ch.add("set %s%s up", a.Name, where)
	}
	return nil
}

// ensureAlias sets the link's alias to want.
func ensureAlias(h *netlink.Handle, l netlink.Link, want, where string, ch *Changes) error {
	if l.Attrs().Alias == want {
		return nil
	}
	if err := h.LinkSetAlias(l, want); err != nil {
		return fmt.Errorf("set alias of %s: %w", l.Attrs().Name, mapErr(err))
	}
	ch.add("set alias of %s%s to %q", l.Attrs().Name, where, want)
	return nil
}

func isUp(l netlink.Link) bool { return l.Attrs().Flags&net.FlagUp != 0 }

func isNotFound(err error) bool { return err != nil && errors.Is(err, ErrNotFound) }

// isOnlink reports whether a route carries the onlink flag.
func isOnlink(r netlink.Route) bool { return r.Flags&unix.RTNH_F_ONLINK != 0 }

// isDefault reports whether a route is a default route.
func isDefault(r netlink.Route) bool {
	if r.Dst == nil {
		return true
	}
	ones, _ := r.Dst.Mask.Size()
	return ones == 0
}
