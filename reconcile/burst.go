package reconcile

import (
	"time"

	"github.com/enidnet/enid/planner"
)

// Demand coalescing: a burst of CNI ADDs writes its entries over tens of
// milliseconds. A round of cloud calls that creates an ENI waits until the
// set of entries has been quiet for burstQuiet (at most burstMax from the
// burst's first change), so it is planned from the whole burst; a round
// planned from its first few entries would be followed by a second round
// after the first one's attach (cloud changes go in rounds). Rounds that
// only top up the idle pool, node actions and statuses are never held.
const (
	burstQuiet = 30 * time.Millisecond
	burstMax   = 300 * time.Millisecond
)

// createsENI reports whether the plan creates an ENI. A burst holds such a
// round, or one that pods wait for; a round that only tops up the idle
// pool goes at once, or a steady stream of pods would keep it from ever
// going and run the pool dry.
func createsENI(p planner.Plan) bool {
	for _, a := range p.Actions {
		if a.Kind == planner.CreateENI {
			return true
		}
	}
	return false
}

// burst records the entry set's fingerprint and reports whether this pass
// holds p's cloud round back: in a burst, a round that creates an ENI or
// that pods wait for waits until burstUntil, which the loop wakes for. A
// pass that holds nothing clears it: the loop wakes at a window's end only
// for a held round (a pod the pool served would otherwise bring a pass 30
// ms after its entry that plans the whole node for nothing).
func (a *Agent) burst(now time.Time, fp uint64, p planner.Plan) bool {
	if fp != a.entriesFP {
		a.entriesFP = fp
		if a.burstStart.IsZero() || now.Sub(a.burstChanged) >= burstQuiet {
			a.burstStart = now
		}
		a.burstChanged = now
	}
	if a.burstStart.IsZero() || now.Sub(a.burstChanged) >= burstQuiet || now.Sub(a.burstStart) >= burstMax {
		a.burstStart, a.burstUntil = time.Time{}, time.Time{}
		return false
	}
	if p.Pool.Waiting == 0 && !createsENI(p) {
		a.burstUntil = time.Time{}
		return false
	}
	a.burstUntil = a.burstChanged.Add(burstQuiet)
	if last := a.burstStart.Add(burstMax); last.Before(a.burstUntil) {
		a.burstUntil = last
	}
	return true
}
