// Package plannertest is a model of the world the planner steers: an
// in-memory cloud (ENIs, addresses, vSwitch pools, instance limits) and node
// (ENI devices, pod network state, published statuses), with an executor
// that applies a plan to it the way reconcile applies one to the real cloud
// and kernel. While applying it checks DESIGN.md's invariants and records
// every breach in Violations, so tests can drive the planner through many
// rounds and crashes and then ask whether anything went wrong.
package plannertest

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
)

// World is the model. Its fields are the whole state; tests set them
// directly and the executor changes them.
type World struct {
	Desired  desired.State
	Instance observed.Instance
	// ENIs are every ENI of the account the node can see (primary, foreign,
	// owned; attached here or Available).
	ENIs      []observed.ENI
	VSwitches []observed.VSwitch
	// VSwitchTags are the vSwitches' tags by ID, which the config's
	// eni.vSwitchSelector selects on (observed.State.SelectedVSwitches).
	VSwitchTags map[string]map[string]string
	Node        observed.Node
	Now         time.Time
	Memory      planner.Memory
	// Unschedulable is when the node was cordoned (Options.Unschedulable;
	// zero: schedulable).
	Unschedulable time.Time
	// Complete and Problems are copied into every observation.
	Complete bool
	Problems []string
	// CloudFrom, when set, marks the cloud half as carried from an
	// observation taken then (degraded mode); the node half is complete.
	CloudFrom time.Time

	// Recycle makes Plan build each plan in the arrays of the one it
	// returned before (planner.Options.Recycle), as the agent does: a
	// test that sets it reads no plan after planning the next.
	Recycle bool
	last    planner.Plan

	// Violations lists every invariant breach seen while applying plans.
	Violations []string
	// Calls counts cloud calls made (idempotent replays included).
	Calls int

	released map[netip.Addr]release
	identity map[observed.AttachmentKey]string // pod identity set up per key
	allocd   map[string]map[netip.Addr]bool    // per vSwitch: addresses in use
	tokens   map[string]string                 // ClientToken -> ENI ID
	burnt    map[string]bool                   // ClientTokens whose call failed
	// fragmentedVSw are vSwitches that refuse every IPv4 prefix (no
	// aligned /28 free) while single addresses may be (script `fragment`).
	fragmentedVSw map[string]bool
	nextENI       int
}

type release struct {
	at       time.Time
	identity string
}

// New returns an empty world at now for instance inst.
func New(now time.Time, inst observed.Instance) *World {
	return &World{Now: now, Instance: inst, Complete: true,
		released: map[netip.Addr]release{}, identity: map[observed.AttachmentKey]string{},
		allocd: map[string]map[netip.Addr]bool{}, tokens: map[string]string{}, burnt: map[string]bool{},
		fragmentedVSw: map[string]bool{}}
}

// Observe returns what the agent would observe now (a deep copy).
func (w *World) Observe() observed.State {
	s := observed.State{Instance: w.Instance, Complete: w.Complete, Problems: slices.Clone(w.Problems), At: w.Now,
		NodeComplete: true, CloudFrom: w.CloudFrom}
	for _, e := range w.ENIs {
		if e.InstanceID != w.Instance.ID && !e.Owned(w.Instance.ID) {
			continue
		}
		e.IPv4, e.IPv6, e.Tags = slices.Clone(e.IPv4), slices.Clone(e.IPv6), maps.Clone(e.Tags)
		e.IPv4Prefixes = slices.Clone(e.IPv4Prefixes)
		s.ENIs = append(s.ENIs, e)
	}
	slices.SortFunc(s.ENIs, func(a, b observed.ENI) int { return strings.Compare(a.ID, b.ID) })
	s.VSwitches = slices.Clone(w.VSwitches)
	if w.Complete {
		// As observed.Collect: a configured vSwitch the cloud does not
		// know is reported, not a failure.
		for _, ids := range w.Desired.Config.ENI.VSwitches {
			for _, id := range ids {
				if w.vswitch(id) == nil && !slices.Contains(s.UnknownVSwitches, id) {
					s.UnknownVSwitches = append(s.UnknownVSwitches, id)
				}
			}
		}
		slices.Sort(s.UnknownVSwitches)
	}
	// As the cloud's Tag.N filter does, in the instance's zone.
	if sel := w.Desired.Config.ENI.VSwitchSelector; sel != nil && len(sel.Tags) > 0 {
		for _, v := range w.VSwitches {
			if v.ZoneID != w.Instance.ZoneID {
				continue
			}
			have := w.VSwitchTags[v.ID]
			match := true
			for k, val := range sel.Tags {
				if hv, ok := have[k]; !ok || (val != "" && hv != val) {
					match = false
				}
			}
			if match {
				s.SelectedVSwitches = append(s.SelectedVSwitches, v.ID)
			}
		}
	}
	s.Node.ENIDevices = slices.Clone(w.Node.ENIDevices)
	s.Node.Pods = slices.Clone(w.Node.Pods)
	s.Node.Published = slices.Clone(w.Node.Published)
	s.Node.MissingNetNS = slices.Clone(w.Node.MissingNetNS)
	return s
}

