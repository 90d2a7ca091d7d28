package planner

import (
	"maps"
	"net/netip"
	"time"
)

// MemoryVersion is the format version of Memory's JSON.
const MemoryVersion = 1

// Memory is what one pass must remember for the next: facts that cannot be
// observed again. Make takes it in Options and returns the next version in
// Plan.Memory; reconcile persists it as JSON under /var/lib/enid. A zero
// Memory is a valid first start. Maps are never shared between versions.
type Memory struct {
	// Version is MemoryVersion.
	Version int `json:"version"`
	// Cooldowns maps a released pod address to the time it may be handed
	// out again.
	Cooldowns map[netip.Addr]time.Time `json:"cooldowns,omitempty"`
	// Sticky maps a sticky pod identity ("namespace/name/ifName") to the
	// addresses it holds or held.
	Sticky map[string]Reservation `json:"sticky,omitempty"`
	// IdleAboveMaxSince is when idle first exceeded maxIdle in the current
	// stretch (zero: it does not).
	IdleAboveMaxSince time.Time `json:"idleAboveMaxSince,omitzero"`
	// Exhausted maps a vSwitch ID to the time until which it is skipped.
	Exhausted map[string]time.Time `json:"exhausted,omitempty"`
	// LeakedSince maps an owned Available ENI to when it was first seen so.
	LeakedSince map[string]time.Time `json:"leakedSince,omitempty"`
	// Epoch counts the passes that planned a release (unassign, detach,
	// delete). It is part of every ClientToken: without it, a create or
	// assign after a release could repeat an earlier token and the cloud
	// would answer with the old (released) result.
	Epoch int `json:"epoch,omitempty"`
	// PoolKnobs is the pool policy the last pass planned with, rendered
	// (minIdle, maxIdle, minTotal, batch): a change of it starts a spread.
	PoolKnobs string `json:"poolKnobs,omitempty"`
	// SpreadUntil is when optional pool work deferred after a change of
	// the pool's knobs may start (zero: none is deferred). See
	// SpreadOffset.
	SpreadUntil time.Time `json:"spreadUntil,omitzero"`
	// Tokens maps the base of a ClientToken (the token derived from the
	// call's identity alone) to what must stay fixed, or change, across
	// its resends: see TokenRecord. Every CreateENI has one (its
	// created-at tag); another call only once a token of it failed.
	Tokens map[string]TokenRecord `json:"tokens,omitempty"`
	// ExhaustedFree maps a vSwitch marked in Exhausted to its free address
	// count as first observed after the mark: once more are free, the mark
	// is lifted (addresses were released) before it expires.
	ExhaustedFree map[string]int `json:"exhaustedFree,omitempty"`
	// Unseen maps an address a live pod holds in the kernel, but no owned
	// ENI shows, to when that was first seen: within UnseenGrace the pod
	// waits rather than being bound anew (describes lag an assign).
	Unseen map[netip.Addr]time.Time `json:"unseen,omitempty"`
	// Fragmented maps a vSwitch ID to the time until which no IPv4 prefix
	// is asked of it: the cloud refused a prefix there (no aligned /28 is
	// free), though single addresses may be. See MarkFragmented.
	Fragmented map[string]time.Time `json:"fragmented,omitempty"`
	// SetIdleAboveMaxSince is IdleAboveMaxSince for each security-group
	// set other than the default, by the set's groups ("sg-a,sg-b").
	SetIdleAboveMaxSince map[string]time.Time `json:"setIdleAboveMaxSince,omitempty"`
	// RefusedGroups maps a security-group set ("sg-a,sg-b", sorted) the
	// cloud refused to create an ENI with to the time until which no ENI
	// of it is created. See MarkRefusedGroups.
	RefusedGroups map[string]time.Time `json:"refusedGroups,omitempty"`
	// NetNSGone maps an entry ("<containerID>_<ifName>") whose pod network
	// namespace does not exist to when that was first seen: past the
	// config's staleEntryTimeout the entry is given up (stale.go). Kept
	// across restarts, so a restart does not start the wait again.
	NetNSGone map[string]time.Time `json:"netnsGone,omitempty"`
	// Admitted maps the UID of each pod the kubelet's files list to what
	// the planner knows of it: when it was first seen listed, and whether
	// it has had an entry (admitted.go). A record is dropped once the
	// files no longer list the pod. Absent in memories of older agents:
	// the listed pods are then taken as first seen at the files' time.
	Admitted map[string]AdmittedRecord `json:"admitted,omitempty"`
	// Backoffs maps a retry key to its back-off after failures in a row
	// (backoff.go): its actions wait until the record's Until
	// (Action.NotBefore), and a failed pod setup's status carries the
	// error. Learned from the executor's outcomes (Learn); kept across
	// restarts, so that a restarting agent does not retry at once what
	// just failed, and `enid plan` shows what the agent waits for.
	Backoffs map[RetryKey]Backoff `json:"backoffs,omitempty"`
}

