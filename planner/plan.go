package planner

import (
	"net/netip"
	"slices"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
)

// Options are the inputs of Make that are not desired or observed state.
type Options struct {
	// Now is the time of the pass; the planner never reads the clock.
	Now time.Time
	// Memory is what the previous pass remembered (zero value on first start).
	Memory Memory
	// NodeName is shown in the rendered plan only.
	NodeName string
	// LeakGrace is how long an owned ENI may stay Available before it is
	// deleted when nothing adopts it (0: DefaultLeakGrace).
	LeakGrace time.Duration
	// ExhaustedFor is how long a vSwitch reported with no free address is
	// skipped when creating ENIs (0: DefaultExhaustedFor).
	ExhaustedFor time.Duration
	// AdmittedFor is how long a pod the kubelet admitted counts as demand
	// while it has never had an entry (0: DefaultAdmittedFor).
	AdmittedFor time.Duration
	// Unschedulable is when the node was first seen unschedulable
	// (cordoned or drained: its Node's spec.unschedulable, from the
	// Kubernetes link); zero while it is schedulable or nobody knows. With
	// pool.unschedulableRelease, the pool shrinks that long after it
	// (unschedulable.go).
	Unschedulable time.Time
	// Recycle is an earlier plan of the caller's that nothing reads any
	// more: not the caller, not what it handed the plan's actions or
	// statuses to (the agent's executor keeps detached copies,
	// Action.Detach). Make clears its Actions and Statuses and builds
	// this plan's in their arrays when they are large enough; the
	// recycled plan is then garbage. At a burst of 1,000 new pods the
	// actions alone are a megabyte a pass, allocated, zeroed and
	// collected: half of Make's time (issue 24). Zero: Make allocates.
	Recycle Plan
}

// Defaults for zero Options fields.
const (
	DefaultLeakGrace    = 5 * time.Minute
	DefaultExhaustedFor = 10 * time.Minute
	// DefaultRefusedFor is how long no ENI is created for a
	// security-group set the cloud refused (Memory.MarkRefusedGroups).
	DefaultRefusedFor = time.Minute
)

// Plan is one pass's decision: what to do, in which order, what to tell each
// pod, and what to remember. It is a value: rendering and executing it never
// changes it (only recycling it does, Options.Recycle).
type Plan struct {
	// Actions are in a valid execution order: every action's DependsOn names
	// only earlier actions. Actions without a dependency path between them
	// may run in parallel.
	Actions []Action
	// Statuses holds, for every entry (and every entry problem that names an
	// attachment), the status that answers it now, sorted by key.
	Statuses []PodStatus
	// Complete is false when the observation was partial; the plan then
	// holds no destructive action and creates nothing.
	Complete bool
	// Problems says why the plan is incomplete and what is wrong with the
	// config, one line each.
	Problems []string
	// Memory is the next memory. It is safe to persist at once, before the
	// actions run: every record in it is conservative (see docs/plan.md).
	Memory Memory
	// Pool summarises the shared-mode pool (in exclusive mode: ENIs).
	Pool PoolSummary
	// Sets summarises each security-group set's pool when the node has
	// more than the default set (nil otherwise): Pool is their sum.
	Sets []SetSummary
	// NodeName and InstanceID are copied from the inputs for display.
	NodeName   string
	InstanceID string
}

// PoolSummary counts pool units: pod addresses in shared mode (one unit is
// one address of every family the stack uses), ENIs in exclusive mode.
type PoolSummary struct {
	// Total is what is held now on attached owned ENIs.
	Total int `json:"total"`
	// Used is bound to a live attachment.
	Used int `json:"used"`
	// Idle is free and may be handed out now.
	Idle int `json:"idle"`
	// Cooldown is free but released too recently to hand out.
	Cooldown int `json:"cooldown"`
	// Sticky is held for a deleted sticky pod that may come back.
	Sticky int `json:"sticky"`
	// Waiting counts attachments that have no address yet.
	Waiting int `json:"waiting"`
	// Target is the total the pool is steering towards.
	Target int `json:"target"`
	// Capacity is the most the instance can hold under its limits.
	Capacity int `json:"capacity"`
	// Prefixes is how many /28 IPv4 prefixes the ENIs hold (their
	// addresses are counted in Total like secondary addresses).
	Prefixes int `json:"prefixes,omitempty"`
	// Surplus counts free IPv4 addresses of the kind eni.ipv4Allocation
	// no longer asks for (after a switch in place): not in Idle, handed
	// out only when no address of the right kind is free, released.
	Surplus int `json:"surplus,omitempty"`
	// Expected counts the pods the kubelet admitted that have no entry
	// yet and may still be coming (admitted.go): the pool keeps that many
	// idle (up to maxIdle) for them.
	Expected int `json:"expected,omitempty"`
}

