package observed

import (
	"net/netip"
	"slices"
	"time"

	"github.com/enidnet/enid/internal/podkey"
)

// Tag keys enid puts on every ENI it creates. An ENI is "ours" only when
// TagOwner names this instance: everything else is foreign and never touched.
const (
	// TagManagedBy is set to TagManagedByValue on ENIs created by enid.
	TagManagedBy = "enid.dev/managed-by"
	// TagManagedByValue is the value of TagManagedBy.
	TagManagedByValue = "enid"
	// TagOwner names the instance ID that created the ENI and may delete it.
	TagOwner = "enid.dev/owner"
	// TagCreatedAt records creation time (RFC 3339) for leak grace periods.
	TagCreatedAt = "enid.dev/created-at"
	// TagSecurityGroupSet names the security-group set an ENI was created
	// for: "default" (the config's eni.securityGroups), a set of
	// eni.securityGroupSets, or "annotation" (a set only pods' annotations
	// name). An owned ENI without it predates sets and is the default's.
	TagSecurityGroupSet = "enid.dev/security-group-set"
)

// State is one observation of the world.
type State struct {
	// Instance is the ECS instance this node runs on.
	Instance Instance
	// ENIs holds every ENI attached to (or attaching to) the instance, plus
	// ENIs carrying our owner tag that are not attached (Available: leaked
	// or in flight). Sorted by ID.
	ENIs []ENI
	// VSwitches holds the vSwitches named by the config (and those of
	// observed ENIs), sorted by ID.
	VSwitches []VSwitch
	// UnknownVSwitches lists, sorted, the vSwitches asked for that the
	// cloud says do not exist (not in VSwitches).
	UnknownVSwitches []string
	// SelectedVSwitches lists, sorted, the vSwitches of the instance's
	// zone that the config's eni.vSwitchSelector selected (by their tags)
	// at this observation; they are in VSwitches.
	SelectedVSwitches []string
	// Node is the kernel half of the observation.
	Node Node
	// Complete is false when some part could not be observed. A plan made
	// from an incomplete observation never destroys anything.
	Complete bool
	// Problems says what is missing when Complete is false, one line each.
	Problems []string
	// NodeComplete is true when the node half (the kernel and the
	// published statuses) was observed in full, whatever the cloud did.
	NodeComplete bool
	// CloudFrom, when not zero, says the cloud half (Instance, ENIs,
	// VSwitches) could not be observed and is carried from the last
	// complete observation, taken at CloudFrom, as the agent's own actions
	// changed it since. Complete is then false; with NodeComplete, the
	// planner hands out idle addresses of that view and nothing else
	// (degraded mode, docs/design.md).
	CloudFrom time.Time
	// At is when the observation was taken (for display only).
	At time.Time
}

// Instance describes the ECS instance and its instance-type limits.
type Instance struct {
	ID           string
	RegionID     string
	ZoneID       string
	InstanceType string
	VPCID        string
	// PrimaryENI is the ID of the instance's primary ENI (never touched).
	PrimaryENI string
	Limits     Limits
}

// Limits are the per-instance-type ENI limits (DescribeInstanceTypes).
type Limits struct {
	// ENIs is EniQuantity: network interfaces per instance, primary included.
	ENIs int
	// IPv4PerENI is EniPrivateIpAddressQuantity: private IPv4 addresses per
	// ENI, the ENI's own primary address included.
	IPv4PerENI int
	// IPv6PerENI is EniIpv6AddressQuantity.
	IPv6PerENI int
}

// ENIStatus is the ECS Status of a network interface.
type ENIStatus string

// ENI states as ECS reports them.
const (
	ENIAvailable ENIStatus = "Available"
	ENIAttaching ENIStatus = "Attaching"
	ENIInUse     ENIStatus = "InUse"
	ENIDetaching ENIStatus = "Detaching"
	ENIDeleting  ENIStatus = "Deleting"
)

