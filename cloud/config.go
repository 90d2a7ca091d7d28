package cloud

// The client's own configuration types. They mirror the agent config's
// `cloud:` section (package desired), which the wiring in cmd/enid converts:
// cloud may import observed and the SDK only (docs/design.md's package
// table), so that the client can be used, and tested, without the agent's
// config schema.

// RateLimit is a token bucket for all calls plus optional per-action ones.
type RateLimit struct {
	// QPS is the sustained rate of all calls together (<= 0: no limit).
	QPS float64
	// Burst is the bucket size.
	Burst int
	// PerAction overrides by API action name (e.g. AssignPrivateIpAddresses).
	PerAction map[string]ActionRate
}

// ActionRate is a token bucket for one API action.
type ActionRate struct {
	QPS   float64
	Burst int
}

// CredentialSource is where API credentials come from.
type CredentialSource string

// Credential sources (the same words as the config's credentials.source).
const (
	// CredentialsEnv reads EnvAccessKeyID and EnvAccessKeySecret (and
	// EnvSecurityToken for STS).
	CredentialsEnv CredentialSource = "env"
	// CredentialsFile reads a YAML/JSON file with accessKeyID,
	// accessKeySecret and optional securityToken.
	CredentialsFile CredentialSource = "file"
	// CredentialsRAMRole uses the instance's RAM role via metadata.
	CredentialsRAMRole CredentialSource = "ram-role"
)

// CredentialsConfig selects the credential source. It never holds secrets.
type CredentialsConfig struct {
	Source CredentialSource
	// File is the credentials file path (source: file).
	File string
	// RoleName is the RAM role name (source: ram-role); empty means the
	// one metadata lists.
	RoleName string
}
