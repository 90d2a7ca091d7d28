package desired

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"time"
)

// ConfigAPIVersion and ConfigKind identify the config format.
const (
	ConfigAPIVersion = "enid.dev/v1alpha1"
	ConfigKind       = "AgentConfig"
)

// Mode is how pods get addresses.
type Mode string

// Modes.
const (
	// ModeSharedENI gives pods secondary IPs of secondary ENIs (veth +
	// policy routing); Terway's ENIMultiIP.
	ModeSharedENI Mode = "shared-eni"
	// ModeExclusiveENI moves a whole ENI into each pod; Terway's ENIOnly.
	ModeExclusiveENI Mode = "exclusive-eni"
)

// IPStack is which address families pods get.
type IPStack string

// IP stacks.
const (
	IPv4Only  IPStack = "ipv4"
	DualStack IPStack = "dual"
	IPv6Only  IPStack = "ipv6"
)

// VSwitchPolicy chooses among the configured vSwitches of a zone.
type VSwitchPolicy string

// vSwitch selection policies.
const (
	// VSwitchMostFree picks the vSwitch with the most free addresses.
	VSwitchMostFree VSwitchPolicy = "most-free"
	// VSwitchOrdered picks the first listed vSwitch that has room (those
	// eni.vSwitchSelector adds come after the listed ones, by ID).
	VSwitchOrdered VSwitchPolicy = "ordered"
	// VSwitchRandom picks one of the vSwitches with room at random, with
	// odds in proportion to their free addresses, from a draw derived from
	// the instance and the ENI (the plan stays deterministic): a fleet
	// spreads over the vSwitches without every node taking the emptiest.
	VSwitchRandom VSwitchPolicy = "random"
)

// VSwitchSelector selects vSwitches by their tags (DescribeVSwitches'
// Tag.N filter), in the instance's zone and VPC.
type VSwitchSelector struct {
	// Tags must all be on a selected vSwitch; a value "" matches any value
	// of its key. 1 to 20 tags.
	Tags map[string]string `json:"tags"`
}

// IPv4Allocation is the kind of IPv4 address shared-mode pods get from
// an ENI.
type IPv4Allocation string

// IPv4 allocation kinds.
const (
	// IPv4Secondary assigns single secondary private addresses: one per
	// private-address slot of the ENI.
	IPv4Secondary IPv4Allocation = "secondary"
	// IPv4Prefix assigns /28 prefixes (16 pod addresses per slot). Where a
	// vSwitch has no aligned /28 free (fragmented), pods wait.
	IPv4Prefix IPv4Allocation = "prefix"
	// IPv4PreferPrefix assigns /28 prefixes, and single secondary
	// addresses on a vSwitch that just refused a prefix (fragmented),
	// returning to prefixes when that mark expires.
	IPv4PreferPrefix IPv4Allocation = "prefer-prefix"
)

// Config is the agent configuration (apiVersion enid.dev/v1alpha1, kind
// AgentConfig). Defaults are in defaults.go, in one place.
type Config struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Mode is shared-eni or exclusive-eni.
	Mode Mode `json:"mode,omitempty"`
	// IPStack is ipv4, dual or ipv6.
	IPStack IPStack   `json:"ipStack,omitempty"`
	Pool    Pool      `json:"pool"`
	ENI     ENIConfig `json:"eni"`
	Cloud   Cloud     `json:"cloud"`
	// ServiceCIDRs are the destinations an exclusive-eni pod reaches
	// through the node rather than its ENI: the cluster's Service
	// (ClusterIP) ranges, which kube-proxy translates in the node's
	// netfilter and the VPC does not route. IPv4 and IPv6 prefixes, as
	// strings ("10.96.0.0/12"); ServicePrefixes parses them. Unused in
	// shared-eni mode, where all pod traffic passes through the node.
	ServiceCIDRs []string `json:"serviceCIDRs,omitempty"`
	// StickyIPHold is how long a sticky pod's address is kept after the pod
	// is deleted, waiting for it to come back under the same name.
	StickyIPHold Duration `json:"stickyIPHold,omitempty"`
	// StickyStatefulSets gives pods owned by a StatefulSet a sticky address
	// without an annotation (nil: true). It needs the pod's owner, so it
	// applies only where the agent reads pods from the Kubernetes API.
	StickyStatefulSets *bool `json:"stickyStatefulSets,omitempty"`
	// ResyncPeriod is how often the agent re-reads everything in full.
	ResyncPeriod Duration `json:"resyncPeriod,omitempty"`
	// StaleEntryTimeout is how long an entry whose pod network namespace
	// no longer exists is waited on (for the CNI DEL that normally
	// follows) before it is given up: Failed with netns-gone, its
	// addresses released. Meanwhile it is Pending and never gets a new
	// address, so it holds back no live pod.
	StaleEntryTimeout Duration `json:"staleEntryTimeout,omitempty"`
	// Overrides are per-node changes, applied in order to nodes they match.
	Overrides []Override `json:"overrides,omitempty"`
}

