// Package sweep decides which ENIs that nodes left behind may be deleted,
// cluster-wide: an ENI carrying enid's tags whose owner instance no longer
// exists (or, when the operator says so, is stopped), Available past a
// grace period. A node's own agent deletes what it leaks while it lives
// (planner: leaked ENIs); what a node leaves when it dies in the middle of
// a create, or after a detach and before the delete, no agent will ever
// see again: `enid sweep` runs this decision from outside the nodes.
//
// It is the plan step of a small observe -> plan -> execute of its own,
// and as pure as the planner: Decide takes an observation (package cloud
// reads it) and options with the time in them, and returns a Plan, a
// value that renders as text and JSON; cmd/enid executes it.
package sweep

import (
	"cmp"
	"slices"
	"time"

	"github.com/enidnet/enid/observed"
)

// DefaultGrace is how long an ENI must have existed before it is deleted
// (Options.Grace zero). It is longer than a node's own leak grace
// (planner.DefaultLeakGrace, 5 minutes): the sweep acts on another
// machine's leftovers and waits out any lag in what the API lists.
const DefaultGrace = 10 * time.Minute

// Input is one observation of the account.
type Input struct {
	// ENIs are the ENIs that carry enid's TagManagedBy, in any state.
	ENIs []observed.ENI
	// Owners maps every owner instance that exists to its ECS Status
	// (Running, Stopped, ...); an owner that is not in it does not exist.
	// It must come from a complete answer (Complete) and name the owners
	// of every Available ENI of enid's (OwnersToLookUp).
	Owners map[string]string
	// Complete is false when any part could not be read; the plan then
	// deletes nothing.
	Complete bool
	// Problems says what could not be read.
	Problems []string
}

// Options are the inputs of Decide that are not the observation.
type Options struct {
	// Now is the time of the sweep; Decide never reads the clock.
	Now time.Time
	// Grace is how old an ENI must be before it is deleted (0:
	// DefaultGrace). Age is from the later of the ENI's CreationTime and
	// its enid.dev/created-at tag; an ENI with neither is kept.
	Grace time.Duration
	// StoppedOwners makes an owner that is Stopped count as gone: for
	// fleets that never start a stopped node again. Off, its ENIs are kept
	// (its agent adopts or deletes them when it starts).
	StoppedOwners bool
	// VPCID, when set, limits the sweep to ENIs of that VPC.
	VPCID string
}

// Code says why an ENI is deleted or kept. The codes are part of the JSON
// form (FormatVersion).
type Code string

// Codes of deleted ENIs.
const (
	// OwnerGone: the owner instance does not exist (released).
	OwnerGone Code = "owner-gone"
	// OwnerStopped: the owner is Stopped and Options.StoppedOwners is on.
	OwnerStopped Code = "owner-stopped"
)

// Codes of kept ENIs.
const (
	// OwnerAlive: the owner exists (and is not a stopped one the options
	// give up); its own agent adopts or deletes its ENIs.
	OwnerAlive Code = "owner-alive"
	// NotAvailable: the ENI is attached, attaching, detaching or being
	// deleted: only an Available ENI is deleted.
	NotAvailable Code = "not-available"
	// InGrace: the ENI is younger than the grace period.
	InGrace Code = "in-grace"
	// AgeUnknown: neither the cloud nor the tag says when it was created.
	AgeUnknown Code = "age-unknown"
	// NotEnids: it lacks enid's managed-by or owner tag, or is a primary
	// ENI: never enid's to delete.
	NotEnids Code = "not-enids"
	// OtherVPC: outside Options.VPCID.
	OtherVPC Code = "other-vpc"
	// Incomplete: the observation was partial; nothing is deleted.
	Incomplete Code = "observation-incomplete"
)

// Item is one ENI and the verdict on it.
type Item struct {
	ENIID     string `json:"eniID"`
	Owner     string `json:"owner,omitempty"`
	Status    string `json:"status"`
	VSwitchID string `json:"vSwitchID,omitempty"`
	// Age is how long ago it was created (0 when unknown), in seconds in
	// the JSON form.
	Age  time.Duration `json:"-"`
	Code Code          `json:"code"`
	Text string        `json:"text"`
}

// Plan is the sweep's decision: the ENIs to delete and those kept, each
// with its reason. It is a value: rendering and executing it never
// changes it.
type Plan struct {
	// Delete lists the ENIs to delete, sorted by ID.
	Delete []Item
	// Keep lists every other ENI that carries enid's managed-by tag.
	Keep []Item
	// Complete is false when the observation was partial (Delete is then
	// empty).
	Complete bool
	Problems []string
	// Grace and StoppedOwners are the options the plan was made with, for
	// display.
	Grace         time.Duration
	StoppedOwners bool
}

