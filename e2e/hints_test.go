package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/internal/podkey"
)

// kubeletCapture holds files a real kubelet v1.37.2 wrote
// (desired/testdata/kubelet/README.md): static pods a, b, c admitted, then
// b and c deleted (the file still lists them), then d admitted.
const kubeletCapture = "../desired/testdata/kubelet"

// putKubeletFile installs a captured allocated_pods_state in dir as the
// kubelet does: a new file renamed over the old.
func putKubeletFile(t *testing.T, dir, stage string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(kubeletCapture, stage, "allocated_pods_state"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := podkey.WriteFileAtomic(filepath.Join(dir, "allocated_pods_state"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestKubeletHintsDeletedPods is issue #28 items 10 and 6 end to end: an
// agent run with --kubelet-root-dir (nodeFlags) over the real kubelet's files serves
// pods a, b, c; after b and c are deleted (CNI DEL) the file still lists
// them, and neither the agent nor the agent restarted grows the pool for
// them. `enid status` shows the hint counts, and a file in a format the
// agent does not know is shown there.
func TestKubeletHintsDeletedPods(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: "pool:\n  minIdle: 0\n  maxIdle: 10\n  batch: 1\n  releaseDelay: 1h\n  cooldown: 300ms\n",
		addTimeout: 20 * time.Second})
	kdir := n.kubeletDir()
	putKubeletFile(t, kdir, "1-admitted")
	ctx := context.Background()
	n.startAgent()
	n.waitReady(30 * time.Second)

	pods := n.podsWithUIDs(map[string]string{"a": "eea131a259ae0c927046366d7fcddf57",
		"b": "2885a1ad1a3a92f2368c2d501aad0180", "c": "1228b553593586e1e1e8d1dcb1a18225"})
	n.addAll(ctx, pods)
	held := func() (int, int) {
		enis := n.owned(n.sn.Sim.Dump())
		return ownedIPs(enis), len(enis)
	}
	waitFor(t, 10*time.Second, "3 addresses for 3 pods", func() (bool, string) {
		ips, enis := held()
		return ips == 3, fmt.Sprintf("%d addresses on %d ENIs", ips, enis)
	})
	// stays checks for a while that the pool holds exactly 3 addresses on 1 ENI.
	stays := func(when string) {
		t.Helper()
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if ips, enis := held(); ips != 3 || enis != 1 {
				t.Fatalf("%s: %d addresses on %d ENIs, want 3 on 1: deleted pods the kubelet still lists are no demand", when, ips, enis)
			}
		}
	}

	// b and c deleted; the kubelet leaves its file listing them.
	putKubeletFile(t, kdir, "2-deleted")
	n.delAll(ctx, pods[1:])
	stays("after deleting b and c")

	n.agent.stop(t)
	n.startAgent()
	n.waitReady(30 * time.Second)
	stays("after a restart")
	waitFor(t, 10*time.Second, "enid status shows the hints", func() (bool, string) {
		_, out, _ := n.enid(ctx, "status", "--run-dir", n.runDir)
		return strings.Contains(out, "Hints:     3 pods listed by the kubelet, 0 expected"), out
	})

	// The kubelet's format changes: the agent says so.
	if err := podkey.WriteFileAtomic(filepath.Join(kdir, "allocated_pods_state"), []byte(`{"data":"{\"podResources\":{}}","checksum":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "enid status shows the problem", func() (bool, string) {
		_, out, _ := n.enid(ctx, "status", "--run-dir", n.runDir)
		return strings.Contains(out, `PROBLEM (allocated_pods_state): `+filepath.Join(kdir, "allocated_pods_state")+`: unknown format: data has no "entries" map`), out
	})
	if got := strings.Count(readFile(t, n.agent.log), "hint file unusable"); got != 1 {
		t.Errorf("the problem was logged %d times, want once", got)
	}
	n.delAll(ctx, pods[:1])
}

// podsWithUIDs makes one pod sandbox per name, with the given pod UID (in
// name order).
func (n *node) podsWithUIDs(uids map[string]string) []*pod {
	n.t.Helper()
	var pods []*pod
	for _, name := range slices.Sorted(maps.Keys(uids)) {
		p := n.newPod(name)
		p.UID = uids[name]
		pods = append(pods, p)
	}
	return pods
}