// SetSummary is one security-group set's pool on the node.
type SetSummary struct {
	// Name is "default", the set's name in eni.securityGroupSets, or ""
	// for a set only pods' annotations name.
	Name string `json:"name,omitempty"`
	// SecurityGroups are the set's groups, sorted.
	SecurityGroups []string `json:"securityGroups"`
	// ENIs are the usable ENIs serving the set, sorted by device index.
	ENIs []string `json:"enis,omitempty"`
	// Pods counts the live attachments that ask for the set.
	Pods int `json:"pods"`
	PoolSummary
}

// ActionKind names what an action does.
type ActionKind string

// Action kinds.
const (
	CreateENI     ActionKind = "CreateENI"
	AttachENI     ActionKind = "AttachENI"
	AssignIPs     ActionKind = "AssignIPs"
	UnassignIPs   ActionKind = "UnassignIPs"
	DetachENI     ActionKind = "DetachENI"
	DeleteENI     ActionKind = "DeleteENI"
	ConfigureENI  ActionKind = "ConfigureENI"
	SetupPod      ActionKind = "SetupPod"
	TeardownPod   ActionKind = "TeardownPod"
	MoveENI       ActionKind = "MoveENI"
	ReturnENI     ActionKind = "ReturnENI"
	PublishStatus ActionKind = "PublishStatus"
	// UpdateENI changes an existing ENI in place: today its security
	// groups (ModifyNetworkInterfaceAttribute with SecurityGroups, the
	// complete new set). Its addresses and pods stay.
	UpdateENI ActionKind = "UpdateENI"
)

// Symbol is the rune the rendered plan prints before the action: '+'
// creates, '-' destroys, '~' changes in place.
func (k ActionKind) Symbol() rune {
	switch k {
	case CreateENI, AttachENI, AssignIPs, SetupPod, MoveENI:
		return '+'
	case UnassignIPs, DetachENI, DeleteENI, TeardownPod, ReturnENI:
		return '-'
	}
	return '~'
}

// Cloud reports whether the action is an ECS API call.
func (k ActionKind) Cloud() bool {
	switch k {
	case CreateENI, AttachENI, AssignIPs, UnassignIPs, DetachENI, DeleteENI, UpdateENI:
		return true
	}
	return false
}

// Destructive reports whether the action gives something up; such actions
// are never planned from an incomplete observation.
func (k ActionKind) Destructive() bool { return k.Symbol() == '-' }

// Reason explains an action or a status. Code is stable and typed for
// machines (metrics, tests); Text is for people.
type Reason struct {
	Code ReasonCode `json:"code"`
	Text string     `json:"text,omitempty"`
}

// ReasonCode is a stable, machine-readable reason.
type ReasonCode string

