package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// executorRig is an executor on the real client against the simulator,
// with NoDatapath for the node and an injected clock.
type executorRig struct {
	sim  *ecssim.Server
	cl   *cloud.Client
	clk  *fakeClock
	dp   *NoDatapath
	x    *executor
	inst string
	vsw  string
	// mem is the planner's memory the rig's outcomes taught (learn).
	mem planner.Memory
}

func newExecutorRig(t *testing.T) *executorRig {
	t.Helper()
	return newExecutorRigWith(t, ecssim.Config{})
}

// newExecutorRigWith is newExecutorRig on a simulator configured so.
func newExecutorRigWith(t *testing.T, scfg ecssim.Config) *executorRig {
	t.Helper()
	sim, err := ecssim.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := sim.AddInstance(ecssim.InstanceSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	clk := &fakeClock{t: time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)}
	cl, err := cloud.New(cloud.Config{Endpoint: sim.Endpoint(), Region: sim.Dump().Region, Clock: clk,
		Credentials: credentials.NewStaticAKCredentialsProvider(ecssim.DefaultAccessKeyID, ecssim.DefaultAccessKeySecret)})
	if err != nil {
		t.Fatal(err)
	}
	dp, err := NewNoDatapath("")
	if err != nil {
		t.Fatal(err)
	}
	rig := &executorRig{sim: sim, cl: cl, clk: clk, dp: dp, inst: inst.ID}
	for _, v := range sim.Dump().VSwitches {
		if v.ZoneID == inst.Zone {
			rig.vsw = v.ID
		}
	}
	rig.x = newExecutor(cl, dp, status.NewStore(t.TempDir()), &cache{}, inst.ID, slog.New(slog.DiscardHandler), NewMetrics(),
		clk.Now, func() {}, 4, time.Second)
	return rig
}

