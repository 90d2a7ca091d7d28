package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enidnet/enid/kube/kubetest"
)

// hostLoopback is Debian's loopback plugin: containerd's CRI runs it for
// every sandbox, from the node's CNI bin dir, where the cluster copies
// Debian's plugins as a node image carries them.
const (
	hostPlugins  = "/usr/lib/cni"
	hostLoopback = hostPlugins + "/loopback"
)

// kubeletSysctls are the kernel tunables the kubelet sets at start
// (pkg/kubelet/cm, setupKernelTunables) with the values it wants. They
// are not namespaced: the node's mount namespace covers each with a
// read-only file that already holds the value, so the kubelet finds
// nothing to change and the host keeps its own.
var kubeletSysctls = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// node returns a path under the cluster's dir that backs part of the
// node's filesystem.
func (c *Cluster) node(parts ...string) string {
	return filepath.Join(append([]string{c.Dir, "node"}, parts...)...)
}

// startNode makes the node: the service address on its lo, the mount
// namespace (a "sleep" that holds it, entered by every program), the
// directories it covers, and the cgroup parent.
func (c *Cluster) startNode() {
	c.t.Helper()
	if err := c.Sim.Topology.AddNodeLoopback(netip.MustParseAddr(ServiceIP)); err != nil {
		c.t.Fatal(err)
	}
	for _, d := range []string{"var/lib/kubelet", "var/lib/cni", "var/lib/enid", "var/log", "opt/cni/bin", "etc/upper", "etc/work", "sysctl", "logs"} {
		if err := os.MkdirAll(c.node(d), 0o755); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := copyPlugins(hostPlugins, c.node("opt/cni/bin")); err != nil {
		c.t.Fatal(err)
	}
	c.holder = kubetest.StartProcess(c.t, c.node("logs"), "node", "nsenter", "--net="+c.Sim.NodeNS(), "--",
		"unshare", "--mount", "--propagation", "private", "--", "sleep", "infinity")
	c.waitHolder()
	if out, err := exec.Command("nsenter", "-t", strconv.Itoa(c.holder.Pid()), "-m", "--", "sh", "-ec", c.mountScript()).CombinedOutput(); err != nil {
		c.t.Fatalf("the node's mounts: %v\n%s", err, out)
	}
	if err := makeCgroups(c.cgroup); err != nil {
		c.t.Fatal(err)
	}
}

// waitHolder waits until the holder runs in a mount namespace of its own.
func (c *Cluster) waitHolder() {
	c.t.Helper()
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c.holder.Pid()))
		mnt, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", c.holder.Pid()))
		if strings.TrimSpace(string(comm)) == "sleep" && mnt != "" && mnt != self {
			return
		}
		if c.holder.Exited() {
			c.t.Fatalf("the node's mount namespace did not start:\n%s", kubetest.Tail(c.holder.Log, 10))
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatal("the node's mount namespace did not start in 10s")
}

// mountScript is what the node's mount namespace gets, in order: its own
// peer group (shared inside, as systemd makes a node's root, so that the
// runtime's netns and the kubelet's volume mounts reach containers with
// HostToContainer propagation; private from the host), then each covered
// directory, then the sysctl files.
func (c *Cluster) mountScript() string {
	var b strings.Builder
	b.WriteString("mount --make-rshared /\n")
	b.WriteString("mount -t tmpfs -o mode=0755 enid-node-run /run\n")
	b.WriteString("mkdir -p /run/netns /run/enid /run/containerd /run/lock\n")
	fmt.Fprintf(&b, "mount --bind %s /var/lib\n", c.node("var/lib"))
	fmt.Fprintf(&b, "mount --bind %s /var/log\n", c.node("var/log"))
	fmt.Fprintf(&b, "mount --bind %s /opt\n", c.node("opt"))
	fmt.Fprintf(&b, "mount -t overlay enid-node-etc -o lowerdir=/etc,upperdir=%s,workdir=%s /etc\n", c.node("etc/upper"), c.node("etc/work"))
	for key, v := range kubeletSysctls {
		f := c.node("sysctl", strings.ReplaceAll(key, "/", "."))
		if err := os.WriteFile(f, []byte(v+"\n"), 0o444); err != nil {
			c.t.Fatal(err)
		}
		fmt.Fprintf(&b, "mount --bind %s /proc/sys/%s\nmount -o remount,bind,ro /proc/sys/%s\n", f, key, key)
	}
	return b.String()
}

// inNode is argv run inside the node: its network and mount namespaces.
func (c *Cluster) inNode(argv ...string) []string {
	return append([]string{"nsenter", "-t", strconv.Itoa(c.holder.Pid()), "-m", "-n", "--"}, argv...)
}

