package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go/build"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/enidnet/enid/internal/roottest"
	"github.com/enidnet/enid/testbed/cnirun"
	"github.com/enidnet/enid/testbed/ctrtest"
)

// criPauseImage is the sandbox image the tests build and import: no
// registry is reachable from CI, and a name of our own cannot collide with
// an image a real containerd on the machine holds.
const criPauseImage = "enid.test/pause:e2e"

// criTools are the programs the CRI tests drive.
type criTools struct {
	containerd, ctr, crictl string
	// loopback is the standard loopback plugin, which containerd's CRI runs
	// for every sandbox besides the conflist.
	loopback string
}

// needCRI finds containerd, ctr, runc, crictl and the loopback plugin. When
// one is missing the test skips on a developer machine and fails in CI
// (.ci/run installs them all).
func needCRI(t *testing.T) criTools {
	t.Helper()
	roottest.Need(t)
	var tools criTools
	var missing []string
	look := func(name string, extra ...string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		for _, dir := range extra {
			p := filepath.Join(dir, name)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				return p
			}
		}
		missing = append(missing, name)
		return ""
	}
	tools.containerd = look("containerd")
	tools.ctr = look("ctr")
	look("runc")
	// `go install` puts crictl in GOBIN or GOPATH/bin, often not on PATH.
	goBins := []string{filepath.Join(build.Default.GOPATH, "bin")}
	if gb := os.Getenv("GOBIN"); gb != "" {
		goBins = append([]string{gb}, goBins...)
	}
	tools.crictl = look("crictl", goBins...)
	tools.loopback = look("loopback", "/usr/lib/cni", "/opt/cni/bin")
	if len(missing) == 0 {
		return tools
	}
	msg := fmt.Sprintf("containerd CRI tests need %s: apt-get install containerd runc containernetworking-plugins; "+
		"go install sigs.k8s.io/cri-tools/cmd/crictl@v1.37.0 (see docs/testing.md)", strings.Join(missing, ", "))
	if roottest.Required() {
		t.Fatal(msg)
	}
	t.Skip("skipped: " + msg)
	return tools
}

// criNode is a simulated node with a containerd whose CRI runs enid-cni:
// containerd's root, state, socket and CNI directories live in a temp dir;
// the test starts and stops it.
type criNode struct {
	*node
	tools criTools
	// dir is short (unix socket paths are limited to 108 bytes).
	dir, sock, cfg, log string
	cmd                 *exec.Cmd
	done                chan struct{}
}

