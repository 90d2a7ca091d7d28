package cloud

import (
	"testing"
	"time"
)

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
