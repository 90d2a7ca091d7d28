package cluster_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/testbed/cluster"
)

// net2 is the two-node cluster with kube-proxy and what its tests share.
type net2 struct {
	*day
}

// TestTwoNodes is enid on two nodes of one VPC with kube-proxy (iptables
// mode) on each, installed as the operator's day installs it, then the
// connectivity matrix: every way a packet reaches a pod on a Kubernetes
// node (pod, host network, the VPC; directly, through a ClusterIP, a
// NodePort, back to itself), on the same node and across nodes, in IPv4
// and IPv6 (the cluster is dual stack: nodes, pods and Services have an
// address of each family), each a subtest that fails on its own.
func TestTwoNodes(t *testing.T) {
	n, done := startTwoNodesWith(t, nil, cluster.Options{DualStack: true})
	if !t.Run("apply", n.apply) {
		return
	}
	if !t.Run("workload", n.workload) {
		return
	}
	if !t.Run("secondary", n.matrix) {
		return
	}
	if !t.Run("switch-to-prefix", n.switchToPrefix) {
		return
	}
	t.Run("prefix", n.matrix)
	done()
}

// switchToPrefix edits the ConfigMap to eni.ipv4Allocation: prefix (the
// agents switch in place) and makes the workload's pods again: each gets
// an address inside a /28 prefix of its node's ENIs.
func (n *net2) switchToPrefix(t *testing.T) {
	c := n.c
	n.alloc = "prefix"
	patch, err := json.Marshal(map[string]any{"data": map[string]string{"config.yaml": n.config(vswMain)}})
	if err != nil {
		t.Fatal(err)
	}
	c.MustKubectl("-n", "enid-system", "patch", "configmap", "enid-config", "--type", "merge", "-p", string(patch))
	// The edit reaches each agent at its kubelet's next pod sync (about
	// 10 s): wait until both nodes hold a prefix.
	deadline := time.Now().Add(2 * time.Minute)
	for !n.prefixOnEveryNode() {
		if time.Now().After(deadline) {
			t.Fatal("no /28 prefix on every node 2 minutes after the ConfigMap edit")
		}
		time.Sleep(time.Second)
	}
	c.MustKubectl("delete", "pod", "a1", "a2", "client", "b", "--wait=true", "--timeout=2m")
	c.MustKubectl("apply", "-f", filepath.Join(n.dir, "matrix.yaml"))
	c.MustKubectl("wait", "--for=condition=Ready", "pod/a1", "pod/a2", "pod/client", "pod/b", "--timeout=3m")
	for _, name := range []string{"a1", "a2", "client", "b"} {
		var p corev1.Pod
		getJSON(t, c, &p, "get", "pod", name, "-o", "json")
		if !n.inPrefix(netip.MustParseAddr(p.Status.PodIP)) {
			t.Errorf("pod %s got %s, not an address of a /28 prefix", name, p.Status.PodIP)
		}
	}
}

// prefixOnEveryNode: every node's instance has an ENI holding a prefix.
func (n *net2) prefixOnEveryNode() bool {
	has := map[string]bool{}
	for _, e := range n.c.Sim.Sim.Dump().ENIs {
		if len(e.IPv4Prefixes) > 0 {
			has[e.InstanceID] = true
		}
	}
	for _, node := range n.c.Nodes {
		if !has[node.Instance.ID] {
			return false
		}
	}
	return true
}

// inPrefix: the address is inside a prefix an ENI holds.
func (n *net2) inPrefix(a netip.Addr) bool {
	for _, e := range n.c.Sim.Sim.Dump().ENIs {
		for _, p := range e.IPv4Prefixes {
			if p.Contains(a) {
				return true
			}
		}
	}
	return false
}

