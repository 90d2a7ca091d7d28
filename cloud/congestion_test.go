package cloud

import (
	"context"
	"testing"
	"time"
)

func TestCongestionBacksOffTogether(t *testing.T) {
	base, maxD := 100*time.Millisecond, 400*time.Millisecond
	g := newCongestion(base, maxD)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	within := func(what string, lo, hi time.Duration) {
		t.Helper()
		if d := g.until.Sub(t0); d < lo || d > hi {
			t.Errorf("%s: backoff ends %s after t0, want within [%s, %s]", what, d, lo, hi)
		}
	}
	g.throttled(t0)
	within("first refusal", base/2, base)
	first := g.until
	// Refusals of calls sent before the backoff began extend nothing.
	g.throttled(t0.Add(time.Millisecond))
	if !g.until.Equal(first) || g.level != 1 {
		t.Errorf("a refusal during the backoff changed it: until %s level %d", g.until.Sub(t0), g.level)
	}
	// After it, the next refusal doubles the backoff, up to the cap.
	t0 = first
	g.throttled(t0)
	within("second refusal", base, 2*base)
	for range 5 {
		t0 = g.until
		g.throttled(t0)
	}
	within("capped", maxD/2, maxD)
	// Successes work the refusals off one by one.
	for range 10 {
		g.succeeded()
	}
	if g.level != 0 {
		t.Errorf("level %d after ten successes, want 0", g.level)
	}
	t0 = g.until
	g.throttled(t0)
	within("after recovery", base/2, base)
}

func TestCongestionWaitEndsWithContext(t *testing.T) {
	g := newCongestion(time.Hour, time.Hour)
	g.throttled(time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.wait(ctx, realClock{}); err == nil {
		t.Fatal("wait returned nil while an hour's backoff runs and the context ended")
	}
	if err := newCongestion(time.Second, time.Second).wait(context.Background(), realClock{}); err != nil {
		t.Fatalf("wait without a backoff: %v", err)
	}
}
