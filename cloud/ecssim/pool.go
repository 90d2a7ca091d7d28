package ecssim

import (
	"math/big"
	"net/netip"
)

// pool hands out a vSwitch's addresses. IPv4: the first address and the
// last three of the CIDR are reserved (the third from the end is the
// gateway), as on Alibaba Cloud; a /24 has 252 usable addresses. IPv6:
// offsets from 1 upwards. Allocation walks forward from a cursor and wraps,
// so a released address is reused as late as possible. IPv4 prefixes are
// aligned /28 blocks none of whose 16 addresses is reserved or held; their
// addresses are held in used like single ones, so AvailableIpAddressCount
// drops by 16 per prefix.
type pool struct {
	cidr  netip.Prefix
	cidr6 netip.Prefix
	size  uint64 // usable IPv4 addresses
	used  map[netip.Addr]string
	n4    int    // IPv4 addresses in used
	cur4  uint64 // next IPv4 offset to try (1-based)
	cur6  uint64 // next IPv6 offset to try
	curP  uint64 // next /28 block to try for a prefix
	// outside holds the addresses held for outsideHolder (also in used).
	outside map[netip.Addr]bool
}

func newPool(cidr, cidr6 netip.Prefix) *pool {
	bits := 32 - cidr.Bits()
	var size uint64
	if bits >= 3 {
		size = (uint64(1) << bits) - 4
	}
	return &pool{cidr: cidr.Masked(), cidr6: cidr6.Masked(), size: size, used: map[netip.Addr]string{}, cur4: 1, cur6: 1, outside: map[netip.Addr]bool{}}
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

// prefixBits is the length of an IPv4 prefix ECS gives an ENI: a /28.
const prefixBits = 28

// prefixSize is the number of addresses in one IPv4 prefix.
const prefixSize = 1 << (32 - prefixBits)

// outsideHolder owns, in pool.used, the addresses that something outside
// the model holds (Server.FragmentVSwitch).
const outsideHolder = "(outside)"

// blocks is the number of aligned /28 blocks of the IPv4 CIDR.
func (p *pool) blocks() uint64 {
	if p.cidr.Bits() > prefixBits {
		return 0
	}
	return uint64(1) << (prefixBits - p.cidr.Bits())
}

// blockUsable reports whether every address of block k is usable (not
// reserved): the first block holds the network address and the last one
// the three reserved at the end, so neither can be a prefix.
func (p *pool) blockUsable(k uint64) bool {
	return k*prefixSize >= 1 && k*prefixSize+prefixSize-1 <= p.size
}

// blockFree reports whether block k is usable and none of its addresses is
// held.
func (p *pool) blockFree(k uint64) bool {
	if !p.blockUsable(k) {
		return false
	}
	for i := range uint64(prefixSize) {
		if _, used := p.used[p.addr4(k*prefixSize+i)]; used {
			return false
		}
	}
	return true
}

// prefixOf returns block k as a prefix.
func (p *pool) prefixOf(k uint64) netip.Prefix {
	return netip.PrefixFrom(p.addr4(k*prefixSize), prefixBits)
}

// blockOf returns the block index of prefix q, and whether q is an aligned
// /28 of the CIDR whose addresses are all usable.
func (p *pool) blockOf(q netip.Prefix) (uint64, bool) {
	if !q.IsValid() || !q.Addr().Is4() || q.Bits() != prefixBits || q.Masked() != q || !p.cidr.Contains(q.Addr()) {
		return 0, false
	}
	b, c := q.Addr().As4(), p.cidr.Addr().As4()
	off := (uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])) -
		(uint64(c[0])<<24 | uint64(c[1])<<16 | uint64(c[2])<<8 | uint64(c[3]))
	k := off / prefixSize
	return k, p.blockUsable(k)
}

// freePrefixes counts the blocks a prefix could be made of now.
func (p *pool) freePrefixes() int {
	n := 0
	for k := range p.blocks() {
		if p.blockFree(k) {
			n++
		}
	}
	return n
}

// takePrefixes allocates n free aligned /28s to eni, or none when fewer
// are free (though single addresses may be: fragmentation). Like take4 it
// walks forward from a cursor, so a released prefix is reused late.
func (p *pool) takePrefixes(eni string, n int) ([]netip.Prefix, bool) {
	if n <= 0 {
		return nil, true
	}
	nb := p.blocks()
	var ks []uint64
	for i := uint64(0); i < nb && len(ks) < n; i++ {
		k := (p.curP + i) % nb
		if p.blockFree(k) {
			ks = append(ks, k)
		}
	}
	if len(ks) < n {
		return nil, false
	}
	out := make([]netip.Prefix, 0, n)
	for _, k := range ks {
		q := p.prefixOf(k)
		p.claimPrefix(eni, q)
		out = append(out, q)
	}
	p.curP = (ks[len(ks)-1] + 1) % max(nb, 1)
	return out, true
}

// claimPrefix marks every address of q as held by eni; the caller has
// checked they are free.
func (p *pool) claimPrefix(eni string, q netip.Prefix) {
	for a := q.Addr(); q.Contains(a); a = a.Next() {
		p.claim(eni, a)
	}
}

// releasePrefix frees the addresses of q that eni holds.
func (p *pool) releasePrefix(eni string, q netip.Prefix) {
	for a := q.Addr(); q.Contains(a); a = a.Next() {
		p.release(eni, a)
	}
}

// fragment holds one address of every free aligned /28 for outsideHolder,
// so that no prefix can be given while the other 15 addresses of each
// block stay free. It returns how many addresses it took.
func (p *pool) fragment() int {
	n := 0
	for k := range p.blocks() {
		if !p.blockFree(k) {
			continue
		}
		// The block's middle address: any one breaks the block.
		a := p.addr4(k*prefixSize + prefixSize/2)
		p.claim(outsideHolder, a)
		p.outside[a] = true
		n++
	}
	return n
}

// defragment releases every address held for outsideHolder and returns
// how many it released.
func (p *pool) defragment() int {
	n := len(p.outside)
	for a := range p.outside {
		p.release(outsideHolder, a)
	}
	p.outside = map[netip.Addr]bool{}
	return n
}
