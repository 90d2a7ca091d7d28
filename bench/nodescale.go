package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/reconcile/status"
	"github.com/enidnet/enid/testbed/cnirun"
	"github.com/enidnet/enid/testbed/simnode"
)

// Node scale (issue 24 item 3): one node grown from a few pods to a
// thousand, in prefix mode on a type that holds 3,248, with the figures
// that must not grow with the pods already there taken at each size.
const (
	scaleType = "ecs.g7.4xlarge"
	// scaleRSSLimit is the agent's RSS target at the largest size (MiB).
	scaleRSSLimit = 100
	// scaleADDRatio bounds ADD p50 at the largest size over the smallest.
	scaleADDRatio = 1.2
)

// scalePoint is what one size measured: ADD and DEL latencies of the
// probe pods, and the agent's costs during their ADDs (per pod start).
type scalePoint struct {
	pods       int
	adds, dels []time.Duration
	// agent is each probe ADD's share that is the agent's: from the
	// entry's Created (the plugin's clock) to the status's Updated (the
	// agent's), as the warm scenario measures it.
	agent              []time.Duration
	cpuPerStart        time.Duration // agent CPU (all threads) over the probe ADDs, per ADD
	pass, plan         time.Duration // mean pass and plan time during the probe ADDs
	passesPerStart     float64
	desiredRead        time.Duration // mean read of config and entries after a change
	publish            time.Duration // mean PublishStatus (the status file's atomic write)
	rss, hwm           float64       // MiB after the probe ADDs
	probeWall, growAdd time.Duration
}

// runNodeScale grows one node (linux datapath in the simulated node
// namespace, `enid run` as a subprocess, the real plugin through libcni)
// to each size in turn; at each size it ADDs a handful of probe pods one
// after another, timing each and reading the agent's metrics and CPU
// around them, then DELs them, timing each.
func runNodeScale(ctx context.Context, e env) []Result {
	steps, probes := []int{10, 100, 250, 500, 1000}, 30
	if e.quick {
		steps, probes = []int{10, 30}, 10
	}
	r := Result{Scenario: "node scale", Setup: fmt.Sprintf("one %s node in prefix mode (default pool), `enid run` as a subprocess with the linux datapath in netns, pods ADDed through enid-cni (libcni) one after another up to %s pods; at each size %d probe ADDs 5 ms apart, then their DELs; simulator without latency",
		scaleType, joinInts(steps), probes)}
	if !e.root {
		r.Skipped = "needs root"
		return []Result{r}
	}
	rig, err := startScaleRig(ctx, e)
	if rig != nil {
		defer rig.close()
	}
	if err != nil {
		r.broken("%v", err)
		return []Result{r}
	}
	var points []scalePoint
	for _, size := range steps {
		t0 := time.Now()
		if err := rig.grow(ctx, size); err != nil {
			r.broken("grow to %d pods: %v", size, err)
			break
		}
		grow := time.Since(t0)
		p, err := rig.probe(ctx, size, probes)
		if err != nil {
			r.broken("at %d pods: %v", size, err)
			break
		}
		p.growAdd = grow
		e.progress("node scale: %d pods: ADD p50 %s, pass %s, RSS %.1f MiB", size, pct(p.adds, 50).Round(10*time.Microsecond), p.pass.Round(time.Microsecond), p.rss)
		points = append(points, p)
	}
	for _, b := range rig.broken {
		r.broken("%s", b)
	}
	if err := rig.sn.Sim.Check(); err != nil {
		r.broken("simulator Check: %v", err)
	}
	reportScale(&r, points)
	return []Result{r}
}

// scaleRig is the node-scale scenario's node, agent and runtime, and the
// pods on the node.
type scaleRig struct {
	e       env
	dir     string
	sn      *simnode.Node
	proc    *enidProc
	metrics string // http://ADDR/metrics
	rt      *cnirun.Runtime
	// entries and statuses are the agent's files of the pods (<run-dir>/
	// pods and status), read for each probe's agent share.
	entries  *desired.EntryStore
	statuses *status.Store
	pods     []scalePod
	holder   map[netip.Addr]string // live pods' addresses
	broken   []string
	seq      int
}

