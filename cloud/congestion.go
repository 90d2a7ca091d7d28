package cloud

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// congestion is a client's shared backoff after the API refused a call for
// a rate limit (ErrThrottled): every call of the client, not only the
// refused one, waits until it passes. An agent's parallel calls then back
// off together, and a fleet of agents sharing one account's limit lowers
// the rate it offers instead of retrying each call on its own: 100 agents
// joining at once against 20 calls/s made 130 calls each, 81% of them
// throttled, without it, and 25 with it (go run ./bench -run fleet
// -fleet-nodes 100 -fleet-join-all; docs/benchmarks.md).
type congestion struct {
	base, max time.Duration // the first backoff and its cap (the retry policy's)

	mu    sync.Mutex // guards until and level
	until time.Time  // no call starts before it
	level int        // refusals not yet worked off by successes
}

func newCongestion(base, max time.Duration) *congestion {
	return &congestion{base: base, max: max}
}

// wait blocks until the backoff has passed, or ctx ends.
func (g *congestion) wait(ctx context.Context, clk Clock) error {
	g.mu.Lock()
	d := g.until.Sub(clk.Now())
	g.mu.Unlock()
	return sleep(ctx, clk, d)
}

// throttled records a refusal at now and reports whether it starts a new
// episode. A refusal that arrives while a backoff runs came from a call
// sent before it, so it extends nothing; after one, the backoff doubles
// (equal jitter, capped at max).
func (g *congestion) throttled(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Before(g.until) {
		return false
	}
	d := g.base
	for i := 0; i < g.level && d < g.max; i++ {
		d *= 2
	}
	d = min(d, g.max)
	g.level++
	half := d / 2
	g.until = now.Add(half + rand.N(half+1))
	return true
}

// backoffUntil is when the current backoff ends (zero or past: none runs).
func (g *congestion) backoffUntil() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.until
}

// succeeded works one refusal off.
func (g *congestion) succeeded() {
	g.mu.Lock()
	g.level = max(0, g.level-1)
	g.mu.Unlock()
}
