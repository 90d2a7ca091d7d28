package main

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/roottest"
	"github.com/enidnet/enid/reconcile/status"
)

// wantCode fails unless err is a CNI error with code and a message or
// details containing sub.
func wantCode(t *testing.T, err error, code uint, sub string) {
	t.Helper()
	var e *types.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want a CNI error with code %d", err, err, code)
	}
	if e.Code != code || !contains(e.Msg+" | "+e.Details, sub) {
		t.Fatalf("error code %d %q (details %q), want code %d containing %q", e.Code, e.Msg, e.Details, code, sub)
	}
}

func TestAddCheckDel(t *testing.T) {
	for _, tc := range []struct {
		name     string
		version  string
		versions []string
		want     string // result version
	}{
		{"1.0.0 only", "1.0.0", nil, "1.0.0"},
		{"1.0.0 offering 1.1.0", "1.0.0", []string{"1.0.0", "1.1.0"}, "1.1.0"},
		{"1.1.0", "1.1.0", nil, "1.1.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			pod := newNetNS(t)
			n.heartbeat(time.Now(), true, "")
			n.startAgent(readyIn(t, "192.168.1.10/32", "169.254.1.1", true), true)
			list := n.listOf(tc.version, tc.versions, nil)
			rt := runtimeConf("c1", pod.Path())
			ctx := context.Background()

			res, err := n.cni.AddNetworkList(ctx, list, rt)
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			st, err := n.statuses.Read("c1", "eth0")
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]any{
				"cniVersion": tc.want,
				"interfaces": []any{map[string]any{"name": "eth0", "mac": st.Interface.MAC, "sandbox": pod.Path()}},
				"ips":        []any{map[string]any{"address": "192.168.1.10/32", "gateway": "169.254.1.1", "interface": float64(0)}},
				"routes":     []any{map[string]any{"dst": "0.0.0.0/0", "gw": "169.254.1.1"}},
			}
			// res is the result as the plugin printed it, in the list's version.
			if d := cmp.Diff(want, asJSON(t, res)); d != "" {
				t.Errorf("ADD result (-want +got):\n%s", d)
			}

			e, err := n.entries.Read(desired.Key{ContainerID: "c1", IfName: "eth0"})
			if err != nil {
				t.Fatal(err)
			}
			// The previous case's DEL left a deletion record; this ADD
			// removed it.
			if l, err := n.entries.Scan(); err != nil || len(l.Deleted) != 0 {
				t.Errorf("deletion records after ADD: %v (%v), want none", l.Deleted, err)
			}
			wantEntry := desired.Entry{
				APIVersion: desired.EntryAPIVersion, ContainerID: "c1", IfName: "eth0", NetNS: pod.Path(),
				PodNamespace: "default", PodName: "web-c1", PodUID: "uid-c1",
				Annotations: map[string]string{"enid.dev/sticky": "true"},
				Bandwidth:   &desired.Bandwidth{IngressRate: 1000000, IngressBurst: 2000000},
			}
			if d := cmp.Diff(wantEntry, e, cmpopts.IgnoreFields(desired.Entry{}, "Created", "Revision")); d != "" {
				t.Errorf("entry (-want +got):\n%s", d)
			}
			if e.Revision != st.Revision {
				t.Errorf("status answers revision %q, entry is %q", st.Revision, e.Revision)
			}

			if err := n.cni.CheckNetworkList(ctx, list, rt); err != nil {
				t.Fatalf("CHECK after ADD: %v", err)
			}
			// The agent now says another address for the same revision.
			moved := st
			moved.IPs = []status.IPConfig{{Address: netip.MustParsePrefix("192.168.1.99/32"), Gateway: netip.MustParseAddr("169.254.1.1")}}
			if err := n.statuses.Write(moved); err != nil {
				t.Fatal(err)
			}
			wantCode(t, n.cni.CheckNetworkList(ctx, list, rt), errCheckFailed, "the runtime holds addresses [192.168.1.10/32], the agent says [192.168.1.99/32]")
			failed := st
			failed.Phase, failed.Reason = status.Failed, "ENI eni-test detached"
			if err := n.statuses.Write(failed); err != nil {
				t.Fatal(err)
			}
			wantCode(t, n.cni.CheckNetworkList(ctx, list, rt), errCheckFailed, "attachment is Failed: ENI eni-test detached")
			if err := n.statuses.Write(st); err != nil {
				t.Fatal(err)
			}
			delAddr(t, pod.Path(), "eth0", "192.168.1.10/32")
			wantCode(t, n.cni.CheckNetworkList(ctx, list, rt), errCheckFailed, "lacks 192.168.1.10")

			if err := n.cni.DelNetworkList(ctx, list, rt); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			// CHECK of an attachment without an entry (the runtime's cache
			// is gone with DEL, so call the verb with the ADD's result).
			wantCode(t, n.cni.CheckNetwork(ctx, pluginConf(t, list, res), rt), types.ErrUnknownContainer, "no pod entry for c1_eth0")
			if _, err := n.entries.Read(desired.Key{ContainerID: "c1", IfName: "eth0"}); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("entry after DEL: %v, want fs.ErrNotExist", err)
			}
			if l, err := n.entries.Scan(); err != nil || !slices.Equal(l.Deleted, []desired.Key{{ContainerID: "c1", IfName: "eth0"}}) {
				t.Errorf("deletion records after DEL: %v (%v), want c1_eth0", l.Deleted, err)
			}
			if _, err := n.statuses.Read("c1", "eth0"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("DEL returned before the agent's teardown: status %v", err)
			}
			// DEL again, and DEL with the netns gone (empty CNI_NETNS).
			if err := n.cni.DelNetworkList(ctx, list, rt); err != nil {
				t.Fatalf("second DEL: %v", err)
			}
			rt.NetNS = ""
			if err := n.cni.DelNetworkList(ctx, list, rt); err != nil {
				t.Fatalf("DEL without netns: %v", err)
			}
		})
	}
}

