package planner

import (
	"cmp"
	"encoding/binary"
	"hash/fnv"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
)

// tableBase is added to an ENI's device index to name its route table.
const tableBase = 1000

// Cloud call limits.
const (
	maxAssignPerCall = 10 // Assign/Unassign: 1..10 addresses per call
	maxIPsAtCreate   = 49 // CreateNetworkInterface SecondaryPrivateIpAddressCount
	// maxIPv6AtCreate: CreateNetworkInterface Ipv6AddressCount takes 1..10
	// (Alibaba's API model, ecs-20140526/v7; the Terraform provider
	// validates the same): an ENI that needs more gets them assigned once
	// attached.
	maxIPv6AtCreate = 10
)

// Make computes the plan that brings o towards d. It is DESIGN.md's
// planner.Plan (a function cannot share the name of the Plan type). It is
// pure and deterministic: the same inputs give the same plan.
func Make(d desired.State, o observed.State, opt Options) Plan {
	sc := scratchPool.Get().(*scratch)
	b := newBuilder(d, o, opt, sc)
	b.shared()
	p := b.finish()
	sc.release()
	return p
}

// recycle returns the arrays of a plan nobody reads any more
// (Options.Recycle), cleared and empty, for the next plan's actions and
// statuses. Clearing the lengths clears all an earlier plan wrote: Make
// only appends to them, and the part beyond a length was cleared when
// the plan that wrote it was recycled, or never written.
func recycle(p Plan) ([]Action, []PodStatus) {
	clear(p.Actions)
	clear(p.Statuses)
	return p.Actions[:0], p.Statuses[:0]
}

// builder holds one pass's working state. Its methods append actions in a
// valid execution order.
type builder struct {
	d   desired.State
	o   observed.State
	opt Options
	now time.Time
	cfg desired.Config
	mem Memory
	// unseenNow holds the Memory.Unseen addresses met in this pass; the
	// others are dropped when it ends.
	unseenNow map[netip.Addr]bool

	v4, v6 bool // families pods get
	// addrIdx lists the pod addresses of usable ENIs, sorted, with who
	// holds each during planning.
	addrIdx []addrRef
	// excl is exclusive-ENI mode: one unit is a whole ENI, named by its
	// primary address (and first IPv6).
	excl bool
	// hostRoutes are exclusive pods' routes through the node (hostroutes.go).
	hostRoutes hostRoutes

	plan     Plan
	complete bool
	// expected counts the admitted pods that are demand about to arrive
	// (noteAdmitted).
	expected int
	// bindable: idle addresses may be handed out. True when complete, and
	// in degraded mode (the cloud half carried from the last complete
	// observation, the node half fresh): who holds an address is known
	// from the node alone, and the carried view holds only addresses the
	// node provably owns. Nothing is destroyed or grown until complete.
	bindable bool

	// ENIs by role.
	usable   []*eniState // owned, InUse on this instance, sorted by device index then ID
	byID     map[string]*eniState
	byMAC    map[string]*eniState
	inflight []*observed.ENI // owned, Attaching to this instance
	avail    []*observed.ENI // owned, Available
	attached int             // ENIs attached or attaching to the instance, primary included
	owned    int             // owned ENIs seen (any state)

	devices map[string]observed.ENIDevice
	vsw     map[string]observed.VSwitch

	pods []*podState // live entries, sorted by key
	// gone are the entries whose network namespace is missing (stale.go),
	// sorted by key: not in pods, they are torn down and released as gone
	// attachments, but keep a status. goneKeys indexes them.
	gone        []*podState
	goneKeys    map[observed.AttachmentKey]bool
	problemKeys map[observed.AttachmentKey]bool
	runtime     map[observed.AttachmentKey]bool
	// deleted are the attachments the runtime deleted (desired.State.Deleted):
	// a runtime record never keeps them.
	deleted map[observed.AttachmentKey]bool
	// kernel and pubs are the node's pod states and published statuses,
	// sorted by key (the caller's slices are never reordered).
	kernel []observed.PodNet
	pubs   []observed.Binding
	// kernelPod[i] and pubPod[i] are the live pods of kernel[i] and
	// pubs[i] (nil: no entry wants the attachment).
	kernelPod []*podState
	pubPod    []*podState

	// stickyHolders are the key strings named by sticky reservations: their
	// addresses are held for the pod's return, not cooled down.
	stickyHolders map[string]bool
	// staleTeardown maps a stale key to its TeardownPod/ReturnENI action ID.
	staleTeardown map[observed.AttachmentKey]int

	// Security-group sets (sgset.go): every set on the node, the set
	// the pool code is narrowed to now (nil outside), the ENIs of the
	// other sets, and the ENIs earlier sets of this plan attach.
	sets        []*sgSet
	setByKey    map[string]*sgSet
	cur         *sgSet
	otherENIs   int
	plannedENIs int
	// plannedCreates counts the CreateENI actions of earlier sets in this
	// plan (createParts): adoptions take a slot but are no creates, and
	// counting them would move a later set's token in the next pass.
	plannedCreates int

	// blocked is moveBlocked's view while bindShared restores sticky
	// pods (nil otherwise): the ENIs a bound pod keeps on their groups.
	blocked map[*eniState]bool

	// routes, statuses, targets and deps hold the routes of the plan's
	// Ready statuses, PublishStatus's statuses, the pods of setups and
	// their statuses' dependencies (slab.go).
	routes   slab[PodRoute]
	statuses slab[PodStatus]
	targets  slab[PodTarget]
	deps     slab[int]

	// sc is the pass's working memory, reused from an earlier plan
	// (scratch.go).
	sc *scratch
}

