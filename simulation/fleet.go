package simulation

import (
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
)

// The fleet scenario: a fleet joins all at once, a config change lands on
// every node at once, then pods churn through a full cloud outage. Its
// figures are exact for a seed.
const (
	fleetPods         = 3
	fleetMinIdle      = 2
	fleetMinIdleAfter = 8
	fleetMaxIdle      = 10
	fleetOutage       = 10 * time.Minute
	// fleetChurn is the new pods per node per minute around the outage;
	// their lifetime is fleetLife on average.
	fleetChurn = 0.5
	fleetLife  = 10 * time.Minute
)

// FleetConfig is one fleet run.
type FleetConfig struct {
	Seed  uint64
	Nodes int
	// QPS is the account's API rate (0: a fifth of the nodes per second,
	// as the wall-clock fleet benchmark set it).
	QPS float64
	// Profile is the simulator's profile (default realistic).
	Profile string
	// Dir holds the nodes' files (default: a temporary directory).
	Dir string
	// Progress, when set, is told about each phase.
	Progress func(format string, args ...any)
	// Trace, when set, receives the run's trace, a line per cloud call
	// included.
	Trace io.Writer
	// NoOutage ends the run after the rollout.
	NoOutage bool
	// Length, when longer than the scenario (about 19 minutes), is the
	// virtual time the run covers: the churn goes on, pods coming and
	// going, until then.
	Length time.Duration
}

// FleetResult are a fleet run's figures, on virtual time.
type FleetResult struct {
	Nodes int
	QPS   float64
	// SoloJoinCalls are the calls one node makes to join with the account
	// to itself: the calls a join needs. The join's bound is Nodes x
	// SoloJoinCalls / QPS.
	SoloJoinCalls int
	Join          Phase
	// Rollout: minIdle 2 -> 8 on every node at once, with one new pod per
	// node; it needs one assign per node (bound Nodes / QPS).
	Rollout Phase
	// NewPodP50 and NewPodP99 are the rollout's new pods' waits from ADD
	// to Ready.
	NewPodP50, NewPodP99 time.Duration
	// Outage: pods keep coming (and going) through a full outage of
	// fleetOutage. Served are the pods of the outage made Ready during it
	// (from idle addresses), Waiting those still waiting at its end, and
	// Recovered the time from its end until the last of them was Ready.
	OutagePods, OutageServed, OutageWaiting int
	Recovered                               time.Duration
	// Virtual is the virtual time the run covered; Steps and Events its
	// clock steps and harness events; Violations any invariant broken.
	Virtual       time.Duration
	Steps, Events int
	Violations    []string
	Hash          string
	// Calls counts the run's calls by "action outcome".
	Calls map[string]int
}

// Phase is one timed phase of a fleet run.
type Phase struct {
	Took time.Duration
	// Bound is Necessary calls at the account's rate.
	Bound     time.Duration
	Necessary int
	Calls     int
	Throttled int
	// ByOutcome counts the phase's calls by "action outcome".
	ByOutcome map[string]int
}

// Ratio is Took / Bound.
func (p Phase) Ratio() float64 { return p.Took.Seconds() / p.Bound.Seconds() }

// ThrottledPerNecessary is Throttled / Necessary.
func (p Phase) ThrottledPerNecessary() float64 { return float64(p.Throttled) / float64(p.Necessary) }

func (p Phase) String() string {
	return fmt.Sprintf("%v (bound %v, %.2fx); %d calls, %d necessary, %d throttled (%.3f per necessary)",
		p.Took.Round(time.Millisecond), p.Bound.Round(time.Millisecond), p.Ratio(), p.Calls, p.Necessary, p.Throttled, p.ThrottledPerNecessary())
}

