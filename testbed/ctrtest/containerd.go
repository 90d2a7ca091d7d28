package ctrtest

import (
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
)

// Containerd is a containerd of a test's own: root, state, socket and
// runc root in a temporary directory, the CRI plugin off (a test that
// runs containers with ctr needs only images and tasks). Start returns it
// running; it is stopped, and what it left removed, when the test ends.
type Containerd struct {
	t *testing.T
	// Ctr is the ctr program; Sock the socket this containerd serves;
	// RuncRoot the runc state directory `ctr run --runc-root` must be
	// given (runc's default is shared with any other containerd).
	Ctr, Sock, RuncRoot string
	// Namespace is the containerd namespace Run works in: a test's own,
	// so it never meets a node's images (the kubelet's is k8s.io).
	Namespace string
	dir       string
}

// Start starts a containerd for t. Without root, containerd, ctr or runc
// it skips t, except where privileged tests are required
// (roottest.Required), where it fails: .ci/run installs them.
func Start(t *testing.T, namespace string) *Containerd {
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
	bin, ctr := look("containerd"), look("ctr")
	look("runc")
	if len(missing) > 0 {
		msg := fmt.Sprintf("needs %s: apt-get install containerd runc (see docs/testing.md)", strings.Join(missing, ", "))
		if roottest.Required() {
			t.Fatal(msg)
		}
		t.Skip("skipped: " + msg)
	}
	// Short: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "enid-ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Containerd{t: t, Ctr: ctr, Sock: filepath.Join(dir, "c.sock"), RuncRoot: filepath.Join(dir, "runc"),
		Namespace: namespace, dir: dir}
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.Sock, filepath.Join(dir, "opt"))
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
			b, _ := os.ReadFile(logPath) // best effort: the log only explains a failure
			t.Logf("containerd log:\n%s", lastLines(string(b), 30))
		}
		c.cleanup()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command(ctr, "--address", c.Sock, "version").CombinedOutput()
		if err == nil {
			break
		}
		select {
		case <-done:
			b, _ := os.ReadFile(logPath) // best effort, as above
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

// cleanup kills the shims a failed test left, unmounts what is left under
// the directory (rootfs overlays) and removes it.
func (c *Containerd) cleanup() {
	killed, err := KillShims(c.Sock)
	if err != nil {
		c.t.Error(err)
	}
	for _, pid := range killed {
		c.t.Errorf("containerd shim %d outlived its task; killing it", pid)
	}
	mounts, err := UnmountUnder(c.dir)
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

// Run runs ctr against this containerd in its namespace and returns its
// combined output; the error carries the command and the output.
func (c *Containerd) Run(ctx context.Context, args ...string) (string, error) {
	args = append([]string{"--address", c.Sock, "-n", c.Namespace}, args...)
	out, err := exec.CommandContext(ctx, c.Ctr, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Output runs ctr as Run does, but returns the command's standard output
// and standard error apart: `ctr task exec` and `ctr run` pass the
// container's through, and a shell's -x trace goes to standard error.
func (c *Containerd) Output(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	args = append([]string{"--address", c.Sock, "-n", c.Namespace}, args...)
	cmd := exec.CommandContext(ctx, c.Ctr, args...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}
