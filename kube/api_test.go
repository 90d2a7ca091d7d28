package kube_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/enidnet/enid/kube"
	"github.com/enidnet/enid/kube/kubetest"
)

// examples holds the manifests whose RBAC the agent's identity gets.
const examples = "../examples/kubernetes"

// agentClient starts an API server, grants the agent's identity exactly the
// RBAC of examples/kubernetes, creates the node and returns the admin's and
// the agent's clients.
func agentClient(t *testing.T, node string, labels map[string]string) (*kubetest.Server, kubernetes.Interface, kubernetes.Interface) {
	t.Helper()
	s := kubetest.Start(t)
	ctx := context.Background()
	if _, err := kubetest.Apply(ctx, s.RESTConfig(s.AdminToken), "kubetest",
		filepath.Join(examples, "namespace.yaml"), filepath.Join(examples, "serviceaccount.yaml"), filepath.Join(examples, "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	admin := s.Client(s.AdminToken)
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := kube.RESTConfig(kube.ConnectOptions{Kubeconfig: s.Kubeconfig("enid", s.AgentToken)})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := kube.NewClientset(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, admin, agent
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, s := cond()
		if ok {
			return
		}
		last = s
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not after %s (last: %s)", what, timeout, last)
}

// TestLinkAgainstAPIServer runs the link with the agent's RBAC against a
// real API server: labels in (and a change wakes the agent), capacity and
// the condition out (and kept exact), a Warning on a pod that
// `kubectl describe pod` shows, and nothing it is not granted.
func TestLinkAgainstAPIServer(t *testing.T) {
	const node = "node-1"
	_, admin, agent := agentClient(t, node, map[string]string{"pool": "big"})
	var woken atomic.Int32
	l := kube.New(agent, kube.Options{NodeName: node, OnChange: func() { woken.Add(1) }, Pods: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()

	select {
	case <-l.Seen():
	case <-time.After(10 * time.Second):
		t.Fatal("node not seen")
	}
	if got, _ := l.NodeLabels(); got["pool"] != "big" {
		t.Fatalf("labels %v, want pool=big", got)
	}
	n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels["pool"] = "small"
	if _, err := admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "label change seen", func() (bool, string) {
		got, _ := l.NodeLabels()
		return got["pool"] == "small" && woken.Load() >= 2, "labels " + got["pool"]
	})

	capacity := func(want string, cond corev1.ConditionStatus, reason string) {
		t.Helper()
		eventually(t, 10*time.Second, "node status "+want+" "+reason, func() (bool, string) {
			n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			q := n.Status.Capacity[kube.ResourcePodIPs]
			a := n.Status.Allocatable[kube.ResourcePodIPs]
			var c corev1.NodeCondition
			for _, x := range n.Status.Conditions {
				if x.Type == kube.ConditionAgentReady {
					c = x
				}
			}
			return q.String() == want && a.String() == want && c.Status == cond && c.Reason == reason,
				"capacity " + q.String() + " condition " + string(c.Status) + " " + c.Reason
		})
	}
	l.NodeStatus(kube.NodeStatus{Ready: true, Health: kube.HealthReady, CapacityKnown: true, PodIPs: 30})
	capacity("30", corev1.ConditionTrue, "AgentReady")
	l.NodeStatus(kube.NodeStatus{Ready: true, Health: kube.HealthConfigInvalid, Message: "config on disk is invalid", CapacityKnown: true, PodIPs: 15})
	capacity("15", corev1.ConditionTrue, "ConfigInvalid")

	// Someone (a kubelet re-registering) drops the resource: the link puts
	// it back, from the watch alone.
	n, err = admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(n.Status.Capacity, kube.ResourcePodIPs)
	delete(n.Status.Allocatable, kube.ResourcePodIPs)
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	capacity("15", corev1.ConditionTrue, "ConfigInvalid")

	// A pod that waits on an exhausted vSwitch gets a Warning, which
	// `kubectl describe pod` finds by the pod's name, namespace and UID.
	yes := true
	pod, err := admin.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0",
		Annotations:     map[string]string{"k8s.aliyun.com/pod-ip-reservation": "true"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "5f1c7a4e-0000-4000-8000-000000000001", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Its facts come from the watch of the node's pods.
	eventually(t, 10*time.Second, "pod facts", func() (bool, string) {
		f, ok := l.PodFacts("default", pod.Name, string(pod.UID))
		return ok && f.StatefulSet && f.Annotations["k8s.aliyun.com/pod-ip-reservation"] == "true", "not yet"
	})
	if _, ok := l.PodFacts("default", pod.Name, "another-uid"); ok {
		t.Error("facts of a pod with another UID")
	}
	l.PodStatus(kube.PodStatus{Namespace: "default", Name: pod.Name, UID: string(pod.UID), Attachment: "abc_eth0",
		Phase: "Pending", ReasonCode: "vswitch-exhausted", Reason: "no vSwitch has a free address (vsw-1: 0)"})
	l.PodStatus(kube.PodStatus{Namespace: "default", Name: pod.Name, UID: string(pod.UID), Attachment: "abc_eth0",
		Phase: "Ready", ReasonCode: "ready", Addresses: []string{"192.168.0.9"}})
	eventually(t, 15*time.Second, "events on the pod", func() (bool, string) {
		evs := describeEvents(ctx, t, admin, pod)
		return len(evs) == 2 && evs[0] == "Warning VSwitchExhausted no vSwitch has a free address (vsw-1: 0)" &&
			evs[1] == "Normal NetworkReady pod network ready: 192.168.0.9 (after vswitch-exhausted)", "events " + stringsOf(evs)
	})

	// The agent's identity can do nothing else: no secrets, no pod or
	// node writes.
	if err := agent.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("agent deletes a pod: err %v, want Forbidden", err)
	}
	if err := agent.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("agent deletes its node: err %v, want Forbidden", err)
	}
	if _, err := agent.CoreV1().Secrets("enid-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("agent lists secrets: err %v, want Forbidden", err)
	}
	if got := l.Dropped(); got != 0 {
		t.Errorf("%d statuses dropped", got)
	}
}

// describeEvents reads a pod's events as `kubectl describe pod` does (by
// the involved object's name, namespace and UID), oldest first, as
// "Type Reason Message".
func describeEvents(ctx context.Context, t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) []string {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": pod.Name,
		"involvedObject.namespace": pod.Namespace, "involvedObject.uid": string(pod.UID)}.AsSelector().String()
	list, err := cs.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	evs := list.Items
	// Oldest first, as describe sorts them.
	for i := 1; i < len(evs); i++ {
		for j := i; j > 0 && evs[j].FirstTimestamp.Before(&evs[j-1].FirstTimestamp); j-- {
			evs[j], evs[j-1] = evs[j-1], evs[j]
		}
	}
	var out []string
	for _, e := range evs {
		out = append(out, e.Type+" "+e.Reason+" "+e.Message)
	}
	return out
}

func stringsOf(s []string) string {
	out := ""
	for _, x := range s {
		out += "[" + x + "] "
	}
	return out
}