// ServicePrefixes returns ServiceCIDRs parsed and masked, in order; a
// string that does not parse is left out (Validate reports it).
func (c Config) ServicePrefixes() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range c.ServiceCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil {
			ps = append(ps, p.Masked())
		}
	}
	return ps
}

// StickyForStatefulSets reports whether StatefulSet pods get sticky
// addresses (StickyStatefulSets, true when unset).
func (c Config) StickyForStatefulSets() bool {
	return c.StickyStatefulSets == nil || *c.StickyStatefulSets
}

// Pool is the shared-mode IP pool policy. All counts are IPs.
type Pool struct {
	// MinIdle is the number of idle IPs to keep ready for new pods.
	MinIdle int `json:"minIdle"`
	// MaxIdle is the most idle IPs kept; above it, idle IPs are released
	// after ReleaseDelay.
	MaxIdle int `json:"maxIdle"`
	// MinTotal is the fewest IPs held in all (used + idle).
	MinTotal int `json:"minTotal"`
	// Batch is the growth step: allocations are rounded up to it (<= 10
	// per call, as ECS allows).
	Batch int `json:"batch"`
	// ReleaseDelay is how long idle must stay above MaxIdle before release.
	ReleaseDelay Duration `json:"releaseDelay"`
	// Cooldown is how long a released pod IP stays out of use (so
	// conntrack and kube-proxy forget it) before it is handed out again.
	Cooldown Duration `json:"cooldown"`
	// SpreadWindow bounds how long a node defers optional pool work (growth
	// to a new minimum, release above a new maximum) after a change of the
	// pool's knobs: each node waits an offset within the window derived from
	// its instance ID, so a change landing on a whole fleet at once does not
	// make every node call the API at the same instant. Pods that wait are
	// never deferred. Zero turns the spread off.
	SpreadWindow Duration `json:"spreadWindow,omitempty"`
	// UnschedulableRelease, when not zero, shrinks the idle pool of a node
	// that has been unschedulable (cordoned, drained) this long to zero:
	// minIdle, maxIdle and minTotal count as 0 and idle addresses and
	// empty ENIs go at once; pods still on the node keep theirs, and new
	// ones (DaemonSet pods) are still served. Uncordoned, the pool grows
	// back. It needs the Kubernetes API (the Node's spec.unschedulable).
	UnschedulableRelease Duration `json:"unschedulableRelease,omitempty"`
}

// ENIConfig says which ENIs enid creates.
type ENIConfig struct {
	// MaxENIs caps the secondary ENIs enid attaches (0: the instance limit).
	MaxENIs int `json:"maxENIs"`
	// VSwitches maps zone ID to the vSwitch IDs pods may use in that zone.
	VSwitches map[string][]string `json:"vSwitches"`
	// VSwitchSelector, when set, adds the vSwitches of the instance's zone
	// and VPC that carry its tags, as the cloud lists them at every full
	// observation (resync): a vSwitch tagged later is used from the next
	// one, an untagged one is no longer chosen for new ENIs.
	VSwitchSelector *VSwitchSelector `json:"vSwitchSelector,omitempty"`
	// VSwitchPolicy is most-free, ordered or random.
	VSwitchPolicy VSwitchPolicy `json:"vSwitchPolicy,omitempty"`
	// SecurityGroups are attached to every ENI enid creates (1..10).
	SecurityGroups []string `json:"securityGroups"`
	// Tags are extra tags put on every ENI enid creates.
	Tags map[string]string `json:"tags,omitempty"`
	// MTU of ENI devices and pod interfaces (0: leave the device's).
	MTU int `json:"mtu,omitempty"`
	// IPv4Allocation is secondary, prefix or prefer-prefix: how pods'
	// IPv4 addresses are taken from ENIs (shared-eni mode only). It may
	// change on a running node: bound addresses stay with their pods.
	IPv4Allocation IPv4Allocation `json:"ipv4Allocation,omitempty"`
	// SecurityGroupSets name further sets of security groups and may tune
	// each set's pool (see SecurityGroupSet, docs/config.md).
	SecurityGroupSets []SecurityGroupSet `json:"securityGroupSets,omitempty"`
	// NamespaceSecurityGroups maps a pod namespace to the name of a set in
	// SecurityGroupSets: its pods without the security-groups annotation
	// get that set instead of SecurityGroups.
	NamespaceSecurityGroups map[string]string `json:"namespaceSecurityGroups,omitempty"`
	// MaxENIsPerSet caps the ENIs of each security-group set other than
	// the default on a node (0: no cap but MaxENIs, which counts every
	// set's), so that pods of one set cannot take every ENI slot.
	MaxENIsPerSet int `json:"maxENIsPerSet,omitempty"`
}

