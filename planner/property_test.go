package planner_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/planner/plannertest"
)

// TestRandomWorlds drives seeded random worlds through pod churn, sticky
// pods, time passing, partial observations and crashes in the middle of a
// plan. After every pass it checks DESIGN.md's invariants (the model world
// records breaches while it applies plans; the plan itself is checked here),
// then freezes demand and requires convergence within a bounded number of
// rounds to an empty plan with nothing leaked.
func TestRandomWorlds(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomWorld(t, uint64(seed)) })
	}
}

func randomWorld(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	w := plannertest.New(start, observed.Instance{})
	// Plans are built in the previous plan's arrays, as the agent's are;
	// each is checked against one with arrays of its own.
	w.Recycle = true
	must := func(line string) {
		t.Helper()
		if err := w.Exec(line); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
	}
	must(fmt.Sprintf("instance i-1 zone=z1 enis=%d ips=%d ipv6=%d", 3+r.IntN(3), 4+r.IntN(12), 4+r.IntN(12)))
	must("vswitch vsw-a cidr=10.0.0.0/20 cidr6=2408:4000:1::/64")
	must(fmt.Sprintf("vswitch vsw-b cidr=10.1.0.0/22 free=%d", r.IntN(40)))
	mode, stack := "shared", "ipv4"
	if r.IntN(5) == 0 {
		mode = "exclusive"
	} else if r.IntN(3) == 0 {
		stack = "dual"
	}
	minIdle := r.IntN(5)
	maxIdle := minIdle + r.IntN(6)
	if r.IntN(3) == 0 {
		maxIdle += 16 // room for an idle prefix to go back
	}
	// IPv4 prefix mode in half the shared worlds; it switches in place and
	// vSwitches fragment below.
	allocs := []string{"secondary", "prefix", "prefer-prefix"}
	alloc := "secondary"
	if mode == "shared" && r.IntN(2) == 0 {
		alloc = allocs[1+r.IntN(2)]
	}
	must(fmt.Sprintf("config mode=%s stack=%s minIdle=%d maxIdle=%d minTotal=%d batch=%d delay=%ds cooldown=%ds hold=%ds vswitches=vsw-b,vsw-a sg=sg-1 ipv4Allocation=%s",
		mode, stack, minIdle, maxIdle, r.IntN(8), 1+r.IntN(6), r.IntN(180), r.IntN(60), r.IntN(300), alloc))
	if mode == "exclusive" {
		// Exclusive pods carry host routes (no draw: the other worlds
		// stay as they were).
		must("config services=10.96.0.0/12,fd00:10:96::/112")
	}
	if r.IntN(2) == 0 {
		must("eni eni-f foreign status=InUse dev=4 vsw=vsw-a ips=10.0.9.1,10.0.9.2")
	}
	if r.IntN(3) == 0 {
		must("eni eni-l owned status=Available vsw=vsw-a ips=10.0.9.10,10.0.9.11")
	}
	// Security-group sets: some pods ask for groups by annotation (some
	// invalid), a namespace may have a named set, and the default groups
	// may change under running pods (moved in place).
	sets := r.IntN(3) == 0
	if sets && r.IntN(2) == 0 {
		must(fmt.Sprintf("sgset web groups=sg-w minIdle=%d maxIdle=%d maxENIs=%d ns=shop", r.IntN(2), 1+r.IntN(3), r.IntN(3)))
	}
	if sets && r.IntN(3) == 0 {
		must(fmt.Sprintf("config maxENIsPerSet=%d", 1+r.IntN(2)))
	}
	annotations := []string{"sg-a", "sg-b,sg-a", "sg-a,sg-b", "sg-1", "sg-w", "SG-bad", "sg-a,,"}

	live := map[string]string{} // container ID -> pod name
	next := 0
	for step := range 40 {
		// Change demand.
		for range r.IntN(4) {
			next++
			id := fmt.Sprintf("c%03d", next)
			name := fmt.Sprintf("p%d", r.IntN(30))
			sticky := ""
			if r.IntN(3) == 0 {
				sticky = " sticky"
			}
			ns := "ns"
			if sets && r.IntN(3) == 0 {
				sticky += " sg=" + annotations[r.IntN(len(annotations))]
			} else if sets && r.IntN(3) == 0 {
				ns = "shop"
			}
			must(fmt.Sprintf("pod %s ns=%s name=%s uid=u%s%s", id, ns, name, id, sticky))
			live[id] = name
		}
		for _, id := range slices.Sorted(maps.Keys(live)) {
			if r.IntN(6) == 0 {
				must("rm-pod " + id)
				delete(live, id)
			}
		}
		if mode == "shared" && r.IntN(8) == 0 {
			must("config ipv4Allocation=" + allocs[r.IntN(3)])
		}
		if mode == "exclusive" && r.IntN(8) == 0 {
			// serviceCIDRs changed under running pods.
			must("config services=" + []string{"", "10.96.0.0/12", "10.96.0.0/12,172.20.0.0/16,fd00:10:96::/112"}[r.IntN(3)])
		}
		if r.IntN(6) == 0 {
			vsw := []string{"vsw-a", "vsw-b"}[r.IntN(2)]
			if r.IntN(2) == 0 {
				must("fragment " + vsw)
			} else {
				must("fragment " + vsw + " off")
			}
		}
		if sets && r.IntN(15) == 0 {
			must(fmt.Sprintf("config sg=sg-%d", 1+r.IntN(3)))
		}
		partial := r.IntN(8) == 0
		switch {
		case partial && r.IntN(2) == 0:
			// Degraded mode: the cloud half carried, the node half whole;
			// idle addresses are handed out, nothing else changes.
			must("observe complete=false cloud-from=30s")
		default:
			must(fmt.Sprintf("observe complete=%t", !partial))
		}
		must(fmt.Sprintf("tick %ds", r.IntN(90)))

		o, mem := w.Observe(), w.Memory
		p := w.Plan()
		if fresh := w.PlanAllocating(); !samePlan(fresh, p) {
			t.Fatalf("step %d: the plan built in the previous plan's arrays differs from one built afresh (-fresh +recycled):\n%s", step,
				cmp.Diff(fresh, p, cmpopts.EquateEmpty(), cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})))
		}
		checkPlan(t, w, o, p)
		checkPrefixes(t, w, o, mem, p)
		if r.IntN(6) == 0 && len(p.Actions) > 0 {
			w.ApplyN(p, r.IntN(len(p.Actions))) // crash part way
		} else {
			w.Apply(p)
		}
		if len(w.Violations) > 0 {
			t.Fatalf("step %d: invariant broken:\n%v\nplan:\n%s", step, w.Violations, p.Render())
		}
	}

	// Demand freezes; time passes; the world must settle.
	must("observe complete=true")
	must("fragment vsw-a off")
	must("fragment vsw-b off")
	settled, empties := false, 0
	var p planner.Plan
	for round := range 30 {
		p = w.Plan()
		if testing.Verbose() {
			t.Logf("round %d stamp %v now %v empty %v idle %d", round, p.Memory.IdleAboveMaxSince, w.Now, p.Empty(), p.Pool.Idle)
			for _, a := range p.Actions {
				if a.Kind.Cloud() {
					t.Logf("  %s %s %s", a.Kind, a.Target, a.ClientToken)
				}
			}
		}
		checkPlan(t, w, w.Observe(), p)
		checkPrefixes(t, w, w.Observe(), w.Memory, p)
		if p.Empty() {
			w.Memory = p.Memory // the agent persists the memory of every pass
			empties++
			// Three empty passes 4m apart: cooldowns (< 1m) end, then
			// a release delay (< 3m) starts and passes; and no timer is
			// pending (a sticky hold, < 5m, may end only at the second
			// pass and start a release delay then).
			_, pending := p.Memory.NextDeadline(w.Desired.Config, planner.Options{Now: w.Now})
			if empties >= 3 && !pending {
				settled = true
				break
			}
		} else {
			empties = 0
		}
		if errs := w.Apply(p); len(errs) > 0 && testing.Verbose() {
			t.Logf("round %d errors: %v", round, errs)
		}
		if len(w.Violations) > 0 {
			t.Fatalf("settling round %d: invariant broken: %v", round, w.Violations)
		}
		must("tick 4m")
	}
	if !settled {
		t.Fatalf("did not converge in 30 rounds; last plan:\n%s\nworld:\n%s", p.Render(), w.Dump())
	}
	// Converged: planning again gives an empty plan.
	if again := w.Plan(); !again.Empty() {
		t.Fatalf("converged world gave a plan:\n%s", again.Render())
	}
	checkSettled(t, w, p)
	// Every pod runs on an ENI whose groups are the set it asks for, but
	// one whose set changed while it ran (the default groups changed) on
	// an ENI that another pod keeps on the old groups: it is never moved,
	// and the plan says so.
	for k, v := range w.GroupMismatches() {
		if !slices.ContainsFunc(p.Problems, func(s string) bool { return strings.Contains(s, "pod "+k.String()+" asks for") }) {
			t.Fatalf("pod on an ENI of another security-group set after settling, and the plan does not say so:\n%s\n%s\n%s", v, p.Render(), w.Dump())
		}
	}
}

