package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/reconcile"
	"github.com/enidnet/enid/reconcile/status"
)

// Fleet: the pool before and after the rollout.
const (
	fleetMinIdleBefore = 2
	fleetMinIdleAfter  = 8
	fleetMaxIdle       = 10
	fleetZone          = "cn-hangzhou-h"
)

// fleetJoinCalls is about what one node's join costs: describe the
// instance, its type, the vSwitches and its ENIs, create and attach an ENI,
// poll it until InUse and observe again.
const fleetJoinCalls = 12

// fleetPoll is how often the harness reads the fleet's files (a thousand
// nodes' statuses per round: reading them must not starve the agents).
const fleetPoll = 200 * time.Millisecond

// fleetQPS is the account-wide API rate limit for a fleet of n nodes: a
// fifth of the node count per second, so the rollout's necessary calls
// (about one per node) take about five seconds at best whatever the size.
// The quick run allows half the node count per second, so the staggered
// join takes about 24 s instead of a minute.
func fleetQPS(n int, quick bool) float64 {
	if quick {
		return max(10, float64(n)/2)
	}
	return max(10, float64(n)/5)
}

// runFleet starts a fleet of agents (datapath off, no file watching) on
// one simulator with an account rate limit, gives every node pods, then
// lands a config change (minIdle 2 -> 8) on all nodes at once.
func runFleet(ctx context.Context, e env) []Result {
	n, perNode := e.sizes.fleetNodes, e.sizes.fleetPods
	qps := fleetQPS(n, e.quick)
	joinRate := qps / fleetJoinCalls
	if e.sizes.fleetJoinAll {
		joinRate = 1e9
	}
	join := Result{Scenario: "fleet: join", Setup: fmt.Sprintf("%d nodes (%s, agents in one process, no datapath) join at %.4g/s (the account limit / %d calls a join needs, unless -fleet-join-all), %d pods each; account limit %.0f calls/s (burst %.0f); %s",
		n, burstType, joinRate, fleetJoinCalls, perNode, qps, qps, e.model)}
	roll := Result{Scenario: "fleet: rollout", Setup: fmt.Sprintf("config change minIdle %d -> %d lands on all %d nodes at once, with 1 new pod per node; account limit %.0f calls/s",
		fleetMinIdleBefore, fleetMinIdleAfter, n, qps)}
	fail := func(r *Result, format string, args ...any) []Result {
		r.broken(format, args...)
		return []Result{join, roll}
	}
	start := time.Now()
	cfg := ecssim.Config{
		VPCCIDR:          "10.0.0.0/8",
		Zones:            []string{fleetZone},
		VSwitches:        []ecssim.VSwitchConfig{{ID: "vsw-fleet", Zone: fleetZone, CIDR: netip.MustParsePrefix("10.0.0.0/12")}},
		AccountRateLimit: ecssim.RateLimit{QPS: qps, Burst: int(qps)},
	}
	e.model.apply(&cfg)
	sim, err := ecssim.New(cfg)
	if err != nil {
		return fail(&join, "simulator: %v", err)
	}
	defer sim.Close()
	ids := make([]string, n)
	for i := range ids {
		inst, err := sim.AddInstance(ecssim.InstanceSpec{InstanceType: burstType, Zone: fleetZone})
		if err != nil {
			return fail(&join, "add instance %d: %v", i, err)
		}
		ids[i] = inst.ID
	}
	if err := sim.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		return fail(&join, "start simulator: %v", err)
	}
	poolYAML := func(minIdle int) string {
		return fmt.Sprintf("  minIdle: %d\n  maxIdle: %d\n", minIdle, fleetMaxIdle)
	}
	// Rendered once: a Dump of a thousand-instance simulator is not free.
	cfgBefore := configYAML(sim, fleetZone, poolYAML(fleetMinIdleBefore), "")
	cfgAfter := configYAML(sim, fleetZone, poolYAML(fleetMinIdleAfter), "")
	region := sim.Dump().Region

	// Join: every agent starts, and its pods arrive with it.
	agents := make([]*agent, n)
	pods := make([][]pod, n)
	defer func() {
		var wg sync.WaitGroup
		for _, a := range agents {
			if a != nil {
				wg.Add(1)
				go func() { defer wg.Done(); a.Stop() }()
			}
		}
		wg.Wait()
	}()
	t0 := time.Now()
	for i := range agents {
		if d := time.Until(t0.Add(time.Duration(float64(i) / joinRate * float64(time.Second)))); d > 0 {
			select {
			case <-ctx.Done():
				return fail(&join, "interrupted")
			case <-time.After(d):
			}
		}
		dp, err := reconcile.NewNoDatapath("")
		if err != nil {
			return fail(&join, "datapath: %v", err)
		}
		a, err := startAgent(ctx, agentOptions{dir: filepath.Join(e.workDir, "fleet", fmt.Sprintf("node%04d", i)), sim: sim, region: region,
			instanceID: ids[i], nodeName: fmt.Sprintf("node%04d", i), config: cfgBefore,
			datapath: dp, noWatch: true, heartbeat: 5 * time.Second, log: e.log})
		if err != nil {
			return fail(&join, "start agent %d: %v", i, err)
		}
		agents[i] = a
		for j := range perNode {
			p, err := a.addPod(fmt.Sprintf("p%d", j), "", time.Now())
			if err != nil {
				return fail(&join, "%v", err)
			}
			pods[i] = append(pods[i], p)
		}
		a.Wake()
	}
	_, joinFailed, err := waitFleetReady(ctx, agents, pods, 5*time.Minute)
	joinTime := time.Since(t0)
	counters := sim.Counters()
	calls := countCalls(counters)
	join.add("all pods Ready", joinTime.Seconds(), "s")
	join.add("calls", float64(calls.total), "calls")
	join.add("throttled", float64(calls.throttled), "calls")
	join.add("pods failed", float64(joinFailed), "pods")
	join.note("calls: %s", callBreakdown(counters))
	join.Elapsed = Seconds(time.Since(start))
	if err != nil {
		return fail(&join, "%v", err)
	}
	join.judge("no pod fails", joinFailed == 0)
	e.progress("fleet: %d nodes joined in %s", n, joinTime.Round(time.Millisecond))

	// Let the joins' last calls land, then roll the config out everywhere.
	if err := waitAll(ctx, agents, 2*time.Minute, func(h status.Agent) bool {
		return h.Ready && h.Pool.Idle >= fleetMinIdleBefore && h.Pool.Used == perNode
	}); err != nil {
		return fail(&roll, "the fleet did not settle after joining: %v", err)
	}
	time.Sleep(time.Second)
	before := sim.Dump()
	sim.ResetCounters()
	rollStart := time.Now()
	// Stage the new config beside each node's, then land it everywhere
	// with one rename per node, as a ConfigMap volume's symlink swap does.
	newCfg := []byte(cfgAfter)
	for _, a := range agents {
		if err := os.WriteFile(a.configFile()+".new", newCfg, 0o644); err != nil {
			return fail(&roll, "stage config: %v", err)
		}
	}
	t0 = time.Now()
	for _, a := range agents {
		if err := os.Rename(a.configFile()+".new", a.configFile()); err != nil {
			return fail(&roll, "land config: %v", err)
		}
		a.Wake()
	}
	landed := time.Since(t0)
	for i, a := range agents {
		p, err := a.addPod("new", "", time.Now())
		if err != nil {
			return fail(&roll, "%v", err)
		}
		pods[i] = append(pods[i], p)
		a.Wake()
	}
	podsWritten := time.Since(t0)
	err = waitAll(ctx, agents, 5*time.Minute, func(h status.Agent) bool {
		return h.Pool.Idle >= fleetMinIdleAfter && h.Pool.Used == perNode+1
	})
	converge := time.Since(t0)
	_, rollFailed, rerr := waitFleetReady(ctx, agents, pods, time.Minute)
	counters = sim.Counters()
	calls = countCalls(counters)
	need, what := necessaryCalls(before, sim.Dump(), ids)
	// The bucket starts full: its burst is free, the rest comes at qps;
	// the last call still takes a mutation's latency.
	bound := time.Duration(float64(max(0, need-int(qps)))/qps*float64(time.Second)) + e.model.mutation
	roll.add("converged", converge.Seconds(), "s")
	roll.add("bound", bound.Seconds(), "s")
	ratio := converge.Seconds() / bound.Seconds()
	roll.add("ratio", ratio, "x")
	roll.add("calls", float64(calls.total), "calls")
	roll.add("necessary", float64(need), "calls")
	roll.add("throttled", float64(calls.throttled), "calls")
	roll.add("pods failed", float64(rollFailed), "pods")
	roll.add("config landed on all", landed.Seconds(), "s")
	roll.add("new pods written", podsWritten.Seconds(), "s")
	roll.note("the bound is the necessary calls (%s) beyond the bucket's burst of %.0f at %.0f calls/s, plus one call's latency", what, qps, qps)
	roll.note("calls: %s", callBreakdown(counters))
	roll.Elapsed = Seconds(time.Since(rollStart))
	if err != nil {
		roll.broken("the fleet did not converge: %v", err)
	}
	if rerr != nil {
		roll.broken("%v", rerr)
	}
	for _, b := range checkBindings(agents) {
		roll.broken("%s", b)
	}
	simCheck(&roll, sim)
	roll.judge("no pod fails; ratio <= 1.5", rollFailed == 0 && err == nil && ratio <= 1.5)
	return []Result{join, roll}
}