// run starts a program of the cluster inside the node.
func (c *Cluster) run(name string, argv ...string) {
	c.t.Helper()
	c.procs[name] = kubetest.StartProcess(c.t, c.node("logs"), name, c.inNode(argv...)...)
}

// startContainerd starts containerd with a root, state, socket and runc
// root of its own, and the CRI plugin set up as kubelet-node.md measured.
func (c *Cluster) startContainerd() {
	c.t.Helper()
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
      Root = %q
`, filepath.Join(c.Dir, "containerd", "root"), filepath.Join(c.Dir, "containerd", "state"), c.sock, c.sock+".ttrpc",
		filepath.Join(c.Dir, "containerd", "opt"), PauseImage, filepath.Join(c.Dir, "containerd", "runc"))
	path := filepath.Join(c.Dir, "containerd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.run("containerd", "containerd", "--config", path)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := exec.Command("ctr", "--address", c.sock, "version").Run(); err == nil {
			return
		}
		if time.Now().After(deadline) || c.procs["containerd"].Exited() {
			c.t.Fatalf("containerd did not start:\n%s", c.Logs("containerd", 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ImportImage imports a docker-archive tarball into the kubelet's
// containerd namespace (k8s.io), as `ctr -n k8s.io images import` on a
// node does; pods then use it with imagePullPolicy IfNotPresent.
func (c *Cluster) ImportImage(tarball string) {
	c.t.Helper()
	if out, err := exec.Command("ctr", "--address", c.sock, "-n", "k8s.io", "images", "import", tarball).CombinedOutput(); err != nil {
		c.t.Fatalf("import %s: %v\n%s", tarball, err, out)
	}
}

// kubeletConfig is the KubeletConfiguration kubelet-node.md found this
// machine needs: cgroup v1 with cgroupfs under the cluster's parent, no
// OOM score below 0 (no CAP_SYS_RESOURCE), no iptables chains, no image
// GC (images are imported, not pulled), ConfigMap updates watched and the
// pods synced every 10s (a ConfigMap edit reaches the agent in seconds).
func (c *Cluster) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
failSwapOn: false
oomScoreAdj: 0
makeIPTablesUtilChains: false
containerRuntimeEndpoint: unix://%s
address: 0.0.0.0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
configMapAndSecretChangeDetectionStrategy: Watch
syncFrequency: 10s
resolvConf: /etc/resolv.conf
`, c.cgroup, c.sock)
}

// StartKubelet starts the kubelet (again, after StopKubelet), registering
// the node with the admin's static token as system:node:<NodeName>.
func (c *Cluster) StartKubelet() {
	c.t.Helper()
	cfg := filepath.Join(c.Dir, "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte(c.kubeletConfig()), 0o644); err != nil {
		c.t.Fatal(err)
	}
	args := []string{filepath.Join(c.bin, "kubelet"), "--config", cfg,
		"--kubeconfig", c.kubeconfig("node", c.nodeToken), "--hostname-override", c.NodeName,
		"--node-ip", c.NodeIP.String(), "--root-dir", "/var/lib/kubelet", "--cert-dir", filepath.Join(c.Dir, "kubelet-pki")}
	if len(c.o.Taints) > 0 {
		args = append(args, "--register-with-taints", strings.Join(c.o.Taints, ","))
	}
	c.run("kubelet", args...)
}

// StopKubelet stops the kubelet; its pods keep running.
func (c *Cluster) StopKubelet() {
	c.t.Helper()
	c.stop("kubelet")
}

// RestartKubelet stops and starts the kubelet, as `systemctl restart
// kubelet` does on a node.
func (c *Cluster) RestartKubelet() {
	c.t.Helper()
	c.StopKubelet()
	c.StartKubelet()
}

// waitNode waits until the kubelet has registered the Node.
func (c *Cluster) waitNode(timeout time.Duration) {
	c.t.Helper()
	cs := c.Client()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cs.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node %s not registered after %s: %v\nkubelet:\n%s", c.NodeName, timeout, err, c.Logs("kubelet", 30))
		}
		if c.procs["kubelet"].Exited() {
			c.t.Fatalf("the kubelet exited:\n%s", c.Logs("kubelet", 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// copyPlugins copies the host's CNI plugins into the node's bin dir.
func copyPlugins(from, to string) error {
	ents, err := os.ReadDir(from)
	if err != nil {
		return fmt.Errorf("the node's CNI plugins: %w", err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o755); err != nil {
			return err
		}
	}
	return nil
}
