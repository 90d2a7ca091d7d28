package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
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
	// hints are the kubelet's and runtime's records, read at hintsAt.
	hints                                desired.Hints
	hintsAt                              time.Time
	burstStart, burstChanged, burstUntil time.Time
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

// Demand coalescing: a burst of CNI ADDs writes its entries over tens of
// milliseconds. A round of cloud calls that creates an ENI waits until the
// set of entries has been quiet for burstQuiet (at most burstMax from the
// burst's first change), so it is planned from the whole burst; a round
// planned from its first few entries would be followed by a second round
// after the first one's attach (cloud changes go in rounds). Rounds that
// only top up the idle pool, node actions and statuses are never held.
// hintsEvery is how often the kubelet's and the runtime's records are read.
const hintsEvery = time.Second

const (
	burstQuiet = 30 * time.Millisecond
	burstMax   = 300 * time.Millisecond
)

// createsENI reports whether the plan creates an ENI. A burst holds such a
// round, or one that pods wait for; a round that only tops up the idle
// pool goes at once, or a steady stream of pods would keep it from ever
// going and run the pool dry.
func createsENI(p planner.Plan) bool {
	for _, a := range p.Actions {
		if a.Kind == planner.CreateENI {
			return true
		}
	}
	return false
}

// burst records the entry set's fingerprint and reports whether this pass
// holds its cloud actions back.
func (a *Agent) burst(now time.Time, fp uint64) bool {
	if fp != a.entriesFP {
		a.entriesFP = fp
		if a.burstStart.IsZero() || now.Sub(a.burstChanged) >= burstQuiet {
			a.burstStart = now
		}
		a.burstChanged = now
	}
	if a.burstStart.IsZero() || now.Sub(a.burstChanged) >= burstQuiet || now.Sub(a.burstStart) >= burstMax {
		a.burstStart, a.burstUntil = time.Time{}, time.Time{}
		return false
	}
	a.burstUntil = a.burstChanged.Add(burstQuiet)
	if last := a.burstStart.Add(burstMax); last.Before(a.burstUntil) {
		a.burstUntil = last
	}
	return true
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
			a.cache.markDirty()
			return
		}
		a.instance = inst
		a.loader = desired.NewConfigLoader(a.cfg.Paths.Config, desired.NodeFacts{
			NodeName: a.cfg.NodeName, Zone: inst.ZoneID, InstanceType: inst.InstanceType, Labels: a.cfg.NodeLabels})
	}
	d := desired.Load(a.loader, a.entries, desired.HintSources{})
	// The kubelet's and the runtime's records are demand hints: a second's
	// staleness costs nothing, and re-reading them on every pass (one file
	// per attachment in the runtime's cache) would cost every CNI ADD.
	if a.hintsAt.IsZero() || now.Sub(a.hintsAt) >= hintsEvery {
		a.hints, a.hintsAt = desired.ReadHints(a.cfg.Paths.Hints), now
	}
	d.Hints = a.hints
	a.noteConfig(d)
	if _, ok := a.loader.Current(); !ok {
		a.notReady("no valid config: " + firstOr(d.ConfigProblems, "none loaded"))
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
	case !o.Complete:
		a.setReady(true, "observation incomplete: "+firstOr(o.Problems, "unknown"))
	default:
		a.setReady(true, "")
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
	src.Cloud = cloudSource{c: a.cfg.Cloud, known: a.instance}
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

// phaseCounts counts a plan's statuses by phase (Pending, Ready, Failed).
func phaseCounts(p planner.Plan) [3]int {
	var n [3]int
	for _, s := range p.Statuses {
		switch s.Phase {
		case planner.PhasePending:
			n[0]++
		case planner.PhaseReady:
			n[1]++
		case planner.PhaseFailed:
			n[2]++
		}
	}
	return n
}

func firstOr(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}

func (a *Agent) notReady(reason string) {
	a.log.Warn("agent not ready", "reason", reason)
	a.setReady(false, reason)
}

func (a *Agent) setReady(ready bool, reason string) {
	changed := a.ready != ready || a.reason != reason
	a.ready, a.reason = ready, reason
	if changed {
		a.writeHeartbeat()
	}
}

func (a *Agent) updateMetrics(p planner.Plan) {
	m := a.metrics
	m.poolIPs.WithLabelValues("total").Set(float64(p.Pool.Total))
	m.poolIPs.WithLabelValues("used").Set(float64(p.Pool.Used))
	m.poolIPs.WithLabelValues("idle").Set(float64(p.Pool.Idle))
	m.poolIPs.WithLabelValues("cooldown").Set(float64(p.Pool.Cooldown))
	m.poolIPs.WithLabelValues("sticky").Set(float64(p.Pool.Sticky))
	m.poolIPs.WithLabelValues("target").Set(float64(p.Pool.Target))
	phases := map[string]int{planner.PhasePending: 0, planner.PhaseReady: 0, planner.PhaseFailed: 0}
	for _, s := range p.Statuses {
		phases[s.Phase]++
	}
	for ph, n := range phases {
		m.podsByPhase.WithLabelValues(ph).Set(float64(n))
	}
	o, _ := a.cache.snapshot()
	n := 0
	for _, e := range o.ENIs {
		if e.Owned(a.cfg.InstanceID) && e.Status == observed.ENIInUse {
			n++
		}
	}
	m.enis.Set(float64(n))
}

// writeHeartbeat publishes agent.json.
func (a *Agent) writeHeartbeat() {
	p := a.lastPlan
	hb := status.Agent{
		APIVersion: status.Version, PID: os.Getpid(), Version: a.cfg.Version, Started: a.started,
		Heartbeat: a.now(), Ready: a.ready, Reason: a.reason, Stopped: a.stopped, LastErrors: a.exec.errors(),
		Pool: status.PoolSummary{Total: p.Pool.Total, Used: p.Pool.Used, Idle: p.Pool.Idle, Cooldown: p.Pool.Cooldown, Sticky: p.Pool.Sticky},
		Pods: map[status.Phase]int{},
	}
	o, _ := a.cache.snapshot()
	for _, e := range o.ENIs {
		if e.Owned(a.cfg.InstanceID) && e.Status == observed.ENIInUse {
			hb.Pool.ENIs++
		}
	}
	for _, s := range p.Statuses {
		hb.Pods[status.Phase(s.Phase)]++
	}
	if err := status.WriteAgent(a.cfg.Paths.AgentFile, hb); err != nil {
		a.log.Error("write heartbeat", "file", a.cfg.Paths.AgentFile, "err", err)
	}
}

// memoryFile is where the planner's memory is kept between restarts.
func (a *Agent) memoryFile() string { return filepath.Join(a.cfg.Paths.StateDir, "memory.json") }

func (a *Agent) loadMemory() error {
	b, err := os.ReadFile(a.memoryFile())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read planner memory: %w", err)
	}
	var m planner.Memory
	if err := json.Unmarshal(b, &m); err != nil {
		// A damaged memory file loses cooldowns and sticky reservations,
		// not addresses: bindings are observed again. Start afresh, loudly.
		a.log.Error("planner memory unreadable: starting without it", "file", a.memoryFile(), "err", err)
		return nil
	}
	a.memory, a.memoryJSON = m, b
	return nil
}

func (a *Agent) saveMemory(m planner.Memory) error {
	a.memory = m
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode planner memory: %w", err)
	}
	if bytes.Equal(b, a.memoryJSON) {
		return nil
	}
	if err := os.MkdirAll(a.cfg.Paths.StateDir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", a.cfg.Paths.StateDir, err)
	}
	if err := status.WriteFileAtomic(a.memoryFile(), b, 0o600); err != nil {
		return fmt.Errorf("write planner memory: %w", err)
	}
	a.memoryJSON = b
	return nil
}

// lockStateDir takes the single-instance lock: an flock on
// <StateDir>/enid.lock, released by the kernel if the process dies.
func lockStateDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, "enid.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another enid agent holds %s: only one agent may run per node", path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// ReadMemory reads the planner memory an agent persisted in stateDir (the
// zero Memory when there is none); `enid plan` plans with it.
func ReadMemory(stateDir string) (planner.Memory, error) {
	var m planner.Memory
	b, err := os.ReadFile(filepath.Join(stateDir, "memory.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("read planner memory: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("parse planner memory %s: %w", filepath.Join(stateDir, "memory.json"), err)
	}
	return m, nil
}
