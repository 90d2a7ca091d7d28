package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// executor runs plans. Actions of one plan run as a dependency graph with
// bounded parallelism; an action whose twin (same kind, target and token)
// is still running from an earlier pass is not started again, and neither
// is anything that depends on it: the next pass plans those again with
// what the finished action left behind. Node actions of one pod never wait
// for cloud actions they don't depend on.
type executor struct {
	cloud      Cloud
	dp         Datapath
	statuses   *status.Store
	cache      *cache
	instanceID string
	log        *slog.Logger
	metrics    *Metrics
	now        func() time.Time
	// wake asks the loop for a pass; it never blocks.
	wake func()
	// published, when set, is told of every status written (the Kube
	// link); it never blocks.
	published func(planner.PodStatus)
	// waitDevice bounds how long ConfigureENI waits for the ENI's device.
	waitDevice time.Duration
	// nodeSlots and cloudSlots bound how many node and cloud actions run
	// at once, urgent ones first. Apart, so that a cloud call (an attach
	// waits seconds for InUse) never holds a slot a pod's setup needs, and
	// a burst of status writes never delays the pool's growth.
	nodeLane, cloudLane *lane
	// wg counts running actions; the agent waits on it at shutdown.
	wg sync.WaitGroup

	mu sync.Mutex // guards the fields below
	// inflight counts running (or waiting) actions by key; cloudRunning
	// counts the cloud ones among them.
	inflight     map[opKey]int
	cloudRunning int
	// nodeDoneAt is when the last node action ended.
	nodeDoneAt time.Time
	// endedAt is, by action key, the cache generation at which an action
	// of an earlier pass ended (cache.tick): a plan made from an older
	// snapshot did not see what it did, and its twin there is not started
	// (dispatch).
	endedAt    map[opKey]uint64
	lastErrors []string
	// outcomes holds the outcomes of the actions that ended since the loop
	// last drained them, in the order they ended: the planner learns from
	// them (planner.Memory.Learn: marks, burnt tokens, back-offs).
	outcomes []planner.Outcome
	// deferredTo is when optional cloud work that the last dispatch held
	// back may go (zero: none held back); the loop wakes then.
	deferredTo time.Time
}

// pacedCloud is a cloud client that paces its calls (*cloud.Client):
// BackoffUntil is when an optional call would go at once.
type pacedCloud interface {
	BackoffUntil() time.Time
}

// backoffUntil is when the cloud client would send an optional call at
// once (zero when the client does not say).
func (x *executor) backoffUntil() time.Time {
	if pc, ok := x.cloud.(pacedCloud); ok {
		return pc.BackoffUntil()
	}
	return time.Time{}
}

// deferredUntil reports when optional cloud work held back by the last
// dispatch may start: the time the client named then (the loop sleeps
// until it; reading the client again here could name a time the dispatch
// did not wait for).
func (x *executor) deferredUntil() (time.Time, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.deferredTo, !x.deferredTo.IsZero()
}

const maxLastErrors = 10

func newExecutor(c Cloud, dp Datapath, st *status.Store, ch *cache, instanceID string, log *slog.Logger, m *Metrics, now func() time.Time, wake func(), parallel int, waitDevice time.Duration) *executor {
	return &executor{
		cloud: c, dp: dp, statuses: st, cache: ch, instanceID: instanceID, log: log, metrics: m,
		now: now, wake: wake, waitDevice: waitDevice, nodeLane: newLane(parallel), cloudLane: newLane(parallel),
		inflight: map[opKey]int{}, endedAt: map[opKey]uint64{},
	}
}

// opKey identifies an action across passes (actionKey). Back-offs are
// the planner's, keyed by planner.RetryKey.
type opKey struct {
	scope keyScope
	// kind is a node action's kind.
	kind planner.ActionKind
	// id is the ClientToken, ENI ID or target, as scope says.
	id string
}

// keyScope says what an opKey names.
type keyScope int

const (
	// keyNode: a node action, by kind and target.
	keyNode keyScope = iota
	// keyToken: a CreateENI, by ClientToken.
	keyToken
	// keyENI: any cloud action on one ENI.
	keyENI
	// keyCloud: a cloud action that names no ENI yet (it acts on the ENI
	// a create of the same plan makes), by kind and target.
	keyCloud
)

// acrossPasses reports whether the key names the same work in every plan.
// An action on the ENI a create of its plan makes (keyCloud: "new#0") is
// known only within its plan: the next plan's "new#0" is another ENI, and
// holding its attach because the last one's ran would leave the ENI its
// create makes detached (its create is known by its token).
func (k opKey) acrossPasses() bool { return k.scope != keyCloud }

