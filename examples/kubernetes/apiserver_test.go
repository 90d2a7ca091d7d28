package kubernetes_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/enidnet/enid/kube/kubetest"
)

// TestManifestsApplyToAPIServer applies the kustomization's resources, in
// its order, to a real kube-apiserver with server-side apply, and runs the
// manifest checks on the objects as the server stored them (defaults
// filled, unknown fields dropped). Then it makes the pod the DaemonSet
// controller would make for a node from the stored template, creates it
// bound to that node, and checks that pod too: what the API server accepts
// and a node's kubelet would run. (Skips without the API server binaries,
// except in CI; see kube/kubetest.)
func TestManifestsApplyToAPIServer(t *testing.T) {
	s := kubetest.Start(t)
	ctx := context.Background()
	k := readKustomization(t, ".")
	var files []string
	for _, r := range k.Resources {
		files = append(files, filepath.Join(".", r))
	}
	objs, err := kubetest.Apply(ctx, s.RESTConfig(s.AdminToken), "enid-manifests-test", files...)
	if err != nil {
		t.Fatal(err)
	}
	var docs []doc
	var ds *unstructured.Unstructured
	for i, o := range objs {
		docs = append(docs, doc{where: fmt.Sprintf("server %s/%s #%d", o.GetKind(), o.GetName(), i), obj: o.Object})
		if o.GetKind() == "DaemonSet" {
			ds = o
		}
	}
	for _, p := range checkExamples(docs, t.TempDir()) {
		t.Errorf("as stored by the API server: %s", p)
	}
	if ds == nil {
		t.Fatal("no DaemonSet applied")
	}

	// The pod a node runs: the template, bound to the node.
	admin := s.Client(s.AdminToken)
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tmpl, ok, err := unstructured.NestedMap(ds.Object, "spec", "template")
	if err != nil || !ok {
		t.Fatalf("DaemonSet template: %v", err)
	}
	var pt corev1.PodTemplateSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &pt); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: pt.ObjectMeta, Spec: pt.Spec}
	pod.Name, pod.Namespace, pod.Spec.NodeName = "enid-node-a", ds.GetNamespace(), "node-a"
	got, err := admin.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the API server refuses the DaemonSet's pod: %v", err)
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(got)
	if err != nil {
		t.Fatal(err)
	}
	// Check the pod as the DaemonSet check reads it (the rollout strategy
	// is the stored DaemonSet's: a pod has none).
	strategy, _, _ := unstructured.NestedMap(ds.Object, "spec", "updateStrategy")
	podAsDS := map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]any{"name": ds.GetName(), "namespace": ds.GetNamespace()},
		"spec": map[string]any{"updateStrategy": strategy,
			"template": map[string]any{"metadata": u["metadata"], "spec": u["spec"]}}}
	var podDocs []doc
	for _, d := range docs {
		if d.obj["kind"] != "DaemonSet" {
			podDocs = append(podDocs, d)
		}
	}
	podDocs = append(podDocs, doc{where: "server pod " + got.Name, obj: podAsDS})
	for _, p := range checkExamples(podDocs, t.TempDir()) {
		t.Errorf("the pod a node runs: %s", p)
	}
	if got.Spec.ServiceAccountName != "enid" || got.Spec.NodeName != "node-a" {
		t.Errorf("pod runs as %q on %q, want enid on node-a", got.Spec.ServiceAccountName, got.Spec.NodeName)
	}
}
