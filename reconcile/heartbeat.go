package reconcile

import (
	"reflect"
	"sync"
	"time"

	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

func (a *Agent) notReady(reason string) {
	a.log.Warn("agent not ready", "reason", reason)
	a.setReady(false, reason)
}

func (a *Agent) setReady(ready bool, reason string) {
	changed := a.ready != ready || a.reason != reason
	a.ready, a.reason = ready, reason
	if changed {
		a.writeHeartbeat()
	}
	if !ready {
		a.served = false
		return
	}
	if a.served || a.cfg.Serving == nil {
		return
	}
	if err := a.cfg.Serving(); err != nil {
		// Retried after the next ready pass; meanwhile the agent serves
		// all the same (what the hook does gates others, not the agent).
		a.log.Error("agent ready, but its serving hook failed", "err", err)
		return
	}
	a.served = true
}

// updateMetrics sets the pool, phase and ENI gauges from the pass's plan
// and its count of the cache (cache.tally: phases and owned ENIs in use).
func (a *Agent) updateMetrics(p planner.Plan, phases map[status.Phase]int, enis int) {
	m := a.metrics
	m.poolIPs.WithLabelValues("total").Set(float64(p.Pool.Total))
	m.poolIPs.WithLabelValues("used").Set(float64(p.Pool.Used))
	m.poolIPs.WithLabelValues("idle").Set(float64(p.Pool.Idle))
	m.poolIPs.WithLabelValues("cooldown").Set(float64(p.Pool.Cooldown))
	m.poolIPs.WithLabelValues("sticky").Set(float64(p.Pool.Sticky))
	m.poolIPs.WithLabelValues("target").Set(float64(p.Pool.Target))
	for _, ph := range []string{planner.PhasePending, planner.PhaseReady, planner.PhaseFailed} {
		m.podsByPhase.WithLabelValues(ph).Set(float64(phases[status.Phase(ph)]))
	}
	m.enis.Set(float64(enis))
}

// beat is what the heartbeat publishes, as the loop last left it. The
// loop fills it (snapshotHeartbeat); the heartbeat goroutine rewrites
// agent.json from it whenever a Heartbeat period has passed since the last
// write, so a pass that waits on the cloud (a call can take its 10 s
// timeout several times over) never makes the heartbeat stale, and a
// write the loop just made is not repeated.
type beat struct {
	mu sync.Mutex // guards agent
	// agent is the heartbeat without its time and errors (set per write).
	agent status.Agent
	// wmu serialises writes of the file (the goroutine's and the loop's)
	// and guards written and said.
	wmu sync.Mutex
	// written is when the file was last written.
	written time.Time
	// said is what the last write said, its time stamp zeroed: the loop
	// does not write the same again (two changes of its state, say the
	// pool's target and then its readiness, can leave the file's words
	// as they were); the periodic write does, to stamp it fresh.
	said status.Agent
}

// writeHeartbeat records the loop's state and publishes agent.json now,
// unless the file already says all of it.
func (a *Agent) writeHeartbeat() {
	a.snapshotHeartbeat()
	a.flushHeartbeat()
}

// snapshotHeartbeat records what the heartbeat says from the loop's state.
// Only the Run goroutine calls it. The next write (the loop's, or the
// heartbeat's within a period) publishes it.
func (a *Agent) snapshotHeartbeat() {
	p := a.lastPlan
	hb := status.Agent{
		APIVersion: status.Version, PID: a.self.pid, Lock: a.self.lock, PIDNamespace: a.self.pidNS, PIDStart: a.self.pidStart,
		Version: a.cfg.Version, Started: a.started,
		Ready: a.ready, Reason: a.reason, Stopped: a.stopped,
		Pool:     status.PoolSummary{Total: p.Pool.Total, Used: p.Pool.Used, Idle: p.Pool.Idle, Cooldown: p.Pool.Cooldown, Sticky: p.Pool.Sticky, Capacity: p.Pool.Capacity},
		Degraded: a.degraded,
	}
	hb.Pods, hb.Pool.ENIs = a.cache.tally(a.cfg.InstanceID)
	hb.Sets = setSummaries(p)
	hb.Hints = a.hintsStatus(p.Pool.Expected)
	a.beat.mu.Lock()
	a.beat.agent = hb
	a.beat.mu.Unlock()
}

// flushHeartbeat writes agent.json from the last snapshot, stamped now,
// when it says something the file does not. Safe from any goroutine.
func (a *Agent) flushHeartbeat() {
	a.beat.wmu.Lock()
	defer a.beat.wmu.Unlock()
	a.flushHeartbeatLocked(a.now(), false)
}

// flushHeartbeatLocked writes agent.json, stamped now: always when
// restamp is set (the periodic write), otherwise only when its words
// changed since the last write.
func (a *Agent) flushHeartbeatLocked(now time.Time, restamp bool) {
	a.beat.mu.Lock()
	hb := a.beat.agent
	a.beat.mu.Unlock()
	hb.LastErrors = a.exec.errors()
	if a.cfg.Kube != nil {
		// The link's state changes without a pass: read it at each write
		// (a mutex-guarded string; it never waits on the API server).
		hb.Kube = a.cfg.Kube.State()
	}
	if !restamp && !a.beat.written.IsZero() && reflect.DeepEqual(hb, a.beat.said) {
		return
	}
	said := hb
	hb.Heartbeat = now
	if err := status.WriteAgent(a.cfg.Paths.AgentFile, hb); err != nil {
		a.log.Error("write heartbeat", "file", a.cfg.Paths.AgentFile, "err", err)
		said = status.Agent{} // the next write tries again
	}
	a.beat.said = said
	a.beat.written = now
}

// startHeartbeat starts the goroutine that rewrites agent.json from the
// last snapshot whenever a Heartbeat period has passed without a write.
// The returned stop ends it and waits for it; calling stop again does
// nothing.
func (a *Agent) startHeartbeat() (stop func()) {
	done := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		defer close(done)
		t := a.clk.NewTimer(a.cfg.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C():
				t.Reset(a.beatDue())
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}

// beatDue writes agent.json when a Heartbeat period has passed since the
// last write and returns how long until the next is due.
func (a *Agent) beatDue() time.Duration {
	a.beat.wmu.Lock()
	defer a.beat.wmu.Unlock()
	now := a.now()
	if since := now.Sub(a.beat.written); since < a.cfg.Heartbeat {
		return a.cfg.Heartbeat - since
	}
	a.flushHeartbeatLocked(now, true)
	return a.cfg.Heartbeat
}

// setSummaries is the plan's per-set pools in the heartbeat's shape (nil
// when the node has only the default set).
func setSummaries(p planner.Plan) []status.SetSummary {
	var out []status.SetSummary
	for _, s := range p.Sets {
		out = append(out, status.SetSummary{Name: s.Name, SecurityGroups: s.SecurityGroups, ENIs: s.ENIs, Pods: s.Pods,
			Waiting: s.Waiting, Total: s.Total, Used: s.Used, Idle: s.Idle, Cooldown: s.Cooldown, Sticky: s.Sticky})
	}
	return out
}
