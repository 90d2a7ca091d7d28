package simulation

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/reconcile"
)

// Config is one run. A run is a pure function of its Config: the same
// Config gives the same trace, byte for byte.
type Config struct {
	// Seed draws the workload, the faults and the cloud's latencies.
	Seed uint64
	// Nodes is the fleet's size.
	Nodes int
	// Workload is how long pods come and go (virtual time); then every
	// pod is deleted and the fleet settles for Settle.
	Workload time.Duration
	Settle   time.Duration
	// Profile is the simulator's profile (ecssim.ProfileFast or
	// ecssim.ProfileRealistic).
	Profile string
	// AccountQPS is the account's API rate (0: a fifth of the nodes per
	// second, at least 20).
	AccountQPS float64
	// Heartbeat is the agents' heartbeat period (default a minute: the
	// heartbeat is a node-local file nobody reads here, and ten thousand
	// of them every two seconds would be most of a fleet run's events).
	Heartbeat time.Duration
	// Faults turns on the seed's faults and odd orderings: agent kills,
	// config changes, cloud outages, throttling storms, stale reads,
	// conflicts, burnt tokens, duplicate and early DELs, CNI GC.
	Faults bool
	// Pods is the pods per node at the start (default 3); Churn the new
	// pods per node per minute during the workload (default 1).
	Pods  int
	Churn float64
	// Trace, when set, receives the trace as it is written; TailLines
	// keeps the last lines for Result.Tail; TraceCalls adds a line per
	// cloud call.
	Trace      io.Writer
	TailLines  int
	TraceCalls bool
	// Dir holds the nodes' files.
	Dir string
	// Spread is the config's pool.spreadWindow (0: the default).
	Spread time.Duration
	// Check plans up to this many nodes once more at the end, as `enid
	// plan` would (0: 20), to prove the plans converged.
	Check int
}

// Stats are a run's counts.
type Stats struct {
	Steps, Events int
	PodsReady     int
	Failed        int
	TimedOut      int
	Kills         int
	// ReadyWaits are the virtual times from an ADD to Ready.
	ReadyWaits []time.Duration
}

func (s *Stats) podReady(sinceADD time.Duration) {
	s.PodsReady++
	s.ReadyWaits = append(s.ReadyWaits, sinceADD)
}

// Result is what a run found.
type Result struct {
	Hash       string
	Lines      int
	Violations []string
	Tail       []string
	Stats      Stats
	Calls      map[string]int
	CallTotal  int
}

// Run runs one simulation. It must run in a testing/synctest bubble (its
// goroutines must all be parked for it to move on: synctest.Wait says
// when they are).
func Run(cfg Config) (*Result, error) {
	if cfg.Nodes <= 0 {
		cfg.Nodes = 3
	}
	if cfg.Pods == 0 {
		cfg.Pods = 3
	}
	if cfg.Churn == 0 {
		cfg.Churn = 1
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = time.Minute
	}
	if cfg.Settle == 0 {
		cfg.Settle = 10 * time.Minute
	}
	if cfg.Check == 0 {
		cfg.Check = 20
	}
	if cfg.AccountQPS == 0 {
		cfg.AccountQPS = max(20, float64(cfg.Nodes)/5)
	}
	w, cleanup, err := setup(cfg)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	wl := &workload{w: w, rng: rng, base: w.sim.CurrentSettings()}
	if cfg.Faults {
		if err := w.addForeignENIs(rng); err != nil {
			return nil, err
		}
		wl.drawCloud()
	}
	wl.schedule()
	end := Start.Add(cfg.Workload)
	w.loop(end)
	if len(w.violations) == 0 {
		wl.wrapUp()
		w.loop(end.Add(cfg.Settle))
	}
	if len(w.violations) == 0 {
		w.final()
	}
	w.quiesce()
	return w.result(), nil
}

func (w *world) result() *Result {
	return &Result{Hash: w.hash(), Lines: w.lines, Violations: w.violations, Tail: w.tail, Stats: w.stats,
		Calls: w.calls, CallTotal: w.callTotal}
}