// checkPlan checks invariants visible in the plan itself.
func checkPlan(t *testing.T, w *plannertest.World, o observed.State, p planner.Plan) {
	t.Helper()
	enis := map[string]observed.ENI{}
	for _, e := range o.ENIs {
		enis[e.ID] = e
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("invalid plan (Plan.Validate):\n%v\n%s", err, p.Render())
	}
	for i, a := range p.Actions {
		if a.ID != i {
			t.Fatalf("action %d has ID %d", i, a.ID)
		}
		for _, d := range a.DependsOn {
			if d >= a.ID || d < 0 {
				t.Fatalf("action %d depends on %d: not an earlier action", a.ID, d)
			}
		}
		if !o.Complete && (a.Kind.Destructive() || a.Kind == planner.CreateENI || a.Kind == planner.AssignIPs ||
			(a.Kind == planner.PublishStatus && a.Status == nil)) {
			t.Fatalf("incomplete observation, yet %s %s planned", a.Kind, a.Target)
		}
		if a.Kind.Cloud() && a.ENIID != "" {
			e, ok := enis[a.ENIID]
			if !ok {
				t.Fatalf("%s on unobserved ENI %s", a.Kind, a.ENIID)
			}
			if !e.Owned(o.Instance.ID) || e.ID == o.Instance.PrimaryENI {
				t.Fatalf("%s on ENI %s that is not ours", a.Kind, a.ENIID)
			}
		}
		if a.Kind == planner.AssignIPs && (a.IPv4Count > 10 || a.IPv6Count > 10 || a.IPv4PrefixCount > 10) {
			t.Fatalf("assign of more than 10 addresses or prefixes in one call")
		}
		if a.Kind == planner.UnassignIPs {
			for _, ip := range append(append([]netip.Addr{}, a.IPv4...), a.IPv6...) {
				for _, s := range p.Statuses {
					if s.IPv4 == ip || s.IPv6 == ip {
						t.Fatalf("unassign %s while %s is bound to it", ip, s.Key)
					}
				}
			}
		}
	}
	// A detached ENI gets no cloud call beside its detach: every other
	// call on it comes before the detach (ECS refuses concurrent changes
	// to one ENI, and it is gone after).
	for _, d := range p.Actions {
		if d.Kind != planner.DetachENI {
			continue
		}
		before := map[int]bool{}
		var walk func(int)
		walk = func(id int) {
			for _, x := range p.Actions[id].DependsOn {
				if !before[x] {
					before[x] = true
					walk(x)
				}
			}
		}
		walk(d.ID)
		for _, a := range p.Actions {
			if a.ID != d.ID && a.ENIID == d.ENIID && a.Kind.Cloud() && a.Kind != planner.DeleteENI && !before[a.ID] {
				t.Fatalf("%s %s [%d] beside DetachENI [%d] of the same ENI\n%s", a.Kind, a.Target, a.ID, d.ID, p.Render())
			}
		}
	}
	// One status per entry, and no address bound twice.
	if len(p.Statuses) != len(w.Desired.Entries) {
		t.Fatalf("%d statuses for %d entries", len(p.Statuses), len(w.Desired.Entries))
	}
	seen := map[netip.Addr]observed.AttachmentKey{}
	for _, s := range p.Statuses {
		for _, ip := range []netip.Addr{s.IPv4, s.IPv6} {
			if !ip.IsValid() {
				continue
			}
			if k, dup := seen[ip]; dup {
				t.Fatalf("%s bound to %s and %s", ip, k, s.Key)
			}
			seen[ip] = s.Key
		}
		if s.Phase != planner.PhaseReady && s.Reason == "" {
			t.Fatalf("%s is %s without a reason", s.Key, s.Phase)
		}
	}
}

