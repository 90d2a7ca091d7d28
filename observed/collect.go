package observed

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// CloudSource is the API half of an observation. cloud.Client satisfies it
// through a thin adapter in reconcile.
type CloudSource interface {
	// Instance returns the instance's facts and limits.
	Instance(ctx context.Context, instanceID string) (Instance, error)
	// ENIs returns every ENI attached to the instance and every ENI
	// carrying enid's owner tag for it, attached or not.
	ENIs(ctx context.Context, instanceID string) ([]ENI, error)
	// VSwitches describes the given vSwitches. One that does not exist
	// is left out of the result, without an error: the cloud said so.
	VSwitches(ctx context.Context, ids []string) ([]VSwitch, error)
}

// NodeSource is the kernel half of an observation (linux.Datapath).
type NodeSource interface {
	Observe(ctx context.Context) (Node, error)
}

// PublishedSource reads back the statuses the agent published.
type PublishedSource interface {
	Published(ctx context.Context) ([]Binding, error)
}

// Sources are what Collect reads. A nil source is reported as missing and
// makes the observation incomplete.
type Sources struct {
	Cloud     CloudSource
	Node      NodeSource
	Published PublishedSource
}

// Collect takes one full observation. Every source is read even when an
// earlier one failed; each failure is a line in Problems and makes the
// State incomplete, so a planner never destroys anything on its strength.
// vSwitchIDs are the vSwitches the config names; those of observed ENIs
// are added.
func Collect(ctx context.Context, src Sources, instanceID string, vSwitchIDs []string, now time.Time) State {
	st := State{Complete: true, At: now}
	fail := func(what string, err error) {
		st.Complete = false
		st.Problems = append(st.Problems, fmt.Sprintf("%s: %v", what, err))
	}
	if src.Cloud == nil {
		fail("cloud", fmt.Errorf("no cloud source"))
	} else {
		inst, err := src.Cloud.Instance(ctx, instanceID)
		if err != nil {
			fail("describe instance "+instanceID, err)
		}
		st.Instance = inst
		enis, err := src.Cloud.ENIs(ctx, instanceID)
		if err != nil {
			fail("list ENIs", err)
		}
		slices.SortFunc(enis, func(a, b ENI) int { return strings.Compare(a.ID, b.ID) })
		st.ENIs = enis
		ids := slices.Clone(vSwitchIDs)
		for _, e := range enis {
			if e.VSwitchID != "" {
				ids = append(ids, e.VSwitchID)
			}
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
		if len(ids) > 0 {
			vsw, err := src.Cloud.VSwitches(ctx, ids)
			if err != nil {
				fail("describe vSwitches", err)
			}
			slices.SortFunc(vsw, func(a, b VSwitch) int { return strings.Compare(a.ID, b.ID) })
			st.VSwitches = vsw
			if err == nil {
				// A vSwitch the cloud does not know (a typo, or deleted in
				// the console) is a fact, not a failure: the planner skips
				// it and serves from the others.
				for _, id := range ids {
					if !slices.ContainsFunc(vsw, func(v VSwitch) bool { return v.ID == id }) {
						st.UnknownVSwitches = append(st.UnknownVSwitches, id)
					}
				}
			}
		}
	}
	if src.Node == nil {
		fail("node", fmt.Errorf("no node source"))
	} else {
		node, err := src.Node.Observe(ctx)
		if err != nil {
			fail("observe node", err)
		}
		st.Node = node
	}
	if src.Published != nil {
		pub, err := src.Published.Published(ctx)
		if err != nil {
			fail("read published statuses", err)
		}
		slices.SortFunc(pub, func(a, b Binding) int { return strings.Compare(a.Key.String(), b.Key.String()) })
		st.Node.Published = pub
	}
	return st
}