func asJSON(t *testing.T, v any) map[string]any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAddAgentAnswersNotReady(t *testing.T) {
	pod := newNetNS(t)
	for _, tc := range []struct {
		name    string
		answer  answerFunc
		timeout string
		code    uint
		sub     string
		maxTime time.Duration
	}{
		{"pending times out with the reason", phaseAnswer(status.Pending, "waiting for ENI eni-2 to attach", "ENIAttaching"),
			"300ms", types.ErrTryAgainLater, "within 300ms: Pending: waiting for ENI eni-2 to attach (ENIAttaching)", 3 * time.Second},
		{"no answer times out", func(desired.Entry) *status.Attachment { return nil },
			"300ms", types.ErrTryAgainLater, "no status published yet", 3 * time.Second},
		{"failed returns at once with the reason", phaseAnswer(status.Failed, "vSwitch vsw-1 has no free address", "VSwitchExhausted"),
			"30s", types.ErrTryAgainLater, "cannot set up c2_eth0: vSwitch vsw-1 has no free address (VSwitchExhausted)", 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			n.heartbeat(time.Now(), true, "")
			n.startAgent(tc.answer, true)
			start := time.Now()
			_, err := n.cni.AddNetworkList(context.Background(), n.list("1.0.0", map[string]any{"timeout": tc.timeout}), runtimeConf("c2", pod.Path()))
			wantCode(t, err, tc.code, tc.sub)
			if d := time.Since(start); d > tc.maxTime {
				t.Errorf("ADD took %s, want under %s", d, tc.maxTime)
			}
		})
	}
}

