package desired

import "time"

// The defaults, in one place. docs/config.md lists the same values in one
// table; TestDefaultsDocumented keeps the two in step.
const (
	DefaultMode          = ModeSharedENI
	DefaultIPStack       = IPv4Only
	DefaultMinIdle       = 2
	DefaultMaxIdle       = 10
	DefaultMinTotal      = 0
	DefaultBatch         = 5
	DefaultReleaseDelay  = 5 * time.Minute
	DefaultCooldown      = 30 * time.Second
	DefaultSpreadWindow  = 5 * time.Second
	DefaultMaxENIs       = 0 // the instance type's limit
	DefaultVSwitchPolicy = VSwitchMostFree
	// DefaultIPv4Allocation keeps nodes on secondary addresses unless the
	// operator opts in: prefixes need aligned /28s the vSwitch may lack.
	DefaultIPv4Allocation = IPv4Secondary
	DefaultQPS            = 10
	DefaultBurst          = 20
	DefaultCredentials    = CredentialsEnv
	DefaultStickyIPHold   = 5 * time.Minute
	DefaultResyncPeriod   = 2 * time.Minute
	// DefaultStaleEntryTimeout: a runtime's DEL follows a pod's end within
	// seconds; an entry whose netns has been gone for a minute lost it.
	DefaultStaleEntryTimeout = time.Minute
)

// Default file locations.
const (
	DefaultConfigFile = "/etc/enid/config.yaml"
	DefaultDropInDir  = "/etc/enid/config.d"
	DefaultEntriesDir = "/run/enid/pods"
	// DefaultKubeletRootDir is the kubelet's default --root-dir: it holds
	// allocated_pods_state and device-plugins/kubelet_internal_checkpoint
	// (KubeletHintSources).
	DefaultKubeletRootDir = "/var/lib/kubelet"
	DefaultCNIResultsDir  = "/var/lib/cni/results"
)

// DefaultConfig returns the configuration used for every field a config
// file does not set. It has no vSwitches and no security groups, which have
// no sensible default, so it does not validate on its own.
func DefaultConfig() Config {
	return Config{
		APIVersion: ConfigAPIVersion,
		Kind:       ConfigKind,
		Mode:       DefaultMode,
		IPStack:    DefaultIPStack,
		Pool: Pool{
			MinIdle:      DefaultMinIdle,
			MaxIdle:      DefaultMaxIdle,
			MinTotal:     DefaultMinTotal,
			Batch:        DefaultBatch,
			ReleaseDelay: Duration(DefaultReleaseDelay),
			Cooldown:     Duration(DefaultCooldown),
			SpreadWindow: Duration(DefaultSpreadWindow),
		},
		ENI: ENIConfig{
			MaxENIs:        DefaultMaxENIs,
			VSwitchPolicy:  DefaultVSwitchPolicy,
			IPv4Allocation: DefaultIPv4Allocation,
		},
		Cloud: Cloud{
			RateLimit:   RateLimit{QPS: DefaultQPS, Burst: DefaultBurst},
			Credentials: Credentials{Source: DefaultCredentials},
		},
		StickyIPHold: Duration(DefaultStickyIPHold),
		ResyncPeriod: Duration(DefaultResyncPeriod),

		StaleEntryTimeout: Duration(DefaultStaleEntryTimeout),
	}
}
