package planner

// This file shrinks the pool of a node that is unschedulable (cordoned,
// drained): opt-in with pool.unschedulableRelease (AWS's
// AWS_MANAGE_ENIS_NON_SCHEDULABLE; aws-vpc-cni PR #1927). The fact comes
// in Options.Unschedulable (the agent learns it from its Node through the
// Kubernetes link); the planner only reads it: after the delay, minIdle,
// maxIdle and minTotal count as zero, so idle addresses and empty ENIs go
// at once (no further releaseDelay), while pods still on the node keep
// theirs and new ones, DaemonSet pods that tolerate the cordon, are still
// served. When the node is schedulable again, the config's pool applies
// and grows back. NextDeadline wakes the agent when the delay ends.

// cordoned reports whether the node has been unschedulable for
// pool.unschedulableRelease (and the option is on).
func (b *builder) cordoned() bool {
	d := b.cfg.Pool.UnschedulableRelease.D()
	since := b.opt.Unschedulable
	return d > 0 && !since.IsZero() && !b.now.Before(since.Add(d))
}

// cordonPolicy is pp on a cordoned node: nothing idle is kept.
func (b *builder) cordonPolicy(pp poolPolicy) poolPolicy {
	if b.cordoned() {
		pp.minIdle, pp.maxIdle, pp.minTotal = 0, 0, 0
	}
	return pp
}

// cordonReason is the reason of what a cordoned node gives back.
func (b *builder) cordonReason(idle int) Reason {
	return Reason{ReasonNodeUnschedulable, "node unschedulable since " + b.opt.Unschedulable.UTC().Format(rfc3339) +
		" (pool.unschedulableRelease " + b.cfg.Pool.UnschedulableRelease.D().String() + "): " + itoa(idle) + " idle go"}
}