// String renders the key for logs and tests ("eni/eni-1").
func (k opKey) String() string {
	switch k.scope {
	case keyToken:
		return "create/" + k.id
	case keyENI:
		return "eni/" + k.id
	}
	return string(k.kind) + "/" + k.id
}

// actionKey identifies an action across passes: while an action with the
// same key runs, its twin from a later pass is not started. A CreateENI is
// known by its ClientToken (which the planner derives from what exists, so
// a pass that cannot see the running create yet plans the same token). Other
// cloud actions are keyed by their ENI alone: one cloud operation per ENI at
// a time, so an assign planned before an earlier assign's addresses are seen
// never asks for them twice. Node actions are keyed by kind and target.
func actionKey(a planner.Action) opKey {
	switch {
	case a.Kind == planner.CreateENI:
		return opKey{scope: keyToken, id: a.ClientToken}
	case a.Kind.Cloud() && a.ENIID != "":
		return opKey{scope: keyENI, id: a.ENIID}
	case a.Kind.Cloud():
		return opKey{scope: keyCloud, kind: a.Kind, id: a.Target}
	}
	return opKey{scope: keyNode, kind: a.Kind, id: a.Target}
}

// busy reports whether anything is running.
func (x *executor) busy() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.inflight) > 0
}

// nodeActivity reports whether a node action runs or waits, and when the
// last one ended.
func (x *executor) nodeActivity() (busy bool, last time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, c := range x.inflight {
		n += c
	}
	return n > x.cloudRunning, x.nodeDoneAt
}

// drainOutcomes returns and clears the outcomes recorded since the last
// call.
func (x *executor) drainOutcomes() []planner.Outcome {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := x.outcomes
	x.outcomes = nil
	return out
}

// note records a problem of the agent's own (not an action's) for
// agent.json's lastErrors and `enid status`.
func (x *executor) note(msg string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.lastErrors = append(x.lastErrors, msg)
	if len(x.lastErrors) > maxLastErrors {
		x.lastErrors = x.lastErrors[len(x.lastErrors)-maxLastErrors:]
	}
}

func (x *executor) errors() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]string(nil), x.lastErrors...)
}

// run is the state of one plan's execution. It holds only the actions
// that started, not the plan: a pass's plan lists every pod's actions, and
// the runs of earlier passes live as long as one of their actions waits
// for a slot (with thousands of entries, holding every plan cost hundreds
// of megabytes).
type run struct {
	entries map[observed.AttachmentKey]desired.Entry
	// steps holds the started actions by action ID (nil: not started).
	steps []*step
	mu    sync.Mutex // guards every step's pending and depFailed
}

// step is one started action and what it leaves for the actions that
// depend on it. A step runs once every dependency has ended (pending
// reaches 0), so it reads their results without waiting; a step whose
// dependency failed ends without running.
type step struct {
	a   planner.Action
	key opKey // actionKey(a)
	// dependents are the steps that depend on this one; pending counts the
	// dependencies not yet ended, depFailed says one of them failed.
	dependents []int
	pending    int
	depFailed  bool
	// ok, created and podRes are written before the step ends and read by
	// its dependents: ok says the action succeeded; created is the ENI a
	// CreateENI made (AttachENI updates it); podRes is a setup's result.
	ok      bool
	created observed.ENI
	podRes  linux.PodResult
}

// dep returns the started step of action d, or nil.
func (r *run) dep(d int) *step {
	if d < 0 || d >= len(r.steps) {
		return nil
	}
	return r.steps[d]
}

// dispatch starts the plan's actions and returns without waiting for them.
// seen is the cache generation of the snapshot the plan was made from
// (cache.view). With holdCloud, the plan's cloud actions (and what depends
// on them) wait for a later pass.
func (x *executor) dispatch(ctx context.Context, p planner.Plan, entries map[observed.AttachmentKey]desired.Entry, holdCloud bool, seen uint64) (sent []string) {
	n := len(p.Actions)
	r := &run{entries: entries, steps: make([]*step, n)}
	skipped := make([]bool, n)
	now := x.now()
	x.mu.Lock()
	defer x.mu.Unlock()
	g := x.gate(now, holdCloud, seen)
	x.deferredTo = time.Time{}
	for i, a := range p.Actions {
		key := actionKey(a)
		skip := false
		for _, d := range a.DependsOn {
			if d >= 0 && d < n && skipped[d] {
				skip = true
			}
		}
		// holds is asked even of an action whose dependency waits: an
		// optional cloud action deferred by the client still names the
		// time the loop is to wake.
		if hold := x.holds(g, a, key); skip || hold {
			skipped[i] = true
			continue
		}
		r.steps[i] = x.begin(a, key)
		if a.Kind == planner.CreateENI && a.ClientToken != "" {
			sent = append(sent, a.ClientToken)
		}
	}
	x.startReady(ctx, r)
	x.forget(seen)
	return sent
}

