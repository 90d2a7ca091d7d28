package planner

// This file indexes the pod addresses of usable ENIs: one sorted slice,
// searched by binary search, that also records who holds each address
// while a pass plans.

import (
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"
)

// indexAddrs builds addrIdx: the secondary addresses of every usable ENI
// and the addresses of its IPv4 prefixes (exclusive mode: each ENI's primary address and first IPv6).
func (b *builder) indexAddrs() {
	n := 0
	for _, e := range b.usable {
		n += v4Addrs(e.eni) + len(e.eni.IPv6) + 1
	}
	b.addrIdx = b.sc.addrs(n)
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
	// Ties (one address listed twice) by ENI ID: which entry comes first
	// must not depend on the sort.
	slices.SortFunc(b.addrIdx, func(x, y addrRef) int {
		if c := cmp.Or(cmp.Compare(x.hi, y.hi), cmp.Compare(x.lo, y.lo)); c != 0 {
			return c
		}
		return strings.Compare(x.eni.eni.ID, y.eni.eni.ID)
	})
	b.markDuplicates()
}

// markDuplicates marks every address the index holds more than once and
// names each in the plan's problems. ECS never gives one address to two
// ENIs, so one of the describes is stale: a prefix or address was
// unassigned from one ENI and given to another, and the first ENI's
// describe still shows it. Both entries are kept, so a pod bound to the
// address keeps its binding (on the ENI its kernel state or status
// names, claim); but the address is handed to no new pod (computeFree
// leaves it out of the free lists, a sticky pod waits for it) and nothing
// holding it is released (prefixFree), until one observation shows it once.
// Otherwise slot() would find one entry, a binding would mark that one
// held, and the other would stay free for a second pod: one address bound
// twice (DESIGN.md, invariant 2).
func (b *builder) markDuplicates() {
	idx := b.addrIdx
	for i := 1; i < len(idx); i++ {
		x, y := &idx[i-1], &idx[i]
		if x.hi != y.hi || x.lo != y.lo {
			continue
		}
		if !x.dup {
			// The first entry of a group: name every ENI listing it.
			ids := []string{x.eni.eni.ID}
			for j := i; j < len(idx) && idx[j].hi == x.hi && idx[j].lo == x.lo; j++ {
				ids = append(ids, idx[j].eni.eni.ID)
			}
			b.plan.Problems = append(b.plan.Problems, "address "+x.ip.String()+" is listed on ENIs "+strings.Join(ids, " and ")+
				" (a describe is stale): it is handed to no new pod and not released until the cloud lists it once")
		}
		x.dup, y.dup = true, true
	}
}

// addrKey is the address as two integers: cheap to compare.
func addrKey(a netip.Addr) (hi, lo uint64) {
	b := a.As16()
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
}

// slot returns the index entry of a pod address of a usable ENI, or nil.
// An address listed more than once (dup) has its first entry returned:
// that one records who holds it.
func (b *builder) slot(ip netip.Addr) *addrRef {
	if i := b.slotIndex(ip); i >= 0 {
		return &b.addrIdx[i]
	}
	return nil
}

// slotIndex is the index in addrIdx of the first entry of ip, or -1.
func (b *builder) slotIndex(ip netip.Addr) int {
	if !ip.IsValid() {
		return -1
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
		return i
	}
	return -1
}

// dupENI is, for an address listed on more than one ENI (s.dup, s its
// first entry), the ENI of the entry on want, or the first entry's ENI
// when none is on want.
func (b *builder) dupENI(s *addrRef, want *eniState) *eniState {
	if want == nil {
		return s.eni
	}
	for i := b.slotIndex(s.ip); i < len(b.addrIdx) && b.addrIdx[i].hi == s.hi && b.addrIdx[i].lo == s.lo; i++ {
		if b.addrIdx[i].eni == want {
			return want
		}
	}
	return s.eni
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
	// dup: the address is listed on more than one entry (markDuplicates).
	dup bool
}