// Reason codes. The list is part of the JSON schema (docs/plan.schema.json).
const (
	// Pool and ENI reasons.
	ReasonPoolBelowMinIdle  ReasonCode = "pool-below-min-idle"
	ReasonPoolBelowMinTotal ReasonCode = "pool-below-min-total"
	ReasonPodsWaiting       ReasonCode = "pods-waiting"
	ReasonIdleAboveMax      ReasonCode = "idle-above-max"
	// ReasonNodeUnschedulable: the node has been unschedulable for
	// pool.unschedulableRelease; its idle pool goes (an action reason).
	ReasonNodeUnschedulable ReasonCode = "node-unschedulable"
	ReasonENIUnconfigured   ReasonCode = "eni-unconfigured"
	ReasonAdoptENI          ReasonCode = "adopt-available-eni"
	ReasonLeakedENI         ReasonCode = "leaked-eni"
	// Pod reasons.
	ReasonNewBinding     ReasonCode = "new-binding"
	ReasonStickyRestore  ReasonCode = "sticky-restore"
	ReasonKernelDiffers  ReasonCode = "kernel-differs"
	ReasonEntryGone      ReasonCode = "entry-gone"
	ReasonStatusOutdated ReasonCode = "status-outdated"
	// Status reasons (PodStatus.ReasonCode).
	ReasonReady             ReasonCode = "ready"
	ReasonWaitingForAttach  ReasonCode = "waiting-for-attach"
	ReasonWaitingForIPs     ReasonCode = "waiting-for-ips"
	ReasonWaitingCooldown   ReasonCode = "ips-in-cooldown"
	ReasonVSwitchExhausted  ReasonCode = "vswitch-exhausted"
	ReasonInstanceENILimit  ReasonCode = "instance-eni-limit"
	ReasonIPLimit           ReasonCode = "ip-limit"
	ReasonConfigInvalid     ReasonCode = "config-invalid"
	ReasonEntryInvalid      ReasonCode = "entry-invalid"
	ReasonAddressConflict   ReasonCode = "address-conflict"
	ReasonObservationFailed ReasonCode = "observation-incomplete"
	// ReasonNetNSRefused: the entry's netns is the node's own namespace or
	// not a network namespace at all; enid never sets a pod up there.
	ReasonNetNSRefused ReasonCode = "netns-refused"
	// ReasonNetNSGone: the entry's netns does not exist (its pod is gone
	// and its CNI DEL has not come): Pending within staleEntryTimeout,
	// then Failed with its addresses released (stale.go).
	ReasonNetNSGone ReasonCode = "netns-gone"
	// ReasonCloudUnreachable: degraded mode (the cloud cannot be observed)
	// and no idle address is left; growth waits for the cloud.
	ReasonCloudUnreachable ReasonCode = "cloud-unreachable"
	// ReasonSetupFailed: setting up the pod's network failed; retried.
	ReasonSetupFailed ReasonCode = "setup-failed"
	// ReasonInterfaceConflict: the pod's network namespace holds an
	// interface enid did not create where its own must go (the pod
	// Fails; retrying cannot help).
	ReasonInterfaceConflict ReasonCode = "interface-conflict"
	// ReasonVSwitchUnknown: no configured vSwitch of the zone can serve,
	// and some do not exist (named in the reason).
	ReasonVSwitchUnknown ReasonCode = "vswitch-unknown"
	// ReasonVSwitchFragmented: eni.ipv4Allocation is prefix and the
	// vSwitch refused a prefix (no aligned /28 free, Memory.Fragmented):
	// the pod waits until the mark expires.
	ReasonVSwitchFragmented ReasonCode = "vswitch-fragmented"
	// ReasonAllocationModeChanged: eni.ipv4Allocation changed in place;
	// free addresses of the old kind (whole prefixes, single secondary
	// addresses) go back as their pods go.
	ReasonAllocationModeChanged ReasonCode = "allocation-mode-changed"
	// ReasonSecurityGroupsInvalid: the pod's enid.dev/security-groups
	// annotation is not a valid set of security group IDs (the pod Fails).
	ReasonSecurityGroupsInvalid ReasonCode = "security-groups-invalid"
	// ReasonSGSetNoENISlot: the pod's security-group set needs an ENI and
	// every ENI slot of the instance (or eni.maxENIs) is taken by ENIs of
	// other sets; the pod waits until one empties and is released.
	ReasonSGSetNoENISlot ReasonCode = "sg-set-no-eni-slot"
	// ReasonSGSetENILimit: the pod's security-group set has the most
	// ENIs eni.maxENIsPerSet (or the set's maxENIs) allows, all full.
	ReasonSGSetENILimit ReasonCode = "sg-set-eni-limit"
	// ReasonSGSetSlotReclaim: an empty ENI of one set is released so that
	// a set whose pods wait for an ENI slot gets one (an action reason).
	ReasonSGSetSlotReclaim ReasonCode = "sg-set-slot-reclaim"
	// ReasonSecurityGroupsChanged: an ENI's set has new groups (the config
	// changed); the ENI is moved to them in place (UpdateENI).
	ReasonSecurityGroupsChanged ReasonCode = "security-groups-changed"
	// ReasonSecurityGroupsRefused: the cloud refused to create an ENI with
	// the pod's set of security groups (a group that does not exist, is of
	// another VPC, or is full: Memory.RefusedGroups); the pod Fails, and
	// no ENI of the set is created until the mark expires.
	ReasonSecurityGroupsRefused ReasonCode = "security-groups-refused"
)

