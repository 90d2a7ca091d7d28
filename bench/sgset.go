package main

import (
	"context"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
)

// sgBenchGroup is the security group of the second set in the sets
// scenario (the first is the simulator's default group, the config's).
const sgBenchGroup = "sg-bench-b"

// runSGSets plays the churn trace on a node where every other pod asks
// for a second security-group set by annotation, beside the same trace with
// one set: cloud calls per pod start, and idle addresses per set.
func runSGSets(ctx context.Context, e env) []Result {
	events, starts := churnTrace(e.sizes.churnTime)
	one, two := churnSettings()[1], churnSettings()[1]
	one.scenario = "sets: churn, one set"
	two.scenario = "sets: churn, two sets (every other pod annotated " + sgBenchGroup + ")"
	groups := func(c *ecssim.Config) { c.SecurityGroups = []string{ecssim.DefaultSecurityGroup, sgBenchGroup} }
	one.simConfig, two.simConfig = groups, groups
	two.annotate = func(i int) map[string]string {
		if i%2 == 1 {
			return map[string]string{desired.AnnotationSecurityGroups: sgBenchGroup}
		}
		return nil
	}
	return churnCases(ctx, e, []poolSetting{one, two}, events, starts)
}