// ENI types as ECS reports them.
const (
	ENITypePrimary   = "Primary"
	ENITypeSecondary = "Secondary"
)

// ENI is one elastic network interface.
type ENI struct {
	ID     string
	MAC    string // lower-case, colon separated
	Status ENIStatus
	// Type is ENITypePrimary or ENITypeSecondary.
	Type string
	// InstanceID is the instance it is attached to; empty when Available.
	InstanceID string
	VSwitchID  string
	ZoneID     string
	VPCID      string
	// PrimaryIP is the ENI's own primary private IPv4; never given to a pod.
	PrimaryIP netip.Addr
	// IPv4 holds the secondary private IPv4 addresses, sorted.
	IPv4 []netip.Addr
	// IPv4Prefixes holds the /28 IPv4 prefixes assigned to the ENI
	// (Ipv4PrefixSets), sorted. Each of their 16 addresses can be a pod
	// address; each prefix takes one of the ENI's private-address slots.
	IPv4Prefixes []netip.Prefix
	// IPv6 holds the IPv6 addresses, sorted.
	IPv6           []netip.Addr
	SecurityGroups []string
	Tags           map[string]string
	// DeviceIndex is the attachment's device index (0 for primary).
	DeviceIndex int
	CreatedAt   time.Time
}

// Owned reports whether the ENI carries enid's owner tag naming instanceID.
// The primary ENI is never owned.
func (e ENI) Owned(instanceID string) bool {
	return e.Type != ENITypePrimary && instanceID != "" &&
		e.Tags[TagManagedBy] == TagManagedByValue && e.Tags[TagOwner] == instanceID
}

// HasIP reports whether ip is one of the ENI's secondary addresses or an
// address inside one of its IPv4 prefixes.
func (e ENI) HasIP(ip netip.Addr) bool {
	if ip.Is4() {
		_, ok := slices.BinarySearchFunc(e.IPv4, ip, netip.Addr.Compare)
		if ok {
			return true
		}
		_, ok = e.PrefixOf(ip)
		return ok
	}
	_, ok := slices.BinarySearchFunc(e.IPv6, ip, netip.Addr.Compare)
	return ok
}

