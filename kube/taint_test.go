package kube_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/enidnet/enid/kube"
)

func taintsOf(t *testing.T, cs kubernetes.Interface, node string) []string {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, x := range n.Spec.Taints {
		out = append(out, x.Key+":"+string(x.Effect))
	}
	return out
}

func runLink(t *testing.T, l *kube.Link) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	select {
	case <-l.Seen():
	case <-time.After(10 * time.Second):
		t.Fatal("node not seen")
	}
	return func() { cancel(); <-done }
}

// TestStartupTaint (issue 26 item 3): with the agent's RBAC against a real
// API server, the startup taint stays while the agent is not ready, goes
// once it reports Ready (after the condition turns true), and no other
// taint goes with it; a restarted agent, not ready yet, does not put it
// back: the node never flaps.
func TestStartupTaint(t *testing.T) {
	const node = "node-taint"
	_, admin, agent := agentClient(t, node, nil)
	ctx := context.Background()
	n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = []corev1.Taint{
		{Key: "example.com/other", Effect: corev1.TaintEffectNoExecute},
		{Key: "enid.dev/agent-not-ready", Effect: corev1.TaintEffectNoSchedule},
		{Key: "enid.dev/agent-not-ready", Effect: corev1.TaintEffectNoExecute}, // same key, other effect: not ours
	}
	if _, err := admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	l := kube.New(agent, kube.Options{NodeName: node, StartupTaint: kube.DefaultStartupTaint})
	stop := runLink(t, l)
	l.NodeStatus(kube.NodeStatus{Ready: false, Health: kube.HealthNotReady, Message: "first pass not done"})
	time.Sleep(time.Second)
	if got := taintsOf(t, admin, node); !slices.Contains(got, "enid.dev/agent-not-ready:NoSchedule") {
		t.Fatalf("taint removed while not ready: %v", got)
	}
	l.NodeStatus(kube.NodeStatus{Ready: true, Health: kube.HealthReady, CapacityKnown: true, PodIPs: 30})
	want := []string{"example.com/other:NoExecute", "enid.dev/agent-not-ready:NoExecute"}
	eventually(t, 10*time.Second, "startup taint removed", func() (bool, string) {
		got := taintsOf(t, admin, node)
		return slices.Equal(got, want), "taints " + stringsOf(got)
	})
	n, err = admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == kube.ConditionAgentReady && c.Status != corev1.ConditionTrue {
			t.Errorf("taint gone with condition %s", c.Status)
		}
	}
	stop()

	// The agent restarts and is not ready for a while: the node stays
	// schedulable.
	l2 := kube.New(agent, kube.Options{NodeName: node, StartupTaint: kube.DefaultStartupTaint})
	stop2 := runLink(t, l2)
	defer stop2()
	l2.NodeStatus(kube.NodeStatus{Ready: false, Health: kube.HealthNotReady, Message: "restarting"})
	eventually(t, 10*time.Second, "condition false", func() (bool, string) {
		n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == kube.ConditionAgentReady {
				return c.Status == corev1.ConditionFalse, string(c.Status)
			}
		}
		return false, "no condition"
	})
	if got := taintsOf(t, admin, node); !slices.Equal(got, want) {
		t.Errorf("taints after a restart: %v, want %v", got, want)
	}
}

// TestNodeUnschedulable: a cordon and an uncordon reach the link from the
// watch, and wake the agent.
func TestNodeUnschedulable(t *testing.T) {
	const node = "node-cordon"
	_, admin, agent := agentClient(t, node, nil)
	var woken atomic.Int32
	l := kube.New(agent, kube.Options{NodeName: node, OnChange: func() { woken.Add(1) }})
	defer runLink(t, l)()
	if u, ok := l.NodeUnschedulable(); !ok || u {
		t.Fatalf("unschedulable %v ok %v at start", u, ok)
	}
	ctx := context.Background()
	for _, cordon := range []bool{true, false} {
		n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.Unschedulable = cordon
		// Read before the update: the watch may deliver it, and wake the
		// agent, before Update returns.
		before := woken.Load()
		if _, err := admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "cordon seen", func() (bool, string) {
			u, _ := l.NodeUnschedulable()
			return u == cordon && woken.Load() > before && l.UnschedulableSince().IsZero() != cordon, "not yet"
		})
	}
}

func TestParseTaint(t *testing.T) {
	for in, ok := range map[string]bool{
		"enid.dev/agent-not-ready":                  true,
		"enid.dev/agent-not-ready:NoSchedule":       true,
		"enid.dev/agent-not-ready:NoExecute":        true,
		"enid.dev/agent-not-ready:PreferNoSchedule": true,
		"enid.dev/agent-not-ready:Sometimes":        false,
		"":                                          false,
		"k=v:NoSchedule":                            false,
	} {
		if _, err := kube.ParseTaint(in); (err == nil) != ok {
			t.Errorf("ParseTaint(%q): %v", in, err)
		}
	}
}
