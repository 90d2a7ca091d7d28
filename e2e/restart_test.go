package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/reconcile/status"
)

// TestAgentStoppedAndBack is acceptance 2: while the agent is stopped
// (SIGTERM), DEL succeeds at once and ADD waits; once the agent is back the
// waiting ADDs complete, the DELs' leftovers are torn down, and after DEL of
// everything nothing leaks.
func TestAgentStoppedAndBack(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := []*pod{n.newPod("a0"), n.newPod("a1"), n.newPod("a2")}
	n.startAgent()
	n.waitReady(30 * time.Second)
	firstIPs := n.addAll(ctx, first)
	if code, out, stderr := n.enid(ctx, "status", "--ready", "--run-dir", n.runDir); code != 0 {
		t.Errorf("enid status --ready with the agent running: exit %d %s%s", code, out, stderr)
	}
	// One agent per node: a second one on the same state dir refuses.
	code, _, stderr := n.enid(ctx, append([]string{"run", "--metrics-addr", ""}, n.nodeFlags()...)...)
	if code == 0 || !strings.Contains(stderr, "only one agent may run per node") {
		t.Errorf("a second agent on the node: exit %d, stderr %q; want a refusal naming the lock", code, stderr)
	}

	n.agent.stop(t)
	if code, out, _ := n.enid(ctx, "status", "--ready", "--run-dir", n.runDir); code != 1 {
		t.Errorf("enid status --ready with the agent stopped: exit %d (%s), want 1", code, out)
	}
	if a, err := n.agentFile(); err != nil || !a.Stopped || a.Ready {
		t.Fatalf("after SIGTERM the heartbeat says stopped=%v ready=%v (err %v), want stopped and not ready", a.Stopped, a.Ready, err)
	}

	// DEL with the agent down: only the entry goes, at once.
	start := time.Now()
	if err := n.rt.Del(ctx, first[0].Pod); err != nil {
		t.Fatalf("DEL with the agent stopped: %v", err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("DEL with the agent stopped took %s, want well under a second", took)
	}
	n.removePod(first[0]) // the runtime removes the sandbox after DEL

	// ADDs with the agent down wait for it.
	waiting := []*pod{n.newPod("b0"), n.newPod("b1"), n.newPod("b2")}
	type result struct {
		name string
		err  error
		at   time.Time
	}
	results := make(chan result, len(waiting))
	for _, p := range waiting {
		go func() {
			_, err := n.add(ctx, p)
			results <- result{p.Name, err, time.Now()}
		}()
	}
	select {
	case r := <-results:
		t.Fatalf("ADD %s returned while the agent was stopped: %v", r.name, r.err)
	case <-time.After(1500 * time.Millisecond):
	}

	restarted := time.Now()
	n.startAgent()
	for range waiting {
		r := <-results
		if r.err != nil {
			t.Errorf("ADD %s issued while the agent was stopped: %v", r.name, r.err)
			continue
		}
		t.Logf("ADD %s completed %s after the restart", r.name, r.at.Sub(restarted).Round(time.Millisecond))
	}
	if t.Failed() {
		t.FailNow()
	}
	live := append(first[1:], waiting...)
	// The restarted agent cleans up after the pod deleted while it was
	// away (its veth went with its netns; its rules are swept);
	// checkBindings fails on a host route or rule that belongs to no pod.
	waitFor(t, 10*time.Second, "teardown of the pod deleted while stopped", func() (bool, string) {
		k := n.nodeKernel()
		if len(k.veths) != len(live) {
			return false, fmt.Sprintf("veths %v, want %d", k.veths, len(live))
		}
		return true, ""
	})
	n.checkBindings(live)
	// A restart changes nothing for running pods.
	for i, p := range first[1:] {
		st, err := status.NewStore(filepath.Join(n.runDir, "status")).Read(p.ContainerID, p.IfName)
		if err != nil || len(st.IPs) == 0 || st.IPs[0].Address.Addr() != firstIPs[i+1] {
			t.Errorf("pod %s had %s before the restart, now status %+v (err %v)", p.Name, firstIPs[i+1], st.IPs, err)
		}
	}

	n.delAll(ctx, live)
	n.waitSettled(2, 6, 60*time.Second)
}
