package cloud

import (
	"context"
	"sync"
	"time"
)

// bucket is a token bucket: rate tokens per second, holding at most burst.
// A bucket with rate <= 0 never makes anyone wait.
type bucket struct {
	rate  float64
	burst float64

	mu     sync.Mutex // guards tokens and last
	tokens float64    // may go negative: tokens promised to waiters
	last   time.Time  // when tokens was last brought up to date
}

func newBucket(qps float64, burst int) *bucket {
	if burst < 1 {
		burst = 1
	}
	return &bucket{rate: qps, burst: float64(burst), tokens: float64(burst)}
}

// reserve takes one token at now and returns how long the caller must wait
// before using it. Taking the token at once (and going into debt) keeps
// waiters in FIFO order without a queue.
func (b *bucket) reserve(now time.Time) time.Duration {
	if b == nil || b.rate <= 0 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last.IsZero() {
		b.last = now
	}
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(b.burst, b.tokens+el.Seconds()*b.rate)
		b.last = now
	}
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// limiter is the overall bucket plus one per action that has its own rate.
type limiter struct {
	all       *bucket
	perAction map[string]*bucket // read-only after newLimiter
}

func newLimiter(rl RateLimit) *limiter {
	l := &limiter{all: newBucket(rl.QPS, rl.Burst), perAction: map[string]*bucket{}}
	for action, r := range rl.PerAction {
		l.perAction[action] = newBucket(r.QPS, r.Burst)
	}
	return l
}

// wait blocks until action may be called under both its own and the overall
// bucket, or ctx ends. A token taken by a caller whose ctx then ends is not
// given back: the bucket errs on the side of calling less.
func (l *limiter) wait(ctx context.Context, clk Clock, action string) error {
	now := clk.Now()
	d := max(l.perAction[action].reserve(now), l.all.reserve(now))
	if d <= 0 {
		return ctx.Err()
	}
	return sleep(ctx, clk, d)
}

// sleep waits for d on clk, or until ctx ends.
func sleep(ctx context.Context, clk Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-clk.After(d):
		return nil
	}
}
