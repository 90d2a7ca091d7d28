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
	// Each list's length is what the current plan took (the pod list's:
	// the pod states'), which release clears; its capacity stays.
	pods      []podState
	podList   []*podState
	addrIdx   []addrRef
	kernelPod []*podState
	pubPod    []*podState
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// grown is l with length n, reallocated when its capacity is short.
func grown[T any](l []T, n int) []T {
	if cap(l) < n {
		return make([]T, n)
	}
	return l[:n]
}

// podStates returns n zeroed pod states and an empty list with room for n.
func (s *scratch) podStates(n int) ([]podState, []*podState) {
	s.pods, s.podList = grown(s.pods, n), grown(s.podList, n)
	return s.pods, s.podList[:0]
}

// addrs returns an empty address index with room for n.
func (s *scratch) addrs(n int) []addrRef {
	s.addrIdx = grown(s.addrIdx, n)
	return s.addrIdx[:0]
}

// joins returns the two zeroed join lists, of nk and np entries.
func (s *scratch) joins(nk, np int) (kernelPod, pubPod []*podState) {
	s.kernelPod, s.pubPod = grown(s.kernelPod, nk), grown(s.pubPod, np)
	return s.kernelPod, s.pubPod
}

// release clears what the plan took (so that the pool pins none of its
// inputs, and the next Make starts from zero) and gives s back.
func (s *scratch) release() {
	clear(s.pods)
	clear(s.podList)
	clear(s.addrIdx)
	clear(s.kernelPod)
	clear(s.pubPod)
	s.pods, s.podList, s.addrIdx, s.kernelPod, s.pubPod = s.pods[:0], s.podList[:0], s.addrIdx[:0], s.kernelPod[:0], s.pubPod[:0]
	scratchPool.Put(s)
}
