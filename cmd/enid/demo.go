package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/enidnet/enid/internal/cnirun"
	"github.com/enidnet/enid/internal/simnode"
	"github.com/enidnet/enid/internal/simvpc"
	"github.com/enidnet/enid/reconcile/status"
)

func newDemoCmd() *cobra.Command {
	var (
		pods    int
		workDir string
		verbose bool
		mode    string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show enid end to end on the built-in simulator",
		Long: `Start the ECS simulator and the agent, create pods through the real enid-cni
plugin (driven by libcni as containerd drives it), show "enid plan" before and
after, the status table, delete the pods and watch the pool settle.

As root, every pod gets a real network namespace and a veth; the simulator
plugs each attached ENI into a namespace that plays the node, and the demo
pings between pods and from the VPC. Without root it says so and runs without
a datapath (statuses and cloud calls only).`,
		Example: `  go run ./cmd/enid demo
  sudo enid demo --pods 10`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pods < 1 || pods > 200 {
				return fmt.Errorf("--pods %d: choose 1..200", pods)
			}
			if mode != "shared-eni" && mode != "exclusive-eni" {
				return fmt.Errorf("--mode %q: use shared-eni or exclusive-eni", mode)
			}
			if mode == "exclusive-eni" && !cmd.Flags().Changed("pods") {
				// One ENI per pod: the simulated instance type has room
				// for 3 besides the primary, fewer than the shared default.
				pods = 3
			}
			// Ctrl-C or SIGTERM ends the demo through its cleanup: the
			// namespaces it made are removed, not left behind.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runDemo(ctx, cmd.OutOrStdout(), pods, workDir, verbose, mode)
		},
	}
	cmd.Flags().IntVar(&pods, "pods", 6, "pods to create (default 3 with --mode exclusive-eni)")
	cmd.Flags().StringVar(&workDir, "work-dir", "", "keep the demo's files here (default: a temporary directory, removed at the end)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "show the agent's log")
	cmd.Flags().StringVar(&mode, "mode", "shared-eni", "shared-eni (pods share ENIs) or exclusive-eni (one ENI moved into each pod)")
	return cmd
}

// demoConfig is the pool the demo runs with: small, so settling is visible.
const demoPool = `pool:
  minIdle: 2
  maxIdle: 4
  batch: 5
  releaseDelay: 2s
  cooldown: 1s
resyncPeriod: 30s
`

// demoExclusivePool keeps one spare ENI: each pod takes a whole ENI.
const demoExclusivePool = `pool:
  minIdle: 1
  maxIdle: 1
  releaseDelay: 2s
  cooldown: 1s
resyncPeriod: 30s
`

