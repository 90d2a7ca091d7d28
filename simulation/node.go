package simulation

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/reconcile"
	"github.com/enidnet/enid/reconcile/status"
)

// node is one simulated ECS instance with its agent: the files of the
// agent (they outlive an incarnation, as /run and /var/lib do a crash),
// the datapath (the kernel's record, which outlives one too) and the pods
// the container runtime runs on it.
type node struct {
	w    *world
	idx  int
	name string
	inst ecssim.InstanceInfo
	dp   *reconcile.NoDatapath
	// cur is the running agent (nil before the node joins).
	cur *incarnation
	gen int
	// config is the config file's content now.
	config string
	// pods are the pods the runtime runs, starts or deletes, by id.
	pods   map[int]*pod
	nextID int
	// nextName numbers the pods' names.
	nextName int
	// poolIdx (in poolKnobs) and prefix are the config now.
	poolIdx int
	prefix  bool
	// killedAt is when the agent was last killed.
	killedAt time.Time
	// dpChanged: the datapath was asked to change since checkBound last
	// ran.
	dpChanged atomic.Bool
	// bound is what this node's datapath last had set up: address -> attachment.
	bound map[netip.Addr]string
	// killOnAttach: the agent is killed as soon as the cloud answers its
	// next AttachNetworkInterface (the attach still in progress), as
	// e2e TestKillDuringAttach does. Set by the workload; read and
	// cleared under world.mu.
	killOnAttach bool
}

// incarnation is one run of an agent on a node, from start to kill or stop.
type incarnation struct {
	node    *node
	gen     int
	dir     string
	agent   *reconcile.Agent
	entries *desired.EntryStore
	status  *status.Store
	cancel  context.CancelFunc
	done    chan struct{}
	// run starts the agent's goroutine (world.flush).
	run func()
	// dead: killed; its calls and datapath changes are refused from then
	// on, as a process that no longer exists makes none.
	dead atomic.Bool
}

func (inc *incarnation) stop() { inc.cancel() }

func (inc *incarnation) exited() bool {
	select {
	case <-inc.done:
		return true
	default:
		return false
	}
}

// paths are an incarnation's files under its directory.
func incPaths(dir string) reconcile.Paths {
	p := reconcile.DefaultPaths()
	p.Config = desired.ConfigSource{Main: filepath.Join(dir, "etc", "config.yaml"), DropInDir: filepath.Join(dir, "etc", "config.d")}
	p.Entries = filepath.Join(dir, "run", "pods")
	p.Statuses = filepath.Join(dir, "run", "status")
	p.AgentFile = filepath.Join(dir, "run", "agent.json")
	p.StateDir = filepath.Join(dir, "state")
	p.Hints = desired.HintSources{}
	return p
}

