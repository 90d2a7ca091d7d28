package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/reconcile/status"
	"github.com/enidnet/enid/testbed/cluster"
)

// earlierCommit is the commit of this repository whose image the upgrade
// step starts from and rolls back to: the last one before the
// real-cluster suite, with the same manifests' flags (install-cni,
// --cni-conf-dir).
const earlierCommit = "b51c537"

// agentSelector selects the DaemonSet's pods.
const agentSelector = "app.kubernetes.io/name=enid,app.kubernetes.io/component=agent"

// exhausted: with every address of the configured vSwitch taken by
// others, the pod beyond the pool's idle addresses waits and `kubectl
// describe pod` says why; adding a vSwitch to the ConfigMap with kubectl
// reaches the agent through the kubelet's volume update and the pod
// starts, with nothing restarted.
func (d *day) exhausted(t *testing.T) {
	c := d.c
	d.waitPoolSettled(t, 10, time.Minute)
	// The agent counts a release before its unassign returns, and an ENI
	// it no longer counts frees its addresses only once deleted: wait until
	// the simulator holds what the agent counts and every ENI the node owns
	// is attached to it, or an address freed after the vSwitch is occupied
	// would serve a pod.
	a := d.waitPool(t, "the simulator's", time.Minute, func(p status.PoolSummary) bool {
		return p.Cooldown == 0 && p.Used == 0 && d.secondaries() == p.Total && d.ownedAttached()
	})
	if _, err := c.Sim.Sim.OccupyVSwitch(vswMain, 0); err != nil {
		t.Fatal(err)
	}
	defer c.Sim.Sim.DefragmentVSwitch(vswMain) //nolint:errcheck // the vSwitch exists
	for _, v := range c.Sim.Sim.Dump().VSwitches {
		if v.ID == vswMain && v.AvailableIPs != 0 {
			t.Fatalf("%s still has %d free addresses", vswMain, v.AvailableIPs)
		}
	}
	// More pods than the node holds addresses for: at least one waits.
	n := a.Pool.Total - a.Pool.Used + 2
	t.Logf("pool %+v: %d pods", a.Pool, n)
	agent, kubelet, ctrd := d.agentPod(t), c.Pid("kubelet"), c.Pid("containerd")

	d.deploy(t, "wait", n)
	var waiting []string
	deadline := time.Now().Add(90 * time.Second)
	for len(waiting) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no pod of %d told the vSwitch is exhausted:\n%s", n, c.MustKubectl("get", "pods", "-l", "app=wait", "-o", "wide"))
		}
		time.Sleep(time.Second)
		if len(d.pods(t, "app=wait")) >= n {
			var enis []string
			for _, e := range c.Sim.Sim.Dump().ENIs {
				enis = append(enis, fmt.Sprintf("%s %s on %q in %s: %d secondaries", e.ID, e.Status, e.InstanceID, e.VSwitchID, len(e.IPv4)))
			}
			t.Fatalf("all %d pods started with %s exhausted; the simulator's ENIs:\n%s", n, vswMain, strings.Join(enis, "\n"))
		}
		for _, p := range d.allPods(t, "app=wait") {
			if p.Status.Phase != corev1.PodRunning && strings.Contains(c.MustKubectl("describe", "pod", p.Name), "exhausted") {
				waiting = append(waiting, p.Name)
			}
		}
	}
	t.Logf("kubectl describe pod %s:\n%s", waiting[0], lastLines(c.MustKubectl("describe", "pod", waiting[0]), 8))

	patch, err := json.Marshal(map[string]any{"data": map[string]string{"config.yaml": d.config(vswMain, vswExtra)}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.MustKubectl("-n", "enid-system", "patch", "configmap", "enid-config", "--type", "merge", "-p", string(patch))
	c.MustKubectl("rollout", "status", "deployment/wait", "--timeout=3m")
	t.Logf("the waiting pod started %s after the ConfigMap edit", time.Since(start).Round(100*time.Millisecond))
	for _, p := range d.pods(t, "app=wait") {
		if slices.Contains(waiting, p.Name) && !netip.MustParsePrefix("192.168.1.0/24").Contains(netip.MustParseAddr(p.Status.PodIP)) {
			t.Errorf("pod %s got %s, not an address of %s", p.Name, p.Status.PodIP, vswExtra)
		}
	}
	if now := d.agentPod(t); now.UID != agent.UID || restarts(now) != restarts(agent) {
		t.Errorf("the agent pod was replaced or restarted: %s/%d -> %s/%d", agent.UID, restarts(agent), now.UID, restarts(now))
	}
	if c.Pid("kubelet") != kubelet || c.Pid("containerd") != ctrd {
		t.Error("the kubelet or containerd was restarted")
	}
	c.MustKubectl("delete", "deployment", "wait")
	d.waitPods(t, "app=wait", 0, 2*time.Minute)
}

// secondaries counts the secondary addresses the node's ENIs hold in the
// simulator.
func (d *day) secondaries() int {
	n := 0
	for _, e := range d.c.Sim.Sim.Dump().ENIs {
		if e.InstanceID == d.c.Sim.Instance.ID {
			n += len(e.IPv4)
		}
	}
	return n
}

// ownedAttached reports whether every ENI the node owns (by enid's owner
// tag) is InUse on it: none is being detached or deleted.
func (d *day) ownedAttached() bool {
	for _, e := range d.c.Sim.Sim.Dump().ENIs {
		if e.Tags[observed.TagOwner] == d.c.Sim.Instance.ID && (e.Status != "InUse" || e.InstanceID != d.c.Sim.Instance.ID) {
			return false
		}
	}
	return true
}

// statefulSet: a StatefulSet pod deleted and recreated (same name, new
// UID) keeps its address (stickyStatefulSets, on by default).
func (d *day) statefulSet(t *testing.T) {
	c := d.c
	write(t, filepath.Join(d.dir, "db.yaml"), fmt.Sprintf(`apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: default
spec:
  serviceName: db
  replicas: 1
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      terminationGracePeriodSeconds: 1
      dnsPolicy: Default
      containers:
        - name: server
          image: %s
          imagePullPolicy: IfNotPresent
`, cluster.PodServerImage))
	c.MustKubectl("apply", "-f", filepath.Join(d.dir, "db.yaml"))
	c.MustKubectl("rollout", "status", "statefulset/db", "--timeout=2m")
	before := d.pods(t, "app=db")
	if len(before) != 1 {
		t.Fatalf("%d db pods running, want 1", len(before))
	}
	c.MustKubectl("delete", "pod", "db-0")
	var after []corev1.Pod
	deadline := time.Now().Add(2 * time.Minute)
	for len(after) != 1 || after[0].UID == before[0].UID {
		if time.Now().After(deadline) {
			t.Fatal("db-0 was not recreated in 2m")
		}
		time.Sleep(500 * time.Millisecond)
		after = d.pods(t, "app=db")
	}
	if after[0].Status.PodIP != before[0].Status.PodIP {
		t.Errorf("db-0 came back with %s, had %s", after[0].Status.PodIP, before[0].Status.PodIP)
	}
}

// restarts: the agent pod deleted (the DaemonSet recreates it), then the
// kubelet restarted: running pods keep their addresses and traffic, and
// new pods start afterwards.
func (d *day) restarts(t *testing.T) {
	c := d.c
	d.deploy(t, "keep", 3)
	c.MustKubectl("rollout", "status", "deployment/keep", "--timeout=2m")
	before := d.pods(t, "app=keep")
	old := d.agentPod(t)
	c.MustKubectl("-n", "enid-system", "delete", "pod", old.Name)
	d.waitAgent(t, func(p corev1.Pod) bool { return p.UID != old.UID })
	d.checkKept(t, before)
	d.scale(t, "keep", 4)

	before = d.pods(t, "app=keep")
	c.RestartKubelet()
	c.MustKubectl("wait", "--for=condition=Ready", "node/"+c.NodeName, "--timeout=2m")
	d.checkKept(t, before)
	d.scale(t, "keep", 5)
}

// upgrade: the DaemonSet moved from an earlier commit's image to this
// commit's (upgrade) and back (kubectl rollout undo), with pods running
// and a pod created during each rollout: none loses its address or
// traffic, and the new ones start.
func (d *day) upgrade(t *testing.T) {
	c := d.c
	tarball, earlier := cluster.EnidImage(t, cluster.Checkout(t, d.root, earlierCommit, d.dir), earlierCommit, d.dir)
	c.ImportImage(tarball)
	replicas := len(d.pods(t, "app=keep"))
	move := func(how string, args ...string) {
		t.Helper()
		before := d.pods(t, "app=keep")
		c.MustKubectl(append([]string{"-n", "enid-system"}, args...)...)
		replicas++
		// Created while the agent is replaced: its ADD waits for the new one.
		c.MustKubectl("scale", "deployment/keep", fmt.Sprintf("--replicas=%d", replicas))
		c.MustKubectl("-n", "enid-system", "rollout", "status", "daemonset/enid", "--timeout=3m")
		c.MustKubectl("rollout", "status", "deployment/keep", "--timeout=3m")
		d.waitAgent(t, func(corev1.Pod) bool { return true })
		t.Logf("%s: agent image %s", how, d.agentPod(t).Spec.Containers[0].Image)
		d.checkKept(t, before)
	}
	setImage := func(img string) []string {
		return []string{"set", "image", "daemonset/enid", "install-cni=" + img, "enid=" + img}
	}
	move("to the earlier commit", setImage(earlier)...)
	move("upgrade", setImage(d.image)...)
	if img := d.agentPod(t).Spec.Containers[0].Image; img != d.image {
		t.Errorf("after the upgrade the agent runs %s, want %s", img, d.image)
	}
	move("rollback", "rollout", "undo", "daemonset/enid")
	if img := d.agentPod(t).Spec.Containers[0].Image; img != earlier {
		t.Errorf("after the rollback the agent runs %s, want %s", img, earlier)
	}
	move("upgrade again", setImage(d.image)...)
}

// hints: the kubelet's own checkpoint files, as this kubelet wrote them:
// allocated_pods_state and actuated_pods_state exist, list deleted pods
// until the next admission, and the device-manager checkpoint does not
// exist without a device plugin. Deleting pods does not grow the pool.
func (d *day) hints(t *testing.T) {
	c := d.c
	for _, f := range []string{"allocated_pods_state", "actuated_pods_state"} {
		if _, err := os.Stat(c.Root("/var/lib/kubelet/" + f)); err != nil {
			t.Errorf("the kubelet wrote no %s: %v", f, err)
		}
	}
	if _, err := os.Stat(c.Root("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")); err == nil {
		t.Error("a device-manager checkpoint exists with no device plugin registered")
	}
	pods := d.pods(t, "app=keep")
	total := d.waitPool(t, "settled", time.Minute, func(status.PoolSummary) bool { return true }).Pool.Total
	c.MustKubectl("scale", "deployment/keep", "--replicas=2")
	d.waitPods(t, "app=keep", 2, 2*time.Minute)
	var gone []string
	kept := map[string]bool{}
	for _, p := range d.allPods(t, "app=keep") {
		kept[string(p.UID)] = true
	}
	for _, p := range pods {
		if !kept[string(p.UID)] {
			gone = append(gone, string(p.UID))
		}
	}
	state, err := os.ReadFile(c.Root("/var/lib/kubelet/allocated_pods_state"))
	if err != nil {
		t.Fatal(err)
	}
	listed := 0
	for _, uid := range gone {
		if strings.Contains(string(state), uid) {
			listed++
		}
	}
	t.Logf("allocated_pods_state lists %d of the %d deleted pods until the next admission", listed, len(gone))
	if listed != len(gone) {
		t.Errorf("allocated_pods_state lists %d of the %d deleted pods: the kubelet rewrote it before the next admission (the hint tests model the opposite)", listed, len(gone))
	}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		a, err := status.ReadAgent(c.Root("/run/enid/agent.json"))
		if err == nil && a.Pool.Total > total {
			t.Fatalf("the pool grew from %d to %d after pods were deleted (the kubelet's stale hints counted as demand?)", total, a.Pool.Total)
		}
	}
	d.scale(t, "keep", 3) // an admission: the kubelet rewrites its files
	state, err = os.ReadFile(c.Root("/var/lib/kubelet/allocated_pods_state"))
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range gone {
		if strings.Contains(string(state), uid) {
			t.Errorf("allocated_pods_state still lists deleted pod %s after the next admission", uid)
		}
	}
}