// gate is what holds a plan's actions back in one dispatch (holds).
type gate struct {
	now time.Time
	// earlier holds the keys of actions of earlier passes still running:
	// only they hold keys; actions of this plan that share a key (detach
	// then delete one ENI) are ordered by DependsOn.
	earlier map[opKey]bool
	// cloudBusy: cloud changes go in rounds. While any cloud action of an
	// earlier pass runs, this plan's cloud actions wait for the next pass.
	// A plan made before a running create or assign shows its result
	// would ask for the same capacity again; one round at a time, each
	// planned from all the demand known when it starts, never does.
	cloudBusy bool
	// pacedUntil: while the client would not send an optional call at once
	// (it backs off after throttling, or the calls queued ahead of it and
	// the rate it learned make it wait), only urgent cloud work (what a
	// waiting pod needs) starts: topping up the idle pool or releasing
	// surplus waits, and the pass at the time the client names plans it
	// again. Held in the client instead, it would hold this round, and
	// every urgent action planned behind it, for as long. A fleet under
	// one account's limit thus spends the rate it has on pods first.
	pacedUntil time.Time
	// seen is the cache generation the plan was made from.
	seen uint64
}

// gate returns the dispatch's gate, with x.mu held.
func (x *executor) gate(now time.Time, holdCloud bool, seen uint64) gate {
	g := gate{now: now, earlier: make(map[opKey]bool, len(x.inflight)), cloudBusy: x.cloudRunning > 0 || holdCloud,
		pacedUntil: x.backoffUntil(), seen: seen}
	for k := range x.inflight {
		g.earlier[k] = true
	}
	return g
}

// holds reports, with x.mu held, whether action a waits for a later pass:
// its twin still runs or ended after the plan's snapshot, the cloud round
// is busy, optional cloud work is deferred (recorded in deferredTo for the
// loop's timer), or the plan says it backs off after a failure (NotBefore,
// the planner's decision; the loop wakes then, planner.NextDeadline). key
// is its actionKey.
func (x *executor) holds(g gate, a planner.Action, key opKey) bool {
	hold := (g.earlier[key] && key.acrossPasses()) || (g.cloudBusy && a.Kind.Cloud())
	// Its twin ended after the snapshot was taken: the plan asks again for
	// what is already done (a second update of an ENI's groups, a second
	// setup of a pod). The pass the end woke plans it from what that
	// action left.
	if x.endedAt[key] > g.seen && key.acrossPasses() {
		hold = true
	}
	if a.Kind.Cloud() && !a.Urgent && g.now.Before(g.pacedUntil) {
		hold, x.deferredTo = true, g.pacedUntil
	}
	if g.now.Before(a.NotBefore) {
		hold = true
	}
	return hold
}

// begin records, with x.mu held, that action a (its actionKey key)
// starts and returns its step. What the action gives up is recorded before
// it runs, so no pass meanwhile hands out what is on its way out. The step
// holds a detached copy (planner.Action.Detach): it may wait in its lane
// for many passes, and must not keep its plan's arrays alive meanwhile.
func (x *executor) begin(a planner.Action, key opKey) *step {
	x.inflight[key]++
	if a.Kind.Cloud() {
		x.cloudRunning++
	}
	a = a.Detach()
	x.cache.before(a)
	x.wg.Add(1)
	return &step{a: a, key: key}
}

// startReady wires r's started steps to their dependencies and starts the
// ones with none; the others start when their last dependency ends
// (stepDone). Each depends only on started steps: those whose dependency
// was held back were held back too.
func (x *executor) startReady(ctx context.Context, r *run) {
	for i, s := range r.steps {
		if s == nil {
			continue
		}
		for _, d := range s.a.DependsOn {
			if dep := r.dep(d); dep != nil {
				dep.dependents = append(dep.dependents, i)
				s.pending++
			}
		}
	}
	for i, s := range r.steps {
		if s != nil && s.pending == 0 {
			x.start(ctx, r, i)
		}
	}
}

// forget drops, with x.mu held, the ends every later plan will have seen
// (later plans are made from later snapshots): no later dispatch needs
// them.
func (x *executor) forget(seen uint64) {
	for k, g := range x.endedAt {
		if g <= seen {
			delete(x.endedAt, k)
		}
	}
}

