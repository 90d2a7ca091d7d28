package clock

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Virtual is a Clock on which time moves only when its owner moves it
// (Advance, AdvanceTo, AdvanceToNext, Step): the tests' clock and the
// deterministic simulation's. It is not a test double (it lives here, not
// in a clocktest package) because the simulation runs the agent on it as
// its production clock.
//
// It is deterministic: waiters (timers, tickers, sleeps, Afters) fire in
// the order of their deadlines, and those with the same deadline in the
// order they were armed (created, Reset, or, for a ticker, re-armed by its
// previous tick). While a move of the clock fires waiters it holds the
// clock: a goroutine woken by one sees the time only after the move ends,
// so what it arms then is relative to the time the move reached, however
// the goroutines are scheduled. A move fires each ticker at most once
// (later ticks it passed are dropped, as a slow receiver's are), and a
// goroutine's next wait starts from the end of the move: to have every
// wake-up in between happen, move with Step or AdvanceToNext once the woken
// goroutines are parked again (BlockUntil).
//
// Sending on a waiter's channel never blocks (each holds one value, as
// time's do), so no move can deadlock on a slow receiver.
type Virtual struct {
	mu sync.Mutex // guards the fields below
	// now is the clock's time.
	now time.Time
	// seq numbers arms, for the order among equal deadlines.
	seq uint64
	// armed holds the armed waiters, earliest (deadline, seq) first.
	armed waiterHeap
	// changed is closed and replaced whenever the number of armed waiters
	// changes (BlockUntil waits on it).
	changed chan struct{}
}

// NewVirtual returns a Virtual clock reading start.
func NewVirtual(start time.Time) *Virtual {
	return &Virtual{now: start, changed: make(chan struct{})}
}

// waiter is one armed timer, ticker or sleep.
type waiter struct {
	at     time.Time
	seq    uint64
	period time.Duration // > 0 for a ticker
	// owner is what Owned view armed it (nil: the clock itself), rank
	// its place among waiters due at the same time (0 for the clock's).
	owner any
	rank  uint64
	c     chan time.Time
	index int // in Virtual.armed; -1 when not armed
}

// Now is the clock's time.
func (v *Virtual) Now() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.now
}

// After is time.After on the virtual clock.
func (v *Virtual) After(d time.Duration) <-chan time.Time { return v.newTimer(d, tag{}).C() }

// NewTimer arms a timer that fires d from now (at once for d <= 0).
func (v *Virtual) NewTimer(d time.Duration) Timer { return v.newTimer(d, tag{}) }

// tag is whose a waiter is (Owned).
type tag struct {
	owner any
	rank  uint64
}

func (v *Virtual) newTimer(d time.Duration, o tag) Timer {
	t := &virtualTimer{v: v, w: &waiter{c: make(chan time.Time, 1), index: -1, owner: o.owner, rank: o.rank}}
	v.mu.Lock()
	v.armLocked(t.w, d)
	v.mu.Unlock()
	return t
}

// NewTicker arms a ticker of period d; d must be positive.
func (v *Virtual) NewTicker(d time.Duration) Ticker { return v.newTicker(d, tag{}) }

func (v *Virtual) newTicker(d time.Duration, o tag) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	t := &virtualTicker{v: v, w: &waiter{c: make(chan time.Time, 1), index: -1, period: d, owner: o.owner, rank: o.rank}}
	v.mu.Lock()
	v.armLocked(t.w, d)
	v.mu.Unlock()
	return t
}

// Sleep waits until the clock has moved d past now, or ctx ends.
func (v *Virtual) Sleep(ctx context.Context, d time.Duration) error { return v.sleep(ctx, d, tag{}) }

func (v *Virtual) sleep(ctx context.Context, d time.Duration, o tag) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := v.newTimer(d, o)
	select {
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// Advance moves the clock d forward, firing every waiter due by then in
// order, and returns how many fired.
func (v *Virtual) Advance(d time.Duration) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.advanceLocked(v.now.Add(d))
}

