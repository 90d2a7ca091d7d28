package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/internal/poll"
	"github.com/enidnet/enid/reconcile/status"
)

// Churn trace: pods arrive as a Poisson process and live an exponential
// time, from a fixed seed, so every run and every pool setting sees the
// same trace.
const (
	churnSeed     = 7
	churnRate     = 3.0              // pod starts per second
	churnLifeMean = 20 * time.Second // mean pod lifetime
	// churnCompress divides the pool's time constants (releaseDelay,
	// cooldown, resync): a minute of trace then covers what ten minutes
	// of a node would.
	churnCompress = 10
)

// poolSetting is one pool configuration the churn compares.
type poolSetting struct {
	name                    string
	minIdle, maxIdle, batch int
	// scenario names the row ("" : "churn, pool <name>").
	scenario string
	// eni holds extra config lines under "eni:" (indented two spaces).
	eni string
	// prepare, when set, changes the simulator before the agent starts
	// (e.g. fragments its vSwitches).
	prepare func(*ecssim.Server) error
	// resync, when set, is the resync period (default: the config's
	// default / churnCompress).
	resync time.Duration
	// simConfig, when set, changes the simulator's config (e.g. the
	// security groups that exist).
	simConfig func(*ecssim.Config)
	// annotate, when set, gives pod i of the trace its annotations.
	annotate func(i int) map[string]string
	// inspect, when set, adds figures at the end, with the agent and the
	// simulator still running.
	inspect func(r *Result, sim *ecssim.Server, a *agent)
	// target judges the calls per pod start (nil: the default pool's
	// target of 0.2).
	target *callTarget
}

// callTarget is a bound on cloud calls per pod start.
type callTarget struct {
	text string
	max  float64
}

func churnSettings() []poolSetting {
	return []poolSetting{
		{name: "lean", minIdle: 0, maxIdle: 1, batch: 1},
		{name: "default", minIdle: desired.DefaultMinIdle, maxIdle: desired.DefaultMaxIdle, batch: desired.DefaultBatch},
		{name: "large", minIdle: 10, maxIdle: 40, batch: 10},
	}
}

// churnEvent starts or stops pod i at at (from the trace's start).
type churnEvent struct {
	at    time.Duration
	pod   int
	start bool
}

// churnTrace is the seeded trace of length d.
func churnTrace(d time.Duration) (events []churnEvent, starts int) {
	rng := rand.New(rand.NewPCG(churnSeed, churnSeed))
	t := time.Duration(0)
	for i := 0; ; i++ {
		t += time.Duration(rng.ExpFloat64() / churnRate * float64(time.Second))
		if t >= d {
			break
		}
		life := time.Duration(rng.ExpFloat64() * float64(churnLifeMean))
		events = append(events, churnEvent{at: t, pod: i, start: true})
		if t+life < d {
			events = append(events, churnEvent{at: t + life, pod: i})
		}
		starts++
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].at < events[j].at })
	return events, starts
}

// runChurn plays the trace against three pool settings at once, each on
// its own simulator and agent.
func runChurn(ctx context.Context, e env) []Result {
	events, starts := churnTrace(e.sizes.churnTime)
	return churnCases(ctx, e, churnSettings(), events, starts)
}

// churnCases plays the trace against each setting at once, each on its
// own simulator and agent.
func churnCases(ctx context.Context, e env, cases []poolSetting, events []churnEvent, starts int) []Result {
	out := make([]Result, len(cases))
	var wg sync.WaitGroup
	for i, s := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = churnOne(ctx, e, s, events, starts)
		}()
	}
	wg.Wait()
	return out
}

