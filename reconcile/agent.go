package reconcile

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// Paths are the files the agent reads and writes.
type Paths struct {
	Config desired.ConfigSource
	// Entries is the pod entry directory (/run/enid/pods).
	Entries string
	// Statuses is the status directory (/run/enid/status).
	Statuses string
	// AgentFile is the heartbeat (/run/enid/agent.json).
	AgentFile string
	// StateDir keeps what cannot be observed again (/var/lib/enid): the
	// planner's memory and the single-instance lock.
	StateDir string
	Hints    desired.HintSources
}

// DefaultPaths are the production locations.
func DefaultPaths() Paths {
	return Paths{
		Config:    desired.DefaultConfigSource(),
		Entries:   "/run/enid/pods",
		Statuses:  "/run/enid/status",
		AgentFile: "/run/enid/agent.json",
		StateDir:  "/var/lib/enid",
		Hints:     desired.DefaultHintSources(),
	}
}

// Config wires an Agent.
type Config struct {
	Paths      Paths
	InstanceID string
	NodeName   string
	// NodeLabels are the node's labels when known (per-node overrides).
	NodeLabels map[string]string
	Cloud      Cloud
	// Datapath is the node's kernel; NewNoDatapath() where there is none.
	Datapath Datapath
	Logger   *slog.Logger
	// Metrics may be nil (a private set is made).
	Metrics *Metrics
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Parallelism bounds concurrent actions (default 16).
	Parallelism int
	// Heartbeat is how often agent.json is rewritten (default 2s).
	Heartbeat time.Duration
	// WaitForDevice bounds the wait for an attached ENI's device (default 30s).
	WaitForDevice time.Duration
	// Debounce is the watcher's quiet time before a pass (default 1ms).
	Debounce time.Duration
	// NoWatch turns the file watcher off: the caller wakes the agent with
	// Wake after changing files (the fleet benchmark runs a thousand agents
	// in one process, more than the kernel's inotify instance limit).
	NoWatch bool
	// ShutdownGrace bounds the wait for running actions on shutdown (default 10s).
	ShutdownGrace time.Duration
	// Version is reported in the heartbeat.
	Version string
	// Kube is the link to the Kubernetes API server; nil for none.
	Kube Kube
}

// Agent is the reconcile loop. Create it with New and run it with Run.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	metrics  *Metrics
	now      func() time.Time
	entries  *desired.EntryStore
	statuses *status.Store
	cache    cache
	exec     *executor
	// trigger holds at most one pending wake-up.
	trigger chan struct{}

	// Loop state, touched only by the Run goroutine.
	loader     *desired.ConfigLoader
	memory     planner.Memory
	memoryJSON []byte
	instance   observed.Instance
	started    time.Time
	lastPlan   planner.Plan
	ready      bool
	reason     string
	stopped    bool
	nextFull   time.Time
	// deadline is when time alone changes the plan (zero: never).
	deadline  time.Time
	fullFails int
	// configSeen and configProblems are the last config and problems
	// logged, so each change is logged once.
	configSeen     *desired.Config
	configProblems string
	// entriesFP fingerprints the set of entries; burstStart and
	// burstChanged are when the current burst of entry changes began and
	// last changed, burstUntil when its cloud actions are released.
	entriesFP uint64
	// routineRefreshes counts full observations taken only because the
	// resync period passed.
	routineRefreshes int
	// hints are the kubelet's and runtime's records, read at hintsAt.
	hints                                desired.Hints
	hintsAt                              time.Time
	burstStart, burstChanged, burstUntil time.Time
	// labels are the node labels the loader has (with a Kube link).
	labels map[string]string
	// podIndex is the last pass's entries by key, for reportPod on the
	// action goroutines.
	podIndex atomic.Pointer[map[observed.AttachmentKey]desired.Entry]
}

