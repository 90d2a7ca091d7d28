package e2e

import (
	"context"
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
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { crashDuringBurst(t, seed) })
	}
}

func crashDuringBurst(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x656e6964))
	// A short ADD timeout: an ADD cut off by the crash fails and is
	// retried, as kubelet would.
	// API latency keeps cloud calls in flight when the kill lands.
	n := newNode(t, nodeOptions{extraConfig: testPool, addTimeout: 5 * time.Second,
		sim: ecssim.Config{Latency: ecssim.Latency{Fixed: 10 * time.Millisecond, Uniform: 40 * time.Millisecond}}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const count = 20
	pods := make([]*pod, count)
	for i := range pods {
		pods[i] = n.newPod(fmt.Sprintf("c%d", i))
	}
	n.startAgent()

	var wg sync.WaitGroup
	var mu sync.Mutex
	retries, done := 0, 0
	for _, p := range pods {
		// The burst spreads over a second, so kills land among ADDs
		// arriving, waiting and completing.
		delay := time.Duration(rng.IntN(1000)) * time.Millisecond
		wg.Go(func() {
			time.Sleep(delay)
			defer func() { mu.Lock(); done++; mu.Unlock() }()
			// Kubelet retries a failed sandbox creation until it works.
			for {
				_, err := n.add(ctx, p)
				if err == nil || ctx.Err() != nil {
					return
				}
				mu.Lock()
				retries++
				mu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	kills := 1 + rng.IntN(2)
	for k := range kills {
		d := time.Duration(50+rng.IntN(750)) * time.Millisecond
		time.Sleep(d)
		n.agent.kill()
		mu.Lock()
		t.Logf("SIGKILL %d after %s, %d of %d ADDs done", k+1, d, done, count)
		mu.Unlock()
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		n.startAgent()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the burst did not complete: %v", ctx.Err())
	}
	t.Logf("%d kills, %d ADDs retried", kills, retries)

	n.checkBindings(pods)
	if err := n.sn.Sim.Check(); err != nil {
		t.Errorf("simulator model: %v", err)
	}
	n.delAll(ctx, pods)
	n.waitSettled(2, 6, 60*time.Second)
}
