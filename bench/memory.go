package main

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/internal/poll"
	"github.com/enidnet/enid/reconcile/status"
)

// memType holds the memory scenario's pods on one node.
const memType = "ecs.sim.dense"

// Memory at scale (issue 28): entries on one node in prefix mode, on a
// type that holds 3,248 pods; beyond that the entries fail with ip-limit,
// which still costs the agent their entries, statuses and plans.
const (
	memScaleType   = "ecs.g7.4xlarge"
	memScaleSmall  = 1000
	memScaleLarge  = 5000
	memScaleTarget = 100 // MiB at memScaleSmall
	memScaleLimit  = 200 // MiB at memScaleLarge
)

// runMemory runs `enid run` as a subprocess (no datapath) against an
// in-process simulator and reads its peak RSS (VmHWM) idle, then with
// memPods pods; then the same at scale (in the quick run 1,000 entries
// alone, whose bound it holds as an invariant).
func runMemory(ctx context.Context, e env) []Result {
	n := e.sizes.memPods
	r := Result{Scenario: "memory", Setup: fmt.Sprintf("`enid run --datapath none` as a subprocess on a %s node (default pool), VmHWM from /proc/<pid>/status idle and with %d pods", memType, n)}
	m, err := memoryOnce(ctx, e, "memory", memType, "", n)
	if err != nil {
		r.broken("%v", err)
		return []Result{r}
	}
	if m.check != nil {
		r.broken("simulator Check: %v", m.check)
	}
	r.add("peak RSS, 0 pods", m.idle, "MiB")
	r.add(fmt.Sprintf("peak RSS, %d pods", n), m.full, "MiB")
	r.judge(fmt.Sprintf("< 50 MiB with %d pods", n), m.full < 50)
	if n != 250 {
		r.Target += " (target is for 250)"
	}
	out := []Result{r}
	sizes := []int{memScaleSmall, memScaleLarge}
	if e.quick {
		sizes = sizes[:1]
	}
	s := Result{Scenario: "memory at scale", Setup: fmt.Sprintf("`enid run --datapath none` on a %s node in prefix mode (holds 3248 pods), VmHWM with %s entries written at once (past 3248 they fail with ip-limit)", memScaleType, joinInts(sizes))}
	var peaks []float64
	for _, k := range sizes {
		m, err := memoryOnce(ctx, e, fmt.Sprintf("memory-%d", k), memScaleType, "  ipv4Allocation: prefix\n", k)
		if err != nil {
			s.broken("%d entries: %v", k, err)
			return append(out, s)
		}
		if m.check != nil {
			s.broken("simulator Check: %v", m.check)
		}
		s.add(fmt.Sprintf("peak RSS, %d entries", k), m.full, "MiB")
		s.note("%d entries: %d Ready, %d Failed, all answered in %s", k, m.ready, m.failed, m.took.Round(time.Millisecond))
		peaks = append(peaks, m.full)
	}
	if e.quick {
		// The quick run (CI's smoke) holds the 1,000-entry bound as an
		// invariant: memory kept per pass is a leak that no other test
		// sees (6317532 took this peak from 65 to 186 MiB unnoticed;
		// docs/benchmarks.md, "Lost and found again").
		s.judge(fmt.Sprintf("< %d MiB with %d", memScaleTarget, memScaleSmall), peaks[0] < memScaleTarget)
		if peaks[0] >= memScaleTarget {
			s.broken("peak RSS %.0f MiB with %d entries at once: over the %d MiB bound (memory kept from pass to pass?)", peaks[0], memScaleSmall, memScaleTarget)
		}
		return append(out, s)
	}
	s.judge(fmt.Sprintf("< %d MiB with %d, < %d MiB with %d", memScaleTarget, memScaleSmall, memScaleLimit, memScaleLarge),
		peaks[0] < memScaleTarget && peaks[1] < memScaleLimit)
	return append(out, s)
}

// memoryRun is what one memory measurement found.
type memoryRun struct {
	check         error         // the simulator's model check at the end
	idle, full    float64       // peak RSS (MiB) idle, and with the pods
	ready, failed int           // entries answered Ready, Failed
	took          time.Duration // from writing the entries to every one answered
}