// drain: kubectl drain evicts the pods (the DaemonSet's stays), the pool
// settles within its bounds, holding the StatefulSet pod's address for
// it; uncordoned, the pods come back, db-0 with its address.
func (d *day) drain(t *testing.T) {
	c := d.c
	db := d.pods(t, "app=db")
	if len(db) != 1 {
		t.Fatalf("%d db pods before the drain, want 1", len(db))
	}
	c.MustKubectl("drain", c.NodeName, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=3m")
	for _, sel := range []string{"app=keep", "app=db"} {
		if n := len(d.pods(t, sel)); n != 0 {
			t.Errorf("%d pods %s still running after the drain", n, sel)
		}
	}
	d.waitPoolSettled(t, 10, 2*time.Minute)
	if a, err := status.ReadAgent(c.Root("/run/enid/agent.json")); err != nil || a.Pool.Sticky != 1 {
		t.Errorf("pool after the drain %+v (err %v): want db-0's address held (sticky 1)", a.Pool, err)
	}
	if err := c.Sim.Sim.Check(); err != nil {
		t.Errorf("the simulator's invariants: %v", err)
	}
	c.MustKubectl("uncordon", c.NodeName)
	c.MustKubectl("rollout", "status", "deployment/keep", "--timeout=3m")
	c.MustKubectl("rollout", "status", "statefulset/db", "--timeout=3m")
	if now := d.pods(t, "app=db"); len(now) != 1 || now[0].Status.PodIP != db[0].Status.PodIP {
		t.Errorf("db-0 after the drain: %v, want one pod at %s", podIPs(now), db[0].Status.PodIP)
	}
	c.MustKubectl("delete", "deployment", "keep")
	c.MustKubectl("delete", "statefulset", "db")
	d.waitPods(t, "app=keep", 0, 2*time.Minute)
	d.waitPods(t, "app=db", 0, 2*time.Minute)
}

// startup measures pod create to Running for 30 pods created at once,
// with enid and then with the bridge plugin (host-local addresses) on the
// same node, and logs p50/p99 (docs/benchmarks.md, "Pods on a real
// node"); the Kubernetes pod-startup SLO (p99 <= 5 s) is the reference.
// It asserts only that each plugin served every pod.
func (d *day) startup(t *testing.T) {
	c := d.c
	enid := d.measure(t, "su-enid", 30)
	bridge := filepath.Join(c.Root("/etc/cni/net.d"), "05-bridge.conflist")
	write(t, bridge, `{"cniVersion": "1.0.0", "name": "bridge", "plugins": [{"type": "bridge", "bridge": "cni0",
  "isGateway": true, "ipMasq": false, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]]}}]}`)
	defer os.Remove(bridge)
	time.Sleep(3 * time.Second) // containerd reloads its conf dir on change
	br := d.measure(t, "su-bridge", 30)
	figures := map[string]map[string]float64{"enid": quantiles(enid), "bridge": quantiles(br)}
	for _, name := range []string{"enid", "bridge"} {
		q := figures[name]
		t.Logf("pod create to Running, 30 at once, %s: p50 %.2fs p99 %.2fs max %.2fs", name, q["p50"], q["p99"], q["max"])
	}
	if out := os.Getenv("ENID_CLUSTER_FIGURES"); out != "" {
		b, _ := json.MarshalIndent(figures, "", "  ") // plain maps of floats
		write(t, out, string(b)+"\n")
	}
}

// measure creates a Deployment of n pods and returns, per pod, the time
// from its creation being seen to its being seen Running; the pods are
// deleted after.
func (d *day) measure(t *testing.T, name string, n int) []time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := d.c.Client()
	w, err := cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	d.deploy(t, name, n)
	created, running := map[string]time.Time{}, map[string]time.Duration{}
	var ips []string
	for len(running) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("%s: the watch ended with %d of %d running", name, len(running), n)
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod || ev.Type == watch.Deleted {
				continue
			}
			if _, seen := created[p.Name]; !seen {
				created[p.Name] = time.Now()
			}
			if _, done := running[p.Name]; !done && p.Status.Phase == corev1.PodRunning {
				running[p.Name] = time.Since(created[p.Name])
				ips = append(ips, p.Status.PodIP)
			}
		case <-ctx.Done():
			t.Fatalf("%s: %d of %d pods running after 3m", name, len(running), n)
		}
	}
	if name == "su-bridge" && !slices.ContainsFunc(ips, func(ip string) bool { return strings.HasPrefix(ip, "10.88.") }) {
		t.Errorf("the bridge plugin served none of %s: %v", name, ips)
	}
	d.c.MustKubectl("delete", "deployment", name)
	d.waitPods(t, "app="+name, 0, 2*time.Minute)
	var ds []time.Duration
	for _, v := range running {
		ds = append(ds, v)
	}
	return ds
}

