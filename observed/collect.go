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
	// SelectVSwitches describes the vSwitches of the VPC and zone that
	// carry every one of tags (a value "" matches any value).
	SelectVSwitches(ctx context.Context, vpcID, zoneID string, tags map[string]string) ([]VSwitch, error)
}

// VSwitchQuery says which vSwitches an observation describes, besides
// those of the observed ENIs.
type VSwitchQuery struct {
	// IDs are the vSwitches the config names.
	IDs []string
	// Tags, when not empty, select the vSwitches of the instance's zone
	// and VPC that carry them (the config's eni.vSwitchSelector); they are
	// listed in State.SelectedVSwitches.
	Tags map[string]string
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
// q names the vSwitches the config names or selects; those of observed
// ENIs are added.
func Collect(ctx context.Context, src Sources, instanceID string, q VSwitchQuery, now time.Time) State {
	return Merge(CollectCloud(ctx, src.Cloud, instanceID, q), CollectNode(ctx, src.Node, src.Published), now)
}

// CloudHalf is the cloud's part of an observation.
type CloudHalf struct {
	Instance  Instance
	ENIs      []ENI
	VSwitches []VSwitch
	// UnknownVSwitches are vSwitches asked for that the cloud says do not
	// exist (State.UnknownVSwitches).
	UnknownVSwitches []string
	// SelectedVSwitches are the vSwitches the query's tags selected
	// (State.SelectedVSwitches).
	SelectedVSwitches []string
	// Problems lists what could not be read; empty means whole.
	Problems []string
}

// NodeHalf is the node's part of an observation: the kernel and the
// published statuses.
type NodeHalf struct {
	Node Node
	// Problems lists what could not be read; empty means whole.
	Problems []string
}

// Merge joins the two halves into one observation taken at now.
func Merge(c CloudHalf, n NodeHalf, now time.Time) State {
	st := State{Instance: c.Instance, ENIs: c.ENIs, VSwitches: c.VSwitches, UnknownVSwitches: c.UnknownVSwitches,
		SelectedVSwitches: c.SelectedVSwitches, Node: n.Node, At: now,
		Complete: len(c.Problems) == 0 && len(n.Problems) == 0, NodeComplete: len(n.Problems) == 0}
	st.Problems = append(append(st.Problems, c.Problems...), n.Problems...)
	return st
}

// CollectCloud reads the cloud half: the instance, its ENIs and the
// vSwitches (those named, those selected by tags in the instance's zone
// and those of the ENIs). A nil src is a problem.
func CollectCloud(ctx context.Context, src CloudSource, instanceID string, q VSwitchQuery) CloudHalf {
	var h CloudHalf
	fail := func(what string, err error) { h.Problems = append(h.Problems, fmt.Sprintf("%s: %v", what, err)) }
	if src == nil {
		fail("cloud", fmt.Errorf("no cloud source"))
		return h
	}
	inst, err := src.Instance(ctx, instanceID)
	if err != nil {
		fail("describe instance "+instanceID, err)
	}
	h.Instance = inst
	enis, err := src.ENIs(ctx, instanceID)
	if err != nil {
		fail("list ENIs", err)
	}
	slices.SortFunc(enis, func(a, b ENI) int { return strings.Compare(a.ID, b.ID) })
	h.ENIs = enis
	var selected []VSwitch
	if len(q.Tags) > 0 {
		switch {
		case inst.ZoneID == "":
			fail("select vSwitches by tags", fmt.Errorf("the instance's zone is unknown"))
		default:
			sel, err := src.SelectVSwitches(ctx, inst.VPCID, inst.ZoneID, q.Tags)
			if err != nil {
				fail("select vSwitches by tags", err)
			}
			for _, v := range sel {
				// The filter is the cloud's; the zone is checked here too.
				if v.ZoneID == inst.ZoneID && !slices.Contains(h.SelectedVSwitches, v.ID) {
					selected = append(selected, v)
					h.SelectedVSwitches = append(h.SelectedVSwitches, v.ID)
				}
			}
			slices.Sort(h.SelectedVSwitches)
		}
	}
	ids := slices.Clone(q.IDs)
	for _, e := range enis {
		if e.VSwitchID != "" {
			ids = append(ids, e.VSwitchID)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	// A selected vSwitch is described already.
	ids = slices.DeleteFunc(ids, func(id string) bool { return slices.Contains(h.SelectedVSwitches, id) })
	h.VSwitches = selected
	if len(ids) > 0 {
		vsw, err := src.VSwitches(ctx, ids)
		if err != nil {
			fail("describe vSwitches", err)
		}
		h.VSwitches = append(h.VSwitches, vsw...)
		if err == nil {
			// A vSwitch the cloud does not know (a typo, or deleted in the
			// console) is a fact, not a failure: the planner skips it and
			// serves from the others.
			for _, id := range ids {
				if !slices.ContainsFunc(vsw, func(v VSwitch) bool { return v.ID == id }) {
					h.UnknownVSwitches = append(h.UnknownVSwitches, id)
				}
			}
		}
	}
	slices.SortFunc(h.VSwitches, func(a, b VSwitch) int { return strings.Compare(a.ID, b.ID) })
	return h
}

// CollectNode reads the node half: the kernel (a nil node is a problem)
// and, when pub is not nil, the published statuses.
func CollectNode(ctx context.Context, node NodeSource, pub PublishedSource) NodeHalf {
	var h NodeHalf
	fail := func(what string, err error) { h.Problems = append(h.Problems, fmt.Sprintf("%s: %v", what, err)) }
	if node == nil {
		fail("node", fmt.Errorf("no node source"))
	} else {
		n, err := node.Observe(ctx)
		if err != nil {
			fail("observe node", err)
		}
		h.Node = n
	}
	if pub != nil {
		bs, err := pub.Published(ctx)
		if err != nil {
			fail("read published statuses", err)
		}
		slices.SortFunc(bs, func(a, b Binding) int { return strings.Compare(a.Key.String(), b.Key.String()) })
		h.Node.Published = bs
	}
	return h
}
