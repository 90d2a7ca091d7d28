package reconcile

import (
	"os"

	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// phaseCounts counts a plan's statuses by phase (Pending, Ready, Failed).
func phaseCounts(p planner.Plan) [3]int {
	var n [3]int
	for _, s := range p.Statuses {
		switch s.Phase {
		case planner.PhasePending:
			n[0]++
		case planner.PhaseReady:
			n[1]++
		case planner.PhaseFailed:
			n[2]++
		}
	}
	return n
}

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
}

func (a *Agent) updateMetrics(p planner.Plan) {
	m := a.metrics
	m.poolIPs.WithLabelValues("total").Set(float64(p.Pool.Total))
	m.poolIPs.WithLabelValues("used").Set(float64(p.Pool.Used))
	m.poolIPs.WithLabelValues("idle").Set(float64(p.Pool.Idle))
	m.poolIPs.WithLabelValues("cooldown").Set(float64(p.Pool.Cooldown))
	m.poolIPs.WithLabelValues("sticky").Set(float64(p.Pool.Sticky))
	m.poolIPs.WithLabelValues("target").Set(float64(p.Pool.Target))
	phases := map[string]int{planner.PhasePending: 0, planner.PhaseReady: 0, planner.PhaseFailed: 0}
	for _, s := range p.Statuses {
		phases[s.Phase]++
	}
	for ph, n := range phases {
		m.podsByPhase.WithLabelValues(ph).Set(float64(n))
	}
	o, _ := a.cache.snapshot()
	n := 0
	for _, e := range o.ENIs {
		if e.Owned(a.cfg.InstanceID) && e.Status == observed.ENIInUse {
			n++
		}
	}
	m.enis.Set(float64(n))
}

// writeHeartbeat publishes agent.json.
func (a *Agent) writeHeartbeat() {
	p := a.lastPlan
	hb := status.Agent{
		APIVersion: status.Version, PID: os.Getpid(), Version: a.cfg.Version, Started: a.started,
		Heartbeat: a.now(), Ready: a.ready, Reason: a.reason, Stopped: a.stopped, LastErrors: a.exec.errors(),
		Pool: status.PoolSummary{Total: p.Pool.Total, Used: p.Pool.Used, Idle: p.Pool.Idle, Cooldown: p.Pool.Cooldown, Sticky: p.Pool.Sticky, Capacity: p.Pool.Capacity},
		Pods: map[status.Phase]int{},
	}
	if a.cfg.Kube != nil {
		hb.Kube = a.cfg.Kube.State()
	}
	o, _ := a.cache.snapshot()
	for _, e := range o.ENIs {
		if e.Owned(a.cfg.InstanceID) && e.Status == observed.ENIInUse {
			hb.Pool.ENIs++
		}
	}
	for _, s := range p.Statuses {
		hb.Pods[status.Phase(s.Phase)]++
	}
	if err := status.WriteAgent(a.cfg.Paths.AgentFile, hb); err != nil {
		a.log.Error("write heartbeat", "file", a.cfg.Paths.AgentFile, "err", err)
	}
}