// attached creates an ENI and attaches it here, outside the executor.
func (r *executorRig) attached(t *testing.T) observed.ENI {
	t.Helper()
	ctx := context.Background()
	e, err := r.cl.CreateENI(ctx, cloud.CreateENIRequest{VSwitchID: r.vsw, SecurityGroups: []string{ecssim.DefaultSecurityGroup}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cl.AttachENI(ctx, e.ID, r.inst); err != nil {
		t.Fatal(err)
	}
	if e, err = r.cl.WaitENI(ctx, e.ID, observed.ENIInUse); err != nil {
		t.Fatal(err)
	}
	return e
}

// learn drains the executor's outcomes into the rig's memory
// (planner.Memory.Learn, as the loop does) and returns the lessons.
func (r *executorRig) learn() []planner.Lesson {
	var ls []planner.Lesson
	r.mem, ls = r.mem.Learn(r.x.drainOutcomes(), r.clk.Now())
	return ls
}

// runHeld runs a hand-made plan whose actions carry the NotBefore the
// rig's memory gives them, as planner.Make sets it.
func (r *executorRig) runHeld(p planner.Plan) {
	p.Actions = slices.Clone(p.Actions)
	for i := range p.Actions {
		p.Actions[i].NotBefore = r.mem.NotBefore(p.Actions[i], r.clk.Now())
	}
	r.run(p)
}

// lessonKeys returns the keys of the lessons of that kind.
func lessonKeys(ls []planner.Lesson, kind string) []string {
	var out []string
	for _, l := range ls {
		if l.Kind == kind {
			out = append(out, l.Key)
		}
	}
	return out
}

func (r *executorRig) run(p planner.Plan) {
	r.x.dispatch(context.Background(), p, nil, false, r.x.cache.generation())
	r.x.wg.Wait()
}

// TestExecutorENIRef: the actions after a CreateENI name its ENI by
// reference; the executor substitutes the created ENI's ID and MAC, and
// ConfigureENI's table from the device index the attach gave.
func TestExecutorENIRef(t *testing.T) {
	r := newExecutorRig(t)
	r.run(planner.Plan{Actions: []planner.Action{
		{ID: 0, Kind: planner.CreateENI, Target: "new#0", VSwitchID: r.vsw, SecurityGroups: []string{ecssim.DefaultSecurityGroup}, ClientToken: "tok-1"},
		{ID: 1, Kind: planner.AttachENI, Target: "new#0", ENIRef: 1, InstanceID: r.inst, DependsOn: []int{0}},
		{ID: 2, Kind: planner.ConfigureENI, Target: "new#0", ENIRef: 1, DependsOn: []int{1}},
	}})
	st, _ := r.x.cache.snapshot()
	if len(st.ENIs) != 1 || st.ENIs[0].Status != observed.ENIInUse || st.ENIs[0].InstanceID != r.inst {
		t.Fatalf("cached ENIs %+v: want the created ENI, InUse here", st.ENIs)
	}
	e := st.ENIs[0]
	node, err := r.dp.Observe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(node.ENIDevices) != 1 || node.ENIDevices[0].MAC != e.MAC || node.ENIDevices[0].Table != planner.Table(e.DeviceIndex) {
		t.Fatalf("devices %+v: want %s configured with table %d", node.ENIDevices, e.MAC, planner.Table(e.DeviceIndex))
	}
	if e.DeviceIndex == 0 {
		t.Fatal("the attach gave device index 0 (the primary's)")
	}
}

// TestExecutorRoundsAndDuplicates: while a cloud action of an earlier pass
// runs, its twin is not started again and no other cloud action starts
// (one round at a time); node actions still run. After it ends, the next
// pass's cloud actions run.
func TestExecutorRoundsAndDuplicates(t *testing.T) {
	r := newExecutorRig(t)
	e0, e1 := r.attached(t), r.attached(t)
	gate, arrived := make(chan struct{}), make(chan struct{}, 10)
	var assigns atomic.Int32
	r.sim.SetHooks(ecssim.Hooks{OnAssign: func(ev ecssim.ENIEvent) {
		assigns.Add(1)
		if ev.ENIID == e0.ID {
			arrived <- struct{}{}
			<-gate // the first pass's assign stays in flight
		}
	}})
	assign := func(id int, e observed.ENI) planner.Action {
		return planner.Action{ID: id, Kind: planner.AssignIPs, Target: e.ID, ENIID: e.ID, IPv4Count: 1, Urgent: true, ClientToken: "t-" + e.ID}
	}
	ctx := context.Background()
	r.x.dispatch(ctx, planner.Plan{Actions: []planner.Action{assign(0, e0)}}, nil, false, r.x.cache.generation())
	<-arrived // the call is in the simulator
	key := observed.AttachmentKey{ContainerID: "c1", IfName: "eth0"}
	second := planner.Plan{Actions: []planner.Action{assign(0, e0), assign(1, e1),
		{ID: 2, Kind: planner.SetupPod, Target: key.String(), Pod: &planner.PodTarget{Key: key, NetNS: "/var/run/netns/c1",
			IfName: "eth0", IPv4: netip.MustParseAddr("10.0.0.9"), ENIMAC: e1.MAC}}}}
	r.x.dispatch(ctx, second, nil, false, r.x.cache.generation())
	close(gate)
	r.x.wg.Wait()
	if n := assigns.Load(); n != 1 {
		t.Fatalf("%d assigns reached the cloud: want 1 (the twin suppressed, the other cloud action held for the next round)", n)
	}
	node, err := r.dp.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(node.Pods) != 1 || node.Pods[0].Key != key {
		t.Fatalf("pods %+v: the node action must run while the cloud round is busy", node.Pods)
	}
	r.run(planner.Plan{Actions: []planner.Action{assign(1, e1)}})
	if n := assigns.Load(); n != 2 {
		t.Fatalf("%d assigns after the round ended: want 2", n)
	}
}

// TestExecutorStaleTwin: a plan made from a snapshot taken before an action
// of an earlier pass ended does not start that action's twin, even though
// the action no longer runs when the plan is dispatched (the race behind a
// second ModifyNetworkInterfaceAttribute for one security-group change); a
// plan made from a snapshot taken after it ended starts what it asks.
func TestExecutorStaleTwin(t *testing.T) {
	r := newExecutorRig(t)
	e := r.attached(t)
	updates := func() int { return r.sim.Counters()["ModifyNetworkInterfaceAttribute"]["ok"] }
	update := planner.Action{ID: 0, Kind: planner.UpdateENI, Target: e.ID, ENIID: e.ID, SecurityGroups: []string{ecssim.DefaultSecurityGroup}}
	ctx := context.Background()
	seen := r.x.cache.generation() // the next pass's snapshot, taken now
	r.run(planner.Plan{Actions: []planner.Action{update}})
	if n := updates(); n != 1 {
		t.Fatalf("%d updates reached the cloud: want 1", n)
	}
	r.x.dispatch(ctx, planner.Plan{Actions: []planner.Action{update}}, nil, false, seen)
	r.x.wg.Wait()
	if n := updates(); n != 1 {
		t.Fatalf("%d updates: the twin planned from a snapshot older than the first update's end was started", n)
	}
	r.x.dispatch(ctx, planner.Plan{Actions: []planner.Action{update}}, nil, false, r.x.cache.generation())
	r.x.wg.Wait()
	if n := updates(); n != 2 {
		t.Fatalf("%d updates: a plan from a fresh snapshot must start what it asks", n)
	}
}

// TestExecutorNewENIRefIsPlanLocal: an attach of the ENI a create of its
// plan makes ("new#0") is another action in every plan. A plan made from a
// snapshot taken before the last plan's attach of its "new#0" ended must
// still attach the ENI its own create makes: held back as that attach's
// twin, it left the new ENI detached, outside the pool, until the leak
// grace (TestStaleEntries under load).
func TestExecutorNewENIRefIsPlanLocal(t *testing.T) {
	r := newExecutorRig(t)
	newENI := func(token string) planner.Plan {
		return planner.Plan{Actions: []planner.Action{
			{ID: 0, Kind: planner.CreateENI, Target: "new#0", VSwitchID: r.vsw, SecurityGroups: []string{ecssim.DefaultSecurityGroup}, ClientToken: token},
			{ID: 1, Kind: planner.AttachENI, Target: "new#0", ENIRef: 1, InstanceID: r.inst, DependsOn: []int{0}},
		}}
	}
	seen := r.x.cache.generation() // the next plan's snapshot, taken now
	r.run(newENI("tok-1"))
	r.x.dispatch(context.Background(), newENI("tok-2"), nil, false, seen)
	r.x.wg.Wait()
	var attached, detached []string
	for _, e := range r.sim.Dump().ENIs {
		switch {
		case e.Type == "Primary":
		case e.InstanceID == r.inst:
			attached = append(attached, e.ID)
		default:
			detached = append(detached, e.ID)
		}
	}
	if len(attached) != 2 || len(detached) != 0 {
		t.Fatalf("ENIs attached %v, left detached %v: want both created ENIs attached", attached, detached)
	}
}

// TestExecutorThrottledReleaseComesBack: an optional unassign refused for
// throttling did nothing, so the addresses it gave up before it ran come
// back in the cache at once. Left out, the cache showed them gone until the
// next resync and the planner did not release them again: a surplus kept
// for minutes after one throttled unassign (TestThrottlingStormThenRelease
// under load). An unassign that succeeds still removes them.
func TestExecutorThrottledReleaseComesBack(t *testing.T) {
	r := newExecutorRig(t)
	e := r.attached(t)
	if _, err := r.cl.AssignIPv4(context.Background(), e.ID, 3, nil, "tok-assign"); err != nil {
		t.Fatal(err)
	}
	e, err := r.cl.WaitENI(context.Background(), e.ID, observed.ENIInUse)
	if err != nil {
		t.Fatal(err)
	}
	r.x.cache.replace(observed.State{ENIs: []observed.ENI{e}})
	held := len(e.IPv4)
	unassign := planner.Action{ID: 0, Kind: planner.UnassignIPs, Target: e.ID, ENIID: e.ID, IPv4: e.IPv4[len(e.IPv4)-2:]}
	r.sim.InjectFault(ecssim.Fault{Action: "UnassignPrivateIpAddresses", Code: "Throttling.User", Count: 1})
	r.run(planner.Plan{Actions: []planner.Action{unassign}})
	if len(r.x.errors()) == 0 {
		t.Fatal("the unassign did not fail: the fault was not injected, the test proves nothing")
	}
	if got := len(r.cachedENI(t, e.ID).IPv4); got != held {
		t.Fatalf("after a throttled unassign the cache shows %d addresses on the ENI, want the %d it still holds", got, held)
	}
	r.clk.advance(time.Hour) // past the back-off and the client's
	r.run(planner.Plan{Actions: []planner.Action{unassign}})
	if got := len(r.cachedENI(t, e.ID).IPv4); got != held-2 {
		t.Fatalf("after the unassign the cache shows %d addresses, want %d", got, held-2)
	}
}

// TestExecutorBackoff: the executor decides no back-off. It reports a
// failure's class and when it ended (the planner's memory backs the key
// off from that), and holds an action whose plan says it backs off
// (NotBefore), and what depends on it, until then; at that time it runs.
func TestExecutorBackoff(t *testing.T) {
	r := newExecutorRig(t)
	bad := planner.Action{ID: 0, Kind: planner.AssignIPs, Target: "eni-missing", ENIID: "eni-missing", IPv4Count: 1, Urgent: true}
	r.run(planner.Plan{Actions: []planner.Action{bad}})
	outs := r.x.drainOutcomes()
	if len(outs) != 1 || outs[0].Class != planner.FailNotFound || !outs[0].At.Equal(r.clk.Now()) {
		t.Fatalf("outcomes %+v: want one not-found failure that ended now", outs)
	}
	m, _ := planner.Memory{}.Learn(outs, r.clk.Now())
	b, ok := m.Backoffs[planner.RetryKeyOf(bad)]
	if !ok || !b.Until.After(r.clk.Now()) {
		t.Fatalf("back-offs %+v: want eni/eni-missing backing off", m.Backoffs)
	}
	held := bad
	held.NotBefore = b.Until
	// A node action that depends on it (a status removal of nothing: it
	// succeeds, and so reports an outcome, when it runs).
	dep := planner.Action{ID: 1, Kind: planner.PublishStatus, Target: "c9_eth0", DependsOn: []int{0}}
	plan := planner.Plan{Actions: []planner.Action{held, dep}}
	r.clk.advance(b.Until.Sub(r.clk.Now()) - time.Millisecond)
	r.run(plan)
	if outs := r.x.drainOutcomes(); len(outs) != 0 {
		t.Fatalf("before its NotBefore the action (or its dependent) ran: %+v", outs)
	}
	r.clk.advance(time.Millisecond)
	r.run(plan)
	outs = r.x.drainOutcomes()
	if len(outs) != 1 || outs[0].Action.Kind != planner.AssignIPs || !outs[0].Failed() {
		t.Fatalf("at its NotBefore: outcomes %+v, want the assign run (and failed again)", outs)
	}
	// A success is reported too: it ends the key's back-off.
	r.run(planner.Plan{Actions: []planner.Action{{ID: 0, Kind: planner.PublishStatus, Target: "c9_eth0"}}})
	if outs := r.x.drainOutcomes(); len(outs) != 1 || outs[0].Failed() {
		t.Fatalf("outcomes %+v: want one success", outs)
	}
}

// TestExecutorHandlers: every action kind has a handler.
func TestExecutorHandlers(t *testing.T) {
	for _, k := range []planner.ActionKind{planner.CreateENI, planner.AttachENI, planner.AssignIPs, planner.UnassignIPs,
		planner.DetachENI, planner.DeleteENI, planner.ConfigureENI, planner.SetupPod, planner.TeardownPod,
		planner.MoveENI, planner.ReturnENI, planner.PublishStatus, planner.UpdateENI} {
		if handlers[k] == nil {
			t.Errorf("no handler for %s", k)
		}
	}
}

// TestExecutorStatuses: the executor writes a Ready status from what the
// plan recorded alone (addresses, prefix lengths, gateways, routes), and
// writes none for a failed setup: it reports the failure's class, and the
// planner plans what the pod hears (planner/testdata/failure_setup.txt).
func TestExecutorStatuses(t *testing.T) {
	r := newExecutorRig(t)
	key := observed.AttachmentKey{ContainerID: "c1", IfName: "eth0"}
	pod := &planner.PodTarget{Key: key, NetNS: "/var/run/netns/c1", IfName: "eth0", IPv4: netip.MustParseAddr("10.0.0.9")}
	for _, tc := range []struct {
		err  error
		want planner.FailureClass
	}{
		{errors.New("boom"), planner.FailTransient},
		{fmt.Errorf("veth: %w", linux.ErrConflict), planner.FailConflict},
		{fmt.Errorf("netns: %w", linux.ErrNodeNetNS), planner.FailNetNSRefused},
		{fmt.Errorf("netns: %w", linux.ErrNotNetNS), planner.FailNetNSRefused},
		{fmt.Errorf("netns: %w", linux.ErrNotFound), planner.FailNotFound},
	} {
		r.x.failed(planner.Action{Kind: planner.SetupPod, Target: key.String(), Pod: pod}, tc.err)
		if outs := r.x.drainOutcomes(); len(outs) != 1 || outs[0].Class != tc.want {
			t.Errorf("after %v: outcomes %+v, want one of class %s", tc.err, outs, tc.want)
		}
		if _, err := r.x.statuses.Read(key.ContainerID, key.IfName); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after %v the executor wrote a status (read: %v): the planner decides it", tc.err, err)
		}
	}

	// A status with a prefix length and gateway no rule would derive: the
	// file must say exactly that.
	gw := netip.MustParseAddr("10.9.9.9")
	dst := netip.MustParsePrefix("10.0.0.0/8")
	ps := planner.PodStatus{Key: key, Revision: "r1", Phase: planner.PhaseReady, ReasonCode: planner.ReasonReady,
		IPv4: netip.MustParseAddr("10.0.0.9"), PrefixBits: 20, Gateway: gw, IfName: "eth0",
		Routes: []planner.PodRoute{{Dst: dst, GW: gw}}}
	r.run(planner.Plan{Actions: []planner.Action{{ID: 0, Kind: planner.PublishStatus, Target: key.String(), Status: &ps}}})
	st, err := r.x.statuses.Read(key.ContainerID, key.IfName)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.IPs) != 1 || st.IPs[0].Address != netip.MustParsePrefix("10.0.0.9/20") || st.IPs[0].Gateway != gw ||
		len(st.Routes) != 1 || st.Routes[0].Dst != dst || st.Routes[0].GW != gw {
		t.Fatalf("status ips %+v routes %+v: want exactly the plan's 10.0.0.9/20 via %s and route %s via %s", st.IPs, st.Routes, gw, dst, gw)
	}
}