// PrefixOf returns the ENI's IPv4 prefix that holds ip, if any.
func (e ENI) PrefixOf(ip netip.Addr) (netip.Prefix, bool) {
	for _, p := range e.IPv4Prefixes {
		if p.Contains(ip) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// IPv4PrefixBits is the length of an ENI's IPv4 prefix: ECS assigns /28s,
// 16 addresses each.
const IPv4PrefixBits = 28

// IPv4PrefixSize is the number of addresses in one IPv4 prefix.
const IPv4PrefixSize = 1 << (32 - IPv4PrefixBits)

// VSwitch is a VPC vSwitch (subnet).
type VSwitch struct {
	ID       string
	ZoneID   string
	VPCID    string
	CIDR     netip.Prefix
	IPv6CIDR netip.Prefix
	// AvailableIPs is AvailableIpAddressCount as last reported.
	AvailableIPs int
}

// Gateway returns the vSwitch gateway: the address at index -3 of its
// CIDR (x.x.x.253 in a /24), as on Alibaba Cloud.
func (v VSwitch) Gateway() netip.Addr {
	return GatewayOf(v.CIDR)
}

// GatewayOf returns the vSwitch gateway for an IPv4 CIDR: the address at
// index -3 (the broadcast address minus 2). It returns the zero Addr for an
// invalid or non-IPv4 prefix or one too small to hold a gateway.
func GatewayOf(p netip.Prefix) netip.Addr {
	if !p.IsValid() || !p.Addr().Is4() || p.Bits() > 29 {
		return netip.Addr{}
	}
	a := p.Masked().Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n |= (1 << (32 - p.Bits())) - 1 // broadcast
	n -= 2
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// GatewayV6 returns the vSwitch's IPv6 gateway (see GatewayV6Of).
func (v VSwitch) GatewayV6() netip.Addr { return GatewayV6Of(v.IPv6CIDR) }

// GatewayV6Of returns the IPv6 gateway of a vSwitch's IPv6 CIDR: the address
// at index -3, by the same rule as IPv4 (the simulator serves the same
// address as the metadata item ipv6-gateway, and hands out addresses from
// the bottom of the range). The zero Addr for an invalid or IPv4 prefix.
func GatewayV6Of(p netip.Prefix) netip.Addr {
	if !p.IsValid() || !p.Addr().Is6() || p.Addr().Is4In6() || p.Bits() > 126 {
		return netip.Addr{}
	}
	b := p.Masked().Addr().As16()
	host := 128 - p.Bits()
	for i := 15; i >= 0 && host > 0; i-- {
		n := min(host, 8)
		b[i] |= byte(1<<n - 1)
		host -= n
	}
	b[15] -= 2
	return netip.AddrFrom16(b)
}

// Node is the kernel half of the observation.
type Node struct {
	// ENIDevices describes, for each secondary ENI MAC found on the host,
	// its device and whether enid's configuration of it is complete.
	ENIDevices []ENIDevice
	// Pods holds the network state of every pod attachment enid set up
	// (found by the attachment identity enid records on the host veth).
	Pods []PodNet
	// Published holds the statuses the agent last published, read back
	// from /run/enid/status: the binding record when the kernel holds none
	// (no datapath, or state lost), and what not to publish again.
	Published []Binding
	// MissingNetNS lists, sorted, the entries whose pod network namespace
	// does not exist (the datapath opened the entry's path and found
	// nothing): their pods are gone, and DEL should follow. The agent's
	// planning fills it from its check of each entry (reconcile.Planning);
	// the node reading leaves it empty.
	MissingNetNS []AttachmentKey
}

// Binding is a published status as read back: which attachment holds which
// addresses, answering which entry revision.
type Binding struct {
	Key      AttachmentKey
	Revision string
	// Phase is "Pending", "Ready" or "Failed".
	Phase  string
	Reason string
	IPv4   netip.Addr
	IPv6   netip.Addr
	ENIID  string
}

// ENIDevice is an ENI's network device in the host namespace.
type ENIDevice struct {
	MAC   string
	Name  string
	Index int
	MTU   int
	Up    bool
	// Table is the per-ENI route table id (0 when not configured).
	Table int
	// Configured is true when the device is up and its table holds the
	// default route via the vSwitch gateway.
	Configured bool
}

// AttachmentKey names one pod attachment: the CNI (containerID, ifName).
// It is podkey.Key (String renders "<containerID>_<ifName>", the entry and
// status file stem; Compare orders keys as their strings do), the same
// type as desired.Key.
type AttachmentKey = podkey.Key

// PodNet is what the node holds for one pod attachment.
type PodNet struct {
	Key AttachmentKey
	// HostVeth is the host side of the pod's veth ("" in exclusive mode
	// when only the ENI was moved, or when the veth is gone).
	HostVeth string
	// NetNS is the pod's netns path when known.
	NetNS string
	IPv4  netip.Addr
	IPv6  netip.Addr
	// ENIMAC is the ENI whose table the pod's rules point at (shared mode),
	// or the ENI moved into the pod (exclusive mode).
	ENIMAC string
	// Exclusive is true when an ENI was moved into the pod's netns.
	Exclusive bool
	// HostRoutes are, in exclusive mode, the destinations the pod routes
	// through its service veth to the node (enid's routes via the
	// service gateway in the pod), sorted; nil when none or when the
	// pod's namespace was not read.
	HostRoutes []netip.Prefix
	// Healthy is true when every piece enid sets up for the attachment is
	// present and correct (veth, addresses, routes, rules, neighbour).
	Healthy bool
	// Problems lists what is missing or wrong when Healthy is false.
	Problems []string
}