// setup makes the run's world: the simulated cloud on the virtual clock
// and the nodes (not joined yet), their files in cfg.Dir or, when it is
// empty, in a directory of their own (tempDir). The func returned closes
// the cloud and removes that directory.
func setup(cfg Config) (*world, func(), error) {
	removeDir := func() {}
	if cfg.Dir == "" {
		d, cleanup, err := tempDir()
		if err != nil {
			return nil, nil, err
		}
		cfg.Dir, removeDir = d, cleanup
	}
	w, err := newSim(cfg)
	if err != nil {
		removeDir()
		return nil, nil, err
	}
	return w, func() { w.sim.Close(); removeDir() }, nil
}

// newSim is setup's world in cfg.Dir.
func newSim(cfg Config) (*world, error) {
	w := newWorld(cfg, cfg.Dir)
	w.zone = "cn-hangzhou-h"
	var fs syscall.Statfs_t
	w.inodesUnique = syscall.Statfs(cfg.Dir, &fs) == nil && fs.Type == tmpfsMagic
	base := ecssim.Config{VPCCIDR: "10.0.0.0/8", Zones: []string{w.zone},
		VSwitches: []ecssim.VSwitchConfig{{ID: "vsw-sim", Zone: w.zone, CIDR: netip.MustParsePrefix("10.0.0.0/12")}},
		Seed:      cfg.Seed, Clock: w.clk.Now, Timers: w.clk}
	if err := ecssim.ApplyProfile(&base, cfg.Profile); err != nil {
		return nil, err
	}
	base.AccountRateLimit = ecssim.RateLimit{QPS: cfg.AccountQPS, Burst: int(cfg.AccountQPS)}
	sim, err := ecssim.New(base)
	if err != nil {
		return nil, err
	}
	w.sim, w.handler = sim, sim.Handler()
	for i := range cfg.Nodes {
		inst, err := sim.AddInstance(ecssim.InstanceSpec{InstanceType: "ecs.g7.4xlarge", Zone: w.zone})
		if err != nil {
			sim.Close()
			return nil, err
		}
		w.protected[inst.PrimaryENI] = "primary"
		n := &node{w: w, idx: i, name: fmt.Sprintf("node-%05d", i), inst: inst, pods: map[int]*pod{}}
		if n.dp, err = reconcile.NewNoDatapath(""); err != nil {
			sim.Close()
			return nil, err
		}
		n.config = w.configYAML(poolKnobs[0], false)
		w.nodes = append(w.nodes, n)
	}
	return w, nil
}

// poolKnobs are the pools a config change picks from (minIdle, maxIdle).
var poolKnobs = [][2]int{{2, 6}, {0, 4}, {4, 12}, {1, 24}}

// configYAML is a node's config: the simulated zone's vSwitch, the
// default security group, the pool, and prefix mode or not.
func (w *world) configYAML(pool [2]int, prefix bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: %s\nkind: %s\nmode: shared-eni\n", desired.ConfigAPIVersion, desired.ConfigKind)
	fmt.Fprintf(&b, "eni:\n  vSwitches:\n    %s: [vsw-sim]\n  securityGroups: [%s]\n", w.zone, ecssim.DefaultSecurityGroup)
	if prefix {
		b.WriteString("  ipv4Allocation: prefix\n")
	}
	fmt.Fprintf(&b, "pool:\n  minIdle: %d\n  maxIdle: %d\n", pool[0], pool[1])
	if w.cfg.Spread > 0 {
		fmt.Fprintf(&b, "  spreadWindow: %s\n", w.cfg.Spread)
	}
	return b.String()
}

// addForeignENIs creates ENIs enid does not own on some instances (as
// another controller would): enid must never touch them.
func (w *world) addForeignENIs(rng *rand.Rand) error {
	for _, n := range w.nodes {
		if rng.IntN(3) != 0 {
			continue
		}
		id, err := w.sim.AddForeignENI(n.inst.ID)
		if err != nil {
			return err
		}
		w.protected[id] = "foreign"
	}
	return nil
}

