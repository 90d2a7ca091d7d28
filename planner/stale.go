package planner

import (
	"time"

	"github.com/enidnet/enid/observed"
)

// This file answers "what happens to an entry whose pod is gone?". An
// entry whose network namespace does not exist (observed.Node.MissingNetNS:
// a runtime that lost its DELs, a crash between a pod's end and its DEL)
// can never be set up, and nothing can use its addresses: its pod ended
// with its namespace. Such an entry must not starve live pods (DESIGN.md
// invariant 12), so it is planned as a gone attachment that keeps a status:
// it gets no address, its kernel remnants are torn down and what it held
// goes back to the pool through the cooldown, as after a DEL. Its status
// says netns-gone: Pending for the config's staleEntryTimeout (the DEL that
// normally follows within seconds then removes it), Failed after that (a
// CNI ADD still waiting on it fails at once, and `enid status` shows it
// given up). CNI DEL or GC removes the entry and the status. Memory.NetNSGone
// keeps when each was first seen, across restarts.

// splitGone takes the entries whose network namespace is missing out of
// b.pods into b.gone (in key order), and prunes the memory of entries whose
// namespace is back or whose entry went.
func (b *builder) splitGone(o observed.State) {
	missing := o.Node.MissingNetNS
	if len(missing) == 0 && len(b.mem.NetNSGone) == 0 {
		return
	}
	seen := make(map[string]bool, len(missing))
	kept := b.pods[:0:0]
	j := 0
	for _, p := range b.pods {
		for j < len(missing) && cmpKey(missing[j], p.key) < 0 {
			j++
		}
		if j == len(missing) || missing[j] != p.key {
			kept = append(kept, p)
			continue
		}
		ks := p.key.String()
		seen[ks] = true
		since, ok := b.mem.NetNSGone[ks]
		if !ok {
			if b.mem.NetNSGone == nil {
				b.mem.NetNSGone = map[string]time.Time{}
			}
			since = b.now
			b.mem.NetNSGone[ks] = since
		}
		p.goneSince = since
		if b.goneKeys == nil {
			b.goneKeys = map[observed.AttachmentKey]bool{}
		}
		b.gone = append(b.gone, p)
		b.goneKeys[p.key] = true
	}
	for ks := range b.mem.NetNSGone {
		if !seen[ks] {
			delete(b.mem.NetNSGone, ks)
		}
	}
	b.pods = kept
}

// publishGone publishes the status of every entry whose network namespace
// is gone: Pending within staleEntryTimeout, Failed after it.
func (b *builder) publishGone() {
	timeout := b.cfg.StaleEntryTimeout.D()
	for _, p := range b.gone {
		ns, since := p.entry.NetNS, p.goneSince.UTC().Format(rfc3339)
		st := PodStatus{Key: p.key, Revision: p.entry.Revision, Phase: PhasePending, ReasonCode: ReasonNetNSGone, IfName: p.key.IfName,
			Reason: "the pod's network namespace " + ns + " does not exist (since " + since +
				"): its addresses are released; waiting for its CNI DEL, given up at " + p.goneSince.Add(timeout).UTC().Format(rfc3339)}
		if b.now.Sub(p.goneSince) >= timeout {
			st.Phase = PhaseFailed
			st.Reason = "the pod's network namespace " + ns + " does not exist (since " + since +
				"): given up after staleEntryTimeout " + timeout.String() + "; CNI DEL or GC removes the entry"
		}
		pub, _ := find(b.pubs, p.key, pubKey)
		b.publish(st, pub, nil, false)
	}
}
