package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/reconcile/status"
)

// This file adapts the cloud client, the datapath and the status store to
// the sources observed.Collect reads.

// NewSources adapts the agent's cloud, datapath and status store to what
// observed.Collect reads. `enid plan` and the agent observe through it.
func NewSources(c Cloud, dp Datapath, st *status.Store) observed.Sources {
	src := observed.Sources{Published: publishedSource{st: st}}
	if c != nil {
		src.Cloud = cloudSource{c: c}
	}
	if dp != nil {
		src.Node = dp
	}
	return src
}

type cloudSource struct {
	c Cloud
	// known, when it names the instance asked for, answers Instance without
	// a call: an instance's zone, type, limits and primary ENI never change
	// while it runs.
	known observed.Instance
	// attachedOnly skips the listing of owned ENIs that are not attached
	// and reports carry (the ones the agent already knows) instead.
	attachedOnly bool
	carry        []observed.ENI
}

func (s cloudSource) Instance(ctx context.Context, id string) (observed.Instance, error) {
	if s.known.ID == id && id != "" {
		return s.known, nil
	}
	return s.c.Instance(ctx, id)
}

// VSwitches describes the vSwitches; one the cloud says does not exist is
// left out without an error (observed.CloudSource).
func (s cloudSource) VSwitches(ctx context.Context, ids []string) ([]observed.VSwitch, error) {
	vsw, err := s.c.VSwitches(ctx, ids)
	if errors.Is(err, cloud.ErrNotFound) {
		return vsw, nil
	}
	return vsw, err
}

// SelectVSwitches describes the vSwitches the config's selector selects.
func (s cloudSource) SelectVSwitches(ctx context.Context, vpcID, zoneID string, tags map[string]string) ([]observed.VSwitch, error) {
	return s.c.SelectVSwitches(ctx, vpcID, zoneID, tags)
}

// ENIs lists the ENIs attached to the instance and those carrying our
// owner tag (attached or not: an Available one is in flight or leaked).
func (s cloudSource) ENIs(ctx context.Context, id string) ([]observed.ENI, error) {
	attached, err := s.c.ListENIs(ctx, cloud.ENIFilter{InstanceID: id})
	if err != nil {
		return nil, fmt.Errorf("list ENIs of %s: %w", id, err)
	}
	owned := s.carry
	if !s.attachedOnly {
		owned, err = s.c.ListENIs(ctx, cloud.ENIFilter{Tags: map[string]string{observed.TagOwner: id}})
		if err != nil {
			return attached, fmt.Errorf("list ENIs owned by %s: %w", id, err)
		}
	}
	seen := map[string]bool{}
	for _, e := range attached {
		seen[e.ID] = true
	}
	for _, e := range owned {
		if !seen[e.ID] {
			attached = append(attached, e)
		}
	}
	return attached, nil
}

type publishedSource struct {
	st *status.Store
	// problems, when set, receives the status files that could not be read.
	problems func([]status.Problem)
}

// Published reads back every status file. A file that can't be parsed is
// skipped here: the planner will publish a fresh status for its entry.
func (p publishedSource) Published(context.Context) ([]observed.Binding, error) {
	if p.st == nil {
		return nil, nil
	}
	all, problems, err := p.st.ReadAll()
	if err != nil {
		return nil, err
	}
	if p.problems != nil {
		p.problems(problems)
	}
	out := make([]observed.Binding, 0, len(all))
	for _, a := range all {
		b := observed.Binding{Key: observed.AttachmentKey{ContainerID: a.ContainerID, IfName: a.IfName},
			Revision: a.Revision, Phase: string(a.Phase), Reason: a.Reason, ENIID: a.ENIID}
		for _, ip := range a.IPs {
			if ip.Address.Addr().Is4() {
				b.IPv4 = ip.Address.Addr()
			} else {
				b.IPv6 = ip.Address.Addr()
			}
		}
		out = append(out, b)
	}
	return out, nil
}
