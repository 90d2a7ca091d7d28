package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/internal/poll"
	"github.com/enidnet/enid/reconcile/status"
	"github.com/enidnet/enid/testbed/cnirun"
	"github.com/enidnet/enid/testbed/simnode"
	"github.com/enidnet/enid/testbed/simvpc"
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

// demoPool is the pool the demo runs with: small, so settling is visible.
// It is a drop-in over the simulator's config, as an operator would write
// one.
const demoPool = `apiVersion: enid.dev/v1alpha1
kind: AgentConfig
pool:
  minIdle: 2
  maxIdle: 4
  batch: 5
  releaseDelay: 2s
  cooldown: 1s
resyncPeriod: 30s
`

// demoExclusivePool keeps one spare ENI: each pod takes a whole ENI.
const demoExclusivePool = `apiVersion: enid.dev/v1alpha1
kind: AgentConfig
mode: exclusive-eni
pool:
  minIdle: 1
  maxIdle: 1
  releaseDelay: 2s
  cooldown: 1s
resyncPeriod: 30s
`

// demo is one run of `enid demo`: the simulated node, the agent's flags
// pointing at it, and what the steps share.
type demo struct {
	out              io.Writer
	root             bool
	sn               *simnode.Node
	f                nodeFlags
	planCmd          *cobra.Command
	agentFile        string
	minIdle, maxIdle int
}

// demoPod is one pod the demo creates, with what its ADD gave.
type demoPod struct {
	pod     cnirun.Pod
	ip      netip.Addr
	took    time.Duration
	err     error
	cleanup func()
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }
func (d *demo) step(title string)              { d.say("\n== %s", title) }

func runDemo(ctx context.Context, out io.Writer, n int, workDir string, verbose bool, mode string) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if workDir == "" {
		workDir, err = os.MkdirTemp("", "enid-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(workDir)
	}
	d := &demo{out: out, root: os.Geteuid() == 0}
	d.step("Starting the ECS simulator")
	d.sn, err = simnode.Start(simnode.Options{Datapath: d.root, Name: "eniddemo"})
	if err != nil {
		return err
	}
	defer d.sn.Close()
	if err := d.configure(ctx, workDir, mode); err != nil {
		return err
	}
	if err := d.showPlan("$ enid plan   (before the agent starts: what it would do)"); err != nil {
		return err
	}

	d.step("Starting the agent")
	stopAgent, agentDone := d.startAgent(ctx, out, verbose)
	defer func() {
		stopAgent()
		if aerr := <-agentDone; aerr != nil && err == nil {
			err = aerr
		}
	}()
	if err := d.waitWarm(ctx, agentDone); err != nil {
		return err
	}
	if err := d.showPlan("$ enid plan   (converged)"); err != nil {
		return err
	}

	d.step(fmt.Sprintf("Creating %d pods through enid-cni (CNI ADD, in parallel)", n))
	rt, err := d.cniRuntime(workDir)
	if err != nil {
		return err
	}
	pods, err := d.newPods(n)
	defer func() {
		for _, p := range pods {
			if p.cleanup != nil {
				p.cleanup()
			}
		}
	}()
	if err != nil {
		return err
	}
	if err := d.addPods(ctx, rt, pods); err != nil {
		return err
	}
	if d.root {
		d.step("Pinging through the simulated VPC")
		if err := d.ping(ctx, pods); err != nil {
			return err
		}
	}

	d.step("$ enid status")
	if err := printStatusFrom(out, d.f.runDir); err != nil {
		return err
	}
	if err := d.showPlan("$ enid plan   (with the pods running)"); err != nil {
		return err
	}

	d.step("Deleting the pods (CNI DEL)")
	for _, p := range pods {
		if err := rt.Del(ctx, p.pod); err != nil {
			return fmt.Errorf("DEL %s: %w", p.pod.Name, err)
		}
	}
	if err := d.waitSettled(ctx, len(pods)); err != nil {
		return err
	}
	if err := d.showPlan("$ enid plan   (settled)"); err != nil {
		return err
	}

	d.step("Cloud calls the simulator answered")
	printCounters(out, d.sn.Sim.Counters())
	d.say("\nDone. Everything ran on the simulator; nothing left this machine.")
	return nil
}