// TestAddIgnoresStaleStatus: a Ready status left from an older entry
// revision must not be taken as the answer to a new ADD.
func TestAddIgnoresStaleStatus(t *testing.T) {
	pod := newNetNS(t)
	n := newNode(t)
	n.heartbeat(time.Now(), true, "")
	old := status.Attachment{ContainerID: "c3", IfName: "eth0", Revision: "an-older-revision", Phase: status.Ready,
		IPs: []status.IPConfig{{Address: netip.MustParsePrefix("10.9.9.9/32"), Gateway: netip.MustParseAddr("169.254.1.1")}}}
	if err := n.statuses.Write(old); err != nil {
		t.Fatal(err)
	}
	list := n.list("1.0.0", map[string]any{"timeout": "300ms"})
	_, err := n.cni.AddNetworkList(context.Background(), list, runtimeConf("c3", pod.Path()))
	wantCode(t, err, types.ErrTryAgainLater, `answers entry revision "an-older-revision"`)

	// Now an agent that answers the current revision, late.
	ready := readyIn(t, "192.168.1.11/32", "169.254.1.1", false)
	n.startAgent(func(e desired.Entry) *status.Attachment {
		time.Sleep(150 * time.Millisecond)
		return ready(e)
	}, true)
	res, err := n.cni.AddNetworkList(context.Background(), n.list("1.0.0", nil), runtimeConf("c3", pod.Path()))
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	got, err := current.NewResultFromResult(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.IPs) != 1 || got.IPs[0].Address.String() != "192.168.1.11/32" {
		t.Errorf("ADD result IPs %v, want the current revision's 192.168.1.11/32", got.IPs)
	}
}

func TestDelAgentDown(t *testing.T) {
	n := newNode(t)
	// An entry and a status the (absent) agent will never tear down.
	rev, err := n.entries.Write(desired.Entry{APIVersion: desired.EntryAPIVersion, ContainerID: "c4", IfName: "eth0",
		NetNS: "/var/run/netns/gone", PodNamespace: "default", PodName: "p4", Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.statuses.Write(status.Attachment{ContainerID: "c4", IfName: "eth0", Revision: rev, Phase: status.Pending}); err != nil {
		t.Fatal(err)
	}
	list := n.list("1.0.0", map[string]any{"delTimeout": "5s"})
	rt := &libcni.RuntimeConf{ContainerID: "c4", IfName: "eth0"}
	for _, tc := range []struct {
		name string
		prep func()
		max  time.Duration
		min  time.Duration
	}{
		{"no heartbeat", func() {}, time.Second, 0},
		{"stale heartbeat", func() { n.heartbeat(time.Now().Add(-time.Hour), true, "") }, time.Second, 0},
		{"stopped agent", func() {
			if err := status.WriteAgent(n.agent, status.Agent{PID: 4242, Heartbeat: time.Now(), Reason: "agent stopped", Stopped: true}); err != nil {
				t.Fatal(err)
			}
		}, time.Second, 0},
		{"killed agent: fresh heartbeat, its lock free", func() { n.killedAgent() }, time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.prep()
			start := time.Now()
			if err := n.cni.DelNetworkList(context.Background(), list, rt); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if d := time.Since(start); d > tc.max {
				t.Errorf("DEL took %s with the agent down, want under %s", d, tc.max)
			}
			if _, err := n.entries.Read(desired.Key{ContainerID: "c4", IfName: "eth0"}); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("entry after DEL: %v, want fs.ErrNotExist", err)
			}
		})
	}
	// A live agent that does not finish: DEL waits delTimeout, then succeeds.
	n.heartbeat(time.Now(), true, "")
	start := time.Now()
	if err := n.cni.DelNetworkList(context.Background(), n.list("1.0.0", map[string]any{"delTimeout": "300ms"}), rt); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("DEL with a live, slow agent took %s, want about delTimeout 300ms", d)
	}
}