// RunFleet runs the fleet scenario. Like Run, it must run in a
// testing/synctest bubble.
func RunFleet(fc FleetConfig) (*FleetResult, error) {
	if fc.QPS == 0 {
		fc.QPS = max(20, float64(fc.Nodes)/5)
	}
	if fc.Profile == "" {
		fc.Profile = ecssim.ProfileRealistic
	}
	progress := fc.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	res := &FleetResult{Nodes: fc.Nodes, QPS: fc.QPS}
	solo, err := soloJoinCalls(fc)
	if err != nil {
		return nil, err
	}
	res.SoloJoinCalls = solo
	// The rule docs/config.md gives an operator: nodes x calls per node
	// (one assign) / the account's rate.
	spread := time.Duration(float64(fc.Nodes) / fc.QPS * float64(time.Second))
	cfg := Config{Seed: fc.Seed, Nodes: fc.Nodes, Profile: fc.Profile, AccountQPS: fc.QPS, Dir: fc.Dir,
		Heartbeat: time.Minute, Spread: spread, TailLines: 40, Trace: fc.Trace, TraceCalls: fc.Trace != nil}
	w, cleanup, err := setup(cfg)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	defer func() {
		res.Virtual, res.Steps, res.Events = w.clk.Now().Sub(Start), w.stats.Steps, w.stats.Events
		res.Violations, res.Hash = w.violations, w.hash()
		res.Calls = maps.Clone(w.calls)
	}()
	rng := rand.New(rand.NewPCG(fc.Seed, 0xf1ee7))
	pool := [2]int{fleetMinIdle, fleetMaxIdle}
	limit := func(d time.Duration) time.Time { return w.clk.Now().Add(d) }

	// Join: every node at once, its pods with it.
	progress("fleet of %d: join", fc.Nodes)
	before := w.snapshotCalls()
	for _, n := range w.nodes {
		n.config = w.configYAML(pool, false)
		if err := n.join(); err != nil {
			return nil, err
		}
		for range fleetPods {
			n.nextName++
			n.newPod(fmt.Sprintf("p%d", n.nextName))
		}
	}
	t0 := w.clk.Now()
	want := fc.Nodes * fleetPods
	if !w.loopUntil(limit(2*time.Hour), func() bool { return w.stats.PodsReady >= want }) {
		w.quiesce()
		return res, fmt.Errorf("the join did not end: %d of %d pods Ready; %s", w.stats.PodsReady, want, strings.Join(w.violations, "; "))
	}
	res.Join = w.phase(before, t0, fc.Nodes*solo, fc.QPS)
	progress("fleet of %d: joined in %v", fc.Nodes, res.Join.Took)

	// Rollout, once the join's work is done.
	w.loop(limit(2 * time.Minute))
	progress("fleet of %d: rollout", fc.Nodes)
	before = w.snapshotCalls()
	assigned := map[*node]bool{}
	w.onCall = func(n *node, action, outcome string) {
		if action == "AssignPrivateIpAddresses" && outcome == "ok" {
			assigned[n] = true
		}
	}
	ready0 := len(w.stats.ReadyWaits)
	after := [2]int{fleetMinIdleAfter, fleetMaxIdle}
	for _, n := range w.nodes {
		if err := n.setConfig(w.configYAML(after, false)); err != nil {
			return nil, err
		}
		n.nextName++
		n.newPod(fmt.Sprintf("p%d", n.nextName))
	}
	t0 = w.clk.Now()
	if !w.loopUntil(limit(time.Hour), func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(assigned) == fc.Nodes && w.stats.PodsReady >= want+fc.Nodes
	}) {
		w.quiesce()
		return res, fmt.Errorf("the rollout did not end: %d of %d nodes assigned; %s", len(assigned), fc.Nodes, strings.Join(w.violations, "; "))
	}
	res.Rollout = w.phase(before, t0, fc.Nodes, fc.QPS)
	waits := slices.Clone(w.stats.ReadyWaits[ready0:])
	slices.Sort(waits)
	res.NewPodP50, res.NewPodP99 = waits[len(waits)/2], waits[len(waits)*99/100]
	w.mu.Lock()
	w.onCall = nil
	w.mu.Unlock()
	progress("fleet of %d: rolled out in %v", fc.Nodes, res.Rollout.Took)

	if fc.NoOutage {
		w.quiesce()
		return res, nil
	}

	// Churn through a full outage.
	progress("fleet of %d: churn through a %v outage", fc.Nodes, fleetOutage)
	wl := &workload{w: w, rng: rng, base: w.sim.CurrentSettings()}
	churnStart := w.clk.Now()
	outageStart := churnStart.Add(5 * time.Minute)
	outageEnd := outageStart.Add(fleetOutage)
	var outagePods []*pod
	mean := time.Duration(float64(time.Minute) / fleetChurn)
	// Arrivals for 20 minutes, or until the run's length less a pod's
	// mean life, so that most are gone again at its end.
	arrivals := max(20*time.Minute, Start.Add(fc.Length-fleetLife).Sub(churnStart))
	for _, n := range w.nodes {
		for t := wl.exp(mean); t < arrivals; t += wl.exp(mean) {
			n := n
			w.at(churnStart.Add(t), func() {
				n.nextName++
				p := n.newPod(fmt.Sprintf("p%d", n.nextName))
				if !w.clk.Now().Before(outageStart) && w.clk.Now().Before(outageEnd) {
					outagePods = append(outagePods, p)
				}
				w.after(wl.exp(fleetLife), p.finish)
			})
		}
	}
	w.at(outageStart, func() {
		o := wl.base
		o.Faults = ecssim.Faults{Rate: 1, Codes: []string{"ServiceUnavailable"}}
		w.sim.SetSettings(o)
		w.faultUntil = outageEnd
		w.log("cloud: outage for %v", fleetOutage)
	})
	w.at(outageEnd, func() {
		w.sim.SetSettings(wl.base)
		w.log("cloud: outage over")
		for _, p := range outagePods {
			if p.phase == podRunning || p.phase == podDeleting || p.phase == podGone {
				res.OutageServed++
			} else {
				res.OutageWaiting++
			}
		}
		res.OutagePods = len(outagePods)
	})
	w.loop(outageEnd)
	if len(w.violations) > 0 {
		w.quiesce()
		return res, nil
	}
	w.loopUntil(limit(30*time.Minute), func() bool {
		for _, p := range outagePods {
			if p.phase == podAdding {
				return false
			}
		}
		return true
	})
	res.Recovered = w.clk.Now().Sub(outageEnd)
	progress("fleet of %d: outage: %d pods, %d served during it, %d waiting at its end, all served %v after it",
		fc.Nodes, res.OutagePods, res.OutageServed, res.OutageWaiting, res.Recovered)
	if end := Start.Add(fc.Length); w.clk.Now().Before(end) {
		progress("fleet of %d: churn until %v of virtual time", fc.Nodes, fc.Length)
		w.loop(end)
	}
	w.quiesce()
	return res, nil
}

