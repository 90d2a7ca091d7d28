package planner

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strings"
	"time"
)

// This file answers "when is a failed action tried again, and what does its
// pod hear meanwhile?": one back-off policy over typed keys, kept in the
// planner's memory (Memory.Backoffs), learned from the executor's outcomes
// (Memory.Learn), shown on the plan's actions (Action.NotBefore) and in
// NextDeadline, so that the agent wakes when a backed-off action may run.
// The executor holds an action until its NotBefore and decides nothing.

// FailureClass is what kind of failure an Outcome reports: a fact of the
// error as package cloud or linux classified it, not a decision.
type FailureClass string

// Failure classes.
const (
	// FailThrottled: the cloud refused the call for the account's rate
	// (it did nothing); retryable.
	FailThrottled FailureClass = "throttled"
	// FailTransient: the call may succeed when repeated unchanged (a 5xx,
	// a transport error, another operation running; cloud.Retryable), or
	// a node action failed for a reason of its own (the kernel answered
	// an error).
	FailTransient FailureClass = "transient"
	// FailTerminal: the cloud answered a failure that repeating the call
	// soon will not mend (a refusal, a limit, a state conflict); Outcome's
	// NoAddresses, GroupsRefused and Definite say more when known.
	FailTerminal FailureClass = "terminal"
	// FailNotFound: what the action acts on does not exist (an ENI in the
	// cloud; a pod's network namespace or an ENI's device on the node).
	FailNotFound FailureClass = "not-found"
	// FailConflict: the pod's network namespace holds an interface enid
	// did not create where its own must go (linux.ErrConflict).
	FailConflict FailureClass = "conflict"
	// FailNetNSRefused: the pod's netns turned out to be the node's own or
	// not a network namespace (linux.ErrNodeNetNS, linux.ErrNotNetNS).
	FailNetNSRefused FailureClass = "netns-refused"
)

// Retryable reports whether a failure of class c of an action of kind k
// backs off briefly (200 ms doubling to 30 s) rather than long (5 s
// doubling to 2 min): a cloud call that was throttled or may succeed when
// repeated (cloud.Retryable), and a node action that failed other than
// by a conflict (the kernel's answers change quickly; a conflict is
// undone only by kubelet's DEL and a new sandbox).
func (c FailureClass) Retryable(k ActionKind) bool {
	if k.Cloud() {
		return c == FailThrottled || c == FailTransient
	}
	return c != FailConflict
}

// The back-off policy: the n-th failure in a row of one key waits
// min(limit, base·2^(n-1)), jittered into its upper half.
const (
	retryBase, retryLimit       = 200 * time.Millisecond, 30 * time.Second
	terminalBase, terminalLimit = 5 * time.Second, 2 * time.Minute
)

// BackoffDelay is how long the n-th failure in a row (n >= 1) of key
// waits: min(limit, base·2^(n-1)) (base and limit as Retryable says),
// jittered into [d/2, d]. The jitter is a hash of the key, n and the
// failure's time at: deterministic (a script's plan is the same every
// run), yet nodes that fail on one key together (the creates of a fleet in
// one vSwitch) never end at the same nanosecond, so they spread.
func BackoffDelay(key RetryKey, n int, retryable bool, at time.Time) time.Duration {
	base, limit := retryBase, retryLimit
	if !retryable {
		base, limit = terminalBase, terminalLimit
	}
	d := min(limit, base<<min(max(n, 1)-1, 10))
	h := fnv.New64a()
	h.Write([]byte(key.String()))
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(n))
	binary.BigEndian.PutUint64(b[8:], uint64(at.UnixNano()))
	h.Write(b[:])
	return d/2 + time.Duration(h.Sum64()%uint64(d/2+1))
}

// RetryScope says what a RetryKey names.
type RetryScope int

