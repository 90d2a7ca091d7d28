// Package cluster_test is the operator's day with enid on a real
// single-node Kubernetes cluster (testbed/cluster): the image built by
// `go run ./image` and imported into containerd, `kubectl apply -k` of
// examples/kubernetes under a kustomize overlay that only points the
// config at the simulated cloud, then a day of pods placed by the real
// scheduler and started by the real kubelet through enid's plugin. Every
// step is what docs/deploy.md tells an operator to type.
package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/reconcile/status"
	"github.com/enidnet/enid/testbed/cluster"
)

// startupTaint is what docs/deploy.md tells operators to register nodes
// with; the agent removes it once it serves.
const startupTaint = "enid.dev/agent-not-ready=:NoSchedule"

// The node's zone and its two vSwitches: the config names vswMain only
// until the exhausted step adds vswExtra.
const (
	zone     = "cn-hangzhou-h"
	vswMain  = "vsw-main"
	vswExtra = "vsw-extra"
)

// day is the cluster and what the steps share.
type day struct {
	t    *testing.T
	c    *cluster.Cluster
	dir  string
	root string
	// image is the enid image the DaemonSet runs (this tree's).
	image string
	// alloc is the config's eni.ipv4Allocation ("": the default).
	alloc string
	// ipStack is the config's ipStack ("": the default, ipv4).
	ipStack string
	// exclusive runs the config in mode exclusive-eni, with the cluster's
	// Service range in serviceCIDRs and a pool of one or two spare ENIs.
	exclusive bool
}

// TestOperatorsDay runs the steps in order on one cluster; a step that
// fails stops the day (the later ones build on it).
func TestOperatorsDay(t *testing.T) {
	before := cluster.Host()
	d := &day{t: t, dir: t.TempDir()}
	d.root = cluster.ModuleRoot(t)
	tarball, image := cluster.EnidImage(t, d.root, "", d.dir)
	d.image = image
	d.c = cluster.Start(t, cluster.Options{Images: []string{tarball}, Taints: []string{startupTaint}, VSwitchID: vswMain,
		Sim: ecssim.Config{VSwitches: []ecssim.VSwitchConfig{
			{ID: vswMain, Zone: zone, CIDR: netip.MustParsePrefix("192.168.0.0/24")},
			{ID: vswExtra, Zone: zone, CIDR: netip.MustParsePrefix("192.168.1.0/24")},
		}}})
	steps := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"apply", d.apply},
		{"deployment", d.deployment},
		{"exhausted", d.exhausted},
		{"statefulset", d.statefulSet},
		{"restarts", d.restarts},
		{"upgrade", d.upgrade},
		{"hints", d.hints},
		{"drain", d.drain},
		{"startup", d.startup},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.fn) {
			return
		}
	}
	dir := d.c.Dir
	d.c.Close()
	if diff := before.Diff(cluster.Host()); len(diff) > 0 {
		t.Errorf("the cluster changed the host:\n%s", strings.Join(diff, "\n"))
	}
	if left := cluster.Leftovers(dir); len(left) > 0 {
		t.Errorf("processes left behind:\n%s", strings.Join(left, "\n"))
	}
}

