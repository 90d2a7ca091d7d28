package linux

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// rate is one direction of a Bandwidth: bits per second and burst bits.
type rate struct{ bps, burst uint64 }

const (
	// tbfLatency bounds how long a packet may wait in the tbf queue; the
	// queue limit is rate x latency + burst (as tc's "latency" option).
	tbfLatencyMs = 25
	// minBurstBytes is the burst used when none is given: a few full
	// packets, so tbf can always send one.
	minBurstBytes = 64 * 1024
)

// tbfFor returns the tbf qdisc for r on link index idx.
func tbfFor(idx int, r rate) *netlink.Tbf {
	bytesPS := r.bps / 8
	burst := r.burst / 8
	if burst < minBurstBytes {
		burst = minBurstBytes
	}
	limit := bytesPS*tbfLatencyMs/1000 + burst
	if limit > 1<<31 {
		limit = 1 << 31
	}
	return &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       bytesPS,
		Limit:      uint32(limit),
		Buffer:     netlink.Xmittime(bytesPS, uint32(burst)),
	}
}

// ensureTBF makes l's root qdisc a tbf shaping to r, or, when r.bps is 0,
// removes a tbf root qdisc enid may have put there. A link made just now
// (fresh) has its default qdisc: it is not listed, so a new pod that asks
// for no limit costs no tc call.
func ensureTBF(h *netlink.Handle, l netlink.Link, r rate, fresh bool, where string, ch *Changes) error {
	var root *netlink.Tbf
	if !fresh {
		qs, err := dump("list qdiscs", func() ([]netlink.Qdisc, error) { return h.QdiscList(l) })
		if err != nil {
			return err
		}
		for _, q := range qs {
			if q.Attrs().Parent == netlink.HANDLE_ROOT {
				if t, ok := q.(*netlink.Tbf); ok {
					root = t
				}
			}
		}
	}
	name := l.Attrs().Name
	if r.bps == 0 {
		if root == nil {
			return nil
		}
		if err := h.QdiscDel(root); err != nil && !isNotFound(mapErr(err)) {
			return fmt.Errorf("delete tbf on %s: %w", name, mapErr(err))
		}
		ch.add("delete tbf on %s%s", name, where)
		return nil
	}
	want := tbfFor(l.Attrs().Index, r)
	if root != nil && root.Rate == want.Rate && root.Limit == want.Limit && root.Buffer == want.Buffer {
		return nil
	}
	if err := h.QdiscReplace(want); err != nil {
		return fmt.Errorf("set tbf on %s: %w", name, mapErr(err))
	}
	ch.add("set tbf rate %dbit burst %dbit on %s%s", r.bps, r.burst, name, where)
	return nil
}
