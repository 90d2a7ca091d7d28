// Package cluster runs a real single-node Kubernetes cluster on this
// machine for the operator's-day tests (e2e/cluster): etcd,
// kube-apiserver, kube-scheduler, kube-controller-manager, containerd and
// the kubelet, all real binaries, with enid's simulator as the cloud.
//
// The node is a network namespace of its own (testbed/simnode with a
// datapath): the simulated VPC plugs each attached ENI into it, its eth0 is
// the instance's primary ENI with the instance's address (the kubelet's
// --node-ip), and every program of the cluster runs inside it, in a
// private mount namespace that covers /run, /var/lib, /var/log, /opt and
// (with an overlay) /etc, and, read-only, the six kernel sysctls the
// kubelet would otherwise rewrite. The simulator's ECS and metadata
// endpoints listen in the node namespace too, where the agent's pod (host
// network) reaches them through the config's cloud section, as a real node
// reaches its region's endpoints. The kubernetes Service address
// (10.0.0.1) is an address of the node's lo on which the API server
// listens at 443, so that in-cluster clients reach it without a
// kube-proxy. Pods' cgroups live under a parent of the cluster's own in
// every hierarchy.
//
// Nothing on the host changes: its routes, rules, iptables, sysctls,
// mounts and cgroups are as before once Close returns (HostState is what
// a test compares), and every process is stopped by PID. The binaries are
// built once per machine by kube/kubetest/build.sh into the same cache as
// the API-server tests' (`build.sh DIR all`, ~25 minutes the first time on
// 2 cores); without them, or without containerd, runc, nsenter and unshare,
// Start skips the test, except in CI (kube/kubetest.Required), where it
// fails. See docs/testing.md, "The real cluster".
package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/kube/kubetest"
	"github.com/enidnet/enid/testbed/simnode"
)

// Programs are the cache's binaries the cluster runs.
var Programs = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet", "kubectl"}

// ServiceIP is the kubernetes Service's address (the first of
// ServiceCIDR): an address of the node's lo where the API server listens.
const (
	ServiceCIDR = "10.0.0.0/24"
	ServiceIP   = "10.0.0.1"
	// ServiceCIDRv6 is the IPv6 Service range of a DualStack cluster.
	ServiceCIDRv6 = "fd00:10:96::/112"
)

// Options configure a cluster.
type Options struct {
	// Name tags the namespaces, the cgroup parent and the temp dir
	// (default "enidct").
	Name string
	// NodeName is the Node's name (default "enid-node-1").
	NodeName string
	// Sim configures the simulator; InstanceType the node's instance.
	Sim          ecssim.Config
	InstanceType string
	// VSwitchID is the vSwitch of the node's primary ENI (default: the
	// simulator's first).
	VSwitchID string
	// Images are docker-archive tarballs imported into containerd's k8s.io
	// namespace at start (the pause and podserver images always are).
	Images []string
	// Taints registers the nodes with these (kubelet --register-with-taints).
	Taints []string
	// Nodes is the number of nodes (default 1): instances of one VPC,
	// each in a namespace of its own, named NodeName, then enid-node-2, ...
	// (NodeName-2, ... when NodeName is set).
	Nodes int
	// KubeProxy runs kube-proxy (iptables mode) on every node, and the
	// API server publishes the kubernetes Service's endpoint (without it,
	// the first node answers the Service's address itself).
	KubeProxy bool
	// DNS gives the cluster DNS: CoreDNS's image imported on every node,
	// the kubelets' clusterDNS at DNSIP, and StartDNS to deploy it once a
	// CNI serves pods (testbed/clusterdns).
	DNS bool
	// MasqueradeAll makes kube-proxy masquerade all Service traffic
	// (its masqueradeAll), as exclusive-ENI nodes need.
	MasqueradeAll bool
	// DualStack makes a dual-stack cluster: every node's primary ENI has
	// an IPv6 address (its vSwitch needs an IPv6 CIDR) which the kubelet
	// reports beside the IPv4 one (--node-ip), and the API server gives
	// Services addresses of ServiceCIDRv6 too; kube-proxy then programs
	// both families.
	DualStack bool
	Logger    *slog.Logger
}