// Plan plans one pass over the world.
func (w *World) Plan() planner.Plan {
	opt := w.options()
	if !w.Recycle {
		return planner.Make(w.Desired, w.Observe(), opt)
	}
	opt.Recycle = w.last
	w.last = planner.Make(w.Desired, w.Observe(), opt)
	return w.last
}

// PlanAllocating is Plan with arrays of its own, whatever Recycle says.
func (w *World) PlanAllocating() planner.Plan {
	return planner.Make(w.Desired, w.Observe(), w.options())
}

func (w *World) options() planner.Options {
	return planner.Options{Now: w.Now, Memory: w.Memory, NodeName: "node-1", Unschedulable: w.Unschedulable}
}

// Apply executes the whole plan and keeps its memory.
func (w *World) Apply(p planner.Plan) []error { return w.ApplyN(p, len(p.Actions)) }

// ApplyN persists the plan's memory (as reconcile does, before acting) and
// executes only its first n actions, as if the agent crashed then. Actions
// whose dependencies failed, and actions whose NotBefore is after Now, are
// skipped. It returns the errors.
func (w *World) ApplyN(p planner.Plan, n int) []error {
	w.Memory = p.Memory
	var errs []error
	failed := map[int]bool{}
	created := map[int]string{} // CreateENI action ID -> ENI ID
	for _, a := range p.Actions[:min(n, len(p.Actions))] {
		// An action backing off is held, as the executor holds it, and so
		// is what depends on it: a later plan asks for them again.
		if a.NotBefore.After(w.Now) || slices.ContainsFunc(a.DependsOn, func(d int) bool { return failed[d] }) {
			failed[a.ID] = true
			continue
		}
		if a.ENIRef > 0 {
			id, ok := created[a.ENIRef-1]
			if !ok {
				failed[a.ID] = true
				continue
			}
			a.ENIID = id
		}
		id, err := w.do(a)
		if err != nil {
			failed[a.ID] = true
			errs = append(errs, fmt.Errorf("action %d %s %s: %w", a.ID, a.Kind, a.Target, err))
			continue
		}
		if a.Kind == planner.CreateENI {
			created[a.ID] = id
		}
	}
	w.checkPublished()
	return errs
}

func (w *World) violate(format string, args ...any) {
	w.Violations = append(w.Violations, w.Now.Format("15:04:05")+" "+fmt.Sprintf(format, args...))
}

func (w *World) eni(id string) *observed.ENI {
	for i := range w.ENIs {
		if w.ENIs[i].ID == id {
			return &w.ENIs[i]
		}
	}
	return nil
}

func (w *World) vswitch(id string) *observed.VSwitch {
	for i := range w.VSwitches {
		if w.VSwitches[i].ID == id {
			return &w.VSwitches[i]
		}
	}
	return nil
}

// mayDestroy checks invariant 1 for a destructive call (or an update) on e.
func (w *World) mayDestroy(a planner.Action, e *observed.ENI) {
	if e.ID == w.Instance.PrimaryENI || e.Type == observed.ENITypePrimary {
		w.violate("%s on the primary ENI %s", a.Kind, e.ID)
	} else if !e.Owned(w.Instance.ID) {
		w.violate("%s on foreign ENI %s", a.Kind, e.ID)
	}
}

