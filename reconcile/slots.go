package reconcile

import (
	"context"
	"sync"
)

// slots bounds how many actions run at once, and hands a freed slot to an
// urgent waiter (planner.Action.Urgent: on a waiting pod's path) before any
// other, each kind in arrival order. A burst of statuses for entries that
// cannot be served (thousands of stale ones at start) thus never delays a
// live pod's setup by more than the actions already running.
type slots struct {
	mu   sync.Mutex // guards the fields below
	free int
	// urgent and other are the waiters, oldest first; a waiter's channel
	// is closed when it is given a slot.
	urgent, other []chan struct{}
}

func newSlots(n int) *slots { return &slots{free: max(1, n)} }

// acquire waits for a slot, or for ctx to end (then it holds none).
func (s *slots) acquire(ctx context.Context, urgent bool) error {
	s.mu.Lock()
	if s.free > 0 && len(s.urgent) == 0 && (urgent || len(s.other) == 0) {
		s.free--
		s.mu.Unlock()
		return nil
	}
	c := make(chan struct{})
	if urgent {
		s.urgent = append(s.urgent, c)
	} else {
		s.other = append(s.other, c)
	}
	s.mu.Unlock()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case <-c: // given a slot meanwhile: pass it on
			s.releaseLocked()
		default:
			s.urgent = dropWaiter(s.urgent, c)
			s.other = dropWaiter(s.other, c)
		}
		return ctx.Err()
	}
}

// release gives the slot back: to the oldest urgent waiter, else the
// oldest other one, else to the pool.
func (s *slots) release() {
	s.mu.Lock()
	s.releaseLocked()
	s.mu.Unlock()
}

func (s *slots) releaseLocked() {
	for _, q := range []*[]chan struct{}{&s.urgent, &s.other} {
		if len(*q) > 0 {
			c := (*q)[0]
			(*q)[0] = nil
			*q = (*q)[1:]
			close(c)
			return
		}
	}
	s.free++
}

func dropWaiter(q []chan struct{}, c chan struct{}) []chan struct{} {
	for i, w := range q {
		if w == c {
			return append(q[:i:i], q[i+1:]...)
		}
	}
	return q
}