const (
	// RetryNode: a node action, by kind and target.
	RetryNode RetryScope = iota
	// RetryENI: any cloud action on one existing ENI, by ENI ID.
	RetryENI
	// RetryCreateIn: the creates in one vSwitch (ID) with one set of
	// security groups (Groups).
	RetryCreateIn
	// RetryUpdate: the updates of one ENI (ID) to one set of groups.
	RetryUpdate
	// RetryCloud: a cloud action that names no ENI yet (it acts on the
	// ENI a create of its plan makes), by kind and target.
	RetryCloud
)

// RetryKey is what one back-off is kept for (RetryKeyOf).
type RetryKey struct {
	Scope RetryScope
	// Kind is a node or RetryCloud action's kind.
	Kind ActionKind
	// ID is the node target, ENI ID or vSwitch ID, as Scope says; Groups
	// is a security-group set (GroupsKey).
	ID, Groups string
}

// RetryKeyOf is the key of an action's back-off. A CreateENI backs off per
// vSwitch and security-group set, since its token changes after a definite
// failure and the new token must not escape the back-off; an UpdateENI per
// ENI and target groups. The groups are in both keys because a failure can
// be the groups' own (a group the cloud does not know, named by a pod's
// annotation or a typo in the config): it must hold back neither another
// set's ENIs in the vSwitch nor the corrected update of the ENI. What fails
// for every set in a vSwitch (no address left) is an exhausted vSwitch in
// memory, not this key. Other cloud actions back off per ENI, node actions
// per kind and target.
func RetryKeyOf(a Action) RetryKey {
	switch {
	case a.Kind == CreateENI:
		return RetryKey{Scope: RetryCreateIn, ID: a.VSwitchID, Groups: GroupsKey(a.SecurityGroups)}
	case a.Kind == UpdateENI:
		return RetryKey{Scope: RetryUpdate, ID: a.ENIID, Groups: GroupsKey(a.SecurityGroups)}
	case a.Kind.Cloud() && a.ENIID != "":
		return RetryKey{Scope: RetryENI, ID: a.ENIID}
	case a.Kind.Cloud():
		return RetryKey{Scope: RetryCloud, Kind: a.Kind, ID: a.Target}
	}
	return RetryKey{Scope: RetryNode, Kind: a.Kind, ID: a.Target}
}

// String renders the key for logs, plans and memory.json: "eni/eni-1",
// "create-in/vsw-1/sg-a,sg-b", "update/eni-1/sg-a", "SetupPod/c1_eth0"
// (node and RetryCloud keys by kind).
func (k RetryKey) String() string {
	switch k.Scope {
	case RetryENI:
		return "eni/" + k.ID
	case RetryCreateIn:
		return "create-in/" + k.ID + "/" + k.Groups
	case RetryUpdate:
		return "update/" + k.ID + "/" + k.Groups
	}
	return string(k.Kind) + "/" + k.ID
}

// MarshalText writes the key as String does (a key of Memory.Backoffs in
// memory.json).
func (k RetryKey) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads what MarshalText wrote. No action kind is named
// "eni", "create-in" or "update", so the first word tells the scope.
func (k *RetryKey) UnmarshalText(b []byte) error {
	head, rest, ok := strings.Cut(string(b), "/")
	if !ok {
		return fmt.Errorf("retry key %q: no scope", b)
	}
	switch head {
	case "eni":
		*k = RetryKey{Scope: RetryENI, ID: rest}
	case "create-in", "update":
		id, groups, _ := strings.Cut(rest, "/")
		*k = RetryKey{Scope: RetryCreateIn, ID: id, Groups: groups}
		if head == "update" {
			k.Scope = RetryUpdate
		}
	default:
		kind := ActionKind(head)
		if _, known := kindChecks[kind]; !known {
			return fmt.Errorf("retry key %q: unknown scope or kind %q", b, head)
		}
		*k = RetryKey{Scope: RetryNode, Kind: kind, ID: rest}
		if kind.Cloud() {
			k.Scope = RetryCloud
		}
	}
	return nil
}