func TestStatus(t *testing.T) {
	n := newNode(t)
	list := n.list("1.1.0", map[string]any{"heartbeatMaxAge": "10s"})
	ctx := context.Background()
	wantCode(t, n.cni.GetStatusNetworkList(ctx, list), types.ErrPluginNotAvailable, "no heartbeat")
	n.heartbeat(time.Now(), true, "")
	if err := n.cni.GetStatusNetworkList(ctx, list); err != nil {
		t.Fatalf("STATUS with a ready agent: %v", err)
	}
	n.heartbeat(time.Now(), false, "config /etc/enid/config.yaml invalid")
	wantCode(t, n.cni.GetStatusNetworkList(ctx, list), types.ErrPluginNotAvailable, "not ready: config /etc/enid/config.yaml invalid")
	n.heartbeat(time.Now().Add(-time.Minute), true, "")
	wantCode(t, n.cni.GetStatusNetworkList(ctx, list), types.ErrPluginNotAvailable, "heartbeat is 1m")
	n.killedAgent()
	wantCode(t, n.cni.GetStatusNetworkList(ctx, list), types.ErrPluginNotAvailable, "agent process not running (pid 4242")
	if err := os.WriteFile(n.agent, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantCode(t, n.cni.GetStatusNetworkList(ctx, list), types.ErrPluginNotAvailable, "unreadable")
}

func TestGC(t *testing.T) {
	n := newNode(t)
	for _, id := range []string{"keep", "drop1", "drop2"} {
		if _, err := n.entries.Write(desired.Entry{APIVersion: desired.EntryAPIVersion, ContainerID: id, IfName: "eth0",
			NetNS: "/var/run/netns/" + id, PodNamespace: "default", PodName: id, Created: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	// A broken entry of an attachment that is no longer valid.
	if err := os.WriteFile(filepath.Join(n.dir, "pods", "broken_eth0.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	list := n.list("1.1.0", nil)
	ctx := context.Background()
	// Without a list (args nil: libcni sends none) nothing is removed.
	if err := n.cni.GCNetworkList(ctx, list, nil); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if got := entryKeys(t, n); len(got) != 3 {
		t.Fatalf("GC without a valid list removed entries: left %v", got)
	}
	err := n.cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: "keep", IfName: "eth0"}}})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	if d := cmp.Diff([]string{"keep_eth0"}, entryKeys(t, n)); d != "" {
		t.Errorf("entries after GC (-want +got):\n%s", d)
	}
	files, err := os.ReadDir(filepath.Join(n.dir, "pods"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name())
	}
	// Every removal is recorded as a deletion, so the agent tears it down
	// at once (the broken entry's too).
	want := []string{"broken_eth0.del", "drop1_eth0.del", "drop2_eth0.del", "keep_eth0.json"}
	if d := cmp.Diff(want, names); d != "" {
		t.Errorf("pods dir after GC (-want +got):\n%s", d)
	}
}

// GC on a full /run (bytes and inodes) removes what it must all the same:
// each removal frees the room its deletion record needs.
func TestGCOnFullRunDir(t *testing.T) {
	n := newNode(t)
	run := roottest.Tmpfs(t, 256<<10, 32)
	n.entries = desired.NewEntryStore(filepath.Join(run, "pods"))
	for _, id := range []string{"keep", "drop1", "drop2"} {
		if _, err := n.entries.Write(desired.Entry{APIVersion: desired.EntryAPIVersion, ContainerID: id, IfName: "eth0",
			NetNS: "/var/run/netns/" + id, PodNamespace: "default", PodName: id, Created: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	roottest.Fill(t, run, true)
	list := n.list("1.1.0", map[string]any{"podsDir": n.entries.Dir()})
	err := n.cni.GCNetworkList(context.Background(), list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: "keep", IfName: "eth0"}}})
	if err != nil {
		t.Fatalf("GC on a full run dir: %v", err)
	}
	if d := cmp.Diff([]string{"keep_eth0"}, entryKeys(t, n)); d != "" {
		t.Errorf("entries after GC (-want +got):\n%s", d)
	}
	l, err := n.entries.Scan()
	if err != nil {
		t.Fatal(err)
	}
	want := []desired.Key{{ContainerID: "drop1", IfName: "eth0"}, {ContainerID: "drop2", IfName: "eth0"}}
	if d := cmp.Diff(want, l.Deleted); d != "" {
		t.Errorf("deletion records after GC (-want +got):\n%s", d)
	}
}

func entryKeys(t *testing.T, n *node) []string {
	t.Helper()
	es, _, err := n.entries.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range es {
		keys = append(keys, desired.Key{ContainerID: e.ContainerID, IfName: e.IfName}.String())
	}
	return keys
}

func TestVersion(t *testing.T) {
	n := newNode(t)
	info, err := n.cni.GetVersionInfo(context.Background(), "enid-cni")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"1.0.0", "1.1.0"}, info.SupportedVersions()); d != "" {
		t.Errorf("supported versions (-want +got):\n%s", d)
	}
}

