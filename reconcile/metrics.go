package reconcile

import (
	"sync"
	"time"

	"github.com/enidnet/enid/cloud"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the agent's Prometheus metrics, registered on a registry the
// caller owns (no global registry).
type Metrics struct {
	// Registry holds every enid metric plus the Go and process collectors.
	Registry *prometheus.Registry

	poolIPs     *prometheus.GaugeVec
	enis        prometheus.Gauge
	podsByPhase *prometheus.GaugeVec
	planSeconds prometheus.Histogram
	// passSeconds times whole passes (desired state, observation, plan,
	// dispatch; not the actions they start); desiredSeconds the reads of
	// config and entries a change to their files brings.
	passSeconds    prometheus.Histogram
	desiredSeconds prometheus.Histogram
	execSeconds    *prometheus.HistogramVec
	actions        *prometheus.CounterVec
	cloudCalls     *prometheus.CounterVec
	cloudLatency   *prometheus.HistogramVec
	addToReady     prometheus.Histogram
	passes         prometheus.Counter
	configErrors   prometheus.Gauge
	degraded       prometheus.Gauge
	unknownVSw     *prometheus.GaugeVec

	// runtimeRecords counts the runtime's libcni cache records of enid's
	// network last read (desired.Hints.RuntimeAttachments).
	runtimeRecords prometheus.Gauge
	// hintProblems counts, by source, the hint files last read that
	// could not be used; hintsNotFound is 1 while no kubelet file exists
	// although pods have entries.
	hintProblems  *prometheus.GaugeVec
	hintsNotFound prometheus.Gauge
	// nodeReads counts reads of the node alone after a netlink change.
	nodeReads prometheus.Counter

	// health counts cloud call attempts the API did not serve, in a row.
	health cloudHealth
}

// cloudHealth is what the cloud's answers say about its reachability.
type cloudHealth struct {
	mu sync.Mutex // guards the fields below
	// failing counts unavailable outcomes since the last served call;
	// since is when the first of them was reported, last its outcome.
	failing int
	since   time.Time
	last    string
}

// unreachableAfter is how many attempts in a row the API must fail to
// serve before the agent calls the cloud unreachable: a throttled call is
// retried, and a retry that succeeds resets the count.
const unreachableAfter = 3

// cloudUnreachable reports since when the API has failed to serve every
// attempt (at least unreachableAfter of them), and the last outcome.
func (m *Metrics) cloudUnreachable() (since time.Time, last string, ok bool) {
	m.health.mu.Lock()
	defer m.health.mu.Unlock()
	return m.health.since, m.health.last, m.health.failing >= unreachableAfter
}

// NewMetrics creates the metrics on a fresh registry.
func NewMetrics() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.poolIPs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "enid_pool_ips", Help: "Pod IPs held by the node, by state (total, used, idle, cooldown, sticky, target).",
	}, []string{"state"})
	m.enis = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "enid_enis", Help: "Secondary ENIs owned by enid and attached to this node.",
	})
	m.podsByPhase = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "enid_pods", Help: "Pod attachments by published phase.",
	}, []string{"phase"})
	m.planSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "enid_plan_duration_seconds", Help: "Time to compute one plan.",
		Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10),
	})
	m.passSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "enid_pass_duration_seconds", Help: "Time of one reconcile pass: desired state, observation, plan and dispatch (not the actions it starts).",
		Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10),
	})
	m.desiredSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "enid_desired_read_duration_seconds", Help: "Time to read the config and the pod entries after their files changed.",
		Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10),
	})
	m.execSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "enid_action_duration_seconds", Help: "Time to execute one plan action, by kind.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	}, []string{"kind"})
	m.actions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "enid_actions_total", Help: "Plan actions executed, by kind and outcome (ok, retry, error).",
	}, []string{"kind", "outcome"})
	m.cloudCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "enid_cloud_calls_total", Help: "ECS/VPC API call attempts, by action and outcome (ok or the error code).",
	}, []string{"action", "outcome"})
	m.cloudLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "enid_cloud_call_duration_seconds", Help: "ECS/VPC API call latency, by action.",
		Buckets: prometheus.ExponentialBuckets(0.001, 3, 10),
	}, []string{"action"})
	m.addToReady = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "enid_add_to_ready_seconds", Help: "Time from a pod entry's creation (CNI ADD) to its Ready status.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
	})
	m.passes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "enid_reconcile_passes_total", Help: "Reconcile passes run.",
	})
	m.configErrors = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "enid_config_invalid", Help: "1 when the config on disk is invalid and the last good one is in force.",
	})
	m.unknownVSw = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "enid_vswitch_unknown", Help: "1 for each vSwitch the config names that the cloud says does not exist (skipped).",
	}, []string{"vswitch"})
	m.runtimeRecords = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "enid_runtime_attachments", Help: "Attachments of enid's network the container runtime's libcni cache names, as last read (other networks' records, such as containerd's cni-loopback, are not counted).",
	})
	m.hintProblems = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "enid_hint_problems", Help: "Hint files last read that exist but could not be used (unknown format, too large, not a regular file), by source (allocated_pods_state, device_checkpoint, cni_results): their pods are not counted.",
	}, []string{"source"})
	m.hintsNotFound = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "enid_hints_not_found", Help: "1 while no kubelet hint file exists where the agent looks (--kubelet-root-dir) although pods have entries: admitted pods are not counted as demand.",
	})
	m.nodeReads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "enid_node_reads_total", Help: "Reads of the node's kernel state alone, after a netlink change in the node namespace.",
	})
	m.degraded = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "enid_degraded", Help: "1 while the cloud cannot be observed and new pods are served from the idle addresses the node holds.",
	})
	m.Registry.MustRegister(m.runtimeRecords, m.hintProblems, m.hintsNotFound, m.nodeReads, m.poolIPs, m.enis, m.podsByPhase, m.planSeconds, m.passSeconds, m.desiredSeconds, m.execSeconds,
		m.actions, m.cloudCalls, m.cloudLatency, m.addToReady, m.passes, m.configErrors, m.degraded, m.unknownVSw,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// ObserveCall records one cloud API attempt; it makes Metrics a
// cloud.Observer.
func (m *Metrics) ObserveCall(action, outcome string, start time.Time, d time.Duration) {
	if m == nil {
		return
	}
	m.cloudCalls.WithLabelValues(action, outcome).Inc()
	m.health.mu.Lock()
	switch {
	case cloud.Unavailable(outcome):
		if m.health.failing == 0 {
			m.health.since = start // the client's clock: the agent's
		}
		m.health.failing++
		m.health.last = action + ": " + outcome
	case outcome != "Canceled":
		m.health.failing = 0
	}
	m.health.mu.Unlock()
	m.cloudLatency.WithLabelValues(action).Observe(d.Seconds())
}