// start runs step i of r in its lane (cloud or node), urgent first.
func (x *executor) start(ctx context.Context, r *run, i int) {
	a := r.steps[i].a
	l := x.nodeLane
	if a.Kind.Cloud() {
		l = x.cloudLane
	}
	l.run(a.Urgent, func() { x.runStep(ctx, r, i) })
}

// runStep performs step i (unless the agent is stopping), then ends it.
func (x *executor) runStep(ctx context.Context, r *run, i int) {
	s := r.steps[i]
	if ctx.Err() == nil {
		s.ok = x.perform(ctx, r, i)
	}
	x.stepDone(ctx, r, i)
}

// stepDone ends step i: its key is free again, the loop is woken, and each
// dependent whose last dependency this was starts, or, when one failed,
// ends without running (the next pass decides again).
func (x *executor) stepDone(ctx context.Context, r *run, i int) {
	s := r.steps[i]
	x.mu.Lock()
	if x.inflight[s.key]--; x.inflight[s.key] <= 0 {
		delete(x.inflight, s.key)
	}
	if g := x.cache.tick(); s.key.acrossPasses() {
		x.endedAt[s.key] = g
	}
	if s.a.Kind.Cloud() {
		x.cloudRunning--
	} else {
		x.nodeDoneAt = x.now()
	}
	x.mu.Unlock()
	started := false
	for _, j := range s.dependents {
		d := r.steps[j]
		r.mu.Lock()
		d.pending--
		d.depFailed = d.depFailed || !s.ok
		ready, failed := d.pending == 0, d.depFailed
		r.mu.Unlock()
		switch {
		case ready && failed:
			x.stepDone(ctx, r, j)
		case ready:
			x.start(ctx, r, j)
			started = true
		}
	}
	// A step that handed on to a dependent (a setup to its status) leaves
	// the loop nothing new to plan: the dependent's end wakes it. Waking
	// here too would cost a pass per pod start, which reads the whole
	// node's plan (a quarter of the passes of a warm ADD).
	if !started {
		x.wake()
	}
	x.wg.Done()
}

// perform executes step i and records its outcome (for the planner to
// learn from), its metrics, and a failure's effect on the cache. It
// reports success.
func (x *executor) perform(ctx context.Context, r *run, i int) bool {
	a := r.steps[i].a
	start := x.now()
	if a.Kind.Cloud() && !a.Urgent && !r.continues(i) {
		ctx = cloud.WithPriority(ctx, cloud.Optional)
	}
	err := x.execute(ctx, r, i)
	if a.Kind.Cloud() {
		x.cache.noteCloudAction(x.now())
	}
	elapsed := x.now().Sub(start)
	x.metrics.execSeconds.WithLabelValues(string(a.Kind)).Observe(elapsed.Seconds())
	if err == nil {
		// A success ends its key's back-off (planner.Memory.Learn).
		x.mu.Lock()
		x.outcomes = append(x.outcomes, planner.Outcome{Action: a, At: x.now()})
		x.mu.Unlock()
		x.metrics.actions.WithLabelValues(string(a.Kind), "ok").Inc()
		x.log.Debug("action done", "kind", a.Kind, "target", a.Target, "took", elapsed)
		return true
	}
	if ctx.Err() == nil {
		x.failed(a, err)
	}
	return false
}

// failed records a failure: its outcome, the facts of the answer (its
// class, no addresses left, groups refused, a definite failure, when it
// ended), for the planner to learn from (drainOutcomes,
// planner.Memory.Learn), which decides how long the action backs off and
// what a pod whose setup failed hears (the next pass plans both, where
// the planner's scripts show them); what the failure leaves in the cache
// (effect.go's failure transition) and what must be observed again; and
// the error, for `enid status`.
func (x *executor) failed(a planner.Action, err error) {
	class := failureClass(a, err)
	outcome := "retry"
	if !class.Retryable(a.Kind) {
		outcome = "error"
	}
	x.metrics.actions.WithLabelValues(string(a.Kind), outcome).Inc()
	x.observeAgain(a, err)
	o := planner.Outcome{Action: a, Err: err.Error(), Class: class, At: x.now(), VSwitchID: a.VSwitchID,
		NoAddresses: errors.Is(err, cloud.ErrVSwitchExhausted), Definite: cloud.Definite(err),
		GroupsRefused: cloud.SecurityGroupsRefused(err)}
	if o.NoAddresses && o.VSwitchID == "" {
		o.VSwitchID = x.cache.vSwitchOf(a.ENIID)
	}
	x.mu.Lock()
	x.outcomes = append(x.outcomes, o)
	msg := fmt.Sprintf("%s %s: %v", a.Kind, a.Target, err)
	x.lastErrors = append(x.lastErrors, msg)
	if len(x.lastErrors) > maxLastErrors {
		x.lastErrors = x.lastErrors[len(x.lastErrors)-maxLastErrors:]
	}
	x.mu.Unlock()
	x.log.Warn("action failed", "kind", a.Kind, "target", a.Target, "class", class, "err", err)
	if a.Pod != nil && (a.Kind == planner.SetupPod || a.Kind == planner.MoveENI) {
		// The claim recorded before it ran is withdrawn.
		x.cache.failed(a, false)
	}
}

