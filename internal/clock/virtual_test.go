package clock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

var (
	_ Clock = Real{}
	_ Clock = (*Virtual)(nil)
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// received is what c holds, without waiting (a fired waiter's value is in
// its channel when the move that fired it returns).
func received(c <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-c:
		return v, true
	default:
		return time.Time{}, false
	}
}

// TestVirtualStandsStill: nothing moves the clock but its owner, and a
// timer fires exactly when the clock reaches its deadline, with that
// deadline as its value.
func TestVirtualStandsStill(t *testing.T) {
	v := NewVirtual(t0)
	tm := v.NewTimer(time.Second)
	time.Sleep(5 * time.Millisecond) // wall time passes; the clock's does not
	if got := v.Now(); !got.Equal(t0) {
		t.Fatalf("Now = %v after wall time passed: want %v", got, t0)
	}
	if _, ok := received(tm.C()); ok {
		t.Fatal("a timer fired before the clock moved")
	}
	if n := v.Advance(999 * time.Millisecond); n != 0 {
		t.Fatalf("Advance short of the deadline fired %d waiters", n)
	}
	if _, ok := received(tm.C()); ok {
		t.Fatal("a timer fired 1ms before its deadline")
	}
	if n := v.Advance(time.Hour); n != 1 {
		t.Fatalf("Advance past the deadline fired %d waiters, want 1", n)
	}
	if got, ok := received(tm.C()); !ok || !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("timer delivered %v, %v: want its deadline %v", got, ok, t0.Add(time.Second))
	}
	if got := v.Now(); !got.Equal(t0.Add(999*time.Millisecond + time.Hour)) {
		t.Fatalf("Now = %v after the moves, want %v", got, t0.Add(999*time.Millisecond+time.Hour))
	}
	if tm.Stop() {
		t.Error("Stop of a fired timer reported it armed")
	}
}

// TestVirtualOrder: waiters fire by deadline, and those with the same
// deadline in the order they were armed, whatever order they were made in.
func TestVirtualOrder(t *testing.T) {
	v := NewVirtual(t0)
	type named struct {
		name string
		t    Timer
	}
	var ts []named
	for _, c := range []struct {
		name string
		d    time.Duration
	}{{"c3", 3 * time.Second}, {"a1", time.Second}, {"b2", 2 * time.Second}, {"d1", time.Second}, {"e3", 3 * time.Second}, {"f1", time.Second}} {
		ts = append(ts, named{c.name, v.NewTimer(c.d)})
	}
	// Re-arming moves a timer behind those armed before it.
	ts[1].t.Reset(time.Second) // a1 now after d1 and f1
	var order []string
	var at []time.Duration
	for {
		now, ok := v.Step()
		if !ok {
			break
		}
		fired := 0
		for _, n := range ts {
			if _, ok := received(n.t.C()); ok {
				order = append(order, n.name)
				fired++
			}
		}
		if fired != 1 {
			t.Fatalf("a Step fired %d timers, want 1", fired)
		}
		at = append(at, now.Sub(t0))
	}
	if want := []string{"d1", "f1", "a1", "b2", "c3", "e3"}; !slices.Equal(order, want) {
		t.Errorf("fired in order %v, want %v", order, want)
	}
	if want := []time.Duration{1, 1, 1, 2, 3, 3}; !slices.Equal(at, scale(want, time.Second)) {
		t.Errorf("Step reached %v, want %v", at, scale(want, time.Second))
	}
}

func scale(ds []time.Duration, unit time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d * unit
	}
	return out
}

// TestVirtualAdvanceFiresEachAtItsDeadline: one move over several
// deadlines delivers each waiter its own deadline, and a woken goroutine
// sees the time the move reached, not a time in between.
func TestVirtualAdvanceFiresEachAtItsDeadline(t *testing.T) {
	v := NewVirtual(t0)
	a, b := v.NewTimer(time.Second), v.NewTimer(5*time.Second)
	if n := v.Advance(10 * time.Second); n != 2 {
		t.Fatalf("fired %d, want 2", n)
	}
	if got, _ := received(a.C()); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("a delivered %v, want %v", got, t0.Add(time.Second))
	}
	if got, _ := received(b.C()); !got.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("b delivered %v, want %v", got, t0.Add(5*time.Second))
	}
	if _, ok := v.AdvanceToNext(); ok {
		t.Error("AdvanceToNext moved with nothing armed")
	}
	if got := v.Now(); !got.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("Now = %v, want %v", got, t0.Add(10*time.Second))
	}
}

