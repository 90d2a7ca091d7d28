package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// world is an agent on the simulator without a datapath: the real SDK over
// HTTP, the real files, the real planner.
type world struct {
	t     testing.TB
	sim   *ecssim.Server
	inst  ecssim.InstanceInfo
	dir   string
	paths Paths
	cl    *cloud.Client
	// noWatch runs agents without their file watcher (scripts wake them).
	noWatch bool
	// heartbeat is the agents' heartbeat period (newWorld: 50ms).
	heartbeat time.Duration
	// agent is the running agent, dp its datapath.
	agent *Agent
	dp    Datapath
	// log, when set, is the agents' logger.
	log *slog.Logger
	// serving, when set, is the agents' Config.Serving.
	serving func() error
}

func newWorld(t testing.TB, simCfg ecssim.Config, pool string) *world {
	return newWorldOf(t, simCfg, pool, ecssim.InstanceSpec{})
}

// newWorldOf is newWorld with an instance of one's choosing.
func newWorldOf(t testing.TB, simCfg ecssim.Config, pool string, spec ecssim.InstanceSpec) *world {
	t.Helper()
	sim, err := ecssim.New(simCfg)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := sim.AddInstance(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	dir := t.TempDir()
	w := &world{t: t, sim: sim, inst: inst, dir: dir, heartbeat: 50 * time.Millisecond}
	w.paths = Paths{
		Config:    desired.ConfigSource{Main: filepath.Join(dir, "etc", "config.yaml"), DropInDir: filepath.Join(dir, "etc", "config.d")},
		Entries:   filepath.Join(dir, "run", "pods"),
		Statuses:  filepath.Join(dir, "run", "status"),
		AgentFile: filepath.Join(dir, "run", "agent.json"),
		StateDir:  filepath.Join(dir, "state"),
	}
	st := sim.Dump()
	var vsw []string
	for _, v := range st.VSwitches {
		if v.ZoneID == inst.Zone {
			vsw = append(vsw, v.ID)
		}
	}
	cfg := fmt.Sprintf("apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\neni:\n  vSwitches:\n    %s: [%s]\n  securityGroups: [%s]\n%s",
		inst.Zone, strings.Join(vsw, ", "), ecssim.DefaultSecurityGroup, pool)
	if err := os.MkdirAll(filepath.Dir(w.paths.Config.Main), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.paths.Config.Main, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	w.cl, err = cloud.New(cloud.Config{Endpoint: sim.Endpoint(), Region: st.Region,
		Credentials: credentials.NewStaticAKCredentialsProvider(ecssim.DefaultAccessKeyID, ecssim.DefaultAccessKeySecret),
		Wait:        cloud.WaitPolicy{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// start runs an agent until the returned stop is called.
func (w *world) start(dp Datapath) (stop func()) {
	w.t.Helper()
	log := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if w.log != nil {
		log = w.log
	}
	a, err := New(Config{Paths: w.paths, InstanceID: w.inst.ID, NodeName: "node-1", Cloud: w.cl, Datapath: dp, Heartbeat: w.heartbeat, Logger: log, NoWatch: w.noWatch, Serving: w.serving})
	if err != nil {
		w.t.Fatal(err)
	}
	w.agent, w.dp = a, dp
	return runAgent(w.t, a)
}

// runAgent runs a until the returned stop, which waits for Run to return
// and fails the test if it returned an error.
func runAgent(t testing.TB, a *Agent) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}
}

func (w *world) addPod(i int) desired.Key {
	w.t.Helper()
	e := desired.Entry{APIVersion: desired.EntryAPIVersion, ContainerID: fmt.Sprintf("%064x", i+1), IfName: "eth0",
		NetNS: fmt.Sprintf("/var/run/netns/pod%d", i), PodNamespace: "default", PodName: fmt.Sprintf("pod-%d", i),
		PodUID: fmt.Sprintf("uid-%d", i), Created: time.Now()}
	if _, err := desired.NewEntryStore(w.paths.Entries).Write(e); err != nil {
		w.t.Fatal(err)
	}
	return e.Key()
}

func (w *world) waitFor(what string, timeout time.Duration, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			ips, enis := w.ownedIPs()
			w.t.Fatalf("timed out waiting for %s (statuses %d, owned IPs %d on %d ENIs)\n%s", what, len(w.statuses()), ips, enis, w.planNow())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// planNow renders what a fresh observation would plan (as `enid plan`).
func (w *world) planNow() string {
	p, _, err := w.plan()
	if err != nil {
		return err.Error()
	}
	b, _ := json.MarshalIndent(p.Memory, "", " ")
	return p.Render() + "\nmemory: " + string(b)
}

// quiet reports whether the node is converged for good: the plan is empty
// and no timer (cooldown, release delay, ...) is pending.
func (w *world) quiet() bool {
	// One instant for both: a deadline that passes between planning and
	// asking for the next one (a cooldown ending) would otherwise leave a
	// plan made before it and no timer after it.
	now := time.Now()
	p, cfg, err := w.planAt(clock.NewVirtual(now))
	if err != nil || !p.Empty() {
		return false
	}
	_, pending := p.Memory.NextDeadline(cfg, planner.Options{Now: now})
	return !pending
}

// steady reports whether the node has nothing left to do now (timers may
// still be pending).
func (w *world) steady() bool {
	p, _, err := w.plan()
	return err == nil && p.Empty()
}

// plan plans from a fresh observation, as `enid plan` does.
func (w *world) plan() (planner.Plan, desired.Config, error) { return w.planAt(nil) }

// planAt is plan at the time clk reads (nil: the real clock).
func (w *world) planAt(clk clock.Clock) (planner.Plan, desired.Config, error) {
	dp := w.dp
	if dp == nil {
		dp = NewNoDatapathMust(w.t)
	}
	r, err := PlanOnce(context.Background(), Config{Paths: w.paths, InstanceID: w.inst.ID, NodeName: "node-1", Cloud: w.cl, Datapath: dp, Clock: clk}, nil)
	return r.Plan, r.Desired.Config, err
}

func (w *world) statuses() map[string]status.Attachment {
	all, _, err := status.NewStore(w.paths.Statuses).ReadAll()
	if err != nil {
		w.t.Fatal(err)
	}
	m := map[string]status.Attachment{}
	for _, a := range all {
		m[a.ContainerID+"_"+a.IfName] = a
	}
	return m
}

// ownedIPs counts secondary IPs on the ENIs the simulator holds for us.
func (w *world) ownedIPs() (ips int, enis int) {
	for _, e := range w.sim.Dump().ENIs {
		if e.Type == "Secondary" && e.Tags["enid.dev/owner"] == w.inst.ID {
			ips += len(e.IPv4)
			enis++
		}
	}
	return ips, enis
}

func TestAgentServesPodsAndSettles(t *testing.T) {
	w := newWorld(t, ecssim.Config{Delays: ecssim.Delays{Attach: 50 * time.Millisecond}},
		"pool:\n  minIdle: 2\n  maxIdle: 4\n  batch: 5\n  releaseDelay: 200ms\n  cooldown: 100ms\n")
	stop := w.start(NewNoDatapathMust(t))
	defer stop()

	const n = 12
	var keys []desired.Key
	for i := range n {
		keys = append(keys, w.addPod(i))
	}
	start := time.Now()
	w.waitFor("all pods ready", 20*time.Second, func() bool {
		st := w.statuses()
		for _, k := range keys {
			if st[k.String()].Phase != status.Ready {
				return false
			}
		}
		return true
	})
	t.Logf("%d pods ready in %s", n, time.Since(start))
	seen := map[netip.Addr]string{}
	for k, a := range w.statuses() {
		if len(a.IPs) != 1 {
			t.Fatalf("%s: %d IPs, want 1", k, len(a.IPs))
		}
		ip := a.IPs[0].Address.Addr()
		if other, dup := seen[ip]; dup {
			t.Fatalf("%s and %s share %s", k, other, ip)
		}
		seen[ip] = k
	}
	for _, k := range keys {
		if err := desired.NewEntryStore(w.paths.Entries).Remove(k); err != nil {
			t.Fatal(err)
		}
	}
	start = time.Now()
	w.waitFor("statuses removed and pool settled", 20*time.Second, func() bool {
		ips, _ := w.ownedIPs()
		return len(w.statuses()) == 0 && ips <= 4 && ips >= 2
	})
	t.Logf("settled in %s", time.Since(start))
	// Every pass is timed once (the one running may not be yet), and the
	// entries were read again after they changed, at most once a pass.
	// The agent keeps running: read the three between two equal pass
	// counts, or a pass ending between the reads counts as timed and not
	// as passed (CI saw "29 passes, 30 timed").
	m := w.agent.Metrics()
	var passes, timed, reads float64
	for try := 0; ; try++ {
		passes = gauge(t, m, "enid_reconcile_passes_total")
		timed, reads = histCount(t, m, "enid_pass_duration_seconds"), histCount(t, m, "enid_desired_read_duration_seconds")
		if gauge(t, m, "enid_reconcile_passes_total") == passes || try == 50 {
			break
		}
	}
	if timed < passes-1 || timed > passes {
		t.Errorf("%v passes, %v timed", passes, timed)
	}
	if reads < 2 || reads > passes {
		t.Errorf("%v reads of desired state in %v passes, want at least the first and one after the entries changed", reads, passes)
	}
}

// histCount returns how many observations the histogram name holds.
func histCount(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 && f.GetMetric()[0].GetHistogram() != nil {
			return float64(f.GetMetric()[0].GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("no histogram %s", name)
	return 0
}

func NewNoDatapathMust(t testing.TB) *NoDatapath {
	t.Helper()
	dp, err := NewNoDatapath("")
	if err != nil {
		t.Fatal(err)
	}
	return dp
}

// A restart that finds no kernel state (a datapath that starts empty) keeps
// every pod on the address its published status names, and makes no cloud
// change: bindings are observed again, not remembered privately.
func TestAgentRestartKeepsBindings(t *testing.T) {
	w := newWorld(t, ecssim.Config{Delays: ecssim.Delays{Attach: 20 * time.Millisecond}},
		"pool:\n  minIdle: 2\n  maxIdle: 20\n  batch: 5\n")
	stop := w.start(NewNoDatapathMust(t))
	var keys []desired.Key
	for i := range 6 {
		keys = append(keys, w.addPod(i))
	}
	ready := func() bool {
		st := w.statuses()
		for _, k := range keys {
			if st[k.String()].Phase != status.Ready {
				return false
			}
		}
		return true
	}
	w.waitFor("all pods ready", 20*time.Second, ready)
	before := map[string]netip.Prefix{}
	for k, a := range w.statuses() {
		before[k] = a.IPs[0].Address
	}
	stop()

	mutations := func() int {
		n := 0
		for action, outcomes := range w.sim.Counters() {
			if !strings.HasPrefix(action, "Describe") {
				for _, c := range outcomes {
					n += c
				}
			}
		}
		return n
	}
	calls := mutations()
	stop = w.start(NewNoDatapathMust(t))
	defer stop()
	// The new agent publishes again only what differs: wait for its first
	// heartbeat, then for two passes of its own after that (what one pass
	// dispatches is done and seen by the next) with a fresh plan empty, so
	// that any cloud change the restart would make has been made.
	w.waitFor("the restarted agent to be ready", 10*time.Second, func() bool {
		a, err := status.ReadAgent(w.paths.AgentFile)
		return err == nil && a.Ready && a.Started.After(time.Now().Add(-10*time.Second)) && !a.Stopped
	})
	passes := func() float64 { return gauge(t, w.agent.Metrics(), "enid_reconcile_passes_total") }
	atReady := passes()
	w.waitFor("two passes of the restarted agent and an empty plan", 10*time.Second, func() bool {
		if passes() < atReady+2 {
			w.agent.Wake() // a converged agent runs no pass by itself
			return false
		}
		return w.steady()
	})
	w.waitFor("all pods ready after restart", 10*time.Second, ready)
	for k, a := range w.statuses() {
		if a.IPs[0].Address != before[k] {
			t.Errorf("%s moved from %s to %s across a restart", k, before[k], a.IPs[0].Address)
		}
	}
	if got := mutations(); got != calls {
		t.Errorf("restart made %d cloud mutations, want none", got-calls)
	}
	if err := w.sim.Check(); err != nil {
		t.Fatalf("simulator invariants: %v", err)
	}
}

// A vSwitch the cloud says is out of addresses is skipped: the next ENI is
// created in the zone's other vSwitch, and pods still become Ready.
func TestAgentSkipsExhaustedVSwitch(t *testing.T) {
	a, b := netip.MustParsePrefix("192.168.10.0/24"), netip.MustParsePrefix("192.168.11.0/24")
	w := newWorld(t, ecssim.Config{Zones: []string{"cn-hangzhou-h"}, VSwitches: []ecssim.VSwitchConfig{
		{ID: "vsw-a", Zone: "cn-hangzhou-h", CIDR: a}, {ID: "vsw-b", Zone: "cn-hangzhou-h", CIDR: b}}},
		"  vSwitchPolicy: ordered\npool:\n  minIdle: 2\n  maxIdle: 8\n")
	w.sim.InjectFault(ecssim.Fault{Action: "CreateNetworkInterface", Code: "InvalidVSwitchId.IpNotEnough"})
	stop := w.start(NewNoDatapathMust(t))
	defer stop()
	k := w.addPod(0)
	w.waitFor("the pod ready", 20*time.Second, func() bool { return w.statuses()[k.String()].Phase == status.Ready })
	ip := w.statuses()[k.String()].IPs[0].Address.Addr()
	if !b.Contains(ip) {
		t.Fatalf("pod got %s, want an address of vsw-b %s (vsw-a was reported exhausted)", ip, b)
	}
	mem, err := ReadMemory(w.paths.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mem.Exhausted["vsw-a"]; !ok {
		t.Errorf("memory does not remember vsw-a as exhausted: %+v", mem)
	}
}

// Only one agent may run per node: a second one on the same state
// directory refuses to start and says why.
func TestAgentSingleInstance(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "")
	stop := w.start(NewNoDatapathMust(t))
	defer stop()
	w.waitFor("the first agent to start", 10*time.Second, func() bool {
		_, err := status.ReadAgent(w.paths.AgentFile)
		return err == nil
	})
	second, err := New(Config{Paths: w.paths, InstanceID: w.inst.ID, Cloud: w.cl, Datapath: NewNoDatapathMust(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = second.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "only one agent may run per node") {
		t.Fatalf("second agent: %v, want a refusal naming the lock", err)
	}
}

// NoLocks (the simulation's thousands of agents in one process) takes
// neither lock: two agents with it run on one state directory, and the
// heartbeat names no lock, so its readers check the pid.
func TestAgentNoLocks(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "")
	var stops []func()
	for range 2 {
		a, err := New(Config{Paths: w.paths, InstanceID: w.inst.ID, Cloud: w.cl, Datapath: NewNoDatapathMust(t), NoLocks: true})
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, runAgent(t, a))
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	w.waitFor("a heartbeat", 10*time.Second, func() bool {
		_, err := status.ReadAgent(w.paths.AgentFile)
		return err == nil
	})
	beat, err := status.ReadAgent(w.paths.AgentFile)
	if err != nil {
		t.Fatal(err)
	}
	if beat.Lock != "" {
		t.Errorf("heartbeat names lock %q, want none", beat.Lock)
	}
	for _, f := range []string{filepath.Join(w.paths.StateDir, "enid.lock"), filepath.Join(filepath.Dir(w.paths.AgentFile), status.LockFileName)} {
		if _, err := os.Stat(f); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want no lock file", f, err)
		}
	}
}

// ECS burns a ClientToken whose call failed: after an IpNotEnough on
// create, the create must come back with a new token once addresses are
// freed, within one back-off, and never resend the burnt one.
func TestAgentNewTokenAfterIpNotEnough(t *testing.T) {
	w := newWorld(t, ecssim.Config{Zones: []string{"cn-hangzhou-h"}, VSwitches: []ecssim.VSwitchConfig{
		{ID: "vsw-a", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.10.0/24")}}},
		"pool:\n  minIdle: 0\n  maxIdle: 4\n  batch: 2\n")
	// Another node's ENI holds addresses; it goes away later.
	other, err := w.cl.CreateENI(context.Background(), cloud.CreateENIRequest{VSwitchID: "vsw-a",
		SecurityGroups: []string{ecssim.DefaultSecurityGroup}, IPv4Count: 20})
	if err != nil {
		t.Fatal(err)
	}
	w.sim.InjectFault(ecssim.Fault{Action: "CreateNetworkInterface", Code: "InvalidVSwitchId.IpNotEnough"})
	stop := w.start(NewNoDatapathMust(t))
	defer stop()
	k := w.addPod(0)
	w.waitFor("the pod waiting on the exhausted vSwitch", 20*time.Second, func() bool {
		return w.statuses()[k.String()].ReasonCode == string(planner.ReasonVSwitchExhausted)
	})
	mem, err := ReadMemory(w.paths.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	burnt := 0
	for _, r := range mem.Tokens {
		burnt += r.Attempt
	}
	if burnt != 1 {
		t.Errorf("memory counts %d failed attempts, want 1: %+v", burnt, mem.Tokens)
	}
	if err := w.cl.DeleteENI(context.Background(), other.ID); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	w.waitFor("the pod ready", 20*time.Second, func() bool { return w.statuses()[k.String()].Phase == status.Ready })
	// One back-off of a terminal failure is at most 5 s; a full resync
	// (which sees the freed addresses) comes within it.
	if d := time.Since(freed); d > 8*time.Second {
		t.Errorf("the pod was served %v after the addresses were freed", d)
	}
	c := w.sim.Counters()["CreateNetworkInterface"]
	if c["IdempotentFailed"] != 0 || c["IdempotentParameterMismatch"] != 0 {
		t.Errorf("creates %v: a burnt token was resent", c)
	}
	if c["InvalidVSwitchId.IpNotEnough"] != 1 || c["ok"] < 2 {
		t.Errorf("creates %v, want one IpNotEnough and the successes", c)
	}
}

// A config naming one good and one unknown vSwitch (a typo) serves pods
// from the good one, and says which one does not exist: in the plan, the
// agent's status and the metrics.
func TestAgentUnknownVSwitch(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 1\n  maxIdle: 4\n  batch: 2\n")
	cfg, err := os.ReadFile(w.paths.Config.Main)
	if err != nil {
		t.Fatal(err)
	}
	good := w.inst.VSwitchID
	cfg = []byte(strings.Replace(string(cfg), "["+good+"]", "["+good+", vsw-typo]", 1))
	if !strings.Contains(string(cfg), "vsw-typo") {
		t.Fatalf("config %s does not list %s alone", cfg, good)
	}
	if err := os.WriteFile(w.paths.Config.Main, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	stop := w.start(NewNoDatapathMust(t))
	defer stop()
	k := w.addPod(0)
	w.waitFor("the pod ready", 20*time.Second, func() bool { return w.statuses()[k.String()].Phase == status.Ready })
	p, _, err := w.plan()
	if err != nil {
		t.Fatal(err)
	}
	if !p.Complete || !strings.Contains(strings.Join(p.Problems, "\n"), "vsw-typo does not exist") {
		t.Errorf("plan (complete %v) does not name the unknown vSwitch: %q", p.Complete, p.Problems)
	}
	w.waitFor("the agent's status naming vsw-typo", 5*time.Second, func() bool {
		ag, err := status.ReadAgent(w.paths.AgentFile)
		return err == nil && ag.Ready && strings.Contains(ag.Reason, "vsw-typo")
	})
	mfs, err := w.agent.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "enid_vswitch_unknown" && len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == "vsw-typo" {
				found = m.GetGauge().GetValue() == 1
			}
		}
	}
	if !found {
		t.Error("enid_vswitch_unknown{vswitch=\"vsw-typo\"} is not 1")
	}
}

// TestSpendKeepsArraysNearTheirSize: the next pass plans in the arrays of
// the plan the pass replaced, but a burst's actions array is not kept
// for a node that settled since (a megabyte at 1,000 new pods, held
// and scanned by every collection for nothing), nor the small arrays of
// a node of a few pods.
func TestSpendKeepsArraysNearTheirSize(t *testing.T) {
	a := &Agent{}
	burst := planner.Plan{Actions: make([]planner.Action, 2000), Statuses: make([]planner.PodStatus, 1000)}
	a.spend(burst, planner.Plan{Actions: make([]planner.Action, 1500), Statuses: make([]planner.PodStatus, 1000)})
	if cap(a.spent.Actions) != 2000 || cap(a.spent.Statuses) != 1000 {
		t.Errorf("after a pass of 1,500 actions the spent arrays hold %d actions and %d statuses: want the burst's 2,000 and 1,000",
			cap(a.spent.Actions), cap(a.spent.Statuses))
	}
	a.spend(burst, planner.Plan{Actions: make([]planner.Action, 3), Statuses: make([]planner.PodStatus, 1000)})
	if a.spent.Actions != nil || cap(a.spent.Statuses) != 1000 {
		t.Errorf("after a pass of 3 actions the spent arrays hold %d actions and %d statuses: want no actions array, the 1,000 statuses",
			cap(a.spent.Actions), cap(a.spent.Statuses))
	}
	a.spend(burst, planner.Plan{Statuses: make([]planner.PodStatus, 10)})
	if a.spent.Statuses != nil {
		t.Errorf("with 10 pods left the spent statuses array of %d is kept", cap(a.spent.Statuses))
	}
	// A few pods' arrays are small objects, cheap to allocate; a
	// simulated fleet of idle nodes would keep them for nothing.
	small := planner.Plan{Actions: make([]planner.Action, 20), Statuses: make([]planner.PodStatus, 20)}
	a.spend(small, small)
	if a.spent.Actions != nil || a.spent.Statuses != nil {
		t.Errorf("a plan of 20 actions and 20 statuses left arrays of %d and %d to recycle: want none", cap(a.spent.Actions), cap(a.spent.Statuses))
	}
}
