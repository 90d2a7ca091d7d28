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
// time: the executor calls it when the cloud answers IpNotEnough, so the next
// pass picks another vSwitch.
func (m Memory) MarkExhausted(id string, until time.Time) Memory {
	n := m.clone()
	if n.Exhausted == nil {
		n.Exhausted = map[string]time.Time{}
	}
	n.Exhausted[id] = until
	return n
}

func (m Memory) clone() Memory {
	n := m
	n.Version = MemoryVersion
	n.Cooldowns = maps.Clone(m.Cooldowns)
	n.Sticky = maps.Clone(m.Sticky)
	n.Exhausted = maps.Clone(m.Exhausted)
	n.LeakedSince = maps.Clone(m.LeakedSince)
	return n
}

// prune drops records that no longer matter at now, and nil-s empty maps so
// that equal memories compare equal.
func (m *Memory) prune(now time.Time) {
	for ip, until := range m.Cooldowns {
		if !now.Before(until) {
			delete(m.Cooldowns, ip)
		}
	}
	for k, r := range m.Sticky {
		if !r.Until.IsZero() && !now.Before(r.Until) {
			delete(m.Sticky, k)
		}
	}
	for id, until := range m.Exhausted {
		if !now.Before(until) {
			delete(m.Exhausted, id)
		}
	}
	if !now.Before(m.SpreadUntil) {
		m.SpreadUntil = time.Time{}
	}
	if len(m.Cooldowns) == 0 {
		m.Cooldowns = nil
	}
	if len(m.Sticky) == 0 {
		m.Sticky = nil
	}
	if len(m.Exhausted) == 0 {
		m.Exhausted = nil
	}
	if len(m.LeakedSince) == 0 {
		m.LeakedSince = nil
	}
}