func runDemo(ctx context.Context, out io.Writer, n int, workDir string, verbose bool, mode string) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	step := func(title string) { say("\n== %s", title) }

	if workDir == "" {
		workDir, err = os.MkdirTemp("", "enid-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(workDir)
	}
	root := os.Geteuid() == 0
	step("Starting the ECS simulator")
	sn, err := simnode.Start(simnode.Options{Datapath: root, Name: "eniddemo"})
	if err != nil {
		return err
	}
	defer sn.Close()
	say("instance %s (%s) in %s, primary ENI %s", sn.Instance.ID, sn.Instance.InstanceType, sn.Instance.Zone, sn.Instance.PrimaryENI)
	if root {
		say("running as root: the node is network namespace %s; attached ENIs appear there as veths", sn.NodeNS())
	} else {
		say("not running as root: no datapath. Pods get addresses and statuses, but no kernel state and no pings.")
	}
	for k, v := range sn.Env() {
		os.Setenv(k, v)
	}

	f := nodeFlags{
		configFile: filepath.Join(workDir, "etc", "config.yaml"), configDir: filepath.Join(workDir, "etc", "config.d"),
		runDir: filepath.Join(workDir, "run"), stateDir: filepath.Join(workDir, "state"),
		nodeName: "demo-node", instanceID: sn.Instance.ID, datapath: "none", logLevel: "info",
	}
	if root {
		f.datapath, f.nodeNetNS = "linux", sn.NodeNS()
	}
	if err := os.MkdirAll(f.configDir, 0o755); err != nil {
		return err
	}
	cfg, minIdle, maxIdle := sn.ConfigYAML()+demoPool, 2, 4
	if mode == "exclusive-eni" {
		minIdle, maxIdle = 1, 1
		cfg = strings.Replace(sn.ConfigYAML(), "mode: shared-eni", "mode: exclusive-eni", 1) + demoExclusivePool
	}
	if err := os.WriteFile(f.configFile, []byte(cfg), 0o644); err != nil {
		return err
	}
	say("config %s:\n%s", f.configFile, indent(cfg))

	planCmd := &cobra.Command{}
	planCmd.SetContext(ctx)
	planCmd.SetErr(out)
	showPlan := func(title string) error {
		step(title)
		p, err := makePlan(planCmd, &f)
		if err != nil {
			return err
		}
		fmt.Fprint(out, p.Render())
		return nil
	}
	if err := showPlan("$ enid plan   (before the agent starts: what it would do)"); err != nil {
		return err
	}

	step("Starting the agent")
	logOut := io.Discard
	if verbose {
		logOut = out
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
	agentCtx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan error, 1)
	// The demo never talks to a Kubernetes API server.
	go func() { agentDone <- runAgent(agentCtx, planCmd, &f, &kubeFlags{}, true, "", log) }()
	defer func() {
		stopAgent()
		if aerr := <-agentDone; aerr != nil && err == nil {
			err = aerr
		}
	}()
	agentFile := filepath.Join(f.runDir, "agent.json")
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		select {
		case err := <-agentDone:
			agentDone <- err
			return false, fmt.Errorf("the agent stopped: %v", err)
		default:
		}
		a, err := status.ReadAgent(agentFile)
		return err == nil && a.Ready && a.Pool.Idle >= minIdle, nil
	}); err != nil {
		return fmt.Errorf("agent did not warm its pool: %w", err)
	}
	a, _ := status.ReadAgent(agentFile) // read just above
	say("agent ready: pool of %d IPs on %d ENI(s), %d idle", a.Pool.Total, a.Pool.ENIs, a.Pool.Idle)
	if err := showPlan("$ enid plan   (converged)"); err != nil {
		return err
	}

	step(fmt.Sprintf("Creating %d pods through enid-cni (CNI ADD, in parallel)", n))
	pluginDir, err := cnirun.Plugin(filepath.Join(workDir, "bin"))
	if err != nil {
		return err
	}
	rt, err := cnirun.New(pluginDir, filepath.Join(workDir, "cni-cache"), cnirun.Conflist(f.runDir, 60*time.Second))
	if err != nil {
		return err
	}
	type podRun struct {
		pod     cnirun.Pod
		ip      netip.Addr
		took    time.Duration
		err     error
		cleanup func()
	}
	runs := make([]podRun, n)
	for i := range runs {
		id := make([]byte, 32)
		if _, err := rand.Read(id); err != nil {
			return err
		}
		p := cnirun.Pod{ContainerID: hex.EncodeToString(id), IfName: "eth0", Namespace: "default",
			Name: fmt.Sprintf("web-%d", i), UID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i)}
		nsName := fmt.Sprintf("eniddemo-pod%d", i)
		if root {
			path, cleanup, err := sn.Topology.NewPodNS(nsName)
			if err != nil {
				return err
			}
			p.NetNS, runs[i].cleanup = path, cleanup
		} else {
			// Without root nothing enters the netns; the path only has to be
			// absolute and stable.
			p.NetNS = "/var/run/netns/" + nsName
		}
		runs[i].pod = p
	}
	defer func() {
		for _, r := range runs {
			if r.cleanup != nil {
				r.cleanup()
			}
		}
	}()
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			res, err := rt.Add(ctx, runs[i].pod)
			runs[i].took, runs[i].err = time.Since(start), err
			if err == nil && len(res.IPs) > 0 {
				runs[i].ip = netip.MustParseAddr(res.IPs[0].Address.IP.String())
			}
		}()
	}
	wg.Wait()
	for _, r := range runs {
		if r.err != nil {
			return fmt.Errorf("ADD %s: %w", r.pod.Name, r.err)
		}
		say("  %-8s %-15s ready in %s", r.pod.Name, r.ip, r.took.Round(time.Millisecond))
	}

	if root && n >= 1 {
		step("Pinging through the simulated VPC")
		ping := func(ns string, dst netip.Addr) error {
			pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			return simvpc.Ping(pctx, ns, dst)
		}
		failed := 0
		for i, r := range runs {
			dst := runs[(i+1)%n]
			if n > 1 {
				err := ping(r.pod.NetNS, dst.ip)
				failed += min(1, countErr(err))
				say("  %s -> %s (%s): %s", r.pod.Name, dst.pod.Name, dst.ip, okOr(err))
			}
			err := ping(sn.Topology.VPCNS, r.ip)
			failed += min(1, countErr(err))
			say("  vpc router -> %s (%s): %s", r.pod.Name, r.ip, okOr(err))
		}
		if failed > 0 {
			return fmt.Errorf("%d pings failed", failed)
		}
	}

	step("$ enid status")
	if err := printStatusFrom(out, f.runDir); err != nil {
		return err
	}
	if err := showPlan("$ enid plan   (with the pods running)"); err != nil {
		return err
	}

	step("Deleting the pods (CNI DEL)")
	for _, r := range runs {
		if err := rt.Del(ctx, r.pod); err != nil {
			return fmt.Errorf("DEL %s: %w", r.pod.Name, err)
		}
	}
	say("deleted %d pods; waiting for the pool to settle (releaseDelay 2s, maxIdle %d)", n, maxIdle)
	var last string
	if err := waitFor(ctx, 60*time.Second, func() (bool, error) {
		a, err := status.ReadAgent(agentFile)
		if err != nil {
			return false, nil
		}
		line := fmt.Sprintf("  pool: %d IPs on %d ENI(s): %d used, %d idle, %d cooldown", a.Pool.Total, a.Pool.ENIs, a.Pool.Used, a.Pool.Idle, a.Pool.Cooldown)
		if line != last {
			say("%s", line)
			last = line
		}
		if a.Pool.Used != 0 || a.Pool.Idle > maxIdle || a.Pool.Cooldown > 0 {
			return false, nil
		}
		p, err := makePlan(planCmd, &f)
		return err == nil && p.Empty(), nil
	}); err != nil {
		return fmt.Errorf("the pool did not settle: %w", err)
	}
	if err := showPlan("$ enid plan   (settled)"); err != nil {
		return err
	}

	step("Cloud calls the simulator answered")
	printCounters(out, sn.Sim.Counters())
	say("\nDone. Everything ran on the simulator; nothing left this machine.")
	return nil
}

