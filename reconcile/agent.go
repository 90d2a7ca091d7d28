package reconcile

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/clock"
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
	// Clock is the agent's one clock (clock.Real when nil): its timers,
	// heartbeat, back-offs, statuses' times and the planner's now. Give
	// the cloud client and the Kubernetes link the same one; a test or
	// the simulation gives a clock.Virtual and moves it.
	Clock clock.Clock
	// Parallelism bounds concurrent node actions, and apart concurrent
	// cloud actions (default 16 each).
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
	// NoLocks skips the state directory's lock and the heartbeat's, which
	// keep a second agent process off a node's files. For callers that run
	// many agents in one process and give each a directory of its own (the
	// simulation: ten thousand agents would hold twenty thousand locks,
	// the open-file limit of many machines); the heartbeat then names no
	// lock and its readers check its pid.
	NoLocks bool
	// ShutdownGrace bounds the wait for running actions on shutdown (default 10s).
	ShutdownGrace time.Duration
	// Version is reported in the heartbeat.
	Version string
	// Kube is the link to the Kubernetes API server; nil for none.
	Kube Kube
	// Serving, when set, is called on the Run goroutine after a pass that
	// leaves the agent ready (agent.json already says so), once each time
	// it turns ready; a call that fails is made again after the next ready
	// pass. cmd/enid installs the CNI network list with it: the kubelet
	// keeps the node NotReady until a list exists, so no pod is placed on
	// a node whose agent has never served. It must be quick (a small local
	// write) and is never undone: an agent that turns not ready or stops
	// leaves what it did in place, so a restart does not flap the node.
	Serving func() error
}

// Agent is the reconcile loop. Create it with New and run it with Run.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	metrics  *Metrics
	clk      clock.Clock
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
	// spent is the plan before lastPlan, which nothing reads any more:
	// the next pass plans in its arrays (spend).
	spent planner.Plan
	// phases counts the published statuses by phase as the heartbeat last
	// said (cache.tally).
	phases map[status.Phase]int
	ready  bool
	reason string
	// served is whether Config.Serving succeeded since the agent last
	// turned ready.
	served   bool
	stopped  bool
	nextFull time.Time
	// deadline is when time alone changes the plan (zero: never).
	deadline time.Time
	// instanceRetry is when the instance is described again after
	// instanceFails failures in a row (zero: not waiting).
	instanceRetry time.Time
	instanceFails int
	// passAt is when the last pass began.
	passAt    time.Time
	fullFails int
	// fulls counts the full observations applied; resyncShare is the
	// share of the resync period after which the next routine one falls
	// due (0.75 to 1, drawn anew after each: spread).
	fulls       uint64
	resyncShare float64
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
	// beat is the heartbeat's snapshot, shared with its goroutine.
	beat beat
	// self is what the heartbeat says of the process: its pid, the lock
	// it holds while it runs and its pid namespace and start time
	// (status.LockAgent, status.SelfProcess). Set by Run before the first
	// heartbeat.
	self struct {
		pid         int
		lock, pidNS string
		pidStart    uint64
	}
	// hints are the kubelet's and runtime's records, read at hintsAt.
	hints   desired.Hints
	hintsAt time.Time
	// hintReader keeps the runtime's parsed cache records between reads.
	hintReader desired.HintReader
	// hintsWatched: a watcher wakes the loop when a hint source changes,
	// and sets hintsDirty; the hints are then read only when dirty.
	// Without it they are read at most every hintsEvery.
	hintsWatched, hintsDirty bool
	// hintsView is what was last logged and published of the hints.
	hintsView hintsView
	// nodeDirty: the node namespace changed since the node was last read.
	nodeDirty bool
	// nodeDue is when the node may be read for the changes reported
	// (zero: none pending), nodeReadAt when it was last read for them.
	nodeDue, nodeReadAt time.Time
	// nodeReadTook is how long that read took (noteNodeChange).
	nodeReadTook time.Duration
	// desiredDirty says the files of desired state changed since they were
	// last read into desired (the file watcher, Wake, a full observation);
	// other passes (actions done, retries, timers) plan from desired as read.
	// It starts set: nothing is read yet. entryMap and entryFP are
	// desired's entries by key and fingerprint.
	desiredDirty atomic.Bool
	// configDirty says the config's files (or the facts its overrides
	// match on) may have changed too: a pass that reads desired state
	// again for a changed entry alone takes the config as last loaded
	// (its fingerprint is a listing and a stat of every config file).
	// It starts set.
	configDirty atomic.Bool
	// entriesReported: a caller reports the changes to the entries
	// (EntriesChanged), and the store is tracked from then on.
	entriesReported atomic.Bool
	desired         desired.State
	entryMap        map[observed.AttachmentKey]desired.Entry
	entryFP         uint64

	// See entriesFP above.
	burstStart, burstChanged, burstUntil time.Time
	// planning completes desired state and plans, as `enid plan` does.
	planning Planning
	// degradedSince is when a full observation first failed to read the
	// cloud and carried its last complete view (zero: not degraded).
	degradedSince time.Time
	// degraded is what the heartbeat says about degraded mode (nil: not).
	degraded *status.Degraded
	// fetch is the cloud half of a full observation being read (nil:
	// none); fetched is one read and not yet applied.
	fetch   *fetch
	fetched *fetch
	// fetchC delivers a finished fetch to the loop (buffered: the fetch
	// goroutine never blocks on it).
	fetchC chan *fetch
	// fetchWG counts the running fetch goroutine (at most one).
	fetchWG sync.WaitGroup
	// badStatuses are the status files the last full observation could
	// not read (dropBadStatuses).
	badStatuses []status.Problem
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
	cfg.Clock = clock.OrReal(cfg.Clock)
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
	a := &Agent{cfg: cfg, log: cfg.Logger, metrics: cfg.Metrics, clk: cfg.Clock,
		entries: desired.NewEntryStore(cfg.Paths.Entries), statuses: status.NewStore(cfg.Paths.Statuses),
		trigger: make(chan struct{}, 1), fetchC: make(chan *fetch, 1),
		planning: newPlanning(cfg)}
	a.exec = newExecutor(cfg.Cloud, cfg.Datapath, a.statuses, &a.cache, cfg.InstanceID, a.log, a.metrics, a.clk.Now, a.wake, cfg.Parallelism, cfg.WaitForDevice)
	a.desiredDirty.Store(true) // nothing read yet
	a.configDirty.Store(true)
	if cfg.Kube != nil {
		a.exec.published = a.reportPod
	}
	return a, nil
}

