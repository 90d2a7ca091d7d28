package planner

import (
	"hash/fnv"
	"strconv"
	"time"

	"github.com/enidnet/enid/desired"
)

// This file spreads optional pool work over a fleet (docs/plan.md, "Pacing
// a fleet"). A config change reaches every node of a cluster within the
// same second (a ConfigMap edit), and each node would otherwise top up or
// shrink its pool at once: a thousand nodes' calls at the same instant
// against one account's API rate limit. Each node instead waits an offset
// that only its instance ID decides, so the fleet's calls arrive spread
// evenly over the window without any coordination. Work a waiting pod
// needs is never deferred.

// SpreadOffset is the node's wait within window after a change of the
// pool's knobs: a hash of the instance ID, uniform over [0, window). Equal
// IDs give equal offsets (a restarted agent keeps its place); different
// nodes spread evenly.
func SpreadOffset(instanceID string, window time.Duration) time.Duration {
	if window <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(instanceID))
	// Mix the bits: FNV's low bits vary little between IDs that differ
	// only in their last characters (i-...0001, i-...0002).
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return time.Duration(x % uint64(window))
}

// knobs renders what of the pool policy decides how much to hold.
func (pp poolPolicy) knobs() string {
	k := "minIdle=" + strconv.Itoa(pp.minIdle) + " maxIdle=" + strconv.Itoa(pp.maxIdle) +
		" minTotal=" + strconv.Itoa(pp.minTotal) + " batch=" + strconv.Itoa(pp.batch)
	if pp.alloc != "" && pp.alloc != desired.IPv4Secondary {
		// Only when not the default, so memories written before prefix
		// mode existed see no change.
		k += " ipv4Allocation=" + string(pp.alloc)
	}
	return k
}

// spreading notes a change of the pool's knobs and reports whether optional
// pool work waits at this pass. The first pass of an agent (no knobs
// remembered) starts no spread: a node that joins has its own time.
func (b *builder) spreading(pp poolPolicy) bool {
	if b.cur != nil && !b.cur.isDefault() {
		// Another set's knobs: that set's pool follows its pods.
		return false
	}
	k := pp.knobs()
	if b.mem.PoolKnobs != "" && b.mem.PoolKnobs != k {
		if w := b.cfg.Pool.SpreadWindow.D(); w > 0 {
			b.mem.SpreadUntil = b.now.Add(SpreadOffset(b.o.Instance.ID, w))
		}
	}
	b.mem.PoolKnobs = k
	return b.now.Before(b.mem.SpreadUntil)
}