// eniState is an attached owned ENI during planning.
type eniState struct {
	eni   *observed.ENI
	free4 []netip.Addr // unheld, not cooling down, in hand-out order (orderFree)
	free6 []netip.Addr
	// spare4 are free IPv4 addresses of the kind the allocation no longer
	// asks for (surplus): handed out last, released at once.
	spare4 []netip.Addr
	// lastCall is ID+1 of the last address call (assign, unassign)
	// planned on the ENI in this pass, 0 for none: calls on one ENI are
	// chained, as ECS refuses concurrent changes to one ENI.
	lastCall int
	// dropped: this plan detaches and deletes the ENI (dropENI); nothing
	// else may be planned on it, as that would run beside the detach.
	dropped     bool
	used        int // live bindings
	held        int // sticky, stale or cooling addresses (units)
	configureID int // ConfigureENI action ID, -1 when none
	gw, gw6     netip.Addr
	bits        int // vSwitch prefix length
	bits6       int // vSwitch IPv6 prefix length (0: no IPv6 CIDR)

	// Security-group sets (sgset.go): the set the ENI serves, its units
	// cooling down, and its UpdateENI action's ID+1 (0: none).
	set       *sgSet
	cooling   int
	updateRef int
	// own and target are the ENI's groups and the groups of the set its
	// tag names, sorted, with their keys.
	own, target       []string
	ownKey, targetKey string
	// stuck: the ENI is in its tag's set but the cloud's refusal of that
	// set's groups holds (Memory.RefusedGroups): no UpdateENI is planned
	// and no pod is newly placed on it until the refusal ends.
	stuck bool
}

func (e *eniState) table() int { return Table(e.eni.DeviceIndex) }

// podState is one live entry.
type podState struct {
	entry   *desired.Entry
	key     observed.AttachmentKey
	sticky  string // sticky identity, "" when not sticky
	ipv4    netip.Addr
	ipv6    netip.Addr
	eni     *eniState
	source  ReasonCode // how the binding was found (new, sticky, ...)
	deps    []int      // actions the pod's setup must wait for
	status  *PodStatus // set when the pod cannot be served
	waitFor string     // what a waiting pod waits for
	waitRC  ReasonCode
	h       holder            // the pod's hold on its addresses
	kn      *observed.PodNet  // the pod's kernel state, nil when none
	pub     *observed.Binding // the pod's published status, nil when none
	set     *sgSet            // the security-group set the pod asks for
	// goneSince is when the pod's network namespace was first seen
	// missing (zero: it exists; stale.go).
	goneSince time.Time
}

// holder says who holds an address during planning.
type holder struct {
	key  observed.AttachmentKey
	kind holdKind
	pod  *podState // live holders
}

type holdKind int

const (
	holdLive   holdKind = iota // a live entry
	holdKeep                   // no usable entry, but kept (entry problem, runtime record)
	holdStale                  // gone: torn down, then cooling down
	holdSticky                 // held for a deleted sticky pod
)

