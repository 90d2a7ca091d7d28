package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/reconcile/status"
	"github.com/enidnet/enid/testbed/cnirun"
	"github.com/enidnet/enid/testbed/simnode"
)

// refPluginsVersion is the containernetworking/plugins release the
// reference scenario builds: the plugins people use when IPAM is local.
const refPluginsVersion = "v1.10.0"

// podLife is how long each measured pod lives before its DEL.
const podLife = 1500 * time.Millisecond

// refPlugin is one CNI setup of the reference scenario.
type refPlugin struct {
	// name is the row's name ("enid-cni", "ptp+host-local", ...).
	name string
	rt   *cnirun.Runtime
	// hostNS is the namespace the plugin runs in (the node's for enid,
	// a namespace of its own for each reference plugin, so nothing they
	// create lands in the machine's).
	hostNS      string
	adds, dels  []time.Duration
	goneAtDEL   int // enid only: DELs after which the status was already gone
	measuredDEL int
}

// runReference runs enid-cni and the reference plugins ptp+host-local and
// bridge+host-local side by side: the same libcni client, the same cache
// dir (the runtime's, which enid's agent reads as it does on a node), pods
// interleaved round by round, with background pods on the node.
func runReference(ctx context.Context, e env) []Result {
	rounds, background := e.sizes.refRounds, e.sizes.refPods
	r := Result{Scenario: "vs reference plugins",
		Setup: fmt.Sprintf("%d rounds, each one ADD per plugin (order rotating) and the DELs of the previous round's pods (each pod lives %s), through one libcni client with the runtime's cache dir (which enid's agent reads); %d background pods per plugin; enid: warm pool, linux datapath in netns, %s; reference: containernetworking/plugins %s, each in a netns of its own; all plugins static (CGO_ENABLED=0)",
			rounds, podLife, background, memType, refPluginsVersion)}
	switch {
	case e.quick:
		r.Skipped = "not in -quick (it builds containernetworking/plugins from the module proxy): go run ./bench -run reference"
		return []Result{r}
	case !e.root:
		r.Skipped = "needs root"
		return []Result{r}
	}
	start := time.Now()
	defer func() { r.Elapsed = Seconds(time.Since(start)) }()
	rig := &refRig{}
	defer rig.close(ctx, e)
	if err := rig.start(ctx, e, background+rounds+20); err != nil {
		r.broken("%v", err)
		return []Result{r}
	}
	for range background {
		for _, p := range rig.plugins {
			if _, _, err := rig.add(ctx, p); err != nil {
				r.broken("background pod: %v", err)
				return []Result{r}
			}
		}
	}
	if err := rig.rounds(ctx, rounds); err != nil {
		r.broken("%v", err)
		return []Result{r}
	}
	for _, b := range checkBindings([]*agent{rig.a}) {
		r.broken("%s", b)
	}
	simCheck(&r, rig.sn.Sim)
	return refRows(r, rig.plugins, start)
}

// refRig is the reference scenario's simulated node, datapath, agent and
// plugins, and the pods alive on it; close undoes them in reverse order.
type refRig struct {
	sn      *simnode.Node
	dp      *linux.Datapath
	a       *agent
	plugins []*refPlugin
	alive   []refPod
	seq     int
}

// refPod is a pod alive through one of the plugins.
type refPod struct {
	p   *refPlugin
	pod cnirun.Pod
}

