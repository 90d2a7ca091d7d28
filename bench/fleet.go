package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/internal/poll"
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

// Join storm: a fleet that starts all at once against a small account
// limit (-fleet-join-all asks for it on the main fleet too).
const (
	stormNodes = 100
	stormQPS   = 20.0
)

// fleetSpread is the pool.spreadWindow the fleet's config states, by the
// rule docs/config.md gives an operator: nodes x calls per node (one
// assign) / the account's rate.
func fleetSpread(n int, qps float64) time.Duration {
	return time.Duration(float64(n) / qps * float64(time.Second))
}

// runFleet runs the rollout on -fleet-runs fresh fleets (each joins first,
// staggered at the rate the account affords), then a join storm.
func runFleet(ctx context.Context, e env) []Result {
	n := e.sizes.fleetNodes
	// The rollout runs on fresh fleets (-fleet-runs: 5, the quick run 1),
	// reported as median and worst.
	runs := max(1, e.sizes.fleetRuns)
	var joins, rolls []Result
	for i := range runs {
		e.progress("fleet: run %d of %d", i+1, runs)
		j, r := fleetOnce(ctx, e, n, fleetQPS(n, e.quick), e.sizes.fleetJoinAll, true)
		joins, rolls = append(joins, j), append(rolls, r)
		if len(j.Broken)+len(r.Broken) > 0 || ctx.Err() != nil {
			return []Result{j, r}
		}
	}
	out := []Result{joins[0], summarizeRollouts(rolls)}
	sn, sq := stormNodes, stormQPS
	if e.quick {
		sn, sq = 20, 10
	}
	storm, _ := fleetOnce(ctx, e, sn, sq, true, false)
	storm.Scenario = "fleet: join storm"
	return append(out, storm)
}

// summarizeRollouts reports the median and worst of the rollouts' figures.
func summarizeRollouts(rs []Result) Result {
	if len(rs) == 1 {
		return rs[0]
	}
	get := func(name string) []float64 { return figureValues(rs, name) }
	r := Result{Scenario: "fleet: rollout", Setup: fmt.Sprintf("%s; %d runs, each on a fresh fleet", rs[0].Setup, len(rs))}
	ratio, throttled, need, failed := get("ratio"), get("throttled"), get("necessary"), get("pods failed")
	quiet, during := get("new pod Ready p99, quiet fleet"), get("new pod Ready p99, during rollout")
	med := func(v []float64) float64 { return v[len(v)/2] }
	r.add("ratio median", med(ratio), "x")
	r.add("worst", ratio[len(ratio)-1], "x")
	r.add("bound", med(get("bound")), "s")
	r.add("throttled median", med(throttled), "calls")
	r.add("necessary", med(need), "calls")
	r.add("calls median", med(get("calls")), "calls")
	var nfail float64
	for _, f := range failed {
		nfail += f
	}
	r.add("pods failed (all runs)", nfail, "pods")
	r.add("new pod Ready p99, quiet fleet (median)", med(quiet), "ms")
	r.add("during rollout (median)", med(during), "ms")
	ok := med(ratio) <= 1.2 && ratio[len(ratio)-1] <= 1.4 && med(throttled) <= 0.5*med(need) && nfail == 0
	r.judge("ratio median <= 1.2, worst <= 1.4; throttled <= 0.5x necessary; no pod fails", ok)
	var each []string
	for _, v := range ratio {
		each = append(each, fmt.Sprintf("%.2fx", v))
	}
	r.note("ratios of the runs, sorted: %s", strings.Join(each, ", "))
	r.Notes = append(r.Notes, rs[0].Notes...)
	for _, x := range rs {
		r.Elapsed += x.Elapsed
	}
	return r
}