// quantiles returns p50, p99 and max in seconds (nearest rank).
func quantiles(ds []time.Duration) map[string]float64 {
	slices.Sort(ds)
	at := func(q float64) float64 {
		i := min(len(ds)-1, max(0, int(q*float64(len(ds))+0.5)-1))
		return ds[i].Seconds()
	}
	return map[string]float64{"p50": at(0.5), "p99": at(0.99), "max": ds[len(ds)-1].Seconds()}
}

// deploy applies a Deployment of podserver pods.
func (d *day) deploy(t *testing.T, name string, replicas int) {
	t.Helper()
	p := filepath.Join(d.dir, name+".yaml")
	write(t, p, podServerDeployment(name, replicas))
	d.c.MustKubectl("apply", "-f", p)
}

// scale scales a Deployment and checks every pod runs and reaches the
// others.
func (d *day) scale(t *testing.T, name string, replicas int) {
	t.Helper()
	d.c.MustKubectl("scale", "deployment/"+name, fmt.Sprintf("--replicas=%d", replicas))
	d.c.MustKubectl("rollout", "status", "deployment/"+name, "--timeout=3m")
	pods := d.pods(t, "app="+name)
	if len(pods) != replicas {
		t.Fatalf("%d pods of %s running, want %d", len(pods), name, replicas)
	}
	d.checkTraffic(t, pods)
}