// start builds the plugins, brings the node, its datapath and the agent (with
// a pool of up to maxIdle, so that it is never the question) up, and gives
// each reference plugin a host namespace of its own.
func (g *refRig) start(ctx context.Context, e env, maxIdle int) error {
	dir := filepath.Join(e.workDir, "reference")
	pluginDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		return err
	}
	e.progress("reference: building containernetworking/plugins %s (cached after the first run)", refPluginsVersion)
	if err := buildRefPlugins(ctx, pluginDir); err != nil {
		return err
	}
	enidDir, err := cnirun.Plugin(filepath.Join(dir, "enid-bin"))
	if err != nil {
		return err
	}
	if err := copyExec(filepath.Join(enidDir, "enid-cni"), filepath.Join(pluginDir, "enid-cni")); err != nil {
		return err
	}
	sn, err := simnode.Start(simnode.Options{Datapath: true, Name: "enidref", InstanceType: memType, Logger: e.log,
		Sim: ecssim.Config{
			VSwitches: []ecssim.VSwitchConfig{{ID: "vsw-ref", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.16.0/20")}},
			Zones:     []string{"cn-hangzhou-h"},
		}})
	if err != nil {
		return fmt.Errorf("simulated node: %w", err)
	}
	g.sn = sn
	if g.dp, err = linux.New(e.log, sn.NodeNS()); err != nil {
		return fmt.Errorf("datapath: %w", err)
	}
	cacheDir := filepath.Join(dir, "cni-cache")
	// The pool holds the background pods, the measured ones and the
	// addresses in cooldown after each DEL: it is never the question.
	pool := fmt.Sprintf("  minIdle: 10\n  maxIdle: %d\n  batch: 10\n", maxIdle)
	g.a, err = startAgent(ctx, agentOptions{dir: filepath.Join(dir, "agent"), sim: sn.Sim, instanceID: sn.Instance.ID, nodeName: "ref",
		config: configYAML(sn.Sim, sn.Instance.Zone, pool, ""), datapath: g.dp, log: e.log,
		hints: desired.HintSources{CNIResultsDir: filepath.Join(cacheDir, "results")}})
	if err != nil {
		return fmt.Errorf("start agent: %w", err)
	}
	if err := g.a.waitPool(ctx, time.Minute, func(h status.Agent) bool { return h.Ready && h.Pool.Idle >= 10 }); err != nil {
		return fmt.Errorf("agent never warmed its pool: %w", err)
	}
	g.plugins = []*refPlugin{{name: "enid-cni", hostNS: sn.NodeNS()}, {name: "ptp+host-local"}, {name: "bridge+host-local"}}
	confs := [][]byte{cnirun.Conflist(filepath.Join(dir, "agent", "run"), time.Minute),
		refConflist("refptp", map[string]any{"type": "ptp", "ipMasq": false, "ipam": hostLocal(dir, "refptp", "10.91.0.0/16")}),
		refConflist("refbridge", map[string]any{"type": "bridge", "bridge": "refbr0", "isGateway": true, "ipMasq": false,
			"ipam": hostLocal(dir, "refbridge", "10.92.0.0/16")})}
	for i, p := range g.plugins {
		if p.hostNS == "" {
			path, _, err := sn.Topology.NewPodNS("refhost" + fmt.Sprint(i))
			if err != nil {
				return fmt.Errorf("host netns for %s: %w", p.name, err)
			}
			p.hostNS = path // removed with the topology
		}
		if p.rt, err = cnirun.New(pluginDir, cacheDir, confs[i]); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return nil
}

// close deletes the pods still alive (the background ones, and any left
// by a failure) in parallel, then stops the agent and removes the node.
func (g *refRig) close(ctx context.Context, e env) {
	var wg sync.WaitGroup
	for _, l := range g.alive {
		wg.Go(func() {
			if err := inHost(l.p.hostNS, func() error { return l.p.rt.Del(context.WithoutCancel(ctx), l.pod) }); err != nil {
				e.log.Warn("reference: DEL at the end", "plugin", l.p.name, "pod", l.pod.Name, "err", err)
			}
		})
	}
	wg.Wait()
	if g.a != nil {
		g.a.Stop()
	}
	if g.dp != nil {
		g.dp.Close()
	}
	if g.sn != nil {
		g.sn.Close()
	}
}

// add creates a pod namespace and ADDs it through p, timing the ADD.
func (g *refRig) add(ctx context.Context, p *refPlugin) (cnirun.Pod, time.Duration, error) {
	g.seq++
	name := fmt.Sprintf("r%d", g.seq)
	path, _, err := g.sn.Topology.NewPodNS("ref" + name)
	if err != nil {
		return cnirun.Pod{}, 0, err
	}
	pod := cnirun.Pod{ContainerID: containerID("ref/" + name), NetNS: path, IfName: "eth0", Namespace: "bench", Name: name, UID: "uid-" + name}
	var took time.Duration
	err = inHost(p.hostNS, func() error {
		t := time.Now()
		_, err := p.rt.Add(ctx, pod)
		took = time.Since(t)
		return err
	})
	if err != nil {
		return pod, took, fmt.Errorf("%s ADD %s: %w", p.name, name, err)
	}
	g.alive = append(g.alive, refPod{p, pod})
	return pod, took, nil
}

// del DELs pod through p, timing the DEL, and removes its namespace.
func (g *refRig) del(ctx context.Context, p *refPlugin, pod cnirun.Pod) (time.Duration, error) {
	var took time.Duration
	err := inHost(p.hostNS, func() error {
		t := time.Now()
		err := p.rt.Del(ctx, pod)
		took = time.Since(t)
		return err
	})
	if err != nil {
		return took, fmt.Errorf("%s DEL %s: %w", p.name, pod.Name, err)
	}
	g.alive = slices.DeleteFunc(g.alive, func(l refPod) bool { return l.pod.ContainerID == pod.ContainerID })
	if err := g.sn.Topology.DeletePodNS(pod.NetNS); err != nil {
		return took, err
	}
	return took, nil
}

// rounds runs the measured rounds: each ADDs one pod per plugin (the
// order rotating) and DELs the previous round's. Each measured pod lives
// podLife before its DEL, as pods do: a DEL right after its ADD would meet
// a runtime (and an agent) that has not yet settled on the pod.
func (g *refRig) rounds(ctx context.Context, rounds int) error {
	type round struct {
		order []*refPlugin
		pods  []cnirun.Pod
		added time.Time
	}
	plugins := g.plugins
	var prev *round
	for i := 0; i <= rounds; i++ {
		var cur *round
		if i < rounds {
			cur = &round{order: append(slices.Clone(plugins[i%len(plugins):]), plugins[:i%len(plugins)]...), added: time.Now()}
			for _, p := range cur.order {
				pod, took, err := g.add(ctx, p)
				if err != nil {
					return err
				}
				cur.pods = append(cur.pods, pod)
				p.adds = append(p.adds, took)
			}
		}
		if prev != nil {
			if wait := time.Until(prev.added.Add(podLife)); wait > 0 {
				time.Sleep(wait)
			}
			for j, p := range prev.order {
				took, err := g.del(ctx, p, prev.pods[j])
				if err != nil {
					return err
				}
				p.dels = append(p.dels, took)
				if p == plugins[0] {
					p.measuredDEL++
					if _, err := g.a.status.Read(prev.pods[j].ContainerID, prev.pods[j].IfName); errors.Is(err, fs.ErrNotExist) {
						p.goneAtDEL++
					}
				}
			}
		}
		prev = cur
	}
	return nil
}

// refRows makes one result row per plugin from r (its setup and
// problems), enid-cni's first with the verdict.
func refRows(r Result, plugins []*refPlugin, start time.Time) []Result {
	enid := plugins[0]
	for _, p := range plugins {
		slices.Sort(p.adds)
		slices.Sort(p.dels)
	}
	rows := []Result{}
	for _, p := range plugins {
		row := Result{Scenario: "vs reference: " + p.name, Setup: r.Setup}
		row.add("ADD p50", msOf(pct(p.adds, 50)), "ms")
		row.add("ADD p99", msOf(pct(p.adds, 99)), "ms")
		row.add("DEL p50", msOf(pct(p.dels, 50)), "ms")
		row.add("DEL p99", msOf(pct(p.dels, 99)), "ms")
		// One ADD chart and one DEL chart, a line per plugin: the rows'
		// series meet there by their Chart.
		row.Series = []Series{
			{Name: p.name, Chart: "vs reference plugins: ADD", Kind: CDF, Unit: "ms", X: millis(p.adds)},
			{Name: p.name, Chart: "vs reference plugins: DEL", Kind: CDF, Unit: "ms", X: millis(p.dels)},
		}
		if p != enid {
			row.add("enid/this ADD p50", pct(enid.adds, 50).Seconds()/pct(p.adds, 50).Seconds(), "x")
			row.add("enid/this DEL p50", pct(enid.dels, 50).Seconds()/pct(p.dels, 50).Seconds(), "x")
			row.Setup = "same run as the enid-cni row"
		}
		rows = append(rows, row)
	}
	rows[0].add("status gone when DEL returned", float64(enid.goneAtDEL), fmt.Sprintf("of %d", enid.measuredDEL))
	ptp, bridge := plugins[1], plugins[2]
	// Issue 24: DEL no slower than either reference plugin at p50 and
	// p99 in the same run; the status gone when DEL returns (issue 10);
	// ADD no slower than ptp's.
	refDEL50, refDEL99 := min(pct(ptp.dels, 50), pct(bridge.dels, 50)), min(pct(ptp.dels, 99), pct(bridge.dels, 99))
	rows[0].judge("DEL p50 and p99 <= both reference plugins', status gone when DEL returns; ADD p50 <= ptp+host-local ADD p50",
		pct(enid.dels, 50) <= refDEL50 && pct(enid.dels, 99) <= refDEL99 && enid.goneAtDEL == enid.measuredDEL &&
			pct(enid.adds, 50) <= pct(ptp.adds, 50))
	rows[0].Broken, rows[0].Elapsed = r.Broken, Seconds(time.Since(start))
	rows[0].note("every plugin runs through cnirun (libcni) with the cache dir in place; enid's agent reads that dir's results/ as the runtime's record of live attachments, as on a node with containerd; the reference plugins keep their host-local leases in the scenario's dir")
	return rows
}

// inHost runs f on a thread in the namespace at path: a plugin started
// from there runs in it (exec forks the calling thread), as one started by
// a runtime runs in the node's.
func inHost(path string, f func() error) error {
	return ns.WithNetNSPath(path, func(ns.NetNS) error { return f() })
}

// refConflist is a one-plugin conflist in the version enid ships.
func refConflist(name string, plugin map[string]any) []byte {
	b, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": []any{plugin}})
	if err != nil {
		panic(err) // literal maps of strings always encode
	}
	return b
}

// hostLocal is a host-local IPAM block with its leases under dir.
func hostLocal(dir, name, subnet string) map[string]any {
	return map[string]any{"type": "host-local", "dataDir": filepath.Join(dir, "ipam", name),
		"ranges": [][]map[string]string{{{"subnet": subnet}}}, "routes": []map[string]string{{"dst": "0.0.0.0/0"}}}
}

// buildRefPlugins builds ptp, bridge and host-local of refPluginsVersion
// from the module proxy (go install, static like enid-cni) into a cache
// dir once, and copies them into dst.
func buildRefPlugins(ctx context.Context, dst string) error {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "enid-bench", "cni-plugins-"+refPluginsVersion)
	names := map[string]string{
		"ptp":        "github.com/containernetworking/plugins/plugins/main/ptp",
		"bridge":     "github.com/containernetworking/plugins/plugins/main/bridge",
		"host-local": "github.com/containernetworking/plugins/plugins/ipam/host-local",
	}
	var missing []string
	for name, pkg := range names {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			missing = append(missing, pkg+"@"+refPluginsVersion)
		}
	}
	if len(missing) > 0 {
		if err := os.MkdirAll(bin, 0o755); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, "go", append([]string{"install"}, missing...)...)
		cmd.Dir = bin // outside enid's module: go install pkg@version
		cmd.Env = append(os.Environ(), "GOBIN="+bin, "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build containernetworking/plugins %s (needs the module proxy and go >= 1.26.8): %v\n%s", refPluginsVersion, err, out)
		}
	}
	for name := range names {
		if err := copyExec(filepath.Join(bin, name), filepath.Join(dst, name)); err != nil {
			return err
		}
	}
	return nil
}

// copyExec copies an executable.
func copyExec(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}