// TestExecutorMoveENIDualStack: a MoveENI carries the pod's IPv6 prefix
// and gateway, and its host routes (service CIDRs, the node's address),
// to the datapath, so the node holds both addresses and the routes and
// the planner does not plan the move again (it did, after each full
// observation, when only the IPv4 prefix reached the datapath; and no
// host route reached it at all, so Services were out of exclusive pods'
// reach).
func TestExecutorMoveENIDualStack(t *testing.T) {
	r := newExecutorRig(t)
	e := r.attached(t)
	key := observed.AttachmentKey{ContainerID: "c1", IfName: "eth0"}
	v4, v6 := netip.MustParseAddr("10.0.0.9"), netip.MustParseAddr("2408:4000:1::9")
	a := planner.Action{ID: 0, Kind: planner.MoveENI, Target: key.String(), ENIID: e.ID, MAC: e.MAC,
		Prefix: netip.PrefixFrom(v4, 24), Gateway: netip.MustParseAddr("10.0.0.253"),
		PrefixV6: netip.PrefixFrom(v6, 64), GatewayV6: netip.MustParseAddr("2408:4000:1::fffd"),
		HostRoutes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("192.168.0.10/32"), netip.MustParsePrefix("fd00:10:96::/112")},
		Pod:        &planner.PodTarget{Key: key, NetNS: "/var/run/netns/c1", IfName: "eth0", IPv4: v4, IPv6: v6, ENIID: e.ID, ENIMAC: e.MAC}}
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	r.run(planner.Plan{Actions: []planner.Action{a}})
	n, err := r.dp.Observe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Pods) != 1 || n.Pods[0].IPv4 != v4 || n.Pods[0].IPv6 != v6 || !n.Pods[0].Exclusive {
		t.Fatalf("node pods after MoveENI: %+v, want c1 exclusive with %s and %s", n.Pods, v4, v6)
	}
	if !slices.Equal(n.Pods[0].HostRoutes, a.HostRoutes) {
		t.Errorf("host routes after MoveENI: %v, want the plan's %v", n.Pods[0].HostRoutes, a.HostRoutes)
	}
}