// TestTwoNodesExclusive is the matrix in exclusive-ENI mode: every pod
// owns an ENI, and reaches Services and its node through its service
// veth (serviceCIDRs). kube-proxy masquerades all Service traffic
// (masqueradeAll), which exclusive mode needs: a backend's default route
// is its own ENI, so an unmasqueraded reply would skip the node's
// conntrack (docs/config.md, "Services in exclusive mode").
func TestTwoNodesExclusive(t *testing.T) {
	n, done := startTwoNodesWith(t, nil, cluster.Options{InstanceType: "ecs.g7.4xlarge", MasqueradeAll: true, DualStack: true})
	n.exclusive = true
	if !t.Run("apply", n.apply) {
		return
	}
	if !t.Run("workload", n.workload) {
		return
	}
	if !t.Run("exclusive", n.matrix) {
		return
	}
	done()
}

// startTwoNodes starts the two-node cluster with kube-proxy and enid's
// image (and images, imported on both nodes); done closes it and checks
// the host is as before and no process is left.
func startTwoNodes(t *testing.T, images []string) (n *net2, done func()) {
	return startTwoNodesWith(t, images, cluster.Options{})
}

// startTwoNodesWith is startTwoNodes with o's InstanceType,
// MasqueradeAll, DNS and DualStack (which gives the vSwitches IPv6 CIDRs).
func startTwoNodesWith(t *testing.T, images []string, o cluster.Options) (n *net2, done func()) {
	before := cluster.Host()
	d := &day{t: t, dir: t.TempDir()}
	d.root = cluster.ModuleRoot(t)
	tarball, image := cluster.EnidImage(t, d.root, "", d.dir)
	d.image = image
	vsws := []ecssim.VSwitchConfig{
		{ID: vswMain, Zone: zone, CIDR: netip.MustParsePrefix("192.168.0.0/24")},
		{ID: vswExtra, Zone: zone, CIDR: netip.MustParsePrefix("192.168.1.0/24")},
	}
	if o.DualStack {
		d.ipStack = "dual"
		vsws[0].IPv6CIDR = netip.MustParsePrefix("2408:4005:300::/64")
		vsws[1].IPv6CIDR = netip.MustParsePrefix("2408:4005:300:1::/64")
	}
	d.c = cluster.Start(t, cluster.Options{Nodes: 2, KubeProxy: true, Images: append([]string{tarball}, images...),
		InstanceType: o.InstanceType, MasqueradeAll: o.MasqueradeAll, DNS: o.DNS, DualStack: o.DualStack,
		Taints: []string{startupTaint}, VSwitchID: vswMain, Sim: ecssim.Config{VSwitches: vsws}})
	return &net2{day: d}, func() {
		dir := d.c.Dir
		d.c.Close()
		if diff := before.Diff(cluster.Host()); len(diff) > 0 {
			t.Errorf("the cluster changed the host:\n%s", strings.Join(diff, "\n"))
		}
		if left := cluster.Leftovers(dir); len(left) > 0 {
			t.Errorf("processes left behind:\n%s", strings.Join(left, "\n"))
		}
	}
}

// apply installs enid with kubectl apply -k: one agent per node, both
// nodes Ready without the startup taint.
func (n *net2) apply(t *testing.T) {
	c := n.c
	c.MustKubectl("apply", "-k", n.overlay())
	c.MustKubectl("-n", "enid-system", "rollout", "status", "daemonset/enid", "--timeout=3m")
	for _, node := range c.Nodes {
		c.MustKubectl("wait", "--for=condition=Ready", "node/"+node.Name, "--timeout=2m")
	}
	agents := n.allPodsIn(t, "enid-system", "app.kubernetes.io/name=enid")
	if len(agents) != len(c.Nodes) {
		t.Fatalf("%d agent pods, want one per node (%d)", len(agents), len(c.Nodes))
	}
}

// The matrix's workload: servers a1, a2 and the client on the first
// node, b on the second, a host-network server h on the second; Services
// over a (ClusterIP and NodePort), b (the same) and the client itself.
const (
	hostPort = 18080
	npA      = 30080
	npB      = 30081
)