type scalePod struct {
	pod   cnirun.Pod
	ip    netip.Addr
	clean func()
}

func startScaleRig(ctx context.Context, e env) (*scaleRig, error) {
	w := &scaleRig{e: e, dir: filepath.Join(e.workDir, "nodescale"), holder: map[netip.Addr]string{}}
	bin, err := buildEnid(ctx, e, w.dir)
	if err != nil {
		return nil, err
	}
	sn, err := simnode.Start(simnode.Options{Datapath: true, Name: "enidscale", InstanceType: scaleType, Logger: e.log,
		Sim: ecssim.Config{
			VSwitches: []ecssim.VSwitchConfig{{ID: "vsw-scale", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.0.0/16")}},
			Zones:     []string{"cn-hangzhou-h"},
		}})
	if err != nil {
		return nil, fmt.Errorf("simulated node: %w", err)
	}
	w.sn = sn
	for _, d := range []string{"etc/config.d", "run", "state"} {
		if err := os.MkdirAll(filepath.Join(w.dir, d), 0o755); err != nil {
			return w, err
		}
	}
	cfgFile := filepath.Join(w.dir, "etc", "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(configYAMLENI(sn.Sim, sn.Instance.Zone, "  ipv4Allocation: prefix\n", "", "")), 0o644); err != nil {
		return w, err
	}
	addr, err := freeAddr()
	if err != nil {
		return w, err
	}
	w.metrics = "http://" + addr + "/metrics"
	w.entries = desired.NewEntryStore(filepath.Join(w.dir, "run", "pods"))
	w.statuses = status.NewStore(filepath.Join(w.dir, "run", "status"))
	args := []string{"--datapath", "linux", "--node-netns", sn.NodeNS(), "--node-name", "scale", "--metrics-addr", addr, "--kubelet-root-dir", ""}
	if e.sizes.scaleProfile != "" {
		args = append(args, "--pprof")
	}
	w.proc, err = startEnidRun(ctx, bin, w.dir, cfgFile, sn.Sim, sn.Instance.ID, args...)
	if err != nil {
		return w, err
	}
	if err := w.proc.waitAgent(ctx, func(h status.Agent) bool { return h.Ready && h.Pool.Idle >= 2 }); err != nil {
		return w, fmt.Errorf("agent never warmed its pool: %w", err)
	}
	pluginDir, err := cnirun.Plugin(filepath.Join(w.dir, "bin"))
	if err != nil {
		return w, err
	}
	w.rt, err = cnirun.New(pluginDir, filepath.Join(w.dir, "cni-cache"), cnirun.Conflist(filepath.Join(w.dir, "run"), time.Minute))
	return w, err
}

// add ADDs one new pod and returns how long the ADD took.
func (w *scaleRig) add(ctx context.Context) (time.Duration, error) {
	w.seq++
	name := fmt.Sprintf("s%d", w.seq)
	ns, clean, err := w.sn.Topology.NewPodNS("scale" + name)
	if err != nil {
		return 0, fmt.Errorf("pod netns: %w", err)
	}
	p := cnirun.Pod{ContainerID: containerID("scale/" + name), NetNS: ns, IfName: "eth0", Namespace: "bench", Name: name, UID: "uid-" + name}
	t := time.Now()
	res, err := w.rt.Add(ctx, p)
	took := time.Since(t)
	if err != nil {
		clean()
		return took, fmt.Errorf("ADD %s: %w", name, err)
	}
	if len(res.IPs) == 0 {
		clean()
		return took, fmt.Errorf("ADD %s returned no IP", name)
	}
	ip, _ := netip.AddrFromSlice(res.IPs[0].Address.IP.To4())
	if other, dup := w.holder[ip]; dup {
		w.broken = append(w.broken, fmt.Sprintf("%s and %s both hold %s", other, name, ip))
	}
	w.holder[ip] = name
	w.pods = append(w.pods, scalePod{pod: p, ip: ip, clean: clean})
	return took, nil
}

// agentShare is the last pod's entry->status time: its status's Updated
// less its entry's Created.
func (w *scaleRig) agentShare() (time.Duration, error) {
	p := w.pods[len(w.pods)-1].pod
	st, err := w.statuses.Read(p.ContainerID, p.IfName)
	if err != nil {
		return 0, fmt.Errorf("status of %s: %w", p.Name, err)
	}
	en, err := w.entries.Read(desired.Key{ContainerID: p.ContainerID, IfName: p.IfName})
	if err != nil {
		return 0, fmt.Errorf("entry of %s: %w", p.Name, err)
	}
	return st.Updated.Sub(en.Created), nil
}

// del DELs the last pod added and returns how long the DEL took.
func (w *scaleRig) del(ctx context.Context) (time.Duration, error) {
	p := w.pods[len(w.pods)-1]
	t := time.Now()
	err := w.rt.Del(ctx, p.pod)
	took := time.Since(t)
	if err != nil {
		return took, fmt.Errorf("DEL %s: %w", p.pod.Name, err)
	}
	w.pods = w.pods[:len(w.pods)-1]
	delete(w.holder, p.ip)
	p.clean()
	return took, nil
}

// grow ADDs pods until the node holds size, then lets the pool refill.
func (w *scaleRig) grow(ctx context.Context, size int) error {
	for len(w.pods) < size {
		if _, err := w.add(ctx); err != nil {
			return err
		}
	}
	return w.settle(ctx)
}

// settle waits until the heartbeat counts every pod Ready and the pool
// holds its minimum idle again, so that a probe does not time growth.
func (w *scaleRig) settle(ctx context.Context) error {
	return w.proc.waitAgent(ctx, func(h status.Agent) bool {
		return h.Pods[status.Ready] == len(w.pods) && h.Pool.Used == len(w.pods) && h.Pool.Idle >= 2
	})
}

// probe times n ADDs at size pods (the agent's metrics and CPU read
// around them), then their DELs.
func (w *scaleRig) probe(ctx context.Context, size, n int) (scalePoint, error) {
	p := scalePoint{pods: size}
	before, err := scrape(w.metrics)
	if err != nil {
		return p, err
	}
	cpu0, err := procCPU(w.proc.cmd.Process.Pid)
	if err != nil {
		return p, err
	}
	t0 := time.Now()
	profiled := w.profile(ctx, size)
	for len(p.adds) < n || (profiled != nil && !isDone(profiled)) {
		d, err := w.add(ctx)
		if err != nil {
			return p, err
		}
		p.adds = append(p.adds, d)
		a, err := w.agentShare()
		if err != nil {
			return p, err
		}
		p.agent = append(p.agent, a)
		time.Sleep(5 * time.Millisecond)
	}
	if profiled != nil {
		if err := <-profiled; err != nil {
			return p, err
		}
	}
	n = len(p.adds)
	p.probeWall = time.Since(t0)
	cpu1, err := procCPU(w.proc.cmd.Process.Pid)
	if err != nil {
		return p, err
	}
	after, err := scrape(w.metrics)
	if err != nil {
		return p, err
	}
	p.cpuPerStart = (cpu1 - cpu0) / time.Duration(n)
	p.pass = after.mean(before, "enid_pass_duration_seconds")
	p.plan = after.mean(before, "enid_plan_duration_seconds")
	p.desiredRead = after.mean(before, "enid_desired_read_duration_seconds")
	p.publish = after.mean(before, `enid_action_duration_seconds{kind="PublishStatus"}`)
	p.passesPerStart = (after["enid_reconcile_passes_total"] - before["enid_reconcile_passes_total"]) / float64(n)
	if p.rss, err = procStatusMiB(w.proc.cmd.Process.Pid, "VmRSS:"); err != nil {
		return p, err
	}
	if p.hwm, err = procStatusMiB(w.proc.cmd.Process.Pid, "VmHWM:"); err != nil {
		return p, err
	}
	for range n {
		d, err := w.del(ctx)
		if err != nil {
			return p, err
		}
		p.dels = append(p.dels, d)
		time.Sleep(5 * time.Millisecond)
	}
	return p, w.settle(ctx)
}

// profile starts a CPU profile of the agent over the next scaleProfileTime
// (-nodescale-cpuprofile), written to <dir>/<size>.prof; the channel gets
// its outcome. Without the flag it returns nil.
func (w *scaleRig) profile(ctx context.Context, size int) <-chan error {
	dir := w.e.sizes.scaleProfile
	if dir == "" {
		return nil
	}
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			url := strings.TrimSuffix(w.metrics, "/metrics") + fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(scaleProfileTime/time.Second))
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("agent CPU profile: %w", err)
			}
			defer resp.Body.Close() //nolint:errcheck // read-only
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("agent CPU profile: %s", resp.Status)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%d.prof", size)))
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, resp.Body); err != nil {
				f.Close() //nolint:errcheck // the copy's error is the one to report
				return fmt.Errorf("agent CPU profile: %w", err)
			}
			return f.Close()
		}()
	}()
	return done
}