// observeAgain marks in the cache what action a's failure (err) leaves to
// observe again. A throttled call was refused before it did anything:
// nothing to observe again (observing would only add calls to a throttled
// account). A node action that found something missing (the pod's
// namespace, the ENI's device) asks for the node to be read again, and
// the pod's namespace to be checked again, never for the cloud (DESIGN.md
// invariant 11: a node-side failure costs no cloud call). What the
// throttled call gave up before it ran (the addresses of an unassign, a
// detaching ENI's status and device) comes back at once: left out, the
// cache would show them gone until the next resync, and the planner would
// not release them again (a surplus kept for minutes after one throttled
// unassign).
func (x *executor) observeAgain(a planner.Action, err error) {
	switch {
	case a.Kind.Cloud() && errors.Is(err, cloud.ErrThrottled):
		x.cache.failed(a, true)
		if a.Kind == planner.DetachENI {
			x.cache.markNodeStale() // its device, from the kernel
		}
	case a.Kind.Cloud():
		x.cache.markDirty()
		if errors.Is(err, cloud.ErrConflict) {
			x.cache.noteConflict(x.now())
		}
	case errors.Is(err, linux.ErrNotFound):
		var k []observed.AttachmentKey
		if a.Pod != nil {
			k = append(k, a.Pod.Key)
		}
		x.cache.markNodeStale(k...)
	}
}

// failureClass is the class of action a's error as package cloud or
// linux tells it (planner.FailureClass): a fact the planner's memory
// learns from, no decision.
func failureClass(a planner.Action, err error) planner.FailureClass {
	if a.Kind.Cloud() {
		switch {
		case cloud.Retryable(err) && errors.Is(err, cloud.ErrThrottled):
			return planner.FailThrottled
		case cloud.Retryable(err):
			return planner.FailTransient
		case errors.Is(err, cloud.ErrNotFound):
			return planner.FailNotFound
		}
		return planner.FailTerminal
	}
	switch {
	case errors.Is(err, linux.ErrConflict):
		return planner.FailConflict
	case errors.Is(err, linux.ErrNodeNetNS), errors.Is(err, linux.ErrNotNetNS):
		return planner.FailNetNSRefused
	case errors.Is(err, linux.ErrNotFound):
		return planner.FailNotFound
	}
	return planner.FailTransient
}

// continues reports whether action i completes a cloud change this run
// has already made: a cloud action it depends on succeeded (the delete
// after a detach, the attach after a create). Such an action is never
// optional: yielding to throttling there would leave the ENI detached but
// not deleted, or created but not attached, which the planner may take
// for a leak only after its grace (minutes).
func (r *run) continues(i int) bool {
	for _, d := range r.steps[i].a.DependsOn {
		if dep := r.dep(d); dep != nil && dep.a.Kind.Cloud() && dep.ok {
			return true
		}
	}
	return false
}

// resolve returns the action with the ENI it means filled in: its own
// ENIID, or the ENI the referenced CreateENI made (its ID, MAC and, for
// ConfigureENI, the route table of the device index the attach gave).
func (r *run) resolve(a planner.Action) planner.Action {
	if c := r.dep(a.ENIRef - 1); a.ENIRef > 0 && c != nil {
		e := c.created
		a.ENIID, a.MAC = e.ID, e.MAC
		if a.Kind == planner.ConfigureENI {
			a.Table = planner.Table(e.DeviceIndex)
		}
	}
	return a
}

// handler performs one kind of action (a, its ENI reference resolved; i
// its index in the run) and records its result in the cache.
type handler func(x *executor, ctx context.Context, r *run, i int, a planner.Action) error

