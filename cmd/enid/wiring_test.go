package main

import (
	"reflect"
	"testing"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/desired"
)

// TestCloudConfigConverts holds the config's cloud section and the client's
// own types together: every credential source the config accepts means the
// same to the client, and a rate limit keeps its per-action buckets.
func TestCloudConfigConverts(t *testing.T) {
	for d, c := range map[desired.CredentialSource]cloud.CredentialSource{
		desired.CredentialsEnv:     cloud.CredentialsEnv,
		desired.CredentialsFile:    cloud.CredentialsFile,
		desired.CredentialsRAMRole: cloud.CredentialsRAMRole,
	} {
		got := cloudCredentials(desired.Credentials{Source: d, File: "/f", RoleName: "r"})
		if want := (cloud.CredentialsConfig{Source: c, File: "/f", RoleName: "r"}); got != want {
			t.Errorf("source %q: got %+v, want %+v", d, got, want)
		}
	}
	got := cloudRateLimit(desired.RateLimit{QPS: 5, Burst: 7, PerAction: map[string]desired.ActionRate{"AssignPrivateIpAddresses": {QPS: 1, Burst: 2}}})
	want := cloud.RateLimit{QPS: 5, Burst: 7, PerAction: map[string]cloud.ActionRate{"AssignPrivateIpAddresses": {QPS: 1, Burst: 2}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rate limit: got %+v, want %+v", got, want)
	}
}