// New checks the config and returns an Agent ready to Run.
func New(cfg Config) (*Agent, error) {
	if cfg.InstanceID == "" {
		return nil, errors.New("agent: no instance ID")
	}
	if cfg.Cloud == nil || cfg.Datapath == nil {
		return nil, errors.New("agent: a cloud and a datapath are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Parallelism <= 0 {
		cfg.Parallelism = 16
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 2 * time.Second
	}
	if cfg.WaitForDevice <= 0 {
		cfg.WaitForDevice = 30 * time.Second
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = time.Millisecond
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, metrics: cfg.Metrics, now: cfg.Now,
		entries: desired.NewEntryStore(cfg.Paths.Entries), statuses: status.NewStore(cfg.Paths.Statuses),
		trigger: make(chan struct{}, 1)}
	a.exec = newExecutor(cfg.Cloud, cfg.Datapath, a.statuses, &a.cache, cfg.InstanceID, a.log, a.metrics, a.now, a.wake, cfg.Parallelism, cfg.WaitForDevice)
	if cfg.Kube != nil {
		a.exec.published = a.reportPod
	}
	return a, nil
}

// Metrics returns the agent's metrics.
func (a *Agent) Metrics() *Metrics { return a.metrics }

// Wake asks the agent for a pass; it never blocks, and wake-ups coalesce.
func (a *Agent) Wake() { a.wake() }

// wake asks for a pass without blocking; wake-ups coalesce.
func (a *Agent) wake() {
	select {
	case a.trigger <- struct{}{}:
	default:
	}
}

// Run runs the loop until ctx is done, then waits (up to ShutdownGrace) for
// running actions and writes a final heartbeat saying the agent stopped.
func (a *Agent) Run(ctx context.Context) error {
	unlock, err := lockStateDir(a.cfg.Paths.StateDir)
	if err != nil {
		return err
	}
	defer unlock()
	for _, dir := range []string{a.cfg.Paths.Entries, a.cfg.Paths.Statuses} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	if err := a.loadMemory(); err != nil {
		return err
	}
	a.started = a.now()

	// Actions get their own context: on shutdown they have a grace period
	// to finish what they started, rather than being cut mid-call.
	actx, cancelActions := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelActions()

	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var watchC <-chan struct{}
	watchDone := make(chan error, 1)
	if !a.cfg.NoWatch {
		watch, err := desired.NewWatcher(a.log, a.cfg.Paths.Entries, filepath.Dir(a.cfg.Paths.Config.Main), a.cfg.Paths.Config.DropInDir)
		if err != nil {
			return fmt.Errorf("watch desired state: %w", err)
		}
		// Bursts coalesce anyway: signals that arrive while a pass runs
		// collapse into one. A long debounce would only add to every CNI
		// ADD's latency.
		watch.Debounce = a.cfg.Debounce
		watchC = watch.C()
		go func() { watchDone <- watch.Run(wctx) }()
	}

	heartbeat := time.NewTicker(a.cfg.Heartbeat)
	defer heartbeat.Stop()
	retryTimer := time.NewTimer(time.Hour)
	defer retryTimer.Stop()

	a.log.Info("agent starting", "instance", a.cfg.InstanceID, "node", a.cfg.NodeName)
	a.wake()
	for {
		select {
		case <-ctx.Done():
			return a.shutdown(cancelActions)
		case err := <-watchDone:
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("watcher stopped: %w", err)
			}
			watchDone = nil
		case <-watchC:
			a.pass(actx)
		case <-a.trigger:
			a.pass(actx)
		case <-retryTimer.C:
			a.pass(actx)
		case <-heartbeat.C:
			if a.cache.needsRefresh(a.now(), a.resync()) {
				a.pass(actx)
			}
			a.writeHeartbeat()
		}
		if t, ok := a.nextWake(); ok {
			retryTimer.Reset(max(time.Millisecond, t.Sub(a.now())))
		}
	}
}

// nextWake is the earliest of a backed-off action's retry and the time at
// which the plan changes by time alone (planner.Memory.NextDeadline).
func (a *Agent) nextWake() (time.Time, bool) {
	t, ok := a.exec.nextRetry()
	for _, d := range []time.Time{a.deadline, a.burstUntil} {
		if !d.IsZero() && (!ok || d.Before(t)) {
			t, ok = d, true
		}
	}
	return t, ok
}

func (a *Agent) resync() time.Duration {
	if a.loader == nil {
		return 0
	}
	cfg, _ := a.loader.Current()
	return cfg.ResyncPeriod.D()
}

