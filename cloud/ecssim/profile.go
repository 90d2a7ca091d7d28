package ecssim

import (
	"fmt"
	"time"
)

// Profiles: named sets of the simulator's timing and fault behaviours.
const (
	// ProfileFast is the default: 50 ms attaches, no stale reads, no
	// metadata lag, no latency, no faults. Unit tests and the demo use it.
	ProfileFast = "fast"
	// ProfileRealistic behaves as ECS is documented to and as peers report
	// it (see Realistic).
	ProfileRealistic = "realistic"
)

// Realistic-profile figures. ECS documents attach and detach as
// asynchronous (clients poll DescribeNetworkInterfaces) without a
// duration; peers wait seconds (Cilium polls InUse every 2.5 s) and see a
// new ENI's MAC in metadata late; describes lag changes by about a second.
const (
	RealisticAttach      = 3 * time.Second
	RealisticDetach      = 2 * time.Second
	RealisticDelete      = time.Second
	RealisticStaleReads  = 1500 * time.Millisecond
	RealisticMetadataLag = 2 * time.Second
	// RealisticConflictRate is the chance that a mutating call is refused
	// with OperationConflict although nothing of enid's overlaps (another
	// console or controller operation on the instance).
	RealisticConflictRate = 0.02
	// RealisticMetadataFaultRate is the chance of a 500, 503 or 429 from
	// the metadata service.
	RealisticMetadataFaultRate = 0.01
)

// mutatingActions are the ECS actions that change an ENI.
var mutatingActions = [...]string{"CreateNetworkInterface", "AttachNetworkInterface", "DetachNetworkInterface",
	"DeleteNetworkInterface", "AssignPrivateIpAddresses", "UnassignPrivateIpAddresses",
	"AssignIpv6Addresses", "UnassignIpv6Addresses"}

// ApplyProfile sets the timing and fault fields of cfg (Delays, StaleReads,
// MetadataLag, Latency, Faults, Conflicts, MetadataFaults) for the named
// profile; "" and ProfileFast leave cfg as it is. ProfileRealistic: attach
// RealisticAttach, detach RealisticDetach, delete RealisticDelete; stale
// describes for RealisticStaleReads after a change; metadata lag
// RealisticMetadataLag; every API call 60 ms + exponential (mean 60 ms);
// overlapping mutations of one ENI or instance refused with
// OperationConflict, and RealisticConflictRate of mutating calls refused so
// anyway; RealisticMetadataFaultRate of metadata reads fail.
func ApplyProfile(cfg *Config, name string) error {
	switch name {
	case "", ProfileFast:
		return nil
	case ProfileRealistic:
	default:
		return fmt.Errorf("unknown simulator profile %q (want %s or %s)", name, ProfileFast, ProfileRealistic)
	}
	cfg.Delays = Delays{Attach: RealisticAttach, Detach: RealisticDetach, Delete: RealisticDelete}
	cfg.StaleReads = RealisticStaleReads
	cfg.MetadataLag = RealisticMetadataLag
	cfg.Latency = Latency{Fixed: 60 * time.Millisecond, Exponential: 60 * time.Millisecond}
	pa := map[string]float64{}
	for _, a := range mutatingActions {
		pa[a] = RealisticConflictRate
	}
	cfg.Faults = Faults{PerAction: pa, Codes: []string{"OperationConflict"}}
	cfg.Conflicts = true
	cfg.MetadataFaults = MetadataFaults{Rate: RealisticMetadataFaultRate}
	return nil
}
