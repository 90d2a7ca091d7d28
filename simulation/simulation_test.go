package simulation

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "run this one seed of TestSimulate (0: the CI's seeds)")
	seedsFlag = flag.Int("seeds", 0, "how many seeds TestSimulate runs (0: 200; the soak runs thousands)")
	nodesFlag = flag.Int("nodes", 0, "nodes per TestSimulate run (0: 4)")
	traceFlag = flag.Bool("trace", false, "print the whole trace of each run (with -seed)")
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
	t.Errorf("seed %d broke an invariant:\n  %s\nreplay: go test ./simulation -run 'TestSimulate$' -seed=%d -trace -v\nthe trace's last %d lines:\n%s",
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
		res := simulate(t, cfg)
		report(t, *seedFlag, res)
		t.Logf("seed %d: %d trace lines, hash %s; %+v", *seedFlag, res.Lines, res.Hash, summary(res))
		return
	}
	n := *seedsFlag
	if n == 0 {
		n = 200
		if testing.Short() {
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
}

func summary(res *Result) string {
	return fmt.Sprintf("steps %d events %d ready %d failed %d timed out %d kills %d calls %d",
		res.Stats.Steps, res.Stats.Events, res.Stats.PodsReady, res.Stats.Failed, res.Stats.TimedOut, res.Stats.Kills, res.CallTotal)
}