// memoryOnce starts `enid run --datapath none` on a node of the given
// type (extra lines under eni:), waits for it to warm its pool, reads its
// peak RSS, writes n entries at once, waits until each is answered (Ready
// or Failed) and reads the peak again.
func memoryOnce(ctx context.Context, e env, name, instType, eni string, n int) (m memoryRun, err error) {
	dir := filepath.Join(e.workDir, name)
	bin, err := buildEnid(ctx, e, dir)
	if err != nil {
		return m, err
	}
	sim, err := ecssim.New(ecssim.Config{
		VSwitches: []ecssim.VSwitchConfig{{ID: "vsw-mem", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.0.0/16")}},
		Zones:     []string{"cn-hangzhou-h"},
	})
	if err != nil {
		return m, fmt.Errorf("simulator: %w", err)
	}
	defer sim.Close()
	defer func() { m.check = sim.Check() }()
	inst, err := sim.AddInstance(ecssim.InstanceSpec{InstanceType: instType})
	if err == nil {
		err = sim.Start("127.0.0.1:0", "127.0.0.1:0")
	}
	if err != nil {
		return m, fmt.Errorf("simulator: %w", err)
	}
	for _, d := range []string{"etc/config.d", "run", "state"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return m, err
		}
	}
	cfgFile := filepath.Join(dir, "etc", "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(configYAMLENI(sim, inst.Zone, eni, "", "")), 0o644); err != nil {
		return m, err
	}
	var extra []string
	if e.sizes.memPprof != "" {
		extra = []string{"--metrics-addr", e.sizes.memPprof, "--pprof"}
	}
	proc, err := startEnidRun(ctx, bin, dir, cfgFile, sim, inst.ID, extra...)
	if err != nil {
		return m, err
	}
	defer proc.stop()
	if err := proc.waitAgent(ctx, func(h status.Agent) bool { return h.Ready && h.Pool.Idle >= desired.DefaultMinIdle }); err != nil {
		return m, fmt.Errorf("agent never ready: %w", err)
	}
	time.Sleep(2 * time.Second)
	if m.idle, err = vmHWM(proc.cmd.Process.Pid); err != nil {
		return m, err
	}
	t0 := time.Now()
	m.ready, m.failed, err = memPodsAnswered(ctx, filepath.Join(dir, "run"), n)
	m.took = time.Since(t0)
	if err != nil {
		return m, fmt.Errorf("%d of %d entries never answered: %w", n-m.ready-m.failed, n, err)
	}
	if m.failed > 0 && n <= 3248 {
		return m, fmt.Errorf("%d of %d pods Failed on a node that holds them", m.failed, n)
	}
	time.Sleep(2 * time.Second)
	if m.full, err = vmHWM(proc.cmd.Process.Pid); err != nil {
		return m, err
	}
	return m, nil
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
func startEnidRun(ctx context.Context, bin, dir, cfgFile string, sim *ecssim.Server, instanceID string, extra ...string) (*enidProc, error) {
	cctx, cancel := context.WithCancel(ctx)
	args := append([]string{"run", "--config-file", cfgFile, "--config-dir", filepath.Join(dir, "etc", "config.d"),
		"--run-dir", filepath.Join(dir, "run"), "--state-dir", filepath.Join(dir, "state"), "--instance-id", instanceID,
		"--node-name", "mem", "--datapath", "none", "--metrics-addr", "", "--log-level", "error"}, extra...)
	cmd := exec.CommandContext(cctx, bin, args...)
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
	return poll.Until(ctx, clock.Real{}, 2*time.Minute, 20*time.Millisecond, func() (bool, error) {
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

// memPodsAnswered writes n pod entries in runDir and waits until each has
// a Ready or Failed status answering its revision; it returns how many are
// of each.
func memPodsAnswered(ctx context.Context, runDir string, n int) (ready, failed int, err error) {
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
			return 0, 0, err
		}
		pods = append(pods, want{en.Key(), rev})
	}
	err = poll.Until(ctx, clock.Real{}, 5*time.Minute, 100*time.Millisecond, func() (bool, error) {
		ready, failed = 0, 0
		sts, _, err := statuses.ReadAll()
		if err != nil {
			return false, err
		}
		byKey := make(map[desired.Key]status.Attachment, len(sts))
		for _, st := range sts {
			byKey[desired.Key{ContainerID: st.ContainerID, IfName: st.IfName}] = st
		}
		for _, p := range pods {
			st, ok := byKey[p.key]
			switch {
			case !ok || st.Revision != p.rev:
			case st.Phase == status.Ready:
				ready++
			case st.Phase == status.Failed:
				failed++
			}
		}
		return ready+failed == n, nil
	})
	return ready, failed, err
}

// vmHWM reads a process's peak resident set size in MiB.
func vmHWM(pid int) (float64, error) { return procStatusMiB(pid, "VmHWM:") }