func newBuilder(d desired.State, o observed.State, opt Options, sc *scratch) *builder {
	b := &builder{
		d: d, o: o, opt: opt, now: opt.Now, cfg: d.Config, sc: sc,
		mem:           opt.Memory.clone(),
		complete:      o.Complete,
		bindable:      o.Complete || (!o.CloudFrom.IsZero() && o.NodeComplete),
		byID:          map[string]*eniState{},
		byMAC:         map[string]*eniState{},
		devices:       map[string]observed.ENIDevice{},
		vsw:           map[string]observed.VSwitch{},
		staleTeardown: map[observed.AttachmentKey]int{},
	}
	// Options.Recycle's arrays, cleared: nothing appends a status before
	// newPods, which sizes the statuses.
	b.plan.Actions, b.plan.Statuses = recycle(opt.Recycle)
	b.opt.Recycle = Plan{}
	if b.opt.LeakGrace <= 0 {
		b.opt.LeakGrace = DefaultLeakGrace
	}
	if b.opt.ExhaustedFor <= 0 {
		b.opt.ExhaustedFor = DefaultExhaustedFor
	}
	switch b.cfg.IPStack {
	case desired.DualStack:
		b.v4, b.v6 = true, true
	case desired.IPv6Only:
		b.v6 = true
	default:
		b.v4 = true
	}
	b.plan.Complete = o.Complete
	b.plan.NodeName = opt.NodeName
	b.plan.InstanceID = o.Instance.ID
	b.noteProblems(d, o)
	b.mem.prune(b.now)

	for _, v := range o.VSwitches {
		b.vsw[v.ID] = v
	}
	b.liftExhausted()
	for _, dev := range o.Node.ENIDevices {
		b.devices[dev.MAC] = dev
	}
	b.classifyENIs(o)
	b.excl = d.Config.Mode == desired.ModeExclusiveENI
	if b.excl {
		b.hostRoutes = exclusiveHostRoutes(d.Config, o)
		if len(d.Config.ServiceCIDRs) == 0 {
			b.plan.Problems = append(b.plan.Problems, noServiceCIDRs)
		}
		b.plan.Problems = append(b.plan.Problems, overlapProblems(d.Config, o.VSwitches)...)
	}
	b.indexAddrs()
	// Forget leak stamps of ENIs that are no longer Available.
	for id := range b.mem.LeakedSince {
		if !slices.ContainsFunc(b.avail, func(e *observed.ENI) bool { return e.ID == id }) {
			delete(b.mem.LeakedSince, id)
		}
	}

	b.newPods(d)
	b.expected = b.noteAdmitted()
	b.splitGone(o)
	b.indexEntryFacts(d)
	b.kernel = sortedBy(o.Node.Pods, kernelKey)
	b.pubs = sortedBy(o.Node.Published, pubKey)
	// Join pods with their kernel state and published status in one walk
	// over the sorted lists.
	b.kernelPod, b.pubPod = b.sc.joins(len(b.kernel), len(b.pubs))
	join(b.pods, b.kernel, kernelKey, func(p *podState, j int) { p.kn, b.kernelPod[j] = &b.kernel[j], p })
	join(b.pods, b.pubs, pubKey, func(p *podState, j int) { p.pub, b.pubPod[j] = &b.pubs[j], p })
	return b
}

// noteProblems copies the observation's and the config's problems into the
// plan.
func (b *builder) noteProblems(d desired.State, o observed.State) {
	b.plan.Problems = append(b.plan.Problems, o.Problems...)
	for _, p := range d.ConfigProblems {
		b.plan.Problems = append(b.plan.Problems, "config: "+p)
	}
	for _, id := range o.UnknownVSwitches {
		// Named by the config or by an observed ENI; skipped either way,
		// and the others serve.
		b.plan.Problems = append(b.plan.Problems, "vSwitch "+id+" does not exist (DescribeVSwitches): skipped")
	}
}