// handlers holds one handler per action kind.
var handlers = map[planner.ActionKind]handler{
	planner.CreateENI:     (*executor).createENI,
	planner.AttachENI:     (*executor).attachENI,
	planner.ConfigureENI:  (*executor).configureENI,
	planner.AssignIPs:     (*executor).assignIPs,
	planner.UnassignIPs:   (*executor).unassignIPs,
	planner.DetachENI:     (*executor).detachENI,
	planner.DeleteENI:     (*executor).deleteENI,
	planner.SetupPod:      (*executor).setupPod,
	planner.MoveENI:       (*executor).moveENI,
	planner.TeardownPod:   (*executor).teardownPod,
	planner.ReturnENI:     (*executor).returnENI,
	planner.PublishStatus: (*executor).publishStatus,
	planner.UpdateENI:     (*executor).updateENI,
}

// execute performs one action and records its result in the cache.
func (x *executor) execute(ctx context.Context, r *run, i int) error {
	a := r.resolve(r.steps[i].a)
	h, ok := handlers[a.Kind]
	if !ok {
		return fmt.Errorf("unknown action kind %q", a.Kind)
	}
	return h(x, ctx, r, i, a)
}

// createENI creates the ENI; later actions of the run find it by ENIRef.
func (x *executor) createENI(ctx context.Context, r *run, i int, a planner.Action) error {
	e, err := x.cloud.CreateENI(ctx, cloud.CreateENIRequest{VSwitchID: a.VSwitchID, SecurityGroups: a.SecurityGroups,
		Tags: a.Tags, IPv4Count: a.IPv4Count, IPv6Count: a.IPv6Count, IPv4PrefixCount: a.IPv4PrefixCount, ClientToken: a.ClientToken,
		Description: "enid pod ENI for " + x.instanceID})
	if err != nil {
		return err // names the call, the vSwitch and the cloud's code
	}
	r.steps[i].created = e
	x.cache.apply(a, planner.Result{ENI: &e})
	return nil
}

// attachENI attaches the ENI to this instance and waits until it is InUse.
func (x *executor) attachENI(ctx context.Context, r *run, i int, a planner.Action) error {
	if err := x.cloud.AttachENI(ctx, a.ENIID, x.instanceID); err != nil {
		return err
	}
	if e, ok := x.cache.eni(a.ENIID); ok {
		// Attaching until the wait below sees it InUse.
		e.Status, e.InstanceID = observed.ENIAttaching, x.instanceID
		x.cache.apply(a, planner.Result{ENI: &e})
	}
	e, err := x.cloud.WaitENI(started(ctx), a.ENIID, observed.ENIInUse)
	if err != nil {
		return err
	}
	if c := r.dep(a.ENIRef - 1); a.ENIRef > 0 && c != nil {
		c.created = e
	}
	x.cache.apply(a, planner.Result{ENI: &e})
	return nil
}

// started is the context for the calls that complete a cloud change
// already made (the polls of an attach or a detach): they are never
// optional. An optional poll refused for throttling would end the action
// with the ENI detached but not deleted, which the planner may only take
// for a leak after its grace (minutes), or attached but not configured.
func started(ctx context.Context) context.Context {
	return cloud.WithPriority(ctx, cloud.Normal)
}

// configureENI configures the ENI's device (table, gateways, MTU).
func (x *executor) configureENI(ctx context.Context, r *run, i int, a planner.Action) error {
	_, err := x.dp.EnsureENI(ctx, linux.ENISpec{MAC: a.MAC, Table: a.Table, Gateway: a.Gateway, GatewayV6: a.GatewayV6, MTU: a.MTU, WaitForDevice: x.waitDevice})
	if err != nil {
		return fmt.Errorf("configure eni %s (%s): %w", a.ENIID, a.MAC, err)
	}
	x.cache.apply(a, planner.Result{})
	return nil
}

// assignIPs assigns addresses to the ENI, IPv4 (addresses or prefixes)
// then IPv6.
func (x *executor) assignIPs(ctx context.Context, r *run, i int, a planner.Action) error {
	if a.IPv4PrefixCount > 0 {
		// An action asks for one kind of IPv4 (Action.Validate refuses
		// prefixes beside addresses), so the prefix call has the token to
		// itself.
		qs, err := x.cloud.AssignIPv4Prefixes(ctx, a.ENIID, a.IPv4PrefixCount, a.ClientToken)
		if err != nil {
			return err
		}
		x.cache.apply(a, planner.Result{IPv4Prefixes: qs})
	}
	if a.IPv4Count > 0 || len(a.IPv4) > 0 {
		ips, err := x.cloud.AssignIPv4(ctx, a.ENIID, a.IPv4Count, a.IPv4, a.ClientToken)
		if err != nil {
			return err
		}
		x.cache.apply(a, planner.Result{IPv4: ips})
	}
	if a.IPv6Count > 0 || len(a.IPv6) > 0 {
		ips, err := x.cloud.AssignIPv6(ctx, a.ENIID, a.IPv6Count, a.IPv6, a.ClientToken+"-6")
		if err != nil {
			return err
		}
		x.cache.apply(a, planner.Result{IPv6: ips})
	}
	return nil
}

