package planner

// This file indexes the pod addresses of usable ENIs: one sorted slice,
// searched by binary search, that also records who holds each address
// while a pass plans.

import (
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"
)

// indexAddrs builds addrIdx: the secondary addresses of every usable ENI
// and the addresses of its IPv4 prefixes (exclusive mode: each ENI's primary address and first IPv6).
func (b *builder) indexAddrs() {
	n := 0
	for _, e := range b.usable {
		n += v4Addrs(e.eni) + len(e.eni.IPv6) + 1
	}
	b.addrIdx = make([]addrRef, 0, n)
	for _, e := range b.usable {
		a4, a6 := e.eni.IPv4, e.eni.IPv6
		if b.excl {
			a4, a6 = []netip.Addr{e.eni.PrimaryIP}, a6[:min(1, len(a6))]
		}
		for _, a := range a4 {
			hi, lo := addrKey(a)
			b.addrIdx = append(b.addrIdx, addrRef{hi: hi, lo: lo, ip: a, eni: e})
		}
		if !b.excl {
			// Every address of a prefix is a pod address.
			for _, p := range e.eni.IPv4Prefixes {
				a := p.Masked().Addr()
				for range prefixSize {
					hi, lo := addrKey(a)
					b.addrIdx = append(b.addrIdx, addrRef{hi: hi, lo: lo, ip: a, eni: e, inPfx: true})
					a = a.Next()
				}
			}
		}
		for _, a := range a6 {
			hi, lo := addrKey(a)
			b.addrIdx = append(b.addrIdx, addrRef{hi: hi, lo: lo, ip: a, eni: e})
		}
	}
	slices.SortFunc(b.addrIdx, func(x, y addrRef) int { return cmp.Or(cmp.Compare(x.hi, y.hi), cmp.Compare(x.lo, y.lo)) })
}

// addrKey is the address as two integers: cheap to compare.
func addrKey(a netip.Addr) (hi, lo uint64) {
	b := a.As16()
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
}

// slot returns the index entry of a pod address of a usable ENI, or nil.
func (b *builder) slot(ip netip.Addr) *addrRef {
	if !ip.IsValid() {
		return nil
	}
	hi, lo := addrKey(ip)
	i, j := 0, len(b.addrIdx)
	for i < j {
		m := int(uint(i+j) >> 1)
		if r := &b.addrIdx[m]; r.hi < hi || (r.hi == hi && r.lo < lo) {
			i = m + 1
		} else {
			j = m
		}
	}
	if i < len(b.addrIdx) && b.addrIdx[i].hi == hi && b.addrIdx[i].lo == lo {
		return &b.addrIdx[i]
	}
	return nil
}

// eniOf finds the usable ENI that has ip as a pod address.
func (b *builder) eniOf(ip netip.Addr) *eniState {
	if s := b.slot(ip); s != nil {
		return s.eni
	}
	return nil
}

// addrRef is one pod address of a usable ENI and who holds it.
type addrRef struct {
	hi, lo uint64 // addrKey(ip)
	ip     netip.Addr
	eni    *eniState
	h      *holder
	// inPfx: the address lies in one of the ENI's IPv4 prefixes.
	inPfx bool
}