func (a *Agent) shutdown(cancelActions context.CancelFunc) error {
	a.log.Info("agent stopping: waiting for running actions", "grace", a.cfg.ShutdownGrace)
	done := make(chan struct{})
	go func() { a.exec.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(a.cfg.ShutdownGrace):
		a.log.Warn("running actions did not finish in time: cancelling them")
		cancelActions()
		<-done
	}
	a.ready, a.reason, a.stopped = false, "agent stopped", true
	a.writeHeartbeat()
	return nil
}

// pass is one level-triggered round: read desired, take observed from the
// cache (refreshing it in full when due), plan, dispatch, publish.
func (a *Agent) pass(ctx context.Context) {
	a.metrics.passes.Inc()
	now := a.now()
	if a.instance.ID == "" {
		inst, err := a.cfg.Cloud.Instance(ctx, a.cfg.InstanceID)
		if err != nil {
			a.notReady(fmt.Sprintf("describe instance %s: %v", a.cfg.InstanceID, err))
			a.reportNode(HealthCloudDegraded)
			a.cache.markDirty()
			return
		}
		a.instance = inst
		a.loader = desired.NewConfigLoader(a.cfg.Paths.Config, desired.NodeFacts{
			NodeName: a.cfg.NodeName, Zone: inst.ZoneID, InstanceType: inst.InstanceType, Labels: a.cfg.NodeLabels})
	}
	a.syncLabels()
	d := desired.Load(a.loader, a.entries, desired.HintSources{})
	// The kubelet's and the runtime's records are demand hints: a second's
	// staleness costs nothing, and re-reading them on every pass (one file
	// per attachment in the runtime's cache) would cost every CNI ADD.
	if a.hintsAt.IsZero() || now.Sub(a.hintsAt) >= hintsEvery {
		a.hints, a.hintsAt = desired.ReadHints(a.cfg.Paths.Hints), now
	}
	d.Hints = a.hints
	a.addPodFacts(&d)
	a.noteConfig(d)
	if _, ok := a.loader.Current(); !ok {
		a.notReady("no valid config: " + firstOr(d.ConfigProblems, "none loaded"))
		a.reportNode(HealthConfigInvalid)
		return
	}

	if a.cache.needsRefresh(now, d.Config.ResyncPeriod.D()) && !a.exec.busy() && !now.Before(a.nextFull) {
		a.refresh(ctx, d.Config, now)
	}
	o, have := a.cache.snapshot()
	if !have {
		return
	}
	for _, id := range a.exec.drainExhausted() {
		// The planner skips it when choosing where to create ENIs, for as
		// long as peers do (Terway: 10 minutes), then tries it again.
		a.memory = a.memory.MarkExhausted(id, now.Add(planner.DefaultExhaustedFor))
		a.log.Warn("vSwitch out of addresses: skipping it for new ENIs", "vswitch", id, "until", now.Add(planner.DefaultExhaustedFor))
	}
	start := time.Now()
	p := planner.Make(d, o, planner.Options{Now: now, Memory: a.memory, NodeName: a.cfg.NodeName})
	a.metrics.planSeconds.Observe(time.Since(start).Seconds())
	prev := a.lastPlan
	a.lastPlan = p
	a.deadline, _ = p.Memory.NextDeadline(d.Config, planner.Options{Now: now})
	if err := a.saveMemory(p.Memory); err != nil {
		a.log.Error("persist planner memory", "err", err)
	}
	entries := make(map[observed.AttachmentKey]desired.Entry, len(d.Entries))
	h := fnv.New64a()
	for _, e := range d.Entries {
		entries[observed.AttachmentKey{ContainerID: e.ContainerID, IfName: e.IfName}] = e
		h.Write([]byte(e.ContainerID + "_" + e.IfName + "\n"))
	}
	if a.cfg.Kube != nil {
		a.podIndex.Store(&entries)
	}
	holdCloud := a.burst(now, h.Sum64()) && (createsENI(p) || p.Pool.Waiting > 0)
	if len(p.Actions) > 0 {
		a.log.Debug("plan", "actions", len(p.Actions), "cloud_calls", p.CloudCalls(), "complete", p.Complete, "hold_cloud", holdCloud)
	}
	a.exec.dispatch(ctx, p, entries, holdCloud)
	a.updateMetrics(p)
	if p.Pool != prev.Pool || phaseCounts(p) != phaseCounts(prev) {
		// `enid status` and STATUS read the heartbeat: keep its summary current.
		a.writeHeartbeat()
	}
	switch {
	case len(d.ConfigProblems) > 0:
		a.setReady(true, "config on disk is invalid; the last good config is in force: "+d.ConfigProblems[0])
		a.reportNode(HealthConfigInvalid)
	case !o.Complete:
		a.setReady(true, "observation incomplete: "+firstOr(o.Problems, "unknown"))
		a.reportNode(HealthCloudDegraded)
	default:
		a.setReady(true, "")
		a.reportNode(HealthReady)
	}
}

