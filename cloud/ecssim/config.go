package ecssim

import (
	"log/slog"
	"net/netip"
	"time"
)

// The access key pair a simulator accepts when Config.AccessKeys is empty.
const (
	DefaultAccessKeyID     = "LTAIsimulatorkey"
	DefaultAccessKeySecret = "simulator-secret"
)

// Defaults for the zero values of Config.
const (
	DefaultRegion  = "cn-hangzhou"
	DefaultVPCID   = "vpc-sim"
	DefaultVPCCIDR = "192.168.0.0/16"
	// DefaultSecurityGroup is the security group that exists when
	// Config.SecurityGroups is empty.
	DefaultSecurityGroup = "sg-sim"
	// DefaultRAMRole is the RAM role the metadata service hands out.
	DefaultRAMRole = "enid-sim-role"
	// DefaultInstanceType is used by AddInstance when the spec names none.
	DefaultInstanceType = "ecs.g7.xlarge"
)

// Default asynchronous transition delays (Config.Delays fields left zero).
// They are short so that tests stay fast, yet long enough that a client
// which does not poll for InUse is caught.
const (
	DefaultAttachDelay = 50 * time.Millisecond
	DefaultDetachDelay = 50 * time.Millisecond
	DefaultDeleteDelay = 20 * time.Millisecond
)

// Config describes the simulated account, region and behaviour. The zero
// value is usable: it yields one VPC 192.168.0.0/16 in cn-hangzhou with
// zones cn-hangzhou-h and cn-hangzhou-i and one /24 vSwitch in each.
type Config struct {
	// Region is the region ID (default DefaultRegion).
	Region string
	// VPCID and VPCCIDR describe the single VPC (defaults DefaultVPCID,
	// DefaultVPCCIDR).
	VPCID   string
	VPCCIDR string
	// Zones lists the zone IDs; default <region>-h and <region>-i.
	Zones []string
	// VSwitches are created at start. Default: one /24 per zone,
	// 192.168.<n>.0/24 with IPv6 2408:4005:300:<n>::/64.
	VSwitches []VSwitchConfig
	// SecurityGroups that exist in the VPC (default [DefaultSecurityGroup]).
	SecurityGroups []string
	// AccessKeys maps access key ID to secret; default one pair,
	// DefaultAccessKeyID / DefaultAccessKeySecret.
	AccessKeys map[string]string
	// Delays are the durations of the asynchronous ENI transitions.
	Delays Delays
	// MetadataLag is how long after an ENI becomes InUse its MAC stays
	// absent from the metadata service (0: visible at once).
	MetadataLag time.Duration
	// MetadataRequireToken makes the metadata service refuse GETs that
	// carry no token (hardened mode).
	MetadataRequireToken bool
	// RAMRole is the role name served under ram/security-credentials/
	// (default DefaultRAMRole).
	RAMRole string
	// Latency added to every API call before it is answered.
	Latency Latency
	// Faults are random error rates.
	Faults Faults
	// AccountRateLimit throttles all API calls of the account together,
	// answering Throttling.User; zero QPS means no limit.
	AccountRateLimit RateLimit
	// StaleReads is how long after a mutation DescribeNetworkInterfaces
	// and DescribeInstances keep showing the ENI as it was before (0: off).
	StaleReads time.Duration
	// Conflicts makes a mutation of an ENI or instance that overlaps
	// another mutation of it answer OperationConflict (see Settings).
	Conflicts bool
	// MetadataFaults are random errors of the metadata service.
	MetadataFaults MetadataFaults
	// MaxENIs caps the ENIs of the account (MaxEniCountExceeded); 0: none.
	MaxENIs int
	// StateFile, when set, is loaded at New (if it exists) and rewritten
	// after every change of the model.
	StateFile string
	// Clock returns the current time for timestamps, stale-read windows,
	// metadata lag and token expiry (default time.Now). Transition delays
	// and latency use real timers unless Timers is set.
	Clock func() time.Time
	// Timers, when set, times the transition delays and the latency
	// instead of real timers: the deterministic simulation gives its
	// virtual clock (with Clock reading the same clock), so that the
	// simulated cloud moves only when the simulation moves time.
	Timers Timers
	// Logger receives one debug line per call (default: discard).
	Logger *slog.Logger
	// Seed seeds the random source used by faults and latency (0: fixed 1).
	Seed uint64
}

// Timers is a source of timers other than the wall clock's: After is
// time.After on it. A clock whose timers fire only when their owner moves
// it (the simulation's virtual clock) satisfies it.
type Timers interface {
	After(d time.Duration) <-chan time.Time
}

// VSwitchConfig describes a vSwitch created at start.
type VSwitchConfig struct {
	ID       string
	Zone     string
	CIDR     netip.Prefix
	IPv6CIDR netip.Prefix // optional
	Tags     map[string]string
}