// newCRINode starts a simulated node (the agent is not started) and a
// containerd configured with enid's conflist, with the pause image
// imported. Everything, sandboxes included, is removed at the end.
func newCRINode(t *testing.T, o nodeOptions) *criNode {
	t.Helper()
	tools := needCRI(t)
	if o.addTimeout == 0 {
		o.addTimeout = 60 * time.Second
	}
	n := newNode(t, o)
	dir, err := os.MkdirTemp("", "enid-cri-")
	if err != nil {
		t.Fatal(err)
	}
	c := &criNode{node: n, tools: tools, dir: dir, sock: filepath.Join(dir, "containerd.sock"),
		cfg: filepath.Join(dir, "containerd.toml"), log: filepath.Join(dir, "containerd.log")}
	// Registered after newNode's: runs first, so sandboxes go before the
	// agent and the namespaces they use.
	t.Cleanup(c.close)
	binCNI, confCNI := filepath.Join(dir, "cni", "bin"), filepath.Join(dir, "cni", "net.d")
	for _, d := range []string{binCNI, confCNI, filepath.Join(dir, "logs"), filepath.Join(dir, "pods")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, src := range map[string]string{"enid-cni": filepath.Join(binDir, "enid-cni"), "loopback": tools.loopback} {
		if err := copyFile(src, filepath.Join(binCNI, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(confCNI, "10-enid.conflist"), cnirun.Conflist(n.runDir, o.addTimeout), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.cfg, []byte(c.config(binCNI, confCNI)), 0o644); err != nil {
		t.Fatal(err)
	}
	crictlCfg := fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\n", c.sock, c.sock)
	if err := os.WriteFile(filepath.Join(dir, "crictl.yaml"), []byte(crictlCfg), 0o644); err != nil {
		t.Fatal(err)
	}
	c.start()
	c.importPause()
	return c
}

// config is containerd's config: everything it writes under dir, the CRI
// with enid's CNI dirs and our pause image. restrict_oom_score_adj: runc
// cannot lower oom_score_adj on some kernels (CI's among them) and then
// fails every container.
func (c *criNode) config(binCNI, confCNI string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[7]q
`, filepath.Join(c.dir, "root"), filepath.Join(c.dir, "state"), c.sock, filepath.Join(c.dir, "opt"),
		criPauseImage, binCNI, confCNI)
}

// start runs containerd and waits until it answers.
func (c *criNode) start() {
	c.t.Helper()
	lf, err := os.Create(c.log)
	if err != nil {
		c.t.Fatal(err)
	}
	c.cmd = exec.Command(c.tools.containerd, "--config", c.cfg, "--log-level", "info")
	c.cmd.Stdout, c.cmd.Stderr = lf, lf
	if err := c.cmd.Start(); err != nil {
		lf.Close()
		c.t.Fatalf("start containerd: %v", err)
	}
	c.done = make(chan struct{})
	// The waiter ends when containerd exits; close stops it.
	go func() {
		_ = c.cmd.Wait() // the exit status of a containerd we stopped says nothing
		lf.Close()
		close(c.done)
	}()
	waitFor(c.t, 30*time.Second, "containerd answers", func() (bool, string) {
		select {
		case <-c.done:
			c.t.Fatalf("containerd exited:\n%s", tail(c.log, 40))
		default:
		}
		out, err := exec.Command(c.tools.ctr, "--address", c.sock, "version").CombinedOutput()
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, out)
		}
		return true, ""
	})
}

// close removes every sandbox, stops containerd and its shims, unmounts
// what it left and removes its directory.
func (c *criNode) close() {
	// Network namespaces of sandboxes a failed DEL left behind: containerd
	// keeps them under /var/run/netns, outside its own dirs.
	var netnss []string
	if c.cmd != nil && c.cmd.Process != nil {
		select {
		case <-c.done:
		default:
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			netnss = c.sandboxNetns(ctx)
			if out, err := c.crictlCtx(ctx, "rmp", "--force", "--all"); err != nil {
				c.t.Errorf("remove sandboxes at cleanup: %v\n%s", err, out)
			}
			cancel()
			_ = c.cmd.Process.Signal(syscall.SIGTERM) // exited already is fine
			select {
			case <-c.done:
			case <-time.After(15 * time.Second):
				_ = c.cmd.Process.Kill() // it did not stop in time: all we need is it gone
				<-c.done
			}
		}
	}
	if c.t.Failed() {
		c.t.Logf("containerd log %s (tail):\n%s", c.log, tail(c.log, 40))
	}
	c.killShims()
	c.unmountUnder()
	for _, p := range netnss {
		if _, err := os.Stat(p); err != nil {
			continue // removed with its sandbox, as it should be
		}
		c.t.Errorf("sandbox netns %s outlived its sandbox; removing it", p)
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			c.t.Errorf("unmount %s: %v", p, err)
		}
		if err := os.Remove(p); err != nil {
			c.t.Errorf("remove %s: %v", p, err)
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		c.t.Errorf("remove containerd dir: %v", err)
	}
}

// sandboxNetns lists the network namespace paths of every sandbox
// containerd knows (best effort: it is for cleanup).
func (c *criNode) sandboxNetns(ctx context.Context) []string {
	out, err := c.crictlCtx(ctx, "pods", "-q")
	if err != nil {
		c.t.Errorf("list sandboxes at cleanup: %v", err)
		return nil
	}
	var paths []string
	for _, id := range strings.Fields(out) {
		info, err := c.inspectpCtx(ctx, id)
		if err != nil {
			c.t.Errorf("at cleanup: %v", err)
			continue
		}
		if info.netns != "" {
			paths = append(paths, info.netns)
		}
	}
	return paths
}

// killShims kills the shims of this containerd that a failed test may
// have left running.
func (c *criNode) killShims() {
	killed, err := ctrtest.KillShims(c.sock)
	if err != nil {
		c.t.Error(err)
	}
	for _, pid := range killed {
		c.t.Errorf("containerd shim %d outlived its sandboxes; killing it", pid)
	}
}

// unmountUnder detaches every mount below c.dir (rootfs overlays, shm) a
// failed test may have left.
func (c *criNode) unmountUnder() {
	if _, err := ctrtest.UnmountUnder(c.dir); err != nil {
		c.t.Error(err)
	}
}

// crictl runs crictl against this containerd and returns its stdout; it
// fails the test on error.
func (c *criNode) crictl(ctx context.Context, args ...string) string {
	c.t.Helper()
	out, err := c.crictlCtx(ctx, args...)
	if err != nil {
		c.t.Fatalf("crictl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// crictlCtx runs crictl and returns stdout, or an error carrying stderr.
func (c *criNode) crictlCtx(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.tools.crictl, append([]string{"--config", filepath.Join(c.dir, "crictl.yaml")}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("crictl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// sandbox is a pod sandbox created through the CRI.
type sandbox struct {
	name, uid   string
	attempt     int
	annotations map[string]string
	// id is the sandbox id (the CNI container id), set by runp.
	id string
}

// runp creates and starts a sandbox (kubelet's RunPodSandbox); the CNI ADD
// runs inside it.
func (c *criNode) runp(ctx context.Context, s *sandbox) error {
	conf := map[string]any{
		"metadata":      map[string]any{"name": s.name, "namespace": "default", "uid": s.uid, "attempt": s.attempt},
		"log_directory": filepath.Join(c.dir, "logs", s.name),
		"annotations":   s.annotations,
		"linux":         map[string]any{},
	}
	b, err := json.Marshal(conf)
	if err != nil {
		return err
	}
	path := filepath.Join(c.dir, "pods", fmt.Sprintf("%s-%d.json", s.name, s.attempt))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return err
	}
	out, err := c.crictlCtx(ctx, "runp", path)
	if err != nil {
		return err
	}
	s.id = strings.TrimSpace(out)
	if len(s.id) != 64 {
		return fmt.Errorf("runp %s: unexpected output %q", s.name, out)
	}
	return nil
}

// sandboxInfo is what inspectp says about a sandbox's network.
type sandboxInfo struct {
	state string
	ip    netip.Addr
	netns string
}

// inspectp reads a sandbox's state, address and network namespace path,
// and fails the test when it cannot.
func (c *criNode) inspectp(ctx context.Context, id string) sandboxInfo {
	c.t.Helper()
	info, err := c.inspectpCtx(ctx, id)
	if err != nil {
		c.t.Fatal(err)
	}
	return info
}

// inspectpCtx is inspectp returning its error (for cleanup).
func (c *criNode) inspectpCtx(ctx context.Context, id string) (sandboxInfo, error) {
	var v struct {
		Status struct {
			State   string `json:"state"`
			Network struct {
				IP string `json:"ip"`
			} `json:"network"`
		} `json:"status"`
		Info struct {
			RuntimeSpec struct {
				Linux struct {
					Namespaces []struct {
						Type string `json:"type"`
						Path string `json:"path"`
					} `json:"namespaces"`
				} `json:"linux"`
			} `json:"runtimeSpec"`
		} `json:"info"`
	}
	out, err := c.crictlCtx(ctx, "inspectp", "-o", "json", id)
	if err != nil {
		return sandboxInfo{}, err
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return sandboxInfo{}, fmt.Errorf("inspectp %s: %w\n%s", id, err, out)
	}
	info := sandboxInfo{state: v.Status.State}
	if v.Status.Network.IP != "" {
		ip, err := netip.ParseAddr(v.Status.Network.IP)
		if err != nil {
			return sandboxInfo{}, fmt.Errorf("inspectp %s: address %q: %w", id, v.Status.Network.IP, err)
		}
		info.ip = ip
	}
	for _, ns := range v.Info.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" {
			info.netns = ns.Path
		}
	}
	return info, nil
}

// pod returns the sandbox as the e2e checks see a pod (what CNI was given).
func (s *sandbox) pod(netns string) *pod {
	return &pod{Pod: cnirun.Pod{ContainerID: s.id, NetNS: netns, IfName: "eth0", Namespace: "default", Name: s.name, UID: s.uid}}
}

// runtimeRecords lists containerd's libcni cache records (the runtime's
// own list of live attachments) for enid's network and these sandboxes.
// containerd's go-cni keeps them in libcni's default cache dir, whatever
// containerd's own root is.
func runtimeRecords(ids []string) []string {
	var left []string
	for _, id := range ids {
		p := filepath.Join("/var/lib/cni/results", "enid-"+id+"-eth0")
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			left = append(left, p)
		}
	}
	return left
}

// importPause builds the pause program, packs it as a docker-archive image
// and imports it into containerd's k8s.io namespace.
func (c *criNode) importPause() {
	c.t.Helper()
	bin := buildPause(c.t, c.dir)
	tarball := filepath.Join(c.dir, "pause.tar")
	if err := writeImageArchive(tarball, criPauseImage, bin); err != nil {
		c.t.Fatal(err)
	}
	out, err := exec.Command(c.tools.ctr, "--address", c.sock, "-n", "k8s.io", "images", "import", tarball).CombinedOutput()
	if err != nil {
		c.t.Fatalf("import pause image: %v\n%s", err, out)
	}
}

// pauseSource is the sandbox's one process: it blocks until told to stop.
// As PID 1 of its namespace it gets only signals it handles.
const pauseSource = `package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
`

// buildPause builds the static pause binary in dir and returns its bytes.
func buildPause(t *testing.T, dir string) []byte {
	t.Helper()
	src := filepath.Join(dir, "pause-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"go.mod": "module pause\n\ngo 1.22\n", "main.go": pauseSource} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "pause")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build pause: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeImageArchive writes a docker-archive (`docker save` format) holding
// one image named ref whose one layer is /pause.
func writeImageArchive(path, ref string, pause []byte) error {
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := lw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(pause)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	if _, err := lw.Write(pause); err != nil {
		return err
	}
	if err := lw.Close(); err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer.Bytes())
	layerHex := hex.EncodeToString(layerSum[:])
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{"/pause"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerHex}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{
		"Config": configName, "RepoTags": []string{ref}, "Layers": []string{layerHex + "/layer.tar"},
	}})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	w := tar.NewWriter(&out)
	for _, f := range []struct {
		name string
		data []byte
	}{{configName, config}, {layerHex + "/layer.tar", layer.Bytes()}, {"manifest.json", manifest}} {
		if err := w.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		if _, err := w.Write(f.data); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}

// copyFile copies an executable.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}
