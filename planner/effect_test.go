package planner_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
)

// TestEffectsNeverModifyTheirInput: the executor's cache hands the planner
// snapshots that share backing arrays with it, so Before and Apply must
// build new slices, never write into the ones they were given. It also
// checks what a few kinds do.
func TestEffectsNeverModifyTheirInput(t *testing.T) {
	ip := netip.MustParseAddr
	key := observed.AttachmentKey{ContainerID: "c1", IfName: "eth0"}
	st := observed.State{
		ENIs: []observed.ENI{
			{ID: "eni-1", MAC: "02:00:00:00:00:01", Status: observed.ENIInUse, VSwitchID: "vsw-1", DeviceIndex: 1,
				IPv4: []netip.Addr{ip("10.0.0.5"), ip("10.0.0.6")}, IPv4Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.32/28")}},
			{ID: "eni-2", MAC: "02:00:00:00:00:02", Status: observed.ENIInUse, VSwitchID: "vsw-1", DeviceIndex: 2},
		},
		VSwitches: []observed.VSwitch{{ID: "vsw-1", AvailableIPs: 100}},
		Node: observed.Node{
			ENIDevices: []observed.ENIDevice{{MAC: "02:00:00:00:00:01", Name: "eth1", Table: 1001, Configured: true, Up: true}},
			Pods:       []observed.PodNet{{Key: key, IPv4: ip("10.0.0.5"), ENIMAC: "02:00:00:00:00:01", Healthy: true}},
			Published:  []observed.Binding{{Key: key, Phase: planner.PhaseReady, IPv4: ip("10.0.0.5")}},
		},
	}
	before, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	pod := &planner.PodTarget{Key: observed.AttachmentKey{ContainerID: "c2", IfName: "eth0"}, IPv4: ip("10.0.0.6"), ENIMAC: "02:00:00:00:00:01"}
	for _, c := range []struct {
		a planner.Action
		r planner.Result
	}{
		{planner.Action{Kind: planner.AssignIPs, ENIID: "eni-1"}, planner.Result{IPv4: []netip.Addr{ip("10.0.0.4")}}},
		{planner.Action{Kind: planner.UnassignIPs, ENIID: "eni-1", IPv4: []netip.Addr{ip("10.0.0.6")}}, planner.Result{}},
		{planner.Action{Kind: planner.AssignIPs, ENIID: "eni-1"}, planner.Result{IPv4Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.16/28")}}},
		{planner.Action{Kind: planner.UnassignIPs, ENIID: "eni-1", IPv4Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.32/28")}}, planner.Result{}},
		{planner.Action{Kind: planner.DetachENI, ENIID: "eni-1", MAC: "02:00:00:00:00:01"}, planner.Result{}},
		{planner.Action{Kind: planner.DeleteENI, ENIID: "eni-2"}, planner.Result{}},
		{planner.Action{Kind: planner.ConfigureENI, ENIID: "eni-2", MAC: "02:00:00:00:00:02", Table: planner.Table(2)}, planner.Result{}},
		{planner.Action{Kind: planner.SetupPod, Pod: pod}, planner.Result{HostVeth: "v"}},
		{planner.Action{Kind: planner.MoveENI, Pod: pod}, planner.Result{}},
		{planner.Action{Kind: planner.TeardownPod, Pod: &planner.PodTarget{Key: key}}, planner.Result{}},
		{planner.Action{Kind: planner.PublishStatus, Target: key.String()}, planner.Result{}},
		{planner.Action{Kind: planner.UpdateENI, ENIID: "eni-1", SecurityGroups: []string{"sg-new"}}, planner.Result{}},
	} {
		got := planner.Apply(planner.Before(st, c.a), c.a, c.r)
		after, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		if string(after) != string(before) {
			t.Fatalf("%s changed its input:\n%s\nwas\n%s", c.a.Kind, after, before)
		}
		if reflect.DeepEqual(got, st) {
			t.Errorf("%s changed nothing", c.a.Kind)
		}
	}

	got := planner.Apply(st, planner.Action{Kind: planner.AssignIPs, ENIID: "eni-1"}, planner.Result{IPv4: []netip.Addr{ip("10.0.0.4")}})
	if want := []netip.Addr{ip("10.0.0.4"), ip("10.0.0.5"), ip("10.0.0.6")}; !reflect.DeepEqual(got.ENIs[0].IPv4, want) || got.VSwitches[0].AvailableIPs != 99 {
		t.Errorf("AssignIPs: addresses %v, vSwitch free %d: want %v and 99", got.ENIs[0].IPv4, got.VSwitches[0].AvailableIPs, want)
	}
	// Prefixes: kept sorted, and the vSwitch's count moves by 16 each.
	pfx := netip.MustParsePrefix
	got = planner.Apply(st, planner.Action{Kind: planner.AssignIPs, ENIID: "eni-1"}, planner.Result{IPv4Prefixes: []netip.Prefix{pfx("10.0.0.16/28")}})
	if want := []netip.Prefix{pfx("10.0.0.16/28"), pfx("10.0.0.32/28")}; !reflect.DeepEqual(got.ENIs[0].IPv4Prefixes, want) || got.VSwitches[0].AvailableIPs != 84 {
		t.Errorf("AssignIPs of a prefix: prefixes %v, vSwitch free %d: want %v and 84", got.ENIs[0].IPv4Prefixes, got.VSwitches[0].AvailableIPs, want)
	}
	un := planner.Action{Kind: planner.UnassignIPs, ENIID: "eni-1", IPv4Prefixes: []netip.Prefix{pfx("10.0.0.32/28")}}
	if got = planner.Before(st, un); len(got.ENIs[0].IPv4Prefixes) != 0 || got.ENIs[0].HasIP(ip("10.0.0.40")) {
		t.Errorf("before UnassignIPs of a prefix: prefixes %v: want none", got.ENIs[0].IPv4Prefixes)
	}
	if got = planner.Apply(planner.Before(st, un), un, planner.Result{}); got.VSwitches[0].AvailableIPs != 116 {
		t.Errorf("UnassignIPs of a prefix: vSwitch free %d, want 116", got.VSwitches[0].AvailableIPs)
	}
	got = planner.Apply(st, planner.Action{Kind: planner.CreateENI}, planner.Result{ENI: &observed.ENI{ID: "eni-3", VSwitchID: "vsw-1",
		IPv4Prefixes: []netip.Prefix{pfx("10.0.0.48/28"), pfx("10.0.0.64/28")}}})
	if got.VSwitches[0].AvailableIPs != 100-1-32 {
		t.Errorf("CreateENI with 2 prefixes: vSwitch free %d, want %d (its primary and 32)", got.VSwitches[0].AvailableIPs, 100-1-32)
	}
	got = planner.Before(st, planner.Action{Kind: planner.UnassignIPs, ENIID: "eni-1", IPv4: []netip.Addr{ip("10.0.0.6")}})
	if len(got.ENIs[0].IPv4) != 1 || got.VSwitches[0].AvailableIPs != 100 {
		t.Errorf("before UnassignIPs: addresses %v, vSwitch free %d: want the address gone, the vSwitch not credited yet", got.ENIs[0].IPv4, got.VSwitches[0].AvailableIPs)
	}
}

// TestEffectsEditInPlace: once Effects owns its lists, an action on a node
// of thousands of attachments costs no copy of them (issue 28: every
// published status copied the published list, and 2,000 entries cost
// 640 MB), while a state handed out by State never changes under its
// holder.
func TestEffectsEditInPlace(t *testing.T) {
	const n = 2000
	st := nodeOf(n)
	fx := planner.NewEffects(st)
	key := observed.AttachmentKey{ContainerID: "c01000", IfName: "eth0"}
	ready := &planner.PodStatus{Key: key, Phase: planner.PhaseReady, Revision: "r1"}
	fx.Apply(planner.Action{Kind: planner.PublishStatus, Target: key.String(), Status: ready}, planner.Result{})
	held := fx.State()
	allocs := testing.AllocsPerRun(100, func() {
		fx.Apply(planner.Action{Kind: planner.PublishStatus, Target: key.String(), Status: ready}, planner.Result{})
	})
	// The first run after State copies the lists once; the other 100 edit
	// in place.
	if allocs > 1 {
		t.Errorf("publishing one status on a node of %d costs %.1f allocations a run: want no copy per action", n, allocs)
	}
	if st.Node.Published[1000].Phase != planner.PhasePending {
		t.Errorf("the input state changed: %+v", st.Node.Published[1000])
	}
	// held was handed out before the edits above: it shows the first one
	// (Ready) and no later edit reaches it.
	fx.Apply(planner.Action{Kind: planner.TeardownPod, Pod: &planner.PodTarget{Key: key}}, planner.Result{})
	fx.Apply(planner.Action{Kind: planner.PublishStatus, Target: key.String()}, planner.Result{})
	if len(held.Node.Pods) != n || len(held.Node.Published) != n || held.Node.Published[1000].Phase != planner.PhaseReady {
		t.Errorf("a state handed out changed under its holder: %d pods, %d statuses", len(held.Node.Pods), len(held.Node.Published))
	}
	now := fx.State()
	if len(now.Node.Pods) != n-1 || len(now.Node.Published) != n-1 {
		t.Errorf("after a teardown and a status removal: %d pods, %d statuses: want %d each", len(now.Node.Pods), len(now.Node.Published), n-1)
	}
	// Inserting keeps the list sorted.
	k2 := observed.AttachmentKey{ContainerID: "c00500x", IfName: "eth0"}
	fx.Apply(planner.Action{Kind: planner.SetupPod, Pod: &planner.PodTarget{Key: k2}}, planner.Result{HostVeth: "v"})
	pods := fx.State().Node.Pods
	if !slices.IsSortedFunc(pods, func(a, b observed.PodNet) int { return a.Key.Compare(b.Key) }) || !slices.ContainsFunc(pods, func(p observed.PodNet) bool { return p.Key == k2 }) {
		t.Errorf("SetupPod of %s: list unsorted or pod missing", k2)
	}
}

// nodeOf is a node of n attachments, keys c00000 on, each with kernel
// state and a Pending status.
func nodeOf(n int) observed.State {
	var st observed.State
	for i := range n {
		k := observed.AttachmentKey{ContainerID: fmt.Sprintf("c%05d", i), IfName: "eth0"}
		st.Node.Published = append(st.Node.Published, observed.Binding{Key: k, Phase: planner.PhasePending})
		st.Node.Pods = append(st.Node.Pods, observed.PodNet{Key: k})
	}
	return st
}

// TestEffectsCopyOnlyTheListEdited: after State handed the state out, an
// edit copies the one list it changes, not all of them: a pod's setup on a
// node of thousands of attachments copies the pods and leaves the
// published statuses shared, and its status the other way round (two
// copies of a list a pod start, not ten: the agent's cache hands a state
// to every pass).
func TestEffectsCopyOnlyTheListEdited(t *testing.T) {
	const n = 2000
	st := nodeOf(n)
	st.ENIs = []observed.ENI{{ID: "eni-1"}}
	fx := planner.NewEffects(st)
	held := fx.State()
	shared := func(a, b observed.State) (pods, published, enis bool) {
		return &a.Node.Pods[0] == &b.Node.Pods[0], &a.Node.Published[0] == &b.Node.Published[0], &a.ENIs[0] == &b.ENIs[0]
	}
	key := observed.AttachmentKey{ContainerID: "c99999", IfName: "eth0"}
	setup := planner.Action{Kind: planner.SetupPod, Pod: &planner.PodTarget{Key: key}}
	fx.Before(setup)
	if pods, published, enis := shared(held, fx.Peek()); pods || !published || !enis {
		t.Errorf("a setup's claim: pods shared %v, statuses shared %v, ENIs shared %v: want only the pods copied", pods, published, enis)
	}
	held = fx.State()
	fx.Apply(planner.Action{Kind: planner.PublishStatus, Target: key.String(), Status: &planner.PodStatus{Key: key, Phase: planner.PhaseReady}}, planner.Result{})
	if pods, published, enis := shared(held, fx.Peek()); !pods || published || !enis {
		t.Errorf("a status: pods shared %v, statuses shared %v, ENIs shared %v: want only the statuses copied", pods, published, enis)
	}
	// Neither handed-out state saw the later edit.
	if len(held.Node.Published) != n || len(held.Node.Pods) != n+1 || len(fx.Peek().Node.Published) != n+1 {
		t.Errorf("held %d pods, %d statuses; now %d statuses: want %d, %d and %d", len(held.Node.Pods), len(held.Node.Published), len(fx.Peek().Node.Published), n+1, n, n+1)
	}
}

// TestEffectsFailed: a failed setup withdraws the claim Before recorded
// (the failure transition), leaves the other pods alone and never
// modifies its input; a failed cloud action changes nothing (a full
// observation follows it), unless the cloud refused it before it did
// anything (throttled): then what Before gave up comes back.
func TestEffectsFailed(t *testing.T) {
	ip := netip.MustParseAddr
	other := observed.AttachmentKey{ContainerID: "c1", IfName: "eth0"}
	st := observed.State{Node: observed.Node{Pods: []observed.PodNet{{Key: other, IPv4: ip("10.0.0.5"), Healthy: true}}}}
	for _, kind := range []planner.ActionKind{planner.SetupPod, planner.MoveENI} {
		a := planner.Action{Kind: kind, Pod: &planner.PodTarget{Key: observed.AttachmentKey{ContainerID: "c2", IfName: "eth0"}, IPv4: ip("10.0.0.6")}}
		claimed := planner.Before(st, a)
		if len(claimed.Node.Pods) != 2 {
			t.Fatalf("%s: before it runs, pods %+v: want the claim beside c1", kind, claimed.Node.Pods)
		}
		got := planner.Failed(claimed, a, false)
		if !reflect.DeepEqual(got.Node.Pods, st.Node.Pods) {
			t.Errorf("%s failed: pods %+v, want only c1 (the claim withdrawn)", kind, got.Node.Pods)
		}
		if len(claimed.Node.Pods) != 2 {
			t.Errorf("%s: Failed modified its input", kind)
		}
	}
	detach := planner.Action{Kind: planner.DetachENI, ENIID: "eni-1"}
	if got := planner.Failed(st, detach, false); !reflect.DeepEqual(got, st) {
		t.Errorf("a failed detach changed the state: %+v", got)
	}

	// Refused (throttled): what Before gave up comes back.
	withENI := observed.State{ENIs: []observed.ENI{{ID: "eni-1", Status: observed.ENIInUse,
		IPv4: []netip.Addr{ip("10.0.0.5"), ip("10.0.0.6"), ip("10.0.0.7")}}}}
	for _, a := range []planner.Action{
		{Kind: planner.UnassignIPs, ENIID: "eni-1", IPv4: []netip.Addr{ip("10.0.0.6"), ip("10.0.0.7")}},
		{Kind: planner.DetachENI, ENIID: "eni-1"},
	} {
		gave := planner.Before(withENI, a)
		if reflect.DeepEqual(gave, withENI) {
			t.Fatalf("%s: Before gave nothing up, the case proves nothing", a.Kind)
		}
		if got := planner.Failed(gave, a, true); !reflect.DeepEqual(got.ENIs, withENI.ENIs) {
			t.Errorf("%s refused: ENIs %+v, want %+v back", a.Kind, got.ENIs, withENI.ENIs)
		}
		if got := planner.Failed(gave, a, false); reflect.DeepEqual(got.ENIs, withENI.ENIs) {
			t.Errorf("%s failed with an open outcome: the state came back, but only an observation may say so", a.Kind)
		}
	}
}