// Metrics returns the agent's metrics.
func (a *Agent) Metrics() *Metrics { return a.metrics }

// Wake asks the agent for a pass; it never blocks, and wake-ups coalesce.
// The desired state is read again on the pass that follows (the caller
// changed files the agent does not watch).
func (a *Agent) Wake() {
	a.entries.Unsure()
	a.configDirty.Store(true)
	a.desiredDirty.Store(true)
	a.wake()
}

// EntriesChanged asks the agent for a pass that reads again the files of
// the entries directory named (base names: entries, deletion records)
// and nothing else; it never blocks. It is for a caller that runs the
// agent without its file watcher (Config.NoWatch) and changes only
// entries: once it has called EntriesChanged it must report every change
// it makes to the directory through it or Wake, as the watcher would, or
// the agent will not see the change before its next full observation
// (desired.EntryStore.Track). The agent's own writes need no report.
func (a *Agent) EntriesChanged(names ...string) {
	if a.entriesReported.CompareAndSwap(false, true) {
		a.entries.Track() // the first pass after it lists the directory
	}
	for _, n := range names {
		a.entries.Changed(n)
	}
	a.desiredDirty.Store(true)
	a.wake()
}

// now is the time on the agent's clock.
func (a *Agent) now() time.Time { return a.clk.Now() }

// wake asks for a pass without blocking; wake-ups coalesce.
func (a *Agent) wake() {
	select {
	case a.trigger <- struct{}{}:
	default:
	}
}

