package poll

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	ctx := context.Background()
	n := 0
	if err := Until(ctx, time.Second, time.Millisecond, func() (bool, error) { n++; return n == 3, nil }); err != nil || n != 3 {
		t.Fatalf("holds on the third call: err %v after %d calls", err, n)
	}
	boom := errors.New("boom")
	if err := Until(ctx, time.Second, time.Millisecond, func() (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Fatalf("a failing condition: err %v, want boom", err)
	}
	if err := Until(ctx, 5*time.Millisecond, time.Millisecond, func() (bool, error) { return false, nil }); err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("never holds: err %v, want a time-out", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := Until(cctx, time.Minute, time.Minute, func() (bool, error) { return false, nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err %v, want context.Canceled", err)
	}
}