func TestInvalidInput(t *testing.T) {
	pod := newNetNS(t)
	n := newNode(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		extra map[string]any
		rt    func(*libcni.RuntimeConf)
		code  uint
		sub   string
	}{
		{"bad timeout", map[string]any{"timeout": "soon"}, nil, types.ErrInvalidNetworkConfig, "invalid duration"},
		{"zero timeout", map[string]any{"timeout": "0s"}, nil, types.ErrInvalidNetworkConfig, `"timeout" is 0s`},
		{"timeout not a string", map[string]any{"timeout": 5}, nil, types.ErrInvalidNetworkConfig, "duration must be a string"},
		{"relative podsDir", map[string]any{"podsDir": "run/pods"}, nil, types.ErrInvalidNetworkConfig, `"podsDir" must be an absolute path`},
		{"no pod name", nil, func(rt *libcni.RuntimeConf) { rt.Args = nil }, types.ErrInvalidEnvironmentVariables, "K8S_POD_NAMESPACE"},
		{"relative netns", nil, func(rt *libcni.RuntimeConf) { rt.NetNS = "netns/x" }, types.ErrInvalidEnvironmentVariables, "CNI_NETNS must be an absolute path"},
		{"missing netns", nil, func(rt *libcni.RuntimeConf) { rt.NetNS = "/var/run/netns/enid-test-absent" }, types.ErrInvalidEnvironmentVariables, "no such file"},
		{"bad ifname", nil, func(rt *libcni.RuntimeConf) { rt.IfName = "a/b" }, types.ErrInvalidEnvironmentVariables, "interface name"},
		{"netns a regular file", nil, func(rt *libcni.RuntimeConf) { rt.NetNS = hostileFile(t, "file") }, types.ErrInvalidEnvironmentVariables, "is not a network namespace"},
		{"netns a FIFO", nil, func(rt *libcni.RuntimeConf) { rt.NetNS = hostileFile(t, "fifo") }, types.ErrInvalidEnvironmentVariables, "is not a network namespace"},
		{"netns a directory", nil, func(rt *libcni.RuntimeConf) { rt.NetNS = t.TempDir() }, types.ErrInvalidEnvironmentVariables, "is not a network namespace"},
		{"netns another kind", nil, func(rt *libcni.RuntimeConf) { rt.NetNS = "/proc/self/ns/uts" }, types.ErrInvalidEnvironmentVariables, "is not a network namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := runtimeConf("c5", pod.Path())
			if tc.rt != nil {
				tc.rt(rt)
			}
			_, err := n.cni.AddNetworkList(ctx, n.list("1.0.0", tc.extra), rt)
			wantCode(t, err, tc.code, tc.sub)
		})
	}
	if files, err := os.ReadDir(filepath.Join(n.dir, "pods")); err == nil && len(files) > 0 {
		t.Errorf("invalid ADDs wrote %d entries", len(files))
	}
	t.Run("entry dir not writable", func(t *testing.T) {
		blocker := filepath.Join(n.dir, "a-file")
		if err := os.WriteFile(blocker, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		list := n.list("1.0.0", map[string]any{"podsDir": filepath.Join(blocker, "pods")})
		_, err := n.cni.AddNetworkList(ctx, list, runtimeConf("c5", pod.Path()))
		wantCode(t, err, types.ErrIOFailure, "not a directory")
		rt := runtimeConf("c5", "")
		wantCode(t, n.cni.DelNetworkList(ctx, list, rt), types.ErrIOFailure, "not a directory")
	})
	t.Run("old cniVersion", func(t *testing.T) {
		_, err := n.cni.AddNetworkList(ctx, n.list("0.4.0", nil), runtimeConf("c5", pod.Path()))
		wantCode(t, err, types.ErrIncompatibleCNIVersion, "incompatible")
	})
}

