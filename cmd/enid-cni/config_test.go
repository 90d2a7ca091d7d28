package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want podArgs
		ok   bool
	}{
		{"", podArgs{}, true},
		{"IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0;K8S_POD_UID=u-1;K8S_POD_INFRA_CONTAINER_ID=abc",
			podArgs{Namespace: "ns", Name: "web-0", UID: "u-1"}, true},
		{"K8S_POD_NAME=a=b;", podArgs{Name: "a=b"}, true},
		{"K8S_POD_NAME", podArgs{}, false},
	} {
		got, err := parseArgs(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("parseArgs(%q) error %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if d := cmp.Diff(tc.want, got); tc.ok && d != "" {
			t.Errorf("parseArgs(%q) (-want +got):\n%s", tc.in, d)
		}
	}
}

func TestParseConfDefaults(t *testing.T) {
	c, err := parseConf([]byte(`{"cniVersion":"1.0.0","name":"enid","type":"enid-cni"}`))
	if err != nil {
		t.Fatal(err)
	}
	got := []any{c.PodsDir, c.StatusDir, c.AgentFile, c.timeout, c.delTimeout, c.heartbeatMaxAge}
	want := []any{defaultPodsDir, defaultStatusDir, defaultAgentFile, defaultTimeout, defaultDelTimeout, defaultHeartbeatMaxAge}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("defaults (-want +got):\n%s", d)
	}
	if _, err := parseConf([]byte(`{"cniVersion":"1.0.0","name":"enid","delTimeout":"1h"}`)); err == nil {
		t.Error("delTimeout 1h accepted")
	}
}