// Cluster is a running cluster of one or more nodes.
type Cluster struct {
	t testing.TB
	o Options
	// Sim is the cloud and the nodes' namespaces.
	Sim *simnode.Node
	// Dir holds everything the cluster writes; Root() is the node's view.
	Dir string
	// Nodes are the cluster's nodes; the first runs the control plane.
	Nodes []*Node
	// NodeName and NodeIP are the first Node's name and address.
	NodeName string
	NodeIP   netip.Addr
	// Kubeconfig is the admin's kubeconfig (valid in the nodes'
	// namespaces: use Kubectl, or RESTConfig from the host).
	Kubeconfig string

	bin        string
	adminToken string
	proxyToken string
	// dnsImageName is CoreDNS's image (Options.DNS).
	dnsImageName string
	closed       bool
}

// Node is one node of the cluster: a simulated instance whose namespace
// plays the node, with a mount namespace, cgroup parent, containerd and
// kubelet (and, with Options.KubeProxy, kube-proxy) of its own.
type Node struct {
	c *Cluster
	// Name and IP are the Node's name and address (its primary ENI's);
	// IPv6 its IPv6 address in a DualStack cluster (else invalid).
	Name string
	IP   netip.Addr
	IPv6 netip.Addr
	// Instance is the simulated instance; NS its network namespace.
	Instance ecssim.InstanceInfo
	NS       string

	dir    string // the node's files: the cluster's Dir for the first node
	cgroup string
	sock   string
	token  string
	holder *kubetest.Process
	procs  map[string]*kubetest.Process
}

