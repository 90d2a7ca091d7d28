package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
)

// TestFaultyCloud is acceptance 5: with a fifth of all API calls failing
// (Throttling, InternalError, ServiceUnavailable) pods still become Ready
// and the pool still settles after they go, and the agent's calls stay
// within its configured rate limit, retries included. The limit is tight
// (qps 3, burst 4) so that the workload needs more than the burst.
func TestFaultyCloud(t *testing.T) {
	const qps, burst = 3.0, 4
	n := newNode(t, nodeOptions{extraConfig: testPool + fmt.Sprintf("cloud:\n  rateLimit:\n    qps: %g\n    burst: %d\n", qps, burst)})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n.sn.Sim.SetSettings(ecssim.Settings{Faults: ecssim.Faults{Rate: 0.2}})
	pods := make([]*pod, 30)
	for i := range pods {
		pods[i] = n.newPod(fmt.Sprintf("f%d", i))
	}
	n.sn.Sim.ResetCounters()
	start := time.Now()
	n.startAgent()
	n.addAll(ctx, pods)
	t.Logf("%d pods Ready after %s", len(pods), time.Since(start).Round(time.Millisecond))
	n.checkBindings(pods)
	n.delAll(ctx, pods)
	n.waitPoolSettled(2, 6, 60*time.Second)
	elapsed := time.Since(start)
	calls, failed, summary := countCalls(n.sn.Sim.Counters())
	t.Logf("%d calls (%d failed) in %s: %s", calls, failed, elapsed.Round(time.Millisecond), summary)
	if failed == 0 {
		t.Errorf("no call failed: the fault injection did not work, so this test proves nothing")
	}
	// The client's token bucket: burst at once, then qps per second.
	// Slack 1 for the call in flight when the clock was read.
	bound := burst + int(qps*elapsed.Seconds()) + 1
	if calls <= burst {
		t.Errorf("only %d calls: the workload never needed more than the burst, so the limit was not tested", calls)
	}
	if calls > bound {
		t.Errorf("%d API calls in %s exceed the configured rate (qps %g, burst %d): bound %d", calls, elapsed, qps, burst, bound)
	}
	n.checkPlanEmpty() // after the count: its calls are not the agent's
}

// countCalls sums the simulator's counters: all calls, the failed ones,
// and a one-line summary.
func countCalls(c map[string]map[string]int) (calls, failed int, summary string) {
	var parts []string
	for action, outcomes := range c {
		for outcome, k := range outcomes {
			calls += k
			if outcome != "ok" {
				failed += k
			}
			parts = append(parts, fmt.Sprintf("%s %s=%d", action, outcome, k))
		}
	}
	sort.Strings(parts)
	return calls, failed, strings.Join(parts, ", ")
}
