package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/internal/roottest"
	"github.com/enidnet/enid/reconcile/status"
	"github.com/enidnet/enid/testbed/cnirun"
	"github.com/enidnet/enid/testbed/simnode"
)

// testPool is the pool most tests run with: small bounds and short delays,
// so growth, release and cooldown all happen within a test.
const testPool = `pool:
  minIdle: 2
  maxIdle: 6
  batch: 5
  releaseDelay: 1s
  cooldown: 300ms
`

// profileEnv names the simulator profile (ecssim.ApplyProfile) every node
// of the run uses: "" or "fast" (the default), or "realistic". The
// harness reads it so that a chosen part of the suite can run on the
// realistic profile (TestRealisticProfile) without a second copy of it.
const profileEnv = "ENID_E2E_PROFILE"

// nodeOptions configure a test node.
type nodeOptions struct {
	// extraConfig is appended to the simulator's config (pool, cloud...).
	extraConfig string
	// sim is the simulator config (zero: attach 50ms, the defaults).
	sim ecssim.Config
	// addTimeout bounds each CNI ADD (default 60s).
	addTimeout time.Duration
	// configMap lays the config out as a kubelet ConfigMap volume.
	configMap bool
	// exclusive runs the node in exclusive-ENI mode.
	exclusive bool
}

// node is one simulated node: the simulator and its namespaces in the test
// process, the agent as a subprocess, a CNI runtime for pods.
type node struct {
	t  *testing.T
	sn *simnode.Node
	// dir holds etc/, run/, state/, the CNI cache and agent logs.
	dir                               string
	cfgFile, cfgDir, runDir, stateDir string
	rt                                *cnirun.Runtime
	agent                             *agentProc
	starts                            int
	podsMu                            sync.Mutex
	pods                              map[string]*pod // by netns path; guarded by podsMu
	configMapDir                      string
	// exclusive: pool bounds count ENIs, not addresses.
	exclusive bool
	// agentArgs are extra flags of `enid run` (e.g. --kubeconfig).
	agentArgs []string
	// prefixMode: the config in force takes IPv4 as /28 prefixes, which
	// changes what a settled pool looks like (settled).
	prefixMode bool
}

// pod is a pod sandbox: its namespace and what the runtime passes to CNI.
type pod struct {
	cnirun.Pod
	cleanup func()
}

