package kube

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestCamel(t *testing.T) {
	for code, want := range map[string]string{
		"vswitch-exhausted":      "VSwitchExhausted",
		"ip-limit":               "IPLimit",
		"instance-eni-limit":     "InstanceENILimit",
		"config-invalid":         "ConfigInvalid",
		"observation-incomplete": "ObservationIncomplete",
		"setup-failed":           "SetupFailed",
	} {
		if got := camel(code); got != want {
			t.Errorf("camel(%q) = %q, want %q", code, got, want)
		}
	}
}

// TestDecide walks one attachment through a life of statuses and checks
// the events each transition raises.
func TestDecide(t *testing.T) {
	steps := []struct {
		phase, code string
		want        string // "" for no event, else "Type Reason"
	}{
		{"Pending", "waiting-for-ips", ""},
		{"Pending", "vswitch-exhausted", "Warning VSwitchExhausted"},
		{"Pending", "vswitch-exhausted", ""}, // published again: no new event
		{"Pending", "waiting-for-ips", ""},   // an ordinary wait
		{"Pending", "ip-limit", "Warning IPLimit"},
		{"Ready", "ready", "Normal NetworkReady"},
		{"Ready", "ready", ""}, // ready again: nothing
		{"Pending", "setup-failed", "Warning SetupFailed"},
		{"Failed", "entry-invalid", "Warning EntryInvalid"},
		{"Ready", "ready", "Normal NetworkReady"},
	}
	var mem podMemory
	had := false
	for i, s := range steps {
		ev, next, keep := decide(mem, had, PodStatus{Phase: s.phase, ReasonCode: s.code, Reason: "because", Addresses: []string{"10.0.0.5"}})
		got := ""
		if ev != nil {
			got = ev.Type + " " + ev.Reason
		}
		if got != s.want {
			t.Errorf("step %d (%s %s): event %q, want %q", i, s.phase, s.code, got, s.want)
		}
		mem, had = next, keep
	}
}

func TestStatusPatch(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		r    NodeStatus
		want string
	}{
		"shared": {NodeStatus{Ready: true, Health: HealthReady, CapacityKnown: true, PodIPs: 45},
			`{"status":{"allocatable":{"enid.dev/enis":null,"enid.dev/pod-ips":"45"},"capacity":{"enid.dev/enis":null,"enid.dev/pod-ips":"45"},"conditions":[{"type":"EnidAgentReady","status":"True","lastHeartbeatTime":"2026-11-30T12:00:00Z","lastTransitionTime":"2026-11-30T12:00:00Z","reason":"AgentReady","message":"enid serves pod attachments"}]}}`},
		"exclusive": {NodeStatus{Ready: true, Health: HealthReady, CapacityKnown: true, PodIPs: 3, Exclusive: true, ENIs: 3},
			`{"status":{"allocatable":{"enid.dev/enis":"3","enid.dev/pod-ips":"3"},"capacity":{"enid.dev/enis":"3","enid.dev/pod-ips":"3"},"conditions":[{"type":"EnidAgentReady","status":"True","lastHeartbeatTime":"2026-11-30T12:00:00Z","lastTransitionTime":"2026-11-30T12:00:00Z","reason":"AgentReady","message":"enid serves pod attachments"}]}}`},
		"config invalid, capacity unknown": {NodeStatus{Ready: false, Health: HealthConfigInvalid, Message: "no valid config"},
			`{"status":{"conditions":[{"type":"EnidAgentReady","status":"False","lastHeartbeatTime":"2026-11-30T12:00:00Z","lastTransitionTime":"2026-11-30T12:00:00Z","reason":"ConfigInvalid","message":"no valid config"}]}}`},
	} {
		b, err := statusPatch(tc.r, shownStatus{}, now)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, string(b)); diff != "" {
			t.Errorf("%s: patch (-want +got):\n%s", name, diff)
		}
	}
}

// TestEventRate: 200 pods waiting at once cost at most the burst plus the
// rate in writes, not 200 writes at once, and none of the reports blocks.
func TestEventRate(t *testing.T) {
	cs := fake.NewClientset()
	l := New(cs, Options{NodeName: "n1", EventQPS: 5, EventBurst: 10})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()

	start := time.Now()
	for i := range 200 {
		l.PodStatus(PodStatus{Namespace: "default", Name: fmt.Sprintf("p%d", i), UID: fmt.Sprintf("u%d", i),
			Attachment: fmt.Sprintf("c%d_eth0", i), Phase: "Pending", ReasonCode: "vswitch-exhausted", Reason: "vSwitch vsw-1 has no free address"})
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("200 reports took %s: reporting must not wait on the API", d)
	}
	creates := func() int {
		n := 0
		for _, a := range cs.Actions() {
			if a.GetVerb() == "create" && a.GetResource().Resource == "events" {
				n++
			}
		}
		return n
	}
	time.Sleep(1500 * time.Millisecond)
	elapsed := time.Since(start).Seconds()
	n := creates()
	if max := 10 + int(5*elapsed) + 1; n > max {
		t.Errorf("%d event writes in %.1fs, want at most %d (burst 10, 5/s)", n, elapsed, max)
	}
	if n < 10 {
		t.Errorf("%d event writes in %.1fs, want at least the burst (10)", n, elapsed)
	}
	// What was written is a Warning on the pod, as kubectl describe shows it.
	for _, a := range cs.Actions() {
		if ca, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == "events" {
			e := ca.GetObject().(*corev1.Event)
			if e.Type != corev1.EventTypeWarning || e.Reason != "VSwitchExhausted" || e.InvolvedObject.Kind != "Pod" ||
				e.InvolvedObject.UID == "" || e.Source.Component != "enid" || e.Source.Host != "n1" {
				t.Errorf("event %+v, want a Warning VSwitchExhausted on a pod from enid on n1", e)
			}
			break
		}
	}
}