// AdvanceTo moves the clock to t (if t is later than now), firing every
// waiter due by then in order, and returns how many fired.
func (v *Virtual) AdvanceTo(t time.Time) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.advanceLocked(t)
}

// AdvanceToNext moves the clock to the earliest deadline of an armed
// waiter and fires every waiter due then, in order. It returns the new
// time, and false (not moving) when nothing is armed.
func (v *Virtual) AdvanceToNext() (time.Time, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.armed) == 0 {
		return v.now, false
	}
	v.advanceLocked(v.armed[0].at)
	return v.now, true
}

// Step moves the clock to the earliest deadline of an armed waiter and
// fires that one waiter alone (the first armed of those due then): the
// simulation's unit of progress, which wakes one goroutine at a time. It
// returns the new time, and false (not moving) when nothing is armed.
func (v *Virtual) Step() (time.Time, bool) {
	now, _, ok := v.StepOwner()
	return now, ok
}

// StepOwner is Step, and also says whose waiter it fired: the owner of
// the Owned view that armed it (nil for the clock's own).
func (v *Virtual) StepOwner() (time.Time, any, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.armed) == 0 {
		return v.now, nil, false
	}
	w := v.armed[0]
	if w.at.After(v.now) {
		v.now = w.at
	}
	v.fireLocked(w, v.now)
	v.notifyLocked()
	return v.now, w.owner, true
}

// Owned is a view of v for one owner: the same time and waiters, each
// waiter it arms tagged with owner, so that StepOwner can say whose
// goroutine a step wakes (the simulation gives each node's agent a view
// of the one clock, and after a step checks the node it woke). Waiters due
// at the same time fire in the order of their rank (the clock's own have
// rank 0), then of their arming: owners whose goroutines arm waiters
// concurrently get distinct ranks, so that no scheduling orders their
// waiters.
func (v *Virtual) Owned(owner any, rank uint64) Clock { return ownedView{v, tag{owner, rank}} }

type ownedView struct {
	v *Virtual
	t tag
}

func (o ownedView) Now() time.Time                         { return o.v.Now() }
func (o ownedView) After(d time.Duration) <-chan time.Time { return o.v.newTimer(d, o.t).C() }
func (o ownedView) NewTimer(d time.Duration) Timer         { return o.v.newTimer(d, o.t) }
func (o ownedView) NewTicker(d time.Duration) Ticker       { return o.v.newTicker(d, o.t) }
func (o ownedView) Sleep(ctx context.Context, d time.Duration) error {
	return o.v.sleep(ctx, d, o.t)
}

// Next is the earliest deadline of an armed waiter; false when none is.
func (v *Virtual) Next() (time.Time, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.armed) == 0 {
		return time.Time{}, false
	}
	return v.armed[0].at, true
}

// Waiters is the number of armed waiters: timers not yet fired nor
// stopped, running tickers, sleeps and Afters not yet over.
func (v *Virtual) Waiters() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.armed)
}

