package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Extended resources and the node condition enid publishes.
const (
	// ResourcePodIPs is how many pod addresses the node can hold under its
	// instance type's limits and the config (maxENIs): the pool's capacity.
	ResourcePodIPs corev1.ResourceName = "enid.dev/pod-ips"
	// ResourceENIs is how many ENIs pods may hold, in exclusive-ENI mode
	// (one per pod); not published in shared mode.
	ResourceENIs corev1.ResourceName = "enid.dev/enis"
	// ConditionAgentReady summarises the agent's health on the node. It is
	// informational: unlike NetworkUnavailable, no controller taints on it.
	ConditionAgentReady corev1.NodeConditionType = "EnidAgentReady"
)

// Health is the agent's state as the node condition's reason says it.
type Health string

// Health values.
const (
	HealthReady         Health = "AgentReady"
	HealthConfigInvalid Health = "ConfigInvalid"
	HealthCloudDegraded Health = "CloudDegraded"
	HealthNotReady      Health = "AgentNotReady"
)

// NodeStatus is the agent's summary for its Node object.
type NodeStatus struct {
	// Ready is whether the agent serves new attachments.
	Ready  bool
	Health Health
	// Message explains Health (empty when all is well).
	Message string
	// Capacity is known once the agent has planned with the instance's
	// limits; until then no resource is published.
	CapacityKnown bool
	// PodIPs is the node's pod-address capacity.
	PodIPs int
	// Exclusive is exclusive-ENI mode: ENIs is then published too.
	Exclusive bool
	ENIs      int
}

// shownStatus is what the Node's status shows of enid's resources and
// condition.
type shownStatus struct {
	podIPs, enis string
	cond         corev1.NodeCondition
	haveCond     bool
}

func shownOf(n *corev1.Node) shownStatus {
	s := shownStatus{}
	if q, ok := n.Status.Capacity[ResourcePodIPs]; ok {
		s.podIPs = q.String()
	}
	if q, ok := n.Status.Capacity[ResourceENIs]; ok {
		s.enis = q.String()
	}
	for _, c := range n.Status.Conditions {
		if c.Type == ConditionAgentReady {
			s.cond, s.haveCond = c, true
		}
	}
	return s
}

// matches reports whether the node shows what r says.
func (s shownStatus) matches(r NodeStatus) bool {
	want := conditionOf(r)
	if !s.haveCond || s.cond.Status != want.Status || s.cond.Reason != want.Reason || s.cond.Message != want.Message {
		return false
	}
	if !r.CapacityKnown {
		return true
	}
	enis := ""
	if r.Exclusive {
		enis = strconv.Itoa(r.ENIs)
	}
	return s.podIPs == strconv.Itoa(r.PodIPs) && s.enis == enis
}

func conditionOf(r NodeStatus) corev1.NodeCondition {
	c := corev1.NodeCondition{Type: ConditionAgentReady, Status: corev1.ConditionFalse, Reason: string(r.Health), Message: r.Message}
	if r.Ready {
		c.Status = corev1.ConditionTrue
	}
	if c.Reason == "" {
		c.Reason = string(HealthNotReady)
		if r.Ready {
			c.Reason = string(HealthReady)
		}
	}
	if c.Message == "" && r.Ready {
		c.Message = "enid serves pod attachments"
	}
	return c
}

// inSync reports whether the node shows the latest report (or there is
// none yet).
func (l *Link) inSync() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.haveReport || l.shown.matches(l.report)
}

// syncNode writes the latest report to the Node's status when the node
// shows something else. It is called by the worker only.
func (l *Link) syncNode(ctx context.Context) error {
	l.mu.Lock()
	r, have, shown := l.report, l.haveReport, l.shown
	l.mu.Unlock()
	if !have {
		return nil
	}
	if shown.matches(r) {
		return nil
	}
	patch, err := statusPatch(r, shown, l.o.Clock.Now())
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	n, err := l.cs.CoreV1().Nodes().Patch(cctx, l.o.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: eventComponent}, "status")
	if err != nil {
		return fmt.Errorf("patch node %s status: %w", l.o.NodeName, err)
	}
	l.mu.Lock()
	l.shown, l.lastErr = shownOf(n), ""
	l.mu.Unlock()
	l.log.Info("node status published", "pod_ips", r.PodIPs, "enis", r.ENIs, "capacity_known", r.CapacityKnown, "health", r.Health)
	return nil
}

// statusPatch is the strategic merge patch that makes the node's status
// show r: the extended resources in capacity and allocatable (the node
// reserves none of them), and the condition, whose transition time moves
// only when its status does.
func statusPatch(r NodeStatus, shown shownStatus, now time.Time) ([]byte, error) {
	c := conditionOf(r)
	c.LastHeartbeatTime = metav1.NewTime(now)
	c.LastTransitionTime = metav1.NewTime(now)
	if shown.haveCond && shown.cond.Status == c.Status {
		c.LastTransitionTime = shown.cond.LastTransitionTime
	}
	status := map[string]any{"conditions": []corev1.NodeCondition{c}}
	if r.CapacityKnown {
		res := map[corev1.ResourceName]any{ResourcePodIPs: strconv.Itoa(r.PodIPs), ResourceENIs: nil}
		if r.Exclusive {
			res[ResourceENIs] = strconv.Itoa(r.ENIs)
		}
		status["capacity"], status["allocatable"] = res, res
	}
	b, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return nil, fmt.Errorf("encode node status patch: %w", err)
	}
	return b, nil
}
