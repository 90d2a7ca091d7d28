package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/internal/poll"
	"github.com/enidnet/enid/reconcile/status"
)

// burstType is the instance type of the cold burst: 7 secondary ENIs of
// 29 pod IPs, room for the burst on three new ENIs.
const burstType = "ecs.g7.4xlarge"

// burstRounds is how many fresh nodes the full run bursts (the outcome
// depends on how many entries the agent's first pass sees, so one round
// is not a figure).
const burstRounds = 5

// runBurst runs the burst on fresh nodes, one after another, and reports
// the median and worst rounds.
func runBurst(ctx context.Context, e env) []Result {
	return burstRoundsOf(ctx, e, burstCase{scenario: "cold burst", perSlot: 1})
}

// burstCase is one kind of node the cold burst runs on.
type burstCase struct {
	scenario string
	// eni holds extra config lines under "eni:" (indented two spaces).
	eni string
	// perSlot is how many pod addresses one private-address slot of an
	// ENI gives: 1 (a secondary address) or 16 (a /28 prefix).
	perSlot int
}

// burstRoundsOf runs the burst of c on fresh nodes, one after another,
// and reports the median and worst rounds.
func burstRoundsOf(ctx context.Context, e env, c burstCase) []Result {
	rounds := burstRounds
	if e.quick {
		rounds = 1
	}
	var rs []Result
	for i := range rounds {
		rs = append(rs, burstOnce(ctx, e, i, c))
		if len(rs[i].Broken) > 0 || ctx.Err() != nil {
			return rs[i:]
		}
	}
	if rounds == 1 {
		return rs
	}
	r := Result{Scenario: c.scenario, Setup: fmt.Sprintf("%s; %d rounds, each on a fresh node", rs[0].Setup, rounds)}
	get := func(name string) []float64 { return figureValues(rs, name) }
	all, ratio, calls := get("all Ready"), get("ratio"), get("cloud calls")
	r.add("all Ready median", all[len(all)/2], "ms")
	r.add("worst", all[len(all)-1], "ms")
	r.add("API bound", get("API bound")[0], "ms")
	r.add("ratio median", ratio[len(ratio)/2], "x")
	r.add("best", ratio[0], "x")
	r.add("worst", ratio[len(ratio)-1], "x")
	r.add("cloud calls median", calls[len(calls)/2], "calls")
	r.judge("ratio <= 1.3 (median)", ratio[len(ratio)/2] <= 1.3)
	r.Notes = rs[0].Notes
	for _, x := range rs {
		r.Series = append(r.Series, x.Series...)
	}
	var each []string
	for _, v := range ratio {
		each = append(each, fmt.Sprintf("%.2fx", v))
	}
	r.note("ratios of the rounds, sorted: %s", strings.Join(each, ", "))
	return []Result{r}
}

// burstOnce ADDs burstPods pods at once on a node whose agent has just
// warmed its default pool, and compares the time until all are Ready with
// the shortest sequence of cloud calls the latency model allows.
func burstOnce(ctx context.Context, e env, round int, c burstCase) Result {
	n := e.sizes.burstPods
	r := Result{Scenario: c.scenario, Setup: fmt.Sprintf("%d pods at once on a fresh %s node (default pool, no datapath); %s", n, burstType, e.model)}
	if c.eni != "" {
		r.Setup += "; eni: " + strings.Join(strings.Fields(c.eni), " ")
	}
	start := time.Now()
	defer func() { r.Elapsed = Seconds(time.Since(start)) }()
	sim, inst, err := startOneNodeSim(e)
	if err != nil {
		r.broken("%v", err)
		return r
	}
	defer sim.Close()
	a, err := startAgent(ctx, agentOptions{dir: filepath.Join(e.workDir, fmt.Sprintf("burst%d-%d", round, c.perSlot)), sim: sim, instanceID: inst.ID,
		nodeName: "burst", config: configYAMLENI(sim, inst.Zone, c.eni, "", ""), log: e.log})
	if err != nil {
		r.broken("start agent: %v", err)
		return r
	}
	defer a.Stop()
	if err := a.waitPool(ctx, 60*time.Second, func(h status.Agent) bool { return h.Ready && h.Pool.Idle >= 2 }); err != nil {
		r.broken("agent never warmed its pool: %v", err)
		return r
	}
	time.Sleep(500 * time.Millisecond) // let the warm-up's last calls land
	h, _ := a.heartbeat()
	bound, why := burstBound(e.model, sim.Dump(), inst.ID, n, h.Pool.Idle, c.perSlot)
	sim.ResetCounters()

	// The pods arrive at once: all entries are written before the agent
	// is woken (it watches the directory, so it may start on the first).
	t0 := time.Now()
	pods, err := addAtOnce(a, n)
	if err != nil {
		r.broken("%v", err)
		return r
	}
	readyAt, failed, err := waitReady(ctx, a, pods, t0)
	total := time.Duration(0)
	for _, d := range readyAt {
		total = max(total, d)
	}
	for i, why := range failed {
		r.broken("pod burst-%d was Failed on the way: %s", i, why)
		break
	}
	if err != nil {
		notReady := 0
		for _, d := range readyAt {
			if d == 0 {
				notReady++
			}
		}
		r.broken("%d of %d pods never Ready: %v", notReady, n, err)
	}
	for _, b := range checkBindings([]*agent{a}) {
		r.broken("%s", b)
	}
	simCheck(&r, sim)
	counters := sim.Counters()
	calls := countCalls(counters)
	r.note("calls: %s", callBreakdown(counters))
	sorted := slices.Clone(readyAt)
	slices.Sort(sorted)
	r.add("half Ready", float64(pct(sorted, 50).Milliseconds()), "ms")
	r.add("all Ready", float64(total.Milliseconds()), "ms")
	r.add("API bound", float64(bound.Milliseconds()), "ms")
	ratio := total.Seconds() / bound.Seconds()
	r.add("ratio", ratio, "x")
	r.add("cloud calls", float64(calls.total), "calls")
	r.judge("ratio <= 1.3", err == nil && ratio <= 1.3)
	r.note("the bound is %s", why)
	// Every pod's time to Ready, not only the last: whether the pods the
	// warm pool holds come at once, and how far behind the bound the rest
	// land.
	var times []float64
	for _, d := range readyAt {
		if d > 0 {
			times = append(times, float64(d.Milliseconds())/1000)
		}
	}
	r.Series = []Series{{Name: fmt.Sprintf("round %d", round+1), Chart: c.scenario + ": pods Ready", Kind: Timeline, Unit: "s",
		X: times, Bound: bound.Seconds()}}
	return r
}

