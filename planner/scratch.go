package planner

import "sync"

// scratch is a plan's working memory that nothing the plan returns refers
// to: the pod states, the list of them, the address index and the joins of
// pods with their kernel state and published status. At a thousand pods it
// is half of a converged plan's bytes (393 KB of 803; the pod states alone
// 288 KB). Allocated afresh on every pass, those large blocks were zeroed,
// faulted in and handed back to the kernel by the runtime's scavenger each
// time (issue 24: a fifth of BenchmarkMake's CPU at 1,000 pods was memclr
// and madvise). Make takes one from the pool and gives it back cleared, so
// a pass reuses the previous one's blocks and a scratch in the pool holds
// no pointer into an old plan's inputs.
//
// Only what Make alone uses goes here: a value the plan or its Memory keeps
// (a status, a route, an action, a string) must never come from it.
type scratch struct {
	pods      []podState
	podList   []*podState
	addrIdx   []addrRef
	kernelPod []*podState
	pubPod    []*podState
	// used is how many pod states, index entries and join entries the
	// current plan took: what release clears.
	usedPods, usedAddrs, usedKernel, usedPub int
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// podStates returns n zeroed pod states and an empty list with room for n.
func (s *scratch) podStates(n int) ([]podState, []*podState) {
	if cap(s.pods) < n {
		s.pods = make([]podState, n)
		s.podList = make([]*podState, 0, n)
	}
	s.usedPods = n
	return s.pods[:n], s.podList[:0]
}

// addrs returns an empty address index with room for n.
func (s *scratch) addrs(n int) []addrRef {
	if cap(s.addrIdx) < n {
		s.addrIdx = make([]addrRef, 0, n)
	}
	s.usedAddrs = n
	return s.addrIdx[:0]
}

// joins returns the two zeroed join lists, of nk and np entries.
func (s *scratch) joins(nk, np int) (kernelPod, pubPod []*podState) {
	if cap(s.kernelPod) < nk {
		s.kernelPod = make([]*podState, nk)
	}
	if cap(s.pubPod) < np {
		s.pubPod = make([]*podState, np)
	}
	s.usedKernel, s.usedPub = nk, np
	return s.kernelPod[:nk], s.pubPod[:np]
}

// release clears what the builder used (so that the pool pins none of the
// plan's inputs, and the next Make starts from zero) and gives s back.
func (s *scratch) release(b *builder) {
	clear(s.pods[:s.usedPods])
	clear(s.podList[:s.usedPods])
	clear(s.addrIdx[:s.usedAddrs])
	clear(s.kernelPod[:s.usedKernel])
	clear(s.pubPod[:s.usedPub])
	s.usedPods, s.usedAddrs, s.usedKernel, s.usedPub = 0, 0, 0, 0
	b.sc = nil
	scratchPool.Put(s)
}
