package cloud

import (
	"container/heap"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// This file runs the limiter's policy (its *Locked methods: no goroutine,
// no clock) on virtual time: fleets of nodes, each with its own limiter,
// calling one account whose rate limit refuses what it cannot take. The
// runs are deterministic (seeded), so their figures are exact and the
// bounds below can be tight.

var simT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// simNode is one node of a simulated fleet.
type simNode struct {
	l *limiter
	// next says what the node asks for after an answer (at the time
	// given): a priority and whether it asks at all.
	next func(now time.Time) (Priority, bool)
	// asked are the times its queued calls were asked for, by waiter.
	asked map[*waiter]time.Time
}

// simAccount is the account's rate limit (a token bucket that refuses
// when empty) and any injected refusals.
type simAccount struct {
	qps, burst float64
	tokens     float64
	last       time.Time
	// refuse, when set, refuses a call by itself (fault injection).
	refuse func(node int, at time.Time) bool
}

func (a *simAccount) admit(node int, at time.Time) bool {
	if a.refuse != nil && a.refuse(node, at) {
		return false
	}
	if a.qps <= 0 {
		return true
	}
	if a.last.IsZero() {
		a.last, a.tokens = at, a.burst
	}
	a.tokens = min(a.burst, a.tokens+at.Sub(a.last).Seconds()*a.qps)
	a.last = at
	if a.tokens >= 1 {
		a.tokens--
		return true
	}
	return false
}

// simCall is what one granted call did.
type simCall struct {
	node       int
	prio       Priority
	asked, at  time.Time // asked for, granted (sent)
	refused    bool
	answeredAt time.Time
}

// fleetSim runs nodes against the account until end; latency is each
// call's round trip, give or take a quarter (drawn from rng: nodes whose
// learned rates are equal do not stay in lockstep). observe, when set, is
// called at every event.
type fleetSim struct {
	nodes   []*simNode
	account simAccount
	latency time.Duration
	rng     *rand.Rand
	end     time.Time
	calls   []simCall
	observe func(now time.Time)

	q simQueue
}

func newSimNode(rl RateLimit, seed uint64, next func(time.Time) (Priority, bool)) *simNode {
	return &simNode{l: newLimiter(rl, 200*time.Millisecond, 5*time.Second, nil, rand.New(rand.NewPCG(seed, 1))),
		next: next, asked: map[*waiter]time.Time{}}
}

const (
	evAsk = iota
	evGrant
	evAnswer
)

type simEvent struct {
	at   time.Time
	kind int
	node int
	prio Priority
	call int // evAnswer: index in calls
	seq  uint64
}

type simQueue struct {
	evs []simEvent
	seq uint64
}

func (q *simQueue) Len() int { return len(q.evs) }
func (q *simQueue) Less(i, j int) bool {
	if !q.evs[i].at.Equal(q.evs[j].at) {
		return q.evs[i].at.Before(q.evs[j].at)
	}
	return q.evs[i].seq < q.evs[j].seq
}
func (q *simQueue) Swap(i, j int) { q.evs[i], q.evs[j] = q.evs[j], q.evs[i] }
func (q *simQueue) Push(x any)    { q.evs = append(q.evs, x.(simEvent)) }
func (q *simQueue) Pop() any {
	e := q.evs[len(q.evs)-1]
	q.evs = q.evs[:len(q.evs)-1]
	return e
}

func (s *fleetSim) push(e simEvent) {
	s.q.seq++
	e.seq = s.q.seq
	heap.Push(&s.q, e)
}

func (s *fleetSim) rand() *rand.Rand {
	if s.rng == nil {
		s.rng = rand.New(rand.NewPCG(1, 2))
	}
	return s.rng
}

// ask queues a call of node i at priority p at time at.
func (s *fleetSim) ask(i int, p Priority, at time.Time) {
	s.push(simEvent{at: at, kind: evAsk, node: i, prio: p})
}

// run plays the events until end.
func (s *fleetSim) run() {
	for s.q.Len() > 0 {
		ev := heap.Pop(&s.q).(simEvent)
		if !ev.at.Before(s.end) {
			continue
		}
		if s.observe != nil {
			s.observe(ev.at)
		}
		n := s.nodes[ev.node]
		switch ev.kind {
		case evAsk:
			w := n.l.enqueueLocked(ev.prio)
			n.asked[w] = ev.at
			s.grant(ev.node, ev.at)
		case evGrant:
			s.grant(ev.node, ev.at)
		case evAnswer:
			c := s.calls[ev.call]
			o := answeredOK
			if c.refused {
				o = answeredThrottled
			}
			n.l.reportLocked(ev.at, ticket{at: c.at}, o)
			if p, ok := n.next(ev.at); ok {
				// The caller's own time before its next call (a plan, a
				// pass): up to a latency more.
				s.ask(ev.node, p, ev.at.Add(time.Duration(s.rand().Int64N(int64(s.latency)+1))))
			}
			s.grant(ev.node, ev.at)
		}
	}
}

// grant sends every call of node i that may go at now, and schedules a
// look when the next one may.
func (s *fleetSim) grant(i int, now time.Time) {
	n := s.nodes[i]
	for {
		h := n.l.headLocked()
		if h == nil {
			return
		}
		at := n.l.grantAtLocked(now)
		if at.After(now) {
			s.push(simEvent{at: at, kind: evGrant, node: i})
			return
		}
		n.l.takeLocked(now)
		c := simCall{node: i, prio: h.prio, asked: n.asked[h], at: now, refused: !s.account.admit(i, now)}
		delete(n.asked, h)
		c.answeredAt = now.Add(s.latency*3/4 + time.Duration(s.rand().Int64N(int64(s.latency/2)+1)))
		s.calls = append(s.calls, c)
		s.push(simEvent{at: c.answeredAt, kind: evAnswer, node: i, call: len(s.calls) - 1})
	}
}

// busy asks again at Normal priority after every answer: a node that
// always has a call to make.
func busy(time.Time) (Priority, bool) { return Normal, true }

// perMinute counts the successful and the refused calls of each minute.
func perMinute(calls []simCall, minutes int) (ok, refused []int) {
	ok, refused = make([]int, minutes), make([]int, minutes)
	for _, c := range calls {
		m := int(c.at.Sub(simT0) / time.Minute)
		if m >= minutes {
			continue
		}
		if c.refused {
			refused[m]++
		} else {
			ok[m]++
		}
	}
	return ok, refused
}

// storm runs the join storm of TestLimiterFleetLearns for minutes: 100
// nodes, each configured at 10 calls/s (burst 20) and always calling (50
// ms a call, and up to as long again before the next), against an account
// limit of 20 calls/s. With learn false, the nodes' rates cannot fall (the
// floor is their configured rate): the shared backoff alone.
func storm(learn bool, minutes int) (s *fleetSim, ok, refused []int) {
	const nodes, account = 100, 20.0
	s = &fleetSim{account: simAccount{qps: account, burst: account}, latency: 50 * time.Millisecond, end: simT0.Add(time.Duration(minutes) * time.Minute)}
	for i := range nodes {
		n := newSimNode(RateLimit{QPS: 10, Burst: 20}, uint64(i), busy)
		if !learn {
			n.l.floor = n.l.ceiling
		}
		s.nodes = append(s.nodes, n)
		s.ask(i, Normal, simT0)
	}
	s.run()
	ok, refused = perMinute(s.calls, minutes)
	return s, ok, refused
}

// TestLimiterFleetLearns: a join storm on virtual time (see storm): each
// node's share is a fiftieth of its configured rate, and no node knows it.
// The fleet must learn it: the second minute throttles far less than the
// first and than the backoff alone, the account's rate stays used, and
// the nodes share it (none starves, none hogs).
func TestLimiterFleetLearns(t *testing.T) {
	s, ok, refused := storm(true, 2)
	_, okB, refusedB := storm(false, 2)
	t.Logf("learned:      minute 1: %d ok, %d throttled; minute 2: %d ok, %d throttled", ok[0], refused[0], ok[1], refused[1])
	t.Logf("backoff only: minute 1: %d ok, %d throttled; minute 2: %d ok, %d throttled", okB[0], refusedB[0], okB[1], refusedB[1])
	if refused[1]*2 > refused[0] {
		t.Errorf("the second minute throttled %d calls, the first %d: want under half", refused[1], refused[0])
	}
	if refused[1]*3 > refusedB[1] {
		t.Errorf("the second minute throttled %d calls, %d with the backoff alone: want under a third", refused[1], refusedB[1])
	}
	const account = 20
	if min := int(0.8 * account * 60); ok[1] < min {
		t.Errorf("the second minute made %d successful calls: want at least %d (80%% of the account's %v calls/s)", ok[1], min, account)
	}
	// An equal share is 12 successful calls a minute.
	served := make([]int, len(s.nodes))
	for _, c := range s.calls {
		if !c.refused && c.at.Sub(simT0) >= time.Minute {
			served[c.node]++
		}
	}
	slices.Sort(served)
	t.Logf("successful calls per node in minute 2: least %d, 10th percentile %d, median %d, 90th %d, most %d", served[0], served[10], served[50], served[90], served[99])
	if served[10] < 3 || served[99] > 4*12 {
		t.Errorf("minute 2's successes per node: 10th percentile %d, most %d: want at least 3 (a quarter of an equal share) and at most 48 (four)", served[10], served[99])
	}
}

// TestLimiterRecoversAfterShortStorm: one node, alone on the account, has
// 35% of its calls refused for 4 seconds (throttling that says nothing of
// the account's rate: a burst elsewhere, a brief limit). Once the faults
// stop, its learned rate is back to the configured one within seconds, not
// minutes (the AIMD pacer this limiter replaced doubled its rate once per
// quiet minute, from a floor of 0.1/s). Eight storms, each drawn from its
// own seed.
func TestLimiterRecoversAfterShortStorm(t *testing.T) {
	var worst time.Duration
	for seed := uint64(1); seed <= 8; seed++ {
		stormStart, stormEnd := simT0.Add(time.Second), simT0.Add(5*time.Second)
		rng := rand.New(rand.NewPCG(seed, 7))
		s := &fleetSim{latency: 50 * time.Millisecond, end: simT0.Add(time.Minute),
			account: simAccount{refuse: func(_ int, at time.Time) bool {
				return !at.Before(stormStart) && at.Before(stormEnd) && rng.Float64() < 0.35
			}}}
		s.nodes = []*simNode{newSimNode(RateLimit{QPS: 10, Burst: 20}, seed, busy)}
		l := s.nodes[0].l
		lowest := 10.0
		var back time.Time
		s.observe = func(now time.Time) {
			r := l.rateLocked(now)
			if now.Before(stormEnd) {
				lowest = min(lowest, r)
			} else if back.IsZero() && r >= 10 {
				back = now
			}
		}
		s.ask(0, Normal, simT0)
		s.run()
		refused := 0
		for _, c := range s.calls {
			if c.refused {
				refused++
			}
		}
		took := back.Sub(stormEnd)
		t.Logf("seed %d: %d calls, %d refused; lowest rate %.2f/s; back at 10/s %v after the storm", seed, len(s.calls), refused, lowest, took.Round(time.Millisecond))
		if refused < 3 || lowest > 5 {
			t.Fatalf("seed %d: %d refusals, lowest rate %.2f: the storm did not bite, the test proves nothing", seed, refused, lowest)
		}
		if back.IsZero() {
			t.Errorf("seed %d: the rate never came back to the configured 10/s", seed)
			continue
		}
		worst = max(worst, took)
	}
	if worst > 8*time.Second {
		t.Errorf("the rate was back at the configured 10/s up to %v after the faults stopped: want within 8s", worst)
	}
}

// TestLimiterUrgentFirst: a node with a long queue of optional calls (a
// pool release) and a learned rate below its configured one gets an
// urgent call: it goes next, not after the optional ones.
func TestLimiterUrgentFirst(t *testing.T) {
	s := &fleetSim{latency: 50 * time.Millisecond, end: simT0.Add(time.Minute)}
	s.nodes = []*simNode{newSimNode(RateLimit{QPS: 2, Burst: 1}, 1, func(time.Time) (Priority, bool) { return 0, false })}
	for range 20 {
		s.ask(0, Optional, simT0)
	}
	urgentAt := simT0.Add(1200 * time.Millisecond)
	s.ask(0, Normal, urgentAt)
	s.run()
	var urgent simCall
	optionalBefore := 0
	for _, c := range s.calls {
		if c.prio == Normal {
			urgent = c
		}
	}
	for _, c := range s.calls {
		if c.prio == Optional && c.at.After(urgentAt) && c.at.Before(urgent.at) {
			optionalBefore++
		}
	}
	wait := urgent.at.Sub(urgent.asked)
	t.Logf("urgent call asked at +%v, granted after %v; %d optional calls went in between", urgentAt.Sub(simT0), wait, optionalBefore)
	if urgent.at.IsZero() {
		t.Fatal("the urgent call never went")
	}
	// At 2 calls/s the next token is at most half a second away.
	if optionalBefore > 0 || wait > 500*time.Millisecond {
		t.Errorf("the urgent call waited %v behind %d optional calls: want it next, within one token (500ms)", wait, optionalBefore)
	}
}