// DefaultFragmentedFor is how long a vSwitch that refused an IPv4 prefix
// is asked for none (in prefix-preferring mode, it serves single addresses
// meanwhile); then a prefix is tried again.
const DefaultFragmentedFor = 5 * time.Minute

// UnseenGrace is how long an address a live pod holds in the kernel may be
// missing from every owned ENI before the pod is bound anew. ECS describes
// lag an assign by about a second; a pod rebound on such a stale read
// would lose the address it runs with, and the address, once the read
// catches up, would go to another pod.
const UnseenGrace = 15 * time.Second

// TokenRecord is what the planner keeps for one call's ClientToken. ECS
// burns a token whose request failed with a non-5xx error (a resend
// answers IdempotentFailed, whatever changed since), and answers a resend
// whose parameters differ with IdempotentParameterMismatch. So a token
// must change after a definite failure, and stay, with every parameter,
// until then.
type TokenRecord struct {
	// Attempt counts the definite failures of the call: it enters the
	// token, so the call after a failure carries a new one.
	Attempt int `json:"attempt,omitempty"`
	// Token is the token last planned for the call.
	Token string `json:"token"`
	// Since is when the call was first planned: a CreateENI's created-at
	// tag, fixed so that a resend sends the same parameters.
	Since time.Time `json:"since,omitzero"`
	// Epoch is the memory's Epoch the record belongs to: the epoch is part
	// of every token, so once it moves on the record is dropped.
	Epoch int `json:"epoch,omitempty"`
	// IPv4 and IPv6 are a CreateENI's address counts as last planned. Once
	// the call was sent (Sent, Memory.TokenSent), a create planned again
	// with the token (after a crash, while describes do not show its ENI
	// yet) asks for the same, so that ECS answers with the ENI the first
	// call made instead of IdempotentParameterMismatch. Until then each
	// plan asks for what it needs (a burst held back grows).
	Sent bool `json:"sent,omitempty"`
	IPv4 int  `json:"ipv4,omitempty"`
	IPv6 int  `json:"ipv6,omitempty"`
	// IPv4Prefixes is a CreateENI's IPv4 prefix count as last planned
	// (kept and resent like IPv4).
	IPv4Prefixes int `json:"ipv4Prefixes,omitempty"`
}

// Reservation is a sticky pod's hold on its addresses (or, in exclusive
// mode, its ENI).
type Reservation struct {
	// Key is the attachment that holds the addresses now ("" once it is gone).
	Key   string     `json:"key,omitempty"`
	IPv4  netip.Addr `json:"ipv4,omitzero"`
	IPv6  netip.Addr `json:"ipv6,omitzero"`
	ENIID string     `json:"eniID,omitempty"`
	// Until is when the hold ends; zero while the pod is alive.
	Until time.Time `json:"until,omitzero"`
}

// MarkExhausted returns a copy of m that skips vSwitch id until the given
// time: Learn calls it when the executor reports IpNotEnough, so the next
// pass picks another vSwitch.
func (m Memory) MarkExhausted(id string, until time.Time) Memory {
	n := m.clone()
	n.Exhausted = markUntil(n.Exhausted, id, until)
	delete(n.ExhaustedFree, id) // counted afresh by the next pass
	return n
}

// MarkFragmented returns a copy of m that asks vSwitch id for no IPv4
// prefix until the given time: Learn calls it when a prefix request
// (AssignIPs or CreateENI with IPv4PrefixCount) is answered IpNotEnough.
func (m Memory) MarkFragmented(id string, until time.Time) Memory {
	n := m.clone()
	n.Fragmented = markUntil(n.Fragmented, id, until)
	return n
}

// MarkRefusedGroups returns a copy of m that creates no ENI with the
// security groups key ("sg-a,sg-b", sorted) until the given time: Learn
// calls it when the cloud refuses a CreateENI or UpdateENI for
// its groups (a group that does not exist, is of another VPC, or is full).
// Meanwhile the set's waiting pods fail with ReasonSecurityGroupsRefused,
// its create takes no ENI slot another set's pods may need, and no pod is
// newly placed on an ENI that is to move to the groups.
func (m Memory) MarkRefusedGroups(key string, until time.Time) Memory {
	n := m.clone()
	n.RefusedGroups = markUntil(n.RefusedGroups, key, until)
	return n
}

