package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// This file removes a startup taint from the node once the agent can serve
// (Options.StartupTaint): the node's kubelet registers with it
// (--register-with-taints=enid.dev/agent-not-ready=:NoSchedule), so no pod
// that needs an address is scheduled there before the agent can give one.
// The link only ever removes the taint, never adds it: an agent that
// restarts, or turns not ready later, leaves the node schedulable (its
// running pods keep their networking; the EnidAgentReady condition says
// how it is), so the node never flaps. Upstream's Node Readiness
// Controller (KEP-5233) can do the same from the condition alone, without
// this permission (docs/deploy.md).

// DefaultStartupTaint is the taint enid's example manifests name.
const DefaultStartupTaint = "enid.dev/agent-not-ready:NoSchedule"

// ParseTaint reads "key[:Effect]" (Effect NoSchedule when left out, or
// NoExecute or PreferNoSchedule); the value of the taint is not compared.
func ParseTaint(s string) (corev1.Taint, error) {
	key, effect, ok := strings.Cut(s, ":")
	t := corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule}
	if ok {
		t.Effect = corev1.TaintEffect(effect)
	}
	switch t.Effect {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute, corev1.TaintEffectPreferNoSchedule:
	default:
		return t, fmt.Errorf("taint %q: effect %q, want NoSchedule, PreferNoSchedule or NoExecute", s, effect)
	}
	if key == "" || strings.ContainsAny(key, " =") {
		return t, fmt.Errorf("taint %q: want key[:Effect]", s)
	}
	return t, nil
}

// startupTaintAt returns the index of the startup taint among taints
// (matched by key and effect), or -1.
func startupTaintAt(taints []corev1.Taint, want *corev1.Taint) int {
	if want == nil {
		return -1
	}
	for i, t := range taints {
		if t.Key == want.Key && t.Effect == want.Effect {
			return i
		}
	}
	return -1
}

// untaintDue reports whether the startup taint should go now: it is
// configured, the node shows it, and the agent's latest report is Ready
// and already shown in the condition (so the condition turns true first).
// Called with l.mu held.
func (l *Link) untaintDueLocked() bool {
	return l.startupTaint != nil && startupTaintAt(l.taints, l.startupTaint) >= 0 &&
		l.haveReport && l.report.Ready && l.shown.matches(l.report)
}

func (l *Link) untaintDue() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.untaintDueLocked()
}

// untaint removes the startup taint with a JSON patch that tests the
// taint at its index first: a concurrent change of the node's taints
// (another controller's) fails the test, and the next round reads them
// again, so no other taint is ever removed or lost.
func (l *Link) untaint(ctx context.Context) error {
	l.mu.Lock()
	i := startupTaintAt(l.taints, l.startupTaint)
	var t corev1.Taint
	if i >= 0 {
		t = l.taints[i]
	}
	l.mu.Unlock()
	if i < 0 {
		return nil
	}
	path := "/spec/taints/" + strconv.Itoa(i)
	patch, err := json.Marshal([]map[string]any{{"op": "test", "path": path, "value": t}, {"op": "remove", "path": path}})
	if err != nil {
		return fmt.Errorf("encode untaint patch: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	n, err := l.cs.CoreV1().Nodes().Patch(cctx, l.o.NodeName, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: eventComponent})
	if apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
		// The taints changed under us: read them again and retry.
		n, err = l.cs.CoreV1().Nodes().Get(cctx, l.o.NodeName, metav1.GetOptions{})
		if err == nil {
			l.mu.Lock()
			l.taints = n.Spec.Taints
			l.mu.Unlock()
			err = fmt.Errorf("node %s taints changed while removing %s: retrying", l.o.NodeName, t.Key)
		}
		return err
	}
	if err != nil {
		return fmt.Errorf("remove taint %s:%s from node %s: %w", t.Key, t.Effect, l.o.NodeName, err)
	}
	l.mu.Lock()
	l.taints = n.Spec.Taints
	l.mu.Unlock()
	l.log.Info("startup taint removed: the agent serves", "taint", t.Key+":"+string(t.Effect))
	return nil
}

// NodeUnschedulable returns the Node's spec.unschedulable (cordoned, or
// drained) as last seen; ok is false until the Node has been seen.
func (l *Link) NodeUnschedulable() (unschedulable, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unschedulable, l.unschedulableOK
}

// UnschedulableSince returns when the Node was first seen unschedulable
// by this link (the API keeps no such time: after an agent restart, the
// restart's), zero while it is schedulable or not seen yet.
func (l *Link) UnschedulableSince() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unschedulableSince
}
