package planner

// This file chooses the vSwitch of a new ENI: the candidates of the
// instance's zone (those eni.vSwitches lists, then those
// eni.vSwitchSelector selected at the last observation), the ones that
// cannot serve now and why, and the policy (most-free, ordered, random).
// The choice and its reason are written into the CreateENI's reason, so
// `enid plan` says which vSwitch it picked and why.

import (
	"encoding/binary"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
)

// zoneVSwitches returns the IDs of the vSwitches pods may use in the
// instance's zone: those the config lists for it, in its order, then
// those its selector selected (observed.State.SelectedVSwitches), by ID.
func (b *builder) zoneVSwitches() []string {
	ids := slices.Clone(b.cfg.ENI.VSwitches[b.o.Instance.ZoneID])
	for _, id := range b.o.SelectedVSwitches {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// adoptable returns the index in b.avail of the first owned Available ENI
// in a vSwitch pods may use in this zone, or -1.
func (b *builder) adoptable() int {
	allowed := b.zoneVSwitches()
	for i, e := range b.avail {
		if e.ZoneID == b.o.Instance.ZoneID && slices.Contains(allowed, e.VSwitchID) {
			return i
		}
	}
	return -1
}

// vswCandidate is a vSwitch that can take a new ENI now.
type vswCandidate struct {
	v observed.VSwitch
	// single: prefer-prefix, and this vSwitch cannot give a prefix now
	// (it refused one, or has too few addresses): it serves only when no
	// vSwitch that gives prefixes has room.
	single bool
}

// pickVSwitch chooses the vSwitch for the nth new ENI of this plan by the
// configured policy: most-free (most available addresses; ties by order),
// ordered (the first with room, in zoneVSwitches' order) or random (drawn
// with odds in proportion to the free addresses, from the same identity
// the create's ClientToken has, so a replayed pass draws the same).
// vSwitches seen exhausted are skipped until their mark expires. It
// returns the choice, the reason for it (for the CreateENI's reason), or
// the status of the pods that cannot be served.
func (b *builder) pickVSwitch(nth int) (observed.VSwitch, string, *PodStatus) {
	zone := b.o.Instance.ZoneID
	ids := b.zoneVSwitches()
	if st := b.noVSwitchConfigured(zone, ids); st != nil {
		return observed.VSwitch{}, "", st
	}
	sv := b.surveyVSwitches(ids)
	if len(sv.cands) == 0 {
		return observed.VSwitch{}, "", b.noVSwitch(zone, len(ids), sv.unknown, sv.missing, sv.fragmented, sv.few)
	}
	cands := sv.cands
	// prefer-prefix: a vSwitch that gives prefixes first.
	if slices.ContainsFunc(cands, func(c vswCandidate) bool { return !c.single }) {
		cands = slices.DeleteFunc(cands, func(c vswCandidate) bool { return c.single })
	}
	pick, why := b.applyVSwitchPolicy(cands, nth)
	return cands[pick].v, b.vswChoiceText(cands, pick, why, sv.skipped), nil
}

// noVSwitchConfigured is the status of pods when the config gives no way
// to create an ENI in the zone: no vSwitch listed or selected (ids), or
// no security group; nil when it does.
func (b *builder) noVSwitchConfigured(zone string, ids []string) *PodStatus {
	if len(ids) == 0 {
		if sel := b.cfg.ENI.VSwitchSelector; sel != nil {
			return &PodStatus{Phase: PhasePending, ReasonCode: ReasonVSwitchUnknown,
				Reason: "no vSwitch of zone " + zone + " carries the tags of eni.vSwitchSelector (" + tagList(sel.Tags) + ") and none is listed; waiting for the config or the cloud to change"}
		}
		return &PodStatus{Phase: PhaseFailed, ReasonCode: ReasonConfigInvalid, Reason: "no vSwitch configured for zone " + zone}
	}
	if len(b.cfg.ENI.SecurityGroups) == 0 {
		return &PodStatus{Phase: PhaseFailed, ReasonCode: ReasonConfigInvalid, Reason: "no security group configured"}
	}
	return nil
}

// vswSurvey is what surveying the zone's vSwitches found: those that can
// take a new ENI now, and why the others cannot.
type vswSurvey struct {
	cands []vswCandidate
	// unknown counts the vSwitches not described in this zone; missing
	// are those of them the cloud says do not exist.
	unknown int
	missing []string
	// fragmented refused a prefix, few have too few addresses for a /28
	// (both in strict prefix mode).
	fragmented, few []string
	// skipped says why each of the others cannot take it now, for the
	// reason.
	skipped []string
}

// surveyVSwitches sorts the zone's vSwitches (ids, in order) into those
// that can take a new ENI now and those that cannot, with why.
func (b *builder) surveyVSwitches(ids []string) vswSurvey {
	zone := b.o.Instance.ZoneID
	var sv vswSurvey
	for _, id := range ids {
		v, ok := b.vsw[id]
		if !ok && slices.Contains(b.o.UnknownVSwitches, id) {
			sv.missing = append(sv.missing, id)
		}
		if !ok || v.ZoneID != zone {
			sv.unknown++
			continue
		}
		if until, ok := b.mem.Exhausted[id]; ok && b.now.Before(until) {
			sv.skipped = append(sv.skipped, id+" marked exhausted")
			continue
		}
		// Too few addresses, as observed or as this plan's own creates
		// leave it: skip it now. Only the cloud's refusal is remembered
		// (Memory.MarkExhausted): a mark taken from a projection would
		// outlive a plan that is held back or fails, and keep pods
		// waiting while the vSwitch has room.
		if v.AvailableIPs < b.createNeeds(id) {
			if b.strictTooFew(id, 1+prefixSize) {
				sv.few = append(sv.few, id)
			}
			sv.skipped = append(sv.skipped, id+" "+itoa(v.AvailableIPs)+" free")
			continue
		}
		if _, ok := b.growKind(id); !ok {
			sv.fragmented = append(sv.fragmented, id)
			sv.skipped = append(sv.skipped, id+" fragmented")
			continue
		}
		prefix, _ := b.createKind(id)
		sv.cands = append(sv.cands, vswCandidate{v: v, single: b.allocation() == desired.IPv4PreferPrefix && !prefix})
	}
	return sv
}

// applyVSwitchPolicy picks one of cands (not empty) by eni.vSwitchPolicy
// (most-free when unset) and says why, for the reason.
func (b *builder) applyVSwitchPolicy(cands []vswCandidate, nth int) (int, string) {
	policy := b.cfg.ENI.VSwitchPolicy
	if policy == "" {
		policy = desired.VSwitchMostFree
	}
	switch {
	case len(cands) == 1:
		return 0, string(policy) + ": the only one with room"
	case policy == desired.VSwitchOrdered:
		return 0, "ordered: the first with room"
	case policy == desired.VSwitchRandom:
		pick := b.drawVSwitch(cands, nth)
		total := 0
		for _, c := range cands {
			total += c.v.AvailableIPs
		}
		return pick, "random: drawn with odds " + itoa(cands[pick].v.AvailableIPs) + " in " + itoa(total)
	}
	pick := 0
	for i, c := range cands {
		if c.v.AvailableIPs > cands[pick].v.AvailableIPs {
			pick = i
		}
	}
	return pick, "most-free: the most free addresses"
}

// vswChoiceText is the CreateENI's reason for choosing cands[pick]: the
// vSwitch, why (the policy's words), its free addresses, how it came to
// be a candidate, the other candidates and the vSwitches skipped.
func (b *builder) vswChoiceText(cands []vswCandidate, pick int, why string, skipped []string) string {
	chosen := cands[pick]
	var others []string
	for i, c := range cands {
		if i != pick {
			others = append(others, c.v.ID+" "+itoa(c.v.AvailableIPs))
		}
	}
	text := "vSwitch " + chosen.v.ID + " (" + why + ", " + itoa(chosen.v.AvailableIPs) + " free"
	if slices.Contains(b.o.SelectedVSwitches, chosen.v.ID) && !slices.Contains(b.cfg.ENI.VSwitches[b.o.Instance.ZoneID], chosen.v.ID) {
		text += ", selected by tags"
	}
	if chosen.single {
		text += "; single addresses: no vSwitch can give a /28 now"
	}
	text += ")"
	if len(others) > 0 {
		text += "; also " + strings.Join(others, ", ")
	}
	if len(skipped) > 0 {
		text += "; skipped " + strings.Join(skipped, ", ")
	}
	return text
}

// drawVSwitch draws a candidate with odds in proportion to its free
// addresses, from a number derived from the create's identity (epoch,
// instance, how many ENIs the node has and this plan creates before it,
// the security-group set): deterministic, and different across nodes.
func (b *builder) drawVSwitch(cands []vswCandidate, nth int) int {
	total := 0
	for _, c := range cands {
		total += c.v.AvailableIPs
	}
	h := fnv.New64a()
	parts := b.createParts("", nth)
	for _, p := range parts {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	if total <= 0 {
		return int(h.Sum64() % uint64(len(cands)))
	}
	r := int(h.Sum64() % uint64(total))
	for i, c := range cands {
		if r < c.v.AvailableIPs {
			return i
		}
		r -= c.v.AvailableIPs
	}
	return len(cands) - 1
}

// noVSwitch is the status of pods when no vSwitch of the zone can take a
// new ENI: n candidates, unknown of them not described in this zone,
// missing of those said not to exist, fragmented and few (strict prefix
// mode) those that cannot give a prefix.
func (b *builder) noVSwitch(zone string, n, unknown int, missing, fragmented, few []string) *PodStatus {
	gone := ""
	if len(missing) > 0 {
		gone = "vSwitch " + strings.Join(missing, ", ") + " does not exist"
	}
	switch {
	case unknown == n && len(missing) > 0:
		// Pending: the config (GitOps) or the console can fix it while
		// pods wait, and they start then.
		return &PodStatus{Phase: PhasePending, ReasonCode: ReasonVSwitchUnknown,
			Reason: "no usable vSwitch in zone " + zone + ": " + gone + "; waiting for the config or the cloud to change"}
	case unknown == n:
		return &PodStatus{Phase: PhaseFailed, ReasonCode: ReasonConfigInvalid, Reason: "no configured vSwitch of zone " + zone + " was found"}
	case len(fragmented) > 0:
		return b.fragmentedStatus(fragmented[0])
	}
	var why []string
	if gone != "" {
		why = append(why, gone)
	}
	if len(few) > 0 {
		why = append(why, b.tooFewText(few[0], 1+prefixSize, "a new ENI with a /28 prefix"))
	}
	reason := "every vSwitch of zone " + zone + " is exhausted; waiting for addresses to free up"
	if len(why) > 0 {
		reason = "every vSwitch of zone " + zone + " is exhausted (" + strings.Join(why, "; ") + "); waiting for addresses to free up"
	}
	// Pending, not Failed: addresses free up and skip marks expire, and a
	// CNI ADD that waits then succeeds where a failure would only send
	// kubelet into its sandbox-retry backoff.
	return &PodStatus{Phase: PhasePending, ReasonCode: ReasonVSwitchExhausted, Reason: reason}
}

// tagList renders tags as k=v, sorted.
func tagList(tags map[string]string) string {
	var out []string
	for k, v := range tags {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}