// Run runs the loop until ctx is done, then waits (up to ShutdownGrace) for
// running actions and writes a final heartbeat saying the agent stopped.
//
// Run is the one place that says what wakes the loop: each source (the
// desired-state watcher, the hint watcher, the node's netlink watch, the
// heartbeat, timers, a finished cloud read) is started here, beside the
// select case that reads it, with its deferred end; the steps before it
// (the state directory, each watcher's setup) are methods of their own.
func (a *Agent) Run(ctx context.Context) error {
	release, err := a.claimState()
	if err != nil {
		return err
	}
	defer release()

	// Actions get their own context: on shutdown they have a grace period
	// to finish what they started, rather than being cut mid-call.
	actx, cancelActions := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelActions()

	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchC, watchDone, err := a.watchDesired(wctx)
	if err != nil {
		return err
	}
	hintsC, hintsDone, err := a.watchHints(wctx)
	if err != nil {
		return err
	}

	// Netlink changes in the node namespace: see nodewatch.go.
	nodeC := make(chan struct{}, 1)
	nodeTimer := a.clk.NewTimer(time.Hour)
	nodeTimer.Stop()
	defer nodeTimer.Stop()
	if nw, ok := a.cfg.Datapath.(nodeWatcher); ok && !a.cfg.NoWatch {
		nodeDone := make(chan struct{})
		go func() { defer close(nodeDone); a.watchNode(wctx, nw, nodeC) }()
		defer func() { stopWatch(); <-nodeDone }()
	}

	// The heartbeat has its own goroutine; this ticker only checks whether
	// a full observation is due.
	heartbeat := a.clk.NewTicker(a.cfg.Heartbeat)
	defer heartbeat.Stop()
	a.snapshotHeartbeat()
	stopBeat := a.startHeartbeat()
	defer stopBeat()
	retryTimer := a.clk.NewTimer(time.Hour)
	defer retryTimer.Stop()

	a.log.Info("agent starting", "instance", a.cfg.InstanceID, "node", a.cfg.NodeName)
	a.wake()
	for {
		// The wake-up timer is set after a pass, from what that pass
		// left (nextWake): only a pass changes it, and a source read
		// without one (a heartbeat tick, a netlink signal) must not set it
		// again from what is by then out of date.
		passed := false
		pass := func() { a.pass(actx); passed = true }
		select {
		case <-ctx.Done():
			return a.shutdown(cancelActions, stopBeat)
		case err := <-watchDone:
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("watcher stopped: %w", err)
			}
			watchDone = nil
		case <-watchC:
			a.desiredDirty.Store(true)
			pass()
		case err := <-hintsDone:
			if err != nil && ctx.Err() == nil {
				a.log.Warn("hint watch stopped: reading hints every second instead", "err", err)
			}
			hintsDone, hintsC, a.hintsWatched = nil, nil, false
		case <-hintsC:
			a.hintsDirty = true
			pass()
		case <-nodeC:
			now := a.now()
			nodeTimer.Reset(max(0, a.noteNodeChange(now).Sub(now)))
		case <-nodeTimer.C():
			pass()
		case <-a.trigger:
			pass()
		case <-retryTimer.C():
			pass()
		case f := <-a.fetchC:
			a.fetch, a.fetched = nil, f
			pass()
		case <-heartbeat.C():
			if a.cache.needsRefresh(a.now(), a.resync()) {
				pass()
			}
		}
		if !passed {
			continue
		}
		if t, ok := a.nextWake(); ok {
			retryTimer.Reset(max(0, t.Sub(a.now())))
		} else {
			retryTimer.Stop()
		}
	}
}

// nextWake is the earliest time something the last pass waited for can
// change: the time at which the plan changes by time alone
// (planner.Memory.NextDeadline, a backed-off action's retry among them),
// the end of a burst, the time the cloud client lets optional work go that
// dispatch held back, and the next try to describe the instance. Each was
// after the start of the pass that set it, so a pass at that time finds it
// passed and sets the next: the loop never wakes twice for one time.
func (a *Agent) nextWake() (time.Time, bool) {
	var t time.Time
	paced, _ := a.exec.deferredUntil()
	for _, d := range []time.Time{a.deadline, a.burstUntil, paced, a.instanceRetry, a.fullDue()} {
		// A time no later than the last pass's start is one that pass
		// already saw (it returned before refreshing it, or could not act
		// on it): waking for it again would only repeat the pass.
		if d.After(a.passAt) && (t.IsZero() || d.Before(t)) {
			t = d
		}
	}
	return t, !t.IsZero()
}

func (a *Agent) resync() time.Duration {
	if a.loader == nil {
		return 0
	}
	cfg, _ := a.loader.Current()
	return a.jittered(cfg.ResyncPeriod.D())
}

// jittered is the resync period as this agent keeps it until its next full
// observation: a share of it drawn after each (resyncShare). A fleet that
// joined at once would otherwise resync at once, every period, in bursts
// the account throttles; the simulation's fleet showed them (docs/simulation.md).
func (a *Agent) jittered(resync time.Duration) time.Duration {
	if a.resyncShare == 0 {
		return resync
	}
	return time.Duration(float64(resync) * a.resyncShare)
}

// spread is a number in [0, 1) drawn from the instance ID and n: the same
// on every run of the agent, different from node to node, so that the
// timers of a fleet's agents drift apart without a source of randomness
// (a run stays a function of its inputs).
func (a *Agent) spread(n uint64) float64 {
	h := fnv.New64a()
	h.Write([]byte(a.cfg.InstanceID))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], n)
	h.Write(b[:])
	return float64(h.Sum64()>>11) / (1 << 53)
}

// fullDue is when the next full observation falls due, for the loop to
// wake then (zero: one is being read, or it is due already and the pass
// that can start it comes anyway).
func (a *Agent) fullDue() time.Time {
	if a.fetch != nil || a.fetched != nil || a.loader == nil {
		return time.Time{}
	}
	at, ok := a.cache.refreshAt(a.resync())
	if !ok {
		return time.Time{}
	}
	if a.nextFull.After(at) {
		at = a.nextFull
	}
	return at
}

func (a *Agent) shutdown(cancelActions context.CancelFunc, stopBeat func()) error {
	a.log.Info("agent stopping: waiting for running actions", "grace", a.cfg.ShutdownGrace)
	done := make(chan struct{})
	go func() { a.exec.wg.Wait(); close(done) }()
	grace := a.clk.NewTimer(a.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C():
		a.log.Warn("running actions did not finish in time: cancelling them")
		cancelActions()
		<-done
	}
	// A read of the cloud still running is cut: it changes nothing.
	cancelActions()
	a.fetchWG.Wait()
	stopBeat()
	a.ready, a.reason, a.stopped = false, "agent stopped", true
	a.writeHeartbeat()
	return nil
}

