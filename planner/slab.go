package planner

// slab hands out values that live as long as the plan, a chunk at a time:
// a plan holds a route list per Ready status and, per pod it changes, a
// status copy, a PodTarget and a dependency list. One allocation per chunk
// instead of one per value is most of what keeps Make under a millisecond
// at a thousand pods (issue 24): the garbage collector's share of a pass
// grows with the number of objects.
//
// A chunk lives as long as any value cut from it, so a slab serves only
// what the plan itself holds (never Memory, which outlives the plan; its
// strings stay allocations of their own).
type slab[T any] struct {
	buf []T
	// next is the size of the next chunk (0: a small one); the caller
	// sets it to what it expects to need, and each chunk doubles it.
	next int
}

// expect sizes the next chunk for n more values.
func (s *slab[T]) expect(n int) {
	if n > cap(s.buf)-len(s.buf) {
		s.next = n
	}
}

// take returns an empty slice with room for exactly n values: its capacity
// is n, so an append beyond them copies rather than writing into another
// value's room. Room for none is nil, as an empty list is elsewhere.
func (s *slab[T]) take(n int) []T {
	if n == 0 {
		return nil
	}
	if n > cap(s.buf)-len(s.buf) {
		s.buf = make([]T, 0, max(s.next, n, 8))
		s.next = 2 * cap(s.buf)
	}
	i := len(s.buf)
	s.buf = s.buf[:i+n]
	return s.buf[i : i : i+n]
}

// new returns a pointer to a copy of v.
func (s *slab[T]) new(v T) *T {
	r := append(s.take(1), v)
	return &r[0]
}
