package ecssim

import (
	"fmt"
	"slices"
)

// This file models the instance lifecycle that ENI clean-up depends on:
// an instance stops, starts again, or is released (DeleteInstance, or the
// end of a spot or subscription instance), and what ECS then does to its
// ENIs.
//
// Sources: "Retain and reuse an ENI" (ECS user guide, 2026-02): on
// release each attached ENI is released or retained by its "Delete on
// instance release" setting (CreateNetworkInterface DeleteOnRelease,
// ModifyNetworkInterfaceAttribute DeleteOnRelease); a retained secondary
// ENI keeps its private addresses and security groups and is left
// detached, Available. The primary ENI goes with the instance here (its
// retention is a per-region option enid never uses). DetachNetworkInterface
// and AttachNetworkInterface name a released instance InvalidEcsId.NotFound
// (model.instance); DescribeInstances no longer lists it.

// Instance statuses ECS reports (DescribeInstances Status) that the
// simulator models; Pending, Starting and Stopping are not modelled (stop
// and start are immediate).
const (
	InstanceRunning = "Running"
	InstanceStopped = "Stopped"
)

func (in InstanceState) status() string {
	if in.Status == "" {
		return InstanceRunning
	}
	return in.Status
}

// ReleaseInstance releases an instance as DeleteInstance (or the expiry of
// a spot or subscription instance) does: its primary ENI and every ENI
// attached or attaching to it with DeleteOnRelease are deleted, their
// addresses returned to the vSwitch; every other attached ENI is detached
// and left Available with its addresses, tags and security groups. A
// transition under way (an attach, a detach) ends with the instance. The
// OnDetach hook runs for each ENI that leaves the instance, so a device a
// test plugged in for it goes. It returns the IDs of the ENIs deleted and
// of those left Available.
func (s *Server) ReleaseInstance(id string) (deleted, kept []string, err error) {
	s.mu.Lock()
	in := s.m.instances[id]
	if in == nil {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("release instance: no instance %q", id)
	}
	var events []ENIEvent
	for _, e := range s.m.attached(id) {
		s.touchLocked(e.ID)
		if e.Type != "Primary" {
			events = append(events, s.m.eventOf(e))
		}
		if e.Type == "Primary" || e.DeleteOnRelease {
			s.m.remove(e)
			deleted = append(deleted, e.ID)
			continue
		}
		s.m.setDetached(e)
		kept = append(kept, e.ID)
	}
	delete(s.m.instances, id)
	hook := s.hooks.OnDetach
	s.saveLocked()
	s.mu.Unlock()
	if hook != nil {
		for _, ev := range events {
			hook(ev)
		}
	}
	slices.Sort(deleted)
	slices.Sort(kept)
	return deleted, kept, nil
}

// StopInstance stops a running instance (at once: Stopping is not
// modelled). Its ENIs stay attached and InUse, as on ECS; ENIs may still
// be attached to and detached from it (DetachNetworkInterface and
// AttachNetworkInterface take a Running or Stopped instance).
func (s *Server) StopInstance(id string) error { return s.setInstanceStatus(id, InstanceStopped) }

// StartInstance starts a stopped instance again.
func (s *Server) StartInstance(id string) error { return s.setInstanceStatus(id, InstanceRunning) }

func (s *Server) setInstanceStatus(id, status string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.m.instances[id]
	if in == nil {
		return fmt.Errorf("set instance %s %s: no such instance", id, status)
	}
	in.Status = status
	s.saveLocked()
	return nil
}

// TagVSwitch sets tags on a vSwitch, as TagResources (VPC, ResourceType
// VSWITCH) does; a value "" removes its key. DescribeVSwitches' Tag.N
// filter sees the change at once.
func (s *Server) TagVSwitch(id string, tags map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.m.vsw[id]
	if v == nil {
		return fmt.Errorf("tag vswitch: no vswitch %q", id)
	}
	for k, val := range tags {
		if val == "" {
			delete(v.Tags, k)
			continue
		}
		v.Tags[k] = val
	}
	s.saveLocked()
	return nil
}
