package reconcile

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
)

// memKube is an in-memory Kube: labels set by the test, reports recorded.
type memKube struct {
	mu     sync.Mutex
	labels map[string]string // nil: the Node was not seen
	pods   []PodReport
	nodes  []NodeReport
	facts  map[string]PodFacts // by namespace/name
	// cordoned is since when the node is unschedulable (zero: it is not).
	cordoned time.Time
}

func (k *memKube) NodeLabels() (map[string]string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.labels), k.labels != nil
}

func (k *memKube) PodStatus(r PodReport) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods = append(k.pods, r)
}

func (k *memKube) NodeStatus(r NodeReport) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.nodes = append(k.nodes, r)
}

func (k *memKube) PodFacts(namespace, name, _ string) (PodFacts, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	f, ok := k.facts[namespace+"/"+name]
	return f, ok
}

func (k *memKube) State() string { return "connected" }

func (k *memKube) NodeUnschedulable() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cordoned
}

func (k *memKube) cordon(since time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cordoned = since
}

func (k *memKube) setLabels(l map[string]string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.labels = l
}

func (k *memKube) lastNode() (NodeReport, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.nodes) == 0 {
		return NodeReport{}, false
	}
	return k.nodes[len(k.nodes)-1], true
}

// TestKubeLink: the node's labels select an override and a label change
// re-applies it (capacity follows maxENIs), and every published status is
// reported with the pod it answers; --node-labels win over the Node's.
func TestKubeLink(t *testing.T) {
	w := newWorld(t, ecssim.Config{Delays: ecssim.Delays{Attach: 20 * time.Millisecond}}, "pool: {minIdle: 1, maxIdle: 4, batch: 2}\noverrides:\n  - match: {labels: {pool: small}}\n    config: {eni: {maxENIs: 1}}\n")
	k := &memKube{labels: map[string]string{"pool": "big"}}
	a, err := New(Config{Paths: w.paths, InstanceID: w.inst.ID, NodeName: "node-1", Cloud: w.cl, Datapath: NewNoDatapathMust(t),
		Heartbeat: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), Kube: k, NodeLabels: map[string]string{"zone": "z"}})
	if err != nil {
		t.Fatal(err)
	}
	defer runAgent(t, a)()
	waitNode := func(what string, ok func(NodeReport) bool) NodeReport {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if r, have := k.lastNode(); have && ok(r) {
				return r
			}
			time.Sleep(20 * time.Millisecond)
		}
		r, _ := k.lastNode()
		t.Fatalf("%s: last node report %+v", what, r)
		return r
	}
	full := waitNode("capacity known", func(r NodeReport) bool { return r.CapacityKnown && r.Ready && r.Health == HealthReady })
	k.setLabels(map[string]string{"pool": "small"})
	a.Wake() // as the link's OnChange does
	small := waitNode("override applied", func(r NodeReport) bool { return r.CapacityKnown && r.Capacity < full.Capacity })
	if small.Capacity <= 0 || full.Capacity%small.Capacity != 0 {
		t.Errorf("capacity %d with maxENIs 1, %d without: want a whole fraction", small.Capacity, full.Capacity)
	}
	if got := a.nodeLabels(); got["zone"] != "z" || got["pool"] != "small" {
		t.Errorf("labels %v: want the Node's with --node-labels on top", got)
	}

	key := w.addPod(0)
	a.Wake()
	deadline := time.Now().Add(10 * time.Second)
	for {
		k.mu.Lock()
		var got *PodReport
		for i := range k.pods {
			if k.pods[i].Key == (observed.AttachmentKey{ContainerID: key.ContainerID, IfName: key.IfName}) && k.pods[i].Phase == "Ready" {
				got = &k.pods[i]
			}
		}
		k.mu.Unlock()
		if got != nil {
			if got.Namespace != "default" || got.Name != "pod-0" || got.UID != "uid-0" || !got.IPv4.IsValid() {
				t.Errorf("pod report %+v: want default/pod-0 uid-0 with an address", *got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no Ready report for the pod")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAddPodFacts: annotations come from the pod only when the entry has
// none; a StatefulSet pod asks for a sticky address unless the config or
// the pod says otherwise; an unknown pod is left as it is.
func TestAddPodFacts(t *testing.T) {
	no := false
	k := &memKube{facts: map[string]PodFacts{
		"ns/plain": {Annotations: map[string]string{"a": "1"}},
		"ns/sts-0": {StatefulSet: true},
		"ns/sts-1": {StatefulSet: true, Annotations: map[string]string{desired.AnnotationStickyIP: "false"}},
	}}
	pl := &Planning{Kube: k}
	entry := func(name string, ann map[string]string) desired.Entry {
		return desired.Entry{PodNamespace: "ns", PodName: name, Annotations: ann}
	}
	for _, tc := range []struct {
		name    string
		cfg     desired.Config
		in, out desired.Entry
	}{
		{"annotations from the pod", desired.Config{}, entry("plain", nil), entry("plain", map[string]string{"a": "1"})},
		{"the runtime's annotations win", desired.Config{}, entry("plain", map[string]string{"b": "2"}), entry("plain", map[string]string{"b": "2"})},
		{"statefulset sticky", desired.Config{}, entry("sts-0", nil), entry("sts-0", map[string]string{desired.AnnotationStickyIP: "true"})},
		{"statefulset, switch off", desired.Config{StickyStatefulSets: &no}, entry("sts-0", nil), entry("sts-0", nil)},
		{"statefulset pod says false", desired.Config{}, entry("sts-1", nil), entry("sts-1", map[string]string{desired.AnnotationStickyIP: "false"})},
		{"unknown pod", desired.Config{}, entry("other", nil), entry("other", nil)},
	} {
		in := tc.in.Annotations
		d := desired.State{Config: tc.cfg, Entries: []desired.Entry{tc.in}}
		pl.addPodFacts(&d)
		if diff := cmp.Diff(tc.out, d.Entries[0]); diff != "" {
			t.Errorf("%s: entry (-want +got):\n%s", tc.name, diff)
		}
		if diff := cmp.Diff(tc.in.Annotations, in); diff != "" {
			t.Errorf("%s: the entry's own map was changed", tc.name)
		}
	}
}

// TestKubeNodeReportExclusive: in exclusive-ENI mode the capacity reported
// is in ENIs, and says so.
func TestKubeNodeReportExclusive(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "mode: exclusive-eni\npool: {minIdle: 0, maxIdle: 1}\n")
	k := &memKube{}
	a, err := New(Config{Paths: w.paths, InstanceID: w.inst.ID, NodeName: "node-1", Cloud: w.cl, Datapath: NewNoDatapathMust(t),
		Heartbeat: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), Kube: k})
	if err != nil {
		t.Fatal(err)
	}
	defer runAgent(t, a)()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, ok := k.lastNode()
		if ok && r.CapacityKnown {
			// The instance type's ENI limit, less the primary.
			inst, err := w.cl.Instance(context.Background(), w.inst.ID)
			if err != nil {
				t.Fatal(err)
			}
			if want := inst.Limits.ENIs - 1; !r.Exclusive || r.Capacity != want {
				t.Errorf("node report %+v: want exclusive with capacity %d ENIs", r, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no capacity reported: %+v", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKubeCordon (issue 26 item 5): a node the link says is unschedulable
// gives back its idle pool once pool.unschedulableRelease has passed (the
// agent wakes for it by itself, and releaseDelay does not apply), keeps the
// address of its pod, and grows the pool back when it is schedulable again.
func TestKubeCordon(t *testing.T) {
	w := newWorld(t, ecssim.Config{Delays: ecssim.Delays{Attach: 20 * time.Millisecond, Detach: 20 * time.Millisecond}},
		"pool: {minIdle: 3, maxIdle: 4, batch: 3, releaseDelay: 1h, unschedulableRelease: 500ms}\n")
	k := &memKube{labels: map[string]string{}}
	a, err := New(Config{Paths: w.paths, InstanceID: w.inst.ID, NodeName: "node-1", Cloud: w.cl, Datapath: NewNoDatapathMust(t),
		Heartbeat: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), Kube: k})
	if err != nil {
		t.Fatal(err)
	}
	defer runAgent(t, a)()
	held := func() (enis, addrs int) {
		for _, e := range w.sim.Dump().ENIs {
			if e.Type != "Primary" && e.Tags[observed.TagOwner] == w.inst.ID {
				enis++
				addrs += len(e.IPv4)
			}
		}
		return enis, addrs
	}
	waitHeld := func(what string, ok func(enis, addrs int) bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			e, n := held()
			if ok(e, n) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d ENIs holding %d addresses", what, e, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	w.addPod(0)
	a.Wake()
	waitHeld("the warm pool", func(_, n int) bool { return n >= 4 })
	k.cordon(time.Now())
	a.Wake() // as the link's OnChange does
	// Only the pod's address is left: the delay's end wakes the agent.
	waitHeld("the pool given back", func(e, n int) bool { return e == 1 && n == 1 })
	k.cordon(time.Time{})
	a.Wake()
	waitHeld("the pool back", func(_, n int) bool { return n >= 4 })
}