// classifyENIs counts the instance's attached ENIs and sorts the owned
// secondary ones into usable (in use here, by device index), in flight
// (attaching) and available, and indexes the usable ones.
func (b *builder) classifyENIs(o observed.State) {
	inst := o.Instance.ID
	for i := range o.ENIs {
		e := &o.ENIs[i]
		if e.InstanceID == inst && inst != "" && e.Status != observed.ENIAvailable {
			b.attached++
		}
		if e.ID == o.Instance.PrimaryENI || !e.Owned(inst) {
			continue
		}
		b.owned++
		switch {
		case e.Status == observed.ENIInUse && e.InstanceID == inst:
			s := &eniState{eni: e, configureID: -1}
			if v, ok := b.vsw[e.VSwitchID]; ok {
				s.gw, s.bits = v.Gateway(), v.CIDR.Bits()
				if v.IPv6CIDR.IsValid() {
					s.gw6, s.bits6 = v.GatewayV6(), v.IPv6CIDR.Bits()
				}
			}
			b.usable = append(b.usable, s)
		case e.Status == observed.ENIAttaching && e.InstanceID == inst:
			b.inflight = append(b.inflight, e)
		case e.Status == observed.ENIAvailable:
			b.avail = append(b.avail, e)
		}
	}
	slices.SortFunc(b.usable, func(x, y *eniState) int {
		return cmp.Or(cmp.Compare(x.eni.DeviceIndex, y.eni.DeviceIndex), cmp.Compare(x.eni.ID, y.eni.ID))
	})
	for i, s := range b.usable {
		// Route tables are keyed on the device index (docs/design.md, "The
		// route table of an ENI"): ECS gives each attachment of an
		// instance its own slot, and 0 is the primary's. Should that ever
		// not hold, say so rather than share a table in silence.
		switch {
		case s.eni.DeviceIndex <= 0:
			b.plan.Problems = append(b.plan.Problems, "ENI "+s.eni.ID+" reports device index "+itoa(s.eni.DeviceIndex)+": its route table "+itoa(s.table())+" may be another's")
		case i > 0 && b.usable[i-1].eni.DeviceIndex == s.eni.DeviceIndex:
			b.plan.Problems = append(b.plan.Problems, "ENIs "+b.usable[i-1].eni.ID+" and "+s.eni.ID+" report the same device index "+itoa(s.eni.DeviceIndex)+": they share route table "+itoa(s.table()))
		}
	}
	for _, s := range b.usable {
		b.byID[s.eni.ID] = s
		b.byMAC[s.eni.MAC] = s
	}
}

// newPods makes one podState per entry (from the scratch: no allocation
// once a pass of this size ran), sorted by key with duplicates dropped, and
// sizes the plan's statuses.
func (b *builder) newPods(d desired.State) {
	arr, list := b.sc.podStates(len(d.Entries))
	b.pods = list
	for i := range d.Entries {
		e := &d.Entries[i]
		// Fields, not a whole podState: arr is zeroed, and a
		// 288-byte copy into the heap runs the write barrier over every
		// pointer slot while the collector marks (most of a pass here).
		p := &arr[i]
		p.entry, p.key = e, e.Key()
		if e.WantsStickyIP() && b.cfg.StickyIPHold > 0 {
			p.sticky = e.PodNamespace + "/" + e.PodName + "/" + e.IfName
		}
		b.pods = append(b.pods, p)
	}
	if !slices.IsSortedFunc(b.pods, func(x, y *podState) int { return cmpKey(x.key, y.key) }) {
		slices.SortStableFunc(b.pods, func(x, y *podState) int { return cmpKey(x.key, y.key) })
	}
	b.pods = slices.CompactFunc(b.pods, func(x, y *podState) bool { return x.key == y.key })
	if n := len(b.pods) + len(d.EntryProblems); cap(b.plan.Statuses) < n {
		b.plan.Statuses = make([]PodStatus, 0, n)
	}
	// Actions are reserved where their number is known (bindShared,
	// podActions): a converged node plans none, and 500 reserved here
	// were a quarter of its plan's bytes.
}

// indexEntryFacts indexes what keeps or ends attachments without a live
// entry: entry problems, deletion records, the runtime's records and sticky
// reservations.
func (b *builder) indexEntryFacts(d desired.State) {
	for _, ep := range d.EntryProblems {
		if ep.ContainerID != "" {
			if b.problemKeys == nil {
				b.problemKeys = map[observed.AttachmentKey]bool{}
			}
			b.problemKeys[ep.Key()] = true
		}
	}
	for _, k := range d.Deleted {
		if b.deleted == nil {
			b.deleted = map[observed.AttachmentKey]bool{}
		}
		b.deleted[k] = true
	}
	for _, r := range d.Hints.RuntimeAttachments {
		if b.runtime == nil {
			b.runtime = map[observed.AttachmentKey]bool{}
		}
		b.runtime[observed.AttachmentKey{ContainerID: r.ContainerID, IfName: r.IfName}] = true
	}
	b.stickyHolders = map[string]bool{}
	for _, r := range b.mem.Sticky {
		if r.Key != "" {
			b.stickyHolders[r.Key] = true
		}
	}
}

func cmpKey(a, b observed.AttachmentKey) int {
	if c := strings.Compare(a.ContainerID, b.ContainerID); c != 0 {
		return c
	}
	return strings.Compare(a.IfName, b.IfName)
}

// add appends an action, fills its ID and returns it.
func (b *builder) add(a Action) int {
	a.ID = len(b.plan.Actions)
	if len(a.DependsOn) > 1 {
		slices.Sort(a.DependsOn)
		a.DependsOn = slices.Compact(a.DependsOn)
	}
	b.plan.Actions = append(b.plan.Actions, a)
	return a.ID
}

