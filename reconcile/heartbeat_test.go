package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/internal/clock"
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

// poolGauge is enid_pool_ips for one state.
func poolGauge(t *testing.T, m *Metrics, state string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "enid_pool_ips" {
			continue
		}
		for _, mm := range f.GetMetric() {
			for _, l := range mm.GetLabel() {
				if l.GetName() == "state" && l.GetValue() == state {
					return mm.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// TestHeartbeatAfterTheLastWrite: a pass that changes what agent.json
// says (the pods' phases, the pool's counts: here a released address's
// cooldown ending) writes it at once, and the periodic write comes a
// Heartbeat period after the last write of any kind: not sooner (a write
// the loop just made is not repeated) and not much later.
func TestHeartbeatAfterTheLastWrite(t *testing.T) {
	const period = time.Second
	const early = 20 * time.Millisecond // timer and clock granularity
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 2\n  maxIdle: 8\n  cooldown: 2500ms\n")
	w.heartbeat = period
	stop := w.start(NewNoDatapathMust(t))
	defer stop()
	// The cooldown ends half a period off the DEL's write and the periodic
	// writes after it, so a periodic write on a fixed tick would come soon
	// after it. Every write of agent.json, as a reader polling it sees
	// them:
	var writes []status.Agent
	done, polled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			h, err := status.ReadAgent(w.paths.AgentFile)
			if err == nil && (len(writes) == 0 || !h.Heartbeat.Equal(writes[len(writes)-1].Heartbeat)) {
				writes = append(writes, h)
			}
		}
	}()
	gauge := func(state string) float64 { return poolGauge(t, w.agent.metrics, state) }
	k := w.addPod(0)
	w.waitReady(k)
	w.delPod(k)
	w.waitFor("the released address cooling down", 5*time.Second, func() bool { return gauge("cooldown") == 1 })
	w.waitFor("the cooldown over", 5*time.Second, func() bool { return gauge("cooldown") == 0 })
	ended := time.Now()
	w.waitFor("agent.json saying the cooldown is over", period/2, func() bool {
		h, err := status.ReadAgent(w.paths.AgentFile)
		return err == nil && h.Pool.Cooldown == 0 && h.Heartbeat.After(ended.Add(-period))
	})
	time.Sleep(2*period + period/2) // periodic writes only, from here
	close(done)
	<-polled
	if len(writes) < 5 {
		t.Fatalf("%d writes of agent.json seen over the test, want several", len(writes))
	}
	for i := 1; i < len(writes); i++ {
		prev, cur := writes[i-1], writes[i]
		gap := cur.Heartbeat.Sub(prev.Heartbeat)
		if gap > 2*period {
			t.Errorf("write %d: %v after the previous one, want at most a period (%v)", i, gap, period)
		}
		// Saying the same: every field but the time stamp. A write that
		// changes anything else (the sets, the hints, the degraded state
		// at startup) comes when the pass sees the change, however soon.
		same := func(h status.Agent) status.Agent { h.Heartbeat = time.Time{}; return h }
		if gap < period-early && cmp.Diff(same(prev), same(cur)) == "" {
			t.Errorf("write %d: %v after the previous one and saying the same (pool %+v): want the periodic write a period (%v) after the last write",
				i, gap, cur.Pool, period)
		}
	}
}

// TestHeartbeatLoopWritesOnlyNews: the loop asks for a write whenever its
// state changes, and two changes can leave what agent.json says as it was
// (the pool's target, which the file does not show, then back); a write
// then would only restamp the file early, which is the periodic write's
// job (CI58 caught two identical writes 2.6 ms apart at start). The
// periodic write restamps it all the same.
func TestHeartbeatLoopWritesOnlyNews(t *testing.T) {
	const period = time.Second
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 1\n  maxIdle: 4\n")
	clk := clock.NewVirtual(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC))
	a, err := New(Config{Paths: w.paths, InstanceID: w.inst.ID, NodeName: "node-1", Cloud: w.cl,
		Datapath: NewNoDatapathMust(t), Heartbeat: period, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	stamp := func() time.Time {
		t.Helper()
		h, err := status.ReadAgent(w.paths.AgentFile)
		if err != nil {
			t.Fatal(err)
		}
		return h.Heartbeat
	}
	a.lastPlan.Pool.Capacity = 42
	a.writeHeartbeat()
	first := clk.Now()
	if got := stamp(); !got.Equal(first) {
		t.Fatalf("first write stamped %v, want %v", got, first)
	}
	clk.Advance(3 * time.Millisecond)
	a.lastPlan.Pool.Target = 2 // not in agent.json
	a.writeHeartbeat()
	if got := stamp(); !got.Equal(first) {
		t.Errorf("a write that says nothing new restamped agent.json at %v (first write %v)", got, first)
	}
	if due := a.beatDue(); due != period-3*time.Millisecond {
		t.Errorf("periodic write due in %v, want a period after the first write (%v)", due, period-3*time.Millisecond)
	}
	clk.Advance(time.Millisecond)
	a.setReady(true, "")
	if got := stamp(); !got.Equal(clk.Now()) {
		t.Errorf("the agent turning ready not written: file stamped %v, want %v", got, clk.Now())
	}
	clk.Advance(period)
	if due := a.beatDue(); due != period {
		t.Errorf("after the periodic write the next is due in %v, want %v", due, period)
	}
	if got := stamp(); !got.Equal(clk.Now()) {
		t.Errorf("the periodic write did not restamp agent.json saying the same: stamped %v, want %v", got, clk.Now())
	}
}