// fleetOnce starts a fleet of n agents (datapath off, no file watching)
// on one simulator with an account rate limit of qps, gives every node
// pods, and, with rollout, lands a config change (minIdle 2 -> 8) on all
// nodes at once. The join result compares the join with its bound when
// the nodes join all at once. It is long (about 120 lines) because it is the
// scenario's script with the deferred clean-up of all it starts in one
// place; the parts that stand alone are functions (newFleetSim, quietPods,
// fleet.rollout).
func fleetOnce(ctx context.Context, e env, n int, qps float64, joinAll, rollout bool) (join, roll Result) {
	perNode := e.sizes.fleetPods
	joinRate := qps / fleetJoinCalls
	if joinAll {
		joinRate = 1e9
	}
	spread := fleetSpread(n, qps)
	join = Result{Scenario: "fleet: join", Setup: fmt.Sprintf("%d nodes (%s, agents in one process, no datapath) join at %.4g/s (the account limit / %d calls a join needs, unless all at once), %d pods each; account limit %.0f calls/s (burst %.0f); %s",
		n, burstType, joinRate, fleetJoinCalls, perNode, qps, qps, e.model)}
	roll = Result{Scenario: "fleet: rollout", Setup: fmt.Sprintf("config change minIdle %d -> %d lands on all %d nodes at once, with 1 new pod per node; account limit %.0f calls/s; pool.spreadWindow %s",
		fleetMinIdleBefore, fleetMinIdleAfter, n, qps, spread)}
	fail := func(r *Result, format string, args ...any) (Result, Result) {
		r.broken(format, args...)
		return join, roll
	}
	start := time.Now()
	// Every fleet has its own files: a node's entries and memory must not
	// outlive its fleet.
	dir, err := os.MkdirTemp(e.workDir, "fleet-")
	if err != nil {
		return fail(&join, "%v", err)
	}
	defer os.RemoveAll(dir)
	sim, ids, err := newFleetSim(e, n, qps)
	if err != nil {
		return fail(&join, "%v", err)
	}
	defer sim.Close()
	poolYAML := func(minIdle int) string {
		return fmt.Sprintf("  minIdle: %d\n  maxIdle: %d\n  spreadWindow: %s\n", minIdle, fleetMaxIdle, spread)
	}
	// Rendered once: a Dump of a thousand-instance simulator is not free.
	cfgBefore := configYAML(sim, fleetZone, poolYAML(fleetMinIdleBefore), "")
	cfgAfter := configYAML(sim, fleetZone, poolYAML(fleetMinIdleAfter), "")
	region := sim.Dump().Region
	empty := sim.Dump()

	// Join: every agent starts, and its pods arrive with it.
	agents := make([]*agent, n)
	pods := make([][]pod, n)
	defer func() { stopAgents(agents) }()
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
		a, err := startAgent(ctx, agentOptions{dir: filepath.Join(dir, fmt.Sprintf("node%04d", i)), sim: sim, region: region,
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
	joinFigures(&join, e, sim, empty, ids, qps, joinAll, joinTime, joinFailed)
	join.Elapsed = Seconds(time.Since(start))
	if err != nil {
		return fail(&join, "%v", err)
	}
	if joinAll {
		ratio := join.Figures[2].Value
		join.judge("no pod fails; ratio <= 1.5", joinFailed == 0 && ratio <= 1.5)
	} else {
		join.judge("no pod fails", joinFailed == 0)
	}
	e.progress("fleet: %d nodes joined in %s", n, joinTime.Round(time.Millisecond))
	if !rollout {
		return join, roll
	}

	f := fleet{n: n, perNode: perNode, qps: qps, sim: sim, ids: ids, agents: agents, pods: pods, cfgAfter: cfgAfter}
	f.rollout(ctx, e, &roll)
	return join, roll
}

// readyAfter waits until p is Ready and returns how long after its entry
// was written the agent published that.
func readyAfter(ctx context.Context, a *agent, p pod) (time.Duration, error) {
	var d time.Duration
	err := poll.Until(ctx, clock.Real{}, time.Minute, 20*time.Millisecond, func() (bool, error) {
		st, ph := a.podStatus(p)
		if ph != status.Ready {
			return false, nil
		}
		d = st.Updated.Sub(p.created)
		return true, nil
	})
	return d, err
}

// ms99 is the 99th percentile of ds in milliseconds.
func ms99(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[min(len(s)-1, len(s)*99/100)]) / float64(time.Millisecond)
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
	err := poll.Until(ctx, clock.Real{}, timeout, fleetPoll, func() (bool, error) {
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
	return waitEach(ctx, agents, timeout, func(_ int, h status.Agent) bool { return cond(h) })
}

// waitEach waits until every agent's heartbeat satisfies cond (given the
// agent's index).
func waitEach(ctx context.Context, agents []*agent, timeout time.Duration, cond func(int, status.Agent) bool) error {
	done := make([]bool, len(agents))
	return poll.Until(ctx, clock.Real{}, timeout, fleetPoll, func() (bool, error) {
		all := true
		for i, a := range agents {
			if done[i] {
				continue
			}
			if h, ok := a.heartbeat(); ok && cond(i, h) {
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

// fleet is a joined fleet, for its rollout.
type fleet struct {
	n, perNode int
	qps        float64
	sim        *ecssim.Server
	ids        []string
	agents     []*agent
	pods       [][]pod // by node; the rollout adds its pods
	cfgAfter   string  // the config the rollout lands
}

// rollout lands cfgAfter on every node at once, with one new pod per node,
// and records in roll how long the fleet took to converge against the
// bound, what it called, and how fast new pods were Ready quiet and during
// the rollout.
func (f *fleet) rollout(ctx context.Context, e env, roll *Result) {
	n, perNode, qps, sim, ids, agents, pods, cfgAfter := f.n, f.perNode, f.qps, f.sim, f.ids, f.agents, f.pods, f.cfgAfter
	// Let the joins' last calls land.
	if err := waitAll(ctx, agents, 2*time.Minute, func(h status.Agent) bool {
		return h.Ready && h.Pool.Idle >= fleetMinIdleBefore && h.Pool.Used == perNode
	}); err != nil {
		roll.broken("the fleet did not settle after joining: %v", err)
		return
	}
	quiet, err := f.quietPods(ctx)
	if err != nil {
		roll.broken("quiet pod: %v", err)
		return
	}
	if err := waitAll(ctx, agents, 2*time.Minute, func(h status.Agent) bool { return h.Ready && h.Pool.Idle >= fleetMinIdleBefore }); err != nil {
		roll.broken("the fleet did not settle after the quiet pods: %v", err)
		return
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
			roll.broken("stage config: %v", err)
			return
		}
	}
	t0 := time.Now()
	for _, a := range agents {
		if err := os.Rename(a.configFile()+".new", a.configFile()); err != nil {
			roll.broken("land config: %v", err)
			return
		}
		a.Wake()
	}
	landed := time.Since(t0)
	newPods := make([]pod, n)
	for i, a := range agents {
		p, err := a.addPod("new", "", time.Now())
		if err != nil {
			roll.broken("%v", err)
			return
		}
		newPods[i] = p
		pods[i] = append(pods[i], p)
		a.Wake()
	}
	podsWritten := time.Since(t0)
	err = waitEach(ctx, agents, 5*time.Minute, func(i int, h status.Agent) bool {
		return h.Pool.Idle >= fleetMinIdleAfter && h.Pool.Used == len(pods[i])
	})
	converge := time.Since(t0)
	_, rollFailed, rerr := waitFleetReady(ctx, agents, pods, time.Minute)
	var during []time.Duration
	for i, a := range agents {
		if d, err := readyAfter(ctx, a, newPods[i]); err == nil {
			during = append(during, d)
		}
	}
	counters := sim.Counters()
	calls := countCalls(counters)
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
	roll.add("new pod Ready p99, quiet fleet", ms99(quiet), "ms")
	roll.add("new pod Ready p99, during rollout", ms99(during), "ms")
	roll.add("config landed on all", landed.Seconds(), "s")
	roll.add("new pods written", podsWritten.Seconds(), "s")
	roll.note("the bound is the necessary calls (%s) beyond the bucket's burst of %.0f at %.0f calls/s, plus one call's latency", what, qps, qps)
	roll.note("new pod Ready: from the entry's write to the Ready status's publication; quiet: %d pods on every tenth node of the settled fleet before the rollout; during: one pod on every node written as the config lands", len(quiet))
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
	simCheck(roll, sim)
	roll.judge("no pod fails; ratio <= 1.2", rollFailed == 0 && err == nil && ratio <= 1.2)
}

// quietPods adds a pod on every tenth node of the settled fleet and
// returns how fast each was Ready: how fast a pod is Ready when nothing
// else happens, to hold the rollout's pods to.
func (f *fleet) quietPods(ctx context.Context) ([]time.Duration, error) {
	var sample []int
	for i := 0; i < f.n; i += 10 {
		sample = append(sample, i)
	}
	qpods := make([]pod, len(sample))
	for k, i := range sample {
		p, err := f.agents[i].addPod("quiet", "", time.Now())
		if err != nil {
			return nil, err
		}
		qpods[k] = p
		f.agents[i].Wake()
	}
	var quiet []time.Duration
	for k, i := range sample {
		d, err := readyAfter(ctx, f.agents[i], qpods[k])
		if err != nil {
			return nil, err
		}
		quiet = append(quiet, d)
		f.pods[i] = append(f.pods[i], qpods[k])
	}
	return quiet, nil
}

// newFleetSim starts the fleet's simulator: n instances in one zone and
// vSwitch, the account's rate limit at qps, the latency model of e.
func newFleetSim(e env, n int, qps float64) (*ecssim.Server, []string, error) {
	cfg := ecssim.Config{
		VPCCIDR:          "10.0.0.0/8",
		Zones:            []string{fleetZone},
		VSwitches:        []ecssim.VSwitchConfig{{ID: "vsw-fleet", Zone: fleetZone, CIDR: netip.MustParsePrefix("10.0.0.0/12")}},
		AccountRateLimit: ecssim.RateLimit{QPS: qps, Burst: int(qps)},
	}
	e.model.apply(&cfg)
	sim, err := ecssim.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("simulator: %w", err)
	}
	ids := make([]string, n)
	for i := range ids {
		inst, err := sim.AddInstance(ecssim.InstanceSpec{InstanceType: burstType, Zone: fleetZone})
		if err != nil {
			sim.Close()
			return nil, nil, fmt.Errorf("add instance %d: %w", i, err)
		}
		ids[i] = inst.ID
	}
	if err := sim.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		sim.Close()
		return nil, nil, fmt.Errorf("start simulator: %w", err)
	}
	return sim, ids, nil
}

// joinFigures adds a join's figures to join and its verdict: the time to
// all pods Ready, the calls (throttled among them) and, for a join storm,
// the bound the necessary calls set at the account's rate (the verdict
// is the caller's, once it knows the join ended).
func joinFigures(join *Result, e env, sim *ecssim.Server, empty ecssim.State, ids []string, qps float64, joinAll bool, joinTime time.Duration, joinFailed int) {
	n := len(ids)
	counters := sim.Counters()
	calls := countCalls(counters)
	join.add("all pods Ready", joinTime.Seconds(), "s")
	if joinAll {
		// What a join must call: each agent's four describes (instance,
		// its type, the vSwitches, its ENIs) and, per new ENI, a create,
		// an attach and a describe that sees it InUse.
		need, what := necessaryCalls(empty, sim.Dump(), ids)
		need += 4 * n
		bound := time.Duration(float64(max(0, need-int(qps)))/qps*float64(time.Second)) + e.model.attach + 2*e.model.mutation
		join.add("bound", bound.Seconds(), "s")
		join.add("ratio", joinTime.Seconds()/bound.Seconds(), "x")
		join.add("necessary", float64(need), "calls")
		join.note("the bound is the necessary calls (%s, and 4 describes per node) beyond the bucket's burst of %.0f at %.0f calls/s, plus a create's, an attach's and an assign's latency", what, qps, qps)
	}
	join.add("calls", float64(calls.total), "calls")
	join.add("throttled", float64(calls.throttled), "calls")
	join.add("pods failed", float64(joinFailed), "pods")
	join.note("calls: %s", callBreakdown(counters))
}

// stopAgents stops the agents started (nil: not started), all at once.
func stopAgents(agents []*agent) {
	var wg sync.WaitGroup
	for _, a := range agents {
		if a != nil {
			wg.Add(1)
			go func() { defer wg.Done(); a.Stop() }()
		}
	}
	wg.Wait()
}