// kept reports whether an attachment without an entry is kept alive: a file
// still names it (an entry that cannot be parsed), or the runtime still has
// a record of it and did not delete it. A CNI DEL is authoritative: its
// deletion record overrides the runtime's record, which libcni removes only
// after DEL returns. An entry that vanished without a DEL is kept while the
// runtime's record lasts (the agent watches the runtime's cache directory,
// so the record's removal wakes it).
func (b *builder) kept(k observed.AttachmentKey) bool {
	return b.problemKeys[k] || (b.runtime[k] && !b.deleted[k])
}

// destroyOK reports whether destructive actions may be planned.
func (b *builder) destroyOK() bool { return b.complete }

// token derives a ClientToken (<= 64 ASCII characters) from stable identity.
func token(kind string, parts ...string) string {
	h := fnv.New128a()
	for _, p := range parts {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	s := h.Sum(nil)
	const hexd = "0123456789abcdef"
	out := make([]byte, 0, 6+len(kind)+32)
	out = append(out, "enid-"...)
	out = append(out, kind...)
	out = append(out, '-')
	for _, c := range s {
		out = append(out, hexd[c>>4], hexd[c&15])
	}
	return string(out)
}

func itoa(n int) string { return strconv.Itoa(n) }

// finish completes the plan: statuses sorted, backed-off actions held
// (holdBackedOff), memory pruned.
func (b *builder) finish() Plan {
	for ip := range b.mem.Unseen {
		if !b.unseenNow[ip] {
			delete(b.mem.Unseen, ip)
		}
	}
	b.sortStatuses()
	b.holdBackedOff()
	b.mem.prune(b.now)
	b.mem.Version = MemoryVersion
	for _, a := range b.plan.Actions {
		if a.Kind.Cloud() && a.Kind.Destructive() {
			b.mem.Epoch++
			break
		}
	}
	b.plan.Memory = b.mem
	return b.plan
}

// sortStatuses sorts the plan's statuses by key. They usually are sorted
// (pods are, and come first), and then they stay where they are: the
// PublishStatus actions point to them (publishAs). Otherwise every action
// gets its own copy of its status first, as sorting moves them.
func (b *builder) sortStatuses() {
	l := b.plan.Statuses
	strict := true // no two keys equal: sorting would leave every status in place
	for i := 1; i < len(l) && strict; i++ {
		strict = cmpKey(l[i-1].Key, l[i].Key) < 0
	}
	if strict {
		return
	}
	acts := b.plan.Actions
	b.statuses.expect(len(acts))
	for i := range acts {
		if acts[i].Status != nil {
			acts[i].Status = b.statuses.new(*acts[i].Status)
		}
	}
	slices.SortFunc(l, func(x, y PodStatus) int { return cmpKey(x.Key, y.Key) })
}

const rfc3339 = time.RFC3339

// sortedBy returns l sorted by key, cloning it only when it is not sorted
// already (observed lists usually are).
func sortedBy[T any](l []T, key func(T) observed.AttachmentKey) []T {
	c := func(x, y T) int { return cmpKey(key(x), key(y)) }
	if slices.IsSortedFunc(l, c) {
		return l
	}
	l = slices.Clone(l)
	slices.SortStableFunc(l, c)
	return l
}

// find returns the element of sorted l with key k.
func find[T any](l []T, k observed.AttachmentKey, key func(T) observed.AttachmentKey) (*T, bool) {
	i, ok := slices.BinarySearchFunc(l, k, func(x T, k observed.AttachmentKey) int { return cmpKey(key(x), k) })
	if !ok {
		return nil, false
	}
	return &l[i], true
}

func podKey(p *podState) observed.AttachmentKey          { return p.key }
func kernelKey(p observed.PodNet) observed.AttachmentKey { return p.Key }
func pubKey(p observed.Binding) observed.AttachmentKey   { return p.Key }

// pod returns the live pod with key k, or nil.
func (b *builder) pod(k observed.AttachmentKey) *podState {
	if p, ok := find(b.pods, k, podKey); ok {
		return *p
	}
	return nil
}

// join calls f for every pod whose key appears in the sorted list l, with
// the index of that element.
func join[T any](pods []*podState, l []T, key func(T) observed.AttachmentKey, f func(*podState, int)) {
	i := 0
	for j := range l {
		k := key(l[j])
		for i < len(pods) && cmpKey(pods[i].key, k) < 0 {
			i++
		}
		if i < len(pods) && pods[i].key == k {
			f(pods[i], j)
		}
	}
}