// waitFleetReady waits until every pod of every agent is Ready, and
// returns how long that took and how many pods were Failed at any time
// seen or never became Ready.
func waitFleetReady(ctx context.Context, agents []*agent, pods [][]pod, timeout time.Duration) (time.Duration, int, error) {
	t0 := time.Now()
	ready := make([][]bool, len(pods))
	failed := make([][]bool, len(pods))
	for i := range pods {
		ready[i] = make([]bool, len(pods[i]))
		failed[i] = make([]bool, len(pods[i]))
	}
	var took time.Duration
	err := poll(ctx, timeout, fleetPoll, func() (bool, error) {
		all := true
		for i, a := range agents {
			for j, p := range pods[i] {
				if ready[i][j] {
					continue
				}
				switch _, ph := a.podStatus(p); ph {
				case status.Ready:
					ready[i][j] = true
					continue
				case status.Failed:
					failed[i][j] = true
				}
				all = false
			}
		}
		took = time.Since(t0)
		return all, nil
	})
	bad := 0
	for i := range ready {
		for j := range ready[i] {
			if failed[i][j] || !ready[i][j] {
				bad++
			}
		}
	}
	if err != nil {
		return took, bad, fmt.Errorf("pods not Ready: %w", err)
	}
	return took, bad, nil
}