// Start builds and starts the cluster for t and stops it, leaving nothing
// behind, when t ends. It takes a minute or so: the images, then the
// control plane, each node's containerd and kubelet (and kube-proxy), to
// registered Nodes (which stay NotReady until a CNI network list exists).
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	bin := need(t, o)
	if o.Name == "" {
		o.Name = "enidct"
	}
	if o.NodeName == "" {
		o.NodeName = "enid-node-1"
	}
	if o.Nodes < 1 {
		o.Nodes = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	// Short: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", o.Name+"-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, o: o, Dir: dir, NodeName: o.NodeName, bin: bin, adminToken: kubetest.Token(), proxyToken: kubetest.Token()}
	t.Cleanup(c.Close)
	sn, err := simnode.Start(simnode.Options{Sim: o.Sim, InstanceType: o.InstanceType, VSwitchID: o.VSwitchID, Datapath: true,
		ListenInVPC: true, PrimaryIPv6: o.DualStack, Name: o.Name, Logger: o.Logger})
	if err != nil {
		t.Fatalf("start the simulated node: %v", err)
	}
	c.Sim = sn
	c.NodeIP = sn.Instance.PrimaryIP
	c.Nodes = append(c.Nodes, c.newNode(o.NodeName, sn.Instance, sn.NodeNS(), dir, nodeCgroup(filepath.Base(dir), 1)))
	for i := 2; i <= o.Nodes; i++ {
		peer, err := sn.AddPeer(o.InstanceType, o.VSwitchID, o.DualStack)
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		name := fmt.Sprintf("enid-node-%d", i)
		if o.NodeName != "enid-node-1" {
			name = fmt.Sprintf("%s-%d", o.NodeName, i)
		}
		d := filepath.Join(dir, fmt.Sprintf("n%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, c.newNode(name, peer.Instance, peer.NS, d, nodeCgroup(filepath.Base(dir), i)))
	}
	if !o.KubeProxy {
		// No kube-proxy: the first node answers the kubernetes Service's
		// address itself, where the API server listens.
		if err := sn.Topology.AddNodeLoopback(netip.MustParseAddr(ServiceIP)); err != nil {
			t.Fatal(err)
		}
	}
	pods := c.buildPodImages()
	if o.DNS {
		pods = append(pods, c.dnsImage())
	}
	for _, n := range c.Nodes {
		n.startNode()
	}
	c.startControlPlane()
	for _, n := range c.Nodes {
		n.startContainerd()
		for _, img := range append(pods, o.Images...) {
			n.ImportImage(img)
		}
		n.StartKubelet()
		if o.KubeProxy {
			n.startKubeProxy()
		}
	}
	for _, n := range c.Nodes {
		n.waitNode(2 * time.Minute)
	}
	return c
}

func (c *Cluster) newNode(name string, inst ecssim.InstanceInfo, ns, dir, cgroup string) *Node {
	n := &Node{c: c, Name: name, IP: inst.PrimaryIP, Instance: inst, NS: ns, dir: dir, cgroup: cgroup,
		sock: filepath.Join(dir, "c.sock"), token: kubetest.Token(), procs: map[string]*kubetest.Process{}}
	if len(inst.PrimaryIPv6) > 0 {
		n.IPv6 = inst.PrimaryIPv6[0]
	}
	return n
}

// ServiceCIDRs are the cluster's Service ranges, the API server's
// --service-cluster-ip-range: ServiceCIDR, and ServiceCIDRv6 on a
// DualStack cluster.
func (c *Cluster) ServiceCIDRs() []string {
	if c.o.DualStack {
		return []string{ServiceCIDR, ServiceCIDRv6}
	}
	return []string{ServiceCIDR}
}

// first is the first node, where the control plane runs.
func (c *Cluster) first() *Node { return c.Nodes[0] }

// need returns the binaries' directory, or skips (fails in CI) t when a
// binary or tool is missing or t is not root.
func need(t testing.TB, o Options) string {
	t.Helper()
	var missing []string
	bin := kubetest.BinDir()
	programs := Programs
	if o.KubeProxy {
		programs = append(slices.Clone(programs), "kube-proxy")
	}
	if o.DNS {
		programs = append(slices.Clone(programs), "coredns")
	}
	for _, p := range programs {
		if bin == "" || !isExec(filepath.Join(bin, p)) {
			missing = append(missing, p+" (sh kube/kubetest/build.sh DIR all)")
		}
	}
	for _, tool := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter", "unshare", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if !isExec(hostLoopback) {
		missing = append(missing, hostLoopback+" (apt-get install containernetworking-plugins)")
	}
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	if len(missing) > 0 {
		msg := "the real cluster needs " + strings.Join(missing, ", ") + " (docs/testing.md, \"The real cluster\")"
		if kubetest.Required() {
			t.Fatal(msg + "; required here (CI=true or ENID_REQUIRE_KUBE=1)")
		}
		t.Skip("skipped: " + msg)
	}
	return bin
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// Root is the first node's view of a path of the host's (Node.Root).
func (c *Cluster) Root(path string) string { return c.first().Root(path) }

// Root is the node's view of a path of the host's: the files the node's
// programs see at path (/var/lib/kubelet, /run/enid, ...) are at
// Root(path) on the host, while the cluster runs.
func (n *Node) Root(path string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", n.holder.Pid()), path)
}

// Kubectl runs the cache's kubectl in the node namespace as the admin, as
// an operator on the node types it, and returns its combined output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	argv := append([]string{"--net=" + c.first().NS, "--", filepath.Join(c.bin, "kubectl"), "--kubeconfig", c.Kubeconfig}, args...)
	out, err := exec.CommandContext(ctx, "nsenter", argv...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// MustKubectl is Kubectl that fails the test on error (5-minute timeout:
// pass --timeout to waits).
func (c *Cluster) MustKubectl(args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := c.Kubectl(ctx, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// RESTConfig is the admin's client config, dialing into the node
// namespace from the host.
func (c *Cluster) RESTConfig() *rest.Config {
	return &rest.Config{Host: "https://" + c.NodeIP.String() + ":443", BearerToken: c.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAFile: c.caFile()},
		Dial:            nsDialer(c.first().NS), QPS: 100, Burst: 200}
}

// Client is the admin's clientset (RESTConfig).
func (c *Cluster) Client() kubernetes.Interface {
	c.t.Helper()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		c.t.Fatal(err)
	}
	return cs
}

// Pid is the process ID of a program of the first node, where the
// control plane runs too ("kubelet", "containerd", "kube-apiserver", ...;
// 0 if it never started).
func (c *Cluster) Pid(name string) int { return c.first().Pid(name) }

// Pid is the process ID of a program of the node (0 if not running).
func (n *Node) Pid(name string) int {
	if p := n.procs[name]; p != nil && !p.Exited() {
		return p.Pid()
	}
	return 0
}

// Logs returns the tail of a program's log on the first node.
func (c *Cluster) Logs(name string, lines int) string { return c.first().Logs(name, lines) }

// Logs returns the tail of a program's log on the node ("kubelet", ...).
func (n *Node) Logs(name string, lines int) string {
	p := n.procs[name]
	if p == nil {
		return name + " never started on " + n.Name
	}
	return kubetest.Tail(p.Log, lines)
}

// ImportImage imports a tarball into every node's containerd.
func (c *Cluster) ImportImage(tarball string) {
	c.t.Helper()
	for _, n := range c.Nodes {
		n.ImportImage(tarball)
	}
}

// RestartKubelet restarts the first node's kubelet (Node.RestartKubelet).
func (c *Cluster) RestartKubelet() {
	c.t.Helper()
	c.first().RestartKubelet()
}

// diagnose logs what a failed test needs: the pods and events, the
// agents' logs, and the tails of the kubelet's and containerd's.
func (c *Cluster) diagnose() {
	if c.Kubeconfig != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, args := range [][]string{{"get", "pods", "-A", "-o", "wide"}, {"get", "events", "-A", "--sort-by=.lastTimestamp"}} {
			out, _ := c.Kubectl(ctx, args...) // the error is in the output
			c.t.Logf("kubectl %s:\n%s", strings.Join(args, " "), lastLines(out, 60))
		}
	}
	for _, n := range c.Nodes {
		if n.holder == nil {
			continue
		}
		logs, _ := filepath.Glob(n.Root("/var/log/pods/enid-system_enid-*/enid/*.log")) // none is "none"
		for _, l := range logs {
			c.t.Logf("%s %s (tail):\n%s", n.Name, l, kubetest.Tail(l, 40))
		}
		for _, name := range []string{"kubelet", "containerd", "kube-proxy"} {
			if n.procs[name] != nil {
				c.t.Logf("%s %s (tail):\n%s", n.Name, name, n.Logs(name, 30))
			}
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Close stops everything in order and removes what the cluster made: the
// kubelet and the control plane's clients first (the API server exits in
// seconds once no one watches), every process left in the cluster's
// cgroups, containerd and its shims, the API server and etcd, the mount
// namespace, the cgroups, the namespaces, the files.
// It runs once (at the test's end if not before).
func (c *Cluster) Close() {
	if c.closed {
		return
	}
	c.closed = true
	if c.t.Failed() {
		c.diagnose()
	}
	for _, n := range c.Nodes {
		n.stop("kubelet")
		n.stop("kube-proxy")
	}
	if len(c.Nodes) > 0 {
		c.first().stop("kube-scheduler")
		c.first().stop("kube-controller-manager")
	}
	var errs []string
	for _, n := range c.Nodes {
		if err := killCgroups(n.cgroup); err != nil {
			errs = append(errs, err.Error())
		}
		n.stop("containerd")
		if err := killShims(n.sock); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(c.Nodes) > 0 {
		c.first().stop("kube-apiserver")
		c.first().stop("etcd")
	}
	for _, n := range c.Nodes {
		if n.holder != nil {
			n.holder.Stop(5 * time.Second)
		}
		if err := removeCgroups(n.cgroup); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if c.Sim != nil {
		if err := c.Sim.Close(); err != nil {
			errs = append(errs, "simulated node: "+err.Error())
		}
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		c.t.Errorf("cluster teardown: %s", strings.Join(errs, "; "))
	}
}

func (n *Node) stop(name string) {
	if p := n.procs[name]; p != nil {
		p.Stop(20 * time.Second)
	}
}
