package reconcile

import (
	"time"

	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// This file is degraded mode (docs/design.md, "Degraded mode"): while the
// cloud cannot be observed, the node keeps serving new pods from the idle
// addresses it provably holds.

// carryCloud makes an observation whose cloud half failed but whose node
// half is whole a degraded one: its cloud half (instance, ENIs, vSwitches)
// is replaced by the cache's, which is the last complete observation as
// the agent's own actions changed it since (assigns added on success,
// unassigns, detaches and deletes removed before they run). The
// observation stays incomplete: the planner destroys and grows nothing.
// Without a complete observation since start there is nothing to carry.
func (a *Agent) carryCloud(st *observed.State, now time.Time) {
	if st.Complete {
		a.degradedSince = time.Time{}
		return
	}
	if !st.NodeComplete {
		return
	}
	prev, ok := a.cache.snapshot()
	if !ok || (!prev.Complete && prev.CloudFrom.IsZero()) {
		return
	}
	st.Instance, st.ENIs, st.VSwitches, st.UnknownVSwitches = prev.Instance, prev.ENIs, prev.VSwitches, prev.UnknownVSwitches
	st.SelectedVSwitches = prev.SelectedVSwitches
	st.CloudFrom = prev.CloudFrom
	if prev.Complete {
		st.CloudFrom = prev.At
	}
	if a.degradedSince.IsZero() {
		a.degradedSince = now
		a.log.Warn("cloud unreachable: serving new pods from the idle addresses the node holds; growth and release wait",
			"last_observed", st.CloudFrom, "problems", st.Problems)
	}
}

// noteDegraded records degraded mode for the heartbeat and the metric:
// the observation carries its cloud half (a full observation failed), or
// it is still the last complete one while the API has stopped serving
// calls (said before a full observation fails, which with a frozen API
// takes minutes of timeouts). Either way pods are served from what the
// node holds, and growth and release wait for the cloud.
func (a *Agent) noteDegraded(o observed.State, p planner.Plan) {
	failingSince, last, down := a.metrics.cloudUnreachable()
	var d *status.Degraded
	switch {
	case !o.Complete && !o.CloudFrom.IsZero():
		since := a.degradedSince
		if since.IsZero() || (down && failingSince.Before(since)) {
			since = o.At
			if down {
				since = failingSince
			}
		}
		d = &status.Degraded{Since: since, LastObserved: o.CloudFrom, Idle: p.Pool.Idle, Reason: firstOr(o.Problems, "unknown")}
	case down && o.Complete:
		d = &status.Degraded{Since: failingSince, LastObserved: o.At, Idle: p.Pool.Idle, Reason: "cloud calls failing: " + last}
	}
	if d == nil && a.degraded != nil {
		a.log.Info("cloud observed again: degraded mode ends", "since", a.degraded.Since)
	}
	a.degraded = d
	if d != nil {
		a.metrics.degraded.Set(1)
	} else {
		a.metrics.degraded.Set(0)
	}
}