// waitAll waits until every agent's heartbeat satisfies cond.
func waitAll(ctx context.Context, agents []*agent, timeout time.Duration, cond func(status.Agent) bool) error {
	done := make([]bool, len(agents))
	return poll(ctx, timeout, fleetPoll, func() (bool, error) {
		all := true
		for i, a := range agents {
			if done[i] {
				continue
			}
			if h, ok := a.heartbeat(); ok && cond(h) {
				done[i] = true
				continue
			}
			all = false
		}
		return all, nil
	})
}

// necessaryCalls counts the fewest calls that take the fleet from before
// to after: one assign per ENI that gained addresses, and for a new ENI a
// create (carrying its addresses), an attach and one describe that sees it
// InUse.
func necessaryCalls(before, after ecssim.State, instances []string) (int, string) {
	mine := map[string]bool{}
	for _, id := range instances {
		mine[id] = true
	}
	had := map[string]int{}
	for _, en := range before.ENIs {
		had[en.ID] = len(en.IPv4)
	}
	assigns, creates := 0, 0
	for _, en := range after.ENIs {
		if !mine[en.InstanceID] || en.Type != "Secondary" {
			continue
		}
		n, ok := had[en.ID]
		switch {
		case !ok:
			creates++
		case len(en.IPv4) > n:
			assigns++
		}
	}
	return assigns + 3*creates, fmt.Sprintf("%d assigns, %d new ENIs x 3", assigns, creates)
}