// scaleProfileTime is how long -nodescale-cpuprofile profiles the agent at
// each size; the probe ADDs go on for that long.
const scaleProfileTime = 3 * time.Second

// isDone reports whether c, a buffered channel of one that is sent to once
// and never closed, holds its value, without taking it.
func isDone(c <-chan error) bool { return len(c) > 0 }

func (w *scaleRig) close() {
	if w.proc != nil {
		w.proc.stop()
	}
	for _, p := range w.pods {
		p.clean()
	}
	if w.sn != nil {
		w.sn.Close()
	}
}

// reportScale adds a row's figures per size, the curves and the verdict.
func reportScale(r *Result, points []scalePoint) {
	if len(points) == 0 {
		return
	}
	var xs, addP50, addP99, agentP50, delP50, pass, cpu, rss, read, publish []float64
	for _, p := range points {
		slices.Sort(p.adds)
		slices.Sort(p.dels)
		slices.Sort(p.agent)
		n := p.pods
		r.add(fmt.Sprintf("@%d ADD p50", n), msOf(pct(p.adds, 50)), "ms")
		r.add(fmt.Sprintf("@%d ADD p99", n), msOf(pct(p.adds, 99)), "ms")
		r.add(fmt.Sprintf("@%d entry->status p50", n), msOf(pct(p.agent, 50)), "ms")
		r.add(fmt.Sprintf("@%d DEL p50", n), msOf(pct(p.dels, 50)), "ms")
		r.add(fmt.Sprintf("@%d pass", n), msOf(p.pass), "ms")
		r.add(fmt.Sprintf("@%d CPU/start", n), msOf(p.cpuPerStart), "ms")
		r.add(fmt.Sprintf("@%d RSS", n), p.rss, "MiB")
		r.note("%d pods: ADD p50 %s p99 %s (entry->status p50 %s), DEL p50 %s; pass %s (plan %s), %.1f passes per start; entries read %s; status write %s; agent CPU %s per start; RSS %.1f MiB (peak %.1f); grown in %s",
			n, pct(p.adds, 50).Round(10*time.Microsecond), pct(p.adds, 99).Round(10*time.Microsecond), pct(p.agent, 50).Round(10*time.Microsecond), pct(p.dels, 50).Round(10*time.Microsecond),
			p.pass.Round(time.Microsecond), p.plan.Round(time.Microsecond), p.passesPerStart, p.desiredRead.Round(time.Microsecond),
			p.publish.Round(time.Microsecond), p.cpuPerStart.Round(10*time.Microsecond), p.rss, p.hwm, p.growAdd.Round(time.Millisecond))
		xs = append(xs, float64(n))
		addP50, addP99, delP50 = append(addP50, msOf(pct(p.adds, 50))), append(addP99, msOf(pct(p.adds, 99))), append(delP50, msOf(pct(p.dels, 50)))
		agentP50 = append(agentP50, msOf(pct(p.agent, 50)))
		pass, cpu, read, publish = append(pass, msOf(p.pass)), append(cpu, msOf(p.cpuPerStart)), append(read, msOf(p.desiredRead)), append(publish, msOf(p.publish))
		rss = append(rss, p.rss)
	}
	curve := func(chart, name, unit string, y []float64) Series {
		return Series{Name: name, Chart: chart, Kind: Curve, Unit: unit, X: xs, Y: y}
	}
	r.Series = append(r.Series,
		curve("node scale: CNI latency", "ADD p50", "ms", addP50), curve("node scale: CNI latency", "ADD p99", "ms", addP99),
		curve("node scale: CNI latency", "DEL p50", "ms", delP50), curve("node scale: CNI latency", "entry->status p50 (the agent's share of ADD)", "ms", agentP50),
		curve("node scale: agent cost per pod start", "pass (mean)", "ms", pass), curve("node scale: agent cost per pod start", "agent CPU per start", "ms", cpu),
		curve("node scale: agent cost per pod start", "entries read (mean)", "ms", read), curve("node scale: agent cost per pod start", "status write (mean)", "ms", publish),
		curve("node scale: agent memory", "RSS", "MiB", rss))
	first, last := points[0], points[len(points)-1]
	ratio := pct(last.adds, 50).Seconds() / pct(first.adds, 50).Seconds()
	cpuRatio := last.cpuPerStart.Seconds() / first.cpuPerStart.Seconds()
	r.add(fmt.Sprintf("ADD p50 %d/%d", last.pods, first.pods), ratio, "x")
	r.add(fmt.Sprintf("CPU/start %d/%d", last.pods, first.pods), cpuRatio, "x")
	r.judge(fmt.Sprintf("ADD p50 at %d pods <= %.1fx ADD p50 at %d; RSS < %d MiB at %d", last.pods, scaleADDRatio, first.pods, scaleRSSLimit, last.pods),
		ratio <= scaleADDRatio && last.rss < scaleRSSLimit)
	r.note("the node namespace holds no conntrack entry here, so the bind and release flushes skip the table walk (docs/datapath.md); on a node with entries each costs one walk of the kernel's table")
}

