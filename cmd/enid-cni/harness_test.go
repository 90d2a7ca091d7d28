package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/roottest"
	"github.com/enidnet/enid/reconcile/status"
)

// pluginDir holds the enid-cni binary built once by TestMain.
var pluginDir string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "enid-cni-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	build := exec.Command(goBin, "build", "-o", filepath.Join(dir, "enid-cni"), ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // as shipped: static (docs/cni.md)
	out, err := build.CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build enid-cni: %v\n%s", err, out)
		return 1
	}
	pluginDir = dir
	return m.Run()
}

// node is one test's node: temp dirs for entries, statuses, the heartbeat
// and libcni's cache, a network list naming them, and libcni to drive the
// plugin binary as a runtime does.
type node struct {
	t        testing.TB
	dir      string
	entries  *desired.EntryStore
	statuses *status.Store
	agent    string
	cni      *libcni.CNIConfig
}

func newNode(t testing.TB) *node {
	t.Helper()
	dir := t.TempDir()
	n := &node{
		t:        t,
		dir:      dir,
		entries:  desired.NewEntryStore(filepath.Join(dir, "pods")),
		statuses: status.NewStore(filepath.Join(dir, "status")),
		agent:    filepath.Join(dir, "agent.json"),
		cni:      libcni.NewCNIConfigWithCacheDir([]string{pluginDir}, filepath.Join(dir, "cache"), nil),
	}
	return n
}

// list renders a network list for cniVersion with extra plugin keys; a
// 1.0.0 list also offers cniVersions 1.0.0 and 1.1.0, as the shipped one
// does (libcni then picks 1.1.0).
func (n *node) list(cniVersion string, extra map[string]any) *libcni.NetworkConfigList {
	n.t.Helper()
	var versions []string
	if cniVersion == "1.0.0" {
		versions = []string{"1.0.0", "1.1.0"}
	}
	return n.listOf(cniVersion, versions, extra)
}

// listOf renders a network list with an explicit cniVersions (nil: none).
func (n *node) listOf(cniVersion string, cniVersions []string, extra map[string]any) *libcni.NetworkConfigList {
	n.t.Helper()
	p := map[string]any{
		"type":         "enid-cni",
		"podsDir":      filepath.Join(n.dir, "pods"),
		"statusDir":    filepath.Join(n.dir, "status"),
		"agentFile":    n.agent,
		"timeout":      "5s",
		"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true, "bandwidth": true},
	}
	for k, v := range extra {
		if v == nil {
			delete(p, k)
		} else {
			p[k] = v
		}
	}
	l := map[string]any{"cniVersion": cniVersion, "name": "enid", "plugins": []any{p}}
	if cniVersions != nil {
		l["cniVersions"] = cniVersions
	}
	data, err := json.Marshal(l)
	if err != nil {
		n.t.Fatal(err)
	}
	conf, err := libcni.NetworkConfFromBytes(data)
	if err != nil {
		n.t.Fatal(err)
	}
	return conf
}

// heartbeat writes the agent heartbeat.
func (n *node) heartbeat(at time.Time, ready bool, reason string) {
	n.t.Helper()
	err := status.WriteAgent(n.agent, status.Agent{PID: 4242, Heartbeat: at, Ready: ready, Reason: reason,
		Pool: status.PoolSummary{Total: 10, Idle: 9, Used: 1}})
	if err != nil {
		n.t.Fatal(err)
	}
}

// killedAgent writes the heartbeat an agent killed a moment ago leaves:
// fresh and ready, naming the lock it held, which is free now.
func (n *node) killedAgent() {
	n.t.Helper()
	lock, release, err := status.LockAgent(n.agent)
	if err != nil {
		n.t.Fatal(err)
	}
	release()
	if err := status.WriteAgent(n.agent, status.Agent{PID: 4242, Lock: lock, Heartbeat: time.Now(), Ready: true}); err != nil {
		n.t.Fatal(err)
	}
}

// newNetNS creates a pod netns the test owns and removes.
func newNetNS(t testing.TB) ns.NetNS {
	t.Helper()
	roottest.Need(t)
	netns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netns.Close(); err != nil {
			t.Error(err)
		}
		if err := testutils.UnmountNS(netns); err != nil {
			t.Error(err)
		}
	})
	return netns
}