// checkKept: the pods running before still run, with the same addresses,
// and reach each other.
func (d *day) checkKept(t *testing.T, before []corev1.Pod) {
	t.Helper()
	now := map[string]corev1.Pod{}
	for _, p := range d.pods(t, "app="+before[0].Labels["app"]) {
		now[p.Name] = p
	}
	var kept []corev1.Pod
	for _, p := range before {
		q, ok := now[p.Name]
		switch {
		case !ok:
			t.Errorf("pod %s no longer runs", p.Name)
		case q.UID != p.UID || q.Status.PodIP != p.Status.PodIP:
			t.Errorf("pod %s: %s/%s, was %s/%s", p.Name, q.UID, q.Status.PodIP, p.UID, p.Status.PodIP)
		default:
			kept = append(kept, q)
		}
	}
	if len(kept) > 1 {
		d.checkTraffic(t, kept)
	}
}

// agentPod returns the DaemonSet's one pod.
func (d *day) agentPod(t *testing.T) corev1.Pod {
	t.Helper()
	var list corev1.PodList
	getJSON(t, d.c, &list, "-n", "enid-system", "get", "pods", "-l", agentSelector, "-o", "json")
	var live []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	if len(live) != 1 {
		t.Fatalf("%d agent pods, want 1", len(live))
	}
	return live[0]
}

