package cloud

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/enidnet/enid/internal/clock"
)

func testLimiter(rl RateLimit, base, maxD time.Duration) *limiter {
	return newLimiter(rl, base, maxD, clock.Real{}, rand.New(rand.NewPCG(1, 1)))
}

// TestLimiterBacksOffTogether: a refusal starts a backoff that holds every
// call of the client; refusals of calls granted before it began extend
// nothing; the next episode's backoff doubles, up to the cap; successes
// work the episodes off.
func TestLimiterBacksOffTogether(t *testing.T) {
	base, maxD := 100*time.Millisecond, 400*time.Millisecond
	l := testLimiter(RateLimit{QPS: 10, Burst: 20}, base, maxD)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	within := func(what string, from time.Time, lo, hi time.Duration) {
		t.Helper()
		if d := l.hold.Sub(from); d < lo || d > hi {
			t.Errorf("%s: backoff ends %s after the refusal, want within [%s, %s]", what, d, lo, hi)
		}
		if at := l.grantAtLocked(from); at.Before(l.hold) {
			t.Errorf("%s: a call may go at %s, before the backoff ends at %s", what, at.Sub(from), l.hold.Sub(from))
		}
		if at := l.optionalAtLocked(from); at.Before(l.hold) {
			t.Errorf("%s: optional work may go at %s, before the backoff ends at %s", what, at.Sub(from), l.hold.Sub(from))
		}
	}
	early := ticket{at: t0}
	l.reportLocked(t0.Add(time.Millisecond), ticket{at: t0}, answeredThrottled)
	within("first refusal", t0.Add(time.Millisecond), base/2, base)
	first := l.hold
	// A call sent before the backoff began, refused after: the same episode.
	l.reportLocked(t0.Add(2*time.Millisecond), early, answeredThrottled)
	if !l.hold.Equal(first) || l.level != 1 {
		t.Errorf("a refusal of an earlier call changed the backoff: until %s, level %d", l.hold.Sub(t0), l.level)
	}
	// Refusals of calls granted after it double it, up to the cap.
	now := first
	l.reportLocked(now.Add(time.Millisecond), ticket{at: now}, answeredThrottled)
	within("second episode", now.Add(time.Millisecond), base, 2*base)
	for range 5 {
		now = l.hold
		l.reportLocked(now.Add(time.Millisecond), ticket{at: now}, answeredThrottled)
	}
	within("capped", now.Add(time.Millisecond), maxD/2, maxD)
	for range 10 {
		l.reportLocked(l.hold, ticket{at: l.hold}, answeredOK)
	}
	if l.level != 0 {
		t.Errorf("level %d after ten successes, want 0", l.level)
	}
	now = l.hold.Add(time.Second)
	l.reportLocked(now, ticket{at: now}, answeredThrottled)
	within("after recovery", now, base/2, base)
}

// TestLimiterCutWeighsTheShareRefused: an episode cuts the learned rate by
// a third when few of the node's recent answers were refusals, by half
// when all were; never below the floor.
func TestLimiterCutWeighsTheShareRefused(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := testLimiter(RateLimit{QPS: 10, Burst: 20}, time.Millisecond, time.Millisecond)
	for i := range 15 {
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		l.reportLocked(at, ticket{at: at}, answeredOK)
	}
	now := t0.Add(time.Second)
	l.reportLocked(now, ticket{at: now}, answeredThrottled)
	if got := l.rateLocked(now); got < 6.4 || got > 6.6 {
		t.Errorf("one refusal among 16 answers: rate %.3f, want 10 x (1 - 0.7/2) = 6.5", got)
	}
	l = testLimiter(RateLimit{QPS: 10, Burst: 20}, time.Millisecond, time.Millisecond)
	l.reportLocked(now, ticket{at: now}, answeredThrottled)
	if got := l.rateLocked(now); got != 5 {
		t.Errorf("a refusal as the only answer: rate %.3f, want 5 (halved)", got)
	}
	// Refusals within limitEpisode of a cut are the same evidence: they
	// start backoffs but cut nothing.
	at := now.Add(limitEpisode / 2)
	l.reportLocked(at, ticket{at: at}, answeredThrottled)
	if got := l.rateLocked(at); got != 5 {
		t.Errorf("a refusal %v after a cut: rate %.3f, want 5 still", limitEpisode/2, got)
	}
	for i := range 8 {
		at := now.Add(time.Duration(i+1) * limitEpisode)
		l.reportLocked(at, ticket{at: at}, answeredThrottled)
	}
	if got := l.rateLocked(now.Add(8 * limitEpisode)); got != limitFloor {
		t.Errorf("after eight episodes: rate %v, want the floor %v", got, limitFloor)
	}
	// Starving (no success for limitStarve since the first refusal): it
	// may call at limitStarveRate, until a success.
	if got := l.rateLocked(now.Add(limitStarve)); got != limitStarveRate {
		t.Errorf("refused for %v: rate %v, want %v", limitStarve, got, limitStarveRate)
	}
	at = now.Add(limitStarve + time.Second)
	l.reportLocked(at, ticket{at: at}, answeredOK)
	if got := l.rateLocked(at); got > 2*limitFloor {
		t.Errorf("after a success: rate %v, want the learned one again (about %v)", got, limitFloor)
	}
}