// TokenFailed returns a copy of m in which the call whose ClientToken is
// token has failed definitely (the cloud answered a non-5xx error, so the
// token is burnt): the next pass plans it with a new token. Learn calls
// it; a token m does not know is taken as a call's first token.
func (m Memory) TokenFailed(token string) Memory {
	n := m.clone()
	if n.Tokens == nil {
		n.Tokens = map[string]TokenRecord{}
	}
	for base, r := range n.Tokens {
		if r.Token == token {
			r.Attempt++
			// A new token may ask for what is needed then.
			r.Sent = false
			n.Tokens[base] = r
			return n
		}
	}
	// An attempt-0 token is its own base (see builder.clientToken).
	n.Tokens[token] = TokenRecord{Attempt: 1, Token: token, Epoch: m.Epoch}
	return n
}

// TokenSent returns a copy of m in which the call whose ClientToken is
// token has been sent: a CreateENI planned again with it keeps its
// parameters (TokenRecord.Sent). The loop calls it for the creates the
// executor starts.
func (m Memory) TokenSent(token string) Memory {
	for base, r := range m.Tokens {
		if r.Token == token && !r.Sent {
			n := m.clone()
			r.Sent = true
			n.Tokens[base] = r
			return n
		}
	}
	return m
}

func (m Memory) clone() Memory {
	n := m
	n.Version = MemoryVersion
	n.Cooldowns = maps.Clone(m.Cooldowns)
	n.Sticky = maps.Clone(m.Sticky)
	n.Exhausted = maps.Clone(m.Exhausted)
	n.LeakedSince = maps.Clone(m.LeakedSince)
	n.Tokens = maps.Clone(m.Tokens)
	n.ExhaustedFree = maps.Clone(m.ExhaustedFree)
	n.Unseen = maps.Clone(m.Unseen)
	n.Fragmented = maps.Clone(m.Fragmented)
	n.SetIdleAboveMaxSince = maps.Clone(m.SetIdleAboveMaxSince)
	n.RefusedGroups = maps.Clone(m.RefusedGroups)
	n.NetNSGone = maps.Clone(m.NetNSGone)
	n.Admitted = maps.Clone(m.Admitted)
	n.Backoffs = maps.Clone(m.Backoffs)
	return n
}

// prune drops records that no longer matter at now, and nil-s empty maps so
// that equal memories compare equal.
func (m *Memory) prune(now time.Time) {
	m.Cooldowns = pruneUntil(m.Cooldowns, now)
	for k, r := range m.Sticky {
		if !r.Until.IsZero() && !now.Before(r.Until) {
			delete(m.Sticky, k)
		}
	}
	m.Exhausted = pruneUntil(m.Exhausted, now)
	m.Fragmented = pruneUntil(m.Fragmented, now)
	m.RefusedGroups = pruneUntil(m.RefusedGroups, now)
	if !now.Before(m.SpreadUntil) {
		m.SpreadUntil = time.Time{}
	}
	for id := range m.ExhaustedFree {
		if _, ok := m.Exhausted[id]; !ok {
			delete(m.ExhaustedFree, id)
		}
	}
	for base, r := range m.Tokens {
		if r.Epoch < m.Epoch {
			delete(m.Tokens, base)
		}
	}
	if len(m.Tokens) == 0 {
		m.Tokens = nil
	}
	if len(m.ExhaustedFree) == 0 {
		m.ExhaustedFree = nil
	}
	if len(m.Unseen) == 0 {
		m.Unseen = nil
	}
	if len(m.Sticky) == 0 {
		m.Sticky = nil
	}
	if len(m.LeakedSince) == 0 {
		m.LeakedSince = nil
	}
	if len(m.SetIdleAboveMaxSince) == 0 {
		m.SetIdleAboveMaxSince = nil
	}
	if len(m.NetNSGone) == 0 {
		m.NetNSGone = nil
	}
	if len(m.Backoffs) == 0 {
		m.Backoffs = nil
	}
}

// markUntil returns l (a map the caller owns) with key marked until the
// given time, made on first use.
func markUntil(l map[string]time.Time, key string, until time.Time) map[string]time.Time {
	if l == nil {
		l = map[string]time.Time{}
	}
	l[key] = until
	return l
}

// pruneUntil drops the entries of l whose time has come at now, and
// returns nil for an empty map (so that equal memories compare equal).
func pruneUntil[K comparable](l map[K]time.Time, now time.Time) map[K]time.Time {
	for k, until := range l {
		if !now.Before(until) {
			delete(l, k)
		}
	}
	if len(l) == 0 {
		return nil
	}
	return l
}
