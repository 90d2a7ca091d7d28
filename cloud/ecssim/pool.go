package ecssim

import (
	"math/big"
	"net/netip"
)

// pool hands out a vSwitch's addresses. IPv4: the first address and the
// last three of the CIDR are reserved (the third from the end is the
// gateway), as on Alibaba Cloud; a /24 has 252 usable addresses. IPv6:
// offsets from 1 upwards. Allocation walks forward from a cursor and wraps,
// so a released address is reused as late as possible.
type pool struct {
	cidr  netip.Prefix
	cidr6 netip.Prefix
	size  uint64 // usable IPv4 addresses
	used  map[netip.Addr]string
	n4    int    // IPv4 addresses in used
	cur4  uint64 // next IPv4 offset to try (1-based)
	cur6  uint64 // next IPv6 offset to try
}

func newPool(cidr, cidr6 netip.Prefix) *pool {
	bits := 32 - cidr.Bits()
	var size uint64
	if bits >= 3 {
		size = (uint64(1) << bits) - 4
	}
	return &pool{cidr: cidr.Masked(), cidr6: cidr6.Masked(), size: size, used: map[netip.Addr]string{}, cur4: 1, cur6: 1}
}

func (p *pool) available() int { return int(p.size) - p.n4 }

// addr4 returns the IPv4 address at offset off of the CIDR.
func (p *pool) addr4(off uint64) netip.Addr {
	a := p.cidr.Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n += uint32(off)
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// usable4 reports whether a is a usable (not reserved) IPv4 address.
func (p *pool) usable4(a netip.Addr) bool {
	if !a.Is4() || !p.cidr.Contains(a) {
		return false
	}
	b, c := a.As4(), p.cidr.Addr().As4()
	off := (uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])) -
		(uint64(c[0])<<24 | uint64(c[1])<<16 | uint64(c[2])<<8 | uint64(c[3]))
	return off >= 1 && off <= p.size
}

// take4 allocates n IPv4 addresses to eni, or none when fewer are free.
func (p *pool) take4(eni string, n int) ([]netip.Addr, bool) {
	if n > p.available() {
		return nil, false
	}
	out := make([]netip.Addr, 0, n)
	for len(out) < n {
		a := p.addr4(p.cur4)
		p.cur4++
		if p.cur4 > p.size {
			p.cur4 = 1
		}
		if _, ok := p.used[a]; ok {
			continue
		}
		p.used[a] = eni
		p.n4++
		out = append(out, a)
	}
	return out, true
}

// claim marks a as held by eni; the caller has checked it is free.
func (p *pool) claim(eni string, a netip.Addr) {
	p.used[a] = eni
	if a.Is4() {
		p.n4++
	}
}

// release frees a if eni holds it.
func (p *pool) release(eni string, a netip.Addr) {
	if p.used[a] != eni {
		return
	}
	delete(p.used, a)
	if a.Is4() {
		p.n4--
	}
}

// usable6 reports whether a lies in the IPv6 CIDR and is not offset 0.
func (p *pool) usable6(a netip.Addr) bool {
	return p.cidr6.IsValid() && a.Is6() && !a.Is4In6() && p.cidr6.Contains(a) && a != p.cidr6.Addr()
}

// take6 allocates n IPv6 addresses to eni.
func (p *pool) take6(eni string, n int) []netip.Addr {
	base := new(big.Int).SetBytes(p.cidr6.Addr().AsSlice())
	out := make([]netip.Addr, 0, n)
	// A tiny IPv6 CIDR could run out: give up after a full lap.
	for tries := 0; len(out) < n && tries < n+len(p.used)+1024; tries++ {
		v := new(big.Int).Add(base, new(big.Int).SetUint64(p.cur6))
		p.cur6++
		var b [16]byte
		v.FillBytes(b[:])
		a := netip.AddrFrom16(b)
		if !p.cidr6.Contains(a) {
			p.cur6 = 1
			continue
		}
		if _, ok := p.used[a]; ok {
			continue
		}
		p.used[a] = eni
		out = append(out, a)
	}
	return out
}
