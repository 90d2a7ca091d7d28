package cloud

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"
	"sigs.k8s.io/yaml"

	"github.com/enidnet/enid/internal/fileread"
)

// Environment variables of the env credential source (the SDK's names).
const (
	EnvAccessKeyID     = "ALIBABA_CLOUD_ACCESS_KEY_ID"
	EnvAccessKeySecret = "ALIBABA_CLOUD_ACCESS_KEY_SECRET"
	EnvSecurityToken   = "ALIBABA_CLOUD_SECURITY_TOKEN"
)

// CredentialsFrom builds the credentials provider the config selects:
//
//   - env: static keys from env (EnvAccessKeyID, EnvAccessKeySecret), STS
//     when EnvSecurityToken is set too;
//   - file: keys from c.File, re-read whenever the file changes (so a
//     rotated Kubernetes Secret is picked up without a restart);
//   - ram-role: the instance RAM role's temporary credentials from md (so a
//     simulator's metadata works too, unlike the SDK's own provider, which
//     only knows 100.100.100.200);
//   - "": env when EnvAccessKeyID is set, otherwise ram-role.
//
// env is how the caller reads the environment (os.Getenv in cmd/).
func CredentialsFrom(c CredentialsConfig, env func(string) string, md *Metadata) (credentials.CredentialsProvider, error) {
	if env == nil {
		env = func(string) string { return "" }
	}
	src := c.Source
	if src == "" {
		src = CredentialsRAMRole
		if env(EnvAccessKeyID) != "" {
			src = CredentialsEnv
		}
	}
	switch src {
	case CredentialsEnv:
		id, secret, token := env(EnvAccessKeyID), env(EnvAccessKeySecret), env(EnvSecurityToken)
		if id == "" || secret == "" {
			return nil, fmt.Errorf("credentials from env: %s and %s must both be set", EnvAccessKeyID, EnvAccessKeySecret)
		}
		if token != "" {
			return credentials.NewStaticSTSCredentialsProvider(id, secret, token), nil
		}
		return credentials.NewStaticAKCredentialsProvider(id, secret), nil
	case CredentialsFile:
		return NewFileCredentials(c.File)
	case CredentialsRAMRole:
		if md == nil {
			return nil, errors.New("credentials from ram role: no metadata client")
		}
		return NewRAMRoleCredentials(md, c.RoleName, md.clk.Now), nil // the metadata client's clock: one clock for both
	}
	return nil, fmt.Errorf("credentials: unknown source %q", c.Source)
}

// credentialsFile is the format of a credentials file (YAML or JSON).
type credentialsFile struct {
	AccessKeyID     string `json:"accessKeyID"`
	AccessKeySecret string `json:"accessKeySecret"`
	SecurityToken   string `json:"securityToken,omitempty"`
}

// FileCredentials reads keys from a YAML or JSON file with accessKeyID,
// accessKeySecret and an optional securityToken, and reads it again when
// its size or modification time changes. It is safe for concurrent use.
type FileCredentials struct {
	path string

	mu    sync.Mutex // guards the fields below
	mtime time.Time
	size  int64
	cur   credentialsFile
}

// NewFileCredentials reads path once (so a bad file fails at start).
func NewFileCredentials(path string) (*FileCredentials, error) {
	if path == "" {
		return nil, errors.New("credentials from file: no file named")
	}
	f := &FileCredentials{path: path}
	if _, err := f.GetCredentials(); err != nil {
		return nil, err
	}
	return f, nil
}

// maxCredentialsFile bounds the credentials file (three short keys).
const maxCredentialsFile = 64 << 10

// GetCredentials returns the file's keys.
func (f *FileCredentials) GetCredentials() (*credentials.Credentials, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := os.Stat(f.path)
	if err != nil {
		return nil, fmt.Errorf("credentials file: %w", err)
	}
	if !st.ModTime().Equal(f.mtime) || st.Size() != f.size || f.cur.AccessKeyID == "" {
		// A Secret volume is made of symlinks (key -> ..data/key): follow
		// them, but read only a regular file, without blocking, bounded.
		b, err := fileread.Read(f.path, maxCredentialsFile, fileread.Follow)
		if err != nil {
			return nil, fmt.Errorf("credentials file: %w", err)
		}
		var c credentialsFile
		if err := yaml.UnmarshalStrict(b, &c); err != nil {
			return nil, fmt.Errorf("credentials file %s: %w", f.path, err)
		}
		if c.AccessKeyID == "" || c.AccessKeySecret == "" {
			return nil, fmt.Errorf("credentials file %s: accessKeyID and accessKeySecret must both be set", f.path)
		}
		f.cur, f.mtime, f.size = c, st.ModTime(), st.Size()
	}
	return &credentials.Credentials{
		AccessKeyId:     f.cur.AccessKeyID,
		AccessKeySecret: f.cur.AccessKeySecret,
		SecurityToken:   f.cur.SecurityToken,
		ProviderName:    f.GetProviderName(),
	}, nil
}

// GetProviderName names the provider in the SDK's request headers.
func (f *FileCredentials) GetProviderName() string { return "enid_file" }

// RAMRoleCredentials serves an instance RAM role's temporary credentials
// from metadata, fetching new ones 5 minutes before the old ones expire
// (and using the old ones while that fails and they are still valid).
// It is safe for concurrent use.
type RAMRoleCredentials struct {
	md   *Metadata
	role string // "" until discovered
	now  func() time.Time

	mu  sync.Mutex // guards role and cur
	cur RAMCredentials
}

// refreshBefore is how long before expiry credentials are renewed.
const refreshBefore = 5 * time.Minute

// NewRAMRoleCredentials returns a provider for role ("" means the one
// metadata lists) with now as its clock.
func NewRAMRoleCredentials(md *Metadata, role string, now func() time.Time) *RAMRoleCredentials {
	return &RAMRoleCredentials{md: md, role: role, now: now}
}

// GetCredentials returns current credentials. The SDK's provider interface
// carries no context, so each fetch is bounded by its own 10 s timeout.
func (r *RAMRoleCredentials) GetCredentials() (*credentials.Credentials, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur.AccessKeyID == "" || !r.now().Before(r.cur.Expiration.Add(-refreshBefore)) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if r.role == "" {
			roles, err := r.md.RAMRoles(ctx)
			if err != nil {
				return nil, fmt.Errorf("ram role credentials: list roles: %w", err)
			}
			if len(roles) != 1 {
				return nil, fmt.Errorf("ram role credentials: instance has %d roles %v, name one", len(roles), roles)
			}
			r.role = roles[0]
		}
		c, err := r.md.RAMCredentials(ctx, r.role)
		switch {
		case err == nil:
			r.cur = c
		case r.cur.AccessKeyID != "" && r.now().Before(r.cur.Expiration):
			// Renewal failed but the old keys still work: use them and
			// try again on the next call.
		default:
			return nil, fmt.Errorf("ram role credentials: %w", err)
		}
	}
	return &credentials.Credentials{
		AccessKeyId:     r.cur.AccessKeyID,
		AccessKeySecret: r.cur.AccessKeySecret,
		SecurityToken:   r.cur.SecurityToken,
		ProviderName:    r.GetProviderName(),
	}, nil
}

// GetProviderName names the provider in the SDK's request headers.
func (r *RAMRoleCredentials) GetProviderName() string { return "enid_ecs_ram_role" }
