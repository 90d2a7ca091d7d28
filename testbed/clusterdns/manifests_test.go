package clusterdns

import (
	"bufio"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/manifests.yaml from Manifests")

// TestManifestsGolden keeps the rendered manifests in testdata, so a
// change to them shows in review as the YAML a cluster applies.
func TestManifestsGolden(t *testing.T) {
	got := Manifests("10.96.0.10", "cluster.local", "enid.test/coredns:v1.14.6")
	path := filepath.Join("testdata", "manifests.yaml")
	if *rewrite {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("Manifests changed (-testdata +got; go test -rewrite to accept):\n%s", d)
	}
}

// TestManifestsDecode decodes every object strictly (an unknown or
// misspelt field fails) into the Kubernetes type of its kind, and checks
// what ties them together: the names the e2e suite looks for, the
// selectors, the Service's address, the image, the Corefile's domain.
func TestManifestsDecode(t *testing.T) {
	const ip, domain, image = "10.96.0.10", "example.test", "enid.test/coredns:v9"
	docs := splitYAML(t, Manifests(ip, domain, image))
	var kinds []string
	var (
		sa      corev1.ServiceAccount
		role    rbacv1.ClusterRole
		binding rbacv1.ClusterRoleBinding
		cm      corev1.ConfigMap
		deploy  appsv1.Deployment
		svc     corev1.Service
	)
	for i, doc := range docs {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("object %d: %v\n%s", i, err, doc)
		}
		kinds = append(kinds, meta.Kind)
		into := map[string]any{"ServiceAccount": &sa, "ClusterRole": &role, "ClusterRoleBinding": &binding,
			"ConfigMap": &cm, "Deployment": &deploy, "Service": &svc}[meta.Kind]
		if into == nil {
			t.Fatalf("object %d: unexpected kind %q", i, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("%s: %v\n%s", meta.Kind, err, doc)
		}
	}
	if d := cmp.Diff([]string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Service"}, kinds); d != "" {
		t.Fatalf("kinds (-want +got):\n%s", d)
	}

	for _, m := range []metav1.ObjectMeta{sa.ObjectMeta, cm.ObjectMeta, deploy.ObjectMeta, svc.ObjectMeta} {
		if m.Namespace != "kube-system" {
			t.Errorf("%s is in namespace %q, want kube-system", m.Name, m.Namespace)
		}
	}
	if svc.Name != "kube-dns" || svc.Spec.ClusterIP != ip {
		t.Errorf("Service %s at %s, want kube-dns at %s", svc.Name, svc.Spec.ClusterIP, ip)
	}
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, p.Name+"/"+string(p.Protocol))
	}
	if d := cmp.Diff([]string{"dns/UDP", "dns-tcp/TCP", "metrics/TCP"}, ports); d != "" {
		t.Errorf("Service ports (-want +got):\n%s", d)
	}
	// The suite lists the DNS pods with this selector in kube-system.
	suite := labels.SelectorFromSet(labels.Set{"k8s-app": "kube-dns"})
	pod := labels.Set(deploy.Spec.Template.Labels)
	if !suite.Matches(pod) || !labels.SelectorFromSet(svc.Spec.Selector).Matches(pod) {
		t.Errorf("pod labels %v: not selected by the suite's k8s-app=kube-dns or the Service's %v", pod, svc.Spec.Selector)
	}
	sel, err := metav1.LabelSelectorAsSelector(deploy.Spec.Selector)
	if err != nil || !sel.Matches(pod) {
		t.Errorf("the Deployment's selector %v does not select its pods' labels %v (%v)", deploy.Spec.Selector, pod, err)
	}

	spec := deploy.Spec.Template.Spec
	if spec.DNSPolicy != corev1.DNSDefault {
		t.Errorf("dnsPolicy %q, want Default (CoreDNS must not resolve through itself)", spec.DNSPolicy)
	}
	if spec.ServiceAccountName != sa.Name || binding.Subjects[0].Name != sa.Name || binding.Subjects[0].Namespace != sa.Namespace ||
		binding.RoleRef.Name != role.Name {
		t.Errorf("the binding does not join ServiceAccount %s/%s to ClusterRole %s: %+v", sa.Namespace, sa.Name, role.Name, binding)
	}
	granted := map[string]bool{}
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			if strings.Join(r.Verbs, ",") == "list,watch" {
				granted[r.APIGroups[0]+"/"+res] = true
			}
		}
	}
	for _, need := range []string{"/services", "/namespaces", "/pods", "discovery.k8s.io/endpointslices"} {
		if !granted[need] {
			t.Errorf("the ClusterRole does not grant list and watch of %s: %+v", need, role.Rules)
		}
	}
	c := spec.Containers[0]
	if c.Image != image || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("container image %s (%s), want %s (IfNotPresent)", c.Image, c.ImagePullPolicy, image)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/ready" || c.ReadinessProbe.HTTPGet.Port.String() != "readiness-probe" {
		t.Errorf("readiness probe %+v, want GET /ready on readiness-probe", c.ReadinessProbe)
	}
	if spec.Volumes[0].ConfigMap.Name != cm.Name || c.VolumeMounts[0].MountPath != "/etc/coredns" {
		t.Errorf("the Corefile is not mounted from ConfigMap %s at /etc/coredns: %+v %+v", cm.Name, spec.Volumes, c.VolumeMounts)
	}
	if cm.Data["Corefile"] != manifestCorefile(domain).String() {
		t.Errorf("the ConfigMap's Corefile:\n%s\nwant:\n%s", cm.Data["Corefile"], manifestCorefile(domain))
	}
	for _, line := range []string{"kubernetes " + domain + " in-addr.arpa ip6.arpa {", "forward . /etc/resolv.conf", "disable denial " + domain} {
		if !strings.Contains(cm.Data["Corefile"], line) {
			t.Errorf("the Corefile lacks %q:\n%s", line, cm.Data["Corefile"])
		}
	}
}

// splitYAML splits a multi-document YAML stream as kubectl does.
func splitYAML(t *testing.T, s string) []string {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(s)))
	var docs []string
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(doc))
	}
}