// Cloud says how to reach the ECS/VPC API.
type Cloud struct {
	// Region is the region ID; empty means "from instance metadata".
	Region string `json:"region,omitempty"`
	// Endpoint overrides the ECS and VPC endpoint (host:port).
	Endpoint string `json:"endpoint,omitempty"`
	// MetadataEndpoint overrides the metadata base URL
	// (default http://100.100.100.200).
	MetadataEndpoint string      `json:"metadataEndpoint,omitempty"`
	RateLimit        RateLimit   `json:"rateLimit"`
	Credentials      Credentials `json:"credentials"`
}

// RateLimit is a token bucket for all calls plus optional per-action ones.
type RateLimit struct {
	// QPS is the sustained rate of all calls together.
	QPS float64 `json:"qps"`
	// Burst is the bucket size.
	Burst int `json:"burst"`
	// PerAction overrides by API action name (e.g. AssignPrivateIpAddresses).
	PerAction map[string]ActionRate `json:"perAction,omitempty"`
}

// ActionRate is a token bucket for one API action.
type ActionRate struct {
	QPS   float64 `json:"qps"`
	Burst int     `json:"burst"`
}

// CredentialSource is where API credentials come from.
type CredentialSource string

// Credential sources.
const (
	// CredentialsEnv reads ALIBABA_CLOUD_ACCESS_KEY_ID/SECRET (and
	// ALIBABA_CLOUD_SECURITY_TOKEN for STS) from the environment.
	CredentialsEnv CredentialSource = "env"
	// CredentialsFile reads a YAML/JSON file with accessKeyID,
	// accessKeySecret and optional securityToken.
	CredentialsFile CredentialSource = "file"
	// CredentialsRAMRole uses the instance's RAM role via metadata.
	CredentialsRAMRole CredentialSource = "ram-role"
)

// Credentials selects the credential source. It never holds secrets.
type Credentials struct {
	Source CredentialSource `json:"source,omitempty"`
	// File is the credentials file path (source: file).
	File string `json:"file,omitempty"`
	// RoleName is the RAM role name (source: ram-role); empty means the
	// one metadata lists.
	RoleName string `json:"roleName,omitempty"`
}

// Override is a per-node change: when Match matches the node, Config (a
// partial config, merged like a drop-in) is applied.
type Override struct {
	Match NodeSelector `json:"match"`
	// Config is a partial AgentConfig body (without apiVersion/kind).
	Config json.RawMessage `json:"config"`
}

// NodeSelector matches nodes by facts the node knows. Every non-empty field
// must match; within a field any listed value matches.
type NodeSelector struct {
	NodeNames     []string          `json:"nodeNames,omitempty"`
	Zones         []string          `json:"zones,omitempty"`
	InstanceTypes []string          `json:"instanceTypes,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
}

// NodeFacts are what the node knows about itself, used to pick overrides.
type NodeFacts struct {
	NodeName     string
	Zone         string
	InstanceType string
	// Labels are the node's labels when available (nil otherwise).
	Labels map[string]string
}

// Duration is a time.Duration written as a Go duration string ("90s").
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes the duration as a string such as "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string ("90s", "5m").
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"30s\" or \"5m\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q: use a number with a unit such as \"30s\" or \"5m\"", s)
	}
	*d = Duration(v)
	return nil
}
