// Package clock is the agent's one source of time: every component that
// reads the time, waits or keeps a timer takes a Clock from its owner
// (cmd/enid wires Real; tests and the deterministic simulation wire a
// Virtual clock, on which time moves only when they move it). It sits
// beside the whole desired -> observed -> plan -> execute chain, below all
// of it: a leaf that imports only the standard library.
//
// The planner never reads a clock (time comes in planner.Options.Now);
// the loop that calls it does, through this package.
package clock

import (
	"context"
	"time"
)

// Clock tells the time and waits. Implementations are safe for concurrent
// use.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// After is time.After on this clock. The timer behind it lives until
	// it fires: where the wait may end otherwise, use NewTimer and Stop
	// it (on a Virtual clock a timer left armed counts as a waiter).
	After(d time.Duration) <-chan time.Time
	// NewTimer is time.NewTimer on this clock: it fires once, d from now
	// (at once for d <= 0).
	NewTimer(d time.Duration) Timer
	// NewTicker is time.NewTicker on this clock; d must be positive.
	NewTicker(d time.Duration) Ticker
	// Sleep waits for d, or until ctx ends, and returns ctx.Err() then
	// (for d <= 0 it returns ctx.Err() at once).
	Sleep(ctx context.Context, d time.Duration) error
}

// Timer is time.Timer on a Clock, with Go 1.23's semantics: after Stop or
// Reset returns, C delivers no value made before the call.
type Timer interface {
	// C delivers the time the timer fired at.
	C() <-chan time.Time
	// Stop disarms the timer; it reports whether the timer was armed.
	Stop() bool
	// Reset arms the timer to fire d from now; it reports whether the
	// timer was armed.
	Reset(d time.Duration) bool
}

// Ticker is time.Ticker on a Clock: ticks a slow receiver misses are
// dropped, not queued.
type Ticker interface {
	// C delivers the ticks.
	C() <-chan time.Time
	// Stop turns the ticker off.
	Stop()
	// Reset stops the ticker and starts it again with period d (> 0).
	Reset(d time.Duration)
}

// Real is the wall clock: package time. The zero value is ready to use.
type Real struct{}

// Now is time.Now.
func (Real) Now() time.Time { return time.Now() }

// After is time.After.
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// NewTimer is time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// NewTicker is time.NewTicker.
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

// Sleep waits for d on the wall clock, or until ctx ends.
func (Real) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time   { return r.t.C }
func (r realTicker) Stop()                 { r.t.Stop() }
func (r realTicker) Reset(d time.Duration) { r.t.Reset(d) }

// OrReal is c, or Real when c is nil: the default of every component's
// Clock field.
func OrReal(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// WithTimeout is context.WithTimeout on clk: the context ends when clk
// passes d from now. A clock with a WithTimeout method of its own decides
// (Real's is context.WithTimeout, so the deadline also bounds network I/O
// that reads ctx.Deadline; a test double whose waits end at once can keep
// its contexts from ending at once). On any other clock (Virtual) the
// context has no Deadline (a deadline in virtual time means nothing to a
// socket) and its Err is context.DeadlineExceeded once clk's timer fired
// (contexts derived from it report context.Canceled, with
// context.DeadlineExceeded as their Cause); a goroutine waits on that
// timer until it fires or the context ends, so cancel must be called, as
// for context.WithTimeout.
func WithTimeout(parent context.Context, clk Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if clk == nil {
		clk = Real{}
	}
	if tc, ok := clk.(timeouter); ok {
		return tc.WithTimeout(parent, d)
	}
	ctx, cancel := context.WithCancelCause(parent)
	t := clk.NewTimer(d)
	go func() {
		select {
		case <-t.C():
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
			t.Stop()
		}
	}()
	return timeoutCtx{ctx}, func() { cancel(context.Canceled) }
}

// timeouter is a Clock that bounds contexts itself (see WithTimeout).
type timeouter interface {
	WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc)
}

// WithTimeout is context.WithTimeout.
func (Real) WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, d)
}

// timeoutCtx reports its own timer's end as context.DeadlineExceeded, as
// context.WithTimeout's context does, so callers may test for it.
type timeoutCtx struct{ context.Context }

func (c timeoutCtx) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return err
}
