package kube

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/enidnet/enid/internal/clock"
)

// Defaults of Options.
const (
	// DefaultEventQPS and DefaultEventBurst bound event writes for the
	// whole node: a burst of 200 waiting pods costs 200 writes spread over
	// tens of seconds, not 200 at once (the per-pod correlator of client-go
	// aggregates repeats of one pod's events on top of this).
	DefaultEventQPS   = 2
	DefaultEventBurst = 20
	// podQueue bounds the statuses waiting to become events; when it is
	// full, statuses are dropped (and counted) rather than block the agent.
	podQueue = 1024
	// eventComponent is the source of enid's events.
	eventComponent = "enid"
	// nodeWriteEvery and nodeWriteBurst bound node status writes: a
	// condition message that changes on every pass (an error text with a
	// request ID) costs one write per 2 s, not one per pass.
	nodeWriteEvery = 2 * time.Second
	nodeWriteBurst = 3
)

// Options configure a Link.
type Options struct {
	// NodeName is this node's Node object.
	NodeName string
	Logger   *slog.Logger
	// OnChange is called when the node's labels change (the agent wakes
	// and re-applies its overrides) or a pod's facts do (the agent wakes
	// and plans with them). It must not block.
	OnChange func()
	// EventQPS and EventBurst bound event writes (0: the defaults).
	EventQPS   float32
	EventBurst int
	// Clock is the agent's clock (clock.Real when nil): the node
	// condition's times, the cordon's start and the write retries.
	// client-go's own timers (informers, the event and write rate
	// limiters) stay on the wall clock: they are client-go's.
	Clock clock.Clock
	// Pods turns on the watch of this node's pods (PodFacts).
	Pods bool
	// StartupTaint, "key[:Effect]" (ParseTaint: the caller checks it),
	// is removed from the node once the agent reports Ready (taint.go);
	// matched by key and effect. "": off.
	StartupTaint string
}

// Link is the agent's link to the API server: node labels in; pod events,
// node capacity and a node condition out. Create it with New, start it with
// Run; its report methods may be called before Run and never block.
type Link struct {
	cs  kubernetes.Interface
	o   Options
	log *slog.Logger
	// startupTaint is Options.StartupTaint parsed (nil: off).
	startupTaint *corev1.Taint

	// kick wakes the worker to write the node status (holds at most one).
	kick chan struct{}
	// pods queues published statuses for the worker.
	pods chan PodStatus
	// dropped counts statuses dropped because pods was full.
	dropped atomic.Int64
	// seen is closed when the Node was first seen.
	seen     chan struct{}
	seenOnce sync.Once

	mu sync.Mutex
	// labels are the Node's labels as last seen; labelsOK once seen. Guarded by mu.
	labels   map[string]string
	labelsOK bool
	// report is the latest NodeStatus; haveReport once one came. Guarded by mu.
	report     NodeStatus
	haveReport bool
	// shown is the node status as the informer last saw it (what is on
	// the server). Guarded by mu.
	shown shownStatus
	// taints are the Node's taints as last seen (or as the untaint patch
	// left them). Guarded by mu.
	taints []corev1.Taint
	// unschedulable is the Node's spec.unschedulable as last seen, and
	// unschedulableOK once the Node was seen; unschedulableSince is when
	// it was first seen true (zero while false). Guarded by mu.
	unschedulable, unschedulableOK bool
	unschedulableSince             time.Time
	// podStore is the pod watch's store, nil while it is off. Guarded by mu.
	podStore cache.Store
	// lastErr is the last failure to watch or write, cleared by a
	// success. Guarded by mu.
	lastErr string
}

// New returns a Link that talks through cs.
func New(cs kubernetes.Interface, o Options) *Link {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.EventQPS <= 0 {
		o.EventQPS = DefaultEventQPS
	}
	if o.EventBurst <= 0 {
		o.EventBurst = DefaultEventBurst
	}
	o.Clock = clock.OrReal(o.Clock)
	if o.OnChange == nil {
		o.OnChange = func() {}
	}
	l := &Link{cs: cs, o: o, log: o.Logger.With("component", "kube"),
		kick: make(chan struct{}, 1), pods: make(chan PodStatus, podQueue), seen: make(chan struct{})}
	if o.StartupTaint != "" {
		t, err := ParseTaint(o.StartupTaint)
		if err != nil {
			l.log.Error("startup taint ignored", "err", err)
		} else {
			l.startupTaint = &t
		}
	}
	return l
}

// NodeLabels returns the Node's labels as last seen; ok is false until the
// Node has been seen.
func (l *Link) NodeLabels() (map[string]string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.labels), l.labelsOK
}

// Seen is closed once the Node has been seen (its labels are known).
func (l *Link) Seen() <-chan struct{} { return l.seen }

// Dropped counts the statuses dropped because the event queue was full.
func (l *Link) Dropped() int64 { return l.dropped.Load() }

// PodStatus queues a published attachment status for the event logic. It
// never blocks: when the queue is full the status is dropped.
func (l *Link) PodStatus(s PodStatus) {
	select {
	case l.pods <- s:
	default:
		l.dropped.Add(1)
	}
}

// NodeStatus records the agent's summary; the worker publishes it when it
// differs from what the node shows. It never blocks.
func (l *Link) NodeStatus(s NodeStatus) {
	l.mu.Lock()
	changed := !l.haveReport || l.report != s
	l.report, l.haveReport = s, true
	l.mu.Unlock()
	if changed {
		l.wake()
	}
}