// unassignIPs gives the ENI's addresses back: secondary IPv4 addresses,
// then whole IPv4 prefixes, then IPv6 addresses.
func (x *executor) unassignIPs(ctx context.Context, r *run, i int, a planner.Action) error {
	if len(a.IPv4) > 0 {
		if err := x.cloud.UnassignIPv4(ctx, a.ENIID, a.IPv4); err != nil {
			return fmt.Errorf("unassign %v from %s: %w", a.IPv4, a.ENIID, err)
		}
	}
	if len(a.IPv4Prefixes) > 0 {
		if err := x.cloud.UnassignIPv4Prefixes(ctx, a.ENIID, a.IPv4Prefixes); err != nil {
			return fmt.Errorf("unassign prefixes %v from %s: %w", a.IPv4Prefixes, a.ENIID, err)
		}
	}
	if len(a.IPv6) > 0 {
		if err := x.cloud.UnassignIPv6(ctx, a.ENIID, a.IPv6); err != nil {
			return fmt.Errorf("unassign %v from %s: %w", a.IPv6, a.ENIID, err)
		}
	}
	x.cache.apply(a, planner.Result{})
	return nil
}

// updateENI moves the ENI to the action's security groups (the complete
// new set) in place: addresses, attachment and pods stay.
func (x *executor) updateENI(ctx context.Context, r *run, i int, a planner.Action) error {
	if err := x.cloud.SetENISecurityGroups(ctx, a.ENIID, a.SecurityGroups); err != nil {
		return err // names the call, the ENI and the cloud's code
	}
	x.cache.apply(a, planner.Result{})
	return nil
}

// detachENI unconfigures the ENI's device, detaches it and waits until it is Available.
func (x *executor) detachENI(ctx context.Context, r *run, i int, a planner.Action) error {
	if a.MAC != "" {
		if _, err := x.dp.RemoveENI(ctx, a.MAC, a.Table); err != nil {
			return fmt.Errorf("unconfigure eni %s before detach: %w", a.ENIID, err)
		}
	}
	if err := x.cloud.DetachENI(ctx, a.ENIID, x.instanceID); err != nil {
		return err
	}
	e, err := x.cloud.WaitENI(started(ctx), a.ENIID, observed.ENIAvailable)
	if errors.Is(err, cloud.ErrNotFound) {
		x.cache.apply(a, planner.Result{Gone: true})
		return nil
	}
	if err != nil {
		return err
	}
	x.cache.apply(a, planner.Result{ENI: &e})
	return nil
}

// deleteENI deletes the ENI.
func (x *executor) deleteENI(ctx context.Context, r *run, i int, a planner.Action) error {
	if err := x.cloud.DeleteENI(ctx, a.ENIID); err != nil {
		return err
	}
	x.cache.apply(a, planner.Result{})
	return nil
}

// setupPod sets up a shared-mode pod's network.
func (x *executor) setupPod(ctx context.Context, r *run, i int, a planner.Action) error {
	p := a.Pod
	res, _, err := x.dp.EnsurePod(ctx, linux.PodSpec{Key: p.Key, NetNS: p.NetNS, IfName: p.IfName, IPv4: p.IPv4, IPv6: p.IPv6,
		ENIMAC: p.ENIMAC, Table: p.Table, MTU: p.MTU, Bandwidth: bandwidth(p.Bandwidth)})
	if err != nil {
		return fmt.Errorf("set up pod %s: %w", p.Key, err)
	}
	r.steps[i].podRes = res
	x.cache.apply(a, planner.Result{HostVeth: res.HostVeth})
	return nil
}

// moveENI moves an exclusive ENI into its pod.
func (x *executor) moveENI(ctx context.Context, r *run, i int, a planner.Action) error {
	p := a.Pod
	res, _, err := x.dp.EnsureExclusive(ctx, linux.ExclusiveSpec{Key: p.Key, NetNS: p.NetNS, IfName: p.IfName, MAC: p.ENIMAC,
		Prefix: a.Prefix, Gateway: a.Gateway, PrefixV6: a.PrefixV6, GatewayV6: a.GatewayV6, MTU: p.MTU,
		HostRoutes: a.HostRoutes})
	if err != nil {
		return fmt.Errorf("move eni %s into pod %s: %w", p.ENIMAC, p.Key, err)
	}
	r.steps[i].podRes = res
	x.cache.apply(a, planner.Result{HostVeth: res.HostVeth})
	return nil
}