func (w *World) do(a planner.Action) (string, error) {
	if a.Kind.Cloud() {
		w.Calls++
	}
	switch a.Kind {
	case planner.CreateENI:
		var id string
		err := w.tokened(a.ClientToken, func() (err error) { id, err = w.create(a); return err })
		return id, err
	case planner.AttachENI:
		return "", w.attach(a)
	case planner.AssignIPs:
		return "", w.tokened(a.ClientToken, func() error { return w.assign(a) })
	case planner.UnassignIPs:
		return "", w.unassign(a)
	case planner.DetachENI:
		return "", w.detach(a)
	case planner.DeleteENI:
		return "", w.delete(a)
	case planner.UpdateENI:
		return "", w.update(a)
	case planner.ConfigureENI:
		return "", w.configure(a)
	case planner.SetupPod, planner.MoveENI:
		return "", w.setup(a)
	case planner.TeardownPod, planner.ReturnENI:
		return "", w.teardown(a)
	case planner.PublishStatus:
		w.publish(a)
		return "", nil
	}
	return "", fmt.Errorf("unknown action kind %q", a.Kind)
}

// tokened runs a call carrying ClientToken tok as ECS does: a token whose
// call failed is burnt (a resend answers IdempotentFailed), and, as the
// executor does, the failure is reported to memory so that the next plan
// carries a new token.
func (w *World) tokened(tok string, call func() error) error {
	if tok == "" {
		return call()
	}
	w.Memory = w.Memory.TokenSent(tok)
	if w.burnt[tok] {
		w.Memory = w.Memory.TokenFailed(tok)
		return fmt.Errorf("IdempotentFailed: token %s was burnt", tok)
	}
	err := call()
	if err != nil {
		w.burnt[tok] = true
		w.Memory = w.Memory.TokenFailed(tok)
	}
	return err
}

func (w *World) configure(a planner.Action) error {
	e := w.eni(a.ENIID)
	if e == nil || e.Status != observed.ENIInUse || e.InstanceID != w.Instance.ID {
		return fmt.Errorf("configure %s: not attached here", a.ENIID)
	}
	if !e.Owned(w.Instance.ID) {
		w.violate("ConfigureENI on ENI %s that is not ours", e.ID)
	}
	t := a.Table
	if t == 0 {
		t = planner.Table(e.DeviceIndex)
	}
	if t != planner.Table(e.DeviceIndex) {
		w.violate("ConfigureENI %s with table %d, device index %d", e.ID, t, e.DeviceIndex)
	}
	if !slices.ContainsFunc(w.Node.ENIDevices, func(d observed.ENIDevice) bool { return d.MAC == e.MAC }) {
		// The attach made the device appear (the model adds it late).
		w.Node.ENIDevices = append(w.Node.ENIDevices, observed.ENIDevice{MAC: e.MAC, Name: fmt.Sprintf("eth%d", e.DeviceIndex),
			Index: 10 + e.DeviceIndex, MTU: 1500})
	}
	a.MAC, a.Table = e.MAC, t
	w.apply(a, planner.Result{})
	return nil
}

func (w *World) setup(a planner.Action) error {
	p := a.Pod
	e := w.eni(p.ENIID)
	if e == nil || e.InstanceID != w.Instance.ID || e.Status != observed.ENIInUse {
		w.violate("%s %s on ENI %s that is not attached here", a.Kind, p.Key, p.ENIID)
		return fmt.Errorf("eni %s not attached", p.ENIID)
	}
	if !e.Owned(w.Instance.ID) {
		w.violate("%s %s on foreign ENI %s", a.Kind, p.Key, e.ID)
	}
	excl := a.Kind == planner.MoveENI
	identity := p.Namespace + "/" + p.Name + "/" + p.IfName
	if a.Reason.Code == planner.ReasonNewBinding || a.Reason.Code == planner.ReasonStickyRestore {
		// A pod is placed only on an ENI of its set. (One set up again on
		// its address keeps it: a running pod is never moved.)
		w.checkGroups(p.Key, e)
	}
	for _, ip := range []netip.Addr{p.IPv4, p.IPv6} {
		if !ip.IsValid() {
			continue
		}
		if excl {
			if ip != e.PrimaryIP && !slices.Contains(e.IPv6, ip) {
				w.violate("MoveENI %s: %s is not %s's address", p.Key, ip, e.ID)
			}
		} else if !e.HasIP(ip) {
			w.violate("SetupPod %s: %s is not on %s", p.Key, ip, e.ID)
		}
		if k := w.inUse(ip); k != "" && !strings.HasPrefix(k, p.Key.String()) {
			w.violate("SetupPod %s with %s held by %s", p.Key, ip, k)
		}
		if r, ok := w.released[ip]; ok && r.identity != identity && w.Now.Sub(r.at) < w.Desired.Config.Pool.Cooldown.D() {
			w.violate("SetupPod %s with %s released %s ago by %s (cooldown %s)", p.Key, ip, w.Now.Sub(r.at), r.identity, w.Desired.Config.Pool.Cooldown.D())
		}
	}
	if !excl {
		i := slices.IndexFunc(w.Node.ENIDevices, func(d observed.ENIDevice) bool { return d.MAC == e.MAC })
		if i < 0 || !w.Node.ENIDevices[i].Configured {
			return fmt.Errorf("eni %s device not configured", e.ID)
		}
	}
	host := ""
	if !excl {
		host = "enid" + p.Key.ContainerID
	}
	pt := *a.Pod // the plan's own is not changed
	pt.ENIMAC, a.Pod = e.MAC, &pt
	w.apply(a, planner.Result{HostVeth: host})
	w.identity[p.Key] = identity
	return nil
}

