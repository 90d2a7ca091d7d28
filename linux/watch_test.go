package linux_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enidnet/enid/linux"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestWatchSeesDrift: Watch reports a hand-deleted pod rule and host route
// in the node namespace, ignores routes that are not enid's, and ends with
// its context.
func TestWatchSeesDrift(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	s := e.podSpec(t, 0, 14)
	res, _, err := e.dp.EnsurePod(ctx, s)
	if err != nil {
		t.Fatalf("ensure pod: %v", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	var n atomic.Int64
	done := make(chan error, 1)
	go func() { done <- e.dp.Watch(wctx, func() { n.Add(1) }) }()
	// The subscription starts asynchronously: a change is repeated (undone
	// and done again) until a signal follows it.
	waitSignal := func(what string, change func(h *netlink.Handle) error) {
		t.Helper()
		before := n.Load()
		deadline := time.Now().Add(5 * time.Second)
		for {
			withH(t, e.tp.NodeNS, change)
			for i := 0; i < 50; i++ {
				if n.Load() > before {
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no signal after %s", what)
			}
		}
	}
	host4 := &net.IPNet{IP: s.IPv4.AsSlice(), Mask: net.CIDRMask(32, 32)}
	rule := netlink.NewRule()
	rule.Priority, rule.Src, rule.Table, rule.Protocol, rule.Family = linux.PrioFromPod, host4, 1001, linux.Proto, unix.AF_INET
	waitSignal("rule deleted", func(h *netlink.Handle) error {
		if err := h.RuleDel(rule); err != nil {
			return h.RuleAdd(rule) // already gone: put it back, which signals too
		}
		return nil
	})
	waitSignal("host route deleted", func(h *netlink.Handle) error {
		hv, err := h.LinkByName(res.HostVeth)
		if err != nil {
			return err
		}
		err = h.RouteDel(&netlink.Route{LinkIndex: hv.Attrs().Index, Dst: host4, Table: unix.RT_TABLE_MAIN, Scope: netlink.SCOPE_LINK})
		if err != nil {
			return h.RouteAdd(&netlink.Route{LinkIndex: hv.Attrs().Index, Dst: host4, Table: unix.RT_TABLE_MAIN, Scope: netlink.SCOPE_LINK, Protocol: linux.Proto})
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("watch ended with %v, want nil on cancel", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not end with its context")
	}
}

// TestObserveNodeSkipsPodNS: ObserveNode judges what the node namespace
// holds and leaves the pod's namespace alone.
func TestObserveNodeSkipsPodNS(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	s := e.podSpec(t, 0, 15)
	if _, _, err := e.dp.EnsurePod(ctx, s); err != nil {
		t.Fatalf("ensure pod: %v", err)
	}
	health := func(full bool) (bool, []string) {
		t.Helper()
		read := e.dp.ObserveNode
		if full {
			read = e.dp.Observe
		}
		n, err := read(ctx)
		if err != nil || len(n.Pods) != 1 {
			t.Fatalf("observe: %d pods, %v", len(n.Pods), err)
		}
		return n.Pods[0].Healthy, n.Pods[0].Problems
	}
	withH(t, s.NetNS, func(h *netlink.Handle) error {
		l, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		return h.RouteDel(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, Gw: net.ParseIP("169.254.1.1")})
	})
	if ok, probs := health(true); ok {
		t.Errorf("Observe after the pod's default route went: healthy (%v)", probs)
	}
	if ok, probs := health(false); !ok {
		t.Errorf("ObserveNode after a change in the pod's netns: problems %v, want none", probs)
	}
	withH(t, e.tp.NodeNS, func(h *netlink.Handle) error {
		r := netlink.NewRule()
		r.Priority, r.Src, r.Protocol, r.Family = linux.PrioFromPod, &net.IPNet{IP: s.IPv4.AsSlice(), Mask: net.CIDRMask(32, 32)}, linux.Proto, unix.AF_INET
		return h.RuleDel(r)
	})
	if ok, probs := health(false); ok {
		t.Errorf("ObserveNode after the pod's rule went: healthy (%v)", probs)
	}
}
