package main

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/cnirun"
	"github.com/enidnet/enid/internal/simnode"
	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/reconcile/status"
)

// runWarm times warmPods sequential CNI ADDs through the real plugin
// (libcni) on a warm pool with the linux datapath, then the floor: the
// same pod setup done directly with linux.EnsurePod, in the same node
// namespace, on the same ENI, with the same addresses.
func runWarm(ctx context.Context, e env) []Result {
	n := e.sizes.warmPods
	r := Result{Scenario: "warm ADD", Setup: fmt.Sprintf("%d sequential ADDs through enid-cni (libcni) with a warm default pool, linux datapath in netns; %s; simulator without latency (no cloud call on the path)", n, memType)}
	if !e.root {
		r.Skipped = "needs root"
		return []Result{r}
	}
	start := time.Now()
	defer func() { r.Elapsed = Seconds(time.Since(start)) }()
	dir := filepath.Join(e.workDir, "warm")
	sn, err := simnode.Start(simnode.Options{Datapath: true, Name: "enidbench", InstanceType: memType, Logger: e.log,
		Sim: ecssim.Config{
			VSwitches: []ecssim.VSwitchConfig{{ID: "vsw-warm", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.16.0/20")}},
			Zones:     []string{"cn-hangzhou-h"},
		}})
	if err != nil {
		r.broken("simulated node: %v", err)
		return []Result{r}
	}
	defer sn.Close()
	dp, err := linux.New(e.log, sn.NodeNS())
	if err != nil {
		r.broken("datapath: %v", err)
		return []Result{r}
	}
	defer dp.Close()
	a, err := startAgent(ctx, agentOptions{dir: dir, sim: sn.Sim, instanceID: sn.Instance.ID, nodeName: "warm",
		config: configYAML(sn.Sim, sn.Instance.Zone, "", ""), datapath: dp, log: e.log})
	if err != nil {
		r.broken("start agent: %v", err)
		return []Result{r}
	}
	stopped := false
	defer func() {
		if !stopped {
			a.Stop()
		}
	}()
	if err := a.waitPool(ctx, time.Minute, func(h status.Agent) bool { return h.Ready && h.Pool.Idle >= 2 }); err != nil {
		r.broken("agent never warmed its pool: %v", err)
		return []Result{r}
	}
	pluginDir, err := cnirun.Plugin(filepath.Join(dir, "bin"))
	if err != nil {
		r.broken("%v", err)
		return []Result{r}
	}
	rt, err := cnirun.New(pluginDir, filepath.Join(dir, "cni-cache"), cnirun.Conflist(filepath.Join(dir, "run"), time.Minute))
	if err != nil {
		r.broken("%v", err)
		return []Result{r}
	}

	type done struct {
		pod   cnirun.Pod
		ip    netip.Addr
		mac   string
		clean func()
	}
	var pods []done
	defer func() {
		for _, p := range pods {
			if p.clean != nil {
				p.clean()
			}
		}
	}()
	// The plugin's own cost: exec, config parse and one read of the
	// heartbeat (CNI STATUS), timed before the ADDs.
	var execs []time.Duration
	for range max(20, n/10) {
		t := time.Now()
		if err := rt.Status(ctx); err != nil {
			r.broken("CNI STATUS: %v", err)
			return []Result{r}
		}
		execs = append(execs, time.Since(t))
	}
	var adds []time.Duration
	// agentTimes are from the entry's Created (the plugin's clock) to the
	// status's Updated (the agent's): the agent's share of each ADD.
	var agentTimes []time.Duration
	for i := range n {
		name := fmt.Sprintf("w%d", i)
		ns, clean, err := sn.Topology.NewPodNS("bench" + name)
		if err != nil {
			r.broken("pod netns: %v", err)
			return []Result{r}
		}
		p := cnirun.Pod{ContainerID: containerID("warm/" + name), NetNS: ns, IfName: "eth0", Namespace: "bench", Name: name, UID: "uid-" + name}
		pods = append(pods, done{pod: p, clean: clean})
		t := time.Now()
		res, err := rt.Add(ctx, p)
		adds = append(adds, time.Since(t))
		if err != nil {
			r.broken("ADD %s: %v", name, err)
			return []Result{r}
		}
		if len(res.IPs) == 0 {
			r.broken("ADD %s returned no IP", name)
			return []Result{r}
		}
		ip, _ := netip.AddrFromSlice(res.IPs[0].Address.IP.To4())
		st, err := a.status.Read(p.ContainerID, "eth0")
		if err != nil {
			r.broken("status of %s: %v", name, err)
			return []Result{r}
		}
		pods[len(pods)-1].ip, pods[len(pods)-1].mac = ip, st.ENIMAC
		if en, err := a.entries.Read(desired.Key{ContainerID: p.ContainerID, IfName: "eth0"}); err == nil {
			agentTimes = append(agentTimes, st.Updated.Sub(en.Created))
		}
		// Let the pool refill between pods, as it would between pod
		// creations a kubelet spaces out; ADDs that found it empty are
		// counted too (they show in p99).
		time.Sleep(5 * time.Millisecond)
	}
	for _, b := range checkBindings([]*agent{a}) {
		r.broken("%s", b)
	}
	for _, p := range pods {
		if err := rt.Del(ctx, p.pod); err != nil {
			r.broken("DEL %s: %v", p.pod.Name, err)
			return []Result{r}
		}
	}
	simCheck(&r, sn.Sim)
	// Stop the agent before the floor so that it does not tear down the
	// floor's pods (they have no entries).
	a.Stop()
	stopped = true
	node, err := dp.Observe(ctx)
	if err != nil {
		r.broken("observe the node: %v", err)
		return []Result{r}
	}
	tables := map[string]int{}
	for _, d := range node.ENIDevices {
		tables[d.MAC] = d.Table
	}
	var floors []time.Duration
	for i, p := range pods {
		ns, clean, err := sn.Topology.NewPodNS(fmt.Sprintf("benchf%d", i))
		if err != nil {
			r.broken("pod netns: %v", err)
			return []Result{r}
		}
		pods[i].clean = chain(p.clean, clean)
		key := observed.AttachmentKey{ContainerID: containerID("floor/" + p.pod.Name), IfName: "eth0"}
		t := time.Now()
		_, _, err = dp.EnsurePod(ctx, linux.PodSpec{Key: key, NetNS: ns, IfName: "eth0", IPv4: p.ip, ENIMAC: p.mac, Table: tables[p.mac]})
		floors = append(floors, time.Since(t))
		if err != nil {
			r.broken("floor EnsurePod %s: %v", p.pod.Name, err)
			return []Result{r}
		}
		if _, err := dp.TeardownPod(ctx, key, ns); err != nil {
			r.broken("floor TeardownPod %s: %v", p.pod.Name, err)
			return []Result{r}
		}
	}
	slices.Sort(adds)
	slices.Sort(execs)
	slices.Sort(agentTimes)
	slices.Sort(floors)
	msOf := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for _, p := range []int{50, 90, 99} {
		r.add(fmt.Sprintf("ADD p%d", p), msOf(pct(adds, p)), "ms")
	}
	for _, p := range []int{50, 90, 99} {
		r.add(fmt.Sprintf("floor p%d", p), msOf(pct(floors, p)), "ms")
	}
	r.add("STATUS p50", msOf(pct(execs, 50)), "ms")
	r.add("entry->status p50", msOf(pct(agentTimes, 50)), "ms")
	r.add("entry->status p99", msOf(pct(agentTimes, 99)), "ms")
	ratio := pct(adds, 99).Seconds() / pct(floors, 99).Seconds()
	r.add("p99 ratio", ratio, "x")
	r.add("p50 ratio", pct(adds, 50).Seconds()/pct(floors, 50).Seconds(), "x")
	r.judge("p99 <= 2x floor p99; p50 < 10 ms", ratio <= 2 && pct(adds, 50) < 10*time.Millisecond)
	r.note("the floor is linux.EnsurePod alone (veth, addresses, routes, rules) with each ADD's address and ENI, the agent stopped; ADD adds the plugin's exec, the entry write, the agent's wake-up, plan and status publish, and the plugin's status poll")
	return []Result{r}
}

func chain(fs ...func()) func() {
	return func() {
		for _, f := range fs {
			if f != nil {
				f()
			}
		}
	}
}