// waitAgent waits for exactly one agent pod, Ready, that ok accepts.
func (d *day) waitAgent(t *testing.T, ok func(corev1.Pod) bool) {
	t.Helper()
	cs := d.c.Client()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		l, err := cs.CoreV1().Pods("enid-system").List(context.Background(), metav1.ListOptions{LabelSelector: agentSelector})
		if err == nil && len(l.Items) == 1 && ok(l.Items[0]) && ready(l.Items[0]) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new ready agent pod after 2m:\n%s", d.c.MustKubectl("-n", "enid-system", "get", "pods", "-o", "wide"))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// waitPool waits up to timeout for the agent's pool to satisfy ok.
func (d *day) waitPool(t *testing.T, what string, timeout time.Duration, ok func(status.PoolSummary) bool) status.Agent {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		a, err := status.ReadAgent(d.c.Root("/run/enid/agent.json"))
		if err == nil && ok(a.Pool) {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool not %s after %s: %+v (err %v)", what, timeout, a.Pool, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// allPods lists the pods with a label selector, in any phase.
func (d *day) allPods(t *testing.T, selector string) []corev1.Pod {
	t.Helper()
	l, err := d.c.Client().CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func podIPs(pods []corev1.Pod) []string {
	var ips []string
	for _, p := range pods {
		ips = append(ips, p.Name+"="+p.Status.PodIP)
	}
	return ips
}

func ready(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func restarts(p corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