// overlay writes the kustomize overlay an operator writes: the manifests
// of examples/kubernetes as its base, the agent's config.yaml pointed at
// the simulator (its vSwitches, security group, endpoints), and the
// credentials Secret the config's `source: env` reads.
func (d *day) overlay() string {
	d.t.Helper()
	base := filepath.Join(d.dir, "deploy", "base")
	over := filepath.Join(d.dir, "deploy", "overlay")
	for _, p := range []string{base, over} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			d.t.Fatal(err)
		}
	}
	src := filepath.Join(d.root, "examples", "kubernetes")
	ents, err := os.ReadDir(src)
	if err != nil {
		d.t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".yaml") {
			b, err := os.ReadFile(filepath.Join(src, e.Name()))
			if err != nil {
				d.t.Fatal(err)
			}
			write(d.t, filepath.Join(base, e.Name()), string(b))
		}
	}
	env := d.c.Sim.Env()
	write(d.t, filepath.Join(over, "config.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: enid-config\n  namespace: enid-system\ndata:\n  config.yaml: |\n"+indent(d.config(vswMain), "    "))
	write(d.t, filepath.Join(over, "secret.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: enid-credentials
  namespace: enid-system
stringData:
  ALIBABA_CLOUD_ACCESS_KEY_ID: %s
  ALIBABA_CLOUD_ACCESS_KEY_SECRET: %s
`, env["ALIBABA_CLOUD_ACCESS_KEY_ID"], env["ALIBABA_CLOUD_ACCESS_KEY_SECRET"]))
	write(d.t, filepath.Join(over, "kustomization.yaml"), `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../base
  - secret.yaml
patches:
  - path: config.yaml
`)
	return over
}

// config is the agent's config.yaml for the simulated cloud with the
// zone's vSwitches vsws: the endpoints an operator would leave out on
// Alibaba Cloud point at the simulator, at the VPC's service addresses
// (testbed/simnode.ECSIP and MetadataIP, which answers each node about
// itself).
func (d *day) config(vsws ...string) string {
	env := d.c.Sim.Env()
	mode := "mode: shared-eni\npool:\n  minIdle: 2\n  maxIdle: 10\n  batch: 5\n"
	if d.exclusive {
		mode = fmt.Sprintf("mode: exclusive-eni\nserviceCIDRs: [%s]\npool:\n  minIdle: 1\n  maxIdle: 2\n  batch: 1\n",
			strings.Join(d.c.ServiceCIDRs(), ", "))
	}
	if d.ipStack != "" {
		mode = "ipStack: " + d.ipStack + "\n" + mode
	}
	return fmt.Sprintf(`apiVersion: enid.dev/v1alpha1
kind: AgentConfig
%s  releaseDelay: 2s
  cooldown: 1s
eni:
  vSwitches:
    %s: [%s]
  securityGroups: [%s]%s
cloud:
  endpoint: %s
  metadataEndpoint: %s
  credentials:
    source: env
`, mode, zone, strings.Join(vsws, ", "), ecssim.DefaultSecurityGroup, d.allocLine(), env["ENID_ECS_ENDPOINT"], env["ENID_METADATA_ENDPOINT"])
}

func (d *day) allocLine() string {
	if d.alloc == "" {
		return ""
	}
	return "\n  ipv4Allocation: " + d.alloc
}

// apply is the install: kubectl apply -k, the DaemonSet's pod running,
// the plugin installed, the node Ready without the startup taint, and
// the agent's condition and capacity on the Node.
func (d *day) apply(t *testing.T) {
	c := d.c
	c.MustKubectl("apply", "-k", d.overlay())
	c.MustKubectl("-n", "enid-system", "rollout", "status", "daemonset/enid", "--timeout=3m")
	c.MustKubectl("wait", "--for=condition=Ready", "node/"+c.NodeName, "--timeout=2m")
	if _, err := os.Stat(c.Root("/opt/cni/bin/enid-cni")); err != nil {
		t.Errorf("the plugin is not installed: %v", err)
	}
	if _, err := os.Stat(c.Root("/etc/cni/net.d/10-enid.conflist")); err != nil {
		t.Errorf("the network list is not written: %v", err)
	}
	var node corev1.Node
	getJSON(t, c, &node, "get", "node", c.NodeName, "-o", "json")
	var ready bool
	for _, cond := range node.Status.Conditions {
		if cond.Type == "EnidAgentReady" && cond.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		t.Errorf("node has no EnidAgentReady=True condition: %+v", node.Status.Conditions)
	}
	if q, ok := node.Status.Capacity["enid.dev/pod-ips"]; !ok || q.Value() < 30 {
		t.Errorf("node capacity enid.dev/pod-ips = %v (present %v), want >= 30", q.String(), ok)
	}
	for _, taint := range node.Spec.Taints {
		if taint.Key == "enid.dev/agent-not-ready" {
			t.Errorf("the startup taint is still on the node: %+v", node.Spec.Taints)
		}
	}
}

// deployment: 30 pods placed by the scheduler, all Running with the
// simulator's addresses that enid's status files hold, reaching each
// other; scaled to 0, the pool settles within its bounds and the
// simulator finds nothing leaked.
func (d *day) deployment(t *testing.T) {
	c := d.c
	write(t, filepath.Join(d.dir, "web.yaml"), podServerDeployment("web", 30))
	c.MustKubectl("apply", "-f", filepath.Join(d.dir, "web.yaml"))
	c.MustKubectl("rollout", "status", "deployment/web", "--timeout=3m")
	pods := d.pods(t, "app=web")
	if len(pods) != 30 {
		t.Fatalf("%d pods, want 30", len(pods))
	}
	d.checkAddresses(t, pods)
	d.checkTraffic(t, pods)
	c.MustKubectl("scale", "deployment/web", "--replicas=0")
	d.waitPods(t, "app=web", 0, 2*time.Minute)
	d.waitPoolSettled(t, 10, time.Minute)
	if err := c.Sim.Sim.Check(); err != nil {
		t.Errorf("the simulator's invariants: %v", err)
	}
}

// pods lists the Running pods with a label selector.
func (d *day) pods(t *testing.T, selector string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	getJSON(t, d.c, &list, "get", "pods", "-l", selector, "-o", "json")
	var running []corev1.Pod
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			running = append(running, p)
		}
	}
	return running
}

// waitPods waits until exactly n pods match the selector (any phase).
func (d *day) waitPods(t *testing.T, selector string, n int, timeout time.Duration) {
	t.Helper()
	cs := d.c.Client()
	deadline := time.Now().Add(timeout)
	for {
		l, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err == nil && len(l.Items) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods %s: want %d after %s (err %v)", selector, n, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkAddresses: every pod's IP (kubectl get pods -o wide shows it) is
// the address enid's status file for its sandbox holds, is held by one of
// the node's ENIs in the simulator, and no two pods share one.
func (d *day) checkAddresses(t *testing.T, pods []corev1.Pod) {
	t.Helper()
	wide := d.c.MustKubectl("get", "pods", "-o", "wide")
	atts, problems, err := status.NewStore(d.c.Root("/run/enid/status")).ReadAll()
	if err != nil || len(problems) > 0 {
		t.Fatalf("read enid's status files: %v %v", err, problems)
	}
	inStatus := map[string]bool{}
	for _, a := range atts {
		for _, ip := range a.IPs {
			inStatus[ip.Address.Addr().String()] = true
		}
	}
	held := map[string]bool{}
	for _, e := range d.c.Sim.Sim.Dump().ENIs {
		if e.InstanceID != d.c.Sim.Instance.ID {
			continue
		}
		for _, ip := range e.IPv4 {
			held[ip.String()] = true
		}
	}
	seen := map[string]string{}
	for _, p := range pods {
		ip := p.Status.PodIP
		switch {
		case ip == "":
			t.Errorf("pod %s has no IP", p.Name)
		case seen[ip] != "":
			t.Errorf("pods %s and %s share %s", seen[ip], p.Name, ip)
		case !inStatus[ip]:
			t.Errorf("pod %s: %s is in no status file of enid's", p.Name, ip)
		case !held[ip]:
			t.Errorf("pod %s: %s is not held by the node's ENIs in the simulator", p.Name, ip)
		case !strings.Contains(wide, ip):
			t.Errorf("kubectl get pods -o wide does not show %s", ip)
		}
		seen[ip] = p.Name
	}
}

// checkTraffic: each pod fetches from the next one (pod to pod through
// enid's datapath), and the node reaches each.
func (d *day) checkTraffic(t *testing.T, pods []corev1.Pod) {
	t.Helper()
	hc := d.c.HTTPClient()
	for i, p := range pods {
		next := pods[(i+1)%len(pods)]
		url := fmt.Sprintf("http://%s:8080/fetch?url=http://%s:8080/", p.Status.PodIP, next.Status.PodIP)
		body, err := get(hc, url)
		if err != nil {
			t.Errorf("%s -> %s: %v", p.Name, next.Name, err)
			continue
		}
		if !strings.HasPrefix(body, next.Name+" "+p.Status.PodIP+":") {
			t.Errorf("%s -> %s: answer %q, want %q from %s", p.Name, next.Name, body, next.Name, p.Status.PodIP)
		}
	}
}

// waitPoolSettled waits until the agent's pool has no used addresses and
// at most maxIdle idle ones, besides those held for sticky pods that may
// come back (released ones may cool down meanwhile).
func (d *day) waitPoolSettled(t *testing.T, maxIdle int, timeout time.Duration) {
	t.Helper()
	d.waitPool(t, "settled", timeout, func(p status.PoolSummary) bool {
		return p.Used == 0 && p.Total-p.Sticky <= maxIdle && p.Idle <= maxIdle
	})
}

func podServerDeployment(name string, replicas int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
  namespace: default
spec:
  replicas: %[2]d
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      terminationGracePeriodSeconds: 1
      dnsPolicy: Default
      containers:
        - name: server
          image: %[3]s
          imagePullPolicy: IfNotPresent
          ports: [{containerPort: 8080}]
`, name, replicas, cluster.PodServerImage)
}

func get(hc *http.Client, url string) (string, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, b)
	}
	return string(b), nil
}

func getJSON(t *testing.T, c *cluster.Cluster, v any, args ...string) {
	t.Helper()
	out := c.MustKubectl(args...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}