// Delays are the durations of asynchronous ENI transitions.
type Delays struct {
	Attach time.Duration // Attaching -> InUse (default DefaultAttachDelay)
	Detach time.Duration // Detaching -> Available (default DefaultDetachDelay)
	Delete time.Duration // Deleting -> gone (default DefaultDeleteDelay)
}

// NoDelay is a Delays value whose transitions complete as soon as the
// transition goroutine runs (zero fields mean "default", so use this).
const NoDelay = time.Nanosecond

// Latency is added to API calls: Fixed + uniform [0, Uniform) +
// exponential with mean Exponential. PerAction overrides it by action name.
type Latency struct {
	Fixed       time.Duration
	Uniform     time.Duration
	Exponential time.Duration
	PerAction   map[string]LatencyDist `json:",omitempty"`
}

// LatencyDist is one latency distribution (see Latency).
type LatencyDist struct {
	Fixed       time.Duration
	Uniform     time.Duration
	Exponential time.Duration
}

// Faults are random injected errors. A call first draws against
// PerAction[action] (if present) else Rate; on a hit it fails with one of
// Codes chosen uniformly (default Throttling, InternalError,
// ServiceUnavailable).
type Faults struct {
	Rate      float64            // probability 0..1 for every action
	PerAction map[string]float64 `json:",omitempty"`
	Codes     []string           `json:",omitempty"`
}

// MetadataFaults are random metadata-service errors: with probability Rate
// a request fails with one of Statuses (default 500, 503 and 429), as the
// real service does under load.
type MetadataFaults struct {
	Rate     float64
	Statuses []int `json:",omitempty"`
}

// RateLimit is a token bucket: QPS tokens per second, Burst capacity
// (default burst: max(1, QPS)).
type RateLimit struct {
	QPS   float64
	Burst int
}

// Fault is a scripted error. With Rate == 0 it is one-shot: the next Count
// (default 1) calls of Action ("" = any API action) fail with Code. With
// Rate > 0 it sets the random error rate of Action (or the global rate when
// Action is "") instead. Action MetadataAction scripts the metadata
// service instead (Status, not Code).
type Fault struct {
	Action  string
	Code    string
	Message string `json:",omitempty"`
	// Status overrides the HTTP status of Code (0: the real one).
	Status int     `json:",omitempty"`
	Count  int     `json:",omitempty"`
	Rate   float64 `json:",omitempty"`
}

// Hooks are called when the data plane of a node would change: a test can
// plug a device carrying the ENI's MAC into a namespace playing the node,
// and route assigned addresses. Hooks run synchronously on the simulator's
// goroutines, without the model lock held; they must not block for long.
type Hooks struct {
	// OnAttach runs when an ENI finishes attaching, before its status
	// becomes InUse (so the device exists when a client sees InUse).
	OnAttach func(ENIEvent)
	// OnDetach runs when a detach starts, before the call is answered.
	OnDetach func(ENIEvent)
	// OnAssign and OnUnassign run for address changes on an attached ENI,
	// before the call is answered; the event carries only the changed
	// addresses in IPv4 and IPv6, and the changed prefixes in IPv4Prefixes
	// (their addresses in IPv4 as well).
	OnAssign   func(ENIEvent)
	OnUnassign func(ENIEvent)
}

// ENIEvent describes an ENI for a hook.
type ENIEvent struct {
	InstanceID string
	ENIID      string
	MAC        string
	PrimaryIP  netip.Addr
	// IPv4 holds secondary addresses and every address of the IPv4
	// prefixes in the event (so that a hook routing addresses routes
	// those too).
	IPv4 []netip.Addr
	// IPv4Prefixes are the IPv4 prefixes in the event.
	IPv4Prefixes []netip.Prefix
	IPv6         []netip.Addr
	CIDR         netip.Prefix
	Gateway      netip.Addr
	// GatewayV6 is the vSwitch's IPv6 gateway, as the metadata item
	// ipv6-gateway gives it; the zero Addr when the vSwitch has no IPv6
	// CIDR.
	GatewayV6   netip.Addr
	DeviceIndex int
}

// InstanceSpec describes an instance to add.
type InstanceSpec struct {
	ID           string // optional; generated when empty
	InstanceType string // default DefaultInstanceType
	Zone         string // default: the vSwitch's zone
	VSwitchID    string // default: the first vSwitch (of Zone, if set)
	// IPv6Count gives the primary ENI that many IPv6 addresses, as
	// RunInstances' Ipv6AddressCount does (0 to the type's IPv6 per ENI;
	// the vSwitch needs an IPv6 CIDR).
	IPv6Count int
}

// InstanceInfo describes an added instance.
type InstanceInfo struct {
	ID           string
	InstanceType string
	Zone         string
	VSwitchID    string
	PrimaryENI   string
	MAC          string
	PrimaryIP    netip.Addr
	// PrimaryIPv6 are the primary ENI's IPv6 addresses (IPv6Count).
	PrimaryIPv6 []netip.Addr
}
