package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// TestStatusCountsTheListedStatuses: the Pods line counts the status
// files the table lists, not the heartbeat's count, which the agent writes
// a pass after a publication (an ADD can return before it).
func TestStatusCountsTheListedStatuses(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	a := status.Agent{Ready: true, Heartbeat: now, Pods: map[status.Phase]int{status.Ready: 1, status.Pending: 1}}
	rep := statusReport{Agent: &a, Pods: []status.Attachment{
		{ContainerID: "aaaaaaaaaaaa1", IfName: "eth0", Phase: status.Ready},
		{ContainerID: "aaaaaaaaaaaa2", IfName: "eth0", Phase: status.Ready},
		{ContainerID: "aaaaaaaaaaaa3", IfName: "eth0", Phase: status.Failed, ReasonCode: "entry-invalid"},
	}}
	var b strings.Builder
	printStatus(&b, rep, now)
	if want := "Pods:      1 Failed, 2 Ready\n"; !strings.Contains(b.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, b.String())
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

// TestStatusReadyAfterSIGKILL runs the real agent (`enid run --sim
// --datapath none`), kills it with SIGKILL and checks that `enid status
// --ready` fails at once, although the heartbeat it left is fresh, and that
// `enid status` says the process is gone; the same holds through the pid
// fallback (the lock file out of the reader's sight), for the zombie and
// for the reaped process.
func TestStatusReadyAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "enid")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	runDir := filepath.Join(dir, "run")
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	agent := exec.Command(bin, "run", "--sim", "--datapath", "none", "--metrics-addr", "",
		"--run-dir", runDir, "--state-dir", filepath.Join(dir, "state"), "--config-file", filepath.Join(dir, "etc", "config.yaml"),
		"--config-dir", filepath.Join(dir, "etc", "config.d"))
	agent.Stdout, agent.Stderr = logf, logf
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := false
	defer func() {
		if !reaped {
			agent.Process.Kill() // the test failed early; the error is moot
			agent.Wait()         //nolint:errcheck // killed
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name()) // best effort: for the failure's context only
			t.Logf("agent log:\n%s", b)
		}
	}()
	ready := func() (int, string) {
		t.Helper()
		out, err := exec.Command(bin, "status", "--ready", "--run-dir", runDir).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for code, out := ready(); code != 0; code, out = ready() {
		if time.Now().After(deadline) {
			t.Fatalf("agent not ready within 60s: exit %d: %s", code, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	lock := filepath.Join(runDir, "agent.lock")
	hide := func(hidden bool) {
		t.Helper()
		from, to := lock, lock+".hidden"
		if !hidden {
			from, to = to, from
		}
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	// The pid fallback keeps a running agent ready.
	hide(true)
	if code, out := ready(); code != 0 {
		t.Fatalf("running agent, lock out of sight: exit %d: %s", code, out)
	}
	hide(false)

	pid := agent.Process.Pid
	if err := agent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	want := fmt.Sprintf("agent process not running (pid %d", pid)
	check := func(what string) {
		t.Helper()
		var code int
		var out string
		for code, out = ready(); code == 0; code, out = ready() {
			if time.Since(killed) > 2*time.Second {
				t.Fatalf("%s: `enid status --ready` still exits 0 %s after SIGKILL: %s", what, time.Since(killed), out)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if code != 1 || !strings.Contains(out, want) {
			t.Fatalf("%s: `enid status --ready` exit %d: %q, want 1 and %q", what, code, out, want)
		}
	}
	check("lock free, zombie")
	hide(true)
	check("pid fallback, zombie")
	agent.Wait() //nolint:errcheck // killed
	reaped = true
	killed = time.Now()
	check("pid fallback, reaped")
	hide(false)
	check("lock free, reaped")

	out, err := exec.Command(bin, "status", "--run-dir", runDir).CombinedOutput()
	if err != nil {
		t.Fatalf("enid status: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Agent:     "+want+")") {
		t.Errorf("enid status after SIGKILL does not say %q:\n%s", want+")", out)
	}
	out, err = exec.Command(bin, "status", "-o", "json", "--run-dir", runDir).CombinedOutput()
	if err != nil {
		t.Fatalf("enid status -o json: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), `"agentProcess": "not running"`) {
		t.Errorf("enid status -o json after SIGKILL lacks \"agentProcess\": \"not running\":\n%s", out)
	}
	a, err := status.ReadAgent(filepath.Join(runDir, "agent.json"))
	if err != nil {
		t.Fatal(err)
	}
	if age := time.Since(a.Heartbeat); age > 30*time.Second || a.Stopped {
		t.Fatalf("the heartbeat left behind is %s old (stopped %v): the test proves nothing", age, a.Stopped)
	}
}