// pass is one level-triggered round, in order: the instance (once), the
// desired state, the observation (the cache, refreshed in full when due,
// the node re-read when it changed), the hints, what failed actions
// taught, the plan, its dispatch, and what the round publishes (the
// heartbeat's summary, readiness). Each step is a method below, named for
// what it does; the order is what a reader of the loop needs to see here.
func (a *Agent) pass(ctx context.Context) {
	a.metrics.passes.Inc()
	now := a.now()
	a.passAt = now
	defer func() { a.metrics.passSeconds.Observe(a.now().Sub(now).Seconds()) }()
	if !a.knowInstance(ctx, now) {
		return
	}
	d, ok := a.readDesired()
	if !ok {
		return
	}
	d = a.observe(ctx, d, now)
	o, have, seen := a.cache.view()
	if !have {
		return
	}
	entries := a.entryMap
	a.readHints(d, o, entries, now)
	d.Hints = a.hints
	hintsChanged := a.noteHints(d)
	// What the actions' outcomes mean for later plans (a vSwitch to skip,
	// a token to change, a set of groups not to create, how long an action
	// backs off, what a pod whose setup failed hears) is the planner's to
	// decide.
	var lessons []planner.Lesson
	a.memory, lessons = a.memory.Learn(a.exec.drainOutcomes(), now)
	a.logLessons(lessons)
	prev := a.lastPlan
	p := a.plan(d, o, entries, now)
	// While the cloud half of a full observation is read, the cloud must
	// not change under it: cloud actions wait, node actions go ahead.
	holdCloud := a.burst(now, a.entryFP, p) || a.fetch != nil || a.fetched != nil
	if len(p.Actions) > 0 {
		a.log.Debug("plan", "actions", len(p.Actions), "cloud_calls", p.CloudCalls(), "complete", p.Complete, "hold_cloud", holdCloud,
			"pass_started", now, "pass_so_far", a.now().Sub(now))
	}
	sent := a.exec.dispatch(ctx, p, entries, holdCloud, seen)
	a.forgetDeletions(d, o, entries)
	a.rememberSent(sent)
	phases, enis := a.cache.tally(a.cfg.InstanceID)
	a.updateMetrics(p, phases, enis)
	a.summarize(p, prev, hintsChanged, phases)
	a.spend(prev, p)
	a.noteDegraded(o, p)
	a.reportReadiness(d, o)
}

// knowInstance describes the instance once (its zone and type select the
// config's overrides) and reports whether it is known. A failed describe
// is not tried again on every pass (each one a call, retried in the
// client, on an API that may be throttling): 1s doubling to a minute, as a
// failed full observation.
func (a *Agent) knowInstance(ctx context.Context, now time.Time) bool {
	if a.instance.ID != "" {
		return true
	}
	if now.Before(a.instanceRetry) {
		return false // the last describe failed: the timer brings the next
	}
	inst, err := a.cfg.Cloud.Instance(ctx, a.cfg.InstanceID)
	if err != nil {
		a.instanceFails++
		a.instanceRetry = a.now().Add(min(time.Minute, time.Second<<min(a.instanceFails-1, 6)))
		a.notReady(fmt.Sprintf("describe instance %s: %v", a.cfg.InstanceID, err))
		a.reportNode(HealthCloudDegraded)
		a.cache.markDirty()
		return false
	}
	a.instanceRetry = time.Time{}
	a.instance = inst
	a.loader = desired.NewConfigLoader(a.cfg.Paths.Config, desired.NodeFacts{
		NodeName: a.cfg.NodeName, Zone: inst.ZoneID, InstanceType: inst.InstanceType, Labels: a.cfg.NodeLabels})
	a.configDirty.Store(true) // a new loader has loaded nothing
	return true
}

// readDesired returns the desired state, read again only when its files
// (or the node's labels the overrides match on) changed: a pass for any
// other reason (an action done, a retry, a timer) plans from desired as
// last read, and costs nothing in proportion to the pods on the node until
// it plans. It reports false, the agent not ready, with no valid config.
func (a *Agent) readDesired() (desired.State, bool) {
	if a.syncLabels() {
		a.configDirty.Store(true) // the overrides that match on labels changed
		a.desiredDirty.Store(true)
	}
	if a.desiredDirty.Swap(false) {
		a.loadDesired()
	}
	d := a.desired
	a.noteConfig(d)
	if _, ok := a.loader.Current(); !ok {
		a.notReady("no valid config: " + firstOr(d.ConfigProblems, "none loaded"))
		a.reportNode(HealthConfigInvalid)
		return d, false
	}
	return d, true
}