// final checks, once the fleet settled with no pods: every pod torn down,
// nothing leaked, and the plans converged.
func (w *world) final() {
	st := w.sim.Dump()
	for _, n := range w.nodes {
		var left []string
		for _, p := range n.pods {
			if p.phase != podGone {
				left = append(left, fmt.Sprintf("%s (%s)", p.name, keyOf(p.key)))
			}
		}
		sort.Strings(left)
		if len(left) > 0 {
			w.violate("%s: pods never torn down after the workload: %s", n.name, strings.Join(left, ", "))
		}
		if len(n.bound) > 0 {
			w.violate("%s: %d addresses still set up for pods after every pod was deleted", n.name, len(n.bound))
		}
	}
	byOwner := map[string][]ecssim.ENIState{}
	for _, e := range st.ENIs {
		if e.Tags[observed.TagOwner] != "" {
			byOwner[e.Tags[observed.TagOwner]] = append(byOwner[e.Tags[observed.TagOwner]], e)
		}
	}
	for _, n := range w.nodes {
		maxIdle := poolKnobs[n.poolIdx][1]
		idle := 0
		for _, e := range byOwner[n.inst.ID] {
			if e.Status != "InUse" || e.InstanceID != n.inst.ID {
				w.violate("%s: owned ENI %s is %s on %q after the fleet settled (leaked)", n.name, e.ID, e.Status, e.InstanceID)
			}
			idle += len(e.IPv4) + 16*len(e.IPv4Prefixes)
		}
		slack := 0
		if n.prefix {
			slack = 15 // prefixes go back whole
		}
		if idle > maxIdle+slack {
			w.violate("%s: %d idle addresses held after the fleet settled with no pod (pool.maxIdle %d): leaked", n.name, idle, maxIdle)
		}
	}
	w.checkPlans()
}

// checkPlans plans up to Config.Check nodes once more, as `enid plan`
// would: a converged node plans nothing.
func (w *world) checkPlans() {
	nodes := w.nodes
	if len(nodes) > w.cfg.Check {
		step := len(nodes) / w.cfg.Check
		var pick []*node
		for i := 0; i < len(nodes) && len(pick) < w.cfg.Check; i += step {
			pick = append(pick, nodes[i])
		}
		nodes = pick
	}
	done := make(chan struct{})
	type out struct {
		n    *node
		plan []string
		err  error
	}
	outs := make([]out, len(nodes))
	go func() {
		defer close(done)
		for i, n := range nodes {
			outs[i] = out{n: n}
			c, err := w.cloudClient(&incarnation{node: n, gen: -1}, w.clk, rand.New(rand.NewPCG(1, 2)))
			if err != nil {
				outs[i].err = err
				continue
			}
			r, err := reconcile.PlanOnce(context.Background(), reconcile.Config{Paths: incPaths(n.cur.dir),
				InstanceID: n.inst.ID, NodeName: n.name, Cloud: c, Datapath: n.dp, Clock: w.clk}, nil)
			outs[i].err = err
			for _, a := range r.Plan.Actions {
				outs[i].plan = append(outs[i].plan, fmt.Sprintf("%s %s (%s)", a.Kind, a.Target, a.Reason))
			}
		}
	}()
	limit := w.clk.Now().Add(time.Hour)
	for {
		select {
		case <-done:
			for _, o := range outs {
				if o.err != nil {
					w.violate("%s: plan once more: %v", o.n.name, o.err)
				} else if len(o.plan) > 0 {
					w.violate("%s: the plan did not converge: %s", o.n.name, strings.Join(o.plan, "; "))
				}
			}
			return
		default:
		}
		next := w.clk.Now().Add(time.Second)
		if next.After(limit) {
			next = limit
		}
		w.loop(next)
		if !w.clk.Now().Before(limit) {
			w.violate("planning the nodes once more did not end within an hour")
			return
		}
	}
}

// tempDir makes a directory for a run's files, in memory when the machine
// can (tmpRoot); the func removes it.
func tempDir() (string, func(), error) {
	d, err := os.MkdirTemp(tmpRoot(), "enid-sim-")
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}

// tmpfsMagic is statfs's f_type of tmpfs (TMPFS_MAGIC, linux/magic.h).
const tmpfsMagic = 0x01021994

// tmpRoot is where a run keeps its nodes' files by default: memory
// (/dev/shm) when the machine has it, as /run is on a node.
func tmpRoot() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}