// newNode starts a simulated node with a datapath (root) and writes the
// agent's config; the agent is not started. Everything is removed at the
// end of the test.
func newNode(t *testing.T, o nodeOptions) *node {
	t.Helper()
	roottest.Need(t)
	if binDir == "" {
		t.Fatal("binaries were not built (TestMain)")
	}
	if profile := os.Getenv(profileEnv); profile != "" {
		// The profile's timing and faults replace the test's own.
		if err := ecssim.ApplyProfile(&o.sim, profile); err != nil {
			t.Fatal(err)
		}
	}
	if o.sim.Delays.Attach == 0 {
		o.sim.Delays.Attach = 50 * time.Millisecond
	}
	if o.addTimeout == 0 {
		o.addTimeout = 60 * time.Second
	}
	sn, err := simnode.Start(simnode.Options{Sim: o.sim, Datapath: true, Name: "e2e"})
	if err != nil {
		t.Fatalf("start simulated node: %v", err)
	}
	dir := t.TempDir()
	n := &node{t: t, sn: sn, dir: dir,
		cfgFile: filepath.Join(dir, "etc", "config.yaml"), cfgDir: filepath.Join(dir, "etc", "config.d"),
		runDir: filepath.Join(dir, "run"), stateDir: filepath.Join(dir, "state"), pods: map[string]*pod{}, exclusive: o.exclusive}
	t.Cleanup(func() {
		if n.agent != nil {
			n.agent.kill()
		}
		n.podsMu.Lock()
		for _, p := range n.pods {
			p.cleanup()
		}
		n.podsMu.Unlock()
		if err := sn.Close(); err != nil {
			t.Errorf("close simulated node: %v", err)
		}
	})
	if err := os.MkdirAll(n.cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := n.Config(o.extraConfig)
	if o.configMap {
		n.configMapDir = filepath.Dir(n.cfgFile)
		n.swapConfigMap(cfg)
		if err := os.Symlink(filepath.Join("..data", "config.yaml"), n.cfgFile); err != nil {
			t.Fatal(err)
		}
	} else if err := os.WriteFile(n.cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	n.rt, err = cnirun.New(binDir, filepath.Join(dir, "cni-cache"), cnirun.Conflist(n.runDir, o.addTimeout))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Config returns a full agent config: the simulator's plus extra.
func (n *node) Config(extra string) string {
	if n.exclusive {
		return strings.Replace(n.sn.ConfigYAML(), "mode: shared-eni", "mode: exclusive-eni", 1) + extra
	}
	return n.sn.ConfigYAML() + extra
}

// kubeletDir is the node's kubelet root directory: empty unless a test
// writes the kubelet's files there, so no test reads the host's kubelet.
func (n *node) kubeletDir() string { return filepath.Join(n.dir, "kubelet") }

// nodeFlags are the flags run and plan share.
func (n *node) nodeFlags() []string {
	return []string{"--config-file", n.cfgFile, "--config-dir", n.cfgDir, "--run-dir", n.runDir,
		"--state-dir", n.stateDir, "--instance-id", n.sn.Instance.ID, "--node-name", "e2e-node",
		"--datapath", "linux", "--node-netns", n.sn.NodeNS(), "--kubelet-root-dir", n.kubeletDir()}
}

func (n *node) env() []string {
	env := os.Environ()
	for k, v := range n.sn.Env() {
		env = append(env, k+"="+v)
	}
	return env
}

// agentProc is one run of `enid run`.
type agentProc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // set before done is closed
}

// startAgent starts `enid run` as a subprocess; its log goes to a file that
// is printed when the test fails.
func (n *node) startAgent() *agentProc {
	n.t.Helper()
	if n.agent != nil {
		select {
		case <-n.agent.done:
		default:
			n.t.Fatal("startAgent: an agent is still running")
		}
	}
	n.starts++
	logPath := filepath.Join(n.dir, fmt.Sprintf("agent-%d.log", n.starts))
	lf, err := os.Create(logPath)
	if err != nil {
		n.t.Fatal(err)
	}
	args := append([]string{"run", "--metrics-addr", "", "--log-level", "debug"}, n.nodeFlags()...)
	args = append(args, n.agentArgs...)
	cmd := exec.Command(filepath.Join(binDir, "enid"), args...)
	cmd.Env = n.env()
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		n.t.Fatalf("start agent: %v", err)
	}
	a := &agentProc{cmd: cmd, log: logPath, done: make(chan struct{})}
	// The waiter ends when the process exits; kill and stop make sure it
	// does, and the node's cleanup kills whatever is left.
	go func() {
		a.err = cmd.Wait()
		lf.Close()
		close(a.done)
	}()
	n.agent = a
	n.t.Cleanup(func() {
		if n.t.Failed() {
			n.t.Logf("agent log %s (tail; the whole log is kept as %s):\n%s", logPath, keepLog(n.t, logPath), tail(logPath, 60))
		}
	})
	return a
}

// stop sends SIGTERM and waits for the agent to exit (it should, within
// its shutdown grace).
//
// An agent that has not logged yet may still be in Go's package
// initialisation, before `enid run` asks for SIGTERM: the signal's
// default action ends it, as it would any program, and that is not a
// failed stop (there is nothing running to finish; the crash tests cover
// a process that dies at any point). The agent logs only after its
// handler is in place, so a log with a line in it means the agent must
// exit cleanly. (On a loaded CI machine, init of the 70 MB binary took
// more than 500 ms.)
func (a *agentProc) stop(t *testing.T) {
	t.Helper()
	early := false
	if fi, err := os.Stat(a.log); err == nil && fi.Size() == 0 {
		early = true
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("SIGTERM agent: %v", err)
	}
	select {
	case <-a.done:
		var ee *exec.ExitError
		switch {
		case a.err == nil:
		case early && errors.As(a.err, &ee) && terminatedBy(ee, syscall.SIGTERM):
			t.Logf("SIGTERM reached the agent before it had logged (still starting): it ended by the signal's default action")
		default:
			t.Errorf("agent exited with %v after SIGTERM", a.err)
		}
	case <-time.After(20 * time.Second):
		a.kill()
		t.Fatal("agent did not exit within 20s of SIGTERM")
	}
}

// terminatedBy reports whether the process ended by signal sig.
func terminatedBy(ee *exec.ExitError, sig syscall.Signal) bool {
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// kill sends SIGKILL and waits for the process to be gone.
func (a *agentProc) kill() {
	_ = a.cmd.Process.Kill() // already exited is fine: we only need it gone
	<-a.done
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// agentFile reads agent.json.
func (n *node) agentFile() (status.Agent, error) {
	return status.ReadAgent(filepath.Join(n.runDir, "agent.json"))
}

// waitReady waits for the running agent's heartbeat to say it serves.
func (n *node) waitReady(timeout time.Duration) status.Agent {
	n.t.Helper()
	var a status.Agent
	waitFor(n.t, timeout, "agent ready", func() (bool, string) {
		select {
		case <-n.agent.done:
			n.t.Fatalf("agent exited: %v\n%s", n.agent.err, tail(n.agent.log, 40))
		default:
		}
		var err error
		a, err = n.agentFile()
		if err != nil {
			return false, err.Error()
		}
		if a.PID != n.agent.cmd.Process.Pid {
			return false, fmt.Sprintf("heartbeat from pid %d, not %d", a.PID, n.agent.cmd.Process.Pid)
		}
		if err := a.Serving(time.Now(), 10*time.Second); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return a
}

// waitFor polls cond every 50ms until it holds or timeout passes, then
// fails with cond's last word.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, timeout, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// newPod creates a pod sandbox (its network namespace) named name.
func (n *node) newPod(name string) *pod {
	n.t.Helper()
	p, err := n.makePod(name)
	if err != nil {
		n.t.Fatal(err)
	}
	return p
}

// makePod is newPod for goroutines other than the test's.
func (n *node) makePod(name string) (*pod, error) {
	path, cleanup, err := n.sn.Topology.NewPodNS(name)
	if err != nil {
		return nil, fmt.Errorf("pod netns %s: %w", name, err)
	}
	sum := sha256.Sum256([]byte(n.t.Name() + "/" + name))
	p := &pod{Pod: cnirun.Pod{ContainerID: hex.EncodeToString(sum[:]), NetNS: path, IfName: "eth0",
		Namespace: "default", Name: name, UID: "uid-" + hex.EncodeToString(sum[:8])}, cleanup: cleanup}
	n.podsMu.Lock()
	n.pods[p.NetNS] = p
	n.podsMu.Unlock()
	return p, nil
}

// removePod deletes the pod's namespace, as the runtime does after DEL.
func (n *node) removePod(p *pod) {
	n.podsMu.Lock()
	delete(n.pods, p.NetNS)
	n.podsMu.Unlock()
	p.cleanup()
}

// add runs CNI ADD and returns the pod's IPv4 address.
func (n *node) add(ctx context.Context, p *pod) (netip.Addr, error) {
	res, err := n.rt.Add(ctx, p.Pod)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, ip := range res.IPs {
		if a, ok := netip.AddrFromSlice(ip.Address.IP); ok && a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("ADD %s: no IPv4 address in the result", p.Name)
}

// addAll runs ADD for every pod in parallel and fails the test on any error.
func (n *node) addAll(ctx context.Context, pods []*pod) []netip.Addr {
	n.t.Helper()
	ips := make([]netip.Addr, len(pods))
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() { ips[i], errs[i] = n.add(ctx, p) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		n.t.Fatalf("ADD: %v", err)
	}
	return ips
}

// delAll runs DEL for every pod (in parallel) and removes their namespaces.
func (n *node) delAll(ctx context.Context, pods []*pod) {
	n.t.Helper()
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() { errs[i] = n.rt.Del(ctx, p.Pod) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		n.t.Fatalf("DEL: %v", err)
	}
	for _, p := range pods {
		n.removePod(p)
	}
}

// statuses reads every attachment status.
func (n *node) statuses() []status.Attachment {
	n.t.Helper()
	sts, probs, err := status.NewStore(filepath.Join(n.runDir, "status")).ReadAll()
	if err != nil {
		n.t.Fatalf("read statuses: %v", err)
	}
	for _, p := range probs {
		n.t.Errorf("unreadable status: %v", p)
	}
	return sts
}

// enid runs the enid binary with args (and the simulator's environment)
// and returns its exit code, stdout and stderr.
func (n *node) enid(ctx context.Context, args ...string) (int, string, string) {
	n.t.Helper()
	return runEnid(ctx, n.t, n.env(), args...)
}

// runEnid runs the enid binary with env and args and returns its exit
// code, stdout and stderr.
func runEnid(ctx context.Context, t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "enid"), args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	t.Fatalf("run enid %v: %v", args, err)
	return -1, "", ""
}

// plan runs `enid plan` against the node with extra args.
func (n *node) plan(ctx context.Context, args ...string) (int, string, string) {
	n.t.Helper()
	return n.enid(ctx, append(append([]string{"plan", "--log-level", "error"}, n.nodeFlags()...), args...)...)
}

// swapConfigMap publishes cfg the way kubelet updates a ConfigMap volume:
// a new ..<timestamp> directory, a ..data_tmp symlink to it, renamed onto
// ..data in one step.
func (n *node) swapConfigMap(cfg string) {
	n.t.Helper()
	dir := n.configMapDir
	ts := ".." + time.Now().UTC().Format("2006_01_02_15_04_05.000000000")
	if err := os.MkdirAll(filepath.Join(dir, ts), 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ts, "config.yaml"), []byte(cfg), 0o644); err != nil {
		n.t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data")) // none on the first publish
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		n.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		n.t.Fatal(err)
	}
	if old != "" {
		// kubelet removes the previous version once ..data points away.
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			n.t.Fatal(err)
		}
	}
}

// statusOf reads one pod's status.
func (n *node) statusOf(p *pod) (status.Attachment, error) {
	return status.NewStore(filepath.Join(n.runDir, "status")).Read(p.ContainerID, p.IfName)
}

// keepLog copies a failed test's agent log out of its temporary directory
// (removed when the test ends) into $TMPDIR/enid-e2e-failed, and returns
// the copy's path ("" when it could not be kept): the tail printed is
// often not where the failure began.
func keepLog(t *testing.T, path string) string {
	dir := filepath.Join(os.TempDir(), "enid-e2e-failed")
	b, err := os.ReadFile(path)
	if err != nil || os.MkdirAll(dir, 0o755) != nil {
		return ""
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + "-" + filepath.Base(path)
	kept := filepath.Join(dir, name)
	if os.WriteFile(kept, b, 0o644) != nil {
		return ""
	}
	return kept
}