// observe brings the cache up to date: a full observation's cloud half is
// read by a goroutine (startFetch) while passes go on from the cache, its
// node half when the cloud half is in and nothing runs (applyFetch); a
// node action that found something missing has the node read again and
// the pods' namespaces checked again (a gone one is given up, not
// retried), which can change desired state (returned).
func (a *Agent) observe(ctx context.Context, d desired.State, now time.Time) desired.State {
	if a.fetched != nil && !a.exec.busy() {
		a.applyFetch(ctx, now)
		a.dropBadStatuses(a.badStatuses, d)
	}
	if a.fetch == nil && a.fetched == nil && a.cache.needsRefresh(now, a.jittered(d.Config.ResyncPeriod.D())) && !a.exec.busy() && !now.Before(a.nextFull) {
		a.startFetch(ctx, d.Config, now)
	}
	if stale, keys := a.cache.takeNodeStale(); stale {
		a.nodeDirty, a.nodeDue = true, now
		if len(keys) > 0 {
			a.planning.recheckNetNS(keys...)
			a.loadDesired()
			d = a.desired
		}
	}
	a.rereadNode(ctx)
	return d
}

// readHints reads the kubelet's and the runtime's records when they
// changed (the hint watcher says so), not on every pass: the runtime's
// cache is one file per attachment. They are read fresh too whenever the
// plan depends on them: an attachment lost its entry without a DEL, and
// only the runtime's record may keep it. Unwatched, a second's staleness
// is the bound.
func (a *Agent) readHints(d desired.State, o observed.State, entries map[observed.AttachmentKey]desired.Entry, now time.Time) {
	if a.hintsDirty || vanishedWithoutDel(d, o, entries) || (!a.hintsWatched && (a.hintsAt.IsZero() || now.Sub(a.hintsAt) >= hintsEvery)) {
		a.hints, a.hintsAt, a.hintsDirty = a.hintReader.Read(a.cfg.Paths.Hints), now, false
		a.metrics.runtimeRecords.Set(float64(len(a.hints.RuntimeAttachments)))
	}
}

// plan makes the pass's plan and keeps what it leaves for the loop: the
// plan itself (enid status, the heartbeat), the next deadline, whether
// pods starve on an exhausted vSwitch, the unknown vSwitches' metric, the
// planner's memory on disk, and the pod index the Kubernetes link reads.
func (a *Agent) plan(d desired.State, o observed.State, entries map[observed.AttachmentKey]desired.Entry, now time.Time) planner.Plan {
	// On the agent's clock like every other duration it reports: on a
	// virtual clock planning takes no time.
	start := a.now()
	p := a.planning.Plan(d, o, a.memory, now, a.spent)
	a.spent = planner.Plan{}
	a.metrics.planSeconds.Observe(a.now().Sub(start).Seconds())
	a.lastPlan = p
	a.deadline, _ = p.Memory.NextDeadline(d.Config, a.planning.Options(now))
	a.cache.setStarved(p.Pool.Waiting > 0 && len(p.Memory.Exhausted) > 0)
	a.metrics.unknownVSw.Reset()
	for _, id := range o.UnknownVSwitches {
		a.metrics.unknownVSw.WithLabelValues(id).Set(1)
	}
	if err := a.saveMemory(p.Memory); err != nil {
		a.log.Error("persist planner memory", "err", err)
	}
	if a.cfg.Kube != nil {
		a.podIndex.Store(&entries)
	}
	return p
}

// rememberSent records the creates the dispatch started (the tokens
// dispatch returns): one planned again with one of their tokens (after a
// crash, while describes do not show its ENI) must send the same
// parameters. A crash before this write
// costs at most an extra ENI (IdempotentParameterMismatch, then a new
// token).
func (a *Agent) rememberSent(sent []string) {
	if len(sent) == 0 {
		return
	}
	m := a.memory
	for _, tok := range sent {
		m = m.TokenSent(tok)
	}
	if err := a.saveMemory(m); err != nil {
		a.log.Error("persist planner memory", "err", err)
	}
}

// spend keeps prev, the plan the pass just replaced with p, for the next
// pass to plan in (planner.Options.Recycle): its last reader was the
// summary, and the executor keeps detached copies of the actions it runs.
// Only the arrays matter: those the runtime allocates as large objects
// (zeroed, faulted in, their pages handed back), and only while plans
// stay near their size: an array four times what p needed (a burst's
// actions on a node settled since, the statuses of pods since deleted)
// is left to the collector.
func (a *Agent) spend(prev, p planner.Plan) {
	a.spent = planner.Plan{Actions: worthKeeping(prev.Actions, len(p.Actions)), Statuses: worthKeeping(prev.Statuses, len(p.Statuses))}
}

