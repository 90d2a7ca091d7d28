package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/poll"
	"github.com/enidnet/enid/reconcile/status"
)

// memType holds the memory scenario's pods on one node.
const memType = "ecs.sim.dense"

// runMemory runs `enid run` as a subprocess (no datapath) against an
// in-process simulator and reads its peak RSS (VmHWM) idle, then with
// memPods pods.
func runMemory(ctx context.Context, e env) []Result {
	n := e.sizes.memPods
	r := Result{Scenario: "memory", Setup: fmt.Sprintf("`enid run --datapath none` as a subprocess on a %s node (default pool), VmHWM from /proc/<pid>/status idle and with %d pods", memType, n)}
	dir := filepath.Join(e.workDir, "memory")
	bin := filepath.Join(dir, "enid")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/enid")
	build.Dir = e.srcDir
	if out, err := build.CombinedOutput(); err != nil {
		r.broken("build enid: %v: %s", err, lastLines(out, 5))
		return []Result{r}
	}
	sim, err := ecssim.New(ecssim.Config{
		VSwitches: []ecssim.VSwitchConfig{{ID: "vsw-mem", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.16.0/20")}},
		Zones:     []string{"cn-hangzhou-h"},
	})
	if err != nil {
		r.broken("simulator: %v", err)
		return []Result{r}
	}
	defer sim.Close()
	inst, err := sim.AddInstance(ecssim.InstanceSpec{InstanceType: memType})
	if err == nil {
		err = sim.Start("127.0.0.1:0", "127.0.0.1:0")
	}
	if err != nil {
		r.broken("simulator: %v", err)
		return []Result{r}
	}
	for _, d := range []string{"etc/config.d", "run", "state"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			r.broken("%v", err)
			return []Result{r}
		}
	}
	cfgFile := filepath.Join(dir, "etc", "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(configYAML(sim, inst.Zone, "", "")), 0o644); err != nil {
		r.broken("%v", err)
		return []Result{r}
	}
	proc, err := startEnidRun(ctx, bin, dir, cfgFile, sim, inst.ID)
	if err != nil {
		r.broken("%v", err)
		return []Result{r}
	}
	defer proc.stop()
	if err := proc.waitAgent(ctx, func(h status.Agent) bool { return h.Ready && h.Pool.Idle >= desired.DefaultMinIdle }); err != nil {
		r.broken("agent never ready: %v", err)
		return []Result{r}
	}
	time.Sleep(2 * time.Second)
	idle, err := vmHWM(proc.cmd.Process.Pid)
	if err != nil {
		r.broken("%v", err)
		return []Result{r}
	}
	notReady, err := memPodsReady(ctx, filepath.Join(dir, "run"), n)
	if err != nil {
		r.broken("%d of %d pods never Ready: %v", notReady, n, err)
	}
	time.Sleep(2 * time.Second)
	full, err := vmHWM(proc.cmd.Process.Pid)
	if err != nil {
		r.broken("%v", err)
		return []Result{r}
	}
	simCheck(&r, sim)
	r.add("peak RSS, 0 pods", idle, "MiB")
	r.add(fmt.Sprintf("peak RSS, %d pods", n), full, "MiB")
	r.judge(fmt.Sprintf("< 50 MiB with %d pods", n), full < 50)
	if n != 250 {
		r.Target += " (target is for 250)"
	}
	return []Result{r}
}

// enidProc is `enid run` running as a subprocess.
type enidProc struct {
	cmd       *exec.Cmd
	cancel    context.CancelFunc
	exited    chan error
	stderr    *bytes.Buffer
	agentFile string
}

// startEnidRun starts bin as `enid run --datapath none` in dir against sim,
// passing the simulator's endpoints and keys in its environment.
func startEnidRun(ctx context.Context, bin, dir, cfgFile string, sim *ecssim.Server, instanceID string) (*enidProc, error) {
	cctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(cctx, bin, "run", "--config-file", cfgFile, "--config-dir", filepath.Join(dir, "etc", "config.d"),
		"--run-dir", filepath.Join(dir, "run"), "--state-dir", filepath.Join(dir, "state"), "--instance-id", instanceID,
		"--node-name", "mem", "--datapath", "none", "--metrics-addr", "", "--log-level", "error")
	cmd.Env = os.Environ()
	for k, v := range map[string]string{
		"ENID_ECS_ENDPOINT": sim.Endpoint(), "ENID_METADATA_ENDPOINT": sim.MetadataURL(instanceID),
		"ALIBABA_CLOUD_ACCESS_KEY_ID": ecssim.DefaultAccessKeyID, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": ecssim.DefaultAccessKeySecret,
		"ALIBABA_CLOUD_REGION_ID": sim.Dump().Region,
	} {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &enidProc{cmd: cmd, cancel: cancel, exited: make(chan error, 1), stderr: &bytes.Buffer{},
		agentFile: filepath.Join(dir, "run", "agent.json")}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("start enid run: %w", err)
	}
	go func() { p.exited <- cmd.Wait() }()
	return p, nil
}

// stop interrupts the agent and waits for it (15 s, then kills it).
func (p *enidProc) stop() {
	defer p.cancel()
	p.cmd.Process.Signal(os.Interrupt) //nolint:errcheck // it may have exited already; Wait below tells
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		p.cancel()
		<-p.exited
	}
}

// waitAgent waits until the agent's heartbeat satisfies cond, failing when
// the process exits.
func (p *enidProc) waitAgent(ctx context.Context, cond func(status.Agent) bool) error {
	return poll.Until(ctx, 2*time.Minute, 20*time.Millisecond, func() (bool, error) {
		select {
		case err := <-p.exited:
			p.exited <- err
			return false, fmt.Errorf("enid run exited: %v: %s", err, lastLines(p.stderr.Bytes(), 5))
		default:
		}
		h, err := status.ReadAgent(p.agentFile)
		return err == nil && cond(h), nil
	})
}

// memPodsReady writes n pod entries in runDir and waits until each has a
// Ready status answering its revision; it returns how many did not.
func memPodsReady(ctx context.Context, runDir string, n int) (int, error) {
	entries := desired.NewEntryStore(filepath.Join(runDir, "pods"))
	statuses := status.NewStore(filepath.Join(runDir, "status"))
	type want struct {
		key desired.Key
		rev string
	}
	var pods []want
	for i := range n {
		en := desired.Entry{APIVersion: desired.EntryAPIVersion, ContainerID: containerID(fmt.Sprintf("mem-%d", i)), IfName: "eth0",
			NetNS: fmt.Sprintf("/var/run/netns/mem-%d", i), PodNamespace: "bench", PodName: fmt.Sprintf("mem-%d", i), Created: time.Now().UTC()}
		rev, err := entries.Write(en)
		if err != nil {
			return n, err
		}
		pods = append(pods, want{en.Key(), rev})
	}
	notReady := 0
	err := poll.Until(ctx, 2*time.Minute, 50*time.Millisecond, func() (bool, error) {
		notReady = 0
		for _, p := range pods {
			st, err := statuses.Read(p.key.ContainerID, p.key.IfName)
			if err != nil || st.Revision != p.rev || st.Phase != status.Ready {
				notReady++
			}
		}
		return notReady == 0, nil
	})
	return notReady, err
}

// vmHWM reads a process's peak resident set size in MiB.
func vmHWM(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				return 0, fmt.Errorf("parse VmHWM %q: %w", v, err)
			}
			return float64(kb) / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}