func churnOne(ctx context.Context, e env, s poolSetting, events []churnEvent, starts int) Result {
	r, releaseDelay, cooldown, resync := churnSetup(e, s, events, starts)
	var change []func(*ecssim.Config)
	if s.simConfig != nil {
		change = append(change, s.simConfig)
	}
	sim, inst, err := startOneNodeSim(e, change...)
	if err != nil {
		r.broken("%v", err)
		return r
	}
	defer sim.Close()
	if s.prepare != nil {
		if err := s.prepare(sim); err != nil {
			r.broken("prepare the simulator: %v", err)
			return r
		}
	}
	pool := fmt.Sprintf("  minIdle: %d\n  maxIdle: %d\n  batch: %d\n  releaseDelay: %s\n  cooldown: %s\n",
		s.minIdle, s.maxIdle, s.batch, releaseDelay, cooldown)
	extra := fmt.Sprintf("resyncPeriod: %s\n", resync)
	dir := "churn-" + s.name
	if s.scenario != "" {
		dir = fmt.Sprintf("%s-%x", dir, sha256.Sum256([]byte(s.scenario)))[:len(dir)+9]
	}
	a, err := startAgent(ctx, agentOptions{dir: filepath.Join(e.workDir, dir), sim: sim, instanceID: inst.ID,
		nodeName: "churn-" + s.name, config: configYAMLENI(sim, inst.Zone, s.eni, pool, extra), log: e.log})
	if err != nil {
		r.broken("start agent: %v", err)
		return r
	}
	defer a.Stop()
	if err := a.waitPool(ctx, 60*time.Second, func(h status.Agent) bool { return h.Ready && h.Pool.Idle >= s.minIdle }); err != nil {
		r.broken("agent never became ready: %v", err)
		return r
	}
	time.Sleep(300 * time.Millisecond)
	sim.ResetCounters()

	stopSampler := sampleIdle(ctx, a)
	c := &churnPods{a: a, pods: map[int]*livePod{}, annotate: s.annotate}
	t0 := time.Now()
	if !c.replay(ctx, &r, events, t0) {
		r.broken("interrupted")
		stopSampler()
		return r
	}
	elapsed := time.Since(t0)
	idleIPSeconds, perSet := stopSampler()
	counters := sim.Counters()
	calls := countCalls(counters)
	r.note("calls: %s", callBreakdown(counters))
	// The pods still running at the end must be (or become) Ready.
	notReady := c.notReady + c.waitLive(ctx)
	if notReady > 0 {
		r.broken("%d pods not Ready within 30s", notReady)
	}
	for _, b := range checkBindings([]*agent{a}) {
		r.broken("%s", b)
	}
	simCheck(&r, sim)
	churnFigures(&r, s, c.readyTimes, calls, starts, idleIPSeconds, perSet, elapsed)
	if s.inspect != nil {
		s.inspect(&r, sim, a)
	}
	return r
}

// sampleIdle integrates held-but-unused IPs over time from the heartbeat,
// which the agent rewrites whenever the pool changes, until the returned
// stop is called; stop returns the IP-seconds, in all and per
// security-group set (by name, or groups for a set only annotations name)
// when the node has more than the default set.
func sampleIdle(ctx context.Context, a *agent) (stop func() (float64, map[string]float64)) {
	sctx, cancel := context.WithCancel(ctx)
	var idleIPSeconds float64
	perSet := map[string]float64{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := time.Now()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case now := <-tick.C:
				if h, ok := a.heartbeat(); ok {
					dt := now.Sub(last).Seconds()
					idleIPSeconds += float64(h.Pool.Total-h.Pool.Used) * dt
					for _, set := range h.Sets {
						name := set.Name
						if name == "" {
							name = strings.Join(set.SecurityGroups, ",")
						}
						perSet[name] += float64(set.Total-set.Used) * dt
					}
				}
				last = now
			}
		}
	}()
	return func() (float64, map[string]float64) {
		cancel()
		<-done
		return idleIPSeconds, perSet
	}
}

// livePod is a pod of the churn, with when it started and how long it
// took to be Ready (0: not yet).
type livePod struct {
	p       pod
	started time.Time
	ready   time.Duration
}

// churnPods are the churn's live pods and what they showed.
type churnPods struct {
	a          *agent
	pods       map[int]*livePod
	readyTimes []time.Duration
	// annotate, when set, gives pod i its annotations.
	annotate func(i int) map[string]string
	// notReady counts pods deleted after 30 s without being Ready.
	notReady int
}

// checkReady notes the pods that became Ready since the last look.
func (c *churnPods) checkReady() {
	for _, l := range c.pods {
		if l.ready == 0 {
			if _, ph := c.a.podStatus(l.p); ph == status.Ready {
				l.ready = time.Since(l.started)
				c.readyTimes = append(c.readyTimes, l.ready)
			}
		}
	}
}

