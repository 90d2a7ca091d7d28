package cloud

import (
	"context"
	"sync"
	"time"
)

// pacer learns the rate the account affords (additive increase,
// multiplicative decrease, as TCP does for a link's capacity): the ECS rate
// limit is per account and shared by every node, so no node knows its share
// beforehand. It starts at the configured rate; every throttling episode
// halves it (down to pacerFloor), every success adds step/rate (a node
// calling at its rate gains step calls per second each second, step being
// pacerStepFraction of the configured rate), and a minute without
// throttling doubles it. A fleet that all starts at full rate thus offers, after a few
// refusals each, about what the account allows, and keeps near it: the
// second minute of a storm throttles far less than the first
// (TestPacerFleetLearns; docs/cloud.md, "Pacing").
type pacer struct {
	ceiling float64 // the configured rate; never exceeded (<= 0: no pacing)
	burst   float64 // the configured burst; the bucket holds burst x rate/ceiling tokens (at least 1)

	mu     sync.Mutex // guards the fields below
	rate   float64    // calls per second now
	calm   time.Time  // the last decrease, or the last quiet doubling since
	tokens float64    // may go negative: tokens promised to waiters
	last   time.Time  // when tokens was last brought up to date
}

const (
	// pacerFloor is the lowest rate a node falls to: one call every ten
	// seconds still lets a node that is alone again climb back.
	pacerFloor = 0.1
	// pacerStepFraction of the configured rate is the additive increase
	// per second of successful calls (0.01 calls/s per second at 10 qps):
	// slow enough that a hundred nodes climbing together add a call per
	// second each second, far less than they took off with one halving.
	pacerStepFraction = 0.001
	// pacerQuiet without throttling doubles the rate (see reserve).
	pacerQuiet = time.Minute
)

func newPacer(qps float64, burst int) *pacer {
	return &pacer{ceiling: qps, burst: float64(max(1, burst)), rate: qps, tokens: float64(max(1, burst))}
}

// wait takes a token at the learned rate and blocks until it may be used.
func (p *pacer) wait(ctx context.Context, clk Clock) error {
	return sleep(ctx, clk, p.reserve(clk.Now()))
}

// reserve takes a token at now and returns how long the caller must wait
// before using it (FIFO by going into debt, as bucket.reserve does).
func (p *pacer) reserve(now time.Time) time.Duration {
	if p == nil || p.ceiling <= 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last.IsZero() {
		p.last = now
	}
	// A quiet spell (no throttling for pacerQuiet) doubles the rate: a
	// node that stopped calling after a storm is not left crippled.
	for p.rate < p.ceiling && !p.calm.IsZero() && now.Sub(p.calm) >= pacerQuiet {
		p.rate = min(p.ceiling, 2*p.rate)
		p.calm = p.calm.Add(pacerQuiet)
	}
	if el := now.Sub(p.last); el > 0 {
		p.tokens = min(max(1, p.burst*p.rate/p.ceiling), p.tokens+el.Seconds()*p.rate)
		p.last = now
	}
	p.tokens--
	if p.tokens >= 0 {
		return 0
	}
	return time.Duration(-p.tokens / p.rate * float64(time.Second))
}

// decrease halves the rate after a throttling episode that began at now,
// and drops saved-up tokens: a refused fleet must not come back in a burst.
func (p *pacer) decrease(now time.Time) {
	if p == nil || p.ceiling <= 0 {
		return
	}
	p.mu.Lock()
	p.calm = now
	p.rate = max(pacerFloor, p.rate/2)
	p.tokens = min(p.tokens, 0)
	p.mu.Unlock()
}

// increase adds one success's share of the additive step.
func (p *pacer) increase() {
	if p == nil || p.ceiling <= 0 {
		return
	}
	p.mu.Lock()
	p.rate = min(p.ceiling, p.rate+p.ceiling*pacerStepFraction/p.rate)
	p.mu.Unlock()
}

// current is the learned rate, for metrics and tests.
func (p *pacer) current() float64 {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rate
}

// Priority says whether a call may wait for others (see WithPriority).
type Priority int

const (
	// Normal calls are retried after throttling like any other.
	Normal Priority = iota
	// Optional calls only top up the idle pool or release surplus: after a
	// refusal for throttling they are not retried in the client but
	// returned at once (ErrThrottled), so that calls a waiting pod needs go
	// first and the next pass plans the optional work again.
	Optional
)

type priorityKey struct{}

// WithPriority returns a context whose calls have priority p.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

func priorityOf(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey{}).(Priority)
	return p
}