// TestVirtualStopReset: Stop and Reset report whether the timer was
// armed, and after either no stale value is received (Go 1.23 timers).
func TestVirtualStopReset(t *testing.T) {
	v := NewVirtual(t0)
	tm := v.NewTimer(time.Second)
	if !tm.Stop() {
		t.Error("Stop of an armed timer reported it not armed")
	}
	if tm.Stop() {
		t.Error("a second Stop reported the timer armed")
	}
	v.Advance(time.Hour)
	if _, ok := received(tm.C()); ok {
		t.Fatal("a stopped timer fired")
	}
	tm.Reset(time.Second)
	v.Advance(time.Second) // fired, value pending
	if tm.Reset(time.Minute) {
		t.Error("Reset of a fired timer reported it armed")
	}
	if _, ok := received(tm.C()); ok {
		t.Fatal("the value of the fire before Reset was received after it")
	}
	if v.Waiters() != 1 {
		t.Fatalf("%d waiters after Reset, want 1", v.Waiters())
	}
	v.Advance(time.Minute)
	if got, ok := received(tm.C()); !ok || !got.Equal(t0.Add(time.Hour+time.Second+time.Minute)) {
		t.Fatalf("reset timer delivered %v, %v", got, ok)
	}
	// d <= 0 fires at once, arming nothing.
	z := v.NewTimer(0)
	if got, ok := received(z.C()); !ok || !got.Equal(v.Now()) {
		t.Errorf("NewTimer(0) delivered %v, %v: want now at once", got, ok)
	}
	if v.Waiters() != 0 {
		t.Errorf("%d waiters left", v.Waiters())
	}
}

// TestVirtualTicker: a ticker ticks once per period passed in Steps, once
// per move however many periods it passed (missed ticks are dropped), and
// stays on its grid; Stop ends it, Reset restarts it from now.
func TestVirtualTicker(t *testing.T) {
	v := NewVirtual(t0)
	tk := v.NewTicker(2 * time.Second)
	for i := 1; i <= 3; i++ {
		now, _ := v.Step()
		if got, ok := received(tk.C()); !ok || !got.Equal(t0.Add(time.Duration(2*i)*time.Second)) || !now.Equal(got) {
			t.Fatalf("tick %d: %v, %v (clock at %v)", i, got, ok, now)
		}
	}
	// At 6s; a move of 9s passes the ticks at 8, 10, 12 and 14s.
	if n := v.Advance(9 * time.Second); n != 1 {
		t.Fatalf("a long move fired %d ticks, want 1 (the rest dropped)", n)
	}
	if got, _ := received(tk.C()); !got.Equal(t0.Add(8 * time.Second)) {
		t.Errorf("the move's tick was at %v, want 8s", got.Sub(t0))
	}
	if next, _ := v.Next(); !next.Equal(t0.Add(16 * time.Second)) {
		t.Errorf("next tick at %v, want 16s (the grid)", next.Sub(t0))
	}
	tk.Reset(time.Second) // from 15s
	if next, _ := v.Next(); !next.Equal(t0.Add(16 * time.Second)) {
		t.Errorf("after Reset(1s) at 15s the next tick is at %v, want 16s", next.Sub(t0))
	}
	tk.Stop()
	if v.Waiters() != 0 {
		t.Fatalf("%d waiters after Stop", v.Waiters())
	}
	v.Advance(time.Hour)
	if _, ok := received(tk.C()); ok {
		t.Fatal("a stopped ticker ticked")
	}
}