// worthKeeping is l when its array is a large object (over 32 KiB, the
// runtime's largest size class) no more than four times n long, or nil:
// the small arrays of a few pods cost little to allocate, and a fleet of
// simulated nodes keeping them would hold megabytes for nothing.
func worthKeeping[T any](l []T, n int) []T {
	var v T
	if c := cap(l); c*int(unsafe.Sizeof(v)) <= 32<<10 || c > 4*n+16 {
		return nil
	}
	return l
}

// summarize keeps the heartbeat's summary current (`enid status` and
// STATUS read it) when the pass changed it: the pool, the sets, the
// published phases (phases, the pass's cache.tally) or the hints.
func (a *Agent) summarize(p, prev planner.Plan, hintsChanged bool, phases map[status.Phase]int) {
	if hintsChanged || p.Pool != prev.Pool || !maps.Equal(phases, a.phases) || !reflect.DeepEqual(p.Sets, prev.Sets) {
		a.phases = phases
		a.writeHeartbeat()
	}
}

// reportReadiness says how the agent serves after a pass that planned:
// ready, with the reason it serves less than it should (an invalid config
// on disk, a cloud it cannot reach, an incomplete observation, a vSwitch
// that does not exist), in the heartbeat and to the Kubernetes link.
func (a *Agent) reportReadiness(d desired.State, o observed.State) {
	switch {
	case len(d.ConfigProblems) > 0:
		a.setReady(true, "config on disk is invalid; the last good config is in force: "+d.ConfigProblems[0])
		a.reportNode(HealthConfigInvalid)
	case a.degraded != nil:
		a.setReady(true, fmt.Sprintf("degraded: cloud unreachable since %s, serving %d idle addresses: %s",
			a.degraded.Since.UTC().Format(time.RFC3339), a.degraded.Idle, a.degraded.Reason))
		a.reportNode(HealthCloudDegraded)
	case !o.Complete:
		a.setReady(true, "observation incomplete: "+firstOr(o.Problems, "unknown"))
		a.reportNode(HealthCloudDegraded)
	case len(o.UnknownVSwitches) > 0:
		a.setReady(true, "vSwitch "+strings.Join(o.UnknownVSwitches, ", ")+" does not exist: skipped")
		a.reportNode(HealthReady)
	default:
		a.setReady(true, "")
		a.reportNode(HealthReady)
	}
}

// loadDesired reads desired state (config and entries; the hints are read
// apart) and indexes the entries. The map is built anew, never changed:
// running actions of earlier passes hold the old one.
func (a *Agent) loadDesired() {
	start := a.now()
	var d desired.State
	if a.configDirty.Swap(false) {
		d = desired.Load(a.loader, a.entries, desired.HintSources{})
	} else {
		d = desired.LoadEntries(a.desired, a.entries)
	}
	a.metrics.desiredSeconds.Observe(a.now().Sub(start).Seconds())
	a.planning.Complete(&d)
	m := make(map[observed.AttachmentKey]desired.Entry, len(d.Entries))
	fp := fnvOffset
	for _, e := range d.Entries {
		m[e.Key()] = e
		// FNV-1a of "<containerID>_<ifName>\n" for each, without building
		// the strings (two allocations an entry, on every read).
		fp = fnvAdd(fnvAdd(fnvAdd(fnvAdd(fp, e.ContainerID), "_"), e.IfName), "\n")
	}
	a.desired, a.entryMap, a.entryFP = d, m, fp
}

// FNV-1a, 64 bits (hash/fnv's New64a), over strings.
const (
	fnvOffset uint64 = 14695981039346656037
	fnvPrime  uint64 = 1099511628211
)