func (l *Link) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Run watches the Node, and writes events and the node status, until ctx
// ends. The informer, the event broadcaster and the worker all end with it.
func (l *Link) Run(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(l.cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", l.o.NodeName).String()
		}))
	nodes := factory.Core().V1().Nodes().Informer()
	if err := nodes.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		l.setErr("watch node: " + err.Error())
	}); err != nil {
		l.log.Error("watch the node", "err", err)
	}
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { l.sawNode(obj) },
		UpdateFunc: func(_, obj any) { l.sawNode(obj) },
	}); err != nil {
		l.log.Error("watch the node", "err", err)
	}
	if l.o.Pods {
		pods := informers.NewSharedInformerFactoryWithOptions(l.cs, 0,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = podSelector(l.o.NodeName) }))
		l.watchPods(pods)
		pods.Start(ctx.Done())
		defer pods.Shutdown()
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	sink := &limitedSink{ctx: ctx, sink: &typedcorev1.EventSinkImpl{Interface: l.cs.CoreV1().Events("")},
		limiter: flowcontrol.NewTokenBucketRateLimiter(l.o.EventQPS, l.o.EventBurst)}
	broadcaster.StartRecordingToSink(sink)
	rec := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: eventComponent, Host: l.o.NodeName})

	l.work(ctx, rec)
}

// work is the one goroutine that writes: events in the order statuses
// came, and the node status when it changed or the server lost it.
func (l *Link) work(ctx context.Context, rec record.EventRecorder) {
	ev := newEventer(rec)
	retry := l.o.Clock.NewTimer(time.Hour)
	defer retry.Stop()
	fails := 0
	writes := flowcontrol.NewTokenBucketPassiveRateLimiter(float32(time.Second)/float32(nodeWriteEvery), nodeWriteBurst)
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-l.pods:
			ev.observe(s)
			continue
		case <-l.kick:
		case <-retry.C():
		}
		if l.inSync() && !l.untaintDue() {
			continue
		}
		if !writes.TryAccept() {
			retry.Reset(nodeWriteEvery)
			continue
		}
		err := l.syncNode(ctx)
		if err == nil && l.untaintDue() {
			err = l.untaint(ctx)
		}
		if err != nil {
			l.setErr(err.Error())
			fails++
			d := min(time.Minute, time.Second<<min(fails-1, 6))
			l.log.Warn("publish node status", "err", err, "retry_in", d)
			retry.Reset(d)
			continue
		}
		fails = 0
	}
}

// sawNode records the Node's labels and what its status shows.
func (l *Link) sawNode(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok || n.Name != l.o.NodeName {
		return
	}
	l.mu.Lock()
	labelsChanged := !l.labelsOK || !maps.Equal(l.labels, n.Labels)
	if labelsChanged {
		l.labels, l.labelsOK = maps.Clone(n.Labels), true
	}
	l.shown = shownOf(n)
	l.taints = n.Spec.Taints
	schedChanged := !l.unschedulableOK || l.unschedulable != n.Spec.Unschedulable
	l.unschedulable, l.unschedulableOK = n.Spec.Unschedulable, true
	switch {
	case !n.Spec.Unschedulable:
		l.unschedulableSince = time.Time{}
	case l.unschedulableSince.IsZero():
		l.unschedulableSince = l.o.Clock.Now()
	}
	l.lastErr = ""
	stale := l.haveReport && !l.shown.matches(l.report) || l.untaintDueLocked()
	l.mu.Unlock()
	if schedChanged {
		l.log.Info("node schedulable", "unschedulable", n.Spec.Unschedulable)
		if !labelsChanged {
			l.o.OnChange()
		}
	}
	if labelsChanged {
		l.log.Info("node labels", "labels", n.Labels)
		l.o.OnChange()
	}
	l.seenOnce.Do(func() { close(l.seen) })
	if stale {
		// Our report is not what the node shows: a new Node object, a
		// kubelet that rewrote its status, or a write we have not made yet.
		l.wake()
	}
}

// State says how the link is doing: "connected", "connecting: ..." until
// the Node is seen, "degraded: <last error>" while the API server fails.
func (l *Link) State() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.lastErr != "":
		return "degraded: " + l.lastErr
	case !l.labelsOK:
		return "connecting: node " + l.o.NodeName + " not seen yet"
	}
	return "connected"
}

func (l *Link) setErr(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastErr = s
}

// limitedSink delays event writes to a node-wide rate. It runs on the
// broadcaster's goroutine: while it waits, new events queue in the
// broadcaster (bounded; it drops beyond), never in the agent.
type limitedSink struct {
	ctx     context.Context
	sink    record.EventSink
	limiter flowcontrol.RateLimiter
}

func (s *limitedSink) Create(e *corev1.Event) (*corev1.Event, error) {
	if err := s.limiter.Wait(s.ctx); err != nil {
		return nil, err
	}
	return s.sink.Create(e)
}

func (s *limitedSink) Update(e *corev1.Event) (*corev1.Event, error) {
	if err := s.limiter.Wait(s.ctx); err != nil {
		return nil, err
	}
	return s.sink.Update(e)
}

func (s *limitedSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	if err := s.limiter.Wait(s.ctx); err != nil {
		return nil, err
	}
	return s.sink.Patch(e, data)
}