// soloJoinCalls counts the calls one node makes to join with the account
// to itself (the same profile, no throttling).
func soloJoinCalls(fc FleetConfig) (int, error) {
	w, cleanup, err := setup(Config{Seed: fc.Seed, Nodes: 1, Profile: fc.Profile, AccountQPS: 1000, Heartbeat: time.Minute})
	if err != nil {
		return 0, err
	}
	defer cleanup()
	n := w.nodes[0]
	n.config = w.configYAML([2]int{fleetMinIdle, fleetMaxIdle}, false)
	if err := n.join(); err != nil {
		return 0, err
	}
	for range fleetPods {
		n.nextName++
		n.newPod(fmt.Sprintf("p%d", n.nextName))
	}
	ok := w.loopUntil(w.clk.Now().Add(10*time.Minute), func() bool { return w.stats.PodsReady >= fleetPods })
	calls := w.callTotal
	w.quiesce()
	if !ok {
		return 0, fmt.Errorf("a lone node did not join within 10 minutes: %s", strings.Join(w.violations, "; "))
	}
	return calls, nil
}

// callCounts is a copy of the run's call counts.
type callCounts struct {
	total     int
	throttled int
	by        map[string]int
}

func (w *world) snapshotCalls() callCounts {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := callCounts{total: w.callTotal, by: maps.Clone(w.calls)}
	for k, v := range w.calls {
		if strings.Contains(k, " Throttling") {
			c.throttled += v
		}
	}
	return c
}

// phase is the figures of a phase that began at t0 with the counts
// before, now that it ended.
func (w *world) phase(before callCounts, t0 time.Time, necessary int, qps float64) Phase {
	now := w.snapshotCalls()
	by := map[string]int{}
	for k, v := range now.by {
		if d := v - before.by[k]; d > 0 {
			by[k] = d
		}
	}
	return Phase{ByOutcome: by, Took: w.clk.Now().Sub(t0), Bound: time.Duration(float64(necessary) / qps * float64(time.Second)),
		Necessary: necessary, Calls: now.total - before.total, Throttled: now.throttled - before.throttled}
}