func fnvAdd(h uint64, s string) uint64 {
	for i := range len(s) {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// vanishedWithoutDel reports whether the node holds an attachment (kernel
// state or a status) that has neither an entry nor a deletion record (nor a
// broken entry file): its fate depends on the runtime's record.
func vanishedWithoutDel(d desired.State, o observed.State, entries map[observed.AttachmentKey]desired.Entry) bool {
	var other map[observed.AttachmentKey]bool // deleted or named by a broken file
	if n := len(d.Deleted) + len(d.EntryProblems); n > 0 {
		other = make(map[observed.AttachmentKey]bool, n)
		for _, k := range d.Deleted {
			other[k] = true
		}
		for _, ep := range d.EntryProblems {
			other[ep.Key()] = true
		}
	}
	known := func(k observed.AttachmentKey) bool {
		_, ok := entries[k]
		return ok || other[k]
	}
	for _, pn := range o.Node.Pods {
		if !known(pn.Key) {
			return true
		}
	}
	for _, b := range o.Node.Published {
		if !known(b.Key) {
			return true
		}
	}
	return false
}

// forgetDeletions removes the deletion records (CNI DEL's) of attachments
// of which nothing is left: no entry, no kernel state, no status. Until
// then a record keeps the teardown authoritative, also across a restart
// (a DEL while the agent is down). Only after a complete observation: a
// partial one may miss what is still to tear down.
func (a *Agent) forgetDeletions(d desired.State, o observed.State, entries map[observed.AttachmentKey]desired.Entry) {
	if len(d.Deleted) == 0 || !o.Complete {
		return
	}
	left := make(map[observed.AttachmentKey]bool, len(o.Node.Pods)+len(o.Node.Published)+len(d.EntryProblems))
	for _, pn := range o.Node.Pods {
		left[pn.Key] = true
	}
	for _, b := range o.Node.Published {
		left[b.Key] = true
	}
	for _, ep := range d.EntryProblems {
		left[ep.Key()] = true
	}
	forgotten := map[observed.AttachmentKey]bool{}
	for _, k := range d.Deleted {
		if _, live := entries[k]; live || left[k] {
			continue // an ADD after the DEL removes the record itself
		}
		if err := a.entries.ForgetDeletion(k); err != nil {
			a.log.Warn("forget deletion record", "key", k.String(), "err", err)
			continue
		}
		forgotten[k] = true
	}
	if len(forgotten) > 0 {
		// The desired state is read again only when the files change: until
		// then the next passes plan with this one, which must not list the
		// records just removed (each pass would remove them again).
		a.desired.Deleted = slices.DeleteFunc(slices.Clone(a.desired.Deleted), func(k desired.Key) bool { return forgotten[k] })
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
		if d.Config.Mode == desired.ModeExclusiveENI && len(d.Config.ServiceCIDRs) == 0 {
			// Served all the same (see docs/config.md); said once per
			// config here, and on every plan.
			a.log.Warn("serviceCIDRs is empty in mode exclusive-eni: exclusive pods cannot reach Services; set it to the cluster's Service range")
		}
		cfg := d.Config
		a.configSeen = &cfg
	}
}

// hintsEvery is how often the kubelet's and the runtime's records are read
// when they are not watched.
const hintsEvery = time.Second

// hintsDebounce coalesces the runtime's cache writes of a burst of pods
// into one re-read.
const hintsDebounce = 20 * time.Millisecond

// ownedListEvery is how many routine resyncs make one that lists the
// owned ENIs not attached to the instance (see refresh).
const ownedListEvery = 5

// sweeper is a datapath that can remove what no attachment owns any more
// (linux.Datapath: pod rules left when a netns went before its teardown).
type sweeper interface {
	Sweep(ctx context.Context) (linux.Changes, error)
}

func firstOr(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}

// logLessons logs what the planner learned from failed actions.
func (a *Agent) logLessons(lessons []planner.Lesson) {
	for _, l := range lessons {
		switch l.Kind {
		case planner.LessonExhausted:
			// Skipped when choosing where to create ENIs, for as long as
			// peers do (Terway: 10 minutes), then tried again.
			a.log.Warn("vSwitch out of addresses: skipping it for new ENIs", "vswitch", l.Key, "until", l.Until)
		case planner.LessonFragmented:
			// No free aligned /28: no prefix is asked of it for a while
			// (single addresses still, where the mode allows).
			a.log.Warn("vSwitch has no free /28 for an IPv4 prefix: asking it for none", "vswitch", l.Key, "until", l.Until)
		case planner.LessonRefusedGroups:
			// A group of the set does not exist (a typo in an annotation
			// or the config) or is full: the set's pods fail with the
			// reason, and its create holds no ENI slot, until the mark ends.
			a.log.Warn("the cloud refused an ENI's security groups: creating none for the set", "security_groups", l.Key, "until", l.Until)
		case planner.LessonTokenBurnt:
			// ECS refuses every resend of a token whose call failed.
			a.log.Debug("client token burnt: the call is planned with a new one", "token", l.Key)
		case planner.LessonBackoff:
			// The executor logged the failure; this is when it is retried.
			a.log.Debug("backing off", "key", l.Key, "until", l.Until)
		}
	}
}

// claimState takes the state directory's lock and the heartbeat's, creates
// the entry and status directories and loads the planner's memory. The
// release it returns drops the locks; Run holds them until it returns.
func (a *Agent) claimState() (release func(), err error) {
	if a.cfg.NoLocks {
		return a.claimUnlocked()
	}
	unlock, err := lockStateDir(a.cfg.Paths.StateDir)
	if err != nil {
		return nil, err
	}
	// Held until Run returns, after the last heartbeat: a reader that finds
	// it free knows the heartbeat's writer is gone, however fresh the
	// heartbeat (a SIGKILL leaves no last word).
	// Only another agent's lock is fatal: without one (a full /run that
	// cannot take the file) the heartbeat names no lock, and readers fall
	// back to its pid.
	release = unlock
	lock, unlockBeat, err := status.LockAgent(a.cfg.Paths.AgentFile)
	switch {
	case errors.Is(err, status.ErrAgentLocked):
		unlock()
		return nil, err
	case err != nil:
		a.log.Warn("running without the heartbeat's lock: readers check the pid instead", "err", err)
	default:
		release = func() { unlockBeat(); unlock() }
		a.self.lock = lock
	}
	if err := a.prepareState(); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// claimUnlocked is claimState for Config.NoLocks: the state directory
// must exist, as lockStateDir would have made it.
func (a *Agent) claimUnlocked() (release func(), err error) {
	if err := os.MkdirAll(a.cfg.Paths.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir %s: %w", a.cfg.Paths.StateDir, err)
	}
	if err := a.prepareState(); err != nil {
		return nil, err
	}
	return func() {}, nil
}

// prepareState records who runs, creates the entry and status
// directories and loads the planner's memory.
func (a *Agent) prepareState() error {
	a.self.pid = os.Getpid()
	a.self.pidNS, a.self.pidStart = status.SelfProcess()
	if err := a.makeStateDirs(); err != nil {
		return err
	}
	a.loadMemory()
	a.started = a.now()
	return nil
}

// makeStateDirs creates the entry and status directories. Entries may
// carry pod annotations: 0700. Statuses hold no secrets and monitoring may
// read them: 0755, as docs/status-files.md says (an older agent made it
// 0700; that exact mode is corrected).
func (a *Agent) makeStateDirs() error {
	for dir, mode := range map[string]os.FileMode{a.cfg.Paths.Entries: 0o700, a.cfg.Paths.Statuses: 0o755} {
		if err := os.MkdirAll(dir, mode); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		if st, err := os.Stat(dir); err == nil && mode == 0o755 && st.Mode().Perm() == 0o700 {
			if err := os.Chmod(dir, mode); err != nil {
				return fmt.Errorf("chmod %s: %w", dir, err)
			}
		}
	}
	return nil
}

// watchDesired starts the watcher of the entries and the config (none
// with NoWatch): a signal on the channel asks for desired state to be read
// again; the watcher's end comes on done.
func (a *Agent) watchDesired(ctx context.Context) (<-chan struct{}, chan error, error) {
	done := make(chan error, 1)
	if a.cfg.NoWatch {
		return nil, done, nil
	}
	watch, err := desired.NewWatcher(a.log, a.cfg.Paths.Entries, filepath.Dir(a.cfg.Paths.Config.Main), a.cfg.Paths.Config.DropInDir)
	if err != nil {
		return nil, nil, fmt.Errorf("watch desired state: %w", err)
	}
	// Bursts coalesce anyway: signals that arrive while a pass runs
	// collapse into one. A long debounce would only add to every CNI ADD's
	// latency.
	watch.Debounce = a.cfg.Debounce
	watch.Clock = a.clk
	// The watcher names each changed entry file, so that a pass reads
	// again only those (desired.EntryStore.Track); from the moment it
	// watches, before which the store checks every file.
	entriesDir, err := filepath.Abs(a.cfg.Paths.Entries)
	if err != nil {
		return nil, nil, fmt.Errorf("watch desired state: %w", err)
	}
	watch.Changed = func(path string) {
		if filepath.Dir(path) == entriesDir {
			a.entries.Changed(filepath.Base(path))
		} else {
			a.configDirty.Store(true)
		}
	}
	watch.Lost = func() {
		a.entries.Unsure()
		a.configDirty.Store(true)
	}
	// An entry written or removed is a CNI call waiting: its pass starts
	// at once, not after the debounce (1 ms of every ADD and DEL).
	watch.Prompt = func(path string) bool { return filepath.Dir(path) == entriesDir }
	go func() { done <- watch.Run(ctx) }()
	select {
	case <-watch.Ready():
	case err := <-done:
		return nil, nil, fmt.Errorf("watch desired state: %w", err)
	}
	a.entries.Track()
	return watch.C(), done, nil
}

// watchHints starts the watcher of the kubelet's and the runtime's records
// (none with NoWatch or no hint sources) and waits until it watches. The
// runtime's cache records keep an attachment whose entry vanished without
// a DEL: their removal must wake the loop, or the teardown would wait for
// something else to happen. Hints are read at the first pass either way.
func (a *Agent) watchHints(ctx context.Context) (<-chan struct{}, chan error, error) {
	a.hintsDirty = true
	done := make(chan error, 1)
	dirs := a.cfg.Paths.Hints.Dirs()
	if a.cfg.NoWatch || len(dirs) == 0 {
		return nil, done, nil
	}
	hw, err := desired.NewWatcher(a.log, dirs...)
	if err != nil {
		return nil, nil, fmt.Errorf("watch hint sources: %w", err)
	}
	hw.Debounce = hintsDebounce
	hw.Clock = a.clk
	go func() { done <- hw.Run(ctx) }()
	select {
	case <-hw.Ready():
	case err := <-done:
		return nil, nil, fmt.Errorf("watch hint sources: %w", err)
	}
	a.hintsWatched = true
	return hw.C(), done, nil
}