// TestLimiterClimbs: successes add limitCareful x the configured rate per
// second of calls at the node's rate; once the evidence is stale the rate
// doubles every second, first up to the rate the episode cut, then (after
// as long again) up to the configured rate.
func TestLimiterClimbs(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := testLimiter(RateLimit{QPS: 10, Burst: 20}, time.Millisecond, time.Millisecond)
	l.reportLocked(t0, ticket{at: t0}, answeredThrottled) // 10 -> 5: the episode cut 10
	for i := range 5 {
		at := t0.Add(time.Duration(i+1) * 100 * time.Millisecond)
		l.reportLocked(at, ticket{at: at}, answeredOK)
	}
	// Five successes at 5/s (a second's worth) add about 0.01.
	if got := l.rateLocked(t0.Add(500 * time.Millisecond)); got < 5.009 || got > 5.011 {
		t.Errorf("rate %.4f after a second of successes at 5/s, want about 5.01", got)
	}
	// One episode so far: stale after limitQuiet (1s).
	if got, want := l.staleAfterLocked(), limitQuiet; got != want {
		t.Fatalf("stale after %v, want %v", got, want)
	}
	if got := l.rateLocked(t0.Add(1500 * time.Millisecond)); got < 5.01*1.41 || got > 5.01*1.42 {
		t.Errorf("half a second into the stale evidence: rate %.3f, want about 5.01 x sqrt 2", got)
	}
	if got := l.rateLocked(t0.Add(1900 * time.Millisecond)); got > 10 {
		t.Errorf("rate %.3f above the configured 10", got)
	}
	l = testLimiter(RateLimit{QPS: 10, Burst: 20}, time.Millisecond, time.Millisecond)
	l.reportLocked(t0, ticket{at: t0}, answeredThrottled) // 10 -> 5
	calm := t0.Add(time.Second)
	l.reportLocked(calm, ticket{at: calm}, answeredThrottled) // cuts 5 -> 2.5, as the first goes stale
	// Episodes 1s apart: stale 3 x 1s after the last.
	if got, want := l.staleAfterLocked(), 3*time.Second; got != want {
		t.Fatalf("stale after %v, want %v", got, want)
	}
	for _, c := range []struct {
		after time.Duration
		want  float64
	}{{2 * time.Second, 2.5}, {3500 * time.Millisecond, 2.5 * 1.4142}, {5 * time.Second, 5}, {6500 * time.Millisecond, 5 * 1.4142}, {7200 * time.Millisecond, 10}} {
		if got := l.rateLocked(calm.Add(c.after)); got < c.want*0.999 || got > c.want*1.001 {
			t.Errorf("%v after the last episode: rate %.3f, want %.3f", c.after, got, c.want)
		}
	}
}