// checkSettled checks invariant 4: nothing leaked once the pool settles.
func checkSettled(t *testing.T, w *plannertest.World, p planner.Plan) {
	t.Helper()
	cfg := w.Desired.Config
	for _, e := range w.ENIs {
		if e.Owned(w.Instance.ID) && e.Status == observed.ENIAvailable {
			t.Fatalf("owned ENI %s left Available after settling", e.ID)
		}
	}
	// Each security-group set keeps its own pool (one set: the config's).
	sets := p.Sets
	if sets == nil {
		sets = []planner.SetSummary{{Name: desired.DefaultSetName, PoolSummary: p.Pool}}
	}
	alloc := cfg.ENI.IPv4Allocation
	if cfg.Mode != desired.ModeSharedENI || cfg.IPStack == desired.IPv6Only {
		alloc = desired.IPv4Secondary
	}
	freePrefixes, freeSingles := freeKinds(w)
	if (alloc == desired.IPv4Secondary || alloc == "") && freePrefixes > 0 {
		t.Fatalf("%d whole free prefixes left in secondary mode after settling\n%s\n%s", freePrefixes, p.Render(), w.Dump())
	}
	for _, set := range sets {
		bound, minTotal := max(cfg.Pool.MaxIdle, cfg.Pool.MinIdle), cfg.Pool.MinTotal
		if cs, ok := cfg.SecurityGroupSet(set.Name); ok && cs.Pool != nil {
			bound, minTotal = max(cs.Pool.MaxIdle, cs.Pool.MinIdle), cs.Pool.MinTotal
		} else if set.Name != desired.DefaultSetName {
			bound, minTotal = min(cfg.Pool.Batch, cfg.Pool.MaxIdle), 0
			if set.Pods == 0 {
				bound = 0
			}
		}
		s := set.PoolSummary
		above := s.Idle > bound && s.Total > minTotal && s.Waiting == 0
		switch {
		case alloc == desired.IPv4Secondary || alloc == "":
			if above {
				t.Fatalf("set %q: idle %d above maxIdle %d after settling (total %d, minTotal %d)\n%s\n%s", set.Name, s.Idle, bound, s.Total, minTotal, p.Render(), w.Dump())
			}
		case len(sets) > 1:
			// The free kinds below are counted over the node, not per
			// set: with several sets only the secondary-mode bound is
			// checked per set.
		default:
			// Prefixes go back only whole and only while idle - 16 stays at
			// or above the bound: idle may rest up to 15 above it, or more in
			// prefixes partly used.
			if freePrefixes > 0 && s.Idle-16 >= bound && s.Total-16 >= minTotal && s.Waiting == 0 {
				t.Fatalf("a whole free prefix left with idle %d (maxIdle %d) after settling\n%s\n%s", s.Idle, bound, p.Render(), w.Dump())
			}
			// prefer-prefix: a free secondary address is idle like any, and
			// goes first when idle is above the bound; on dual stack only
			// with a free IPv6 address of its ENI to pair (an unpaired one is
			// not a unit: docs/plan.md, "Not done").
			single := alloc == desired.IPv4Prefix || (above && cfg.IPStack != desired.DualStack)
			if freeSingles > 0 && single {
				t.Fatalf("%d free secondary addresses left in %s mode with idle %d (maxIdle %d) after settling\n%s\n%s", freeSingles, alloc, s.Idle, bound, p.Render(), w.Dump())
			}
		}
	}
	for _, st := range p.Statuses {
		// A set with no ENI slot waits for another set's pods to go:
		// that may be never, and is not a failure to settle.
		if st.Phase == planner.PhasePending && st.ReasonCode != planner.ReasonWaitingCooldown && st.ReasonCode != planner.ReasonSGSetNoENISlot {
			t.Fatalf("%s still Pending after settling: %s", st.Key, st.Reason)
		}
	}
	if cfg.Mode == desired.ModeSharedENI {
		for _, pn := range w.Node.Pods {
			found := false
			for _, e := range w.Desired.Entries {
				found = found || (e.ContainerID == pn.Key.ContainerID && e.IfName == pn.Key.IfName)
			}
			if !found {
				t.Fatalf("kernel state of gone attachment %s left after settling", pn.Key)
			}
		}
	}
	_ = time.Second
}

