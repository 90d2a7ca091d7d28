package upstreamimages

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/testbed/ctrtest"
)

// pod is a running agnhost container playing a pod: netexec serves in it
// as in the suite's endpoint and test-container pods, and other containers
// join its network namespace as a pod's containers share the sandbox's.
type pod struct {
	t      *testing.T
	c      *ctrtest.Containerd
	id     string   // its first container
	netns  string   // /proc/PID/ns/net of its first container's task
	execs  int      // numbers exec and run ids
	detach []string // containers started detached, removed at cleanup
}

// startPod starts a container detached, as a pod's first container, and
// returns it once its task runs.
func startPod(ctx context.Context, t *testing.T, c *ctrtest.Containerd, id string, flags []string, image string, cmd ...string) *pod {
	t.Helper()
	p := &pod{t: t, c: c, id: id}
	t.Cleanup(p.remove)
	p.start(ctx, id, flags, image, cmd...)
	pid := taskPID(ctx, t, c, id)
	if pid == "" {
		t.Fatalf("task %s is not running", id)
	}
	p.netns = "/proc/" + pid + "/ns/net"
	return p
}

// start starts a detached container, its output in a log file (shown if
// the test fails), and returns the log's path.
func (p *pod) start(ctx context.Context, id string, flags []string, image string, cmd ...string) string {
	p.t.Helper()
	log := filepath.Join(p.t.TempDir(), id+".log")
	p.detach = append(p.detach, id)
	args := append([]string{"run", "-d", "--runc-root", p.c.RuncRoot, "--log-uri", "file://" + log}, flags...)
	if _, err := p.c.Run(ctx, append(append(args, image, id), cmd...)...); err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() {
		if p.t.Failed() {
			b, _ := os.ReadFile(log) // best effort: it only explains a failure
			p.t.Logf("output of %s:\n%s", id, b)
		}
	})
	return log
}

// startContainer starts another container of the pod: in its network
// namespace, detached.
func (p *pod) startContainer(ctx context.Context, id, image string, cmd ...string) {
	p.t.Helper()
	p.start(ctx, id, []string{"--with-ns", "network:" + p.netns}, image, cmd...)
}

// waitServing waits until netexec answers on 8080 and 8081 inside the pod.
func (p *pod) waitServing(ctx context.Context) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := p.exec(ctx, "curl -s -o /dev/null -w %{http_code} http://127.0.0.1:8080/healthz")
		if err == nil && strings.TrimSpace(out) == "200" {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("netexec does not serve: %v %q", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// exec runs cmd in the pod's first container as the suite's RunHostCmd
// does (kubectl exec POD -- /bin/sh -x -c CMD) and returns its standard
// output; a non-zero exit is an *exec.ExitError.
func (p *pod) exec(ctx context.Context, cmd string) (string, error) {
	p.execs++
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, stderr, err := p.c.Output(ctx, "task", "exec", "--exec-id", fmt.Sprintf("exec-%d", p.execs), p.id, "/bin/sh", "-x", "-c", cmd)
	if err != nil {
		return out, fmt.Errorf("%w (stderr %q)", err, stderr)
	}
	return out, nil
}

func (p *pod) mustExec(ctx context.Context, cmd string) string {
	p.t.Helper()
	out, err := p.exec(ctx, cmd)
	if err != nil {
		p.t.Fatalf("%s: %v", cmd, err)
	}
	return out
}

// run runs a container of image in the pod's network namespace to its end
// (with ctr run's flags, e.g. mounts) and returns its standard output.
func (p *pod) run(ctx context.Context, flags []string, image string, args ...string) (string, error) {
	p.execs++
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	run := append([]string{"run", "--rm", "--runc-root", p.c.RuncRoot, "--with-ns", "network:" + p.netns}, flags...)
	out, stderr, err := p.c.Output(ctx, append(append(run, image, fmt.Sprintf("run-%d", p.execs)), args...)...)
	if err != nil {
		return out, fmt.Errorf("%w (stderr %q)", err, stderr)
	}
	return out, nil
}

// remove kills and removes the pod's containers.
func (p *pod) remove() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range slices.Backward(p.detach) {
		// SIGKILL: the servers have no state to save; a task already gone
		// is fine, and the removals below report what is left.
		_, _ = p.c.Run(ctx, "task", "kill", "-s", "SIGKILL", id)
	}
	for _, id := range p.detach {
		deadline := time.Now().Add(20 * time.Second)
		for taskPID(ctx, p.t, p.c, id) != "" && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := p.c.Run(ctx, "task", "rm", "-f", id); err != nil && !strings.Contains(err.Error(), "not found") {
			p.t.Error(err)
		}
		if _, err := p.c.Run(ctx, "containers", "rm", id); err != nil {
			p.t.Error(err)
		}
	}
}

// taskPID returns the pid of id's task while it runs ("" otherwise).
func taskPID(ctx context.Context, t *testing.T, c *ctrtest.Containerd, id string) string {
	t.Helper()
	out, err := c.Run(ctx, "task", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == id && f[2] == "RUNNING" {
			return f[1]
		}
	}
	return ""
}

// checkRunsUntilSignalled runs image's own entrypoint and command (no
// arguments, as a pod that names only the image), wants it running as uid
// after a second, then stops it with SIGTERM, as the kubelet does, and
// wants exit status code.
func checkRunsUntilSignalled(ctx context.Context, t *testing.T, c *ctrtest.Containerd, image, uid string, code int) {
	t.Helper()
	id := "default-" + strings.NewReplacer("/", "-", ":", "-", ".", "-").Replace(image[strings.LastIndex(image, "/")+1:])
	cmd := exec.CommandContext(ctx, c.Ctr, "--address", c.Sock, "-n", c.Namespace, "run", "--rm", "--runc-root", c.RuncRoot, image, id)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	// Ends when the container ends: SIGTERM below, or ctx.
	go func() { done <- cmd.Wait() }()
	var pid string
	for deadline := time.Now().Add(20 * time.Second); pid == "" && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		pid = taskPID(ctx, t, c, id)
	}
	if pid == "" {
		// Its output is logged below, once ctr has ended: the builder is
		// written by exec's copying goroutine until Wait returns.
		t.Errorf("%s's default command is not running", image)
	} else {
		time.Sleep(time.Second)
		status, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			t.Errorf("%s exited within a second: %v", image, err)
		} else if m := regexp.MustCompile(`(?m)^Uid:\s+(\d+)`).FindSubmatch(status); m == nil || string(m[1]) != uid {
			t.Errorf("%s runs as uid %q, want %s", image, m, uid)
		}
		if _, err := c.Run(ctx, "task", "kill", "-s", "SIGTERM", id); err != nil {
			t.Error(err)
		}
	}
	select {
	case err := <-done:
		got := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			got = ee.ExitCode()
		} else if err != nil {
			t.Errorf("%s: %v", image, err)
		}
		if got != code {
			t.Errorf("%s after SIGTERM: exit %d, want %d; output:\n%s", image, got, code, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not end 30 s after SIGTERM", image)
		_, _ = c.Run(ctx, "task", "kill", "-s", "SIGKILL", id) // the test failed already; just end it
		<-done
	}
	t.Logf("%s's default command said: %q", image, out.String())
}