func (n *net2) workload(t *testing.T) {
	c := n.c
	first, second := c.Nodes[0].Name, c.Nodes[1].Name
	var b strings.Builder
	for _, p := range []struct {
		name, node, app string
		host            bool
	}{{"a1", first, "a", false}, {"a2", first, "a2", false}, {"client", first, "client", false},
		{"b", second, "b", false}, {"h", second, "h", true}} {
		b.WriteString(serverPod(p.name, p.node, p.app, p.host))
	}
	for _, s := range []struct {
		name, app string
		nodePort  int
	}{{"svc-a", "a", npA}, {"svc-b", "b", npB}, {"svc-self", "client", 0}} {
		b.WriteString(service(s.name, s.app, s.nodePort))
	}
	write(t, filepath.Join(n.dir, "matrix.yaml"), b.String())
	c.MustKubectl("apply", "-f", filepath.Join(n.dir, "matrix.yaml"))
	c.MustKubectl("wait", "--for=condition=Ready", "pod/a1", "pod/a2", "pod/client", "pod/b", "pod/h", "--timeout=3m")
	// kube-proxy has programmed a Service once its endpoints exist on
	// every node: wait for the endpoints, then for the rules to answer.
	for _, s := range []string{"svc-a", "svc-b", "svc-self"} {
		c.MustKubectl("wait", "--for=jsonpath={.subsets[0].addresses[0].ip}", "endpoints/"+s, "--timeout=1m")
	}
}

func serverPod(name, node, app string, host bool) string {
	args, extra := "", ""
	if host {
		args = fmt.Sprintf("\n      args: [\":%d\"]", hostPort)
		extra = "  hostNetwork: true\n"
	}
	return fmt.Sprintf(`---
apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  namespace: default
  labels: {app: %[3]s}
spec:
  nodeName: %[2]s
  terminationGracePeriodSeconds: 1
  dnsPolicy: Default
%[6]s  containers:
    - name: server
      image: %[4]s
      imagePullPolicy: IfNotPresent
      ports: [{containerPort: 8080}]%[5]s
`, name, node, app, cluster.PodServerImage, args, extra)
}

func service(name, app string, nodePort int) string {
	typ, np := "ClusterIP", ""
	if nodePort != 0 {
		typ, np = "NodePort", fmt.Sprintf(", nodePort: %d", nodePort)
	}
	return fmt.Sprintf(`---
apiVersion: v1
kind: Service
metadata:
  name: %[1]s
  namespace: default
spec:
  type: %[3]s
  ipFamilyPolicy: PreferDualStack
  selector: {app: %[2]s}
  ports: [{port: 80, targetPort: 8080%[4]s}]
`, name, app, typ, np)
}

// cell is one path of the matrix: a client fetches a URL and must reach
// the named pod.
type cell struct {
	name string
	// from fetches url and returns what the server answered.
	from func(url string) (string, error)
	url  string
	want string
}