func runtimeConf(containerID, netns string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: containerID,
		NetNS:       netns,
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", "default"},
			{"K8S_POD_NAME", "web-" + containerID},
			{"K8S_POD_INFRA_CONTAINER_ID", containerID},
			{"K8S_POD_UID", "uid-" + containerID},
		},
		CapabilityArgs: map[string]any{
			"io.kubernetes.cri.pod-annotations": map[string]string{"enid.dev/sticky": "true"},
			"bandwidth":                         map[string]any{"ingressRate": 1000000, "ingressBurst": 2000000},
		},
	}
}

// answerFunc decides what the test agent publishes for an entry revision;
// nil publishes nothing.
type answerFunc func(e desired.Entry) *status.Attachment

// testAgent plays the agent's side of the file protocol: it watches the
// entry dir and publishes statuses through the status package, and removes
// the status of an entry that went away when teardown is set. It is owned by
// the test that starts it and ends at the test's cleanup.
type testAgent struct {
	n        *node
	answer   answerFunc
	teardown bool

	mu       sync.Mutex
	answered map[string]string // key -> revision answered
}

func (n *node) startAgent(answer answerFunc, teardown bool) *testAgent {
	a := &testAgent{n: n, answer: answer, teardown: teardown, answered: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { a.run(ctx) })
	n.t.Cleanup(func() { cancel(); wg.Wait() })
	return a
}

func (a *testAgent) run(ctx context.Context) {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		entries, _, err := a.n.entries.ReadAll()
		if err != nil {
			a.n.t.Errorf("test agent: %v", err)
			return
		}
		live := map[string]bool{}
		for _, e := range entries {
			k := desired.Key{ContainerID: e.ContainerID, IfName: e.IfName}.String()
			live[k] = true
			a.mu.Lock()
			done := a.answered[k] == e.Revision
			a.mu.Unlock()
			if done {
				continue
			}
			if st := a.answer(e); st != nil {
				if err := a.n.statuses.Write(*st); err != nil {
					a.n.t.Errorf("test agent: %v", err)
					return
				}
			}
			a.mu.Lock()
			a.answered[k] = e.Revision
			a.mu.Unlock()
		}
		if !a.teardown {
			continue
		}
		sts, _, err := a.n.statuses.ReadAll()
		if err != nil {
			a.n.t.Errorf("test agent: %v", err)
			return
		}
		for _, st := range sts {
			if !live[desired.Key{ContainerID: st.ContainerID, IfName: st.IfName}.String()] {
				if err := a.n.statuses.Remove(st.ContainerID, st.IfName); err != nil {
					a.n.t.Errorf("test agent: %v", err)
				}
			}
		}
	}
}

// readyIn answers Ready with ip (gateway gw) and, when setup is set,
// creates the interface in the pod's netns the way the agent would.
func readyIn(t testing.TB, ip, gw string, setup bool) answerFunc {
	return func(e desired.Entry) *status.Attachment {
		st := &status.Attachment{
			ContainerID: e.ContainerID, IfName: e.IfName, Revision: e.Revision, Phase: status.Ready,
			IPs:       []status.IPConfig{{Address: netip.MustParsePrefix(ip), Gateway: netip.MustParseAddr(gw)}},
			Interface: status.Interface{Name: e.IfName, Sandbox: e.NetNS},
			ENIID:     "eni-test", Updated: time.Now(),
		}
		if setup {
			mac, err := makeIface(e.NetNS, e.IfName, ip)
			if err != nil {
				t.Errorf("test agent: set up %s: %v", e.NetNS, err)
				return nil
			}
			st.Interface.MAC = mac
		}
		return st
	}
}

// makeIface creates an interface holding ip in the netns (the test
// agent's stand-in for a veth).
func makeIface(netnsPath, name, ip string) (string, error) {
	var mac string
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		// A veth pair with both ends in the pod netns: dummy links need a
		// module not every test kernel has.
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "-peer"}); err != nil {
			return err
		}
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		addr, err := netlink.ParseAddr(ip)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, addr); err != nil {
			return err
		}
		mac = l.Attrs().HardwareAddr.String()
		return netlink.LinkSetUp(l)
	})
	return mac, err
}

// delAddr removes ip from the interface in the netns.
func delAddr(t *testing.T, netnsPath, name, ip string) {
	t.Helper()
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		addr, err := netlink.ParseAddr(ip)
		if err != nil {
			return err
		}
		return netlink.AddrDel(l, addr)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func phaseAnswer(phase status.Phase, reason, code string) answerFunc {
	return func(e desired.Entry) *status.Attachment {
		return &status.Attachment{ContainerID: e.ContainerID, IfName: e.IfName, Revision: e.Revision,
			Phase: phase, Reason: reason, ReasonCode: code, Updated: time.Now()}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
