package planner

import (
	"time"

	"github.com/enidnet/enid/desired"
)

// NextDeadline returns the earliest time after now at which a plan could
// change although nothing observed or desired did: a cooldown or a sticky
// hold ends, idle has been above maxIdle for releaseDelay, a vSwitch stops
// being skipped (exhausted, or fragmented: no prefix asked of it), a
// security-group set the cloud refused may be created again, a leaked
// ENI's grace ends, a backed-off action may run again (Backoffs: the
// actions' NotBefore), an entry whose netns is gone is given up, an
// admitted pod without an entry stops counting as demand, an
// unschedulable node's pool is to shrink (pool.unschedulableRelease). The
// agent plans again then. It reports false when no such time is pending.
func (m Memory) NextDeadline(cfg desired.Config, opt Options) (time.Time, bool) {
	var next time.Time
	consider := func(t time.Time) {
		if t.After(opt.Now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, t := range m.Cooldowns {
		consider(t)
	}
	for _, r := range m.Sticky {
		if !r.Until.IsZero() {
			consider(r.Until)
		}
	}
	if !m.IdleAboveMaxSince.IsZero() {
		consider(m.IdleAboveMaxSince.Add(cfg.Pool.ReleaseDelay.D()))
	}
	for _, t := range m.SetIdleAboveMaxSince {
		consider(t.Add(cfg.Pool.ReleaseDelay.D()))
	}
	for _, t := range m.Exhausted {
		consider(t)
	}
	for _, t := range m.Fragmented {
		consider(t)
	}
	for _, t := range m.RefusedGroups {
		consider(t)
	}
	for _, b := range m.Backoffs {
		consider(b.Until)
	}
	if !m.SpreadUntil.IsZero() {
		consider(m.SpreadUntil)
	}
	grace := opt.LeakGrace
	if grace <= 0 {
		grace = DefaultLeakGrace
	}
	for _, t := range m.LeakedSince {
		consider(t.Add(grace))
	}
	for _, t := range m.Unseen {
		consider(t.Add(UnseenGrace))
	}
	for _, t := range m.NetNSGone {
		consider(t.Add(cfg.StaleEntryTimeout.D()))
	}
	m.admittedDeadlines(opt, consider)
	if d := cfg.Pool.UnschedulableRelease.D(); d > 0 && !opt.Unschedulable.IsZero() {
		consider(opt.Unschedulable.Add(d))
	}
	return next, !next.IsZero()
}