// BlockUntil waits, without reading the wall clock, until at least n
// waiters are armed, or ctx ends (it returns ctx.Err() then). A test
// knows how many timers the code under test keeps when it is parked;
// once they are all armed, moving the clock wakes them and nothing is
// still on its way to arm one.
func (v *Virtual) BlockUntil(ctx context.Context, n int) error {
	for {
		v.mu.Lock()
		armed, changed := len(v.armed), v.changed
		v.mu.Unlock()
		if armed >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// advanceLocked fires, in order, every waiter due by t, each at its own
// deadline (the clock reads that deadline while it fires), then sets the
// clock to t. A ticker fires at most once per move.
func (v *Virtual) advanceLocked(t time.Time) int {
	fired := 0
	var ticked map[*waiter]bool
	var held []*waiter // tickers that ticked in this move, to re-arm after it
	for len(v.armed) > 0 && !v.armed[0].at.After(t) {
		w := v.armed[0]
		if w.at.After(v.now) {
			v.now = w.at
		}
		if w.period > 0 {
			if ticked[w] {
				// Its tick in this move is still undelivered or just
				// taken: drop the ticks in between, as time.Ticker does.
				heap.Remove(&v.armed, w.index)
				held = append(held, w)
				continue
			}
			if ticked == nil {
				ticked = map[*waiter]bool{}
			}
			ticked[w] = true
		}
		v.fireLocked(w, v.now)
		fired++
	}
	if t.After(v.now) {
		v.now = t
	}
	for _, w := range held {
		// The first tick after the move, on the ticker's own grid.
		for !w.at.After(v.now) {
			w.at = w.at.Add(w.period)
		}
		v.seq++
		w.seq = v.seq
		heap.Push(&v.armed, w)
	}
	if fired > 0 || len(held) > 0 {
		v.notifyLocked()
	}
	return fired
}

// fireLocked delivers now on w's channel (dropped when a value is still
// pending there) and disarms it, or re-arms it one period on for a ticker.
func (v *Virtual) fireLocked(w *waiter, now time.Time) {
	select {
	case w.c <- now:
	default:
	}
	if w.period > 0 {
		w.at = w.at.Add(w.period)
		v.seq++
		w.seq = v.seq
		heap.Fix(&v.armed, w.index)
		return
	}
	heap.Remove(&v.armed, w.index)
}

// armLocked arms w d from now (at once, delivering now, for d <= 0).
func (v *Virtual) armLocked(w *waiter, d time.Duration) {
	if d <= 0 && w.period == 0 {
		select {
		case w.c <- v.now:
		default:
		}
		return
	}
	v.seq++
	w.at, w.seq = v.now.Add(d), v.seq
	heap.Push(&v.armed, w)
	v.notifyLocked()
}

// disarmLocked disarms w and drops a value pending on its channel, so
// that after Stop or Reset no stale time is received. It reports whether w
// was armed.
func (v *Virtual) disarmLocked(w *waiter) bool {
	select {
	case <-w.c:
	default:
	}
	if w.index < 0 {
		return false
	}
	heap.Remove(&v.armed, w.index)
	v.notifyLocked()
	return true
}

// notifyLocked wakes BlockUntil callers.
func (v *Virtual) notifyLocked() {
	close(v.changed)
	v.changed = make(chan struct{})
}

type virtualTimer struct {
	v *Virtual
	w *waiter
}

func (t *virtualTimer) C() <-chan time.Time { return t.w.c }

func (t *virtualTimer) Stop() bool {
	t.v.mu.Lock()
	defer t.v.mu.Unlock()
	return t.v.disarmLocked(t.w)
}

func (t *virtualTimer) Reset(d time.Duration) bool {
	t.v.mu.Lock()
	defer t.v.mu.Unlock()
	was := t.v.disarmLocked(t.w)
	t.v.armLocked(t.w, d)
	return was
}

type virtualTicker struct {
	v *Virtual
	w *waiter
}

func (t *virtualTicker) C() <-chan time.Time { return t.w.c }

func (t *virtualTicker) Stop() {
	t.v.mu.Lock()
	defer t.v.mu.Unlock()
	t.v.disarmLocked(t.w)
}

func (t *virtualTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("clock: non-positive interval for Ticker.Reset")
	}
	t.v.mu.Lock()
	defer t.v.mu.Unlock()
	t.v.disarmLocked(t.w)
	t.w.period = d
	t.v.armLocked(t.w, d)
}

// waiterHeap orders armed waiters by (deadline, rank, arm order).
type waiterHeap []*waiter

func (h waiterHeap) Len() int { return len(h) }
func (h waiterHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].seq < h[j].seq
}
func (h waiterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *waiterHeap) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waiterHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*h = old[:len(old)-1]
	return w
}