// pluginConf returns the list's single plugin config with prevResult set,
// as a runtime sends it to CHECK.
func pluginConf(t *testing.T, list *libcni.NetworkConfigList, prev types.Result) *libcni.PluginConfig {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(list.Plugins[0].Bytes, &m); err != nil {
		t.Fatal(err)
	}
	m["name"], m["cniVersion"], m["prevResult"] = list.Name, list.CNIVersion, prev
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := libcni.NetworkPluginConfFromBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

// TestShippedConflist drives the plugin with examples/cni/10-enid.conflist,
// only its directories moved to the test's, and checks what docs/cni.md
// promises of it.
func TestShippedConflist(t *testing.T) {
	data, err := os.ReadFile("../../examples/cni/10-enid.conflist")
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		CNIVersion  string           `json:"cniVersion"`
		CNIVersions []string         `json:"cniVersions"`
		Name        string           `json:"name"`
		Plugins     []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(data, &l); err != nil {
		t.Fatal(err)
	}
	if l.CNIVersion != "1.0.0" || l.Name != "enid" || len(l.Plugins) != 1 {
		t.Fatalf("list %s %q with %d plugins, want 1.0.0 \"enid\" with one", l.CNIVersion, l.Name, len(l.Plugins))
	}
	if d := cmp.Diff([]string{"1.0.0", "1.1.0"}, l.CNIVersions); d != "" {
		t.Errorf("cniVersions (-want +got):\n%s", d)
	}
	p := l.Plugins[0]
	wantCaps := map[string]any{"io.kubernetes.cri.pod-annotations": true, "bandwidth": true}
	if d := cmp.Diff(wantCaps, p["capabilities"]); d != "" {
		t.Errorf("capabilities (-want +got):\n%s", d)
	}
	if _, err := parseConf(mustJSON(t, p, l.Name, l.CNIVersion)); err != nil {
		t.Fatalf("the shipped plugin config is invalid: %v", err)
	}

	pod := newNetNS(t)
	n := newNode(t)
	n.heartbeat(time.Now(), true, "")
	n.startAgent(readyIn(t, "192.168.1.12/32", "169.254.1.1", true), true)
	p["podsDir"], p["statusDir"], p["agentFile"] = filepath.Join(n.dir, "pods"), filepath.Join(n.dir, "status"), n.agent
	moved, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.NetworkConfFromBytes(moved)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt := runtimeConf("c6", pod.Path())
	if _, err := n.cni.AddNetworkList(ctx, list, rt); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if err := n.cni.CheckNetworkList(ctx, list, rt); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	if err := n.cni.GetStatusNetworkList(ctx, list); err != nil {
		t.Fatalf("STATUS: %v", err)
	}
	if err := n.cni.DelNetworkList(ctx, list, rt); err != nil {
		t.Fatalf("DEL: %v", err)
	}
}

func mustJSON(t *testing.T, plugin map[string]any, name, version string) []byte {
	t.Helper()
	m := map[string]any{"name": name, "cniVersion": version}
	for k, v := range plugin {
		m[k] = v
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// hostileFile makes a regular file or a FIFO where a netns should be.
func hostileFile(t *testing.T, kind string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), kind)
	var err error
	if kind == "fifo" {
		err = syscall.Mkfifo(p, 0o600)
	} else {
		err = os.WriteFile(p, []byte("not a netns"), 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNodeNetNSRefused runs the plugin as a runtime does, in the node's
// namespace (here a namespace the test creates to play the node, never the
// machine's own), with CNI_NETNS naming that same namespace by two paths:
// refused at once with error 4, and no entry written.
func TestNodeNetNSRefused(t *testing.T) {
	nodeNS := newNetNS(t)
	n := newNode(t)
	for _, path := range []string{nodeNS.Path(), "/proc/thread-self/ns/net"} {
		var err error
		// The plugin is forked from this locked thread, so it starts in
		// the namespace playing the node.
		if nerr := nodeNS.Do(func(ns.NetNS) error {
			_, err = n.cni.AddNetworkList(context.Background(), n.list("1.0.0", nil), runtimeConf("c9", path))
			return nil
		}); nerr != nil {
			t.Fatal(nerr)
		}
		wantCode(t, err, types.ErrInvalidEnvironmentVariables, "is the node's own network namespace")
	}
	if files, err := os.ReadDir(filepath.Join(n.dir, "pods")); err == nil && len(files) > 0 {
		t.Errorf("refused ADDs wrote %d entries", len(files))
	}
}