// TestVirtualSleep: Sleep ends when the clock passes it, or with ctx,
// disarming its timer.
func TestVirtualSleep(t *testing.T) {
	v := NewVirtual(t0)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- v.Sleep(ctx, time.Minute) }()
	if err := v.BlockUntil(testCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		t.Fatal("Sleep returned before the clock moved")
	default:
	}
	v.Advance(time.Minute)
	if err := <-done; err != nil {
		t.Fatalf("Sleep: %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	go func() { done <- v.Sleep(cctx, time.Minute) }()
	if err := v.BlockUntil(testCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Sleep: %v, want context.Canceled", err)
	}
	if n := v.Waiters(); n != 0 {
		t.Fatalf("a cancelled Sleep left %d waiters armed", n)
	}
	if err := v.Sleep(cctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(0) on a done ctx: %v", err)
	}
}

// TestVirtualBlockUntil: BlockUntil returns once n waiters are armed,
// and with ctx's error when they never are.
func TestVirtualBlockUntil(t *testing.T) {
	v := NewVirtual(t0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := v.BlockUntil(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("BlockUntil with nothing armed: %v, want the ctx's end", err)
	}
	for i := range 3 {
		go func() { _ = v.Sleep(context.Background(), time.Duration(i+1)*time.Second) }() // ends when the clock passes it
	}
	if err := v.BlockUntil(testCtx(t), 3); err != nil {
		t.Fatal(err)
	}
	if got := v.Waiters(); got != 3 {
		t.Fatalf("Waiters = %d, want 3", got)
	}
	v.Advance(3 * time.Second)
	if got := v.Waiters(); got != 0 {
		t.Fatalf("Waiters = %d after every sleep ended, want 0", got)
	}
}

// TestVirtualDeterministic is the simulation's pattern: goroutines that
// each wait on the clock in a loop, driven one Step at a time, each Step
// once every goroutine is parked again (BlockUntil). The trace is the one
// worked out by hand, on every run, whatever the scheduler does: equal
// deadlines go in the order the waits were armed.
func TestVirtualDeterministic(t *testing.T) {
	run := func() []string {
		v := NewVirtual(t0)
		var mu sync.Mutex
		var trace []string
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i, p := range []struct {
			name   string
			period time.Duration
		}{{"a", 3 * time.Second}, {"b", 2 * time.Second}, {"c", 3 * time.Second}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for v.Sleep(ctx, p.period) == nil {
					mu.Lock()
					trace = append(trace, fmt.Sprintf("%s@%s", p.name, v.Now().Sub(t0)))
					mu.Unlock()
				}
			}()
			// Started one by one, so that they arm in this order.
			if err := v.BlockUntil(testCtx(t), i+1); err != nil {
				t.Fatal(err)
			}
		}
		for range 8 {
			v.Step()
			if err := v.BlockUntil(testCtx(t), 3); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		wg.Wait()
		return trace
	}
	want := []string{"b@2s", "a@3s", "c@3s", "b@4s", "a@6s", "c@6s", "b@6s", "b@8s"}
	for i := range 20 {
		if got := run(); !slices.Equal(got, want) {
			t.Fatalf("run %d: trace %v, want %v", i, got, want)
		}
	}
}

// TestWithTimeout: on a Virtual clock the context ends when the clock
// passes the timeout, with DeadlineExceeded, and cancel disarms its timer;
// on Real it is context.WithTimeout, deadline and all.
func TestWithTimeout(t *testing.T) {
	v := NewVirtual(t0)
	ctx, cancel := WithTimeout(context.Background(), v, time.Minute)
	defer cancel()
	if _, ok := ctx.Deadline(); ok {
		t.Error("a virtual timeout gave the context a (wall clock) deadline")
	}
	if err := v.BlockUntil(testCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	v.Advance(time.Minute - time.Nanosecond)
	if ctx.Err() != nil {
		t.Fatal("the context ended before the clock passed its timeout")
	}
	v.Advance(time.Nanosecond)
	select {
	case <-ctx.Done():
	case <-testCtx(t).Done():
		t.Fatal("the context did not end when the clock passed its timeout")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("Err = %v, want DeadlineExceeded", ctx.Err())
	}

	ctx2, cancel2 := WithTimeout(context.Background(), v, time.Minute)
	if err := v.BlockUntil(testCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	cancel2()
	if !errors.Is(ctx2.Err(), context.Canceled) {
		t.Errorf("cancelled: Err = %v, want Canceled", ctx2.Err())
	}
	waitWaiters(t, v, 0)

	rctx, rcancel := WithTimeout(context.Background(), Real{}, time.Hour)
	defer rcancel()
	if dl, ok := rctx.Deadline(); !ok || time.Until(dl) < 59*time.Minute {
		t.Errorf("Real: deadline %v, %v: want one an hour away", dl, ok)
	}
}

// waitWaiters waits (on the clock's notifications) until exactly n
// waiters are armed.
func waitWaiters(t *testing.T, v *Virtual, n int) {
	t.Helper()
	ctx := testCtx(t)
	for {
		v.mu.Lock()
		armed, changed := len(v.armed), v.changed
		v.mu.Unlock()
		if armed == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d waiters armed, want %d", armed, n)
		case <-changed:
		}
	}
}

// TestReal: the wall clock's timers and sleeps work as package time's.
func TestReal(t *testing.T) {
	var c Real
	if err := c.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	tm := c.NewTimer(time.Hour)
	if !tm.Stop() {
		t.Error("Stop of an armed timer")
	}
	tm.Reset(time.Millisecond)
	<-tm.C()
	tk := c.NewTicker(time.Millisecond)
	<-tk.C()
	tk.Stop()
	<-c.After(time.Millisecond)
	if OrReal(nil) != (Real{}) {
		t.Error("OrReal(nil) is not Real")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a done ctx: %v", err)
	}
}

// testCtx bounds a test's waits on the wall clock (the clock under test
// never reads it).
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