// Action is one step of a plan. Only the parameters its Kind needs are set.
type Action struct {
	// ID is the action's index in Plan.Actions.
	ID   int        `json:"id"`
	Kind ActionKind `json:"kind"`
	// Target names what the action changes: an ENI ID ("new#<ID>" for an ENI
	// a CreateENI of this plan makes) or an attachment key.
	Target string `json:"target"`
	Reason Reason `json:"reason"`
	// DependsOn lists the IDs of actions that must succeed first.
	DependsOn []int `json:"dependsOn,omitempty"`
	// Urgent marks an action on a waiting pod's path: a cloud action it
	// needs (its address or its ENI), its setup (SetupPod, MoveENI), the
	// node actions the setup depends on and its Ready status. The executor
	// starts urgent actions before the others waiting for a slot (a live
	// pod never queues behind the statuses of entries that cannot be
	// served), and under throttling it runs urgent cloud actions and defers
	// the rest (topping up the idle pool, releasing surplus), which the
	// next pass plans again.
	Urgent bool `json:"urgent,omitempty"`
	// NotBefore, when set, is the earliest time the action may start: its
	// retry key backs off after failures (Memory.Backoffs, backoff.go).
	// The executor holds it, and what depends on it, until then; the
	// agent's next pass at that time (NextDeadline) plans it again.
	NotBefore time.Time `json:"notBefore,omitzero"`

	// ENIID is the ENI acted on, when it exists already.
	ENIID string `json:"eniID,omitempty"`
	// ENIRef is ID+1 of the CreateENI action of this plan whose ENI is
	// meant, 0 for none; the executor substitutes the created ENI's ID, MAC
	// (and, for ConfigureENI, its table from the device index).
	ENIRef         int               `json:"eniRef,omitempty"`
	MAC            string            `json:"mac,omitempty"`
	InstanceID     string            `json:"instanceID,omitempty"`
	VSwitchID      string            `json:"vSwitchID,omitempty"`
	SecurityGroups []string          `json:"securityGroups,omitempty"`
	Tags           map[string]string `json:"tags,omitempty"`
	// IPv4Count and IPv6Count are how many addresses CreateENI or AssignIPs
	// asks the cloud to choose.
	IPv4Count int `json:"ipv4Count,omitempty"`
	IPv6Count int `json:"ipv6Count,omitempty"`
	// IPv4 and IPv6 are explicit addresses (UnassignIPs).
	IPv4 []netip.Addr `json:"ipv4,omitempty"`
	IPv6 []netip.Addr `json:"ipv6,omitempty"`
	// IPv4PrefixCount is how many /28 IPv4 prefixes CreateENI or AssignIPs
	// asks the cloud to choose (at most 10 per call). An AssignIPs sets
	// either IPv4Count or IPv4PrefixCount, never both.
	IPv4PrefixCount int `json:"ipv4PrefixCount,omitempty"`
	// IPv4Prefixes are explicit /28 prefixes (UnassignIPs): released whole.
	IPv4Prefixes []netip.Prefix `json:"ipv4Prefixes,omitempty"`
	// ClientToken makes the cloud call idempotent; it is derived from
	// stable identity, so a replayed action has the same token.
	ClientToken string `json:"clientToken,omitempty"`
	// Table is the ENI's route table (Table of its device index); 0 with
	// ENIRef set means "the table of the device index the attach gives".
	Table     int        `json:"table,omitempty"`
	Gateway   netip.Addr `json:"gateway,omitzero"`
	GatewayV6 netip.Addr `json:"gatewayV6,omitzero"`
	MTU       int        `json:"mtu,omitempty"`
	// Prefix is the pod address with the vSwitch prefix length (MoveENI).
	Prefix netip.Prefix `json:"prefix,omitzero"`
	// PrefixV6 is the pod's IPv6 address with the vSwitch's IPv6 prefix
	// length (MoveENI on a dual-stack or IPv6 node).
	PrefixV6 netip.Prefix `json:"prefixV6,omitzero"`
	// HostRoutes are the destinations a MoveENI's pod reaches through its
	// service veth (via the node) rather than its ENI: the config's
	// serviceCIDRs and the node's own primary address (/32), only those of
	// the pod's families, sorted. The datapath installs exactly these and
	// removes any other it installed before.
	HostRoutes []netip.Prefix `json:"hostRoutes,omitempty"`
	// Pod is the attachment for SetupPod, TeardownPod, MoveENI, ReturnENI.
	Pod *PodTarget `json:"pod,omitempty"`
	// Status is what PublishStatus writes; nil means remove the status file
	// of Target (the attachment is gone).
	Status *PodStatus `json:"status,omitempty"`
}