// TestLimiterWaitOrder: calls queued in the blocking shell are granted
// Normal before Optional, first come first served within each, one per
// token of the configured rate.
func TestLimiterWaitOrder(t *testing.T) {
	clk := clock.NewVirtual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := newLimiter(RateLimit{QPS: 10, Burst: 1}, time.Millisecond, time.Millisecond, clk, rand.New(rand.NewPCG(1, 1)))
	ctx := testCtx(t)
	if _, err := l.wait(ctx, "A", Normal); err != nil { // takes the burst
		t.Fatal(err)
	}
	queued := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.queue)
	}
	granted := make(chan string, 4)
	for i, c := range []struct {
		name string
		p    Priority
	}{{"opt1", Optional}, {"opt2", Optional}, {"norm1", Normal}, {"norm2", Normal}} {
		go func() {
			if _, err := l.wait(ctx, "A", c.p); err != nil {
				t.Error(err)
			}
			granted <- c.name
		}()
		for queued() < i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	var order []string
	for range 4 {
		// Nothing goes before its token (100ms at 10/s).
		select {
		case g := <-granted:
			t.Fatalf("%s granted before its token", g)
		case <-time.After(10 * time.Millisecond):
		}
		// The head is asleep until its token: its timer is armed.
		if err := clk.BlockUntil(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(100 * time.Millisecond)
		select {
		case g := <-granted:
			order = append(order, g)
		case <-time.After(5 * time.Second):
			t.Fatalf("nothing granted after a token's time; so far %v", order)
		}
	}
	if want := []string{"norm1", "norm2", "opt1", "opt2"}; !slices.Equal(order, want) {
		t.Errorf("grant order %v, want %v", order, want)
	}
}

// TestLimiterWaitEndsWithContext: a call waiting out a backoff returns
// when its context ends, and leaves the queue.
func TestLimiterWaitEndsWithContext(t *testing.T) {
	l := testLimiter(RateLimit{}, time.Hour, time.Hour)
	now := time.Now()
	l.report(ticket{at: now}, answeredThrottled)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.wait(ctx, "A", Normal); err == nil {
		t.Fatal("wait returned nil while an hour's backoff runs and the context ended")
	}
	l.mu.Lock()
	n := len(l.queue)
	l.mu.Unlock()
	if n != 0 {
		t.Errorf("%d calls left in the queue", n)
	}
	if _, err := testLimiter(RateLimit{}, time.Second, time.Second).wait(context.Background(), "A", Optional); err != nil {
		t.Fatalf("wait without a limit or a backoff: %v", err)
	}
}

func TestBucketReserve(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newBucket(10, 3) // 10/s, burst 3
	var got []time.Duration
	for range 5 {
		got = append(got, b.reserve(t0))
	}
	want := []time.Duration{0, 0, 0, 100 * time.Millisecond, 200 * time.Millisecond}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("reserve #%d at t0 = %v, want %v (all %v)", i, got[i], want[i], got)
		}
	}
	// 1s later the debt of 2 is paid and the bucket holds its burst of 3
	// again (not 8: refills stop at the burst).
	t1 := t0.Add(time.Second)
	for i := range 3 {
		if d := b.reserve(t1); d != 0 {
			t.Fatalf("reserve #%d at t0+1s = %v, want 0", i, d)
		}
	}
	if d := b.reserve(t1); d != 100*time.Millisecond {
		t.Fatalf("4th reserve at t0+1s = %v, want 100ms", d)
	}
	if d := newBucket(0, 0).reserve(t0); d != 0 {
		t.Fatalf("unlimited bucket made a caller wait %v", d)
	}
}

// TestRateLimitPacesCalls runs real calls through the SDK and checks that
// the overall and per-action buckets pace them.
func TestRateLimitPacesCalls(t *testing.T) {
	srv := newFaultServer(t, func(string, int) (int, string) { return 200, okDelete })
	cfg := fastConfig(srv.endpoint())
	cfg.RateLimit = RateLimit{QPS: 100, Burst: 1, PerAction: map[string]ActionRate{
		"DetachNetworkInterface": {QPS: 20, Burst: 1},
	}}
	c := newTestClient(t, cfg)
	ctx := testCtx(t)

	start := time.Now()
	for range 6 {
		if err := c.DeleteENI(ctx, "eni-1"); err != nil {
			t.Fatal(err)
		}
	}
	// 6 calls at 100/s with burst 1: at least 5 intervals of 10ms.
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Errorf("6 calls at 100 qps took %v, want >= 50ms", el)
	}
	start = time.Now()
	for range 4 {
		if err := c.DetachENI(ctx, "eni-1", "i-1"); err != nil {
			t.Fatal(err)
		}
	}
	// 4 detaches at 20/s: at least 3 intervals of 50ms.
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Errorf("4 detaches at 20 qps took %v, want >= 150ms", el)
	}
}
