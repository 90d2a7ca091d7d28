package simulation

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "run this one seed of TestSimulate (0: the CI's seeds)")
	seedsFlag = flag.Int("seeds", 0, "how many seeds TestSimulate runs (0: 200, 20 with -short or -race; the soak runs thousands)")
	nodesFlag = flag.Int("nodes", 0, "nodes per TestSimulate run (0: 4)")
	traceFlag = flag.Bool("sim-trace", false, "print the whole trace of each run (with -seed)")
)

// simulate runs cfg in a synctest bubble and returns its result.
func simulate(t *testing.T, cfg Config) *Result {
	t.Helper()
	var res *Result
	var err error
	synctest.Test(t, func(t *testing.T) {
		res, err = Run(cfg)
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// ordering is the small-fleet ordering simulation of a seed: a few nodes,
// pods coming and going, and every fault the workload knows.
func ordering(seed uint64) Config {
	nodes := 4
	if *nodesFlag > 0 {
		nodes = *nodesFlag
	}
	profile := ecssim.ProfileFast
	if seed%2 == 0 {
		profile = ecssim.ProfileRealistic
	}
	return Config{Seed: seed, Nodes: nodes, Workload: 30 * time.Minute, Settle: 10 * time.Minute,
		Profile: profile, Faults: true, Pods: 3, Churn: 0.5, TailLines: 60}
}

// report fails the test with what a failing seed needs: the command that
// replays it and the trace's last lines.
func report(t *testing.T, seed uint64, res *Result) {
	t.Helper()
	if len(res.Violations) == 0 {
		return
	}
	t.Errorf("seed %d broke an invariant:\n  %s\nreplay: go test ./simulation -run 'TestSimulate$' -seed=%d -sim-trace -v\nthe trace's last %d lines:\n%s",
		seed, strings.Join(res.Violations, "\n  "), seed, len(res.Tail), strings.Join(res.Tail, "\n"))
}

// TestSimulate runs the ordering simulation on many seeds (or the one
// -seed names) and holds every invariant after every step.
func TestSimulate(t *testing.T) {
	if *seedFlag != 0 {
		cfg := ordering(*seedFlag)
		if *traceFlag {
			cfg.Trace = os.Stdout
			cfg.TraceCalls = true
		}
		oneProc(t)
		res := simulate(t, cfg)
		report(t, *seedFlag, res)
		t.Logf("seed %d: %d trace lines, hash %s; %+v", *seedFlag, res.Lines, res.Hash, summary(res))
		return
	}
	oneProc(t)
	n := *seedsFlag
	if n == 0 {
		n = 200
		if testing.Short() || raceEnabled {
			n = 20
		}
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		res := simulate(t, ordering(seed))
		report(t, seed, res)
		if t.Failed() {
			return
		}
		if res.Stats.PodsReady == 0 {
			t.Fatalf("seed %d: no pod became Ready: the simulation ran nothing", seed)
		}
	}
}

// TestSameSeedSameTrace: a run is a function of its seed: the same seed
// twice gives the same trace, byte for byte; another seed another trace.
func TestSameSeedSameTrace(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		cfg := ordering(seed)
		cfg.TraceCalls = true
		a, b := simulate(t, cfg), simulate(t, cfg)
		if a.Hash != b.Hash || a.Lines != b.Lines {
			t.Fatalf("seed %d: two runs differ: %d lines, hash %s; then %d lines, hash %s", seed, a.Lines, a.Hash, b.Lines, b.Hash)
		}
		if a.Lines < 100 {
			t.Fatalf("seed %d: only %d trace lines: the run did nothing worth comparing", seed, a.Lines)
		}
	}
	a, b := simulate(t, ordering(5)), simulate(t, ordering(7))
	if a.Hash == b.Hash {
		t.Fatalf("seeds 5 and 7 gave the same trace %s: the seed does not reach the run", a.Hash)
	}
	// A fleet that joins all at once: every agent arms its timers in the
	// same instant, on goroutines the scheduler runs in any order.
	fleet := func() *FleetResult {
		var res *FleetResult
		var err error
		synctest.Test(t, func(t *testing.T) { res, err = RunFleet(FleetConfig{Seed: 3, Nodes: 30}) })
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	f1, f2 := fleet(), fleet()
	if f1.Hash != f2.Hash || f1.Steps != f2.Steps {
		t.Fatalf("a fleet of 30 joining at once, twice: %d steps, hash %s; then %d steps, hash %s", f1.Steps, f1.Hash, f2.Steps, f2.Hash)
	}
}

func summary(res *Result) string {
	return fmt.Sprintf("steps %d events %d ready %d failed %d timed out %d kills %d calls %d",
		res.Stats.Steps, res.Stats.Events, res.Stats.PodsReady, res.Stats.Failed, res.Stats.TimedOut, res.Stats.Kills, res.CallTotal)
}

var (
	fleetFlag    = flag.String("fleet", "", "TestFleet's sizes, comma-separated (default 1000; the soak: 1000,3000,10000)")
	noOutageFlag = flag.Bool("no-outage", false, "TestFleet ends after the rollout")
	lengthFlag   = flag.Duration("fleet-length", 0, "TestFleet's virtual length: the churn goes on until then (0: the scenario's, about 19m; the soak: 1h)")
)

// TestFleet runs the fleet scenario (join, rollout, outage) and holds its
// figures: a run is exact for its seed, so they are assertions.
func TestFleet(t *testing.T) {
	sizes := []int{1000}
	if testing.Short() || raceEnabled {
		sizes = []int{100}
	}
	if *fleetFlag != "" {
		sizes = nil
		for _, f := range strings.Split(*fleetFlag, ",") {
			var n int
			if _, err := fmt.Sscan(f, &n); err != nil || n <= 0 {
				t.Fatalf("-fleet %q: want node counts, comma-separated", *fleetFlag)
			}
			sizes = append(sizes, n)
		}
	}
	roomyGC(t)
	oneProc(t)
	for _, n := range sizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			wall := time.Now()
			var res *FleetResult
			var err error
			synctest.Test(t, func(t *testing.T) {
				// Inside the bubble time.Now is the bubble's: the wall
				// clock is asked of the kernel.
				start := wallClock()
				progress := func(format string, args ...any) {
					t.Logf("[wall %v] "+format, append([]any{(wallClock() - start).Round(time.Second)}, args...)...)
				}
				fc := FleetConfig{Seed: 1, Nodes: n, Progress: progress, NoOutage: *noOutageFlag, Length: *lengthFlag}
				if *traceFlag {
					fc.Trace = os.Stdout
				}
				res, err = RunFleet(fc)
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Violations) > 0 {
				t.Fatalf("invariants broken:\n  %s", strings.Join(res.Violations, "\n  "))
			}
			t.Logf("%d nodes, account %.0f calls/s, a lone join %d calls; wall %v, virtual %v, %d steps, %d events, trace %s",
				n, res.QPS, res.SoloJoinCalls, time.Since(wall).Round(time.Millisecond), res.Virtual, res.Steps, res.Events, res.Hash[:16])
			t.Logf("join: %v", res.Join)
			t.Logf("rollout: %v; new pod Ready p50 %v p99 %v", res.Rollout, res.NewPodP50, res.NewPodP99)
			t.Logf("join calls: %v", res.Join.ByOutcome)
			t.Logf("rollout calls: %v", res.Rollout.ByOutcome)
			t.Logf("all calls: %v", res.Calls)
			if !*noOutageFlag {
				t.Logf("outage: %d pods, %d served during it, %d waiting at its end, all served %v after it",
					res.OutagePods, res.OutageServed, res.OutageWaiting, res.Recovered)
			}
			// The targets (#23), exact for the seed: a change that
			// moves a figure past one fails here, not in a chart later.
			if r := res.Rollout.Ratio(); r > 1.2 {
				t.Errorf("rollout took %.2fx its bound, want <= 1.2x", r)
			}
			if r := res.Rollout.ThrottledPerNecessary(); r > 0.1 {
				t.Errorf("rollout: %.3f throttled calls per necessary one, want <= 0.1", r)
			}
			// The rollout's new pods are served from idle addresses: their
			// status is written in the pass their ADD woke, which takes no
			// virtual time. Later is a pass that waited for a timer, or a
			// harness that looked late (it did, until flush marked the
			// nodes it woke: 30 ms, the burst's end).
			if res.NewPodP99 != 0 {
				t.Errorf("rollout: new pod Ready p99 %v after its ADD, want at its ADD's instant (0s)", res.NewPodP99)
			}
			if !*noOutageFlag {
				if res.OutagePods == 0 || float64(res.OutageServed) < 0.95*float64(res.OutagePods) {
					t.Errorf("outage: %d of %d pods served during it, want 95%%", res.OutageServed, res.OutagePods)
				}
				if res.Recovered > 2*time.Minute {
					t.Errorf("outage: the last pod served %v after it, want within 2m", res.Recovered)
				}
			}
		})
	}
}

// roomyGC lets the heap grow to four times its live size before a
// collection (GOGC=400), up to 8 GiB: a fleet's heap is large and long
// lived (the agents' caches, the simulator's model), and at the default the
// collector's marking was a sixth of a 1,000-node fleet's CPU. An explicit
// GOGC in the environment wins.
func roomyGC(t *testing.T) {
	if os.Getenv("GOGC") != "" {
		return
	}
	prev := debug.SetGCPercent(400)
	prevLimit := debug.SetMemoryLimit(8 << 30)
	t.Cleanup(func() { debug.SetGCPercent(prev); debug.SetMemoryLimit(prevLimit) })
}

// wallClock is the kernel's realtime clock, which a synctest bubble does
// not fake (its time.Now is the bubble's own).
func wallClock() time.Duration {
	var tv syscall.Timeval
	if err := syscall.Gettimeofday(&tv); err != nil {
		return 0
	}
	return time.Duration(tv.Nano())
}

// oneProc runs the test on one P (GOMAXPROCS=1). A run makes one thing
// happen at a time and waits for every goroutine to park, so a second P
// only adds the scheduler's hand-offs between threads (a fifth of the
// 1,000-node fleet's wall time; the trace is the same either way).
// TestSameSeedSameTrace keeps the machine's Ps: more of them reorder its
// goroutines more, which is what it tests.
func oneProc(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
}