// Detach returns a with what it points to copied: a plan cuts its
// statuses, their routes, its pod targets and its dependency lists from
// arrays it shares among its actions (slab.go, Plan.Statuses), so one
// action kept past its pass (waiting in the executor's lane, running)
// would keep all of them alive: a node that takes 5,000 entries at once
// kept hundreds of plans' status arrays, 1.7 GB (docs/benchmarks.md,
// "Memory and stale entries"). A detached action holds its own few
// hundred bytes.
func (a Action) Detach() Action {
	if a.Status != nil {
		st := *a.Status
		st.Routes = slices.Clone(st.Routes)
		a.Status = &st
	}
	if a.Pod != nil {
		p := *a.Pod
		a.Pod = &p
	}
	a.DependsOn = slices.Clone(a.DependsOn)
	return a
}

// PodTarget is the pod attachment a node action works on.
type PodTarget struct {
	Key       observed.AttachmentKey `json:"key"`
	Revision  string                 `json:"revision,omitempty"`
	Namespace string                 `json:"namespace,omitempty"`
	Name      string                 `json:"name,omitempty"`
	NetNS     string                 `json:"netns,omitempty"`
	IfName    string                 `json:"ifName,omitempty"`
	IPv4      netip.Addr             `json:"ipv4,omitzero"`
	IPv6      netip.Addr             `json:"ipv6,omitzero"`
	ENIID     string                 `json:"eniID,omitempty"`
	ENIMAC    string                 `json:"eniMAC,omitempty"`
	// Table is the ENI's route table the pod's rules point at (shared mode).
	Table     int                `json:"table,omitempty"`
	Bandwidth *desired.Bandwidth `json:"bandwidth,omitempty"`
	MTU       int                `json:"mtu,omitempty"`
}

// Status phases.
const (
	PhasePending = "Pending"
	PhaseReady   = "Ready"
	PhaseFailed  = "Failed"
)

// PodStatus is the answer to one attachment.
type PodStatus struct {
	Key        observed.AttachmentKey `json:"key"`
	Revision   string                 `json:"revision,omitempty"`
	Phase      string                 `json:"phase"`
	Reason     string                 `json:"reason,omitempty"`
	ReasonCode ReasonCode             `json:"reasonCode"`
	IPv4       netip.Addr             `json:"ipv4,omitzero"`
	IPv6       netip.Addr             `json:"ipv6,omitzero"`
	// PrefixBits is the IPv4 prefix length the pod's address carries (set
	// with IPv4 on a Ready status): the vSwitch's in exclusive mode (the
	// ENI's own address), 32 in shared mode.
	PrefixBits int `json:"prefixBits,omitempty"`
	// PrefixBitsV6 is the IPv6 address's prefix length (128).
	PrefixBitsV6 int `json:"prefixBitsV6,omitempty"`
	// Gateway and GatewayV6 are the pod's gateways: the link-local ones
	// the node answers in shared mode (observed.PodGatewayV4, V6), the
	// vSwitch's in exclusive mode.
	Gateway   netip.Addr `json:"gateway,omitzero"`
	GatewayV6 netip.Addr `json:"gatewayV6,omitzero"`
	// Routes are the pod's routes (a default route per family via its
	// gateway). A Ready status holds every address, prefix length, gateway
	// and route the pod's interface gets: publishing it decides nothing.
	Routes    []PodRoute `json:"routes,omitempty"`
	ENIID     string     `json:"eniID,omitempty"`
	ENIMAC    string     `json:"eniMAC,omitempty"`
	IfName    string     `json:"ifName,omitempty"`
	Exclusive bool       `json:"exclusive,omitempty"`
}

// PodRoute is one route of a pod's interface.
type PodRoute struct {
	Dst netip.Prefix `json:"dst"`
	GW  netip.Addr   `json:"gw,omitzero"`
}

// Empty reports whether the plan changes nothing.
func (p Plan) Empty() bool { return len(p.Actions) == 0 }

// CloudCalls counts the actions that are ECS API calls.
func (p Plan) CloudCalls() int {
	n := 0
	for _, a := range p.Actions {
		if a.Kind.Cloud() {
			n++
		}
	}
	return n
}

// NodeChanges counts the actions that change the node (kernel or status files).
func (p Plan) NodeChanges() int { return len(p.Actions) - p.CloudCalls() }
