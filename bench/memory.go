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
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(cctx, bin, "run", "--config-file", cfgFile, "--config-dir", filepath.Join(dir, "etc", "config.d"),
		"--run-dir", filepath.Join(dir, "run"), "--state-dir", filepath.Join(dir, "state"), "--instance-id", inst.ID,
		"--node-name", "mem", "--datapath", "none", "--metrics-addr", "", "--log-level", "error")
	cmd.Env = os.Environ()
	for k, v := range map[string]string{
		"ENID_ECS_ENDPOINT": sim.Endpoint(), "ENID_METADATA_ENDPOINT": sim.MetadataURL(inst.ID),
		"ALIBABA_CLOUD_ACCESS_KEY_ID": ecssim.DefaultAccessKeyID, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": ecssim.DefaultAccessKeySecret,
		"ALIBABA_CLOUD_REGION_ID": sim.Dump().Region,
	} {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		r.broken("start enid run: %v", err)
		return []Result{r}
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(os.Interrupt) //nolint:errcheck // it may have exited already; Wait below tells
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cancel()
			<-exited
		}
	}()
	agentFile := filepath.Join(dir, "run", "agent.json")
	waitAgent := func(cond func(status.Agent) bool) error {
		return poll(ctx, 2*time.Minute, 20*time.Millisecond, func() (bool, error) {
			select {
			case err := <-exited:
				exited <- err
				return false, fmt.Errorf("enid run exited: %v: %s", err, lastLines(stderr.Bytes(), 5))
			default:
			}
			h, err := status.ReadAgent(agentFile)
			return err == nil && cond(h), nil
		})
	}
	if err := waitAgent(func(h status.Agent) bool { return h.Ready && h.Pool.Idle >= desired.DefaultMinIdle }); err != nil {
		r.broken("agent never ready: %v", err)
		return []Result{r}
	}
	time.Sleep(2 * time.Second)
	idle, err := vmHWM(cmd.Process.Pid)
	if err != nil {
		r.broken("%v", err)
		return []Result{r}
	}
	entries := desired.NewEntryStore(filepath.Join(dir, "run", "pods"))
	statuses := status.NewStore(filepath.Join(dir, "run", "status"))
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
			r.broken("%v", err)
			return []Result{r}
		}
		pods = append(pods, want{en.Key(), rev})
	}
	notReady := 0
	err = poll(ctx, 2*time.Minute, 50*time.Millisecond, func() (bool, error) {
		notReady = 0
		for _, p := range pods {
			st, err := statuses.Read(p.key.ContainerID, p.key.IfName)
			if err != nil || st.Revision != p.rev || st.Phase != status.Ready {
				notReady++
			}
		}
		return notReady == 0, nil
	})
	if err != nil {
		r.broken("%d of %d pods never Ready: %v", notReady, n, err)
	}
	time.Sleep(2 * time.Second)
	full, err := vmHWM(cmd.Process.Pid)
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
