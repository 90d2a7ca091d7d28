package cluster

import (
	"context"
	"fmt"
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
func (n *Node) node(parts ...string) string {
	return filepath.Join(append([]string{n.dir, "node"}, parts...)...)
}

// startNode makes the node: the service address on its lo, the mount
// namespace (a "sleep" that holds it, entered by every program), the
// directories it covers, and the cgroup parent.
func (n *Node) startNode() {
	n.c.t.Helper()
	for _, d := range []string{"var/lib/kubelet", "var/lib/cni", "var/lib/enid", "var/log", "opt/cni/bin", "etc/upper", "etc/work", "sysctl", "logs"} {
		if err := os.MkdirAll(n.node(d), 0o755); err != nil {
			n.c.t.Fatal(err)
		}
	}
	if err := copyPlugins(hostPlugins, n.node("opt/cni/bin")); err != nil {
		n.c.t.Fatal(err)
	}
	n.holder = kubetest.StartProcess(n.c.t, n.node("logs"), "node", "nsenter", "--net="+n.NS, "--",
		"unshare", "--mount", "--propagation", "private", "--", "sleep", "infinity")
	n.waitHolder()
	if out, err := exec.Command("nsenter", "-t", strconv.Itoa(n.holder.Pid()), "-m", "--", "sh", "-ec", n.mountScript()).CombinedOutput(); err != nil {
		n.c.t.Fatalf("the node's mounts: %v\n%s", err, out)
	}
	if err := makeCgroups(n.cgroup); err != nil {
		n.c.t.Fatal(err)
	}
}

// waitHolder waits until the holder runs in a mount namespace of its own.
func (n *Node) waitHolder() {
	n.c.t.Helper()
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		n.c.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", n.holder.Pid()))
		mnt, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", n.holder.Pid()))
		if strings.TrimSpace(string(comm)) == "sleep" && mnt != "" && mnt != self {
			return
		}
		if n.holder.Exited() {
			n.c.t.Fatalf("the node's mount namespace did not start:\n%s", kubetest.Tail(n.holder.Log, 10))
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.c.t.Fatal("the node's mount namespace did not start in 10s")
}

// mountScript is what the node's mount namespace gets, in order: its own
// peer group (shared inside, as systemd makes a node's root, so that the
// runtime's netns and the kubelet's volume mounts reach containers with
// HostToContainer propagation; private from the host), then each covered
// directory, then the sysctl files.
func (n *Node) mountScript() string {
	var b strings.Builder
	b.WriteString("mount --make-rshared /\n")
	b.WriteString("mount -t tmpfs -o mode=0755 enid-node-run /run\n")
	b.WriteString("mkdir -p /run/netns /run/enid /run/containerd /run/lock\n")
	fmt.Fprintf(&b, "mount --bind %s /var/lib\n", n.node("var/lib"))
	fmt.Fprintf(&b, "mount --bind %s /var/log\n", n.node("var/log"))
	fmt.Fprintf(&b, "mount --bind %s /opt\n", n.node("opt"))
	fmt.Fprintf(&b, "mount -t overlay enid-node-etc -o lowerdir=/etc,upperdir=%s,workdir=%s /etc\n", n.node("etc/upper"), n.node("etc/work"))
	for key, v := range kubeletSysctls {
		f := n.node("sysctl", strings.ReplaceAll(key, "/", "."))
		if err := os.WriteFile(f, []byte(v+"\n"), 0o444); err != nil {
			n.c.t.Fatal(err)
		}
		fmt.Fprintf(&b, "mount --bind %s /proc/sys/%s\nmount -o remount,bind,ro /proc/sys/%s\n", f, key, key)
	}
	return b.String()
}

// inNode is argv run inside the node: its network and mount namespaces.
func (n *Node) inNode(argv ...string) []string {
	return append([]string{"nsenter", "-t", strconv.Itoa(n.holder.Pid()), "-m", "-n", "--"}, argv...)
}

// run starts a program of the cluster inside the node.
func (n *Node) run(name string, argv ...string) {
	n.c.t.Helper()
	n.procs[name] = kubetest.StartProcess(n.c.t, n.node("logs"), name, n.inNode(argv...)...)
}

// startContainerd starts containerd with a root, state, socket and runc
// root of its own, and the CRI plugin set up as kubelet-node.md measured.
func (n *Node) startContainerd() {
	n.c.t.Helper()
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
`, filepath.Join(n.dir, "containerd", "root"), filepath.Join(n.dir, "containerd", "state"), n.sock, n.sock+".ttrpc",
		filepath.Join(n.dir, "containerd", "opt"), PauseImage, filepath.Join(n.dir, "containerd", "runc"))
	path := filepath.Join(n.dir, "containerd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		n.c.t.Fatal(err)
	}
	n.run("containerd", "containerd", "--config", path)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := exec.Command("ctr", "--address", n.sock, "version").Run(); err == nil {
			return
		}
		if time.Now().After(deadline) || n.procs["containerd"].Exited() {
			n.c.t.Fatalf("containerd did not start:\n%s", n.Logs("containerd", 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ImportImage imports a docker-archive tarball into the kubelet's
// containerd namespace (k8s.io), as `ctr -n k8s.io images import` on a
// node does; pods then use it with imagePullPolicy IfNotPresent.
func (n *Node) ImportImage(tarball string) {
	n.c.t.Helper()
	if out, err := exec.Command("ctr", "--address", n.sock, "-n", "k8s.io", "images", "import", tarball).CombinedOutput(); err != nil {
		n.c.t.Fatalf("import %s: %v\n%s", tarball, err, out)
	}
}

// kubeletConfig is the KubeletConfiguration kubelet-node.md found this
// machine needs: cgroup v1 with cgroupfs under the cluster's parent, no
// OOM score below 0 (no CAP_SYS_RESOURCE), no iptables chains, no image
// GC (images are imported, not pulled), ConfigMap updates watched and the
// pods synced every 10s (a ConfigMap edit reaches the agent in seconds).
func (n *Node) kubeletConfig() string {
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
%s`, n.cgroup, n.sock, n.c.dnsConfig())
}

// StartKubelet starts the kubelet (again, after StopKubelet), registering
// the node with the admin's static token as system:node:<NodeName>.
func (n *Node) StartKubelet() {
	n.c.t.Helper()
	cfg := filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte(n.kubeletConfig()), 0o644); err != nil {
		n.c.t.Fatal(err)
	}
	args := []string{filepath.Join(n.c.bin, "kubelet"), "--config", cfg,
		"--kubeconfig", n.c.kubeconfig("node-"+n.Name, n.token), "--hostname-override", n.Name,
		"--node-ip", n.nodeIPs(), "--root-dir", "/var/lib/kubelet", "--cert-dir", filepath.Join(n.dir, "kubelet-pki")}
	if len(n.c.o.Taints) > 0 {
		args = append(args, "--register-with-taints", strings.Join(n.c.o.Taints, ","))
	}
	n.run("kubelet", args...)
}

// nodeIPs is the kubelet's --node-ip: IPv4 first, as the cluster's
// primary family, then IPv6 on a dual-stack cluster.
func (n *Node) nodeIPs() string {
	if n.IPv6.IsValid() {
		return n.IP.String() + "," + n.IPv6.String()
	}
	return n.IP.String()
}

// StopKubelet stops the kubelet; its pods keep running.
func (n *Node) StopKubelet() {
	n.c.t.Helper()
	n.stop("kubelet")
}

// RestartKubelet stops and starts the kubelet, as `systemctl restart
// kubelet` does on a node.
func (n *Node) RestartKubelet() {
	n.c.t.Helper()
	n.StopKubelet()
	n.StartKubelet()
}

// waitNode waits until the kubelet has registered the Node.
func (n *Node) waitNode(timeout time.Duration) {
	n.c.t.Helper()
	cs := n.c.Client()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			n.c.t.Fatalf("node %s not registered after %s: %v\nkubelet:\n%s", n.Name, timeout, err, n.Logs("kubelet", 30))
		}
		if n.procs["kubelet"].Exited() {
			n.c.t.Fatalf("the kubelet exited:\n%s", n.Logs("kubelet", 40))
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