// noteConfig logs a config change or a newly refused config once, not on
// every pass, and sets the config metric.
func (a *Agent) noteConfig(d desired.State) {
	problems := strings.Join(d.ConfigProblems, "; ")
	if problems != a.configProblems {
		if problems != "" {
			a.log.Error("config refused: the last good config stays in force", "problems", d.ConfigProblems)
		} else if a.configProblems != "" {
			a.log.Info("config valid again")
		}
		a.configProblems = problems
	}
	if len(d.ConfigProblems) > 0 {
		a.metrics.configErrors.Set(1)
		return
	}
	a.metrics.configErrors.Set(0)
	if a.configSeen == nil || !reflect.DeepEqual(*a.configSeen, d.Config) {
		if a.configSeen != nil {
			a.log.Info("config changed: applying it", "config", d.Config.String())
		}
		cfg := d.Config
		a.configSeen = &cfg
	}
}

// hintsEvery is how often the kubelet's and the runtime's records are read.
const hintsEvery = time.Second

// ownedListEvery is how many routine resyncs make one that lists the
// owned ENIs not attached to the instance (see refresh).
const ownedListEvery = 5

// sweeper is a datapath that can remove what no attachment owns any more
// (linux.Datapath: pod rules left when a netns went before its teardown).
type sweeper interface {
	Sweep(ctx context.Context) (linux.Changes, error)
}

// refresh takes a full observation. Failures back off (1s doubling to a
// minute), so a broken API is never polled in a tight loop.
func (a *Agent) refresh(ctx context.Context, cfg desired.Config, now time.Time) {
	var vsw []string
	for _, ids := range cfg.ENI.VSwitches {
		vsw = append(vsw, ids...)
	}
	src := NewSources(a.cfg.Cloud, a.cfg.Datapath, a.statuses)
	cs := cloudSource{c: a.cfg.Cloud, known: a.instance}
	// A routine resync (nothing went wrong, nothing is in doubt) lists the
	// owned ENIs that are not attached only every ownedListEvery times:
	// they appear only after a crash (the first observation lists them),
	// a failed attach or detach (which asks for a full observation), or
	// someone else's doing, and a leaked one is deleted only after its
	// 5-minute grace anyway. The agent carries the ones it knows.
	if routine, prev := a.cache.routine(); routine {
		a.routineRefreshes++
		if a.routineRefreshes%ownedListEvery != 0 {
			cs.attachedOnly = true
			for _, e := range prev.ENIs {
				if e.Owned(a.cfg.InstanceID) && e.InstanceID != a.cfg.InstanceID {
					cs.carry = append(cs.carry, e)
				}
			}
		}
	}
	src.Cloud = cs
	st := observed.Collect(ctx, src, a.cfg.InstanceID, vsw, now)
	if st.Instance.ID == "" {
		st.Instance = a.instance
	}
	a.cache.replace(st)
	if sw, ok := a.cfg.Datapath.(sweeper); ok && st.Complete {
		if _, err := sw.Sweep(ctx); err != nil {
			a.log.Warn("sweep orphaned pod rules", "err", err)
		}
	}
	if st.Complete {
		a.fullFails = 0
		a.nextFull = time.Time{}
		return
	}
	a.fullFails++
	a.nextFull = now.Add(min(time.Minute, time.Second<<min(a.fullFails-1, 6)))
	a.log.Warn("observation incomplete", "problems", st.Problems, "retry_at", a.nextFull)
}

func firstOr(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}