// metricValues are the samples of a Prometheus text exposition, by series
// ("name" or "name{labels}" as exposed).
type metricValues map[string]float64

// scrape reads url's Prometheus text exposition.
func scrape(url string) (metricValues, error) {
	resp, err := http.Get(url) //nolint:noctx // loopback, the agent answers at once
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	out := metricValues{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// mean is a histogram's mean observation between before and m; series is
// its name, with its labels when it has any.
func (m metricValues) mean(before metricValues, series string) time.Duration {
	name, labels, _ := strings.Cut(series, "{")
	if labels != "" {
		labels = "{" + labels
	}
	sum := m[name+"_sum"+labels] - before[name+"_sum"+labels]
	n := m[name+"_count"+labels] - before[name+"_count"+labels]
	if n <= 0 {
		return 0
	}
	return time.Duration(sum / n * float64(time.Second))
}

// procCPU is the CPU time all of a process's threads have used, to the
// nanosecond (schedstat; /proc/<pid>/stat counts in 10 ms ticks).
func procCPU(pid int) (time.Duration, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread ended
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("schedstat of task %s: %w", t.Name(), err)
		}
		total += time.Duration(ns)
	}
	return total, nil
}

// procStatusMiB reads a kB field of /proc/<pid>/status (VmRSS:, VmHWM:)
// in MiB.
func procStatusMiB(pid int, field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				return 0, fmt.Errorf("parse %s %q: %w", field, v, err)
			}
			return float64(kb) / 1024, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// buildEnid builds `enid` into dir.
func buildEnid(ctx context.Context, e env, dir string) (string, error) {
	bin := filepath.Join(dir, "enid")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/enid")
	build.Dir = e.srcDir
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build enid: %v: %s", err, lastLines(out, 5))
	}
	return bin, nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}