// missingNetNSDatapath fails every pod setup as linux.Datapath does when
// the pod's namespace is gone.
type missingNetNSDatapath struct{ *NoDatapath }

func (missingNetNSDatapath) EnsurePod(context.Context, linux.PodSpec) (linux.PodResult, linux.Changes, error) {
	return linux.PodResult{}, nil, fmt.Errorf("open netns %q: %w", "/run/netns/gone", linux.ErrNotFound)
}

// TestNodeFailureCostsNoCloudCall: a node action that finds something
// missing asks for the node to be read again and the pod's namespace to
// be checked again, not for a full observation of the cloud (issue 28
// item 2: 2,000 stale entries cost 3.8 describe calls a second).
func TestNodeFailureCostsNoCloudCall(t *testing.T) {
	r := newExecutorRig(t)
	r.x.dp = missingNetNSDatapath{r.dp}
	now := r.clk.Now()
	r.x.cache.replace(observed.State{At: now, Complete: true})
	key := observed.AttachmentKey{ContainerID: "c1", IfName: "eth0"}
	r.run(planner.Plan{Actions: []planner.Action{{ID: 0, Kind: planner.SetupPod, Target: key.String(),
		Pod: &planner.PodTarget{Key: key, NetNS: "/run/netns/gone", IfName: "eth0", IPv4: netip.MustParseAddr("10.0.0.9")}}}})
	if r.x.cache.needsRefresh(now, 0) {
		t.Error("a pod setup that found its netns missing asks for a full observation (cloud calls)")
	}
	stale, keys := r.x.cache.takeNodeStale()
	if !stale || !slices.Equal(keys, []observed.AttachmentKey{key}) {
		t.Errorf("takeNodeStale = %v, %v: want a node read and a check of %s", stale, keys, key)
	}
	// A cloud action's failure still asks for the cloud.
	r.run(planner.Plan{Actions: []planner.Action{{ID: 0, Kind: planner.AssignIPs, Target: "eni-missing", ENIID: "eni-missing", IPv4Count: 1, Urgent: true}}})
	if !r.x.cache.needsRefresh(now, 0) {
		t.Error("a failed cloud action does not ask for a full observation")
	}
}