// configure points the agent's flags at the simulated node and writes its
// config: the simulator's as the main file, the demo's pool (and mode) as a
// drop-in. The cloud endpoints, region and keys are passed in the flags'
// environment, not set in the process's.
func (d *demo) configure(ctx context.Context, workDir, mode string) error {
	sn := d.sn
	d.say("instance %s (%s) in %s, primary ENI %s", sn.Instance.ID, sn.Instance.InstanceType, sn.Instance.Zone, sn.Instance.PrimaryENI)
	if d.root {
		d.say("running as root: the node is network namespace %s; attached ENIs appear there as veths", sn.NodeNS())
	} else {
		d.say("not running as root: no datapath. Pods get addresses and statuses, but no kernel state and no pings.")
	}
	d.f = nodeFlags{
		configFile: filepath.Join(workDir, "etc", "config.yaml"), configDir: filepath.Join(workDir, "etc", "config.d"),
		runDir: filepath.Join(workDir, "run"), stateDir: filepath.Join(workDir, "state"),
		nodeName: "demo-node", instanceID: sn.Instance.ID, datapath: "none", logLevel: "info",
		env: sn.Env(),
	}
	if d.root {
		d.f.datapath, d.f.nodeNetNS = "linux", sn.NodeNS()
	}
	d.agentFile = filepath.Join(d.f.runDir, "agent.json")
	if err := os.MkdirAll(d.f.configDir, 0o755); err != nil {
		return err
	}
	dropIn, dropInFile := demoPool, filepath.Join(d.f.configDir, "50-demo.yaml")
	d.minIdle, d.maxIdle = 2, 4
	if mode == "exclusive-eni" {
		dropIn, d.minIdle, d.maxIdle = demoExclusivePool, 1, 1
	}
	for file, text := range map[string]string{d.f.configFile: sn.ConfigYAML(), dropInFile: dropIn} {
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			return err
		}
	}
	d.say("config %s:\n%s", d.f.configFile, indent(sn.ConfigYAML()))
	d.say("drop-in %s:\n%s", dropInFile, indent(dropIn))
	d.planCmd = &cobra.Command{}
	d.planCmd.SetContext(ctx)
	d.planCmd.SetErr(d.out)
	return nil
}

// showPlan prints what `enid plan` prints now.
func (d *demo) showPlan(title string) error {
	d.step(title)
	p, err := makePlan(d.planCmd, &d.f)
	if err != nil {
		return err
	}
	fmt.Fprint(d.out, p.Render())
	return nil
}

// waitWarm waits until the agent is ready with its pool warm, or it stops.
func (d *demo) waitWarm(ctx context.Context, agentDone chan error) error {
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		select {
		case err := <-agentDone:
			agentDone <- err // for the caller's deferred wait
			return false, fmt.Errorf("the agent stopped: %v", err)
		default:
		}
		a, err := status.ReadAgent(d.agentFile)
		return err == nil && a.Ready && a.Pool.Idle >= d.minIdle, nil
	}); err != nil {
		return fmt.Errorf("agent did not warm its pool: %w", err)
	}
	a, _ := status.ReadAgent(d.agentFile) // read just above
	d.say("agent ready: pool of %d IPs on %d ENI(s), %d idle", a.Pool.Total, a.Pool.ENIs, a.Pool.Idle)
	return nil
}

// cniRuntime builds enid-cni and a libcni runtime that calls it.
func (d *demo) cniRuntime(workDir string) (*cnirun.Runtime, error) {
	pluginDir, err := cnirun.Plugin(filepath.Join(workDir, "bin"))
	if err != nil {
		return nil, err
	}
	return cnirun.New(pluginDir, filepath.Join(workDir, "cni-cache"), cnirun.Conflist(d.f.runDir, 60*time.Second))
}

// newPods makes n pods, with a network namespace each when root. The pods
// made so far are returned with an error, for their cleanup.
func (d *demo) newPods(n int) ([]demoPod, error) {
	pods := make([]demoPod, 0, n)
	for i := range n {
		id := make([]byte, 32)
		if _, err := rand.Read(id); err != nil {
			return pods, err
		}
		p := cnirun.Pod{ContainerID: hex.EncodeToString(id), IfName: "eth0", Namespace: "default",
			Name: fmt.Sprintf("web-%d", i), UID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i)}
		nsName := fmt.Sprintf("eniddemo-pod%d", i)
		var cleanup func()
		if d.root {
			path, c, err := d.sn.Topology.NewPodNS(nsName)
			if err != nil {
				return pods, err
			}
			p.NetNS, cleanup = path, c
		} else {
			// Without root nothing enters the netns; the path only has to be
			// absolute and stable.
			p.NetNS = "/var/run/netns/" + nsName
		}
		pods = append(pods, demoPod{pod: p, cleanup: cleanup})
	}
	return pods, nil
}

