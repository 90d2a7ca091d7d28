package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/reconcile/status"
)

// TestStatusShowsSecurityGroupSets: `enid status` lists each set's pool,
// ENIs and pods when the heartbeat carries them, and no set line when it
// does not (a node with only the default set).
func TestStatusShowsSecurityGroupSets(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	a := status.Agent{Ready: true, Heartbeat: now, Pool: status.PoolSummary{Total: 6, Used: 3, Idle: 3, ENIs: 2},
		Sets: []status.SetSummary{
			{Name: "default", SecurityGroups: []string{"sg-1"}, ENIs: []string{"eni-1"}, Pods: 2, Total: 4, Used: 2, Idle: 2},
			{SecurityGroups: []string{"sg-a", "sg-b"}, ENIs: []string{"eni-2"}, Pods: 2, Waiting: 1, Total: 2, Used: 1, Idle: 1},
			{Name: "web", SecurityGroups: []string{"sg-w"}, Pods: 1, Waiting: 1},
		}}
	var b strings.Builder
	printStatus(&b, statusReport{Agent: &a}, now)
	for _, want := range []string{
		"  Set default [sg-1]: 2 pods (0 waiting) on ENIs eni-1; 4 IPs: 2 used, 2 idle, 0 cooldown, 0 sticky\n",
		"  Set (annotation) [sg-a,sg-b]: 2 pods (1 waiting) on ENIs eni-2; 2 IPs: 1 used, 1 idle, 0 cooldown, 0 sticky\n",
		"  Set web [sg-w]: 1 pods (1 waiting) on ENIs -; 0 IPs: 0 used, 0 idle, 0 cooldown, 0 sticky\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	a.Sets = nil
	b.Reset()
	printStatus(&b, statusReport{Agent: &a}, now)
	if strings.Contains(b.String(), "Set ") {
		t.Errorf("status of a node with one set shows sets:\n%s", b.String())
	}
}

// TestStatusShowsHints: `enid status` prints the hint counts, each hint
// file it could not use and the notice that no kubelet file was found;
// a heartbeat without hints (an older agent) prints no hint line.
func TestStatusShowsHints(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	a := status.Agent{Ready: true, Heartbeat: now, Hints: &status.Hints{Admitted: 7, Expected: 2,
		NotFound: "no kubelet hint file at /k/allocated_pods_state although 3 pods have entries",
		Problems: []status.HintProblem{{Source: "cni_results", Path: "/var/lib/cni/results/enid-x-eth0", Error: `unknown cache kind "cniCacheV2" (want cniCacheV1)`}}}}
	var b strings.Builder
	printStatus(&b, statusReport{Agent: &a}, now)
	for _, want := range []string{
		"Hints:     7 pods listed by the kubelet, 2 expected (admitted, no entry yet)\n",
		"  NOT FOUND: no kubelet hint file at /k/allocated_pods_state although 3 pods have entries\n",
		"  PROBLEM (cni_results): /var/lib/cni/results/enid-x-eth0: unknown cache kind \"cniCacheV2\" (want cniCacheV1)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	a.Hints = nil
	b.Reset()
	printStatus(&b, statusReport{Agent: &a}, now)
	if strings.Contains(b.String(), "Hints:") {
		t.Errorf("status without hints shows them:\n%s", b.String())
	}
}

// TestHintPathFlags: --kubelet-root-dir and --cni-results-dir set where
// run and plan read the hints; "" reads none.
func TestHintPathFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want desired.HintSources
	}{
		{nil, desired.DefaultHintSources()},
		{[]string{"--kubelet-root-dir", "/data/kubelet"}, desired.HintSources{
			AllocatedPodsState: "/data/kubelet/allocated_pods_state",
			DeviceCheckpoint:   "/data/kubelet/device-plugins/kubelet_internal_checkpoint",
			CNIResultsDir:      "/var/lib/cni/results"}},
		{[]string{"--kubelet-root-dir=", "--cni-results-dir", "/r"}, desired.HintSources{CNIResultsDir: "/r"}},
	} {
		var f nodeFlags
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		f.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := f.paths().Hints; got != tc.want {
			t.Errorf("%q: hints %+v, want %+v", tc.args, got, tc.want)
		}
	}
}
