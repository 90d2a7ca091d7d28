package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
)

// TestCrashDuringBurst is acceptance 3: the agent is SIGKILLed at random
// points while a burst of ADDs is under way (once or twice), then
// restarted. Every pod the runtime still considers added (ADDs that failed
// are retried, as kubelet does) ends Ready, no address is bound twice (in
// the statuses, the kernel and the cloud), and after DEL of all nothing
// leaks.
func TestCrashDuringBurst(t *testing.T) {
	for seed := uint64(1); seed <= uint64(*crashSeeds); seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { crashDuringBurst(t, seed, false, "") })
	}
}

// TestCrashDuringPrefixBurst is TestCrashDuringBurst with
// `eni.ipv4Allocation: prefix`: kills land while /28 prefixes are asked
// for, given back and bound.
func TestCrashDuringPrefixBurst(t *testing.T) {
	for seed := uint64(1); seed <= uint64(*crashSeeds); seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { crashDuringBurst(t, seed, false, "prefix") })
	}
}

// TestStopDuringBurst is TestCrashDuringBurst with SIGTERM instead of
// SIGKILL: a graceful stop lets running actions finish (within the
// shutdown grace) and must leave the same clean state.
func TestStopDuringBurst(t *testing.T) {
	for _, seed := range []uint64{4, 6} {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { crashDuringBurst(t, seed, true, "") })
	}
}

// crashSeeds is how many seeds TestCrashDuringBurst runs (each about 5s).
var crashSeeds = flag.Int("crash-seeds", 4, "seeds of TestCrashDuringBurst to run (1..N)") //nolint:gochecknoglobals // a test flag

// crashDuringBurst runs the burst with one seed; graceful sends SIGTERM
// instead of SIGKILL; alloc, if not empty, is eni.ipv4Allocation.
func crashDuringBurst(t *testing.T, seed uint64, graceful bool, alloc string) {
	rng := rand.New(rand.NewPCG(seed, 0x656e6964))
	// A short ADD timeout: an ADD cut off by the crash fails and is
	// retried, as kubelet would. API latency keeps cloud calls in flight
	// when the kill lands.
	// resyncPeriod 5s: see the orphaned-rule wait below.
	extra := testPool + "resyncPeriod: 5s\n"
	if alloc != "" {
		extra = allocation(alloc) + extra
	}
	n := newNode(t, nodeOptions{extraConfig: extra, addTimeout: time.Second,
		sim: ecssim.Config{Latency: ecssim.Latency{Fixed: 10 * time.Millisecond, Uniform: 40 * time.Millisecond}}})
	n.prefixMode = alloc == "prefix" || alloc == "prefer-prefix"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const count = 20
	pods := make([]*pod, count)
	for i := range pods {
		pods[i] = n.newPod(fmt.Sprintf("c%d", i))
	}
	n.startAgent()

	var wg sync.WaitGroup
	var mu sync.Mutex // guards retries and done
	retries, done := 0, 0
	errs := make([]error, count)
	for i := range pods {
		// The burst spreads over a second, so kills land among ADDs
		// arriving, waiting and completing.
		delay := time.Duration(rng.IntN(1000)) * time.Millisecond
		// This goroutine owns pods[i] and errs[i] until wg.Wait.
		wg.Go(func() {
			time.Sleep(delay)
			defer func() { mu.Lock(); done++; mu.Unlock() }()
			for attempt := 1; ; attempt++ {
				_, err := n.add(ctx, pods[i])
				if err == nil {
					return
				}
				if ctx.Err() != nil {
					errs[i] = err
					return
				}
				mu.Lock()
				retries++
				mu.Unlock()
				// Kubelet tears a failed sandbox down (CNI DEL) and
				// creates a new one, with a new container ID.
				if err := n.rt.Del(ctx, pods[i].Pod); err != nil {
					errs[i] = fmt.Errorf("DEL after a failed ADD of %s: %w", pods[i].Name, err)
					return
				}
				n.removePod(pods[i])
				p, err := n.makePod(fmt.Sprintf("c%d-%d", i, attempt))
				if err != nil {
					errs[i] = err
					return
				}
				pods[i] = p
			}
		})
	}
	kills := 1 + rng.IntN(2)
	for k := range kills {
		d := time.Duration(50+rng.IntN(750)) * time.Millisecond
		time.Sleep(d)
		sig := "SIGKILL"
		if graceful {
			sig = "SIGTERM"
			n.agent.stop(t)
		} else {
			n.agent.kill()
		}
		mu.Lock()
		t.Logf("%s %d after %s, %d of %d ADDs done", sig, k+1, d, done, count)
		mu.Unlock()
		// Down for up to 1.5s: longer than an ADD waits.
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		n.startAgent()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("the burst did not complete: %v", err)
	}
	t.Logf("%d signals, %d ADDs failed and were retried in a new sandbox", kills, retries)

	// A retried ADD's first sandbox is DELed and its netns removed, maybe
	// while the agent is down or just starting: if its veth goes between
	// the agent's observation and its teardown, the pod's rules are left
	// until the next full observation sweeps them (at most resyncPeriod).
	start := time.Now()
	waitFor(t, 20*time.Second, "no orphaned pod rule", func() (bool, string) {
		return n.noOrphanRules(pods)
	})
	if d := time.Since(start); d > time.Second {
		t.Logf("orphaned pod rules were swept %s later", d.Round(time.Millisecond))
	}
	n.checkBindings(pods)
	if err := n.sn.Sim.Check(); err != nil {
		t.Errorf("simulator model: %v", err)
	}
	n.delAll(ctx, pods)
	n.waitSettled(2, 6, 60*time.Second)
}