// checkPrefixes checks the prefix invariants of a plan made from
// observation o with memory mem: no address sits both in a prefix and as a
// secondary address; a bound address is on its ENI (secondary or inside a
// prefix); and an UnassignIPs never gives back a prefix, or an address,
// that is bound, set up, held for a sticky pod or cooling down.
func checkPrefixes(t *testing.T, w *plannertest.World, o observed.State, mem planner.Memory, p planner.Plan) {
	t.Helper()
	enis := map[string]observed.ENI{}
	for _, e := range o.ENIs {
		enis[e.ID] = e
		for _, x := range o.ENIs {
			for _, ip := range e.IPv4 {
				if pf, ok := x.PrefixOf(ip); ok {
					t.Fatalf("%s is a secondary address of %s and inside prefix %s of %s", ip, e.ID, pf, x.ID)
				}
			}
		}
	}
	for _, s := range p.Statuses {
		if s.Phase != planner.PhaseReady || !s.IPv4.IsValid() || s.Exclusive {
			continue
		}
		if e, ok := enis[s.ENIID]; ok && !e.HasIP(s.IPv4) {
			t.Fatalf("%s Ready with %s, which %s does not hold", s.Key, s.IPv4, s.ENIID)
		}
	}
	taken := func(ip netip.Addr) string {
		for _, s := range p.Statuses {
			if s.IPv4 == ip || s.IPv6 == ip {
				return "bound to " + s.Key.String()
			}
		}
		for _, pn := range o.Node.Pods {
			if pn.IPv4 == ip || pn.IPv6 == ip {
				return "set up for " + pn.Key.String()
			}
		}
		for k, r := range mem.Sticky {
			if (r.IPv4 == ip || r.IPv6 == ip) && (r.Until.IsZero() || w.Now.Before(r.Until)) {
				if now, kept := p.Memory.Sticky[k]; (!kept || now.IPv4 != r.IPv4 || now.IPv6 != r.IPv6) && returned(w, k) {
					// The pod came back asking for other security
					// groups than its address's ENI has: the plan ends
					// the reservation and binds it anew in its set.
					continue
				}
				return "held for sticky " + k
			}
		}
		if until, ok := mem.Cooldowns[ip]; ok && w.Now.Before(until) {
			return "cooling down until " + until.Format(time.RFC3339)
		}
		return ""
	}
	for _, a := range p.Actions {
		if a.Kind != planner.UnassignIPs {
			continue
		}
		if len(a.IPv4Prefixes) > 10 {
			t.Fatalf("unassign of %d prefixes in one call", len(a.IPv4Prefixes))
		}
		for _, pf := range a.IPv4Prefixes {
			if !slices.Contains(enis[a.ENIID].IPv4Prefixes, pf) {
				t.Fatalf("unassign of prefix %s that %s does not hold", pf, a.ENIID)
			}
			for ip := pf.Addr(); pf.Contains(ip); ip = ip.Next() {
				if why := taken(ip); why != "" {
					t.Fatalf("unassign of prefix %s while %s is %s\n%s", pf, ip, why, p.Render())
				}
			}
		}
		for _, ip := range append(slices.Clone(a.IPv4), a.IPv6...) {
			if why := taken(ip); why != "" {
				t.Fatalf("unassign of %s while it is %s\n%s", ip, why, p.Render())
			}
		}
	}
}

