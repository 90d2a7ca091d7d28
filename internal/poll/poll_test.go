package poll

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/internal/clock"
)

func TestUntil(t *testing.T) {
	ctx := context.Background()
	n := 0
	if err := Until(ctx, clock.Real{}, time.Second, time.Millisecond, func() (bool, error) { n++; return n == 3, nil }); err != nil || n != 3 {
		t.Fatalf("holds on the third call: err %v after %d calls", err, n)
	}
	boom := errors.New("boom")
	if err := Until(ctx, clock.Real{}, time.Second, time.Millisecond, func() (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Fatalf("a failing condition: err %v, want boom", err)
	}
	if err := Until(ctx, clock.Real{}, 5*time.Millisecond, time.Millisecond, func() (bool, error) { return false, nil }); err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("never holds: err %v, want a time-out", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := Until(cctx, clock.Real{}, time.Minute, time.Minute, func() (bool, error) { return false, nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err %v, want context.Canceled", err)
	}
}

// TestUntilOnVirtualTime: the time-out is the caller's clock's: on a
// virtual clock the wait gives up once the clock passed it, after as many
// asks as intervals fit, without waiting on the wall clock.
func TestUntilOnVirtualTime(t *testing.T) {
	v := clock.NewVirtual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // bounds the test on the wall clock
	defer cancel()
	wait, waited := context.WithCancel(ctx)
	done := make(chan error, 1)
	n := 0
	go func() {
		done <- Until(ctx, v, time.Minute, 10*time.Second, func() (bool, error) { n++; return false, nil })
		waited()
	}()
	// Move the clock each time Until sleeps, until it returns.
	for v.BlockUntil(wait, 1) == nil {
		v.Step()
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("err %v, want a time-out", err)
	}
	if n != 8 {
		t.Fatalf("asked %d times in a minute at 10s intervals, want 8 (at 0s, 10s, ..., 70s)", n)
	}
}
