package planner

import "time"

// This file decides which pods the kubelet admitted are demand about to
// arrive: the pool grows for them before their CNI ADD (pool.go).
//
// The kubelet's files (desired.Hints.AdmittedPodUIDs) are not a list of the
// pods that are coming. The kubelet drops a deleted pod from
// allocated_pods_state only in memory and rewrites the file at its next
// admission, so after deletions the file still lists every deleted pod;
// and hostNetwork pods are admitted but never get a CNI call. Counting
// every listed pod without an entry as demand made the pool grow when
// pods were deleted, and for ever for hostNetwork pods.
//
// So the planner remembers each listed pod (Memory.Admitted) and counts it
// only while it may still be coming:
//   - a pod that has had an entry and has none now was deleted (or its
//     sandbox is being replaced, which the pool serves when the new entry
//     comes): pod UIDs are never reused, so it is never demand again;
//   - a pod never seen with an entry counts until AdmittedFor after it was
//     first seen listed, as the files' modification time then (every
//     listed pod was admitted at or before it): a hostNetwork pod, or one
//     deleted before its sandbox, expires instead of counting for ever.
// Records are dropped once the files no longer list the pod, so the memory
// holds at most what the kubelet's files hold, and a restarted agent (the
// memory is persisted) still knows which listed pods were deleted.

// DefaultAdmittedFor is how long an admitted pod that has never had an
// entry counts as demand: about the kubelet's own wait for a pod's volumes
// (2m) before it creates the sandbox that makes the CNI ADD. A pod slower
// than that is served when its entry comes, as without hints.
const DefaultAdmittedFor = 2 * time.Minute

// AdmittedRecord is what the planner knows of one pod the kubelet's files
// list.
type AdmittedRecord struct {
	// Since is when the pod was first seen listed: the files' modification
	// time then (the pod was admitted at or before it), or the pass's time
	// when later or unknown.
	Since time.Time `json:"since"`
	// Entry is set once the pod has been seen with an entry. A pod with
	// Entry and no entry now was deleted: it is never demand again.
	Entry bool `json:"entry,omitempty"`
}

// noteAdmitted updates Memory.Admitted from the hints and the entries and
// returns how many listed pods are demand about to arrive (see the top of
// this file).
func (b *builder) noteAdmitted() int {
	h := b.d.Hints
	if len(h.AdmittedPodUIDs) == 0 && len(b.mem.Admitted) == 0 {
		return 0
	}
	have := make(map[string]bool, len(b.pods))
	for _, p := range b.pods {
		if p.entry.PodUID != "" {
			have[p.entry.PodUID] = true
		}
	}
	since := b.now
	if at := h.AdmittedAt; !at.IsZero() && at.Before(since) {
		since = at
	}
	ttl := b.opt.AdmittedFor
	if ttl <= 0 {
		ttl = DefaultAdmittedFor
	}
	next := make(map[string]AdmittedRecord, len(h.AdmittedPodUIDs))
	n := 0
	for _, u := range h.AdmittedPodUIDs {
		r, ok := b.mem.Admitted[u]
		if !ok {
			r = AdmittedRecord{Since: since}
		}
		r.Entry = r.Entry || have[u]
		next[u] = r
		if !have[u] && !r.Entry && b.now.Before(r.Since.Add(ttl)) {
			n++
		}
	}
	if h.AdmittedPartial {
		// A file that lists pods could not be read: its pods may be
		// missing from the list, not gone. Keep their records.
		for u, r := range b.mem.Admitted {
			if _, ok := next[u]; !ok {
				next[u] = r
			}
		}
	}
	b.mem.Admitted = next
	if len(next) == 0 {
		b.mem.Admitted = nil
	}
	return n
}

// admittedDeadlines passes consider the time at which each admitted pod
// that never had an entry stops counting as demand (NextDeadline).
func (m Memory) admittedDeadlines(opt Options, consider func(time.Time)) {
	ttl := opt.AdmittedFor
	if ttl <= 0 {
		ttl = DefaultAdmittedFor
	}
	for _, r := range m.Admitted {
		if !r.Entry {
			consider(r.Since.Add(ttl))
		}
	}
}

// hinted counts the admitted pods that are demand about to arrive, for
// the security-group set the builder is narrowed to.
func (b *builder) hinted() int {
	// Admitted pods' annotations are unknown: their demand counts for the
	// default set.
	if b.cur != nil && !b.cur.isDefault() {
		return 0
	}
	return b.expected
}