// replay starts and deletes pods at the events' times after t0, noting
// readiness in between; it returns false when ctx ended first.
func (c *churnPods) replay(ctx context.Context, r *Result, events []churnEvent, t0 time.Time) bool {
	for _, ev := range events {
		for wait := time.Until(t0.Add(ev.at)); wait > 0; wait = time.Until(t0.Add(ev.at)) {
			c.checkReady()
			select {
			case <-ctx.Done():
				return false
			case <-time.After(min(wait, 10*time.Millisecond)):
			}
		}
		if ev.start {
			var ann map[string]string
			if c.annotate != nil {
				ann = c.annotate(ev.pod)
			}
			p, err := c.a.addPodAnnotated(fmt.Sprintf("churn-%d", ev.pod), "", time.Now(), ann)
			if err != nil {
				r.broken("%v", err)
				return true
			}
			c.pods[ev.pod] = &livePod{p: p, started: time.Now()}
			continue
		}
		l := c.pods[ev.pod]
		c.checkReady()
		if l.ready == 0 && time.Since(l.started) > 30*time.Second {
			c.notReady++
		}
		if err := c.a.delPod(l.p); err != nil {
			r.broken("%v", err)
		}
		delete(c.pods, ev.pod)
	}
	return true
}

// waitLive waits up to 30 s for the pods still running to be Ready and
// returns how many are not.
func (c *churnPods) waitLive(ctx context.Context) int {
	_ = poll.Until(ctx, clock.Real{}, 30*time.Second, 20*time.Millisecond, func() (bool, error) { // a timeout is counted just below
		c.checkReady()
		for _, l := range c.pods {
			if l.ready == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	n := 0
	for _, l := range c.pods {
		if l.ready == 0 {
			n++
		}
	}
	return n
}

// pct is the p-th percentile (nearest rank) of sorted ds.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := (p*len(ds) + 99) / 100
	return ds[max(0, min(len(ds)-1, i-1))]
}

// churnSetup names a churn run and says its setup: the time constants
// compressed by churnCompress (resync too unless the setting names its
// own), the run's length, the pool and ENI settings.
func churnSetup(e env, s poolSetting, events []churnEvent, starts int) (r Result, releaseDelay, cooldown, resync time.Duration) {
	releaseDelay = desired.DefaultReleaseDelay / churnCompress
	cooldown = desired.DefaultCooldown / churnCompress
	name := s.scenario
	if name == "" {
		name = "churn, pool " + s.name
	}
	resync, resyncNote := desired.DefaultResyncPeriod/churnCompress, "time constants / "+fmt.Sprint(churnCompress)
	if s.resync > 0 {
		resync, resyncNote = s.resync, fmt.Sprintf("releaseDelay and cooldown / %d, resync not compressed", churnCompress)
	}
	length := e.sizes.churnTime
	if len(events) > 0 {
		length = max(length, events[len(events)-1].at.Round(time.Second))
	}
	r = Result{Scenario: name,
		Setup: fmt.Sprintf("%d pod starts in %s (Poisson %.0f/s, mean life %s, seed %d) on %s; pool minIdle %d, maxIdle %d, batch %d; releaseDelay %s, cooldown %s, resync %s (%s); %s",
			starts, length, churnRate, churnLifeMean, churnSeed, burstType, s.minIdle, s.maxIdle, s.batch,
			releaseDelay, cooldown, resync, resyncNote, e.model)}
	if s.eni != "" {
		r.Setup += "; eni: " + strings.Join(strings.Fields(s.eni), " ")
	}
	return r, releaseDelay, cooldown, resync
}

// churnFigures adds a churn run's figures to r, and its verdict: calls and
// mutations per pod start, idle address-seconds (per set when there are
// several), ready latency, against the setting's target.
func churnFigures(r *Result, s poolSetting, readyTimes []time.Duration, calls callCount, starts int, idleIPSeconds float64, perSet map[string]float64, elapsed time.Duration) {
	perStart := float64(calls.total) / float64(starts)
	slices.Sort(readyTimes)
	r.add("calls/pod start", perStart, "calls")
	r.add("mutations/pod start", float64(calls.mutations)/float64(starts), "calls")
	r.add("idle IP-s", idleIPSeconds, "IP-s")
	r.add("mean idle IPs", idleIPSeconds/elapsed.Seconds(), "IPs")
	if len(perSet) > 1 {
		for _, name := range slices.Sorted(maps.Keys(perSet)) {
			r.add("mean idle IPs, set "+name, perSet[name]/elapsed.Seconds(), "IPs")
		}
	}
	r.add("ready p50", float64(pct(readyTimes, 50).Microseconds())/1000, "ms")
	r.add("ready p99", float64(pct(readyTimes, 99).Microseconds())/1000, "ms")
	switch {
	case s.target != nil:
		r.judge(s.target.text, perStart <= s.target.max)
	case s.name == "default":
		r.judge("<= 0.2 calls/pod start", perStart <= 0.2)
	}
}
