package cloud

import (
	"container/heap"
	"testing"
	"time"
)

// TestPacerHalvesAndClimbs checks the AIMD rule on one pacer.
func TestPacerHalvesAndClimbs(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newPacer(10, 20)
	for _, want := range []float64{5, 2.5, 1.25} {
		p.decrease(t0)
		if got := p.current(); got != want {
			t.Fatalf("after a decrease: rate %v, want %v", got, want)
		}
	}
	for range 100 {
		p.decrease(t0)
	}
	if got := p.current(); got != pacerFloor {
		t.Fatalf("rate %v after many decreases, want the floor %v", got, pacerFloor)
	}
	// At rate r, r successes (one second's worth) add about 0.01 calls/s.
	p = newPacer(10, 20)
	p.decrease(t0) // 5
	for range 5 {
		p.increase()
	}
	if got := p.current(); got < 5.009 || got > 5.011 {
		t.Fatalf("rate %v after a second of successes at 5/s, want about 5.01", got)
	}
	for range 100000 {
		p.increase()
	}
	if got := p.current(); got != 10 {
		t.Fatalf("rate %v after many successes, want the ceiling 10", got)
	}
	// A quiet minute doubles the rate; four take the floor to 1.6.
	p = newPacer(10, 20)
	for range 100 {
		p.decrease(t0)
	}
	p.reserve(t0.Add(4*time.Minute + time.Second))
	if got := p.current(); got != 16*pacerFloor {
		t.Fatalf("rate %v after four quiet minutes from the floor, want %v", got, 16*pacerFloor)
	}
}

// TestPacerFleetLearns simulates, in virtual time, a fleet of clients that
// all call as fast as they may against one account's rate limit (a join
// storm: 100 nodes at 10 calls/s each against 20 calls/s), with the
// client's real congestion backoff and pacer, and checks that they learn
// the account's rate: the second minute throttles far less than the first,
// and the account's rate stays used.
func TestPacerFleetLearns(t *testing.T) {
	ok, throttled := simulateStorm(true)
	t.Logf("paced:      minute 1: %d ok, %d throttled; minute 2: %d ok, %d throttled", ok[0], throttled[0], ok[1], throttled[1])
	okU, throttledU := simulateStorm(false)
	t.Logf("congestion backoff only: minute 1: %d ok, %d throttled; minute 2: %d ok, %d throttled", okU[0], throttledU[0], okU[1], throttledU[1])
	if throttled[1]*3 > throttled[0] {
		t.Errorf("the second minute throttled %d calls, the first %d: want the second under a third of the first", throttled[1], throttled[0])
	}
	if throttled[1]*2 > throttledU[1] {
		t.Errorf("the second minute throttled %d calls paced and %d with the backoff alone: want under half", throttled[1], throttledU[1])
	}
	if min := int(0.8 * stormAccount * 60); ok[1] < min {
		t.Errorf("the second minute made %d successful calls: want at least %d (80%% of the account's %v calls/s)", ok[1], min, stormAccount)
	}
}

const stormAccount = 20.0

// simulateStorm runs the storm of TestPacerFleetLearns and counts the
// successful and the throttled calls of each minute; without paced, the
// clients have only the shared backoff.
func simulateStorm(paced bool) (ok, throttled [2]int) {
	const (
		nodes    = 100
		nodeQPS  = 10
		account  = stormAccount
		duration = 2 * time.Minute
	)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type node struct {
		g *congestion
		p *pacer
	}
	fleet := make([]node, nodes)
	q := &eventQueue{}
	for i := range fleet {
		fleet[i] = node{g: newCongestion(200*time.Millisecond, 5*time.Second), p: newPacer(nodeQPS, 2*nodeQPS)}
		if !paced {
			fleet[i].p = nil
		}
		heap.Push(q, event{at: t0, node: i})
	}
	// The account's limit: a token bucket that refuses when empty.
	tokens, last := account, t0
	for q.Len() > 0 {
		ev := heap.Pop(q).(event)
		if !ev.at.Before(t0.Add(duration)) {
			continue
		}
		n := fleet[ev.node]
		// A call waits for the shared backoff, then for the pacer's token.
		if until := n.g.backoffUntil(); ev.at.Before(until) {
			heap.Push(q, event{at: until, node: ev.node})
			continue
		}
		if d := n.p.reserve(ev.at); d > 0 && !ev.paced {
			heap.Push(q, event{at: ev.at.Add(d), node: ev.node, paced: true})
			continue
		}
		tokens = min(account, tokens+ev.at.Sub(last).Seconds()*account)
		last = ev.at
		minute := int(ev.at.Sub(t0) / time.Minute)
		if tokens >= 1 {
			tokens--
			ok[minute]++
			n.g.succeeded()
			n.p.increase()
		} else {
			throttled[minute]++
			if n.g.throttled(ev.at) {
				n.p.decrease(ev.at)
			}
		}
		// The next call: 50 ms of latency later.
		heap.Push(q, event{at: ev.at.Add(50 * time.Millisecond), node: ev.node})
	}
	return ok, throttled
}

type event struct {
	at    time.Time
	node  int
	paced bool // the pacer's token is already taken
}

type eventQueue []event

func (q eventQueue) Len() int           { return len(q) }
func (q eventQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q eventQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)        { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}
