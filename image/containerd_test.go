package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/enidnet/enid/internal/roottest"
	"github.com/enidnet/enid/testbed/ctrtest"
)

// ctrNamespace is the containerd namespace the test imports into: the
// kubelet's is k8s.io; ours cannot meet a real node's images.
const ctrNamespace = "enid-image-test"

// privateContainerd is a containerd of the test's own: root, state,
// socket and runc root in a temp dir, the CRI plugin off (only images and
// tasks are needed). It is stopped, and what it left removed, at cleanup.
type privateContainerd struct {
	t                  *testing.T
	ctr                string
	dir, sock, runcDir string
}

// needContainerd skips without root or containerd, ctr and runc, except
// in CI (roottest.Required), where it fails: .ci/run installs them.
func needContainerd(t *testing.T) (containerd, ctr string) {
	t.Helper()
	roottest.Need(t)
	var missing []string
	look := func(name string) string {
		p, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, name)
		}
		return p
	}
	containerd, ctr = look("containerd"), look("ctr")
	look("runc")
	if len(missing) > 0 {
		msg := fmt.Sprintf("the image test needs %s: apt-get install containerd runc (see docs/testing.md)", strings.Join(missing, ", "))
		if roottest.Required() {
			t.Fatal(msg)
		}
		t.Skip("skipped: " + msg)
	}
	return containerd, ctr
}

func startContainerd(t *testing.T) *privateContainerd {
	t.Helper()
	bin, ctr := needContainerd(t)
	// Short: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "enid-ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	c := &privateContainerd{t: t, ctr: ctr, dir: dir, sock: filepath.Join(dir, "c.sock"), runcDir: filepath.Join(dir, "runc")}
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock, filepath.Join(dir, "opt"))
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "containerd.log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	done := make(chan struct{})
	// Ends when containerd exits; the cleanup below stops it.
	go func() {
		_ = cmd.Wait() // the exit status of a containerd we stopped says nothing
		lf.Close()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // exited already is fine
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill() // it did not stop in time: all we need is it gone
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("containerd log:\n%s", lastLines(string(b), 30))
		}
		c.cleanup()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command(ctr, "--address", c.sock, "version").CombinedOutput()
		if err == nil {
			break
		}
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("containerd exited:\n%s", lastLines(string(b), 30))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd does not answer: %v: %s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return c
}

// cleanup kills shims of this containerd a failed test left (found by its
// socket in their command line), unmounts what is left under its dir
// (rootfs overlays) and removes the dir.
func (c *privateContainerd) cleanup() {
	killed, err := ctrtest.KillShims(c.sock)
	if err != nil {
		c.t.Error(err)
	}
	for _, pid := range killed {
		c.t.Errorf("containerd shim %d outlived its task; killing it", pid)
	}
	mounts, err := ctrtest.UnmountUnder(c.dir)
	for _, m := range mounts {
		c.t.Errorf("mount %s outlived its container; unmounting it", m)
	}
	if err != nil {
		c.t.Error(err)
	}
	if err := os.RemoveAll(c.dir); err != nil {
		c.t.Errorf("remove %s: %v", c.dir, err)
	}
}

// run runs ctr against this containerd and returns its combined output.
func (c *privateContainerd) run(ctx context.Context, args ...string) (string, error) {
	args = append([]string{"--address", c.sock, "-n", ctrNamespace}, args...)
	out, err := exec.CommandContext(ctx, c.ctr, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// TestImageInContainerd imports the tarball into a real containerd with
// `ctr images import` (as docs/deploy.md tells a user to), runs
// `enid version` from it and wants the tag's version, then runs
// `enid install-cni` from it into a host dir, twice, as the DaemonSet's
// init container does: the plugin there is the image's, executable, and
// the second run changes nothing.
func TestImageInContainerd(t *testing.T) {
	c := startContainerd(t)
	res, tarPath := buildOnce(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref := res.tag.String()
	out, err := c.run(ctx, "images", "import", tarPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ctr images import: %s", strings.TrimSpace(out))
	if out, err = c.run(ctx, "images", "ls", "-q"); err != nil || !strings.Contains(out, ref) {
		t.Fatalf("after the import, ctr images ls says %q (err %v), want %s", out, err, ref)
	}
	runArgs := func(extra ...string) []string {
		return append([]string{"run", "--rm", "--runc-root", c.runcDir}, extra...)
	}
	out, err = c.run(ctx, append(runArgs(), ref, "enid-version", "enid", "version")...)
	if err != nil {
		t.Fatal(err)
	}
	if want := "enid " + res.src.version + " "; !strings.HasPrefix(out, want) {
		t.Errorf("enid version in the image printed %q, want it to start with %q (the tag %s)", out, want, ref)
	}
	if rev := res.src.revision; rev != "" && !strings.Contains(out, "("+rev+")") {
		t.Errorf("enid version in the image printed %q, want the commit %s", out, rev)
	}

	host := t.TempDir()
	bin, conf := filepath.Join(host, "opt-cni-bin"), filepath.Join(host, "etc-cni-net.d")
	for _, d := range []string{bin, conf} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mounts := []string{
		"--mount", "type=bind,src=" + bin + ",dst=/host/opt/cni/bin,options=rbind:rw",
		"--mount", "type=bind,src=" + conf + ",dst=/host/etc/cni/net.d,options=rbind:rw",
	}
	// The init container's command, as examples/kubernetes/daemonset.yaml
	// has it.
	install := []string{"enid", "install-cni", "--bin-dir=/host/opt/cni/bin"}
	for i, want := range []string{"installed", "unchanged"} {
		out, err := c.run(ctx, append(append(runArgs(mounts...), ref, fmt.Sprintf("install-cni-%d", i)), install...)...)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, want+" /host/opt/cni/bin/enid-cni") {
			t.Errorf("run %d of install-cni: %q, want %s", i+1, out, want)
		}
	}
	got, err := os.ReadFile(filepath.Join(bin, "enid-cni"))
	if err != nil {
		t.Fatal(err)
	}
	var inImage []byte
	for _, f := range layerFiles(t, tarPath) {
		if f.name == "usr/local/bin/enid-cni" {
			inImage = f.data
		}
	}
	if !bytes.Equal(got, inImage) {
		t.Errorf("the installed plugin (%d bytes) is not the image's (%d bytes)", len(got), len(inImage))
	}
	// The plugin runs on the host: with no CNI_COMMAND it prints its
	// version support, as libcni's VERSION does.
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "enid-cni"))
	cmd.Env = []string{"CNI_COMMAND=VERSION"}
	cmd.Stdin = strings.NewReader(`{"cniVersion": "1.0.0"}`)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "supportedVersions") {
		t.Errorf("the installed plugin, run as CNI VERSION: %v: %s", err, out)
	}
	if entries, _ := os.ReadDir(conf); len(entries) != 0 {
		t.Errorf("install-cni wrote %d files in the conf dir: the network list is the agent's to write once it serves", len(entries))
	}
	if out, err := c.run(ctx, "containers", "ls", "-q"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("containers left: %q (err %v)", out, err)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
