package ecssim_test

import (
	"crypto/rand"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/internal/roottest"
)

// newNetNS creates a named network namespace without leaving the test's
// thread in it, and removes it at cleanup.
func newNetNS(t *testing.T) *netlink.Handle {
	t.Helper()
	name := "ecssim-" + strings.ToLower(rand.Text()[:8])
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Set(orig); err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Close()
		ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Error(err)
		}
	})
	return h
}

func linkByMAC(h *netlink.Handle, mac string) (netlink.Link, error) {
	links, err := h.LinkList()
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		if l.Attrs().HardwareAddr.String() == mac {
			return l, nil
		}
	}
	return nil, nil
}

// TestHooksPlugDevice plays the node with a network namespace: the attach
// hook gives the ENI a device (a veth) carrying its MAC there, the detach hook
// removes it. A client that sees InUse finds the device; one whose detach
// call returned finds it gone.
func TestHooksPlugDevice(t *testing.T) {
	roottest.Need(t)
	h := newNetNS(t)
	e := newEnv(t, ecssim.Config{Delays: ecssim.Delays{Attach: 20 * time.Millisecond}})
	var mu sync.Mutex
	var hookErrs []error
	fail := func(err error) {
		mu.Lock()
		hookErrs = append(hookErrs, err)
		mu.Unlock()
	}
	e.sim.SetHooks(ecssim.Hooks{
		OnAttach: func(ev ecssim.ENIEvent) {
			mac, err := net.ParseMAC(ev.MAC)
			if err != nil {
				fail(err)
				return
			}
			// A veth (its peer stays beside it) stands for the ENI's device.
			suffix := ev.ENIID[len(ev.ENIID)-4:]
			l := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eni" + suffix, HardwareAddr: mac}, PeerName: "peer" + suffix}
			if err := h.LinkAdd(l); err != nil {
				fail(err)
			}
		},
		OnDetach: func(ev ecssim.ENIEvent) {
			l, err := linkByMAC(h, ev.MAC)
			if err == nil && l != nil {
				err = h.LinkDel(l)
			}
			if err != nil {
				fail(err)
			}
		},
	})

	eni := e.createENI(t, 0)
	if err := attach(t, e, eni.NetworkInterfaceId); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, eni.NetworkInterfaceId, "InUse")
	if l, err := linkByMAC(h, eni.MacAddress); err != nil || l == nil {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("no device with MAC %s once InUse (%v; hooks: %v)", eni.MacAddress, err, hookErrs)
	}
	de := ecs.CreateDetachNetworkInterfaceRequest()
	de.NetworkInterfaceId = eni.NetworkInterfaceId
	if _, err := e.ecs.DetachNetworkInterface(de); err != nil {
		t.Fatal(err)
	}
	if l, err := linkByMAC(h, eni.MacAddress); err != nil || l != nil {
		t.Errorf("device %v still there after detach returned (%v)", l, err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range hookErrs {
		t.Error(err)
	}
}