// addPods runs every pod's CNI ADD at once and prints what each got.
func (d *demo) addPods(ctx context.Context, rt *cnirun.Runtime, pods []demoPod) error {
	var wg sync.WaitGroup
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now() // the demo shows its user wall-clock latency
			res, err := rt.Add(ctx, pods[i].pod)
			pods[i].took, pods[i].err = time.Since(start), err
			if err == nil && len(res.IPs) > 0 {
				pods[i].ip = netip.MustParseAddr(res.IPs[0].Address.IP.String())
			}
		}()
	}
	wg.Wait()
	for _, p := range pods {
		if p.err != nil {
			return fmt.Errorf("ADD %s: %w", p.pod.Name, p.err)
		}
		d.say("  %-8s %-15s ready in %s", p.pod.Name, p.ip, p.took.Round(time.Millisecond))
	}
	return nil
}

// ping pings each pod from the next one and from the VPC router.
func (d *demo) ping(ctx context.Context, pods []demoPod) error {
	ping := func(ns string, dst netip.Addr) error {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return simvpc.Ping(pctx, ns, dst)
	}
	failed := 0
	for i, p := range pods {
		dst := pods[(i+1)%len(pods)]
		if len(pods) > 1 {
			err := ping(p.pod.NetNS, dst.ip)
			failed += min(1, countErr(err))
			d.say("  %s -> %s (%s): %s", p.pod.Name, dst.pod.Name, dst.ip, okOr(err))
		}
		err := ping(d.sn.Topology.VPCNS, p.ip)
		failed += min(1, countErr(err))
		d.say("  vpc router -> %s (%s): %s", p.pod.Name, p.ip, okOr(err))
	}
	if failed > 0 {
		return fmt.Errorf("%d pings failed", failed)
	}
	return nil
}

// waitSettled waits, printing the pool as it changes, until no address is
// used or cooling down, idle is within maxIdle and the plan is empty.
func (d *demo) waitSettled(ctx context.Context, deleted int) error {
	d.say("deleted %d pods; waiting for the pool to settle (releaseDelay 2s, maxIdle %d)", deleted, d.maxIdle)
	var last string
	if err := waitFor(ctx, 60*time.Second, func() (bool, error) {
		a, err := status.ReadAgent(d.agentFile)
		if err != nil {
			return false, nil
		}
		line := fmt.Sprintf("  pool: %d IPs on %d ENI(s): %d used, %d idle, %d cooldown", a.Pool.Total, a.Pool.ENIs, a.Pool.Used, a.Pool.Idle, a.Pool.Cooldown)
		if line != last {
			d.say("%s", line)
			last = line
		}
		if a.Pool.Used != 0 || a.Pool.Idle > d.maxIdle || a.Pool.Cooldown > 0 {
			return false, nil
		}
		p, err := makePlan(d.planCmd, &d.f)
		return err == nil && p.Empty(), nil
	}); err != nil {
		return fmt.Errorf("the pool did not settle: %w", err)
	}
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
	printStatus(out, rep, time.Now()) // ages by the wall clock, as `enid status` shows them
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
	return poll.Until(ctx, clock.Real{}, timeout, 100*time.Millisecond, cond)
}

// startAgent runs the agent as `enid run` does, logging to out when
// verbose; it returns the agent's stop and the channel its end comes on.
// The demo never talks to a Kubernetes API server.
func (d *demo) startAgent(ctx context.Context, out io.Writer, verbose bool) (stop context.CancelFunc, done chan error) {
	logOut := io.Discard
	if verbose {
		logOut = out
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
	agentCtx, stop := context.WithCancel(ctx)
	done = make(chan error, 1)
	go func() {
		done <- runAgent(agentCtx, d.planCmd, &d.f, &kubeFlags{}, true, metricsServer{}, nil, log)
	}()
	return stop, done
}
