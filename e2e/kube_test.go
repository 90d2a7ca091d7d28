package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/kube/kubetest"
)

// kubeOverride shrinks the pool of nodes labelled enid.dev/test-pool=small.
const kubeOverride = `overrides:
  - match: {labels: {enid.dev/test-pool: small}}
    config: {eni: {maxENIs: 1}}
`

// TestKubeAPI runs the real agent with a kubeconfig whose token has exactly
// the RBAC of examples/kubernetes, against a real kube-apiserver: node
// capacity appears and follows maxENIs (set by a drop-in, then by a label
// override); with the API server stopped, pod ADD and DEL go on as before,
// and the features recover when it is back; a pod that waits on an
// exhausted vSwitch gets a Warning that `kubectl describe pod` shows, and a
// Normal event once it is served.
func TestKubeAPI(t *testing.T) {
	sim := ecssim.Config{Zones: []string{"cn-hangzhou-h"}, VSwitches: []ecssim.VSwitchConfig{
		{ID: "vsw-small", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.0.0/27")}}}
	n := newNode(t, nodeOptions{extraConfig: testPool + kubeOverride, sim: sim, addTimeout: 5 * time.Second})
	srv := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ex := filepath.Join("..", "examples", "kubernetes")
	if _, err := kubetest.Apply(ctx, srv.RESTConfig(srv.AdminToken), "e2e", filepath.Join(ex, "namespace.yaml"),
		filepath.Join(ex, "serviceaccount.yaml"), filepath.Join(ex, "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	admin := srv.Client(srv.AdminToken)
	const nodeName = "e2e-node" // nodeFlags' --node-name
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.agentArgs = []string{"--kubeconfig", srv.Kubeconfig("enid", srv.AgentToken), "--kube-event-qps", "20"}
	n.startAgent()
	n.waitReady(30 * time.Second)

	capacity := func(what string, ok func(int) bool) int {
		t.Helper()
		var got int
		waitFor(t, 30*time.Second, "node capacity "+what, func() (bool, string) {
			node, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			q, have := node.Status.Capacity["enid.dev/pod-ips"]
			cond := ""
			for _, c := range node.Status.Conditions {
				if c.Type == "EnidAgentReady" {
					cond = string(c.Status) + " " + c.Reason
				}
			}
			got = int(q.Value())
			return have && ok(got) && cond == "True AgentReady", fmt.Sprintf("enid.dev/pod-ips %s (set %v), condition %q", q.String(), have, cond)
		})
		return got
	}
	full := capacity("published", func(c int) bool { return c > 0 })
	dropIn := filepath.Join(n.cfgDir, "50-max-enis.yaml")
	writeMax := func(m int) {
		t.Helper()
		if err := os.WriteFile(dropIn, []byte("apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\neni:\n  maxENIs: "+strconv.Itoa(m)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeMax(2)
	// The simulated instance type allows more than 2 secondary ENIs.
	two := capacity("with maxENIs 2", func(c int) bool { return c < full && c%2 == 0 && c > 0 })
	setLabel(ctx, t, admin, nodeName, "small")
	one := capacity("with the label override (maxENIs 1)", func(c int) bool { return c*2 == two })
	setLabel(ctx, t, admin, nodeName, "")
	capacity("label removed: maxENIs 2 again", func(c int) bool { return c == two })
	t.Logf("capacity: %d by the instance's limits, %d with maxENIs 2, %d with the label override", full, two, one)
	t.Logf("kubectl describe node %s (excerpt):\n%s", nodeName, describeNode(ctx, t, admin, nodeName))

	// The API server goes away: pods come and go as before.
	outageFrom := logSize(t, n.agent.log)
	srv.StopAPI()
	a, b := n.apiPod(ctx, admin, "during-outage-a", false, nil), n.apiPod(ctx, admin, "during-outage-b", false, nil)
	start := time.Now()
	n.addAll(ctx, []*pod{a, b})
	n.delAll(ctx, []*pod{a})
	t.Logf("ADD of 2 pods and DEL of 1 with the API server down: %s", time.Since(start).Round(time.Millisecond))
	writeMax(1) // a config change while the API server is down
	n.checkBindings([]*pod{b})
	srv.StartAPI()
	capacity("after the API server came back", func(c int) bool { return c == one })
	// A starting API server refuses requests until its RBAC caches are
	// filled: what the agent logs until it has recovered is no evidence.
	outageTo := logSize(t, n.agent.log)
	n.delAll(ctx, []*pod{b})
	if err := os.Remove(dropIn); err != nil {
		t.Fatal(err)
	}
	capacity("the drop-in removed", func(c int) bool { return c == full })

	// A StatefulSet's pod, whose runtime passes no annotations, keeps its
	// address when it is deleted and made again under its name: the agent
	// reads its owner from the API server (stickyStatefulSets, on by
	// default). Without that, the address would be cooling down (300 ms)
	// when the new pod asks at once, and it would get another.
	web := n.apiPod(ctx, admin, "web-0", true, statefulSetOwner())
	ip, err := n.add(ctx, web)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the StatefulSet pod's address reserved", func() (bool, string) {
		m, err := os.ReadFile(filepath.Join(n.stateDir, "memory.json"))
		return err == nil && strings.Contains(string(m), `"default/web-0/eth0"`), string(m)
	})
	n.delAll(ctx, []*pod{web})
	now := int64(0) // no kubelet here to finish a graceful deletion
	if err := admin.CoreV1().Pods("default").Delete(ctx, "web-0", metav1.DeleteOptions{GracePeriodSeconds: &now}); err != nil {
		t.Fatal(err)
	}
	again := n.apiPod(ctx, admin, "web-0-again", false, nil)
	again.Name = "web-0" // a new sandbox (container ID, netns) for the pod made again
	obj, err := admin.CoreV1().Pods("default").Create(ctx, podObject("web-0", statefulSetOwner()), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	again.UID = string(obj.UID)
	ip2, err := n.add(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	if ip2 != ip {
		t.Errorf("StatefulSet pod web-0 made again got %s, had %s: want its address back", ip2, ip)
	}
	n.delAll(ctx, []*pod{again})

	// Fill the vSwitch: the pod left over waits, and says why.
	var served []*pod
	var waiting *pod
	var reason string
	for i := range 40 {
		p := n.apiPod(ctx, admin, fmt.Sprintf("fill-%d", i), true, nil)
		if _, err := n.add(ctx, p); err != nil {
			for _, code := range []string{"vswitch-exhausted", "ip-limit", "instance-eni-limit"} {
				if strings.Contains(err.Error(), code) {
					waiting, reason = p, code
				}
			}
			if waiting == nil {
				t.Fatalf("ADD %s: %v, want a wait for addresses", p.Name, err)
			}
			break
		}
		served = append(served, p)
	}
	if waiting == nil {
		t.Fatal("40 pods served by a /27: the vSwitch never ran out")
	}
	if reason != "vswitch-exhausted" {
		t.Logf("the pod left over waits for %s (the e2e exhaustion test explains when)", reason)
	}
	want := map[string]string{"vswitch-exhausted": "VSwitchExhausted", "ip-limit": "IPLimit", "instance-eni-limit": "InstanceENILimit"}[reason]
	waitFor(t, 30*time.Second, "a Warning on the waiting pod", func() (bool, string) {
		evs := describePod(ctx, t, admin, waiting)
		if strings.Contains(evs, "Warning "+want+" ") {
			t.Logf("the waiting pod's events:\n%s", evs)
			return true, ""
		}
		return false, evs
	})
	// A served pod goes: its address, after the cooldown, serves the
	// waiting one, whose entry stayed (kubelet retries the same sandbox).
	n.delAll(ctx, served[:1])
	waitFor(t, 30*time.Second, "a Normal event once the waiting pod is served", func() (bool, string) {
		evs := describePod(ctx, t, admin, waiting)
		return strings.Contains(evs, "Normal NetworkReady pod network ready: 192.168."), evs
	})
	t.Logf("kubectl describe pod %s, Events:\n%s", waiting.Name, describePod(ctx, t, admin, waiting))
	n.delAll(ctx, append(served[1:], waiting))
	// The manifests' RBAC was enough: the API server refused the agent
	// nothing (its watches and writes would log it).
	logBytes, err := os.ReadFile(n.agent.log)
	if err != nil {
		t.Fatal(err)
	}
	logText := string(logBytes[:outageFrom]) + string(logBytes[outageTo:])
	if strings.Contains(strings.ToLower(logText), "forbidden") {
		t.Errorf("the API server refused the agent something:\n%s", grepLines(logText, "orbidden"))
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// apiPod makes a pod sandbox and its Pod object (default namespace, bound
// to the node), so that the pod's UID in its entry is the API server's;
// with create false the API server is not asked (the UID is made up).
func (n *node) apiPod(ctx context.Context, cs kubernetes.Interface, name string, create bool, owners []metav1.OwnerReference) *pod {
	n.t.Helper()
	p := n.newPod(name)
	if !create {
		return p
	}
	obj, err := cs.CoreV1().Pods("default").Create(ctx, podObject(name, owners), metav1.CreateOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	p.Namespace, p.UID = obj.Namespace, string(obj.UID)
	return p
}

// podObject is a pod of the default namespace bound to the test's node.
func podObject(name string, owners []metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners},
		Spec: corev1.PodSpec{NodeName: "e2e-node", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
}

// statefulSetOwner is the owner reference a StatefulSet sets on its pods.
func statefulSetOwner() []metav1.OwnerReference {
	yes := true
	return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web",
		UID: "7d0c3b2a-0000-4000-8000-000000000001", Controller: &yes, BlockOwnerDeletion: &yes}}
}

// setLabel sets (or, with "", removes) the node's enid.dev/test-pool label.
func setLabel(ctx context.Context, t *testing.T, cs kubernetes.Interface, node, v string) {
	t.Helper()
	patch := `{"metadata":{"labels":{"enid.dev/test-pool":null}}}`
	if v != "" {
		patch = `{"metadata":{"labels":{"enid.dev/test-pool":"` + v + `"}}}`
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// describePod lists a pod's events as `kubectl describe pod` finds them
// (by the involved object's kind, name, namespace and UID): one
// "Type Reason Message" line each.
func describePod(ctx context.Context, t *testing.T, cs kubernetes.Interface, p *pod) string {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": p.Name,
		"involvedObject.namespace": p.Namespace, "involvedObject.uid": p.UID}.AsSelector().String()
	list, err := cs.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range list.Items {
		fmt.Fprintf(&b, "%s %s %s (x%d, from %s on %s)\n", e.Type, e.Reason, e.Message, e.Count, e.Source.Component, e.Source.Host)
	}
	return b.String()
}

// describeNode prints what `kubectl describe node` shows of enid: its
// condition and its resources in Capacity and Allocatable.
func describeNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("Conditions:\n  Type            Status  Reason      Message\n")
	for _, c := range node.Status.Conditions {
		fmt.Fprintf(&b, "  %-15s %-7s %-11s %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, sec := range []struct {
		name string
		list corev1.ResourceList
	}{{"Capacity", node.Status.Capacity}, {"Allocatable", node.Status.Allocatable}} {
		fmt.Fprintf(&b, "%s:\n", sec.name)
		for r, q := range sec.list {
			fmt.Fprintf(&b, "  %s:  %s\n", r, q.String())
		}
	}
	return b.String()
}

func logSize(t *testing.T, path string) int {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Size())
}