func (w *World) teardown(a planner.Action) error {
	i := slices.IndexFunc(w.Node.Pods, func(x observed.PodNet) bool { return x.Key == a.Pod.Key })
	if i < 0 {
		return nil // already gone
	}
	pn := w.Node.Pods[i]
	for _, ip := range []netip.Addr{pn.IPv4, pn.IPv6} {
		if ip.IsValid() {
			w.released[ip] = release{at: w.Now, identity: w.identity[pn.Key]}
		}
	}
	w.apply(a, planner.Result{})
	return nil
}

func (w *World) publish(a planner.Action) { w.apply(a, planner.Result{}) }

// apply records what the action did to the ENIs and the node
// (planner.Apply). The vSwitch pools are the cloud's own (alloc, free):
// the model decides what a call returns, the planner's effects what it
// leaves behind.
func (w *World) apply(a planner.Action, r planner.Result) {
	st := planner.Apply(observed.State{ENIs: w.ENIs, Node: w.Node}, a, r)
	w.ENIs, w.Node = st.ENIs, st.Node
}

// checkGroups checks that a pod set up on e asks for e's security groups
// (the pod's entry, as desired.Config.SecurityGroupsFor reads it).
func (w *World) checkGroups(k observed.AttachmentKey, e *observed.ENI) {
	i := slices.IndexFunc(w.Desired.Entries, func(x desired.Entry) bool { return x.Key() == k })
	if i < 0 {
		return
	}
	want, _, err := w.Desired.Config.SecurityGroupsFor(w.Desired.Entries[i])
	if err != nil || len(want) == 0 {
		return
	}
	if have := slices.Sorted(slices.Values(e.SecurityGroups)); !slices.Equal(have, want) {
		w.violate("pod %s set up on %s with security groups %v, asks for %v", k, e.ID, have, want)
	}
}

// GroupMismatches lists the kernel pods whose ENI's security groups differ
// from the set their entry asks for (empty when every pod is on its set),
// by attachment key.
func (w *World) GroupMismatches() map[observed.AttachmentKey]string {
	out := map[observed.AttachmentKey]string{}
	for _, p := range w.Node.Pods {
		i := slices.IndexFunc(w.ENIs, func(e observed.ENI) bool { return e.MAC == p.ENIMAC })
		if i < 0 {
			continue
		}
		n := len(w.Violations)
		w.checkGroups(p.Key, &w.ENIs[i])
		if len(w.Violations) > n {
			out[p.Key] = w.Violations[n]
		}
		w.Violations = w.Violations[:n]
	}
	return out
}

// checkPublished checks invariant 2 over Ready statuses and kernel pods.
func (w *World) checkPublished() {
	seen := map[netip.Addr]string{}
	for _, b := range w.Node.Published {
		if b.Phase != planner.PhaseReady {
			continue
		}
		for _, ip := range []netip.Addr{b.IPv4, b.IPv6} {
			if !ip.IsValid() {
				continue
			}
			if o, ok := seen[ip]; ok {
				w.violate("%s published Ready for both %s and %s", ip, o, b.Key)
			}
			seen[ip] = b.Key.String()
		}
	}
	seen = map[netip.Addr]string{}
	for _, p := range w.Node.Pods {
		for _, ip := range []netip.Addr{p.IPv4, p.IPv6} {
			if !ip.IsValid() {
				continue
			}
			if o, ok := seen[ip]; ok {
				w.violate("%s set up for both %s and %s", ip, o, p.Key)
			}
			seen[ip] = p.Key.String()
		}
	}
}
