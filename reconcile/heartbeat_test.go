package reconcile

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/reconcile/status"
)

// failingSetupDatapath fails every pod setup with a retryable error.
type failingSetupDatapath struct{ *NoDatapath }

func (failingSetupDatapath) EnsurePod(context.Context, linux.PodSpec) (linux.PodResult, linux.Changes, error) {
	return linux.PodResult{}, nil, errors.New("netlink: device busy")
}

// TestHeartbeatCountsPublishedPhases: agent.json and enid_pods count the
// statuses as published, not as the last plan meant them (issue 28 item
// 5): a pod whose setup fails is Pending in its status file, and must be
// Pending there too, not Ready.
func TestHeartbeatCountsPublishedPhases(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 1\n  maxIdle: 4\n")
	stop := w.start(failingSetupDatapath{NewNoDatapathMust(t)})
	defer stop()
	k := w.addPod(0)
	w.waitFor("the pod's status Pending with setup-failed", 10*time.Second, func() bool {
		st := w.statuses()[k.String()]
		return st.Phase == status.Pending && st.ReasonCode == "setup-failed"
	})
	var h status.Agent
	w.waitFor("agent.json counting 1 Pending", 10*time.Second, func() bool {
		var err error
		h, err = status.ReadAgent(w.paths.AgentFile)
		return err == nil && h.Pods[status.Pending] == 1
	})
	if h.Pods[status.Ready] != 0 {
		t.Errorf("agent.json counts %v: the pod whose setup failed counted Ready", h.Pods)
	}
	m := w.agent.Metrics()
	if got := labelled(t, m, "enid_pods", "phase", "Ready"); got != 0 {
		t.Errorf("enid_pods{phase=Ready} = %v: want 0, the status file says Pending", got)
	}
	if got := labelled(t, m, "enid_pods", "phase", "Pending"); got != 1 {
		t.Errorf("enid_pods{phase=Pending} = %v, want 1", got)
	}
}
