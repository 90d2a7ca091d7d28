package reconcile

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// TestDegradedServesIdle: a warm node, then every cloud call fails. The
// node keeps handing out the idle addresses it holds (agent.json says
// degraded, readiness unchanged), pods beyond them wait with
// cloud-unreachable, and nothing is handed out twice. When the cloud comes
// back, the pool grows, the waiting pod is served, degraded mode ends.
func TestDegradedServesIdle(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 3\n  maxIdle: 6\n  batch: 3\n")
	stop := w.start(NewNoDatapathMust(t))
	defer stop()
	w.waitReady(w.addPod(0))
	w.waitFor("a warm pool", 10*time.Second, func() bool {
		a, err := status.ReadAgent(w.paths.AgentFile)
		return err == nil && a.Pool.Idle >= 3 && w.steady()
	})
	a, _ := status.ReadAgent(w.paths.AgentFile)
	idle := a.Pool.Idle
	w.sim.SetSettings(ecssim.Settings{Faults: ecssim.Faults{Rate: 1, Codes: []string{"ServiceUnavailable"}}})
	var keys []desired.Key
	for i := 1; i <= idle; i++ {
		k := w.addPod(i)
		keys = append(keys, k)
		w.waitReady(k)
	}
	last := w.addPod(idle + 1)
	w.waitFor("the pod beyond the idle addresses to wait for the cloud", 20*time.Second, func() bool {
		return w.statuses()[last.String()].ReasonCode == string(planner.ReasonCloudUnreachable)
	})
	w.waitFor("agent.json to say degraded", 10*time.Second, func() bool {
		a, err := status.ReadAgent(w.paths.AgentFile)
		return err == nil && a.Degraded != nil
	})
	a = w.heartbeatFresh(time.Second)
	if a.Degraded == nil || !a.Ready || !strings.Contains(a.Reason, "degraded") || a.Degraded.Idle != 0 {
		t.Fatalf("agent.json during the outage: ready %v, reason %q, degraded %+v", a.Ready, a.Reason, a.Degraded)
	}
	noDuplicates(t, w.statuses())

	w.sim.SetSettings(ecssim.Settings{})
	w.waitReady(last)
	w.waitFor("degraded mode to end", 60*time.Second, func() bool {
		a, err := status.ReadAgent(w.paths.AgentFile)
		return err == nil && a.Degraded == nil && a.Ready && a.Reason == ""
	})
	noDuplicates(t, w.statuses())
	if err := w.sim.Check(); err != nil {
		t.Fatalf("simulator invariants: %v", err)
	}
}

func noDuplicates(t *testing.T, sts map[string]status.Attachment) {
	t.Helper()
	seen := map[netip.Addr]string{}
	for k, a := range sts {
		for _, ip := range a.IPs {
			if other, dup := seen[ip.Address.Addr()]; dup {
				t.Fatalf("%s and %s share %s", k, other, ip.Address.Addr())
			}
			seen[ip.Address.Addr()] = k
		}
	}
}