// Backoff is one key's back-off after failures in a row.
type Backoff struct {
	// Failures counts the failures in a row (a success drops the record).
	Failures int `json:"failures"`
	// Until is when the key's actions may run again.
	Until time.Time `json:"until"`
	// Class and Err are the last failure's class and error text.
	Class FailureClass `json:"class,omitempty"`
	Err   string       `json:"err,omitempty"`
	// Revision is, for a pod's setup (SetupPod, MoveENI), the entry
	// revision whose setup failed: the pod's status carries the failure
	// while that revision waits (failureStatus).
	Revision string `json:"revision,omitempty"`
}

// backoffAfter returns m's record for key after a failure of o at, and
// m with it (m is the caller's own copy).
func (m *Memory) backoffAfter(key RetryKey, o Outcome, at time.Time) Backoff {
	b := m.Backoffs[key]
	b.Failures++
	b.Until = at.Add(BackoffDelay(key, b.Failures, o.Class.Retryable(o.Action.Kind), at))
	b.Class, b.Err = o.Class, o.Err
	b.Revision = ""
	if p := o.Action.Pod; p != nil {
		b.Revision = p.Revision
	}
	if m.Backoffs == nil {
		m.Backoffs = map[RetryKey]Backoff{}
	}
	m.Backoffs[key] = b
	return b
}

// NotBefore is when action a may start under m's back-offs at now: the end
// of its retry key's back-off, or zero when it may start now (Make sets it
// on the plan's actions as Action.NotBefore).
func (m Memory) NotBefore(a Action, now time.Time) time.Time {
	if b, ok := m.Backoffs[RetryKeyOf(a)]; ok && now.Before(b.Until) {
		return b.Until
	}
	return time.Time{}
}

// holdBackedOff sets NotBefore on every action of the plan whose key backs
// off past now, and drops the back-offs no later pass needs: a node
// action's that this plan no longer asks for (its pod was deleted), which
// would stay for ever and keep waking the loop, and a cloud action's once
// it has run out and the plan does not ask for it. A key the plan asks for
// keeps its record, run out or not, so that its next failure backs off
// longer.
func (b *builder) holdBackedOff() {
	if len(b.mem.Backoffs) == 0 {
		return
	}
	planned := make(map[RetryKey]bool, len(b.mem.Backoffs))
	for i := range b.plan.Actions {
		a := &b.plan.Actions[i]
		key := RetryKeyOf(*a)
		bo, ok := b.mem.Backoffs[key]
		if !ok {
			continue
		}
		planned[key] = true
		if b.now.Before(bo.Until) {
			a.NotBefore = bo.Until
		}
	}
	for k, bo := range b.mem.Backoffs {
		if !planned[k] && (k.Scope == RetryNode || !b.now.Before(bo.Until)) {
			delete(b.mem.Backoffs, k)
		}
	}
	if len(b.mem.Backoffs) == 0 {
		b.mem.Backoffs = nil
	}
}

// failureStatus is the answer for a pod whose setup (SetupPod, MoveENI)
// failed and backs off, or nil: Pending with the error, so that a
// CNI ADD that times out reports the real reason, while a later pass
// retries; Failed when retrying cannot help the ADD waiting (an interface
// enid did not create is in the way: the ADD fails at once with the
// reason, and kubelet's DEL and new sandbox start afresh) or the netns
// turned out to be one enid refuses (as the pod-netns guard would have
// refused it). Only the revision whose setup failed hears of it.
func (b *builder) failureStatus(p *podState, setup *Action) *PodStatus {
	if len(b.mem.Backoffs) == 0 {
		return nil // most passes: no key to build
	}
	bo, ok := b.mem.Backoffs[RetryKeyOf(*setup)]
	if !ok || bo.Revision != p.entry.Revision {
		return nil
	}
	switch bo.Class {
	case FailConflict:
		return b.failStatus(p, ReasonInterfaceConflict, "the pod's network namespace holds an interface enid did not create: "+bo.Err)
	case FailNetNSRefused:
		return b.failStatus(p, ReasonNetNSRefused, bo.Err)
	}
	return b.waitStatus(p, ReasonSetupFailed, "setting up the pod network failed, retrying: "+bo.Err)
}