// addAtOnce writes the entries of n pods burst-<i> from n goroutines.
func addAtOnce(a *agent, n int) ([]pod, error) {
	pods := make([]pod, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := a.addPod(fmt.Sprintf("burst-%d", i), "", time.Now())
			if err != nil {
				errs <- err
			}
			pods[i] = p
		}()
	}
	wg.Wait()
	close(errs)
	return pods, <-errs // the first error, nil when there was none
}

// waitReady polls the pods' statuses (up to 90 s) until all are Ready, and
// returns when each became Ready after t0 (0: never) and the reasons of
// those seen Failed on the way.
func waitReady(ctx context.Context, a *agent, pods []pod, t0 time.Time) ([]time.Duration, map[int]string, error) {
	readyAt := make([]time.Duration, len(pods))
	failed := map[int]string{}
	err := poll.Until(ctx, clock.Real{}, 90*time.Second, 2*time.Millisecond, func() (bool, error) {
		done := 0
		for i, p := range pods {
			if readyAt[i] > 0 {
				done++
				continue
			}
			st, ph := a.podStatus(p)
			switch ph {
			case status.Ready:
				readyAt[i] = time.Since(t0)
				done++
			case status.Failed:
				failed[i] = st.Reason
			}
		}
		return done == len(pods), nil
	})
	return readyAt, failed, err
}

// burstBound is the shortest time in which the latency model lets need
// pods be Ready on instance, given idle ready IPs: none when idle IPs
// suffice; one assign round while attached ENIs have room; else a new
// ENI's create (carrying its IPs) -> attach -> attach completion, all new
// ENIs in parallel (a describe sent just before completion answers at it).
// perSlot is how many pod addresses a free private-address slot of an
// attached ENI gives in one assign (16 for a /28 prefix).
func burstBound(m latencyModel, st ecssim.State, instance string, need, idle, perSlot int) (time.Duration, string) {
	if need <= idle {
		return time.Millisecond, "0: the warm pool holds every pod"
	}
	itype := instanceType(st, instance)
	room := 0
	for _, en := range st.ENIs {
		if en.InstanceID == instance && en.Type == "Secondary" {
			room += (itype.IPv4PerENI - 1 - len(en.IPv4) - len(en.IPv4Prefixes)) * perSlot
		}
	}
	if need-idle <= room {
		return m.mutation, fmt.Sprintf("one AssignPrivateIpAddresses round (%s): attached ENIs have room for %d more", ms(m.mutation), room)
	}
	// A describe shows InUse only once the stale window after the attach
	// completed has passed.
	return 2*m.mutation + m.attach + m.stale, fmt.Sprintf("CreateNetworkInterface with its IPs (%s) + AttachNetworkInterface (%s) + attach completion (%s) + describes lagging it (%s), new ENIs in parallel; %d idle and room for %d on attached ENIs",
		ms(m.mutation), ms(m.mutation), ms(m.attach), ms(m.stale), idle, room)
}

// instanceType returns the type of an instance of the simulator.
func instanceType(st ecssim.State, instance string) ecssim.InstanceType {
	for _, in := range st.Instances {
		if in.ID != instance {
			continue
		}
		for _, t := range ecssim.InstanceTypes() {
			if t.ID == in.InstanceType {
				return t
			}
		}
	}
	return ecssim.InstanceType{}
}

// startOneNodeSim starts a simulator with the latency model of e and one
// burstType instance.
func startOneNodeSim(e env, change ...func(*ecssim.Config)) (*ecssim.Server, ecssim.InstanceInfo, error) {
	cfg := ecssim.Config{}
	e.model.apply(&cfg)
	for _, f := range change {
		f(&cfg)
	}
	sim, err := ecssim.New(cfg)
	if err != nil {
		return nil, ecssim.InstanceInfo{}, fmt.Errorf("simulator: %w", err)
	}
	inst, err := sim.AddInstance(ecssim.InstanceSpec{InstanceType: burstType})
	if err == nil {
		err = sim.Start("127.0.0.1:0", "127.0.0.1:0")
	}
	if err != nil {
		sim.Close()
		return nil, ecssim.InstanceInfo{}, fmt.Errorf("simulator: %w", err)
	}
	return sim, inst, nil
}