func (n *net2) matrix(t *testing.T) {
	c := n.c
	pods := map[string]corev1.Pod{}
	for _, name := range []string{"a1", "b", "client"} {
		var p corev1.Pod
		getJSON(t, c, &p, "get", "pod", name, "-o", "json")
		pods[name] = p
	}
	svcs := map[string]corev1.Service{}
	for _, name := range []string{"svc-a", "svc-b", "svc-self"} {
		var s corev1.Service
		getJSON(t, c, &s, "get", "service", name, "-o", "json")
		svcs[name] = s
	}
	// A host-network pod shares the machine's UTS namespace (the nodes
	// are network namespaces, not machines): it answers with its name.
	hostName, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	families := []string{"ipv4"}
	// On a dual-stack cluster (its vSwitches, pods and Services have IPv6
	// beside IPv4) the matrix runs in both families.
	if n.ipStack == "dual" {
		families = append(families, "ipv6")
	}
	for _, fam := range families {
		is6 := fam == "ipv6"
		// of picks the address of this family among a pod's or Service's.
		of := func(what string, addrs []string) string {
			for _, a := range addrs {
				if ip, err := netip.ParseAddr(a); err == nil && ip.Is6() == is6 {
					return a
				}
			}
			var enis []string
			for _, e := range c.Sim.Sim.Dump().ENIs {
				enis = append(enis, fmt.Sprintf("%s %s IPv4 %v IPv6 %v", e.ID, e.InstanceID, e.IPv4, e.IPv6))
			}
			t.Fatalf("%s has no %s address among %v; the ENIs:\n%s", what, fam, addrs, strings.Join(enis, "\n"))
			return ""
		}
		podIP := func(name string) string {
			var addrs []string
			for _, a := range pods[name].Status.PodIPs {
				addrs = append(addrs, a.IP)
			}
			return of("pod "+name, addrs)
		}
		clusterIP := func(name string) string { return of("service "+name, svcs[name].Spec.ClusterIPs) }
		nodeIP := func(i int) string {
			if is6 {
				return c.Nodes[i].IPv6.String()
			}
			return c.Nodes[i].IP.String()
		}
		a1, b, client := podIP("a1"), podIP("b"), podIP("client")
		svcA, svcB, svcSelf := clusterIP("svc-a"), clusterIP("svc-b"), clusterIP("svc-self")
		node1, node2 := nodeIP(0), nodeIP(1)
		fromPod := func(target string) (string, error) {
			return get(c.HTTPClient(), "http://"+net.JoinHostPort(client, "8080")+"/fetch?url="+url.QueryEscape(target))
		}
		fromHost1 := func(url string) (string, error) { return get(c.Nodes[0].HTTPClient(), url) }
		fromHost2 := func(url string) (string, error) { return get(c.Nodes[1].HTTPClient(), url) }
		fromVPC := func(url string) (string, error) { return get(c.VPCHTTPClient(), url) }
		u := func(host string, port int) string { return "http://" + net.JoinHostPort(host, fmt.Sprint(port)) + "/" }
		cells := []cell{
			{"pod/pod/same-node", fromPod, u(a1, 8080), "a1"},
			{"pod/pod/other-node", fromPod, u(b, 8080), "b"},
			{"pod/host-network/other-node", fromPod, u(node2, hostPort), hostName},
			{"pod/clusterip/same-node", fromPod, u(svcA, 80), "a1"},
			{"pod/clusterip/other-node", fromPod, u(svcB, 80), "b"},
			{"pod/clusterip/hairpin", fromPod, u(svcSelf, 80), "client"},
			{"pod/nodeport/own-node-other-backend", fromPod, u(node1, npB), "b"},
			{"pod/nodeport/other-node", fromPod, u(node2, npA), "a1"},
			{"host/pod/same-node", fromHost1, u(a1, 8080), "a1"},
			{"host/pod/other-node", fromHost1, u(b, 8080), "b"},
			{"host/clusterip/same-node", fromHost1, u(svcA, 80), "a1"},
			{"host/clusterip/other-node", fromHost1, u(svcB, 80), "b"},
			{"host2/clusterip/other-node", fromHost2, u(svcA, 80), "a1"},
			{"vpc/pod", fromVPC, u(b, 8080), "b"},
			{"vpc/nodeport/local-backend", fromVPC, u(node1, npA), "a1"},
			{"vpc/nodeport/remote-backend", fromVPC, u(node1, npB), "b"},
			{"vpc/nodeport/second-node-local", fromVPC, u(node2, npB), "b"},
		}
		for _, cl := range cells {
			t.Run(fam+"/"+cl.name, func(t *testing.T) { cl.check(t) })
		}
	}
}

// check fetches the cell's URL until the named pod answers, for up to 30 s.
func (cl cell) check(t *testing.T) {
	// kube-proxy programs a Service within a second or so of its
	// endpoints; the first tries may come before.
	var last error
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		got, err := cl.from(cl.url)
		if err == nil && strings.HasPrefix(got, cl.want+" ") {
			return
		}
		if err == nil {
			err = fmt.Errorf("answered by %q, want %s", strings.TrimSpace(got), cl.want)
		}
		last = err
		time.Sleep(500 * time.Millisecond)
	}
	t.Errorf("%s: %v", cl.url, last)
}

// allPodsIn lists the pods of a namespace with a label selector.
func (n *net2) allPodsIn(t *testing.T, ns, selector string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	getJSON(t, n.c, &list, "-n", ns, "get", "pods", "-l", selector, "-o", "json")
	return list.Items
}
