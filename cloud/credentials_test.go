package cloud

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"
	"github.com/google/go-cmp/cmp"
)

func creds(t *testing.T, p credentials.CredentialsProvider) credentials.Credentials {
	t.Helper()
	c, err := p.GetCredentials()
	if err != nil {
		t.Fatalf("GetCredentials: %v", err)
	}
	c.ProviderName = ""
	return *c
}

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestCredentialsFromEnv(t *testing.T) {
	p, err := CredentialsFrom(CredentialsConfig{Source: CredentialsEnv},
		envOf(map[string]string{EnvAccessKeyID: "id", EnvAccessKeySecret: "secret"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(credentials.Credentials{AccessKeyId: "id", AccessKeySecret: "secret"}, creds(t, p)); diff != "" {
		t.Errorf("static keys (-want +got):\n%s", diff)
	}
	// Source "" picks env when the key id is there; STS with a token.
	p, err = CredentialsFrom(CredentialsConfig{},
		envOf(map[string]string{EnvAccessKeyID: "id", EnvAccessKeySecret: "secret", EnvSecurityToken: "sts"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(credentials.Credentials{AccessKeyId: "id", AccessKeySecret: "secret", SecurityToken: "sts"}, creds(t, p)); diff != "" {
		t.Errorf("sts keys (-want +got):\n%s", diff)
	}
	if _, err := CredentialsFrom(CredentialsConfig{Source: CredentialsEnv}, envOf(map[string]string{EnvAccessKeyID: "id"}), nil); err == nil {
		t.Error("env without a secret: no error")
	}
	if _, err := CredentialsFrom(CredentialsConfig{Source: "vault"}, nil, nil); err == nil {
		t.Error("unknown source: no error")
	}
}

func TestCredentialsFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "creds.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("accessKeyID: id1\naccessKeySecret: s1\n")
	p, err := CredentialsFrom(CredentialsConfig{Source: CredentialsFile, File: path}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(credentials.Credentials{AccessKeyId: "id1", AccessKeySecret: "s1"}, creds(t, p)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// A rotated secret (a longer file, as JSON this time) is picked up.
	write(`{"accessKeyID":"id2","accessKeySecret":"s2-rotated","securityToken":"tok"}`)
	if diff := cmp.Diff(credentials.Credentials{AccessKeyId: "id2", AccessKeySecret: "s2-rotated", SecurityToken: "tok"}, creds(t, p)); diff != "" {
		t.Errorf("after rotation (-want +got):\n%s", diff)
	}
	write("accessKeyID: id\nsecret: typo\n")
	if _, err := p.GetCredentials(); err == nil {
		t.Error("file with an unknown key: no error")
	}
	if _, err := CredentialsFrom(CredentialsConfig{Source: CredentialsFile, File: filepath.Join(t.TempDir(), "none")}, nil, nil); err == nil {
		t.Error("missing file: no error")
	}
}

func TestCredentialsFromRAMRole(t *testing.T) {
	paths := metaPaths()
	paths["ram/security-credentials/"] = "enid-role"
	setKeys := func(id string, exp time.Time) {
		paths["ram/security-credentials/enid-role"] = `{"AccessKeyId":"` + id + `","AccessKeySecret":"sec-` + id +
			`","SecurityToken":"tok-` + id + `","Expiration":"` + exp.UTC().Format("2006-01-02T15:04:05Z") +
			`","LastUpdated":"2026-01-01T00:00:00Z","Code":"Success"}`
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	setKeys("k1", t0.Add(time.Hour))
	srv := newMetaServer(t, paths, false)
	md := NewMetadata(srv.URL, nil)

	now := t0
	p := NewRAMRoleCredentials(md, "", func() time.Time { return now })
	want := credentials.Credentials{AccessKeyId: "k1", AccessKeySecret: "sec-k1", SecurityToken: "tok-k1"}
	if diff := cmp.Diff(want, creds(t, p)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	srv.mu.Lock()
	setKeys("k2", t0.Add(2*time.Hour))
	srv.mu.Unlock()
	now = t0.Add(30 * time.Minute) // still fresh: cached
	if diff := cmp.Diff(want, creds(t, p)); diff != "" {
		t.Errorf("cached (-want +got):\n%s", diff)
	}
	now = t0.Add(56 * time.Minute) // within 5 min of expiry: renewed
	want = credentials.Credentials{AccessKeyId: "k2", AccessKeySecret: "sec-k2", SecurityToken: "tok-k2"}
	if diff := cmp.Diff(want, creds(t, p)); diff != "" {
		t.Errorf("renewed (-want +got):\n%s", diff)
	}

	// Through CredentialsFrom, with the metadata base URL injected.
	p2, err := CredentialsFrom(CredentialsConfig{Source: CredentialsRAMRole, RoleName: "enid-role"}, nil, md)
	if err != nil {
		t.Fatal(err)
	}
	if got := creds(t, p2); got.AccessKeyId != "k2" {
		t.Errorf("CredentialsFrom ram-role: %+v", got)
	}
	if _, err := CredentialsFrom(CredentialsConfig{Source: CredentialsRAMRole}, nil, nil); err == nil {
		t.Error("ram-role without metadata: no error")
	}
}