// start runs a new incarnation of the node's agent in dir, whose files
// are what the node's disk holds.
func (n *node) start(dir string) error {
	n.gen++
	inc := &incarnation{node: n, gen: n.gen, dir: dir, done: make(chan struct{})}
	p := incPaths(dir)
	// Ranked by node, then incarnation: a killed agent's goroutines
	// unwind beside the next one's.
	clk := n.w.clk.Owned(inc, uint64(n.idx+1)<<20|uint64(n.gen))
	c, err := n.w.cloudClient(inc, clk, rand.New(rand.NewPCG(n.w.cfg.Seed, uint64(n.idx)<<20|uint64(n.gen))))
	if err != nil {
		return err
	}
	a, err := reconcile.New(reconcile.Config{Paths: p, InstanceID: n.inst.ID, NodeName: n.name,
		Cloud: c, Datapath: fencedDatapath{n.dp, inc}, Clock: clk, NoWatch: true, NoLocks: true,
		Heartbeat: n.w.cfg.Heartbeat, Version: "simulation", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	inc.agent, inc.cancel = a, cancel
	inc.entries, inc.status = desired.NewEntryStore(p.Entries), status.NewStore(p.Statuses)
	inc.run = func() {
		go func() {
			defer close(inc.done)
			if err := a.Run(ctx); err != nil && !inc.dead.Load() {
				n.w.violate("node %s: agent exited: %v", n.name, err)
			}
		}()
	}
	n.w.starts = append(n.w.starts, inc)
	n.cur = inc
	n.w.log("%s agent started (incarnation %d)", n.name, inc.gen)
	return nil
}

// cloudClient is a cloud client as cmd/enid wires the agent's (the
// default rate limit, its wait policy), whose calls go through the run's
// transport as inc's.
func (w *world) cloudClient(inc *incarnation, clk clock.Clock, rng *rand.Rand) (*cloud.Client, error) {
	return cloud.New(cloud.Config{Endpoint: "http://ecs.simulation.invalid", Region: ecssim.DefaultRegion,
		Credentials: credentials.NewStaticAKCredentialsProvider(ecssim.DefaultAccessKeyID, ecssim.DefaultAccessKeySecret),
		RateLimit:   cloud.RateLimit{QPS: desired.DefaultQPS, Burst: desired.DefaultBurst},
		Transport:   &transport{w: w, inc: inc}, Clock: clk, Rand: rng,
		Wait: cloud.WaitPolicy{Initial: 100 * time.Millisecond, Max: time.Second}})
}

// join writes the node's files and starts its first agent.
func (n *node) join() error {
	dir := filepath.Join(n.w.dir, n.name, "gen1")
	for _, d := range []string{"etc/config.d", "run", "state"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "config.yaml"), []byte(n.config), 0o644); err != nil {
		return err
	}
	return n.start(dir)
}

// kill ends the agent at this instant, as SIGKILL would: every goroutine
// of the run is parked, so no write is half done; the files are what they
// are now, and a call it had in flight has reached the cloud or not. The
// next incarnation starts on a copy of the files (the killed one's
// goroutines unwind on the old copy, refused by the cloud and the
// datapath).
func (n *node) kill() error {
	old := n.cur
	old.dead.Store(true)
	// The copy is made before the old incarnation hears of its end: its
	// goroutines are all parked now, so the files are as the kill leaves
	// them.
	dir := filepath.Join(n.w.dir, n.name, fmt.Sprintf("gen%d", n.gen+1))
	if err := os.CopyFS(dir, os.DirFS(old.dir)); err != nil {
		return fmt.Errorf("copy %s's files: %w", n.name, err)
	}
	old.cancel()
	n.killedAt = n.w.clk.Now()
	n.w.log("%s agent killed (incarnation %d)", n.name, old.gen)
	return n.start(dir)
}

// podIDs are the node's pods' ids, in order.
func (n *node) podIDs() []int {
	ids := make([]int, 0, len(n.pods))
	for id := range n.pods {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// newPod starts a pod on the node.
func (n *node) newPod(name string) *pod {
	n.nextID++
	p := &pod{n: n, id: n.nextID, name: name}
	n.pods[p.id] = p
	p.add()
	return p
}

// setConfig rewrites the config file and wakes the agent.
func (n *node) setConfig(cfg string) error {
	n.config = cfg
	f := incPaths(n.cur.dir).Config.Main
	if err := os.WriteFile(f+".tmp", []byte(cfg), 0o644); err != nil {
		return err
	}
	if err := os.Rename(f+".tmp", f); err != nil {
		return err
	}
	n.wake()
	return nil
}

// wakeup is what a node's agent is told once the run's event is over.
type wakeup struct {
	// all: something besides entries changed; everything is read again.
	all bool
	// entries are the names of the entry files (entries, deletion
	// records) changed.
	entries []string
}

// wake asks the node's agent for a pass once the run's event is over
// (world.flush) that reads everything again.
func (n *node) wake() { n.wakeup().all = true }

// entriesChanged asks the node's agent for a pass once the run's event is
// over that reads the entry files named again.
func (n *node) entriesChanged(names ...string) {
	u := n.wakeup()
	u.entries = append(u.entries, names...)
}

func (n *node) wakeup() *wakeup {
	u := n.w.wakes[n]
	if u == nil {
		u = &wakeup{}
		n.w.wakes[n] = u
	}
	return u
}

// check reads the statuses of the pods in ADD or DEL and the addresses
// the datapath set up.
func (n *node) check() {
	now := n.w.clk.Now()
	// Every time: a directory's mtime would say whether a status changed,
	// but its granularity is the kernel's tick, so two changes within one
	// can leave it as it was, and the run would see one late as the wall
	// clock has it.
	for _, id := range n.podIDs() {
		if p := n.pods[id]; p != nil && (p.phase == podAdding || p.phase == podDeleting) {
			p.check(now)
		}
	}
	if n.dpChanged.Swap(false) {
		n.checkBound()
	}
}

// checkBound holds the first invariant: no address is set up for two
// pods, on this node or any other.
func (n *node) checkBound() {
	o, err := n.dp.Observe(context.Background())
	if err != nil {
		n.w.violate("node %s: observe datapath: %v", n.name, err)
		return
	}
	now := make(map[netip.Addr]string, len(o.Pods))
	for _, p := range o.Pods {
		who := n.name + "/" + p.Key.ContainerID[:min(12, len(p.Key.ContainerID))]
		for _, a := range []netip.Addr{p.IPv4, p.IPv6} {
			if !a.IsValid() {
				continue
			}
			if prev, dup := now[a]; dup {
				n.w.violate("address %s set up for two pods: %s and %s", a, prev, who)
			}
			now[a] = who
		}
	}
	for a, who := range n.bound {
		if now[a] != who && n.w.bound[a] == who {
			delete(n.w.bound, a)
		}
	}
	for a, who := range now {
		if n.bound[a] == who {
			continue
		}
		if other, taken := n.w.bound[a]; taken && other != who {
			n.w.violate("address %s set up for two pods: %s and %s", a, other, who)
			continue
		}
		n.w.bound[a] = who
	}
	n.bound = now
}

// fencedDatapath is the node's datapath as one incarnation sees it: a
// killed incarnation changes nothing.
type fencedDatapath struct {
	*reconcile.NoDatapath
	inc *incarnation
}

// fenced notes a change asked of the datapath (node.check reads it
// back) and refuses it when the incarnation was killed.
func (f fencedDatapath) fenced() error {
	f.inc.node.dpChanged.Store(true)
	if f.inc.dead.Load() {
		return errKilled
	}
	return nil
}

func (f fencedDatapath) EnsureENI(ctx context.Context, s linux.ENISpec) (linux.Changes, error) {
	if err := f.fenced(); err != nil {
		return linux.Changes{}, err
	}
	return f.NoDatapath.EnsureENI(ctx, s)
}

func (f fencedDatapath) RemoveENI(ctx context.Context, mac string, table int) (linux.Changes, error) {
	if err := f.fenced(); err != nil {
		return linux.Changes{}, err
	}
	return f.NoDatapath.RemoveENI(ctx, mac, table)
}

func (f fencedDatapath) EnsurePod(ctx context.Context, s linux.PodSpec) (linux.PodResult, linux.Changes, error) {
	if err := f.fenced(); err != nil {
		return linux.PodResult{}, linux.Changes{}, err
	}
	return f.NoDatapath.EnsurePod(ctx, s)
}

func (f fencedDatapath) TeardownPod(ctx context.Context, key observed.AttachmentKey, netns string, addrs ...netip.Addr) (linux.Changes, error) {
	if err := f.fenced(); err != nil {
		return linux.Changes{}, err
	}
	return f.NoDatapath.TeardownPod(ctx, key, netns, addrs...)
}

func (f fencedDatapath) EnsureExclusive(ctx context.Context, s linux.ExclusiveSpec) (linux.PodResult, linux.Changes, error) {
	if err := f.fenced(); err != nil {
		return linux.PodResult{}, linux.Changes{}, err
	}
	return f.NoDatapath.EnsureExclusive(ctx, s)
}

func (f fencedDatapath) TeardownExclusive(ctx context.Context, key observed.AttachmentKey, netns, mac string) (linux.Changes, error) {
	if err := f.fenced(); err != nil {
		return linux.Changes{}, err
	}
	return f.NoDatapath.TeardownExclusive(ctx, key, netns, mac)
}
