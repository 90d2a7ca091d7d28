package reconcile

import (
	"maps"
	"net/netip"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
)

// Kube is the agent's optional link to the Kubernetes API server (package
// kube, adapted in cmd/enid). Nil means none: the agent works from its
// files alone, as it always can. Every method must return at once: the
// agent never waits on the API server.
type Kube interface {
	// NodeLabels returns this node's labels as last seen on its Node
	// object; ok is false until the Node has been seen.
	NodeLabels() (labels map[string]string, ok bool)
	// PodStatus is told of every attachment status the agent writes.
	PodStatus(PodReport)
	// NodeStatus is told the agent's summary after every pass.
	NodeStatus(NodeReport)
	// PodFacts returns what the API server knows of a pod on this node
	// that the runtime may not pass; ok is false when it does not know
	// the pod (yet). uid, when given, must match.
	PodFacts(namespace, name, uid string) (facts PodFacts, ok bool)
	// State says how the link is doing, for the heartbeat and `enid status`.
	State() string
	// NodeUnschedulable returns since when this node's Node has been
	// unschedulable (cordoned, drained), zero while it is schedulable or
	// the Node was not seen.
	NodeUnschedulable() time.Time
}

// PodFacts are a pod's annotations and whether a StatefulSet owns it.
type PodFacts struct {
	Annotations map[string]string
	StatefulSet bool
}

// PodReport is one published attachment status and the pod it answers.
type PodReport struct {
	Namespace, Name, UID string
	Key                  observed.AttachmentKey
	// Phase, ReasonCode and Reason are the status's (planner values).
	Phase      string
	ReasonCode string
	Reason     string
	IPv4, IPv6 netip.Addr
}

// NodeHealth classifies the agent's state for the node's summary.
type NodeHealth string

// NodeHealth values.
const (
	HealthReady         NodeHealth = "ready"
	HealthConfigInvalid NodeHealth = "config-invalid"
	HealthCloudDegraded NodeHealth = "cloud-degraded"
	HealthNotReady      NodeHealth = "not-ready"
)

// NodeReport is the agent's summary for its Node object.
type NodeReport struct {
	Ready  bool
	Health NodeHealth
	// Reason is the heartbeat's reason (empty when all is well).
	Reason string
	// CapacityKnown is set once a plan was made with the instance's limits.
	CapacityKnown bool
	// Capacity is the pool's capacity (planner.PoolSummary.Capacity): pod
	// addresses in shared mode, ENIs in exclusive mode.
	Capacity  int
	Exclusive bool
}

// nodeLabels returns the labels overrides match on (see the function).
func (a *Agent) nodeLabels() map[string]string { return nodeLabels(a.cfg.Kube, a.cfg.NodeLabels) }

// syncLabels gives the config loader the node's current labels and reports
// whether they changed; a change re-applies the overrides, as a config
// change does.
func (a *Agent) syncLabels() bool {
	if a.cfg.Kube == nil || a.loader == nil {
		return false
	}
	l := a.nodeLabels()
	if maps.Equal(l, a.labels) {
		return false
	}
	a.labels = l
	a.loader.SetFacts(desired.NodeFacts{NodeName: a.cfg.NodeName, Zone: a.instance.ZoneID,
		InstanceType: a.instance.InstanceType, Labels: l})
	return true
}

// reportPod tells the link of a status the executor wrote. It runs on
// action goroutines: the pod's identity comes from the entries of the pass
// that planned it.
func (a *Agent) reportPod(ps planner.PodStatus) {
	r := PodReport{Key: ps.Key, Phase: ps.Phase, ReasonCode: string(ps.ReasonCode), Reason: ps.Reason, IPv4: ps.IPv4, IPv6: ps.IPv6}
	if m := a.podIndex.Load(); m != nil {
		if e, ok := (*m)[ps.Key]; ok {
			r.Namespace, r.Name, r.UID = e.PodNamespace, e.PodName, e.PodUID
		}
	}
	a.cfg.Kube.PodStatus(r)
}

// reportNode tells the link the agent's state (on every readiness update).
func (a *Agent) reportNode(h NodeHealth) {
	if a.cfg.Kube == nil {
		return
	}
	r := NodeReport{Ready: a.ready, Health: h, Reason: a.reason}
	if p := a.lastPlan; p.InstanceID != "" && a.instance.ID != "" {
		r.CapacityKnown, r.Capacity = true, p.Pool.Capacity
		if cfg, ok := a.loader.Current(); ok {
			r.Exclusive = cfg.Mode == desired.ModeExclusiveENI
		}
	}
	a.cfg.Kube.NodeStatus(r)
}

// addPodFacts completes entries from the API server: an entry without
// annotations (a runtime that does not pass them) gets the pod's, and a
// pod a StatefulSet owns asks for a sticky address unless the config says
// not to or the pod itself says "false". Entries are copied, never
// changed in place (the store may share them between passes).
func (pl *Planning) addPodFacts(d *desired.State) {
	if pl.Kube == nil {
		return
	}
	sticky := d.Config.StickyForStatefulSets()
	for i, e := range d.Entries {
		f, ok := pl.Kube.PodFacts(e.PodNamespace, e.PodName, e.PodUID)
		if !ok {
			continue
		}
		ann := e.Annotations
		if len(ann) == 0 && len(f.Annotations) > 0 {
			ann = maps.Clone(f.Annotations)
		}
		if f.StatefulSet && sticky && ann[desired.AnnotationStickyIP] == "" && ann[desired.AnnotationTerwayIPReservation] == "" {
			ann = maps.Clone(ann)
			if ann == nil {
				ann = map[string]string{}
			}
			ann[desired.AnnotationStickyIP] = "true"
		}
		d.Entries[i].Annotations = ann
	}
}

// unschedulable is since when the node has been unschedulable, from the
// link (zero without one).
func (pl *Planning) unschedulable() time.Time {
	if pl.Kube == nil {
		return time.Time{}
	}
	return pl.Kube.NodeUnschedulable()
}