// TestExecutorWakesWhenARunHandsOff: a step that starts its dependent
// does not wake the loop (the dependent's end will, and a pass between
// would plan nothing new); a step that starts none does. A chain of three
// cloud actions wakes the loop once, at its end.
func TestExecutorWakesWhenARunHandsOff(t *testing.T) {
	r := newExecutorRig(t)
	var wakes atomic.Int32
	r.x.wake = func() { wakes.Add(1) }
	r.run(planner.Plan{Actions: []planner.Action{
		{ID: 0, Kind: planner.CreateENI, Target: "new#0", VSwitchID: r.vsw, SecurityGroups: []string{ecssim.DefaultSecurityGroup}, ClientToken: "tok-wake"},
		{ID: 1, Kind: planner.AttachENI, Target: "new#0", ENIRef: 1, InstanceID: r.inst, DependsOn: []int{0}},
		{ID: 2, Kind: planner.ConfigureENI, Target: "new#0", ENIRef: 1, DependsOn: []int{1}},
	}})
	if n := wakes.Load(); n != 1 {
		t.Errorf("a chain of three actions woke the loop %d times, want once, at its end", n)
	}
}

// TestStartedStepsHoldNoPlanArrays: a started step may wait in its lane
// for many passes; it holds a detached copy of its action
// (planner.Action.Detach), not pointers into its plan's arrays, or every
// waiting step would keep a whole plan's statuses alive (1.7 GB on a node
// that took 5,000 entries at once).
func TestStartedStepsHoldNoPlanArrays(t *testing.T) {
	r := newExecutorRig(t)
	key := observed.AttachmentKey{ContainerID: "c1", IfName: "eth0"}
	p := planner.Plan{Statuses: []planner.PodStatus{{Key: key, Phase: planner.PhaseReady,
		Routes: []planner.PodRoute{{Dst: netip.MustParsePrefix("0.0.0.0/0")}}}}}
	a := planner.Action{Kind: planner.PublishStatus, Target: key.String(), Status: &p.Statuses[0]}
	r.x.mu.Lock()
	s := r.x.begin(a, actionKey(a))
	r.x.mu.Unlock()
	defer r.x.wg.Done() // the step never runs
	if s.a.Status == &p.Statuses[0] || &s.a.Status.Routes[0] == &p.Statuses[0].Routes[0] {
		t.Error("the started step points into its plan's statuses")
	}
	if s.a.Status.Key != key || len(s.a.Status.Routes) != 1 {
		t.Errorf("the started step's status is %+v: want the plan's, copied", *s.a.Status)
	}
}