// freeKinds counts, over the owned ENIs, the prefixes none of whose
// addresses is bound, set up, sticky or cooling, and such free secondary
// addresses.
func freeKinds(w *plannertest.World) (prefixes, singles int) {
	used := map[netip.Addr]bool{}
	for _, b := range w.Node.Published {
		used[b.IPv4] = true
	}
	for _, pn := range w.Node.Pods {
		used[pn.IPv4] = true
	}
	for _, r := range w.Memory.Sticky {
		if r.Until.IsZero() || w.Now.Before(r.Until) {
			used[r.IPv4] = true
		}
	}
	for ip, until := range w.Memory.Cooldowns {
		if w.Now.Before(until) {
			used[ip] = true
		}
	}
	for _, e := range w.ENIs {
		if !e.Owned(w.Instance.ID) || e.Status != observed.ENIInUse {
			continue
		}
		for _, ip := range e.IPv4 {
			if !used[ip] {
				singles++
			}
		}
		for _, pf := range e.IPv4Prefixes {
			free := true
			for ip := pf.Addr(); pf.Contains(ip); ip = ip.Next() {
				free = free && !used[ip]
			}
			if free {
				prefixes++
			}
		}
	}
	return prefixes, singles
}

// returned reports whether a live entry is the sticky pod k
// ("namespace/name/ifName") of a reservation.
func returned(w *plannertest.World, k string) bool {
	for _, e := range w.Desired.Entries {
		if e.PodNamespace+"/"+e.PodName+"/"+e.IfName == k {
			return true
		}
	}
	return false
}

// samePlan reports whether two plans are equal, an empty list equal to
// none (a recycled plan's lists are never nil).
func samePlan(x, y planner.Plan) bool {
	if len(x.Actions) == 0 && len(y.Actions) == 0 {
		x.Actions, y.Actions = nil, nil
	}
	if len(x.Statuses) == 0 && len(y.Statuses) == 0 {
		x.Statuses, y.Statuses = nil, nil
	}
	return reflect.DeepEqual(x, y)
}