// Decide makes the plan. It deletes an ENI only when every one of these
// holds: it carries enid.dev/managed-by=enid and an enid.dev/owner tag and
// is no primary ENI; it is Available; its owner does not exist (or is
// Stopped, with StoppedOwners); it is older than the grace period; and
// the observation is complete.
func Decide(in Input, o Options) Plan {
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	p := Plan{Complete: in.Complete, Problems: slices.Clone(in.Problems), Grace: o.Grace, StoppedOwners: o.StoppedOwners}
	for _, e := range in.ENIs {
		it := Item{ENIID: e.ID, Owner: e.Tags[observed.TagOwner], Status: string(e.Status), VSwitchID: e.VSwitchID, Age: age(e, o.Now)}
		del := judge(&it, e, in, o)
		if del && !in.Complete {
			it.Code, it.Text = Incomplete, "would be deleted ("+it.Text+"), but the observation is incomplete"
			del = false
		}
		if del {
			p.Delete = append(p.Delete, it)
		} else {
			p.Keep = append(p.Keep, it)
		}
	}
	byID := func(a, b Item) int { return cmp.Compare(a.ENIID, b.ENIID) }
	slices.SortFunc(p.Delete, byID)
	slices.SortFunc(p.Keep, byID)
	return p
}

// judge fills the item's reason and reports whether the ENI is to go.
// The owner is looked at only for an Available ENI of enid's, so Owners
// need only name those ENIs' owners.
func judge(it *Item, e observed.ENI, in Input, o Options) bool {
	owner := it.Owner
	switch {
	case e.Tags[observed.TagManagedBy] != observed.TagManagedByValue || owner == "" || e.Type == observed.ENITypePrimary:
		it.Code, it.Text = NotEnids, "lacks enid's managed-by or owner tag, or is a primary ENI"
		return false
	case o.VPCID != "" && e.VPCID != o.VPCID:
		it.Code, it.Text = OtherVPC, "in VPC "+e.VPCID+", not "+o.VPCID
		return false
	case e.Status != observed.ENIAvailable:
		it.Code, it.Text = NotAvailable, "the ENI is "+string(e.Status)
		if e.InstanceID != "" {
			it.Text += " on " + e.InstanceID
		}
		return false
	}
	status, exists := in.Owners[owner]
	gone := Code("")
	switch {
	case !exists:
		gone, it.Text = OwnerGone, "owner "+owner+" no longer exists"
	case status == "Stopped" && o.StoppedOwners:
		gone, it.Text = OwnerStopped, "owner "+owner+" is Stopped (--stopped-owners)"
	default:
		it.Code, it.Text = OwnerAlive, "owner "+owner+" is "+status
		if status == "Stopped" {
			it.Text += " (its agent takes care of it when it starts; --stopped-owners gives it up)"
		}
		return false
	}
	switch {
	case it.Age == 0:
		it.Code, it.Text = AgeUnknown, it.Text+", but its creation time is unknown"
		return false
	case it.Age < o.Grace:
		it.Code, it.Text = InGrace, it.Text+"; created "+round(it.Age)+" ago, within the grace period of "+round(o.Grace)
		return false
	}
	it.Code, it.Text = gone, it.Text+"; Available, created "+round(it.Age)+" ago"
	return true
}

// age is how long ago the ENI was created: from the later of CreationTime
// and the created-at tag (a create's tag names when it was first planned),
// 0 when neither is known or both lie in the future.
func age(e observed.ENI, now time.Time) time.Duration {
	at := e.CreatedAt
	if t, err := time.Parse(time.RFC3339, e.Tags[observed.TagCreatedAt]); err == nil && t.After(at) {
		at = t
	}
	if at.IsZero() || !now.After(at) {
		return 0
	}
	return now.Sub(at)
}

// round renders a duration to the second.
func round(d time.Duration) string { return d.Round(time.Second).String() }

// OwnersToLookUp returns, sorted, the owner instances whose state Decide
// needs: those of the Available ENIs that carry enid's tags.
func OwnersToLookUp(enis []observed.ENI) []string {
	var out []string
	for _, e := range enis {
		if o := e.Tags[observed.TagOwner]; o != "" && e.Status == observed.ENIAvailable && e.Tags[observed.TagManagedBy] == observed.TagManagedByValue {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