// teardownPod tears a shared-mode pod's network down.
func (x *executor) teardownPod(ctx context.Context, r *run, i int, a planner.Action) error {
	p := a.Pod
	if _, err := x.dp.TeardownPod(ctx, p.Key, p.NetNS, p.IPv4, p.IPv6); err != nil {
		return fmt.Errorf("tear down pod %s: %w", p.Key, err)
	}
	x.cache.apply(a, planner.Result{})
	return nil
}

// returnENI returns an exclusive ENI from its pod to the node.
func (x *executor) returnENI(ctx context.Context, r *run, i int, a planner.Action) error {
	p := a.Pod
	if _, err := x.dp.TeardownExclusive(ctx, p.Key, p.NetNS, p.ENIMAC); err != nil {
		return fmt.Errorf("return eni %s from pod %s: %w", p.ENIMAC, p.Key, err)
	}
	x.cache.apply(a, planner.Result{})
	return nil
}

// publishStatus writes (or removes) an attachment's status.
func (x *executor) publishStatus(ctx context.Context, r *run, i int, a planner.Action) error {
	var res *linux.PodResult
	for _, d := range a.DependsOn {
		if dep := r.dep(d); dep != nil && dep.podRes.HostVeth != "" {
			res = &dep.podRes
		}
	}
	if a.Status == nil {
		key, ok := x.cache.publishedKey(a.Target)
		if !ok {
			return nil // nothing published under that name: already gone
		}
		if err := x.statuses.Remove(key.ContainerID, key.IfName); err != nil {
			return fmt.Errorf("remove status %s: %w", a.Target, err)
		}
		x.cache.apply(a, planner.Result{})
		return nil
	}
	var created *time.Time
	if e, ok := r.entries[a.Status.Key]; ok && !e.Created.IsZero() {
		created = &e.Created
	}
	return x.publish(*a.Status, res, created)
}

func bandwidth(b *desired.Bandwidth) *linux.Bandwidth {
	if b == nil {
		return nil
	}
	return &linux.Bandwidth{IngressRate: b.IngressRate, IngressBurst: b.IngressBurst, EgressRate: b.EgressRate, EgressBurst: b.EgressBurst}
}

// publish writes one attachment status and records it in the cache.
// created, when known, is the entry's creation time: a first Ready status
// observes the ADD-to-Ready latency.
func (x *executor) publish(ps planner.PodStatus, res *linux.PodResult, created *time.Time) error {
	a := status.Attachment{
		APIVersion: status.Version, ContainerID: ps.Key.ContainerID, IfName: ps.Key.IfName, Revision: ps.Revision,
		Phase: status.Phase(ps.Phase), Reason: ps.Reason, ReasonCode: string(ps.ReasonCode),
		ENIID: ps.ENIID, ENIMAC: ps.ENIMAC, Exclusive: ps.Exclusive, Updated: x.now(),
	}
	if ps.Phase == planner.PhaseReady {
		a.Interface = status.Interface{Name: ps.IfName}
		if res != nil {
			a.Interface.MAC = res.PodMAC
			for _, in := range res.Interfaces {
				if in.Name == ps.IfName {
					a.Interface.Sandbox = in.Sandbox
				}
			}
		}
		// The plan recorded every address, prefix length, gateway and
		// route (planner.PodStatus): nothing is decided here.
		if ps.IPv4.IsValid() {
			a.IPs = append(a.IPs, status.IPConfig{Address: netip.PrefixFrom(ps.IPv4, ps.PrefixBits), Gateway: ps.Gateway})
		}
		if ps.IPv6.IsValid() {
			a.IPs = append(a.IPs, status.IPConfig{Address: netip.PrefixFrom(ps.IPv6, ps.PrefixBitsV6), Gateway: ps.GatewayV6})
		}
		for _, r := range ps.Routes {
			a.Routes = append(a.Routes, status.Route{Dst: r.Dst, GW: r.GW})
		}
	}
	if err := x.statuses.Write(a); err != nil {
		return fmt.Errorf("write status %s: %w", ps.Key, err)
	}
	wasReady := x.cache.publishedReady(ps.Key, ps.Revision)
	x.cache.apply(planner.Action{Kind: planner.PublishStatus, Target: ps.Key.String(), Status: &ps}, planner.Result{})
	if ps.Phase == planner.PhaseReady && created != nil && !wasReady {
		x.metrics.addToReady.Observe(x.now().Sub(*created).Seconds())
	}
	if x.published != nil {
		x.published(ps)
	}
	return nil
}
