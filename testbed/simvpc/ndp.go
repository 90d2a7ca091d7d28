package simvpc

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The VPC's router answers ARP and neighbour discovery for every address
// of a vSwitch: an exclusive-ENI pod, which holds its vSwitch's prefix
// (IPv4) or /64 (IPv6) on link, reaches another ENI of the vSwitch
// through the VPC. For IPv4, proxy_arp on each vpc veth does it (the
// kernel answers for any address routed out of another device). IPv6 has
// no such switch: Linux answers a solicitation only for an address with a
// proxy entry on the device it arrives on (and an entry needs a device).
// So the vpc keeps one entry per routed IPv6 address on every ENI veth,
// and ndp keeps that product up to date as veths are plugged and
// addresses routed (`ip -n <vpc> -6 neigh show proxy` lists them).
type ndp struct {
	mu sync.Mutex // serializes changes, so no veth or address is missed
	// devs are the ENI veths (vpc end) by name, with their index.
	devs map[string]int
	// addrs are the routed IPv6 addresses and the veth each is routed to.
	addrs map[netip.Addr]string
}

// addDev proxies every routed address on a new veth.
func (p *ndp) addDev(h *netlink.Handle, name string, index int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.devs == nil {
		p.devs = map[string]int{}
	}
	p.devs[name] = index
	for a := range p.addrs {
		if err := h.NeighSet(proxyNeigh(index, a)); err != nil {
			return fmt.Errorf("proxy neighbour %s on %s: %w", a, name, err)
		}
	}
	return nil
}

// addAddr proxies a newly routed address on every veth.
func (p *ndp) addAddr(h *netlink.Handle, a netip.Addr, owner string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.addrs == nil {
		p.addrs = map[netip.Addr]string{}
	}
	p.addrs[a] = owner
	for name, index := range p.devs {
		if err := h.NeighSet(proxyNeigh(index, a)); err != nil {
			return fmt.Errorf("proxy neighbour %s on %s: %w", a, name, err)
		}
	}
	return nil
}

// delAddr stops proxying an unrouted address.
func (p *ndp) delAddr(h *netlink.Handle, a netip.Addr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delAddrLocked(h, a)
}

func (p *ndp) delAddrLocked(h *netlink.Handle, a netip.Addr) error {
	delete(p.addrs, a)
	for name, index := range p.devs {
		if err := h.NeighDel(proxyNeigh(index, a)); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove proxy neighbour %s on %s: %w", a, name, err)
		}
	}
	return nil
}

// delDev forgets a veth about to be deleted (its own entries go with
// it) and stops proxying the addresses routed to it.
func (p *ndp) delDev(h *netlink.Handle, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.devs, name)
	for a, owner := range p.addrs {
		if owner != name {
			continue
		}
		if err := p.delAddrLocked(h, a); err != nil {
			return err
		}
	}
	return nil
}

// proxyNeigh is the proxy entry of an IPv6 address on a device.
func proxyNeigh(index int, a netip.Addr) *netlink.Neigh {
	return &netlink.Neigh{LinkIndex: index, Family: unix.AF_INET6, Flags: netlink.NTF_PROXY, IP: a.AsSlice()}
}
