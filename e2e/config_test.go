package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConfigMapReload is acceptance 4: a config delivered as a kubelet
// ConfigMap update (the ..data symlink swap) resizes the pool without a
// restart; an invalid one is refused while the last good one keeps
// running, visible in agent.json and in `enid plan --config`, which prints
// every problem and exits 1; a valid one afterwards takes over again.
func TestConfigMapReload(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool, configMap: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agent := n.startAgent()
	n.waitReady(30 * time.Second)
	pid := agent.cmd.Process.Pid
	n.waitOwnedIPs(2, 6, 20*time.Second)

	grown := strings.Replace(testPool, "minIdle: 2\n  maxIdle: 6", "minIdle: 12\n  maxIdle: 16", 1)
	n.swapConfigMap(n.Config(grown))
	n.waitOwnedIPs(12, 16, 20*time.Second)
	if a, err := n.agentFile(); err != nil || a.PID != pid || !a.Ready || a.Reason != "" {
		t.Fatalf("after the resize: heartbeat %+v (err %v), want pid %d ready without a reason", a, err, pid)
	}
	before := ownedIPs(n.owned(n.sn.Sim.Dump()))

	invalid := n.Config("bogus: 1\n" + strings.Replace(testPool, "minIdle: 2\n  maxIdle: 6\n  batch: 5", "minIdle: 20\n  maxIdle: 2\n  batch: 20", 1))
	n.swapConfigMap(invalid)
	waitFor(t, 10*time.Second, "agent reports the invalid config", func() (bool, string) {
		a, err := n.agentFile()
		if err != nil {
			return false, err.Error()
		}
		return a.Ready && a.PID == pid && strings.Contains(a.Reason, "invalid"), fmt.Sprintf("ready=%v pid=%d reason=%q", a.Ready, a.PID, a.Reason)
	})
	// The old config stays in force: the pool neither grows to the bad
	// minIdle nor shrinks to its maxIdle.
	time.Sleep(2 * time.Second)
	if after := ownedIPs(n.owned(n.sn.Sim.Dump())); after != before {
		t.Errorf("owned addresses went from %d to %d under an invalid config", before, after)
	}
	a, err := n.agentFile()
	if err != nil || !a.Ready || a.PID != pid {
		t.Errorf("under the invalid config: heartbeat %+v (err %v), want the same agent, ready", a, err)
	}
	t.Logf("agent.json reason: %s", a.Reason)

	// `enid plan` on the candidate names every problem.
	code, _, stderr := n.plan(ctx, "--config", filepath.Join(n.configMapDir, "..data", "config.yaml"))
	if code != 1 {
		t.Errorf("enid plan --config <invalid>: exit %d, want 1", code)
	}
	for _, want := range []string{"bogus: unknown field", "pool.maxIdle: must be >= pool.minIdle", "pool.batch: must be between 1 and 10"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("enid plan --config <invalid> does not say %q:\n%s", want, stderr)
		}
	}

	// A good config again: the warning clears and the pool shrinks back.
	n.swapConfigMap(n.Config(testPool))
	n.waitOwnedIPs(2, 6, 20*time.Second)
	if a, err := n.agentFile(); err != nil || a.PID != pid || a.Reason != "" {
		t.Errorf("after the fix: heartbeat pid %d reason %q (err %v), want pid %d and no reason", a.PID, a.Reason, err, pid)
	}
}

// waitOwnedIPs waits until the simulator shows between lo and hi owned
// addresses.
func (n *node) waitOwnedIPs(lo, hi int, timeout time.Duration) {
	n.t.Helper()
	waitFor(n.t, timeout, fmt.Sprintf("%d..%d owned addresses", lo, hi), func() (bool, string) {
		k := ownedIPs(n.owned(n.sn.Sim.Dump()))
		return k >= lo && k <= hi, fmt.Sprintf("%d owned", k)
	})
}