func countErr(err error) int {
	if err != nil {
		return 1
	}
	return 0
}

func okOr(err error) string {
	if err != nil {
		return "FAILED: " + err.Error()
	}
	return "ok"
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

func printStatusFrom(out io.Writer, runDir string) error {
	var rep statusReport
	a, err := status.ReadAgent(filepath.Join(runDir, "agent.json"))
	if err != nil {
		rep.AgentErr = err.Error()
	} else {
		rep.Agent = &a
	}
	pods, _, err := status.NewStore(filepath.Join(runDir, "status")).ReadAll()
	if err != nil {
		return err
	}
	rep.Pods = pods
	printStatus(out, rep, time.Now())
	return nil
}

func printCounters(out io.Writer, c map[string]map[string]int) {
	var actions []string
	for a := range c {
		actions = append(actions, a)
	}
	sort.Strings(actions)
	total := 0
	for _, a := range actions {
		var parts []string
		var outcomes []string
		for o := range c[a] {
			outcomes = append(outcomes, o)
		}
		sort.Strings(outcomes)
		for _, o := range outcomes {
			parts = append(parts, fmt.Sprintf("%s %d", o, c[a][o]))
			total += c[a][o]
		}
		fmt.Fprintf(out, "  %-30s %s\n", a, strings.Join(parts, ", "))
	}
	fmt.Fprintf(out, "  %-30s %d\n", "total", total)
}

// waitFor polls cond every 100ms until it holds, fails, or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
