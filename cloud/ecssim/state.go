package ecssim

import (
	"maps"
	"net/netip"
	"slices"
	"time"
)

// State is the whole model, as Dump returns it and the state file holds it.
type State struct {
	Region    string
	VPCID     string
	VPCCIDR   netip.Prefix
	Instances []InstanceState
	ENIs      []ENIState
	VSwitches []VSwitchState
	// Seq is the last sequence number used for IDs and MACs.
	Seq uint64
}

// InstanceState is one simulated ECS instance.
type InstanceState struct {
	ID             string
	InstanceType   string
	ZoneID         string
	VSwitchID      string
	PrimaryENI     string
	SecurityGroups []string
	CreatedAt      time.Time
	// Status is Running or Stopped ("" in a state file written before
	// instances had a status: Running). A released instance is gone.
	Status string `json:",omitempty"`
}

// ENIState is one simulated ENI.
type ENIState struct {
	ID         string
	MAC        string
	Status     string // Available, Attaching, InUse, Detaching, Deleting
	Type       string // Primary or Secondary
	InstanceID string
	VSwitchID  string
	ZoneID     string
	VPCID      string
	PrimaryIP  netip.Addr
	// IPv4 holds the secondary private IPv4 addresses, sorted.
	IPv4 []netip.Addr
	// IPv4Prefixes holds the /28 IPv4 prefixes, sorted; each takes one
	// private IPv4 slot of the ENI, as a secondary address does.
	IPv4Prefixes []netip.Prefix `json:",omitempty"`
	// IPv6 holds the IPv6 addresses, sorted.
	IPv6           []netip.Addr
	SecurityGroups []string
	Tags           map[string]string
	DeviceIndex    int
	Description    string
	TrafficMode    string
	// DeleteOnRelease is CreateNetworkInterface's DeleteOnRelease: the ENI
	// is deleted with the instance it is attached to when that instance is
	// released, rather than detached and kept (ReleaseInstance).
	DeleteOnRelease bool `json:",omitempty"`
	CreatedAt       time.Time
	// InUseAt is when the ENI last became InUse (metadata lag counts from it).
	InUseAt time.Time
}

// VSwitchState is one simulated vSwitch.
type VSwitchState struct {
	ID       string
	ZoneID   string
	VPCID    string
	CIDR     netip.Prefix
	IPv6CIDR netip.Prefix
	// AvailableIPs is AvailableIpAddressCount: usable IPv4 addresses not
	// held by any ENI.
	AvailableIPs int
	Tags         map[string]string
	// Held lists the addresses something outside the model holds
	// (FragmentVSwitch), sorted; they count as used.
	Held []netip.Addr `json:",omitempty"`
	// FreePrefixes is how many aligned /28s are free for an IPv4 prefix
	// (computed; not read back from a state file).
	FreePrefixes int
}

func (e *ENIState) clone() *ENIState {
	c := *e
	c.IPv4 = slices.Clone(e.IPv4)
	c.IPv4Prefixes = slices.Clone(e.IPv4Prefixes)
	c.IPv6 = slices.Clone(e.IPv6)
	c.SecurityGroups = slices.Clone(e.SecurityGroups)
	c.Tags = maps.Clone(e.Tags)
	return &c
}

// ipCount is the number of private IPv4 slots in use: the primary address,
// the secondary ones and the prefixes (ECS counts a prefix as one slot of
// EniPrivateIpAddressQuantity).
func (e *ENIState) ipCount() int { return 1 + len(e.IPv4) + len(e.IPv4Prefixes) }
